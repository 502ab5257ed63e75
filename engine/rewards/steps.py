"""Step rewards: a reward that scores each step of a completion, not only its end.

Per completion a reward returns one of:

* a number: an *outcome* reward, the completion's one score (as every reward did before);
* a list of steps, each item either
  - a number: the score of the k-th step of the completion split at the entry's
    ``step_delimiter`` (default ``"\\n"``; the count must equal the number of steps), or
  - a pair ``(end, score)`` or a dict ``{"end": int, "score": float}``: ``end`` is the
    step's exclusive end character offset in the completion (0 <= end <= len(text)),
    strictly increasing from step to step.
  An empty list is allowed: no steps.

A component is a *step component* when the reward declares ``returns_steps = True`` or
returns a list for any completion of a batch; a plain number inside a step component is
one step ending at the end of the text (:func:`outcome_as_step`). Its value for a
completion, logged as ``rewards/<label>/mean`` and summed into the total with its
weight, is :func:`step_mean`. The trainer places each step on the completion token that
ends it (:func:`token_step_ends`).

Torch-free; engine/rewards/combine.py checks a batch's outputs with these functions.

Example:
    >>> split_step_ends("3+4=7\\n7*2=14", "\\n")
    [6, 12]
    >>> checked_step_scores("reward component 'x'", [1.0, 0.0], "3+4=7\\n7*2=14", "\\n", 0)
    [(6, 1.0), (12, 0.0)]
    >>> step_mean([(6, 1.0), (12, 0.0)])
    0.5
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, Sequence

from engine.rewards.base import RewardError

__all__ = [
    "StepScore",
    "STEP_DELIMITER_DEFAULT",
    "FLOAT32_MAX",
    "split_step_ends",
    "checked_step_scores",
    "outcome_as_step",
    "step_mean",
    "returns_steps",
    "token_step_ends",
]

StepScore = tuple[int, float]
"""One step of a completion: (exclusive end character offset, score)."""

STEP_DELIMITER_DEFAULT = "\n"
"""Where a list of bare numbers splits a completion when its entry sets no
``step_delimiter``: one line, one step."""

FLOAT32_MAX = 3.4028234663852886e38
"""torch.finfo(torch.float32).max (written out: this module does not import torch). The
trainer holds rewards in float32: a larger finite value would become inf there."""

_FORMS = "a number, or a list of steps (numbers, (end, score) pairs or {'end': ..., 'score': ...} dicts)"


def split_step_ends(text: str, delimiter: str) -> list[int]:
    """The exclusive end offsets of the steps of ``text`` split at ``delimiter``.

    The delimiter belongs to the step it ends; the piece after the last delimiter is
    one more step when it is not empty; an empty text is one (empty) step.

    Example:
        >>> split_step_ends("a\\nb", "\\n"), split_step_ends("a\\nb\\n", "\\n"), split_step_ends("abc", "\\n")
        ([2, 3], [2, 4], [3])
        >>> split_step_ends("", "\\n"), split_step_ends("x\\n\\ny", "\\n\\n")
        ([0], [3, 4])
    """
    if not delimiter:
        raise ValueError("step delimiter must not be empty")
    ends, start = [], 0
    while (found := text.find(delimiter, start)) != -1:
        start = found + len(delimiter)
        ends.append(start)
    if start < len(text) or not ends:
        ends.append(len(text))
    return ends


def _plain(value: object) -> object:
    """numpy arrays and scalars, torch tensors (anything with ``tolist``) as plain Python."""
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) and not isinstance(value, (str, bytes)) else value


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real)


def _checked_score(described: str, value: object, where: str) -> float:
    """``value`` as a float, or RewardError: a score must be a finite real number that
    float32 holds. ``where`` says which score (``for completion 2``, ``for step 1 of
    completion 2``)."""
    if _is_number(value):
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an int too large for a float: the size check below refuses it
            finite = True
        if finite and abs(value) <= FLOAT32_MAX:
            return float(value)
        if finite:
            raise RewardError(
                f"{described} returned {value!r} {where}; too large: training holds rewards in float32, "
                f"where it would be inf; keep every score within +-{FLOAT32_MAX:.4g}."
            )
    raise RewardError(
        f"{described} returned {value!r} {where}; every score must be a finite real number "
        f"(no None, NaN or inf)."
    )


def _located_step(described: str, step: object, k: int, index: int) -> tuple[object, object]:
    """(end, score) of a pair or dict step, unchecked; RewardError for any other shape."""
    step = _plain(step)
    where = f"step {k} of completion {index}"
    if isinstance(step, dict):
        if set(step) != {"end", "score"}:
            raise RewardError(
                f"{described} returned a step dict with keys {sorted(map(str, step))} for {where}; "
                f"a step dict has exactly the keys 'end' and 'score', e.g. {{'end': 12, 'score': 1.0}}."
            )
        return step["end"], step["score"]
    if isinstance(step, (list, tuple)) and len(step) == 2:
        return step[0], step[1]
    raise RewardError(
        f"{described} returned {step!r} as {where}; a step is a number, an (end, score) pair "
        f"or a dict {{'end': ..., 'score': ...}}."
    )


def _checked_end(described: str, end: object, previous: int, text: str, k: int, index: int) -> int:
    """A step's end offset: an int in [0, len(text)], above the previous step's end."""
    where = f"step {k} of completion {index}"
    if not isinstance(end, numbers.Integral) or isinstance(end, bool):
        raise RewardError(
            f"{described} returned end {end!r} for {where}; an end is an int, the character "
            f"offset in the completion just after the step."
        )
    if not 0 <= end <= len(text):
        raise RewardError(
            f"{described} returned end {end} for {where}, whose text has {len(text)} characters; "
            f"an end is a character offset from 0 to {len(text)} (len of the completion)."
        )
    if end <= previous:
        raise RewardError(
            f"{described} returned end {end} for {where} after end {previous} for step {k - 1}; "
            f"the ends of a completion's steps must strictly increase (steps in order, none empty "
            f"but possibly the first)."
        )
    return int(end)


def checked_step_scores(
    described: str, item: object, text: str, delimiter: str | None, index: int
) -> list[StepScore] | None:
    """One completion's reward as checked steps, or None when it is a number (an outcome).

    ``described`` names the component in messages (:func:`engine.rewards.combine.describe_component`),
    ``item`` is what it returned for completion ``index`` (whose text is ``text``), and
    ``delimiter`` splits the text for a list of bare numbers (None: ``"\\n"``). A list is
    all numbers or all located steps ((end, score) pairs, ``{"end", "score"}`` dicts).
    Problems raise RewardError naming the component, the completion and how to fix it.

    Example:
        >>> checked_step_scores("reward component 'x'", [1, 0.5], "a\\nb\\n", None, 0)
        [(2, 1.0), (4, 0.5)]
        >>> checked_step_scores("reward component 'x'", [(1, 1.0), {"end": 3, "score": 0}], "abc", None, 0)
        [(1, 1.0), (3, 0.0)]
        >>> checked_step_scores("reward component 'x'", 0.5, "abc", None, 0) is None
        True
        >>> checked_step_scores("reward component 'x' (my.py:f)", [1, 0, 1], "a\\nb", None, 2)
        Traceback (most recent call last):
        ...
        engine.rewards.base.RewardError: reward component 'x' (my.py:f) returned 3 step scores for completion 2, which splits into 2 steps at '\\n' (step_delimiter); return one score per step, or (end, score) pairs.
    """
    item = _plain(item)
    if _is_number(item):
        return None
    if not isinstance(item, (list, tuple)):
        raise RewardError(
            f"{described} returned {type(item).__name__} {item!r} for completion {index}; "
            f"each completion's reward must be {_FORMS}."
        )
    steps = [_plain(step) for step in item]
    numbered = [_is_number(step) for step in steps]
    if all(numbered):
        delimiter = delimiter or STEP_DELIMITER_DEFAULT
        ends = split_step_ends(text, delimiter) if steps else []
        if len(steps) != len(ends):
            raise RewardError(
                f"{described} returned {len(steps)} step scores for completion {index}, which splits "
                f"into {len(ends)} steps at {delimiter!r} (step_delimiter); return one score per step, "
                f"or (end, score) pairs."
            )
        return [(end, _checked_score(described, score, f"for step {k} of completion {index}"))
                for k, (end, score) in enumerate(zip(ends, steps))]
    if any(numbered):
        raise RewardError(
            f"{described} returned a list mixing numbers and (end, score) steps for completion {index}; "
            f"use one form per completion: all scores (split at the step_delimiter) or all (end, score) pairs."
        )
    checked, previous = [], -1
    for k, step in enumerate(steps):
        end, score = _located_step(described, step, k, index)
        previous = _checked_end(described, end, previous, text, k, index)
        checked.append((previous, _checked_score(described, score, f"for step {k} of completion {index}")))
    return checked


def outcome_as_step(described: str, value: object, text: str, index: int) -> list[StepScore]:
    """A number a step component returned for a completion: one step ending at the end
    of the text (RewardError unless a finite float32 number).

    Example:
        >>> outcome_as_step("reward component 'x'", 1, " 1 2", 0)
        [(4, 1.0)]
    """
    return [(len(text), _checked_score(described, _plain(value), f"for completion {index}"))]


def step_mean(steps: list[StepScore]) -> float:
    """A step component's value for one completion: the mean of its step scores, 0.0
    for no steps. It is logged as ``rewards/<label>/mean`` and weighted into the total.

    Example:
        >>> step_mean([(2, 1.0), (4, 0.0), (6, 0.0)]), step_mean([])
        (0.3333333333333333, 0.0)
    """
    return math.fsum(score for _, score in steps) / len(steps) if steps else 0.0


def returns_steps(reward: object) -> bool:
    """Whether ``reward`` declares that it scores steps (``returns_steps = True``: the
    built-in step rewards, a process reward model, an entry that sets ``step_delimiter``).

    Example:
        >>> from engine.rewards.builtin import exact_match, sort_steps
        >>> returns_steps(exact_match()), returns_steps(sort_steps())
        (False, True)
    """
    return bool(getattr(reward, "returns_steps", False))


def token_step_ends(
    decode: Callable[[Sequence[int]], str], ids: Sequence[int], char_ends: Sequence[int], text_length: int
) -> list[int]:
    """Each step's end character offset mapped to the index of the completion token that
    ends the step: the smallest k with ``len(decode(ids[:k+1])) >= end``. An end at or
    past ``text_length`` (the decoded completion's length) maps to the last token, so the
    step that ends the text ends on the last token, its end-of-sequence token included.

    ``decode`` is e.g. ``lambda ids: tokenizer.decode(ids, skip_special_tokens=True)``;
    ``char_ends`` ascend (as :func:`checked_step_scores` returns them). Binary search:
    about ``len(char_ends) * log2(len(ids))`` decodes. ValueError when ``ids`` is empty
    (no token to put a step on).

    Example (ids are character codes; token 0 is an end token that decodes to nothing):
        >>> decode = lambda ids: "".join(chr(i) for i in ids if i)
        >>> ids = [ord(c) for c in "a\\nbc\\n"] + [0]
        >>> token_step_ends(decode, ids, [2, 5], text_length=5)
        [1, 5]
    """
    if not ids:
        if not char_ends:
            return []
        raise ValueError("a completion with no tokens has no token to end a step on")
    last = len(ids) - 1
    tokens, low = [], 0
    for end in char_ends:
        if end >= text_length:
            tokens.append(last)
            continue
        high = last  # len(decode(ids)) >= text_length > end: the answer is at most `last`
        while low < high:
            middle = (low + high) // 2
            if len(decode(ids[: middle + 1])) >= end:
                high = middle
            else:
                low = middle + 1
        tokens.append(low)  # the next end is larger: its token is not before this one
    return tokens
