"""The update's effect on the recorded tokens: after a step's optimizer update(s), one
no-grad pass over the rows the inspector records gives each token's log-probability
under the updated policy, so each token has its change, Δ log p = after - before
(`training.record_update_effect`, on by default; its cost: bench/update_effect_bench.py).

What the records, metrics and plots carry is in docs/run-directory.md; the metrics'
maths is engine/rl/update_effect.py; the plots and per-token values a trainer that records it
declares (RECORDS_UPDATE_EFFECT) are engine/algorithms/declaration.py's.
"""

from __future__ import annotations

import torch

from engine.algorithms.policy import set_update_mode
from engine.rl.update_effect import update_effect_metrics

__all__ = ["logprobs_after_update", "effect_per_token", "effect_metrics"]

@torch.no_grad()  # a look, not a pass to train on: no graph (and, with DDP, not through its wrapper)
def logprobs_after_update(trainer, rollout, rows: int, group_size: int | None = None) -> torch.Tensor | None:
    """Log-probabilities of the first `rows` rows' completion tokens under the policy as it
    is now (after the step's update), in the same dropout-free mode and temperature as
    the passes before it: (rows, T), or None when the preset turns it off or nothing is
    recorded. Every process runs it (each holds the whole batch): rank 0 writes the records,
    and the update/* metrics come out the same on every rank, as every other metric does."""
    if not (trainer.cfg.record_update_effect and rows):
        return None
    with trainer.policy.clock.timed("after_update"):
        set_update_mode(trainer.model, False)
        recorded = slice(0, rows)
        logits = trainer.completion_logits(rollout, recorded, group_size)
        return logits.logprobs(rollout.completion_ids[recorded]).detach()


def effect_per_token(before: torch.Tensor, after: torch.Tensor | None) -> dict:
    """The per-token values a record gets: {logprob_after, logprob_change} over the
    recorded rows (`before` may hold more rows: its first ones are the recorded), or {}.

    e.g. before [[-1.0, -0.5]], after [[-0.8, -0.6]] -> change [[0.2, -0.1]]
    """
    if after is None:
        return {}
    before = before[: after.shape[0]].to(after.dtype)
    return {"logprob_after": after, "logprob_change": after - before}


def effect_metrics(before: torch.Tensor, after: torch.Tensor | None, advantage: torch.Tensor,
                   mask: torch.Tensor) -> dict:
    """The step's update/* metrics over the recorded rows' tokens (engine/rl/update_effect.py);
    {} when the effect was not recorded. `advantage` (B,) or (B, T), `mask` (B, T): the batch's
    (their first rows are the recorded)."""
    if after is None:
        return {}
    n = after.shape[0]
    advantage = advantage[:n]
    if advantage.dim() == 1:
        advantage = advantage[:, None].expand_as(after)
    before = before[:n].to(after.dtype)
    change = after - before
    return update_effect_metrics(change, advantage.to(change.dtype), mask[:n], before)
