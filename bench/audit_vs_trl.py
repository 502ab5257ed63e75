"""Audit: the engine's RL losses and advantages against TRL's own code, on identical tensors.

For every variant both have, the same seeded tensors go to our function (engine.rl: grpo_loss,
the advantage estimators, dpo_loss, kto_loss, ppo_policy_loss / clipped_value_loss) and to
TRL's own code path (the trainer's loss method on a trainer made without a model, or the
block of TRL source that computes it: bench/audit_trl_paths.py), and the script prints, per
variant, the largest absolute difference of the loss (or of the advantages), of its
gradient with respect to the policy's per-token logprobs, with respect to the logits where
that path is natural (TRL's fused LM head against our TokenLogits), and of the metrics both
report, with a note. TRL 1.16 from the project venv; PPO against TRL 1.12's (TRL dropped its
PPO trainer after 1.12), whose source is read from the PPO benchmark's venv or the wheel.

Tensors: B=8 completions of T=12 tokens (4 prompts x 4), right-padded to mixed lengths,
advantages of both signs, old / reference logprobs 0.35 / 0.5 nats (std) from the policy's
so that ratios leave the clip range, float64 where both sides allow it (TRL's fused LM head
and our TokenLogits work in float32, our advantages come out in float32).

    python bench/audit_vs_trl.py                      # the markdown table
    python bench/audit_vs_trl.py --json bench/out/audit_vs_trl.json
    python bench/audit_vs_trl.py --only dpo           # the rows whose name contains "dpo"
    python bench/audit_vs_trl.py --only "reward model" # SFT: --only sft

SFT and the reward model are audited on a real model instead (a second table): our
trainer's own step (SFTTrainer / RewardModelTrainer made from a preset on the built-in
model, float32, LoRA r 4 with seeded weights; its train_step run with the optimizer step
left out) against TRL 1.16's SFTTrainer.compute_loss (fused LM head) and
RewardTrainer.compute_loss on the same model object and the same token ids (TRL's own
collators lay them out: right padding, labels -100 on the prompt; [chosen..., rejected...]):
the loss, the gradient w.r.t. every trained parameter, the metrics both log, and the reward
model's scores (ours position_scores at last_token_positions, TRL's the model's forward,
which pools at the last non-pad token). A control row in each must differ.

A variant whose function is not in this checkout prints "not in this checkout yet". Exit
status 1 when a row differs from TRL beyond its tolerance and the difference is not one
the engine makes on purpose (those say "by design / convention" and why).

Files: the GRPO, advantage, PPO, SFT and reward-model cases here; DPO, KTO and online DPO
in bench/audit_preference.py; the shared tensors and result row in bench/audit_harness.py;
TRL's side in bench/audit_trl_paths.py (SFT's and the reward model's TRL trainers are made
here, as the others there).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import inspect
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace as NS

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, TRL112_VENV, write_json  # noqa: E402
import audit_trl_paths as trl_paths  # noqa: E402
from audit_harness import (  # noqa: E402
    F64_TOL, F32_TOL, Batch, Row, maxdiff, metric_diff, missing_row, our_token_logits,
)
from audit_preference import dpo_rows, kto_rows, online_dpo_rows  # noqa: E402


# --------------------------------------------------------------------------------- GRPO

GRPO_METRICS = [(k, k) for k in ("kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                                 "cispo_clip_ratio")]


def grpo_inputs(batch: Batch, rows, old, ref, num_items):
    return {"prompt_ids": batch.prompt_ids[rows], "prompt_mask": torch.ones_like(batch.prompt_ids[rows]),
            "completion_ids": batch.completion_ids[rows], "completion_mask": batch.mask[rows].long(),
            "advantages": batch.advantages[rows], "old_per_token_logps": old[rows],
            "ref_per_token_logps": ref[rows], "num_items_in_batch": num_items}


def grpo_case(batch: Batch, variant: str, *, loss_type, trl_loss_type=None, ours_extra=None, trl_extra=None,
              beta=0.0, eps=(0.2, 0.28), level="token", micro_batches=1, note="", by_design=False,
              logits=True, trl_dtype=torch.float64) -> Row:
    """Our grpo_loss (micro-batches weighted by micro_batch_weight, as the GRPO trainer) against
    TRL's GRPOTrainer._compute_loss (micro-batches with gradient accumulation, as TRL's loop)."""
    from engine.rl.catalog import micro_batch_weight
    from engine.rl.losses import grpo_loss
    from engine.rl.masking import masked_mean

    trl_loss_type = trl_loss_type or loss_type
    ours_extra, trl_extra = ours_extra or {}, trl_extra or {}
    L = 16  # max_completion_length (dr_grpo's constant), larger than T
    chunks = list(torch.arange(batch.B).chunk(micro_batches))
    path = f"GRPOTrainer._compute_loss, loss_type={trl_loss_type}" + (
        f", {micro_batches} micro-batches" if micro_batches > 1 else "")
    row = Row(variant, path, note=note, by_design=by_design)

    def ours(lp_of, old, ref):
        total, info = 0.0, {}
        for rows in chunks:
            loss, info, _ = grpo_loss(lp_of(rows), old[rows], ref[rows] if beta else None, batch.advantages[rows],
                                      batch.mask[rows], beta=beta, epsilon_low=eps[0], epsilon_high=eps[1],
                                      loss_type=loss_type, max_completion_length=L,
                                      importance_sampling_level=level, **ours_extra)
            total = total + loss * micro_batch_weight(loss_type, batch.mask[rows], batch.mask,
                                                      ours_extra.get("loss_aggregation"))
        return total, info

    def trl(lp_of, old, ref, lm=None):
        total, trainer = 0.0, None
        for rows in chunks:
            trainer = trl_paths.grpo_trainer(loss_type=trl_loss_type, beta=beta, epsilon_low=eps[0],
                                             epsilon_high=eps[1], importance_sampling_level=level,
                                             max_completion_length=L, grad_accum=micro_batches, **trl_extra)
            inputs = grpo_inputs(batch, rows, old, ref, batch.mask.sum())
            if lm is None:
                total = total + trl_paths.grpo_compute_loss(trainer, inputs, logprobs=lp_of(rows), dtype=trl_dtype)
            else:
                sub = trl_paths.fused(trl_paths.IdentityHeadLM(batch.V))
                sub.route(torch.cat([batch.prompt_ids[rows], batch.completion_ids[rows]], 1), lp_of(rows))
                total = total + trl_paths.grpo_compute_loss(trainer, inputs, lm=sub)
        return total, {k: v for k, v in trainer._metrics["train"].items()}

    a, b = batch.leaf(batch.logprobs), batch.leaf(batch.logprobs)
    ours_loss, ours_info = ours(lambda r: a[r], batch.old, batch.ref)
    trl_loss, trl_metrics = trl(lambda r: b[r], batch.old, batch.ref)
    row.value = maxdiff(ours_loss.detach(), trl_loss.detach())
    row.grad_logp = maxdiff(torch.autograd.grad(ours_loss, a)[0], torch.autograd.grad(trl_loss, b)[0])
    if micro_batches == 1:
        row.metrics, names, missing = metric_diff(ours_info, trl_metrics, GRPO_METRICS)
        row.metric_names = tuple(names)
        if missing:
            row.note += f" (ours lacks {', '.join(missing)})"
        clip = trl_metrics.get("clip_ratio/region_mean") or trl_metrics.get("cispo_clip_ratio")
        if clip:
            row.note = (row.note + f" TRL clip share {clip[-1]:.2f}.").strip()
    if logits:
        # the logits path: TRL's own per-token-logps method on its fused head, ours TokenLogits
        ha, hb = batch.leaf(batch.hidden), batch.leaf(batch.hidden)
        lm = batch.lm(hb)
        tl = our_token_logits(batch, ha, lm)
        lp = tl.logprobs(batch.completion_ids).double()
        ours_loss2, _ = ours(lambda r: lp[r], batch.old_h, batch.ref_h)
        trl_loss2, trl_m2 = trl(lambda r: hb[r], batch.old_h, batch.ref_h, lm=lm)
        g_ours = torch.autograd.grad(ours_loss2, ha)[0]
        g_trl = torch.autograd.grad(trl_loss2, hb)[0]
        row.grad_logits = maxdiff(g_ours, g_trl)
        entropy = masked_mean(tl.entropy().double(), batch.mask).item()
        if micro_batches == 1 and trl_m2.get("entropy"):
            row.metrics_logits = abs(entropy - trl_m2["entropy"][-1])
            row.metric_names += ("entropy",)
        row.value_logits = maxdiff(ours_loss2.detach(), trl_loss2.detach())
    return row.settle()


def harness_control(batch: Batch) -> float:
    """The harness can see a difference: ours dapo against TRL's grpo must differ."""
    row = grpo_case(batch, "control", loss_type="dapo", trl_loss_type="grpo", logits=False)
    return max(row.value, row.grad_logp)


def grpo_rows(batch: Batch) -> list[Row]:
    from engine.rl import catalog
    from engine.rl.losses import grpo_loss

    params = inspect.signature(grpo_loss).parameters
    rows = [
        grpo_case(batch, "grpo", loss_type="grpo"),
        grpo_case(batch, "dr_grpo", loss_type="dr_grpo", note="max_completion_length 16."),
        grpo_case(batch, "dapo", loss_type="dapo", note="TRL: sum / num_items_in_batch."),
        grpo_case(batch, "bnpo = grpo + loss_aggregation token_mean", loss_type="grpo", trl_loss_type="bnpo",
                  ours_extra={"loss_aggregation": "token_mean"}, note="one micro-batch."),
        grpo_case(batch, "GSPO (importance_sampling_level sequence)", loss_type="grpo", level="sequence",
                  eps=(0.05, 0.05), note="loss grpo, eps 0.05 so that only some sequences clip."),
        grpo_case(batch, "KL term, beta 0.04 (k3)", loss_type="grpo", beta=0.04,
                  trl_extra={"use_bias_correction_kl": False},
                  note="TRL use_bias_correction_kl=False."),
        grpo_case(batch, "grpo, 2 micro-batches", loss_type="grpo", micro_batches=2, logits=False,
                  note="TRL: loss / gradient_accumulation_steps; ours: rows_share weight."),
        grpo_case(batch, "dapo, 2 micro-batches", loss_type="dapo", micro_batches=2, logits=False,
                  note="TRL: sum / num_items_in_batch of the whole batch; ours: tokens_share weight."),
        grpo_case(batch, "bnpo, 2 micro-batches", loss_type="grpo", trl_loss_type="bnpo", micro_batches=2,
                  ours_extra={"loss_aggregation": "token_mean"}, logits=False, by_design=True,
                  note="by design: our token_mean weighs micro-batches by tokens (= dapo over the batch); "
                       "TRL's bnpo averages each micro-batch's token mean."),
    ]
    from engine.algorithms.grpo.config import GRPOConfig

    if "delta" in GRPOConfig.model_fields:  # two-sided clipping (INTELLECT-2): the section's field reaches the surrogate
        for loss_type in ("grpo", "dapo"):
            # what the cap changes here, so that agreeing is not agreeing on an untouched loss
            moved = [grpo_loss(batch.logprobs, batch.old, None, batch.advantages, batch.mask, beta=0.0, epsilon_low=0.2,
                               epsilon_high=0.28, loss_type=loss_type, max_completion_length=16, **extra)[0].item()
                     for extra in ({}, {"delta": 1.5})]
            rows.append(grpo_case(batch, f"{loss_type}, two-sided clip (delta 1.5)", loss_type=loss_type,
                                  ours_extra={"delta": 1.5}, trl_extra={"delta": 1.5},
                                  note=f"the cap moves the loss by {abs(moved[1] - moved[0]):.2e} on this batch."))
    else:
        rows.append(missing_row("two-sided clip (delta)", "GRPOTrainer._compute_loss, args.delta", "GRPOConfig.delta"))
    if "use_bias_correction_kl" in params:
        rows.append(grpo_case(batch, "KL term, use_bias_correction_kl", loss_type="grpo", beta=0.04,
                              ours_extra={"use_bias_correction_kl": True},
                              trl_extra={"use_bias_correction_kl": True},
                              note=f"our default false, TRL's "
                                   f"{trl_paths.grpo_config_default('use_bias_correction_kl')}."))
    else:
        rows.append(missing_row("KL term, use_bias_correction_kl", "GRPOTrainer._compute_loss",
                                "grpo_loss(use_bias_correction_kl=)"))
    if "cispo" in catalog.POLICY_LOSSES:
        default_cap = catalog.upper_clip("cispo", 0.2, None) if hasattr(catalog, "upper_clip") else "?"
        rows.append(grpo_case(batch, "cispo (cap epsilon_high 1.25)", loss_type="cispo", eps=(0.2, 1.25),
                              note=f"cap set on both; unset, ours is {default_cap}, TRL's epsilon (0.2)."))
    else:
        rows.append(missing_row("cispo", "GRPOTrainer._compute_loss, loss_type=cispo", "loss type cispo"))
    if "sapo" in catalog.POLICY_LOSSES and "sapo_temperature_pos" in GRPOConfig.model_fields:  # the section's option
        temps = {"sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05}
        f32 = grpo_case(batch, "sapo", loss_type="sapo", ours_extra=temps, trl_extra=temps, logits=False,
                        trl_dtype=torch.float32)
        rows.append(grpo_case(batch, "sapo (tau 1.0 / 1.05)", loss_type="sapo", ours_extra=temps, trl_extra=temps,
                              note=f"under torch's float32 default TRL's temperatures are float32 (1.05 -> "
                                   f"1.0499999523): loss diff {f32.value:.1e}, grad {f32.grad_logp:.1e}."))
    else:
        rows.append(missing_row("sapo", "GRPOTrainer._compute_loss, loss_type=sapo", "loss type sapo"))
    return rows


# --------------------------------------------------------------------------- advantages


def advantage_rows(batch: Batch) -> list[Row]:
    from engine.rl import advantages as adv

    G, mask = batch.G, batch.mask
    total = (batch.rewards * batch.weights).sum(1)  # what the trainer's combine_rewards hands the estimator
    rows = []
    for scale in ("group", "batch", "none"):
        trl = trl_paths.grpo_advantages(batch.rewards, batch.weights, G, scale_rewards=scale)["advantages"]
        ours = adv.estimate_advantages("grpo", total, mask, num_generations=G, scale_rewards=scale)
        rows.append(Row(f"scale_rewards {scale}", "GRPOTrainer._generate_and_score_completions "
                        "(normalisation block)", value=maxdiff(ours, trl), tol=F32_TOL,
                        note="ours float32; an equal-reward group is exactly 0 in ours.").settle())
    trl = trl_paths.rloo_advantages(batch.rewards, batch.weights, G)["advantages"]
    ours = adv.estimate_advantages("rloo", total, mask, num_generations=G, scale_rewards="group")
    rows.append(Row("RLOO advantages", "RLOOTrainer._generate_and_score_completions (advantage block)",
                    value=maxdiff(ours, trl), tol=F32_TOL,
                    note="normalize_advantages=False (TRL's default; ours has no such option).").settle())
    if hasattr(adv, "normalize_then_sum"):
        scope = trl_paths.grpo_advantages(batch.rewards, batch.weights, G,
                                          multi_objective_aggregation="normalize_then_sum")
        ours, components = adv.normalize_then_sum(batch.rewards, batch.weights, G)
        rows.append(Row("normalize_then_sum (GDPO)", "GRPOTrainer._generate_and_score_completions "
                        "(normalize_then_sum block)", value=maxdiff(ours, scope["advantages"]),
                        metrics=maxdiff(components, scope["reward_k"]), tol=F32_TOL,
                        note="metrics: the group-normalised components.").settle())
    else:
        rows.append(missing_row("normalize_then_sum (GDPO)", "GRPOTrainer._generate_and_score_completions",
                                "engine.rl.advantages.normalize_then_sum"))
    rows.append(Row("remax", "none (verl's ReMax, not in TRL)", status="skipped",
                    note="ReMax is verl's estimator; TRL 1.16 has none to compare with."))
    return rows


# ---------------------------------------------------------------------------------- PPO


def ppo_rows(batch: Batch, download: bool) -> list[Row]:
    from engine.rl.losses import clipped_value_loss, ppo_policy_loss

    source, where = trl_paths.trl112_ppo_source(OUT, TRL112_VENV, download)
    if source is None:
        return [Row("PPO policy + value loss", "TRL 1.12 PPOTrainer.train (loss lines)", status="skipped",
                    note=where)]
    g = torch.Generator().manual_seed(11)
    B, T, d = batch.B, batch.T, torch.float64
    token_adv = torch.randn(B, T, generator=g, dtype=d) * batch.mask
    values = torch.randn(B, T, generator=g, dtype=d)
    old_values = values + 0.3 * torch.randn(B, T, generator=g, dtype=d)
    returns = torch.randn(B, T, generator=g, dtype=d)
    cliprange, cliprange_value, vf_coef = 0.2, 0.2, 0.1
    a, va = batch.leaf(batch.logprobs), batch.leaf(values)
    pg, pg_info, _ = ppo_policy_loss(a, batch.old, token_adv, batch.mask, cliprange)
    vf, vf_info = clipped_value_loss(va, old_values, returns, batch.mask, cliprange_value)
    ours = pg + vf_coef * vf
    # TRL: padding is True after the last token; the same mask for values here (see the note)
    b, vb = batch.leaf(batch.logprobs), batch.leaf(values)
    padding = ~batch.mask.bool()
    ctx = batch.P
    vpred_temp = torch.cat([torch.zeros(B, ctx - 1, dtype=d), vb, torch.zeros(B, 1, dtype=d)], 1)[..., None]
    scope = trl_paths.trl112_ppo_loss(
        source, new_logprobs=b, mb_logprobs=torch.where(padding, 1.0, batch.old), mb_advantage=token_adv,
        vpred_temp=vpred_temp, mb_values=old_values, mb_return=returns, padding_mask=padding,
        padding_mask_p1=padding, context_length=ctx,
        args=trl_paths.NS(cliprange=cliprange, cliprange_value=cliprange_value, vf_coef=vf_coef))
    theirs = scope["loss"]
    ga, gva = torch.autograd.grad(ours, [a, va])
    gb, gvb = torch.autograd.grad(theirs, [b, vb])
    row = Row("PPO clipped policy + value loss", "TRL 1.12 PPOTrainer.train (loss lines)",
              value=max(maxdiff(pg.detach(), scope["pg_loss"].detach()),
                        maxdiff(vf.detach(), scope["vf_loss"].detach()),
                        maxdiff(ours.detach(), theirs.detach())),
              grad_logp=max(maxdiff(ga, gb), maxdiff(gva, gvb)),
              metrics=max(abs(pg_info["clipfrac"] - float(scope["pg_clipfrac"])),
                          abs(vf_info["clipfrac"] - float(scope["vf_clipfrac"]))),
              metric_names=("policy/clipfrac", "val/clipfrac"),
              note="grad includes d/d values. TRL's value mask (padding_mask_p1) reaches one token past the "
                   "end; given the completion mask here, as our trainer uses.").settle()
    rescaled = scope["approxkl"].item() * batch.mask.numel() / batch.mask.sum().item()
    kl_row = Row("PPO approxkl metric", "TRL 1.12 PPOTrainer.train (no-grad stats)", metric_names=("approxkl",),
                 metrics=abs(pg_info["approxkl"] - scope["approxkl"].item()), by_design=True,
                 note=f"convention: ours is the mean over real tokens; TRL's the mean over all B x T positions, "
                      f"padding (0) included (TRL's x B*T / tokens - ours = "
                      f"{rescaled - pg_info['approxkl']:.0e})."
                 ).settle()
    return [row, kl_row]


# ------------------------------------------------------------ SFT and the reward model
# Whole-model sections: our trainer's real step (train_step: prepare, the update's loop of
# loss and backward over the micro-batches, finish) on the built-in model, against TRL's
# compute_loss on the same model object and the same token ids. Float32 on both sides (our
# TokenLogits works in float32 whatever the model's dtype), so the loss, scores and metrics
# are held to F32_TOL and the gradient to GRAD_REL_TOL of its largest element; TRL run again
# on a float64 copy of the model gives the float32 rounding floor of the gradient.

GRAD_REL_TOL = 1e-4
CONTROL_MIN = 1e3 * F32_TOL  # a control row must differ by more than this


@dataclass
class ModelRow(Row):
    """A whole-model row: `value` |Δ loss|, `metrics` the largest |Δ| of the metrics both log,
    `grad_params` of the gradient w.r.t. every trained parameter (LoRA A and B of each
    targeted layer; the reward model's score head too), `scores` of each text's score;
    `figures` each quantity as [ours, TRL]. A `control` row must differ (the harness sees a
    difference when there is one)."""

    grad_params: float | None = None
    grad_scale: float | None = None  # our gradient's largest |element|
    grad_floor: float | None = None  # TRL's float32 gradient against TRL's float64 one
    scores: float | None = None
    figures: dict = field(default_factory=dict)
    control: bool = False
    tol: float = F32_TOL

    def worst(self) -> float:
        worst = [x / self.tol for x in (self.value, self.metrics, self.scores) if x is not None]
        if self.grad_params is not None:
            worst.append(self.grad_params / (GRAD_REL_TOL * max(self.grad_scale or 0.0, 1e-30)))
        return max(worst, default=0.0)

    def settle(self) -> "ModelRow":
        if self.control and not self.status:
            self.status = "control: differs, as it must" if max(self.value or 0.0, self.metrics or 0.0) > \
                CONTROL_MIN else "ERROR"
        return super().settle()


class FixedStream:
    """Hands the trainer these examples each step (in place of its shuffled PromptStream)."""

    def __init__(self, examples):
        self.examples = examples

    def take(self, n):
        return self.examples[:n]


def trained(model) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def model_trainer(trainer_class, algorithm: dict, batch_size: int, run_dir: Path, seed: int):
    """Our trainer, made as a run makes it, on the built-in model (float32, CPU, LoRA r 4 on
    the modules the engine picks; the reward model through load_model(head="score")) and
    the sort task's data (the preset's seed 0); its trained weights then set to random
    values of `seed` (a fresh adapter's B is 0: it would change nothing and A would get no
    gradient)."""
    from engine.preset.schema import preset_from_dict

    preset = {"name": "audit", "model": {"name_or_path": "builtin:tiny", "device": "cpu", "dtype": "float32",
                                         "lora": {"r": 4, "alpha": 8.0, "dropout": 0.0}},
              "algorithm": algorithm, "data": {"task": "sort", "num_train": 4 * batch_size, "num_eval": 2},
              "rewards": [{"name": "exact_match"}],
              "training": {"max_steps": 1, "batch_size": batch_size, "eval_steps": 0, "save_steps": 0,
                           "record_rollouts": 0, "seed": 0}}
    trainer = trainer_class(preset_from_dict(preset), run_dir)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in trained(trainer.model).values():
            p.copy_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return trainer


def our_step(trainer, micro_batch_size=None):
    """One real training step of `trainer`, the optimizer step left out: its clip_and_step
    takes the accumulated gradient instead (before clipping), so the weights stay as they
    are. Returns (the step's metrics, its outputs, the gradient by parameter name)."""
    from engine.algorithms.memory import MicroBatchSize

    trainer.micro_batch_size = MicroBatchSize(micro_batch_size, trainer.cfg.batch_size)
    params, grads = trained(trainer.model), {}

    def clip_and_step(loss_total):
        grads.update({n: p.grad.detach().clone() for n, p in params.items()})
        return float("nan"), True

    trainer.clip_and_step = clip_and_step
    result = trainer.train_step()
    return result.metrics, result.outputs, grads


def trl_grads(model, loss) -> dict[str, torch.Tensor]:
    params = trained(model)
    return dict(zip(params, torch.autograd.grad(loss, list(params.values()))))


def trl_logged(values: list) -> float:
    """A metric as TRL's log() reports it: the mean of what compute_loss appended since the last log."""
    return sum(values) / len(values)


def model_row(variant, path, ours, g_ours, loss, g_trl, g_floor, note="", **kw) -> ModelRow:
    row = ModelRow(variant, path, value=abs(ours["loss"] - loss.item()), grad_params=grads_diff(g_ours, g_trl),
                   grad_scale=max(float(v.abs().max()) for v in g_ours.values()),
                   grad_floor=grads_diff(g_trl, g_floor), note=note, **kw)
    row.figures["loss"] = [ours["loss"], loss.item()]
    return row


def grads_diff(a: dict, b: dict) -> float:
    return max(maxdiff(a[n], b[n]) for n in a)


def add_figures(row: ModelRow, ours: dict, trl_metrics: dict, pairs) -> ModelRow:
    """The metrics both log, (our name, TRL's name): ours from the step's metrics, TRL's as its log() gives them."""
    diffs = []
    for mine, theirs in pairs:
        a, b = float(ours[mine]), trl_logged(trl_metrics[theirs])
        row.figures[theirs] = [a, b]
        diffs.append(abs(a - b))
    row.metrics, row.metric_names = max(diffs), tuple(theirs for _, theirs in pairs)
    return row


def micro_slices(n: int, size: int | None) -> list[slice]:
    size = size or n
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


# ---------------------------------------------------------------------------------- SFT

SFT_METRICS = [(k, k) for k in ("mean_token_accuracy", "entropy", "num_tokens")]
SFT_VARIANTS = ("SFT completion-only NLL", "SFT, 2 micro-batches", "SFT metrics over 2 micro-batches",
                "SFT, completion_only_loss false", "control: SFT ours completion-only vs TRL all tokens")


def sft_trl_trainer():
    """TRL's SFTTrainer whose compute_loss runs its plain NLL path (no compute_loss_func, no
    label smoother, loss_type nll, no MoE aux loss), one process."""
    from trl import SFTTrainer

    class Acc(trl_paths.Accelerator):
        parallelism_config = None  # no sequence parallelism (compute_loss reads it)

    t = object.__new__(SFTTrainer)
    t.model, t.aux_loss_enabled, t.compute_loss_func, t.label_smoother = NS(training=True), False, None, None
    t.args, t.is_deepspeed_enabled = NS(loss_type="nll", average_tokens_across_devices=True), False  # get_tp_size
    t.accelerator, t._metrics, t._total_train_tokens, t._tp_size = Acc(), trl_paths.metrics_dict(), 0, 1
    return t


def sft_trl_batch(rows, sel: slice, pad_token_id: int, completion_only=True) -> dict:
    """Rows `sel` of our step's Rollout as TRL's SFT batch: each row's tokens [prompt |
    completion] without padding, labels -100 on the prompt (TRL's build_labels from its
    completion_mask; completion_only False: labels = input_ids), through TRL's own collator
    (right padding, labels -100 on the padding)."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    examples = []
    for r in range(sel.start, sel.stop):
        prompt = rows.prompt_ids[r][rows.prompt_mask[r].bool()].tolist()
        completion = rows.completion_ids[r][: int(rows.completion_mask[r].sum())].tolist()
        labels = [-100] * len(prompt) + completion if completion_only else prompt + completion
        examples.append({"input_ids": prompt + completion, "labels": labels})
    return DataCollatorForLanguageModeling(pad_token_id=pad_token_id)(examples)


def sft_trl_loss(t, model, rows, micro_batches, pad_token_id, completion_only=True):
    """TRL's loss over micro-batches as transformers' Trainer accumulates it: num_items_in_batch
    counts labels[..., 1:] != -100 over all the micro-batches (None with one: compute_loss
    counts), each compute_loss divides by it, and the micro-batches' losses add up (no
    division by the accumulation steps: the loss is normalised by num_items_in_batch)."""
    batches = [sft_trl_batch(rows, mb, pad_token_id, completion_only) for mb in micro_batches]
    num_items = sum((b["labels"][..., 1:] != -100).sum() for b in batches) if len(batches) > 1 else None
    return sum(t.compute_loss(model, dict(b), num_items_in_batch=num_items) for b in batches)


def sft_rows(seed: int) -> list[Row]:
    """Our SFTTrainer's step (loss: -(target logprobs summed) / target tokens; target_stats)
    against TRL's SFTTrainer.compute_loss with its fused LM head on the same model."""
    try:
        from engine.algorithms.sft.trainer import SFTTrainer
    except ImportError:
        return [missing_row("SFT", "SFTTrainer.compute_loss", "engine.algorithms.sft")]
    from trl.trainer.utils import add_fused_lm_head

    B, path = 8, "SFTTrainer.compute_loss (fused LM head)"
    with tempfile.TemporaryDirectory() as tmp:
        trainer = model_trainer(SFTTrainer, {"name": "sft", "max_completion_length": 16}, B, Path(tmp) / "run", seed)
        model, pad = trainer.model, trainer.tokenizer.pad_token_id
        model64 = copy.deepcopy(model).double()
        for m in (model, model64):  # as TRL's __init__ patches its model (the base under PEFT)
            add_fused_lm_head(m.get_base_model(), outputs=("log_probs", "entropy", "is_top1"))
        t = sft_trl_trainer()  # one for the section: its num_tokens adds up over the steps as ours does

        def case(variant, note="", micro=None, completion_only=True, metrics=True, cap=16):
            trainer.algo = trainer.algo.model_copy(update={"completion_only_loss": completion_only,
                                                           "max_completion_length": cap})
            ours, out, g_ours = our_step(trainer, micro)
            micro_batches = micro_slices(B, micro)
            t._metrics = trl_paths.metrics_dict()
            loss = sft_trl_loss(t, model, out.rows, micro_batches, pad, completion_only)
            floor = sft_trl_loss(sft_trl_trainer(), model64, out.rows, micro_batches, pad, completion_only)
            row = model_row(variant, path + (f", {len(micro_batches)} micro-batches" if micro else ""), ours, g_ours,
                            loss, trl_grads(model, loss), trl_grads(model64, floor), note)
            if metrics:
                add_figures(row, ours, t._metrics["train"], SFT_METRICS)
            return row, ours, out

        first, _, out = case(SFT_VARIANTS[0])
        lengths = out.rows.completion_mask.sum(1).long().tolist()
        first.note = (f"{B} demonstrations, prompts of {out.rows.prompt_mask.sum(1).min().item()}-"
                      f"{out.rows.prompt_mask.sum(1).max().item()} tokens (ours left-padded, TRL's right-padded), "
                      f"{min(lengths)}-{max(lengths)} target tokens.")
        two, ours2, _ = case(SFT_VARIANTS[1], "TRL: num_items_in_batch of the whole batch; ours: the "
                             "batch's target tokens.", micro=B // 2, metrics=False)
        metrics2 = add_figures(ModelRow(SFT_VARIANTS[2], path + " + log()", by_design=True),
                               ours2, t._metrics["train"], SFT_METRICS)
        if metrics2.worst() > 1:
            metrics2.note = ("convention: ours are over all the step's target tokens; TRL logs the mean of each "
                             "micro-batch's token mean (log() averages what compute_loss appended).")
        else:
            metrics2.note = "TRL logs the mean of each micro-batch's token mean; equal here."
        plain, _, out = case(SFT_VARIANTS[3], completion_only=False, cap=64)
        # what max_completion_length 16 (the sort preset's) would have left of these rows
        trainer.algo = trainer.algo.model_copy(update={"max_completion_length": 16})
        short = trainer.demonstration_rows(out.examples).completion_mask.sum(1)
        prompt_rest = torch.tensor([len(trainer.tokenizer(e.prompt, add_special_tokens=False)["input_ids"]) - 1
                                    for e in out.examples])  # the prompt's tokens after the first
        whole = out.rows.completion_mask.sum(1)
        kept, answers = int((short - prompt_rest).clamp(min=0).sum()), int((whole - prompt_rest).sum())
        plain.note = (f"every token but the first on both; max_completion_length 64. Ours cuts prompt[1:] + answer "
                      f"at max_completion_length: at 16 (sft-sort's) these rows would keep {kept} of their {answers} "
                      f"answer tokens (EOS included) (TRL cuts the whole row at max_length, 1024).")
        trainer.algo = trainer.algo.model_copy(update={"completion_only_loss": True})
        # control: TRL on every token against ours completion-only, on the same rows
        ours, out, _ = our_step(trainer)
        control = sft_trl_loss(sft_trl_trainer(), model, out.rows, [slice(0, B)], pad, completion_only=False)
        ctl = ModelRow(SFT_VARIANTS[4], path, control=True,
                       value=abs(ours["loss"] - control.item()), note="must differ.")
        ctl.figures["loss"] = [ours["loss"], control.item()]
    return [r.settle() for r in (first, two, metrics2, plain, ctl)]


# ------------------------------------------------------------------------- reward model

RM_METRICS = [(k, k) for k in ("accuracy", "margin", "min_reward", "mean_reward", "max_reward", "num_tokens")]
RM_VARIANTS = ("reward model, Bradley-Terry", "reward model, margin column",
               "reward model, center_rewards_coefficient 0.01", "reward model, margin + centering 0.01",
               "reward model, 2 micro-batches (margin + centering)", "reward model metrics over 2 micro-batches",
               "control: reward model ours with margin vs TRL without")


def rm_trl_trainer(center_rewards_coefficient=None):
    """TRL's RewardTrainer whose compute_loss runs, one process."""
    from trl import RewardTrainer

    t = object.__new__(RewardTrainer)
    t.model, t.args = NS(training=True), NS(center_rewards_coefficient=center_rewards_coefficient)
    t.accelerator, t._metrics, t._total_train_tokens, t._tp_size = (trl_paths.Accelerator(), trl_paths.metrics_dict(),
                                                                    0, 1)
    return t


def rm_trl_batch(texts, pairs: slice, margins, pad_token_id: int) -> dict:
    """Pairs `pairs` of our step's texts ([chosen_0, rejected_0, chosen_1, ...]) as TRL's batch:
    each text's ids without padding through TRL's own collator, which lays them out
    [chosen..., rejected...] (right padding), with the margin column when there is one."""
    from trl.trainer.reward_trainer import DataCollatorForPreference

    def ids(i):
        return texts.ids[i][texts.mask[i].bool()].tolist()

    examples = [{"chosen_ids": ids(2 * p), "rejected_ids": ids(2 * p + 1),
                 **({"margin": float(margins[p])} if margins is not None else {})}
                for p in range(pairs.start, pairs.stop)]
    return DataCollatorForPreference(pad_token_id=pad_token_id)(examples)


def rm_trl_loss(t, model, texts, micro_batches, margins, pad_token_id):
    """TRL's loss over micro-batches as transformers' Trainer accumulates it (no labels, so no
    num_items_in_batch: each micro-batch's mean / the accumulation steps), and each text's
    score from the model's forward (HF pools at the last non-pad token), back in our order."""
    total, scores = 0.0, []
    for mb in micro_batches:
        loss, outputs = t.compute_loss(model, rm_trl_batch(texts, mb, margins, pad_token_id), return_outputs=True)
        total = total + loss / len(micro_batches)
        chosen, rejected = outputs.logits.squeeze(-1).detach().chunk(2)
        scores.append(torch.stack([chosen, rejected], 1).reshape(-1))  # interleaved, as ours
    return total, torch.cat(scores)


def reward_model_rows(seed: int) -> list[Row]:
    """Our RewardModelTrainer's step (encode_texts, position_scores read at last_token_positions,
    bradley_terry_loss, pair_metrics) against TRL's RewardTrainer.compute_loss on the same model."""
    try:
        from engine.algorithms.reward_model.trainer import RewardModelTrainer
    except ImportError:
        return [missing_row("reward model", "RewardTrainer.compute_loss", "engine.algorithms.reward_model")]
    from engine.data import Example

    B, path = 4, "RewardTrainer.compute_loss"
    with tempfile.TemporaryDirectory() as tmp:
        trainer = model_trainer(RewardModelTrainer, {"name": "reward_model", "max_completion_length": 16}, B,
                                Path(tmp) / "run", seed)
        model, pad = trainer.model, trainer.tokenizer.pad_token_id
        model64 = copy.deepcopy(model).double()
        # the sort task's first pairs, pairs 1 and 3 with their sides swapped (the corrupted answer chosen):
        # the model scores the right answer higher, so accuracy is 0.5, not 1
        pairs = [Example(e.prompt, {**e.fields, "chosen": e.fields["rejected"], "rejected": e.fields["chosen"]})
                 if i % 2 else e for i, e in enumerate(trainer.train_examples[:B])]
        margins = [0.5, -0.3, 0.0, 1.2]
        with_margin = [Example(e.prompt, {**e.fields, "margin": m}) for e, m in zip(pairs, margins)]
        t = rm_trl_trainer()  # one for the section: its num_tokens adds up over the steps as ours does

        def case(variant, note="", margin=False, center=None, micro=None, metrics=True):
            trainer.stream = FixedStream(with_margin if margin else pairs)
            trainer.algo = trainer.algo.model_copy(update={"center_rewards_coefficient": center})
            ours, out, g_ours = our_step(trainer, micro)
            m = torch.tensor(margins) if margin else None
            micro_batches = micro_slices(B, micro)
            t._metrics, t.args.center_rewards_coefficient = trl_paths.metrics_dict(), center
            loss, scores = rm_trl_loss(t, model, out.texts, micro_batches, m, pad)
            floor, _ = rm_trl_loss(rm_trl_trainer(center), model64, out.texts, micro_batches, m, pad)
            row = model_row(variant, path + (f", {len(micro_batches)} micro-batches" if micro else ""), ours, g_ours,
                            loss, trl_grads(model, loss), trl_grads(model64, floor), note,
                            scores=maxdiff(torch.tensor(out.rewards), scores))
            if metrics:
                add_figures(row, ours, t._metrics["train"], RM_METRICS)
            return row, ours, out

        plain, _, out = case(RM_VARIANTS[0])
        width = out.texts.ids.shape[1]
        lengths = out.texts.mask.sum(1)
        plain.note = (f"{B} pairs (2 with sides swapped), texts of {lengths.min().item()}-{lengths.max().item()} tokens padded to {width}; "
                      f"scores: ours position_scores at last_token_positions, TRL's the model's forward "
                      f"(HF pools at the last non-pad token).")
        rows = [plain,
                case(RM_VARIANTS[1], f"margins {margins}.", margin=True)[0],
                case(RM_VARIANTS[2], center=0.01)[0],
                case(RM_VARIANTS[3], margin=True, center=0.01)[0]]
        two, ours2, _ = case(RM_VARIANTS[4],
                             "TRL: each micro-batch's mean / 2 (gradient accumulation); ours: sum / pairs.",
                             margin=True, center=0.01, micro=B // 2, metrics=False)
        metrics2 = add_figures(ModelRow(RM_VARIANTS[5], path + " + log()", by_design=True), ours2, t._metrics["train"], RM_METRICS)
        metrics2.note = ("convention: ours are over the step's texts; TRL logs the mean of each micro-batch's "
                         "figure (log() averages what compute_loss appended): equal for accuracy, margin and mean "
                         "with equal micro-batches, not for min / max reward.")
        # control: TRL without the margin column against ours with it, on the same texts
        trainer.stream = FixedStream(with_margin)
        ours, out, _ = our_step(trainer)
        control, _ = rm_trl_loss(rm_trl_trainer(), model, out.texts, [slice(0, B)], None, pad)
        ctl = ModelRow(RM_VARIANTS[6], path, control=True,
                       value=abs(ours["loss"] - control.item()), note="must differ.")
        ctl.figures["loss"] = [ours["loss"], control.item()]
    return [r.settle() for r in rows + [two, metrics2, ctl]]


# -------------------------------------------------------------------------------- table


def fmt(*xs: float | None) -> str:
    xs = [x for x in xs if x is not None]
    return "" if not xs else ("0" if max(xs) == 0 else f"{max(xs):.1e}")


def markdown(rows: list[Row]) -> str:
    head = ("variant", "TRL code path", "loss / adv.", "grad logp", "loss via logits", "grad logits", "metrics",
            "status", "note")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = (r.variant, r.trl, fmt(r.value), fmt(r.grad_logp), fmt(r.value_logits), fmt(r.grad_logits),
                 fmt(r.metrics, r.metrics_logits), r.status, r.note.replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def model_markdown(rows: list[ModelRow]) -> str:
    """The whole-model rows' table, then each row's figures, ours / TRL."""
    head = ("variant", "TRL code path", "loss", "grad params (max \\|g\\|)", "float32 floor", "scores", "metrics",
            "status", "note")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        grad = "" if r.grad_params is None else f"{fmt(r.grad_params)} ({r.grad_scale:.2g})"
        cells = (r.variant, r.trl, fmt(r.value), grad, fmt(r.grad_floor), fmt(r.scores), fmt(r.metrics), r.status,
                 r.note.replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("\nFigures, ours / TRL:\n")
    for r in rows:
        if r.figures:
            lines.append(f"- {r.variant}: " + "; ".join(f"{k} {a:.6g} / {b:.6g}" for k, (a, b) in r.figures.items()))
    return "\n".join(lines)


def run_section(name: str, make) -> list[Row]:
    """A section's rows; one that raises becomes a row saying so (the others still run)."""
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 -- the audit reports it and goes on
        return [Row(name, "", status="ERROR", note=f"{type(exc).__name__}: {exc}")]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0, help="seed of the tensors (default 0)")
    p.add_argument("--only", default="", help="only the rows whose variant contains this (case-insensitive)")
    p.add_argument("--json", type=Path, default=None, help="write the figures to this JSON file")
    p.add_argument("--no-download", action="store_true",
                   help="do not fetch the trl 1.12.0 wheel for the PPO rows (they are skipped without it)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import trl

    torch.manual_seed(args.seed)
    batch = Batch.make(args.seed)
    sections = [("GRPO losses", lambda: grpo_rows(batch)), ("advantages", lambda: advantage_rows(batch)),
                ("DPO", lambda: dpo_rows(batch)), ("KTO", lambda: kto_rows(batch)),
                ("online DPO", lambda: online_dpo_rows(batch)), ("PPO", lambda: ppo_rows(batch, not args.no_download)),
                ("SFT", lambda: sft_rows(args.seed)), ("reward model", lambda: reward_model_rows(args.seed))]
    names = {"SFT": SFT_VARIANTS, "reward model": RM_VARIANTS}  # the model sections: skipped when --only keeps none
    sections = [(name, make) for name, make in sections
                if name not in names or any(args.only.lower() in v.lower() for v in names[name])]
    rows = [r for name, make in sections for r in run_section(name, make)]
    rows = [r for r in rows if args.only.lower() in r.variant.lower()]
    model_rows = [r for r in rows if isinstance(r, ModelRow)]
    rows = [r for r in rows if not isinstance(r, ModelRow)]
    today = datetime.date.today().isoformat()
    print(f"Audit vs TRL {trl.__version__} (PPO: TRL 1.12), torch {torch.__version__}, seed {args.seed}, {today}; "
          f"B={batch.B} T={batch.T} G={batch.G} V={batch.V}; tolerance {F64_TOL:g} (float64) / {F32_TOL:g} "
          f"(float32 paths)\n")
    print(markdown(rows))
    if model_rows:
        print(f"\nSFT and reward model: our trainer's step on the built-in model against TRL's compute_loss on the "
              f"same model object, float32; tolerance {F32_TOL:g} (loss, scores, metrics), {GRAD_REL_TOL:g} x the "
              f"gradient's largest element (grad params)\n")
        print(model_markdown(model_rows))
    control = harness_control(batch)
    print(f"\nharness control: ours dapo vs TRL's grpo differ by {control:.1e} (must be well above the tolerance)")
    rows = rows + model_rows
    bad = [r for r in rows if r.status in ("DIFFERS", "ERROR")]
    if control <= 1e3 * F64_TOL:
        bad.append(Row("harness control", "", status="ERROR"))
    if bad:
        print(f"\n{len(bad)} row(s) differ from TRL unexpectedly: {', '.join(r.variant for r in bad)}")
    write_json(args.json, {"trl": trl.__version__, "torch": torch.__version__, "seed": args.seed, "date": today,
                           "shape": {"B": batch.B, "T": batch.T, "G": batch.G, "V": batch.V, "P": batch.P},
                           "rows": [asdict(r) for r in rows]})
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
