"""Loading a causal LM with its tokenizer and wrapping it with a LoRA adapter.

Any Hugging Face causal LM loads by hub id or local folder; `builtin:tiny` is a folder
in assets/ and goes through the same code path. The reference policy is the same
model with the adapter disabled (`reference_mode`), so no second copy of the weights
is ever held.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from engine.model.memory_estimate import wants_checkpointing  # the threshold lives with the estimate
from engine.model.activations import fuse_activations
from engine.model.config import ModelConfig
from engine.foundation.limits import context_problem
from engine.foundation.paths import model_path_problem

log = logging.getLogger(__name__)

# Attention and MLP projections by architecture (model_type in config.json). A model
# type not listed here falls back to every Linear layer but the output head.
LORA_TARGETS_BY_ARCH = {
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "gpt_neox": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
    "gptj": ["q_proj", "k_proj", "v_proj", "out_proj", "fc_in", "fc_out"],
    "opt": ["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"],
    "phi": ["q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2"],
    "falcon": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
    "bloom": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
}
_LLAMA_STYLE = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
for _arch in ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "gemma", "gemma2",
              "gemma3_text", "phi3", "smollm3", "olmo", "olmo2", "granite", "cohere"):
    LORA_TARGETS_BY_ARCH[_arch] = _LLAMA_STYLE

_NEVER_ADAPT = ("lm_head", "embed_out", "score", "wte", "wpe", "embed_tokens")


class ModelLoadError(RuntimeError):
    """The model or tokenizer could not be loaded; the message says what to change."""


@dataclass
class LoadedModel:
    model: nn.Module  # a peft PeftModel wrapping the causal LM
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    target_modules: list[str]
    context_length: int | None
    gradient_checkpointing: bool = False
    head: str = "causal_lm"  # HEADS: a reward-model run's is `score`
    decode: str = "auto"  # model.decode: how rollouts decode (engine/model/static_decode.py)

    @property
    def tokenizer_chat_template(self) -> str | None:
        return tokenizer_chat_template(self.tokenizer)

    @property
    def eos_token_ids(self) -> list[int]:
        return eos_token_ids(self.model, self.tokenizer)


def resolve_model_path(name_or_path: str) -> str:
    """`builtin:tiny` / `builtin:tiny-tools` -> the shipped folder; anything else is passed
    on unchanged (a hub id or a local folder, which transformers tells apart). A local path
    that is missing, a loop or not a model folder is refused here: transformers would take
    it for a hub id and answer with the hub's rules for ids."""
    from engine.builtin_model import BUILTIN_MODELS, builtin_model_folder, rebuild_command

    path = builtin_model_folder(name_or_path)
    if path is not None:
        if not (path / "config.json").exists():
            raise ModelLoadError(
                f"the built-in model {name_or_path} is missing from {path}; rebuild it with "
                f"`{rebuild_command(name_or_path)}`"
            )
        return str(path)
    if name_or_path.startswith("builtin:"):
        raise ModelLoadError(f"model.name_or_path: unknown built-in model {name_or_path!r}; the built-in ones are "
                             f"{', '.join(BUILTIN_MODELS)}")
    problem = model_path_problem(name_or_path)
    if problem is not None:
        raise ModelLoadError(problem)
    return name_or_path


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"model.device: {device!r} was asked for but CUDA is not available here; use `auto` or `cpu`")
    if device == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError("model.device: 'mps' was asked for but is not available here; use `auto` or `cpu`")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def find_lora_targets(model: nn.Module) -> list[str]:
    """Module names to adapt: the known projections of the architecture when they are
    present, else every Linear-like leaf but the embeddings and the output head."""
    leaf_names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    known = LORA_TARGETS_BY_ARCH.get(getattr(model.config, "model_type", ""), [])
    present = [name for name in known if name in leaf_names]
    if present:
        return present
    from transformers.pytorch_utils import Conv1D

    found = []
    for name, module in model.named_modules():
        short = name.rsplit(".", 1)[-1]
        if isinstance(module, (nn.Linear, Conv1D)) and short not in _NEVER_ADAPT and short not in found:
            found.append(short)
    if not found:
        raise ModelLoadError(
            "model.lora.target_modules: `auto` found no Linear layers to adapt in "
            f"{type(model).__name__}; list the module names explicitly"
        )
    return found


def uses_conv1d(model: nn.Module, targets: list[str]) -> bool:
    """GPT-2 style Conv1D layers store their weight transposed; peft must be told."""
    from transformers.pytorch_utils import Conv1D

    return any(isinstance(m, Conv1D) and name.rsplit(".", 1)[-1] in targets
               for name, m in model.named_modules())


def context_length(config) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_context_fits(tokenizer, prompts: list[str], max_completion_length: int, limit: int | None,
                       where=None, tools_tokens: int = 0) -> int:
    """Length in tokens of the longest prompt; ValueError when it plus
    max_completion_length does not fit the model's context `limit` (the message, from
    engine/foundation/limits.py, names the longest prompt by `where(its index)` when given,
    and the tools' descriptions when they take most of it: `tools_tokens`, with
    data.environment)."""
    # verbose=False: the tokenizer's own "longer than the maximum" warning says less than we do.
    lengths = [len(ids) for ids in tokenizer(prompts, add_special_tokens=False, verbose=False)["input_ids"]]
    problem = context_problem(lengths, max_completion_length, limit, where, tools_tokens)
    if problem is not None:
        raise ValueError(problem)
    return max(lengths)


def eos_token_ids(model, tokenizer) -> list[int]:
    ids = set()
    gen = getattr(model, "generation_config", None)
    for source in (getattr(gen, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, (list, tuple)):
            ids.update(int(i) for i in source)
    return sorted(ids)


def tokenizer_chat_template(tokenizer) -> str | None:
    """The tokenizer's chat template text, or None. Some tokenizers hold several named
    templates (a dict): the `default` one is the chat template."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template or None


class _NoLengthWarning(logging.Filter):
    """Drops transformers' "Token indices sequence length is longer than the specified
    maximum sequence length" warning: a stray line on stderr, said of any long text
    tokenized whole (a data set's row, a reward model's input), where the engine makes
    its own context check and says which prompt and what to change (check_context_fits)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Token indices sequence length is longer than")


def quiet_tokenizer_warnings() -> None:
    """Install :class:`_NoLengthWarning` on the logger transformers warns from (once;
    every tokenizer of the process, a reward model's too, warns through it)."""
    logger = logging.getLogger("transformers.tokenization_utils_base")
    if not any(isinstance(f, _NoLengthWarning) for f in logger.filters):
        logger.addFilter(_NoLengthWarning())


def load_tokenizer(path: str, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    quiet_tokenizer_warnings()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception as exc:  # transformers raises many kinds; all mean "cannot load"
        raise ModelLoadError(_load_hint(path, "tokenizer", exc)) from exc
    # Prompts are left-padded so every row's completion starts at the same column.
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        raise ModelLoadError(f"the tokenizer of {path} has no EOS token; completions could never end")
    return tokenizer


def _load_hint(path: str, what: str, exc: Exception) -> str:
    if "trust_remote_code" in str(exc):
        return (
            f"model.trust_remote_code: {path} needs the Python code it ships (a custom architecture or "
            f"{what}), and that code would run with your rights on this machine; it is refused unless the "
            "preset sets model.trust_remote_code: true. Set it only for a model whose code you have read or trust."
        )
    local = Path(path).expanduser()
    if local.exists():
        return f"model.name_or_path: could not load the {what} from folder {local}: {exc}"
    from engine.hub.access import download_hint, hub_offline

    where = ("this machine is offline (HF_HUB_OFFLINE), so it must be in the local Hugging Face cache and is not"
             if hub_offline() else "loading it from the Hugging Face hub failed")
    return (
        f"model.name_or_path: could not load the {what} {path!r}: it is not a local folder, and {where} "
        f"({type(exc).__name__}: {str(exc)[:300]}). Check the id; fetch it with {download_hint(path, 'model')}, "
        "or give the path of a folder that holds it."
    )


def enable_checkpointing(model: nn.Module) -> None:
    """Recompute each decoder layer in the backward pass (transformers' layers, non-
    reentrant torch.utils.checkpoint). Layers checkpoint only while their `training`
    flag is on: set_update_mode turns it on for updates, with dropout still off."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers 5's name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


@contextlib.contextmanager
def peft_reading_deprecated_alias():
    """Quiets the one FutureWarning peft (0.21) raises by reading transformers' deprecated
    `is_gradient_checkpointing` while it wraps a model: peft's call, not ours, and harmless
    (the alias returns `is_activation_checkpointing`). Any other warning still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def attention_implementation(device: torch.device, dtype: torch.dtype) -> str:
    """FlashAttention 2 on a CUDA GPU in half precision when the flash-attn package is
    installed, else PyTorch's scaled_dot_product_attention (which picks its own fused
    kernel, flash or memory-efficient, where it can)."""
    import importlib.util

    if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16) and importlib.util.find_spec("flash_attn"):
        return "flash_attention_2"
    return "sdpa"


def four_bit_config(cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> dict:
    """from_pretrained's arguments for QLoRA (model.load_in_4bit): NF4 weights with
    double quantisation, computing in the run's dtype; {} when not asked for. Refused
    with the reason on a CPU, or without bitsandbytes."""
    if not cfg.load_in_4bit:
        return {}
    if device.type != "cuda":
        raise ModelLoadError(f"model.load_in_4bit: 4-bit weights (bitsandbytes) need a CUDA GPU; this run is on "
                             f"{device.type}. Set load_in_4bit: false (on a CPU the weights are fp32)")
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModelLoadError("model.load_in_4bit: needs the bitsandbytes package, which is not installed: "
                             "`pip install bitsandbytes` (or set load_in_4bit: false)")
    from transformers import BitsAndBytesConfig

    compute = dtype if dtype != torch.float32 else torch.bfloat16
    return {"quantization_config": BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute), "device_map": {"": device.index or 0}}


# What a run trains on top of the base model: a causal LM (every algorithm but one), or
# (`score`, reward-model runs) the base with a one-output score head, read at a text's
# last token, that is trained and saved with the adapter (peft's modules_to_save).
HEADS = {"causal_lm": ("AutoModelForCausalLM", "CAUSAL_LM"),
         "score": ("AutoModelForSequenceClassification", "SEQ_CLS")}


def merge_adapters(base: nn.Module, adapters: list[Path]) -> nn.Module:
    """`base` with each adapter folder merged into its weights in turn, oldest first
    (model.start_from: the model an earlier run ended with). A score head an adapter
    holds (a reward-model run's) is kept with the merged model."""
    from peft import PeftConfig, PeftModel

    for folder in adapters:
        if not (Path(folder) / "adapter_config.json").is_file():
            raise ModelLoadError(f"model.start_from: {folder} holds no adapter (adapter_config.json); give a "
                                 "checkpoint folder a run wrote")
        config = PeftConfig.from_pretrained(str(folder))
        # No task wrapper: an SFT run's (causal LM) adapter merges into a reward model's
        # score model too; merging needs only the adapted layers.
        config.task_type = None
        with peft_reading_deprecated_alias():
            base = PeftModel.from_pretrained(base, str(folder), config=config).merge_and_unload()
    return base


@contextlib.contextmanager
def new_head_quiet(quiet: bool):
    """transformers' load report off while a score head is created (`quiet`): it warns
    that `score.weight` is "newly initialized", which is what a reward-model run wants, and
    (for a model whose tensor-parallel plan is empty) that no layer was sharded."""
    loggers = [logging.getLogger(f"transformers.{name}") for name in ("modeling_utils", "distributed.tensor_parallel")]
    levels = [logger.level for logger in loggers]
    if quiet:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        if quiet:
            log.info("a new one-output score head: the reward-model run trains it with the adapter")


def load_base_model(path: str, cfg: ModelConfig, device: torch.device, dtype: torch.dtype, head: str = "causal_lm",
                    pad_token_id: int | None = None, quantization: dict | None = None) -> nn.Module:
    """The base model of `path` with `head`, on `device` in `dtype`, with model.start_from's
    adapters merged in (engine/foundation/run_files.py's chain)."""
    import transformers

    auto_class = getattr(transformers, HEADS[head][0])
    extra = {"num_labels": 1, "pad_token_id": pad_token_id} if head == "score" else {}
    try:
        with new_head_quiet(head == "score"):
            base = auto_class.from_pretrained(path, dtype=dtype, trust_remote_code=cfg.trust_remote_code,
                                              attn_implementation=attention_implementation(device, dtype),
                                              **extra, **(quantization or {}))
    except Exception as exc:
        raise ModelLoadError(_load_hint(path, "model", exc)) from exc
    if not quantization:  # a 4-bit model is placed on its GPU as it loads
        base.to(device)
    if cfg.start_from is not None:
        from engine.foundation.run_files import adapter_chain

        base = merge_adapters(base, adapter_chain(cfg.start_from))
    return base


def load_model(cfg: ModelConfig, gradient_checkpointing="auto", head: str = "causal_lm") -> LoadedModel:
    """Load tokenizer, base model and a fresh LoRA adapter as the preset says
    (`gradient_checkpointing`: training.gradient_checkpointing; `head`: HEADS)."""
    from peft import LoraConfig, get_peft_model

    path = resolve_model_path(cfg.name_or_path)
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    quantization = four_bit_config(cfg, device, dtype)
    tokenizer = load_tokenizer(path, cfg.trust_remote_code)
    base = load_base_model(path, cfg, device, dtype, head, tokenizer.pad_token_id, quantization)
    fuse_activations(base)  # gelu_new -> its one-kernel equivalent (engine/model/activations.py)
    checkpointing = wants_checkpointing(gradient_checkpointing, sum(p.numel() for p in base.parameters()))
    if checkpointing:
        enable_checkpointing(base)
    generation = getattr(base, "generation_config", None)  # a score model has none
    if generation is not None and generation.pad_token_id is None:
        generation.pad_token_id = tokenizer.pad_token_id

    targets = find_lora_targets(base) if cfg.lora.target_modules == "auto" else list(cfg.lora.target_modules)
    lora = LoraConfig(
        r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
        target_modules=targets, task_type=HEADS[head][1], fan_in_fan_out=uses_conv1d(base, targets),
        # the score head is trained whole and saved with the adapter, so a reloaded reward model scores as trained
        modules_to_save=["score"] if head == "score" else None,
    )
    try:
        with peft_reading_deprecated_alias():
            model = get_peft_model(base, lora)
    except ValueError as exc:
        raise ModelLoadError(f"model.lora.target_modules: {exc}") from exc
    log.info("loaded %s on %s (%s); LoRA targets %s", path, device, dtype, targets)
    return LoadedModel(model, tokenizer, device, dtype, targets, context_length(base.config), checkpointing, head,
                       cfg.decode)


@contextlib.contextmanager
def reference_mode(model):
    """The reference policy: the same weights with the LoRA adapter switched off.

    What peft's `disable_adapter()` does (each adapter layer's `enable_adapters(False)`,
    and back), without the model-wide status report it computes first, which costs more
    than a small model's whole forward pass (3.5 ms on the built-in model, each way)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    config = getattr(model, "active_peft_config", None)
    if not layers or getattr(config, "modules_to_save", None):  # other wrappers: peft's own way
        with model.disable_adapter():
            yield model
        return
    enabled = [not layer.disable_adapters for layer in layers]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield model
    finally:
        for layer, on in zip(layers, enabled):
            if on:
                layer.enable_adapters(True)


def parameter_counts(model: nn.Module) -> dict[str, int]:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"total": total, "trainable": trainable}


def quiet_progress_bars() -> None:
    """--quiet: the hub libraries' progress bars off in this process: transformers'
    ("Loading weights", "Writing model shards") and with them huggingface_hub's
    (downloads). `datasets`' own bars are off whenever a data set is opened
    (engine.data.hf_datasets). Imports transformers' logging module, and with it
    huggingface_hub: call it after engine.hub.access.go_offline_if_unreachable."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # huggingface_hub.utils.disable_progress_bars() too
