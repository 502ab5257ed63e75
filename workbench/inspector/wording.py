"""How the inspector writes counts and signed numbers in its sentences. No Qt."""

from __future__ import annotations

import math

# Below this a signed quantity (an advantage, a mean Δ log p, a margin) is round-off,
# not a value: the mean of a group's normalised advantages comes out as 4.4e-16 or, in
# float32, 3e-8. The engine counts a Δ log p within 1e-6 as no movement.
NOISE = 1e-7


def signed(value, digits: int = 4) -> str:
    """A signed number with `digits` significant digits; round-off as 0; null when
    not a number.

    >>> signed(0.5), signed(-1.23456), signed(4.440892098500626e-16), signed(None), signed(float("nan"))
    ('+0.5', '-1.235', '0', 'null', 'null')
    >>> signed(2.5e-5, 3)
    '+2.5e-05'
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "null"
    if abs(value) < NOISE:
        return "0"
    return f"{value:+.{digits}g}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """`n` and the word, singular for one.

    >>> plural(1, "step"), plural(3, "step"), plural(0, "step"), plural(2, "match", "matches")
    ('1 step', '3 steps', '0 steps', '2 matches')
    """
    return f"{n} {word if n == 1 else many or word + 's'}"
