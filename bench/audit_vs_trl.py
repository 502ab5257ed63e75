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

A variant whose function is not in this checkout prints "not in this checkout yet". Exit
status 1 when a row differs from TRL beyond its tolerance and the difference is not one
the engine makes on purpose (those say "by design / convention" and why).

Files: the GRPO, advantage and PPO cases here; DPO, KTO and online DPO in
bench/audit_preference.py; the shared tensors and result row in bench/audit_harness.py;
TRL's side in bench/audit_trl_paths.py.
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import sys
from dataclasses import asdict
from pathlib import Path

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
                ("online DPO", lambda: online_dpo_rows(batch)), ("PPO", lambda: ppo_rows(batch, not args.no_download))]
    rows = [r for name, make in sections for r in run_section(name, make)]
    rows = [r for r in rows if args.only.lower() in r.variant.lower()]
    today = datetime.date.today().isoformat()
    print(f"Audit vs TRL {trl.__version__} (PPO: TRL 1.12), torch {torch.__version__}, seed {args.seed}, {today}; "
          f"B={batch.B} T={batch.T} G={batch.G} V={batch.V}; tolerance {F64_TOL:g} (float64) / {F32_TOL:g} "
          f"(float32 paths)\n")
    print(markdown(rows))
    control = harness_control(batch)
    print(f"\nharness control: ours dapo vs TRL's grpo differ by {control:.1e} (must be well above the tolerance)")
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
