"""The step's update, token by token: what the inspector makes of a record's
`logprob_after` and `logprob_change` (docs/run-directory.md; written when the preset's
`training.record_update_effect` is on). No Qt.

- `derived_numbers`: the probability change exp(logprob_after) - exp(logprob), which
  the engine leaves to the window (and Δ log p, if a record has only the after value).
- `push_sign`: the direction the update means to move each token: the sign of its
  advantage; on a preference pair +1 on the chosen side and -1 on the rejected; on an
  unpaired completion +1 if desirable, -1 if not (as the engine's
  `update/against_advantage_ratio` counts it).
- `against`: the tokens that moved the other way (Δ log p · push < 0), which the
  inspector boxes in red when it colours by the change (`token_marks`, also the
  ratio's clipped tokens); `wants_advantage`: when the plot draws the advantage beside.
- `effect_rows` and `effect_text`: the words for the tooltip and the summary lines.

>>> numbers = {"logprob": np.log([0.5, 0.2]), "logprob_after": np.log([0.6, 0.1])}
>>> [round(float(v), 3) for v in derived_numbers(numbers)[PROB_CHANGE]]
[0.1, -0.1]
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from workbench.inspector.quantities import _num
from workbench.run_declaration import PAIR
from workbench.inspector.wording import signed

if TYPE_CHECKING:
    from workbench.inspector.records import Side, Trajectory

AFTER, CHANGE, PROB_CHANGE = "logprob_after", "logprob_change", "prob_change"
EFFECT_KEYS = (AFTER, CHANGE, PROB_CHANGE)  # shown together in the tooltip, not one by one
CHANGE_KEYS = (CHANGE, PROB_CHANGE)  # coloured by one of these: the advantage beside it, the "against" boxes
# A |Δ log p| this small is the rounding of two fp32 log-softmax passes, not a movement: a
# near-certain token's log p is computed around 1.0's resolution, 2^-23 = 1.2e-7 (a real run
# recorded -1.192e-7 for a space at log p -1e-5). Such a token is neither with nor against
# its push; 1e-6 is 8 such steps.
ROUNDING = 1e-6
# A token already sure (p > 0.99 before the update) with a positive push has no room to rise:
# its drift is not against it (engine/rl/update_effect.SURE_LOGPROB, the metric's same bound).
SURE_LOGPROB = -0.01005


def derived_numbers(numbers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The effect quantities a side's recorded numbers imply but do not hold: Δ p from
    `logprob` and `logprob_after` (and Δ log p when only those two are recorded). NaN
    wherever either logprob is null. {} for a record without `logprob_after`."""
    before, after = numbers.get("logprob"), numbers.get(AFTER)
    if before is None or after is None:
        return {}
    out = {}
    with np.errstate(invalid="ignore", over="ignore"):
        if CHANGE not in numbers:
            out[CHANGE] = after - before
        if PROB_CHANGE not in numbers:
            out[PROB_CHANGE] = np.exp(after) - np.exp(before)
    return out


def push_sign(trajectory: Trajectory, side_index: int) -> np.ndarray:
    """Per token, the sign the update pushes it towards (+1, -1, 0; NaN: unknown).

    The side's own per-token `advantage` when it has one; a pair's chosen side +1, its
    rejected side -1 (by name, else the first side chosen); an unpaired completion's
    label; else NaN (nothing to compare with)."""
    side = trajectory.sides[side_index]
    n = len(side)
    advantage = side.numbers.get("advantage")
    if advantage is not None and np.isfinite(advantage).any():
        return np.sign(advantage)
    if trajectory.layout == PAIR:
        sign = {"chosen": 1.0, "rejected": -1.0}.get(side.name, 1.0 if side_index == 0 else -1.0)
        return np.full(n, sign)
    if trajectory.desirable is not None:
        return np.full(n, 1.0 if trajectory.desirable else -1.0)
    return np.full(n, np.nan)


def against(change: np.ndarray, push: np.ndarray, before: np.ndarray | None = None) -> np.ndarray:
    """Whether each token moved against its push (Δ log p · push < 0); a null change
    or push, a zero push or a change within `ROUNDING` of 0 is not against, nor (given
    `before`, the log p before the update) a token pushed up that was already above 0.99.

    >>> against(np.array([0.2, -0.1, -0.3, np.nan, -1.2e-7]), np.array([1.0, 1.0, -1.0, 1.0, 1.0])).tolist()
    [False, True, False, False, False]
    >>> against(np.array([-0.001, -0.001]), np.array([1.0, -1.0]), np.array([-0.001, -0.001])).tolist()
    [False, False]
    """
    change = np.asarray(change, dtype=float)
    push = np.asarray(push, dtype=float)
    with np.errstate(invalid="ignore"):
        moved = np.nan_to_num(np.abs(change), nan=0.0) > ROUNDING
        result = moved & (np.nan_to_num(change * push, nan=0.0) < 0)
        if before is not None:
            result &= ~((push > 0) & (np.nan_to_num(np.asarray(before, dtype=float), nan=-np.inf) > SURE_LOGPROB))
        return result


def against_marks(trajectory: Trajectory, side_index: int) -> np.ndarray | None:
    """The side's tokens that moved against their push, as 1/0 (None: no Δ log p recorded)."""
    change = trajectory.sides[side_index].numbers.get(CHANGE)
    if change is None:
        return None
    before = trajectory.sides[side_index].numbers.get("logprob")
    return against(change, push_sign(trajectory, side_index), before).astype(float)


def token_marks(trajectory: Trajectory, side_index: int, key: str) -> np.ndarray | None:
    """The tokens boxed in red when colouring by `key` (1/0 per token, None: none): the
    clipped ones for the ratio, those that moved against their push for a change."""
    if key == "ratio":
        return trajectory.sides[side_index].clipped
    if key in CHANGE_KEYS:
        return against_marks(trajectory, side_index)
    return None


def _signed(value: float) -> str:
    return signed(value)


def effect_rows(side: Side, i: int) -> list[tuple[str, str]]:
    """The tooltip's lines for token i's update: log p before -> after with Δ log p, and
    the probability before -> after with Δ p ([] without `logprob_after`).

    e.g. logprob -1.204 -> -0.9163: [("log p before → after", "-1.204 → -0.9163"),
    ("Δ log p", "+0.2877"), ("p before → after", "0.3 → 0.4"), ("Δ p", "+0.1")]"""
    after = side.numbers.get(AFTER)
    if after is None:
        return []
    before = side.numbers.get("logprob", np.full(len(side), np.nan))
    change = side.numbers.get(CHANGE, after - before)
    lp0, lp1, d = float(before[i]), float(after[i]), float(change[i])
    p0 = math.exp(lp0) if math.isfinite(lp0) else math.nan
    p1 = math.exp(lp1) if math.isfinite(lp1) else math.nan
    return [("log p before → after", f"{_num(lp0)} → {_num(lp1)}"), ("Δ log p", _signed(d)),
            ("p before → after", f"{_num(p0)} → {_num(p1)}"), ("Δ p", _signed(p1 - p0))]


def effect_text(change: np.ndarray | None, push: np.ndarray, direction: str = "advantage") -> str:
    """One side's update in words: the mean and range of Δ log p and how many tokens
    moved against their push ('' without a finite change). `direction` names what the
    push is ("advantage"; a pair's side "push" as chosen up / rejected down).

    >>> effect_text(np.array([0.3, -0.1, 0.1]), np.array([1.0, 1.0, 1.0]))
    'Δ log p mean +0.1 (-0.1 to +0.3), 1 of 3 tokens against the advantage'
    """
    if change is None:
        return ""
    finite = change[np.isfinite(change)]
    if not finite.size:
        return ""
    text = (f"Δ log p mean {_signed(float(finite.mean()))} ({_signed(float(finite.min()))} to "
            f"{_signed(float(finite.max()))})")
    known = np.isfinite(push) & (push != 0) & np.isfinite(change)
    if known.any():
        text += f", {int(against(change, push).sum())} of {int(known.sum())} tokens against the {direction}"
    return text


def trajectory_effect_text(trajectory: Trajectory, side_index: int) -> str:
    """`effect_text` of one side of a record, naming its push ('' without Δ log p)."""
    side = trajectory.sides[side_index]
    push = push_sign(trajectory, side_index)
    if "advantage" in side.numbers:
        direction = "advantage"
    elif trajectory.layout == PAIR:
        direction = "push (chosen up)" if np.nanmean(push) > 0 else "push (rejected down)"
    else:
        direction = "label"
    return effect_text(side.numbers.get(CHANGE), push, direction)


def wants_advantage(key: str, trajectory: Trajectory | None) -> bool:
    """Whether the plot draws the advantage beside quantity `key`: coloured by a change
    quantity, and the record has a per-token advantage to compare with."""
    return (key in CHANGE_KEYS and trajectory is not None
            and any("advantage" in s.numbers and np.isfinite(s.numbers["advantage"]).any()
                    for s in trajectory.sides))
