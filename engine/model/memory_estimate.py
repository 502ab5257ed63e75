"""How much memory a preset needs: "needs about X GiB; this GPU has Y".

Torch-free (stdlib only): the workbench's set-up form imports it, and it works from the
model's config.json, so nothing is loaded. The two phases of a step do not overlap:
sampling holds the weights, the adapter's optimizer and the KV cache of a rollout
batch; the update holds the weights, the optimizer and the activations kept for the
backward pass of one micro-batch. The peak is the larger of the two, plus a margin.

The activation count per token and layer follows Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models" (arXiv:2205.05198, section 4.1:
34 s b h + 5 a s^2 b bytes a layer at 16 bit), adapted to how this engine runs:
SDPA keeps no (seq x seq) attention scores, no dropout masks (dropout is off), the
base weights are frozen (a frozen Linear keeps no input; the LoRA branch beside it
keeps it instead), and the MLP is SwiGLU (Llama, Qwen) or GPT-2's tanh GELU, which
autograd sees as several element-wise ops, each keeping its input. The constants were
calibrated against measured peaks (bench/memory_check.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

GIB = 1 << 30
MIB = 1 << 20
# The engine turns (tokens x vocab) logits into log-probabilities at most this many
# fp32 elements at a time (engine/model/token_logits.py reads it from here): 256 MiB a chunk,
# 441 tokens of a 151,936 vocabulary, the whole batch of the built-in model.
LOGIT_CHUNK_ELEMENTS = 1 << 26
# The chunk, its exp/softmax temporary and its gradient.
LOGIT_COPIES = 3
# Sampling: the step's fp32 logits, log-softmax, filtered copy and probabilities.
SAMPLING_LOGIT_COPIES = 4
ADAM_BYTES_PER_PARAMETER = 16  # fp32 weight, gradient, exp_avg, exp_avg_sq
NF4_BYTES = 0.5 + 4 / 64  # 4 bits plus an fp32 absmax per block of 64 (bitsandbytes NF4)
# `training.gradient_checkpointing: auto` turns it on from this many parameters. Below,
# a LoRA run's memory is mostly weights and the rollout's KV cache (a 0.5B model's update
# activations at micro-batch 8 x 768 tokens are a few GiB in bf16, which a 24 GB card
# holds beside the weights); from about 1B on they outgrow the weights at any useful
# micro-batch, and recomputing them (about a third more update time) costs less than
# halving the micro-batch (twice the passes).
CHECKPOINTING_AUTO_PARAMETERS = 10**9
MARGIN_FRACTION = 0.10  # allocator rounding and fragmentation, small tensors not modelled
CUDA_CONTEXT_BYTES = 512 * MIB  # CUDA context, cuBLAS workspace: outside torch's tensors
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

GPT2_TARGETS = ("c_attn", "c_proj", "c_fc")


def wants_checkpointing(setting, parameters: int) -> bool:
    """training.gradient_checkpointing resolved: `auto` is on from 1B parameters.

    >>> wants_checkpointing("auto", 494_000_000), wants_checkpointing("auto", 1_540_000_000), wants_checkpointing(True, 10)
    (False, True, True)
    """
    return parameters >= CHECKPOINTING_AUTO_PARAMETERS if setting == "auto" else bool(setting)


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a decoder-only model's config.json."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    gpt2: bool  # GPT-2 names and block (Conv1D c_attn, tanh GELU, learned positions)
    positions: int = 0

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim


def model_shape(config: dict) -> ModelShape:
    """The shape from a config.json dict: GPT-2 names (n_embd, n_layer, n_head, n_inner)
    or Llama/Qwen ones; a multimodal config's `text_config` when it has one.

    >>> s = model_shape({"model_type": "gpt2", "n_embd": 128, "n_layer": 4, "n_head": 4, "vocab_size": 101})
    >>> (s.hidden, s.intermediate, s.kv_dim, s.gpt2)
    (128, 512, 128, True)
    """
    c = config.get("text_config") or config
    hidden = c.get("hidden_size") or c.get("n_embd") or c.get("d_model")
    layers = c.get("num_hidden_layers") or c.get("n_layer")
    heads = c.get("num_attention_heads") or c.get("n_head")
    vocab = c.get("vocab_size")
    if not all(isinstance(v, int) and v > 0 for v in (hidden, layers, heads, vocab)):
        raise ValueError("config.json lacks hidden_size, num_hidden_layers, num_attention_heads or vocab_size")
    gpt2 = (c.get("model_type") or config.get("model_type")) == "gpt2" or "n_embd" in c
    head_dim = c.get("head_dim") or hidden // heads
    return ModelShape(
        hidden=hidden, layers=layers, heads=heads, kv_heads=c.get("num_key_value_heads") or heads,
        head_dim=head_dim, intermediate=c.get("intermediate_size") or c.get("n_inner") or 4 * hidden,
        vocab=vocab, tied=bool(c.get("tie_word_embeddings", config.get("tie_word_embeddings", gpt2))),
        gpt2=gpt2, positions=(c.get("n_positions") or 0) if gpt2 else 0)


def linear_shapes(s: ModelShape) -> dict[str, list[tuple[int, int]]]:
    """(in, out) of each projection of one layer, by module name (one name can be several
    layers: GPT-2's c_proj is the attention's output and the MLP's down projection)."""
    if s.gpt2:
        return {"c_attn": [(s.hidden, 3 * s.hidden)],
                "c_proj": [(s.hidden, s.hidden), (s.intermediate, s.hidden)],
                "c_fc": [(s.hidden, s.intermediate)]}
    return {"q_proj": [(s.hidden, s.q_dim)], "k_proj": [(s.hidden, s.kv_dim)], "v_proj": [(s.hidden, s.kv_dim)],
            "o_proj": [(s.q_dim, s.hidden)], "gate_proj": [(s.hidden, s.intermediate)],
            "up_proj": [(s.hidden, s.intermediate)], "down_proj": [(s.intermediate, s.hidden)]}


def count_parameters(s: ModelShape) -> int:
    """All weights (biases and norms neglected: about 1 % of the built-in model, less for larger ones).

    >>> count_parameters(model_shape({"n_embd": 128, "n_layer": 4, "n_head": 4, "vocab_size": 101, "n_positions": 128}))
    815744
    """
    per_layer = sum(i * o for shapes in linear_shapes(s).values() for i, o in shapes)
    embeddings = s.vocab * s.hidden * (1 if s.tied else 2) + s.positions * s.hidden
    return s.layers * per_layer + embeddings


def lora_parameters(s: ModelShape, r: int, targets="auto") -> int:
    """r * (in + out) for each adapted projection of every layer. `auto` adapts every
    attention and MLP projection (engine.model.loading.LORA_TARGETS_BY_ARCH); names the
    shape does not know count nothing.

    >>> lora_parameters(model_shape({"n_embd": 8, "n_layer": 2, "n_head": 2, "vocab_size": 10}), r=2)
    512
    """
    shapes = linear_shapes(s)
    names = shapes if targets == "auto" else [t for t in targets if t in shapes]
    return s.layers * sum(r * (i + o) for name in names for i, o in shapes[name])


def weight_bytes(parameters: int, dtype_bytes: int, load_in_4bit: bool = False, embedding_parameters: int = 0) -> int:
    """The base weights; in 4 bit (QLoRA) every projection is NF4 and the embeddings and
    the output head stay 16-bit.

    >>> weight_bytes(1000, 2), weight_bytes(1000, 4), weight_bytes(1000, 2, True, 200)
    (2000, 4000, 850)
    """
    if not load_in_4bit:
        return parameters * dtype_bytes
    return round((parameters - embedding_parameters) * NF4_BYTES + embedding_parameters * 2)


def saved_per_token(s: ModelShape, r: int) -> float:
    """Activation elements one layer keeps for the backward pass, per token.

    Attention, about 7 h: the input of each norm and its output (which the LoRA A of the
    next projections keeps), q, k, v and the output that SDPA keeps, the merged heads
    that o_proj's LoRA keeps. MLP: SwiGLU keeps gate, up, silu(gate) and their product
    (4 I); GPT-2's GELU, one fused kernel since engine/model/activations.py swaps
    `gelu_new` for it, keeps its input and c_proj's LoRA its output (2 I; transformers'
    eight-op `gelu_new` kept about 5 I). And r for each LoRA A output. Counted in the
    model's dtype; a 16-bit model keeps fp32 copies besides (fp32_copies_per_token).
    """
    if s.gpt2:
        return 7 * s.hidden + 2 * s.intermediate + 4 * r
    return 5 * s.hidden + 2 * s.kv_dim + 4 * s.intermediate + 7 * r


def fp32_copies_per_token(s: ModelShape, targets="auto") -> int:
    """fp32 elements one layer of a 16-bit (bf16, fp16) model keeps per token beside
    saved_per_token's: peft casts the input of each adapted projection to the adapter's
    fp32 before its LoRA A, a copy per projection even where projections share their
    input. Measured on a CPU in bf16 (bench/memory_check.py --qwen2 --set
    model.dtype=bfloat16): without them the estimate was 0.65 of the peak, with them 1.12
    (GRPO) and 1.08 (PPO), as in fp32; on an H100 it was 0.72 without them at
    Qwen2.5-0.5B's shape (docs/gpu.md).

    >>> fp32_copies_per_token(model_shape({"hidden_size": 8, "intermediate_size": 32, "num_hidden_layers": 1,
    ...                                    "num_attention_heads": 2, "vocab_size": 10}))
    80
    """
    shapes = linear_shapes(s)
    names = shapes if targets == "auto" else [t for t in targets if t in shapes]
    return sum(i for name in names for i, _ in shapes[name])


def activation_bytes(s: ModelShape, *, rows: int, prompts: int, prompt_len: int, completion_len: int,
                     dtype_bytes: int, lora_r: int, checkpointing: bool, lora_targets="auto") -> int:
    """Activations kept for the backward pass of one micro-batch of `rows` rows.

    Each distinct prompt is run once (engine.model.forward's shared prefix) and its keys and
    values copied to its rows, which the completion pass's attention keeps (2 kv per
    row and position). With gradient checkpointing every row runs in full (checkpointed
    layers keep no KV cache to share) and only each layer's input (h per token) is kept,
    plus one layer's full activations while it is recomputed.
    """
    if checkpointing:
        prompts = rows  # engine.model.forward: the plain pass, each row its own prompt
    tokens = prompts * prompt_len + rows * completion_len
    shared_kv = 2 * s.kv_dim * rows * (prompt_len + completion_len) if prompts < rows else 0
    one_layer = (tokens * saved_per_token(s, lora_r) + shared_kv) * dtype_bytes
    if dtype_bytes < 4:
        one_layer += tokens * fp32_copies_per_token(s, lora_targets) * 4
    if checkpointing:
        return int(s.layers * tokens * s.hidden * dtype_bytes + 2 * one_layer)
    return int(s.layers * one_layer)


def logits_bytes(tokens: int, vocab: int) -> int:
    """The working set of the log-probabilities: chunks of at most LOGIT_CHUNK_ELEMENTS."""
    return min(tokens * vocab, LOGIT_CHUNK_ELEMENTS) * 4 * LOGIT_COPIES


def kv_cache_bytes(s: ModelShape, rows: int, length: int, dtype_bytes: int) -> int:
    """Keys and values of every layer for `rows` sequences of `length` positions."""
    return 2 * s.layers * s.kv_dim * rows * length * dtype_bytes


@dataclass(frozen=True)
class MemoryEstimate:
    """The parts, in bytes. The rollout and the update phases do not overlap."""

    weights: int
    optimizer: int  # LoRA adapter: fp32 weights, gradients, AdamW states
    value_head: int  # a critic's head (PPO's), the same four fp32 copies
    activations: int  # kept for the backward pass of one micro-batch, as the preset runs
    activations_without_checkpointing: int
    activations_with_checkpointing: int
    logits: int
    sampling_cache: int  # KV cache of a rollout batch
    sampling_logits: int  # one sampling step's logits, and the prompt pass's largest layer
    margin: int
    gradient_checkpointing: bool
    device: str

    @property
    def rollout(self) -> int:
        return self.weights + self.optimizer + self.value_head + self.sampling_cache + self.sampling_logits

    @property
    def update(self) -> int:
        return self.weights + self.optimizer + self.value_head + self.activations + self.logits

    @property
    def peak_phase(self) -> str:
        return "rollout" if self.rollout > self.update else "update"

    @property
    def total(self) -> int:
        return max(self.rollout, self.update) + self.margin

    def amount(self) -> str:
        """The total, rounded: '5.8 GiB', '85 MiB'."""
        return _size(self.total, self.total)

    def breakdown(self) -> str:
        """The peak phase's parts: 'update: weights 0.9, optimizer 0.1, activations 4.2, ...'."""
        if self.peak_phase == "update":
            parts = [("weights", self.weights), ("optimizer", self.optimizer + self.value_head),
                     ("activations", self.activations), ("logits", self.logits)]
        else:
            parts = [("weights", self.weights), ("optimizer", self.optimizer + self.value_head),
                     ("KV cache", self.sampling_cache), ("sampling logits", self.sampling_logits)]
        shown = ", ".join(f"{label} {_size(n, self.total, unit=False)}" for label, n in parts + [(
            "margin and CUDA context" if self.device == "cuda" else "margin", self.margin)])
        ckpt = "with" if self.gradient_checkpointing else "without"
        return f"{self.peak_phase}: {shown}; {ckpt} gradient checkpointing"

    def describe(self) -> str:
        """'needs about 5.8 GiB (update: weights 0.9, optimizer 0.1, activations 4.2, ...)'."""
        return f"needs about {self.amount()} ({self.breakdown()})"

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {
            "total": self.total, "peak_phase": self.peak_phase}


def _size(n: int, total: int, unit: bool = True) -> str:
    """n in GiB, or in MiB when the total is under a GiB; one decimal below 10.

    >>> _size(3 * GIB // 2, 6 * GIB), _size(85 * MIB, 85 * MIB), _size(MIB // 2, 85 * MIB, unit=False)
    ('1.5 GiB', '85 MiB', '0.5')
    """
    scale, name = (GIB, "GiB") if total >= GIB else (MIB, "MiB")
    text = f"{n / scale:.1f}" if n / scale < 10 else f"{n / scale:.0f}"
    return f"{text} {name}" if unit else text


def dtype_bytes(dtype: str, device: str) -> int:
    """Bytes per weight and activation: `auto` is bf16 on CUDA, fp32 elsewhere."""
    if dtype == "auto":
        return 2 if device == "cuda" else 4
    return DTYPE_BYTES[dtype]


def update_rows(preset, processes: int = 1) -> tuple[int, int]:
    """(rows, distinct prompts) of one update micro-batch on one process. The algorithm
    declares its update pass (`update_batch`, engine/algorithms/config_base.py): units kept
    whole on one process (GRPO's groups, PPO's mini-batch rows, DPO's pairs of two rows),
    each after one prompt. micro_batch_size null or `auto` (its first try) is the
    process's whole share; a number counts rows, or units where the algorithm says so
    (DPO's pairs). With several processes each runs its share (World.share; the largest
    share is counted).

    >>> from engine.preset.schema import preset_from_dict
    >>> update_rows(preset_from_dict({"training": {"batch_size": 64}}), processes=3)  # 8 groups of 8: 3, 3, 2
    (24, 3)
    """
    train = preset.training
    batch = preset.algorithm.update_batch(train)
    micro = train.micro_batch_size if isinstance(train.micro_batch_size, int) else None
    share = math.ceil(batch.units / processes) * batch.rows
    size = min(micro * batch.micro_rows if micro else share, share)
    return size, math.ceil(size / batch.rows)


def sharded_weight_bytes(weights: int, embeddings: int, layers: int, processes: int) -> int:
    """The base weights one process holds under FSDP2 (engine/distributed/sharding.py):
    the embeddings and head whole, each decoder layer's 1/N, and two layers gathered at
    a time (the one running and the one prefetched).

    >>> sharded_weight_bytes(weights=1100, embeddings=100, layers=10, processes=4)  # 100 + 250 + 2 x 100
    550
    """
    per_layer = (weights - embeddings) // layers
    return embeddings + math.ceil((weights - embeddings) / processes) + 2 * per_layer


def estimate_memory(preset, config: dict, *, parameters: int | None = None, prompt_tokens: int,
                    device: str = "cuda", processes: int = 1) -> MemoryEstimate:
    """The memory a preset's run needs on `device` ("cuda" or "cpu"), from the model's
    config.json, its parameter count when known, and the longest prompt in tokens. With
    several `processes` (--nproc-per-node), what each one needs: its share of the
    update's rows, and with training.fsdp its shard of the decoder layers."""
    s = model_shape(config)
    parameters = parameters or count_parameters(s)
    model, train, algo = preset.model, preset.training, preset.algorithm
    nbytes = dtype_bytes(model.dtype, device)
    four_bit = model.load_in_4bit and device == "cuda"
    embeddings = s.vocab * s.hidden * (1 if s.tied else 2)
    weights = weight_bytes(parameters, nbytes, four_bit, embeddings)
    optimizer = lora_parameters(s, model.lora.r, model.lora.target_modules) * ADAM_BYTES_PER_PARAMETER
    if train.fsdp and processes > 1:  # the adapter lives in the sharded layers too
        weights = sharded_weight_bytes(weights, embeddings * nbytes, s.layers, processes)
        optimizer = math.ceil(optimizer / processes)
    value_head = (s.hidden + 1) * ADAM_BYTES_PER_PARAMETER if algo.trains_value_head else 0

    T = algo.max_completion_length
    rows, prompts = update_rows(preset, processes)
    common = dict(rows=rows, prompts=prompts, prompt_len=prompt_tokens, completion_len=T,
                  dtype_bytes=nbytes, lora_r=model.lora.r, lora_targets=model.lora.target_modules)
    without = activation_bytes(s, **common, checkpointing=False)
    with_ = activation_bytes(s, **common, checkpointing=True)
    checkpointing = wants_checkpointing(train.gradient_checkpointing, parameters)

    # Sampling: a training rollout (batch_size rows) or a greedy evaluation batch
    # (max(batch_size, 32) prompts, each its own), whichever is larger. Evaluation is
    # not shared between processes, so this does not shrink with several.
    sample_rows = max(train.batch_size, 32)
    cache = kv_cache_bytes(s, sample_rows, prompt_tokens + T, nbytes)
    prompt_pass = sample_rows * prompt_tokens * max(3 * s.hidden, 2 * s.intermediate) * nbytes
    sampling_logits = sample_rows * s.vocab * 4 * SAMPLING_LOGIT_COPIES + prompt_pass

    parts = dict(weights=weights, optimizer=optimizer, value_head=value_head,
                 activations=with_ if checkpointing else without,
                 activations_without_checkpointing=without, activations_with_checkpointing=with_,
                 logits=logits_bytes(rows * T, s.vocab), sampling_cache=cache, sampling_logits=sampling_logits)
    shared = weights + optimizer + value_head
    peak = shared + max(parts["activations"] + parts["logits"], cache + sampling_logits)
    margin = int(peak * MARGIN_FRACTION) + (CUDA_CONTEXT_BYTES if device == "cuda" else 0)
    return MemoryEstimate(**parts, margin=margin, gradient_checkpointing=bool(checkpointing), device=device)


def estimate_for_folder(preset, folder, *, prompt_tokens: int, device: str = "cuda",
                        processes: int = 1) -> MemoryEstimate:
    """The estimate for a model folder on disk (config.json, and the parameter count
    from its safetensors headers when it has them). ValueError when config.json cannot
    be read."""
    import json
    from pathlib import Path

    from engine.hub.cache import describe_model  # torch-free; imported here to keep this module stdlib-only

    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {folder / 'config.json'}: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{folder / 'config.json'} does not hold a JSON object")
    parameters = describe_model(folder.name, 0, folder).parameters
    return estimate_memory(preset, config, parameters=parameters, prompt_tokens=prompt_tokens, device=device,
                           processes=processes)
