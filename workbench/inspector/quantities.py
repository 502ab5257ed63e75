"""The inspector's quantities (the per-token numbers it can colour by) and their colour
scales, and how it prints a number. No Qt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from workbench.inspector.colors import Scale, symmetric_scale
from workbench.run_declaration import PAIR

if TYPE_CHECKING:
    from workbench.inspector.records import Trajectory

MARKS = {"clipped"}  # per-token flags: shown as marks and in the tooltip, not in the picker
AGAINST = ("boxed in red (x in the plot): moved against the update's push (its advantage's sign; "
           "a pair: chosen up, rejected down)")
# A reward model's score read at every token (its own pairs' `score`, an RL run's `rm_score`): the
# head learnt only from whole answers, so a prefix's score is a reading off its training data.
OFF_DISTRIBUTION = ("Positions before the last token are off-distribution: the head was trained only at the end of "
                    "an answer; read the colours as where the model changes its mind, not as rewards of partial "
                    "answers.")


@dataclass(frozen=True)
class Quantity:
    """A per-token number the inspector can colour by.

    kind "diverging" (signed, centred at `centre`, symmetric scale) or "sequential"
    (`loud` "high" or "low" is the dark end; `anchor`, when set, fixes the pale end, and
    `loud_at` the dark end: a probability's 0). `note`: what to keep in mind while
    coloured by it (shown beside the legend)."""

    key: str
    label: str
    kind: str
    meaning: str
    centre: float = 0.0
    loud: str = "high"
    anchor: float | None = None
    stops: str = "heat"
    loud_at: float | None = None
    note: str = ""


QUANTITIES: dict[str, Quantity] = {q.key: q for q in (
    Quantity("advantage", "advantage", "diverging",
             "green: the update pushes the token up; pink: pushes it down"),
    # The step's update, measured (workbench/inspector/update_effect.py): log p after it - before.
    Quantity("logprob_change", "change after update (Δ log p)", "diverging",
             "log p after this step's update − log p before: green = made more likely, pink = less likely; "
             + AGAINST),
    Quantity("prob_change", "probability change (Δ p)", "diverging",
             "p after this step's update − p before: green = more likely, pink = less likely; near 0 for tokens "
             "already certain or never likely; " + AGAINST),
    Quantity("logprob", "logprob", "sequential",
             "log-probability under the sampling policy; darker = less likely", loud="low", anchor=0.0),
    Quantity("logprob_after", "logprob after update", "sequential",
             "log-probability under the policy after this step's update; darker = less likely", loud="low", anchor=0.0),
    # exp(logprob), worked out here (records.Side): a demonstration's "where the model disagrees with the data".
    Quantity("probability", "probability", "sequential",
             "exp(logprob): the token's probability under the model; darker = less likely, darkest at 0",
             loud="low", anchor=1.0, loud_at=0.0),
    Quantity("rank", "rank in vocabulary", "sequential",
             "the token's rank among the whole vocabulary under the model (1: its top choice); darker = further down",
             anchor=1.0),
    Quantity("ref_logprob", "reference logprob", "sequential",
             "log-probability under the reference model; darker = less likely", loud="low", anchor=0.0),
    Quantity("kl", "KL", "sequential",
             "per-token KL(policy ‖ reference), k3; darker = further from the reference", anchor=0.0),
    Quantity("entropy", "entropy", "sequential",
             "entropy of the sampling distribution, nats; darker = less certain", anchor=0.0),
    Quantity("ratio", "ratio", "diverging",
             "new/old probability in the last update; green > 1 > pink; clipped tokens boxed in red",
             centre=1.0),
    Quantity("value", "value", "sequential", "the critic's value at that position; darker = higher",
             stops="blues"),
    Quantity("return", "return", "sequential", "the GAE return at that position; darker = higher",
             stops="blues"),
    Quantity("kl_reward", "KL reward", "diverging", "the KL part of the token's reward (-kl_coef x KL)"),
    Quantity("reward_per_token", "reward per token", "diverging",
             "the token's reward: its KL reward, plus the score on the last token"),
    Quantity("implicit_reward", "implicit reward", "diverging",
             "beta x (logprob - reference logprob): green = the policy prefers it more than the reference"),
    # A reward model read token by token: its pairs' sides, and an RL run's completions scored by one.
    Quantity("score", "score (prefix)", "diverging",
             "the reward model's score of the text up to this token (the last token's is the answer's reward): "
             "green above 0, pink below", note=OFF_DISTRIBUTION),
    Quantity("score_change", "score change", "diverging",
             "the score's change from the token before: green = the reward model thinks better of the answer "
             "after this token, pink = worse", note=OFF_DISTRIBUTION),
    Quantity("rm_score", "RM score (prefix)", "diverging",
             "the learned reward model's score of the completion up to this token (the last token's is its "
             "reward): green above 0, pink below", note=OFF_DISTRIBUTION),
    Quantity("rm_score_change", "RM score change", "diverging",
             "the reward model's score's change from the token before: green = it thinks better of the completion "
             "after this token, pink = worse", note=OFF_DISTRIBUTION),
)}


def quantity_note(key: str) -> str:
    """What to keep in mind while coloured by `key` ('' for most quantities)."""
    known = QUANTITIES.get(key)
    return known.note if known is not None else ""


def quantity(key: str, values: Iterable[np.ndarray] = ()) -> Quantity:
    """The spec of a quantity; one the inspector does not know yet is diverging when it
    has negative values, else sequential."""
    known = QUANTITIES.get(key)
    if known is not None:
        return known
    signed = any(np.nanmin(v) < 0 for v in values if v.size and np.isfinite(v).any())
    return Quantity(key, key.replace("_", " "), "diverging" if signed else "sequential",
                    f"{key} (per token, as recorded)")


def make_scale(q: Quantity, arrays: list[np.ndarray], scope: str) -> Scale:
    """The colour scale of a quantity over some tokens (the shown step's rollouts, or
    one rollout): diverging = symmetric, half-width max |value - centre|; sequential =
    from the anchor (or the other extreme) to the extreme on the loud side. `scope`
    is the words for where the tokens came from ("the 8 rollouts of step 12")."""
    values = np.concatenate([np.asarray(a, dtype=float) for a in arrays]) if arrays else np.empty(0)
    finite = values[np.isfinite(values)]
    note = ""
    if q.kind == "sequential" and q.anchor is not None and finite.size:
        # Values on both sides of the anchor (a k1 KL estimate below 0): a one-sided map
        # would hide them, so the quantity is shown diverging around the anchor.
        if (finite.min() < q.anchor) if q.loud == "high" else (finite.max() > q.anchor):
            q = replace(q, kind="diverging", centre=q.anchor)
            note = f" (values on both sides of {q.anchor:g}: diverging)"
    if q.kind == "diverging":
        s = symmetric_scale(finite, q.centre)
        centre = f"{q.centre:g} ± " if q.centre else "±"
        how = f"{centre}{_num(s)} = max |{q.label}{f' - {q.centre:g}' if q.centre else ''}| over {scope}{note}"
        return Scale("diverging", centre=q.centre, scale=s, how=how)
    if not finite.size:
        return Scale("sequential", quiet=0.0, loud=0.0, stops=q.stops, how=f"no values in {scope}")
    lo, hi = float(finite.min()), float(finite.max())
    if q.loud_at is not None:  # a fixed range (a probability's 1 to 0), whatever the tokens hold
        quiet = q.anchor if q.anchor is not None else (hi if q.loud == "low" else lo)
        loud = q.loud_at
        how = f"pale {_num(quiet)} to dark {_num(loud)} (fixed)"
    elif q.loud == "low":
        quiet = q.anchor if q.anchor is not None else hi
        loud = lo
        how = f"pale {_num(quiet)} to dark {_num(loud)} (the lowest {q.label} over {scope})"
    else:
        quiet = q.anchor if q.anchor is not None else lo
        loud = hi
        how = f"pale {_num(quiet)} to dark {_num(loud)} (the highest {q.label} over {scope})"
    return Scale("sequential", quiet=quiet, loud=loud, stops=q.stops, how=how)


def _num(value: Any) -> str:
    """A number as the inspector prints it: 4 significant digits, null for missing."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    if not math.isfinite(value):
        return "null"
    return f"{value:.4g}"


def _int(value: Any, default: int = 0) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def step_scale(records: list[Trajectory], key: str, scope_step: int | None = None) -> Scale:
    """The scale of a quantity over every record of a step (all sides)."""
    arrays = [a for r in records for a in r.values(key)]
    q = quantity(key, arrays)
    n = len(records)
    what = "pairs" if records and records[0].layout == PAIR else "rollouts"
    scope = f"the {n} recorded {what} of step {scope_step}" if scope_step is not None else f"{n} {what}"
    return make_scale(q, arrays, scope)


def group_scale(records: list[Trajectory], key: str, step: int | None, advantages: list[float]) -> Scale:
    """The Group page's scale: the step's recorded tokens and, for the advantage, every
    completion of the group (`advantages`, from the samples event: most completions are
    not recorded token by token, and a group's best answer may be among them)."""
    arrays = [a for r in records for a in r.values(key)]
    q = quantity(key, arrays)
    scope = f"the {len(records)} recorded rollouts of step {step}"
    if key == "advantage" and advantages:
        arrays.append(np.asarray(advantages, dtype=float))
        scope += f" and the {len(advantages)} completions of the group"
    return make_scale(q, arrays, scope)


def trajectory_scale(trajectory: Trajectory, key: str) -> Scale:
    arrays = trajectory.values(key)
    q = quantity(key, arrays)
    what = "this pair" if trajectory.layout == PAIR else "this rollout"
    return make_scale(q, arrays, what)


