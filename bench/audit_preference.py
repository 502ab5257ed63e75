"""bench/audit_vs_trl.py's preference rows: DPO (sigmoid, hinge, ipo, label smoothing), KTO
(kto, apo_zero_unpaired) and online DPO (sigmoid, ipo), each against TRL 1.16's trainer code."""

from __future__ import annotations

import torch

import audit_trl_paths as trl_paths
from audit_harness import Batch, Row, maxdiff, metric_diff, missing_row, our_token_logits


# ---------------------------------------------------------------------------------- DPO

DPO_METRICS = [("chosen", "rewards/chosen"), ("rejected", "rewards/rejected"), ("margins", "rewards/margins"),
               ("accuracies", "rewards/accuracies")]


def pair_layout(batch: Batch):
    """DPO's batch as TRL collates it: rows [chosen; rejected], input_ids [prompt | completion],
    the completion mask over input_ids. The batch's 8 rows are 4 pairs: rows i and 4 + i."""
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1)
    completion_mask = torch.cat([torch.zeros_like(batch.prompt_ids), batch.mask.long()], 1)
    attention = torch.cat([torch.ones_like(batch.prompt_ids), batch.mask.long()], 1)
    return ids, completion_mask, attention


def our_dpo(per_token, ref_per_token, mask, n, *, loss_type, beta, label_smoothing):
    from engine.rl.dpo_losses import dpo_loss, length_averaged, sequence_logps

    avg = length_averaged(loss_type)
    seq, ref = sequence_logps(per_token, mask, average=avg), sequence_logps(ref_per_token, mask, average=avg)
    losses, rc, rr = dpo_loss(seq[:n], seq[n:], ref[:n], ref[n:], beta=beta, loss_type=loss_type,
                              label_smoothing=label_smoothing)
    info = {"chosen": rc.mean().item(), "rejected": rr.mean().item(), "margins": (rc - rr).mean().item(),
            "accuracies": (rc > rr).double().mean().item()}
    return losses.mean(), info


def dpo_case(batch: Batch, loss_type: str, *, beta=0.1, label_smoothing=0.0, note="", by_design=False,
             status="") -> Row:
    n = batch.B // 2
    ids, cmask, attention = pair_layout(batch)
    ref_sums = (batch.ref * batch.mask).sum(1)
    inputs = {"input_ids": ids, "attention_mask": attention, "completion_mask": cmask,
              "ref_chosen_logps": ref_sums[:n], "ref_rejected_logps": ref_sums[n:]}
    variant = f"DPO {loss_type}" + (f", label_smoothing {label_smoothing}" if label_smoothing else "")
    row = Row(variant, f"DPOTrainer._compute_loss, loss_type={loss_type}", note=note, by_design=by_design,
              status="")
    a, b = batch.leaf(batch.logprobs), batch.leaf(batch.logprobs)
    ours, info = our_dpo(a, batch.ref, batch.mask, n, loss_type=loss_type, beta=beta,
                         label_smoothing=label_smoothing)
    # TRL's fused head gives (2n, L-1) logprobs of each next token, 0 where the label is -100
    full = torch.cat([torch.zeros(batch.B, batch.P - 1, dtype=b.dtype), b * batch.mask], 1)
    trainer = trl_paths.dpo_trainer(loss_type=loss_type, beta=beta, label_smoothing=label_smoothing)
    theirs = trainer._compute_loss(trl_paths.logprob_model([(ids, full)]), inputs, False)
    row.value = maxdiff(ours.detach(), theirs.detach())
    row.grad_logp = maxdiff(torch.autograd.grad(ours, a)[0], torch.autograd.grad(theirs, b)[0])
    row.metrics, names, _ = metric_diff(info, trainer._metrics["train"], DPO_METRICS)
    row.metric_names = tuple(names)
    # the logits path: TRL's model call on its fused head, ours TokenLogits
    ha, hb = batch.leaf(batch.hidden), batch.leaf(batch.hidden)
    lm = batch.lm(hb, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
    ref_sums_h = (batch.ref_h * batch.mask).sum(1)
    inputs.update(ref_chosen_logps=ref_sums_h[:n], ref_rejected_logps=ref_sums_h[n:])
    lp = our_token_logits(batch, ha, lm).logprobs(batch.completion_ids).double()
    ours2, _ = our_dpo(lp, batch.ref_h, batch.mask, n, loss_type=loss_type, beta=beta,
                       label_smoothing=label_smoothing)
    trainer2 = trl_paths.dpo_trainer(loss_type=loss_type, beta=beta, label_smoothing=label_smoothing, model=lm)
    theirs2 = trainer2._compute_loss(lm, inputs, False)
    row.grad_logits = maxdiff(torch.autograd.grad(ours2, ha)[0], torch.autograd.grad(theirs2, hb)[0])
    row.value_logits = maxdiff(ours2.detach(), theirs2.detach())
    if status:
        row.status = status
    return row.settle()


def dpo_rows(batch: Batch) -> list[Row]:
    return [
        dpo_case(batch, "sigmoid"),
        dpo_case(batch, "hinge"),
        dpo_case(batch, "ipo", by_design=True,
                 note="loss agrees (both on token-mean logprobs). Metrics, convention: our DPO's rewards/* "
                      "for IPO are beta x the token-mean log ratio (the loss's own h), TRL's beta x the sum "
                      "(our online DPO logs the sum, as TRL)."),
        dpo_case(batch, "sigmoid", label_smoothing=0.1, by_design=True, status="no TRL counterpart",
                 note="TRL 1.16's sigmoid ignores label_smoothing (only robust, exo_pair, aot read it); "
                      "ours is conservative DPO (cDPO). Figures: ours eps 0.1 vs TRL's plain sigmoid."),
    ]


# ---------------------------------------------------------------------------------- KTO


def kto_rows(batch: Batch) -> list[Row]:
    try:
        from engine.rl.catalog import KTO_LOSSES
        from engine.rl.kto_losses import kl_reference_point, kto_loss
    except ImportError:
        return [missing_row(f"KTO {t}", "KTOTrainer._compute_loss",
                            "engine.rl.kto_losses (kto_loss, kl_reference_point)")
                for t in ("kto", "apo_zero_unpaired")]
    rows = []
    ids, cmask, attention = pair_layout(batch)
    desirable = torch.tensor([True, False, True, True, False, False, True, False])
    kl_ids = torch.roll(ids, 1, 0)  # the KL rows: other ids than the batch's (only their logps matter here)
    kl_policy = (batch.lp_hidden * batch.mask).sum(1)  # their logprobs: any detached values
    kl_ref = (batch.ref_h * batch.mask).sum(1) - 0.8  # mean(policy - ref) > 0: the reference point is used
    ref_sums = (batch.ref * batch.mask).sum(1)
    for loss_type in ("kto", "apo_zero_unpaired"):
        beta, wd, wu = 0.1, 1.0, 1.33
        a, b = batch.leaf(batch.logprobs), batch.leaf(batch.logprobs)
        uses_kl = KTO_LOSSES.declares(loss_type).uses_kl  # TRL: loss_type not in ["apo_zero_unpaired"]
        kl = kl_reference_point(kl_policy, kl_ref) if uses_kl else torch.zeros((), dtype=torch.float64)
        losses, rewards = kto_loss((a * batch.mask).sum(1), ref_sums, desirable, kl, beta=beta,
                                   desirable_weight=wd, undesirable_weight=wu, loss_type=loss_type)
        ours = losses.mean()
        full = torch.cat([torch.zeros(batch.B, batch.P - 1, dtype=b.dtype), b * batch.mask], 1)
        kl_full = torch.cat([torch.zeros(batch.B, batch.P - 1, dtype=b.dtype),
                             batch.lp_hidden * batch.mask], 1)
        inputs = {"input_ids": ids, "attention_mask": attention, "completion_mask": cmask, "label": desirable,
                  "KL_input_ids": kl_ids, "KL_attention_mask": attention, "KL_completion_mask": cmask,
                  "ref_logps": ref_sums, "ref_KL_logps": kl_ref}
        trainer = trl_paths.kto_trainer(loss_type=loss_type, beta=beta, desirable_weight=wd, undesirable_weight=wu)
        theirs = trainer._compute_loss(trl_paths.logprob_model([(ids, full), (kl_ids, kl_full)]), inputs, False)
        m = trainer._metrics["train"]
        ours_m = {"kl": float(kl), "chosen": rewards[desirable].mean().item(),
                  "rejected": rewards[~desirable].mean().item()}
        pairs = [("chosen", "rewards/chosen"), ("rejected", "rewards/rejected")] + ([("kl", "kl")] if uses_kl else [])
        metrics, names, _ = metric_diff(ours_m, m, pairs)
        rows.append(Row(f"KTO {loss_type}", f"KTOTrainer._compute_loss, loss_type={loss_type}",
                        value=maxdiff(ours.detach(), theirs.detach()),
                        grad_logp=maxdiff(torch.autograd.grad(ours, a)[0], torch.autograd.grad(theirs, b)[0]),
                        metrics=metrics, metric_names=tuple(names),
                        note=f"weights {wd} / {wu}" + (f", KL point {float(kl):.3f}." if uses_kl else ".")
                        ).settle())
    return rows


# --------------------------------------------------------------------------- online DPO


def online_dpo_rows(batch: Batch) -> list[Row]:
    """TRL's OnlineDPOTrainer.training_step (its pair choice, its _forward on full logits, its
    loss lines) against our online DPO's rank_pairs and pair_losses on TokenLogits' logprobs."""
    try:
        from engine.algorithms.online_dpo.ranking import rank_pairs
        from engine.algorithms.online_dpo.trainer import pair_losses
    except ImportError:
        return [missing_row(f"online DPO {t}", "OnlineDPOTrainer.training_step",
                            "engine.algorithms.online_dpo (rank_pairs, pair_losses)") for t in ("sigmoid", "ipo")]
    from engine.rl.dpo_losses import length_averaged

    rows = []
    n = batch.B // 2
    # TRL's rows: prompt i's two samples at i and n + i; ours: at 2i and 2i + 1
    ours_order = torch.stack([torch.arange(n), torch.arange(n) + n], 1).reshape(-1)
    scores = torch.tensor([1.0, 0.2, 0.5, 0.7, 0.3, 0.9, 0.5, 0.1], dtype=torch.float64)  # pair 2 ties
    ranking = rank_pairs(scores[ours_order].tolist())
    first_wins = torch.tensor(ranking.first_wins())
    generated = (batch.prompt_ids, torch.ones_like(batch.prompt_ids), batch.completion_ids, batch.mask.long())
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1)
    ref_hidden = batch.hidden + 0.3 * torch.randn(batch.hidden.shape, dtype=torch.float64,
                                                  generator=torch.Generator().manual_seed(7))
    for loss_type in ("sigmoid", "ipo"):
        beta = 0.1
        ha, hb = batch.leaf(batch.hidden), batch.leaf(batch.hidden)
        policy, ref = trl_paths.IdentityHeadLM(batch.V), trl_paths.IdentityHeadLM(batch.V)
        policy.route(ids, hb)
        ref.route(ids, ref_hidden)
        theirs, stats = trl_paths.online_dpo_step(loss_type=loss_type, beta=beta, policy=policy, ref=ref,
                                                  generated=generated, rewards=scores, eos_token_id=0)
        lp = our_token_logits(batch, ha, policy).logprobs(batch.completion_ids).double()
        with torch.no_grad():
            ref_lp = our_token_logits(batch, ref_hidden, ref).logprobs(batch.completion_ids).double()
        o = ours_order
        ours = pair_losses(lp[o], ref_lp[o], batch.mask[o], first_wins, beta=beta, loss_type=loss_type).mean()
        g_ours = torch.autograd.grad(ours, ha)[0]
        # the metrics as our online DPO trainer's train_step computes them (re-typed: inline there)
        implicit = beta * ((lp[o].detach() - ref_lp[o]) * batch.mask[o]).sum(-1)
        margins = implicit[ranking.chosen] - implicit[ranking.rejected]
        info = {"chosen": implicit[ranking.chosen].mean().item(), "rejected": implicit[ranking.rejected].mean().item(),
                "margins": margins.mean().item(), "accuracies": (margins > 0).double().mean().item()}
        metrics, names, _ = metric_diff(info, stats, DPO_METRICS)
        avg = length_averaged(loss_type)
        note = (f"pair {ranking.ties.index(True)} ties: the first sample is chosen on both. Metrics: our "
                f"trainer's lines (summed logprobs, as TRL), re-typed.")
        if avg:
            from engine.rl.dpo_losses import dpo_loss, sequence_logps

            summed = [sequence_logps(t[o], batch.mask[o]).detach() for t in (lp, ref_lp)]
            pol = [torch.where(first_wins, summed[0][0::2], summed[0][1::2]),
                   torch.where(first_wins, summed[0][1::2], summed[0][0::2])]
            ref_ = [torch.where(first_wins, summed[1][0::2], summed[1][1::2]),
                    torch.where(first_wins, summed[1][1::2], summed[1][0::2])]
            on_sums = dpo_loss(*pol, *ref_, beta=beta, loss_type="ipo")[0].mean()
            note = (f"convention: our ipo is on token-mean logprobs (as our DPO and TRL's DPOTrainer); TRL's "
                    f"online DPO ipo on summed ones (our ipo_loss on sums: diff {maxdiff(on_sums, theirs):.0e}). "
                    + note)
        rows.append(Row(f"online DPO {loss_type}", f"OnlineDPOTrainer.training_step, loss_type={loss_type}",
                        value_logits=maxdiff(ours.detach(), theirs), grad_logits=maxdiff(g_ours, hb.grad),
                        metrics_logits=metrics, metric_names=tuple(names), note=note, by_design=avg).settle())
    return rows
