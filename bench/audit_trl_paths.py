"""TRL's own code paths, driven without a model, for bench/audit_vs_trl.py.

Each trainer here is a TRL trainer instance made with ``object.__new__`` (no ``__init__``:
no model, no data set, no accelerate state) carrying only the attributes its loss method
reads; the audit then calls TRL's method itself (``GRPOTrainer._compute_loss``,
``DPOTrainer._compute_loss``, ``KTOTrainer._compute_loss``, ``OnlineDPOTrainer.training_step``).
An attribute TRL reads that is not set raises AttributeError: a TRL version whose loss reads
something new fails loudly instead of running on a default.

Where TRL computes something inline inside a large method (GRPO's and RLOO's reward
normalisation inside ``_generate_and_score_completions``; TRL 1.12's PPO loss inside
``PPOTrainer.train``), the block is cut out of TRL's source between two marker lines at run
time and executed in the TRL module's own globals: TRL's text, not a re-typed copy. A marker
that is not found raises, naming it.

The model stand-in, :class:`IdentityHeadLM`, returns given last hidden states and has an
identity output head (hidden size = vocabulary), so its hidden states *are* the logits: TRL's
fused LM head (``trl.trainer.utils.add_fused_lm_head``) and our ``TokenLogits`` both run on it,
and the gradient with respect to the hidden states is the gradient with respect to the logits.
"""

from __future__ import annotations

import ast
import contextlib
import glob
import inspect
import subprocess
import sys
import textwrap
import types
import zipfile
from collections import defaultdict
from pathlib import Path

import torch

NS = types.SimpleNamespace


class Accelerator:
    """One process on the CPU: gathers and reductions are the identity."""

    num_processes, process_index, sync_gradients, is_main_process = 1, 0, True, True
    device = torch.device("cpu")

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x

    def autocast(self):
        return contextlib.nullcontext()

    def unwrap_model(self, model):
        return model

    def backward(self, loss, **kwargs):
        loss.backward()


def metrics_dict():
    return {"train": defaultdict(list), "eval": defaultdict(list)}


class IdentityHeadLM(torch.nn.Module):
    """A causal LM stand-in: for each registered input_ids tensor, `hidden` (b, L, V) are its
    last hidden states; the output head is the identity (frozen), so logits = hidden.

    e.g. lm.route(ids, hidden) then TRL's fused head returns log_softmax(hidden[:, :-1]) at
    the labels, and our TokenLogits(hidden[:, P-1:-1], output_head(lm), V) the same."""

    def __init__(self, vocab: int, dtype=torch.float64):
        super().__init__()
        self.config = NS(model_type="audit")
        self.config.get_text_config = lambda: self.config
        self.head = torch.nn.Linear(vocab, vocab, bias=False, dtype=dtype)
        with torch.no_grad():
            self.head.weight.copy_(torch.eye(vocab, dtype=dtype))
        self.head.weight.requires_grad_(False)
        self.routes: list[tuple[torch.Tensor, torch.Tensor]] = []

    def route(self, input_ids, hidden):
        self.routes.append((input_ids, hidden))

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        return NS(logits=self._hidden(input_ids))  # the unfused path (online DPO's _forward)

    def base_model(self, input_ids=None, attention_mask=None, **kwargs):
        return NS(last_hidden_state=self._hidden(input_ids))

    def _hidden(self, input_ids):
        for ids, hidden in self.routes:
            if ids.shape == input_ids.shape and torch.equal(ids, input_ids):
                return hidden
        raise KeyError("IdentityHeadLM: input_ids not registered with route()")


def fused(lm: IdentityHeadLM, outputs=("log_probs", "entropy")) -> IdentityHeadLM:
    """`lm` with TRL's own fused LM head patched on, as TRL's trainers patch their model."""
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(lm, temperature=1.0, outputs=outputs)
    return lm


def logprob_model(routes, extra=("entropy", "mean_logits")):
    """A model stand-in for the fused-head call `model(..., labels, fused_lm_head=True)` that
    returns given per-token logprobs (the tensor the audit differentiates), chosen by input_ids."""

    def call(input_ids=None, attention_mask=None, labels=None, fused_lm_head=False, **kwargs):
        for ids, logps in routes:
            if torch.equal(ids, input_ids):
                zeros = torch.zeros_like(logps).detach()
                return NS(log_probs=logps, is_top1=zeros.bool(), **{k: zeros for k in extra})
        raise KeyError("logprob_model: input_ids not routed")

    return call


# ------------------------------------------------------------------ blocks of TRL source


def source_block(source: str, first: str, last: str, *, last_exact: bool = False) -> str:
    """The lines of `source` from the first containing `first` to the next containing `last`
    (or equal to it, stripped, with last_exact), dedented.

    e.g. source_block(src, "unscorable_mask = ", "advantages = torch.nan_to_num(")"""
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if first in line), None)
    if start is None:
        raise LookupError(f"TRL source: marker {first!r} not found (has TRL's code moved?)")
    hit = (lambda line: line.strip() == last) if last_exact else (lambda line: last in line)
    end = next((i for i in range(start, len(lines)) if hit(lines[i])), None)
    if end is None:
        raise LookupError(f"TRL source: end marker {last!r} not found after {first!r}")
    return textwrap.dedent("\n".join(lines[start:end + 1]))


def run_block(code: str, module_globals: dict, **names) -> dict:
    """Execute a block of TRL source in (a copy of) its module's globals plus `names`."""
    scope = dict(module_globals)
    scope.update(names)
    exec(compile(code, "<trl block>", "exec"), scope)
    return scope


# --------------------------------------------------------------------------------- GRPO


def grpo_trainer(*, loss_type, beta=0.0, epsilon_low=0.2, epsilon_high=0.28, importance_sampling_level="token",
                 max_completion_length=16, grad_accum=1, use_bias_correction_kl=False,
                 sapo_temperature_pos=1.0, sapo_temperature_neg=1.05, delta=None, model=None):
    """A GRPOTrainer whose `_compute_loss` runs: the attributes it reads, set as TRL's
    __init__ sets them from a GRPOConfig (steps_per_generation = grad_accum, TRL's default)."""
    from trl import GRPOTrainer

    t = object.__new__(GRPOTrainer)
    t.loss_type, t.beta, t.epsilon_low, t.epsilon_high = loss_type, beta, epsilon_low, epsilon_high
    t.importance_sampling_level, t.max_completion_length = importance_sampling_level, max_completion_length
    t.top_entropy_quantile, t.aux_loss_enabled, t.off_policy_mask_threshold = 1.0, False, None
    t.use_vllm, t.vllm_importance_sampling_correction, t._entropy_bonus_enabled = False, False, False
    t.current_gradient_accumulation_steps = grad_accum
    t.args = NS(use_bias_correction_kl=use_bias_correction_kl, delta=delta, steps_per_generation=grad_accum,
                sapo_temperature_pos=sapo_temperature_pos, sapo_temperature_neg=sapo_temperature_neg)
    t.accelerator, t._metrics = Accelerator(), metrics_dict()
    t.model = model if model is not None else NS(training=True)
    return t


@contextlib.contextmanager
def default_dtype(dtype):
    """torch's default dtype for a while: the tensors TRL makes from Python scalars (sapo's
    temperatures, `torch.where(A > 0, 1.0, 1.05)`) take it."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def grpo_compute_loss(trainer, inputs, *, logprobs=None, lm=None, dtype=torch.float64):
    """TRL's GRPOTrainer._compute_loss, under torch default dtype `dtype`. Per-token logprobs:
    `logprobs` patched in for TRL's `_get_per_token_logps_and_entropies`, or (lm given) that
    method itself on the fused head."""
    with default_dtype(dtype):
        if logprobs is not None:
            trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logprobs, torch.zeros_like(logprobs),
                                                                          None)
            return trainer._compute_loss(None, inputs)
        trainer.model = lm
        return trainer._compute_loss(lm, inputs)


def grpo_config_default(name: str):
    """A GRPOConfig field's default, read from the dataclass (no config is built)."""
    from trl import GRPOConfig

    return GRPOConfig.__dataclass_fields__[name].default


def grpo_advantages(rewards_per_func, weights, num_generations, *, scale_rewards="group",
                    multi_objective_aggregation="sum_then_normalize") -> dict:
    """TRL's reward normalisation, cut from GRPOTrainer._generate_and_score_completions and run
    on `rewards_per_func` (B, K). Returns the block's names: "advantages", and "reward_k" (the
    group-normalised components) for normalize_then_sum."""
    import trl.trainer.grpo_trainer as module

    source = inspect.getsource(module.GRPOTrainer._generate_and_score_completions)
    code = source_block(source, "unscorable_mask = torch.isnan(rewards_per_func)",
                        "advantages = torch.nan_to_num(advantages")
    me = NS(multi_objective_aggregation=multi_objective_aggregation, reward_weights=weights,
            scale_rewards=scale_rewards, reward_funcs=[None] * rewards_per_func.shape[1])
    return run_block(code, vars(module), self=me, rewards_per_func=rewards_per_func,
                     num_generations=num_generations, device=torch.device("cpu"))


def rloo_advantages(rewards_per_func, weights, num_generations, *, normalize_advantages=False) -> dict:
    """TRL's RLOO advantages, cut from RLOOTrainer._generate_and_score_completions (beta 0: the
    KL-in-reward lines are not reached; no reward clipping)."""
    import trl.trainer.rloo_trainer as module

    source = inspect.getsource(module.RLOOTrainer._generate_and_score_completions)
    code = source_block(source, "unscorable_mask = torch.isnan(rewards_per_func)",
                        "advantages = torch.nan_to_num(advantages")
    me = NS(reward_weights=weights, reward_clip_range=None, beta=0.0, normalize_advantages=normalize_advantages)
    return run_block(code, vars(module), self=me, rewards_per_func=rewards_per_func,
                     num_generations=num_generations, device=torch.device("cpu"))


# ------------------------------------------------------------------------ DPO and KTO


def dpo_trainer(*, loss_type, beta, label_smoothing=0.0, model=None):
    """A DPOTrainer whose `_compute_loss` runs, reference logps precomputed (given in inputs)."""
    from trl import DPOTrainer

    t = object.__new__(DPOTrainer)
    t.loss_types, t.loss_weights, t.beta, t.label_smoothing = [loss_type], [1.0], beta, label_smoothing
    t.precompute_ref_logps, t.ld_alpha, t.f_divergence_type, t.use_weighting = True, None, "reverse_kl", False
    t.aux_loss_enabled, t._total_train_tokens, t._tp_size = False, 0, 1
    t.accelerator, t._metrics, t.args = Accelerator(), metrics_dict(), NS(gradient_checkpointing_kwargs=None)
    t.model = model if model is not None else NS(training=True)
    return t


def kto_trainer(*, loss_type, beta, desirable_weight, undesirable_weight):
    """A KTOTrainer whose `_compute_loss` runs, reference logps precomputed (given in inputs);
    it estimates the KL reference point unless the loss is apo_zero_unpaired (as TRL's __init__)."""
    from trl import KTOTrainer

    t = object.__new__(KTOTrainer)
    t.loss_type, t.beta = loss_type, beta
    t.desirable_weight, t.undesirable_weight = desirable_weight, undesirable_weight
    t.calculate_KL = loss_type not in ["apo_zero_unpaired"]
    t.precompute_ref_logps, t.aux_loss_enabled, t._total_train_tokens, t._tp_size = True, False, 0, 1
    t.accelerator, t._metrics, t.args = Accelerator(), metrics_dict(), NS(gradient_checkpointing_kwargs=None)
    t.model = NS(training=True)
    return t


def online_dpo_step(*, loss_type, beta, policy, ref, generated, rewards, eos_token_id):
    """TRL's OnlineDPOTrainer.training_step, generation and reward functions patched out:
    `generated` = (prompt_ids, prompt_mask, completion_ids, completion_mask) of the 2N
    completions (the two samples of prompt i are rows i and N + i, TRL's layout), `rewards`
    (2N,) their scores; `policy` and `ref` are models TRL's own `_forward` runs. Returns
    (the step's returned loss, TRL's stats)."""
    from trl.experimental.online_dpo import OnlineDPOTrainer

    t = object.__new__(OnlineDPOTrainer)
    t.args = NS(use_vllm=False, missing_eos_penalty=None, loss_type=loss_type, torch_empty_cache_steps=None,
                optim="adamw_torch", n_gpu=1, gradient_accumulation_steps=1)
    t._beta, t.max_length, t.eos_token_ids = beta, 10**6, [eos_token_id]
    t.ref_model, t.reward_funcs, t.stats = ref, [None], defaultdict(list)
    t.processing_class = NS(batch_decode=lambda ids, **k: ["x"] * len(ids))
    t.accelerator = Accelerator()
    t._generate = lambda model, prompts, images=None: (*generated, None)
    t._calculate_rewards_from_functions = lambda **kwargs: rewards
    n = generated[0].shape[0] // 2
    loss = t.training_step(policy, {"prompt": ["p"] * n})
    return loss, dict(t.stats)


# ------------------------------------------------------------------- TRL 1.12's PPO


def trl112_ppo_source(out: Path, trl112_venv: Path, download: bool) -> tuple[str | None, str]:
    """trl/experimental/ppo/ppo_trainer.py of TRL 1.12 (TRL dropped PPO after 1.12): from the
    PPO benchmark's venv when it exists, else from the trl-1.12.0 wheel (fetched once with
    `pip download --no-deps` into bench/out/trl112-wheel/). Returns (source or None, where from)."""
    found = glob.glob(str(trl112_venv / "lib" / "python*" / "site-packages" / "trl" / "experimental" / "ppo" /
                          "ppo_trainer.py"))
    if found:
        return Path(found[0]).read_text(), found[0]
    wheel_dir = out / "trl112-wheel"
    wheels = sorted(wheel_dir.glob("trl-1.12.0-*.whl"))
    if not wheels and download:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "trl==1.12.0",
                        "-d", str(wheel_dir)], check=False)
        wheels = sorted(wheel_dir.glob("trl-1.12.0-*.whl"))
    if not wheels:
        return None, "no TRL 1.12 source (run `python bench/ppo_vs_trl.py --setup`, or allow the wheel download)"
    with zipfile.ZipFile(wheels[0]) as z:
        return z.read("trl/experimental/ppo/ppo_trainer.py").decode(), str(wheels[0])


def _module_level(source: str, names: tuple[str, ...]) -> str:
    """The source of the module-level functions and assignments named `names`."""
    tree = ast.parse(source)
    parts = []
    for node in tree.body:
        defined = [node.name] if isinstance(node, ast.FunctionDef) else [
            t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if any(n in names for n in defined):
            parts.append(ast.get_source_segment(source, node))
    return "\n".join(parts)


def trl112_ppo_loss(source: str, **tensors) -> dict:
    """TRL 1.12's PPO loss lines (the masked logprobs, clipped value loss, clipped policy loss,
    their sum, and the clip fractions / approxkl of its no-grad block), cut from
    PPOTrainer.train and run with `tensors` under TRL's own names: new_logprobs, mb_logprobs,
    mb_advantage, vpred_temp, mb_values, mb_return, padding_mask, padding_mask_p1,
    context_length, args (cliprange, cliprange_value, vf_coef)."""
    scope = run_block(_module_level(source, ("masked_mean", "INVALID_LOGPROB")), {"torch": torch})
    loss = source_block(source, "new_logprobs = torch.masked_fill(", "loss = pg_loss + args.vf_coef * vf_loss")
    clip = source_block(source, "pg_clipfrac = masked_mean(", ")", last_exact=True)
    kl = source_block(source, "approxkl = 0.5 * (logprobs_diff**2)", "approxkl = 0.5 * (logprobs_diff**2)")
    rows = torch.arange(tensors["new_logprobs"].shape[0])
    return run_block("\n".join([loss, clip, kl]), scope, micro_batch_inds=rows, **tensors)
