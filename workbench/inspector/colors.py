"""Colour maps of the trajectory inspector, as pure functions (no Qt).

Two kinds of map, each a piecewise-linear ramp through a few ColorBrewer colours:

- **diverging** for signed quantities (advantage, implicit reward, PPO's per-token
  rewards; ratio, centred at 1): the centre value is a neutral near-white, values below
  it go pink, values above go green, and the scale is symmetric: `-scale` and `+scale`
  get colours of the same lightness, equally far from the centre (pink/green after
  ColorBrewer's PiYG, which stays distinct for the common forms of colour blindness,
  and keeps the samples table's green-is-positive).
- **sequential** for one-sided quantities (logprob, entropy, KL, value, return): from
  a near-white "quiet" end to a dark "loud" end (YlOrRd for the surprise family,
  Blues for the critic's values).

Values past the scale saturate; a null (NaN) value gets its own grey. The text colour
on any background is black or white, whichever contrasts more (WCAG luminance), so
text stays readable on every background.

Everything here works on plain floats and hex strings; `lut_indices` maps a whole
numpy array at once onto a 257-entry lookup table (the views turn the table into
QColors once, so recolouring 2,000 tokens is a numpy operation and a list lookup).

>>> diverging_hex(0.0, 1.0)
'#f7f7f7'
>>> diverging_hex(-1.0, 1.0), diverging_hex(1.0, 1.0)
('#a9006b', '#2f6300')
>>> text_hex('#2f6300'), text_hex('#f7f7f7')
('#ffffff', '#000000')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# Pink to green through a neutral grey-white, after ColorBrewer's PiYG but balanced in
# lightness: stop k on either side has CIELAB L* = 97 - 12k (chroma rising, clipped to
# the sRGB gamut), so -v and +v are exactly as light, i.e. equally loud.
DIVERGING_STOPS = ("#a9006b", "#c64188", "#dc6fa4", "#ef9ac0", "#ffc4dd", "#f7f7f7",
                   "#c5dcae", "#9cbe7b", "#73a04c", "#498319", "#2f6300")
# ColorBrewer YlOrRd (quiet pale yellow to loud dark red) and Blues.
SEQUENTIAL_STOPS = {
    "heat": ("#ffffe5", "#fff7bc", "#fee391", "#fec44f", "#fe9929", "#ec7014", "#cc4c02", "#993404", "#662506"),
    "blues": ("#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b"),
}
NULL_HEX = "#d4d4d4"  # a token whose value is null (NaN): grey, darker than the centre
LUT_SIZE = 257  # odd: entry 128 is exactly the diverging centre
NULL_INDEX = LUT_SIZE  # lut_indices gives this to NaN; tables have LUT_SIZE + 1 entries


# ------------------------------------------------------------------ hex and RGB


def hex_to_rgb(colour: str) -> tuple[int, int, int]:
    """'#ff8000' -> (255, 128, 0)."""
    colour = colour.lstrip("#")
    return int(colour[0:2], 16), int(colour[2:4], 16), int(colour[4:6], 16)


def rgb_to_hex(rgb: Sequence[float]) -> str:
    return "#" + "".join(f"{max(0, min(255, int(round(c)))):02x}" for c in rgb)


def _ramp(stops: Sequence[str], t: float) -> str:
    """The colour at t in [0, 1] along the stops (linear in sRGB between stops)."""
    t = 0.0 if t != t else min(1.0, max(0.0, t))  # t != t: NaN
    pos = t * (len(stops) - 1)
    i = min(int(pos), len(stops) - 2)
    f = pos - i
    a, b = hex_to_rgb(stops[i]), hex_to_rgb(stops[i + 1])
    return rgb_to_hex([a[k] + (b[k] - a[k]) * f for k in range(3)])


def relative_luminance(colour: str) -> float:
    """WCAG relative luminance of an sRGB colour, 0 (black) to 1 (white)."""
    def channel(c: int) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = hex_to_rgb(colour)
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two colours (1 to 21)."""
    la, lb = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def text_hex(background: str) -> str:
    """Black or white text, whichever contrasts more with the background."""
    return "#000000" if contrast(background, "#000000") >= contrast(background, "#ffffff") else "#ffffff"


# ------------------------------------------------------------------ the maps


def diverging_hex(value: float | None, scale: float, centre: float = 0.0) -> str:
    """Colour of a signed value: `centre` is neutral, `centre - scale` the darkest pink,
    `centre + scale` the darkest green, symmetric around the centre; past the scale it
    saturates. A scale of 0 (every value at the centre) shows everything neutral."""
    if value is None or value != value:
        return NULL_HEX
    if not scale > 0 or not math.isfinite(scale):
        return DIVERGING_STOPS[len(DIVERGING_STOPS) // 2] if value == centre or not scale > 0 \
            else DIVERGING_STOPS[-1 if value > centre else 0]
    return _ramp(DIVERGING_STOPS, 0.5 + 0.5 * (value - centre) / scale)


def sequential_hex(value: float | None, quiet: float, loud: float, stops: str = "heat") -> str:
    """Colour of a value on a one-sided scale from `quiet` (palest) to `loud` (darkest);
    either may be the larger (logprob: quiet = 0, loud = the lowest logprob)."""
    if value is None or value != value:
        return NULL_HEX
    span = loud - quiet
    t = 0.0 if span == 0 else (value - quiet) / span
    return _ramp(SEQUENTIAL_STOPS[stops], t)


@dataclass(frozen=True)
class Scale:
    """How values of one quantity become colours.

    kind "diverging": centre, half-width `scale` (symmetric); kind "sequential": the
    `quiet` and `loud` ends. `how` says in words where the numbers came from (the legend
    prints it)."""

    kind: str
    centre: float = 0.0
    scale: float = 1.0
    quiet: float = 0.0
    loud: float = 1.0
    stops: str = "heat"
    how: str = ""

    @property
    def low(self) -> float:
        return self.centre - self.scale if self.kind == "diverging" else min(self.quiet, self.loud)

    @property
    def high(self) -> float:
        return self.centre + self.scale if self.kind == "diverging" else max(self.quiet, self.loud)

    def hex(self, value: float | None) -> str:
        if self.kind == "diverging":
            return diverging_hex(value, self.scale, self.centre)
        return sequential_hex(value, self.quiet, self.loud, self.stops)

    def position(self, value: float) -> float:
        """Where a value sits along the colour ramp, 0 to 1 (for the legend's marks)."""
        if self.kind == "diverging":
            t = 0.5 + 0.5 * (value - self.centre) / self.scale if self.scale > 0 else 0.5
        else:
            span = self.loud - self.quiet
            t = 0.0 if span == 0 else (value - self.quiet) / span
        return min(1.0, max(0.0, t))

    def table(self) -> list[str]:
        """LUT_SIZE + 1 hex colours: the ramp sampled evenly, then the null grey.
        `lut_indices` maps values onto it."""
        if self.kind == "diverging":
            ramp = [_ramp(DIVERGING_STOPS, i / (LUT_SIZE - 1)) for i in range(LUT_SIZE)]
        else:
            ramp = [_ramp(SEQUENTIAL_STOPS[self.stops], i / (LUT_SIZE - 1)) for i in range(LUT_SIZE)]
        return ramp + [NULL_HEX]

    def gradient(self, count: int = 11) -> list[str]:
        """`count` colours from the low end of the values to the high end (the legend).
        For a sequential map whose loud end is the low one (logprob) the ramp runs dark
        to pale."""
        out = []
        for i in range(count):
            value = self.low + (self.high - self.low) * i / (count - 1)
            out.append(self.hex(value))
        return out


def lut_indices(values: np.ndarray, scale: Scale) -> np.ndarray:
    """Each value's entry in `scale.table()` (NULL_INDEX for NaN), for a whole array.

    The same rounding as the scalar maps up to one table step (1/256 of the ramp)."""
    values = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        if scale.kind == "diverging":
            if scale.scale > 0 and math.isfinite(scale.scale):
                t = 0.5 + 0.5 * (values - scale.centre) / scale.scale
            else:
                t = np.where(values > scale.centre, 1.0, np.where(values < scale.centre, 0.0, 0.5))
        else:
            span = scale.loud - scale.quiet
            t = (values - scale.quiet) / span if span else np.zeros_like(values)
        idx = np.rint(np.clip(t, 0.0, 1.0) * (LUT_SIZE - 1))
    idx = np.where(np.isnan(values), NULL_INDEX, idx)
    return idx.astype(np.int64)


def symmetric_scale(values: np.ndarray, centre: float = 0.0) -> float:
    """Half-width of a diverging scale: the largest |value - centre| (finite values),
    so the most extreme token gets the darkest colour and both sides share one scale.
    0 when there is no finite value (everything neutral).

    >>> symmetric_scale(np.array([-1.0, 3.0, np.nan]))
    3.0
    """
    values = np.asarray(values, dtype=float)
    finite = values[np.isfinite(values)]
    return float(np.max(np.abs(finite - centre))) if finite.size else 0.0
