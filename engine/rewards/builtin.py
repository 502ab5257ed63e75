"""The registry rewards: verifiable rewards built from named factories.

A factory takes keyword-only options (all with defaults) and returns the reward
callable (see engine/rewards/base.py for its shape), so a preset can name a reward
plus options and :func:`build_reward` checks them (engine/foundation/registry.py: the factory's
signature is its option list).

Example:
    >>> reward = build_reward("exact_match")
    >>> reward(["sort 2 1 ="], [" 1 2"], answer=[" 1 2"])
    [1.0]
"""

from __future__ import annotations

import numbers
import re
from collections import Counter

import engine.rewards.math_parse as math_parse
from engine.foundation.registry import Registry
from engine.rewards.base import MissingFieldError, RewardError, RewardFunc

__all__ = [
    "REWARDS",
    "build_reward",
    "exact_match",
    "numeric_match",
    "regex_format",
    "sort_position",
    "sort_inclusion_order",
    "length_penalty",
    "math_answer",
    "think_answer_format",
    "sort_steps",
]


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_DIGIT = re.compile(r"\d")
# A block's inside: anything but a think or answer tag (each tag appears once).
_BLOCK = r"(?:(?!</?(?:think|answer)>).)*"
_THINK_ANSWER = re.compile(rf"\s*<think>{_BLOCK}</think>\s*<answer>{_BLOCK}</answer>\s*", re.S)
_MAYBE_THINK_ANSWER = re.compile(rf"\s*(?:<think>{_BLOCK}</think>\s*)?<answer>{_BLOCK}</answer>\s*", re.S)


def _column(reward: str, fields: dict, name: str, size: int) -> list:
    """Return field ``name`` checked to be a list aligned with the prompts."""
    if name not in fields:
        found = ", ".join(repr(k) for k in fields) or "none"
        raise MissingFieldError(
            f"reward {reward!r} needs the field {name!r} but the data has "
            f"{found}; add that column or set the reward's answer_field option."
        )
    column = fields[name]
    if len(column) != size:
        raise RewardError(
            f"reward {reward!r}: field {name!r} has {len(column)} values for "
            f"{size} completions; every field must be aligned with the prompts."
        )
    return list(column)


def _digits(text: str) -> list[str]:
    """Every decimal digit in ``text``, in order.

    Example:
        >>> _digits(" 1 10 x3")
        ['1', '1', '0', '3']
    """
    return _DIGIT.findall(text)


def _parse_number(text: object) -> float | None:
    """Read a reference answer as a number (int, float or numeric string).

    Example:
        >>> _parse_number(" -16"), _parse_number(3), _parse_number("n/a")
        (-16.0, 3.0, None)
    """
    if isinstance(text, numbers.Real) and not isinstance(text, bool):
        return float(text)
    try:
        return float(str(text).strip())
    except ValueError:
        return None


# ---------------------------------------------------------------------------
# Reward factories
# ---------------------------------------------------------------------------


def exact_match(*, answer_field: str = "answer", case_sensitive: bool = True) -> RewardFunc:
    """1.0 when the completion equals the answer, ignoring surrounding whitespace.

    Example:
        >>> reward = exact_match()
        >>> reward(["p", "p"], [" 1 2 ", "1 3"], answer=[" 1 2", " 1 2"])
        [1.0, 0.0]
        >>> exact_match(case_sensitive=False)(["p"], ["Yes"], answer=["yes"])
        [1.0]
    """

    def normalise(text: object) -> str:
        text = str(text).strip()
        return text if case_sensitive else text.casefold()

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        answers = _column("exact_match", fields, answer_field, len(completions))
        return [
            1.0 if normalise(c) == normalise(a) else 0.0
            for c, a in zip(completions, answers)
        ]

    return reward


def numeric_match(
    *, answer_field: str = "answer", tolerance: float = 1e-6, which: str = "last"
) -> RewardFunc:
    """1.0 when a number in the completion equals the answer within ``tolerance``.

    ``which`` picks the ``"last"`` number in the completion (the final answer
    after any working) or the ``"first"`` one.  A leading ``-`` counts as a
    sign, so ``"5-3"`` reads as the numbers 5 and -3.  No number, or an answer
    that is not numeric, scores 0.0.

    Example:
        >>> reward = numeric_match()
        >>> reward(["p"] * 3, [" -16", "so 2+3 = 5.0", "none"], answer=[" -16", "5", "5"])
        [1.0, 1.0, 0.0]
        >>> numeric_match(which="first")(["p"], ["7 then 8"], answer=[7])
        [1.0]
    """
    if which not in ("first", "last"):
        raise ValueError(f"reward 'numeric_match': which must be 'first' or 'last', got {which!r}.")
    if tolerance < 0:
        raise ValueError(f"reward 'numeric_match': tolerance must be >= 0, got {tolerance!r}.")
    pick = 0 if which == "first" else -1

    def score(completion: str, answer: object) -> float:
        expected = _parse_number(answer)
        found = _NUMBER.findall(completion)
        if expected is None or not found:
            return 0.0
        return 1.0 if abs(float(found[pick]) - expected) <= tolerance else 0.0

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        answers = _column("numeric_match", fields, answer_field, len(completions))
        return [score(c, a) for c, a in zip(completions, answers)]

    return reward


def regex_format(
    *, pattern: str = r"\s*-?\d+(?: -?\d+)*\s*", match: str = "fullmatch"
) -> RewardFunc:
    """1.0 when the completion matches ``pattern``.

    ``match="fullmatch"`` requires the whole completion to match;
    ``match="search"`` accepts a match anywhere.  The default pattern is "one or
    more space-separated integers", the shape of both built-in tasks' answers.

    Example:
        >>> reward = regex_format()
        >>> reward(["p"] * 3, [" 1 2 3", " 12", "1, 2"])
        [1.0, 1.0, 0.0]
        >>> regex_format(pattern=r"<answer>", match="search")(["p"], ["x <answer> y"])
        [1.0]
    """
    if match not in ("fullmatch", "search"):
        raise ValueError(
            f"reward 'regex_format': match must be 'fullmatch' or 'search', got {match!r}."
        )
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(
            f"reward 'regex_format': pattern {pattern!r} is not a valid regular expression: {exc}."
        ) from None
    matcher = compiled.fullmatch if match == "fullmatch" else compiled.search

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        return [1.0 if matcher(c) else 0.0 for c in completions]

    return reward


def sort_position(*, answer_field: str = "answer") -> RewardFunc:
    """Fraction of positions where the completion's digit equals the answer's.

    Only digits are compared (separators are ignored; pair this reward with
    :func:`regex_format` to reward the format).  The denominator is the longer
    of the two digit sequences, so extra or missing digits cost credit.

    Example:
        >>> reward = sort_position()
        >>> reward(["p"] * 4, [" 1 1 3 4", " 1 3 1 4", " 1 1", " 1 1 3 4 4"],
        ...        answer=[" 1 1 3 4"] * 4)
        [1.0, 0.5, 0.5, 0.8]
    """

    def score(completion: str, answer: object) -> float:
        got, expected = _digits(completion), _digits(str(answer))
        longest = max(len(got), len(expected))
        if longest == 0:
            return 1.0  # nothing was asked and nothing was given
        return sum(g == e for g, e in zip(got, expected)) / longest

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        answers = _column("sort_position", fields, answer_field, len(completions))
        return [score(c, a) for c, a in zip(completions, answers)]

    return reward


def sort_inclusion_order(
    *, answer_field: str = "answer", inclusion_weight: float = 0.5
) -> RewardFunc:
    """Partial credit for sorting: right digits, plus right order.

    * ``inclusion_weight`` (default half) when the completion's digits are
      exactly the answer's digits as a multiset (same digits, same counts);
    * the rest when the digits are in non-decreasing order -- only given when
      the completion has as many digits as the answer, so an empty or
      truncated output cannot collect it.

    A correct answer scores 1.0.

    Example:
        >>> reward = sort_inclusion_order()
        >>> reward(["p"] * 4, [" 1 2 3", " 3 1 2", " 1 2 2", ""], answer=[" 1 2 3"] * 4)
        [1.0, 0.5, 0.5, 0.0]
    """
    if not 0.0 <= inclusion_weight <= 1.0:
        raise ValueError(
            f"reward 'sort_inclusion_order': inclusion_weight must be in [0, 1], "
            f"got {inclusion_weight!r}."
        )

    def score(completion: str, answer: object) -> float:
        got, expected = _digits(completion), _digits(str(answer))
        credit = inclusion_weight if Counter(got) == Counter(expected) else 0.0
        in_order = all(a <= b for a, b in zip(got, got[1:]))
        if got and len(got) == len(expected) and in_order:
            credit += 1.0 - inclusion_weight
        return credit

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        answers = _column("sort_inclusion_order", fields, answer_field, len(completions))
        return [score(c, a) for c, a in zip(completions, answers)]

    return reward


def length_penalty(*, target: int = 16, per_char: float = 0.02) -> RewardFunc:
    """Negative reward, ``per_char`` for every character beyond ``target``.

    Completions of ``target`` characters or fewer get 0.0.  Use it with a
    small weight to discourage rambling without drowning the task reward.

    Example:
        >>> reward = length_penalty(target=4, per_char=0.5)
        >>> reward(["p"] * 2, ["abc", "abcdefg"])
        [0.0, -1.5]
    """
    if target < 0 or per_char < 0:
        raise ValueError(
            f"reward 'length_penalty': target and per_char must be >= 0, "
            f"got target={target!r}, per_char={per_char!r}."
        )

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        # ``0.0 - x`` rather than ``-x``: avoids a confusing -0.0 in logs.
        return [0.0 - per_char * max(0, len(c) - target) for c in completions]

    return reward


def math_answer(
    *, answer_field: str = "answer", wrong: float = 0.0, unparsable: float = 0.0
) -> RewardFunc:
    """1.0 when the completion's final answer equals the reference mathematically.

    math-verify (the ``math-verify`` package) reads the completion's answer: the
    last ``<answer>...</answer>`` block if there is one, else a ``\\boxed{}`` or
    the last expression; it compares it with the reference symbolically, so ``0.5``
    equals ``\\frac{1}{2}`` and ``1,000`` equals ``1000`` (see
    engine/rewards/math_parse.py).  A different answer scores ``wrong``; a
    completion with no answer in it scores ``unparsable``.  A reference with no
    answer in it is an error naming the field and the value.

    Example:
        >>> reward = build_reward("math_answer", unparsable=-1.0)
        >>> reward(["p"] * 4, [r"so \\boxed{72}", "It is 0.5.", "I get -7", "no idea"],
        ...        answer=["72", r"\\frac{1}{2}", 7, "8"])
        [1.0, 1.0, 0.0, -1.0]
    """
    if not math_parse.available():
        raise ValueError("reward 'math_answer' needs the math-verify package: pip install math-verify")

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        answers = _column("math_answer", fields, answer_field, len(completions))
        references: dict[str, list] = {}  # GRPO repeats each reference num_generations times
        scores = []
        for completion, answer in zip(completions, answers):
            key = str(answer)
            if key not in references:
                references[key] = math_parse.parse_bare(answer)
                if not references[key]:
                    raise RewardError(
                        f"reward 'math_answer': field {answer_field!r} holds {answer!r}, in which "
                        f"math-verify finds no answer; give a number or an expression, e.g. '72' "
                        f"or '\\frac{{1}}{{2}}'."
                    )
            found = math_parse.parse_completion(completion)
            if not found:
                scores.append(unparsable)
            else:
                scores.append(1.0 if math_parse.same_answer(references[key], found) else wrong)
        return scores

    return reward


def think_answer_format(*, require_think: bool = True) -> RewardFunc:
    """1.0 when the completion is a ``<think>...</think>`` block, then an
    ``<answer>...</answer>`` block, and nothing else but whitespace.

    Each tag appears exactly once, in that order: a tag inside a block, or text
    before, between or after the blocks, scores 0.0.  ``require_think=False``
    makes the think block optional (the answer block alone also scores 1.0).

    Example:
        >>> reward = build_reward("think_answer_format")
        >>> reward(["p"] * 3, ["<think>2+2</think>\\n<answer>4</answer>\\n", "<answer>4</answer>",
        ...                    "<think>2+2</think><answer>4</answer> so 4"])
        [1.0, 0.0, 0.0]
        >>> build_reward("think_answer_format", require_think=False)(["p"], [" <answer>4</answer>"])
        [1.0]
    """
    pattern = _THINK_ANSWER if require_think else _MAYBE_THINK_ANSWER

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        return [1.0 if pattern.fullmatch(c) else 0.0 for c in completions]

    return reward


def sort_steps(*, answer_field: str = "answer") -> RewardFunc:
    """A step reward for sorting: each digit the completion emits is a step, scored 1.0
    while the digits so far equal the answer's first digits, 0.0 from the first wrong
    (or extra) digit on.

    Each completion gets a list of ``(end, score)`` steps, ``end`` the character offset
    just after the digit (see engine/rewards/steps.py); no digits, no steps. As its
    ``rewards/sort_steps/mean`` (and in the total) a completion counts the mean of its
    step scores: the share of its digits emitted before the first mistake.

    Example:
        >>> reward = sort_steps()
        >>> reward(["p"] * 3, [" 1 2 3", " 1 3 2", " 1 2 3 4"], answer=[" 1 2 3"] * 3)
        [[(2, 1.0), (4, 1.0), (6, 1.0)], [(2, 1.0), (4, 0.0), (6, 0.0)], [(2, 1.0), (4, 1.0), (6, 1.0), (8, 0.0)]]
        >>> reward(["p"], ["none"], answer=[" 1 2"])
        [[]]
    """

    def steps(completion: str, answer: object) -> list[tuple[int, float]]:
        expected, scored, right = _digits(str(answer)), [], True
        for k, digit in enumerate(_DIGIT.finditer(completion)):
            right = right and k < len(expected) and digit.group() == expected[k]
            scored.append((digit.end(), 1.0 if right else 0.0))
        return scored

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[list[tuple[int, float]]]:
        answers = _column("sort_steps", fields, answer_field, len(completions))
        return [steps(c, a) for c, a in zip(completions, answers)]

    reward.returns_steps = True
    return reward


# The step rewards declare it on the factory, where the preset's checks read it without
# building (engine/rewards/kinds.py: is_step_reward_entry), and on the reward they build.
sort_steps.returns_steps = True


# The registry rewards (name -> factory, as a mapping), what a reward's `name` may be.
REWARDS: Registry = Registry("reward", field="rewards.N.name")
for _factory in (exact_match, numeric_match, regex_format, sort_position, sort_inclusion_order, length_penalty,
                 math_answer, think_answer_format, sort_steps):
    REWARDS.register(_factory.__name__, _factory)
del _factory


def build_reward(name: str, **options: object) -> RewardFunc:
    """Build the reward ``name`` with ``options``, checking names and types.

    Example:
        >>> build_reward("numeric_match", tolerance=0.5)(["p"], ["3.4"], answer=["3"])
        [1.0]
        >>> build_reward("numeric_match", tol=0.5)
        Traceback (most recent call last):
        ...
        ValueError: reward 'numeric_match' has no option 'tol'; allowed options: answer_field='answer', tolerance=1e-06, which='last'.
    """
    factory = REWARDS.factory(name)
    REWARDS.check_options(name, options)
    return factory(**options)
