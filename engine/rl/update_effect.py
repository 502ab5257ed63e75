"""The update's effect on tokens, as numbers: given each recorded token's change in
log-probability across a step's update (Δ log p = log p after - log p before) and the
advantage that asked for it, how large the change was, how concentrated, and how much
of it went the way the advantage asked. Pure functions (torch in, floats out); the
trainers' side (the pass after the update, the records) is engine/algorithms/update_effect.py.

The metrics (every step with training.record_update_effect, docs/run-directory.md):
  update/change_abs_mean         mean |Δ log p|
  update/change_top10_share      share of the total |Δ log p| carried by the top 10 % of tokens
  update/change_pos_adv_mean     mean Δ log p of tokens with advantage > 0
  update/change_neg_adv_mean     mean Δ log p of tokens with advantage < 0
  update/against_advantage_ratio share of tokens with advantage != 0 moved the other way (Δ · A < 0)
Each is None where there is no token to average (or, for the share, no change to share).
A preference pair's (DPO) tokens have advantage +1 on the chosen side, -1 on the rejected.
"""

from __future__ import annotations

import torch

__all__ = ["UPDATE_EFFECT_METRICS", "update_effect_metrics", "top_share"]

UPDATE_EFFECT_METRICS = (
    "update/change_abs_mean",
    "update/change_top10_share",
    "update/change_pos_adv_mean",
    "update/change_neg_adv_mean",
    "update/against_advantage_ratio",
)


def _mean_or_none(values: torch.Tensor) -> float | None:
    return float(values.mean()) if values.numel() else None


def top_share(magnitudes: torch.Tensor, percent: int = 10) -> float | None:
    """Share of the total carried by the largest `percent` % of the values: the sum of the
    ceil(percent/100 * n) largest over the sum of all (n values, all >= 0). None when there
    are no values or they sum to 0 (nothing moved: there is no change to share).

    The count is worked out in integers: in floats 7 / 100 * 100 is 7.000000000000001,
    whose ceiling would be 8 values, not 7. Ties do not matter: whichever of equal values are
    taken, the sum is the same. When all values are equal the share is ceil(0.1 n) / n
    (0.1 when n is a multiple of 10; 0.2 for 5 values, where the top 10 % is 1 value).

    >>> round(top_share(torch.tensor([0.4, 0.1, 0.0, 0.2, 0.3])), 6)  # ceil(0.5) = 1 value: 0.4 / 1.0
    0.4
    >>> round(top_share(torch.ones(20)), 6)  # 2 values of 20 alike
    0.1
    >>> top_share(torch.zeros(2)) is None
    True
    """
    n = magnitudes.numel()
    total = magnitudes.sum()
    if n == 0 or float(total) <= 0.0:
        return None
    k = (n * percent + 99) // 100  # ceil(percent / 100 * n), exactly
    return float(torch.topk(magnitudes.flatten(), k).values.sum() / total)


#: A change this small is the rounding of two fp32 passes (log p near 0 moves by ~1.2e-7
#: when nothing moved it), not a movement: it counts as moving neither way. The window's
#: inspector uses the same floor (workbench/inspector/update_effect.py).
NO_MOVEMENT = 1e-6

#: A token already this sure (p > 0.99 before the update) with a positive advantage has no
#: room to rise (at most +0.01 in log p): what moves it is the drift the other tokens'
#: updates leave, not its own push, so the against share does not count it. A tool call's
#: JSON is made of such tokens (a run of the calculator preset had 420 of its 433 "against"
#: tokens above 0.99, each moved by less than 0.001). A sure token with a negative advantage
#: has all its room to fall, and counts. The inspector uses the same bound.
SURE_LOGPROB = -0.01005  # log 0.99


def _effect_of_tokens(change: torch.Tensor, advantage: torch.Tensor, before: torch.Tensor | None = None) -> dict:
    """The five metrics over flat vectors of the counted tokens' Δ log p and advantage (n,)
    (and their log p before the update, for the against share's sure tokens)."""
    pos, neg, signed = advantage > 0, advantage < 0, advantage != 0
    if before is not None:
        signed = signed & ~(pos & (before > SURE_LOGPROB))
    against = ((change * advantage < 0) & (change.abs() > NO_MOVEMENT))[signed]
    return {
        "update/change_abs_mean": _mean_or_none(change.abs()),
        "update/change_top10_share": top_share(change.abs()),
        "update/change_pos_adv_mean": _mean_or_none(change[pos]),
        "update/change_neg_adv_mean": _mean_or_none(change[neg]),
        "update/against_advantage_ratio": _mean_or_none(against.double()),
    }


def _counted(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # selected, not multiplied by the mask: a masked position's value (padding, a -inf
    # log-probability past the end) cannot leak into the sums. On the CPU in float64: a
    # few recorded rows, summed exactly enough, and MPS has no float64.
    return values.detach().to("cpu", torch.float64)[mask.detach().to("cpu").bool()]


def update_effect_metrics(change: torch.Tensor, advantage: torch.Tensor, mask: torch.Tensor,
                          before: torch.Tensor | None = None) -> dict:
    """The update/* metrics of one step over the tokens `mask` keeps.

    input:  change (N, T): Δ log p of each token across the update (after - before)
            advantage (N, T) per token, or (N,) one per row (spread over its tokens)
            mask (N, T) of 0/1 (bool, int or float): the tokens to count
    output: {metric name: float or None} for every name in UPDATE_EFFECT_METRICS

    A token whose change is within NO_MOVEMENT (1e-6) of 0 has not moved against its advantage;
    a token with advantage 0 asks for no direction and counts in neither the per-sign means
    nor the against ratio (it still counts in the |Δ| metrics). With `before` (N, T), each
    token's log p before the update, a token with a positive advantage and p > 0.99
    (SURE_LOGPROB) is left out of the against ratio: it has no room to rise.

    e.g. one row of 5 tokens, all kept:
         change    [0.4, -0.1, 0.0, 0.2, -0.3]
         advantage [1,    1,  -1,  -1,   0  ]
         change_abs_mean         (0.4 + 0.1 + 0 + 0.2 + 0.3) / 5 = 0.2
         change_top10_share      top ceil(0.5) = 1 token: 0.4 / 1.0 = 0.4
         change_pos_adv_mean     (0.4 - 0.1) / 2 = 0.15
         change_neg_adv_mean     (0.0 + 0.2) / 2 = 0.1
         against_advantage_ratio tokens with A != 0: 4; against: -0.1 (A +1) and 0.2 (A -1): 2 / 4 = 0.5
    """
    if advantage.dim() == 1:
        advantage = advantage[:, None].expand_as(change)
    if change.shape != mask.shape or advantage.shape != change.shape:
        raise ValueError(f"update_effect_metrics: change {tuple(change.shape)}, advantage {tuple(advantage.shape)} "
                         f"and mask {tuple(mask.shape)} must have one shape (N, T) (advantage may be (N,))")
    return _effect_of_tokens(_counted(change, mask), _counted(advantage, mask),
                             None if before is None else _counted(before, mask))

