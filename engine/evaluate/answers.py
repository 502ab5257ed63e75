"""How maj@k reads a sample's answer: the task's verifier's own rule, so that answers the
verifier would call equal vote together and formatting does not split a vote.

- `exact_match`: the completion stripped (casefolded with case_sensitive: false), as the
  verifier compares it;
- `numeric_match`: the number it picks (the last, or with which: first the first), rounded
  to its tolerance; no number, no vote;
- `math_answer`: math-verify's reading of the final answer; two readings vote together when
  math-verify calls them equal (0.5 and \\frac{1}{2}); no answer, no vote.

`vote_keys(name, options)` gives a function from completions to their votes (hashable, or
None: no vote), or None for a verifier with no answer rule (maj@k is then not given).
"""

from __future__ import annotations

import math
import re
from typing import Callable

__all__ = ["vote_keys", "RULES"]

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")  # as numeric_match reads a number


def _exact(case_sensitive: bool = True, **_) -> Callable[[list[str]], list]:
    """The completion as exact_match compares it.

    >>> _exact()([" 1 2 ", "1 2", "x"])
    ['1 2', '1 2', 'x']
    """
    return lambda completions: [c.strip() if case_sensitive else c.strip().casefold() for c in completions]


def _numeric(which: str = "last", tolerance: float = 1e-6, **_) -> Callable[[list[str]], list]:
    """The number numeric_match picks, rounded to its tolerance.

    >>> _numeric()(["so 7.0", "7", "none", "-3 then 4"])
    [7.0, 7.0, None, 4.0]
    """
    pick = 0 if which == "first" else -1
    digits = max(0, -int(math.floor(math.log10(tolerance)))) if tolerance > 0 else 12

    def votes(completions: list[str]) -> list:
        out = []
        for c in completions:
            found = _NUMBER.findall(c)
            out.append(round(float(found[pick]), digits) + 0.0 if found else None)
        return out

    return votes


def _math(**_) -> Callable[[list[str]], list]:
    from engine.rewards import math_parse

    def votes(completions: list[str]) -> list:
        readings = [math_parse.parse_completion(c) for c in completions]
        classes: list[list] = []  # one reading per class of equal answers
        out = []
        for found in readings:
            if not found:
                out.append(None)
                continue
            for number, first in enumerate(classes):
                if math_parse.same_answer(first, found):
                    out.append(number)
                    break
            else:
                classes.append(found)
                out.append(len(classes) - 1)
        return out

    return votes


RULES: dict[str, Callable[..., Callable[[list[str]], list]]] = {
    "exact_match": _exact, "numeric_match": _numeric, "math_answer": _math}


def vote_keys(name: str | None, options: dict | None = None) -> Callable[[list[str]], list] | None:
    """The answer rule of the verifier `name` built with its preset options, or None.

    >>> vote_keys("exact_match")([" 4", "4 "]), vote_keys("sort_position") is None
    (['4', '4'], True)
    """
    rule = RULES.get(name or "")
    return rule(**(options or {})) if rule else None
