"""The inspector's colour maps, as pure functions: diverging maps put negative and
positive values on opposite sides of a neutral centre with a symmetric scale,
sequential maps run pale to dark, nulls have their own colour, and text stays readable
on every background."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.inspector.colors import (
    DIVERGING_STOPS,
    LUT_SIZE,
    NULL_HEX,
    NULL_INDEX,
    Scale,
    contrast,
    diverging_hex,
    hex_to_rgb,
    lut_indices,
    relative_luminance,
    sequential_hex,
    symmetric_scale,
    text_hex,
)
from workbench.inspector.quantities import QUANTITIES, make_scale, quantity

NEUTRAL = DIVERGING_STOPS[len(DIVERGING_STOPS) // 2]


def distance(a: str, b: str) -> float:
    return float(np.linalg.norm(np.subtract(hex_to_rgb(a), hex_to_rgb(b))))


def greenness(colour: str) -> int:
    r, g, b = hex_to_rgb(colour)
    return g - r


def test_zero_is_neutral_and_signs_are_on_opposite_sides():
    assert diverging_hex(0.0, 2.0) == NEUTRAL
    for v in (0.1, 0.5, 1.0, 2.0):
        pos, neg = diverging_hex(v, 2.0), diverging_hex(-v, 2.0)
        assert greenness(pos) > 0 > greenness(neg), (v, pos, neg)  # green up, pink down
    # Further from 0, further from neutral, on each side.
    pos = [distance(diverging_hex(v, 2.0), NEUTRAL) for v in (0.25, 0.5, 1.0, 2.0)]
    neg = [distance(diverging_hex(-v, 2.0), NEUTRAL) for v in (0.25, 0.5, 1.0, 2.0)]
    assert pos == sorted(pos) and neg == sorted(neg)


def test_the_diverging_scale_is_symmetric():
    for v in (0.1, 0.3, 0.5, 1.0, 1.7, 2.0):
        # Equal magnitudes get colours of the same lightness: neither side looks louder.
        assert relative_luminance(diverging_hex(v, 2.0)) == pytest.approx(
            relative_luminance(diverging_hex(-v, 2.0)), rel=0.05, abs=0.01)
    # The scale: max |value|, the same half-width on both sides.
    assert symmetric_scale(np.array([-0.5, 3.0, np.nan])) == 3.0
    scale = make_scale(QUANTITIES["advantage"], [np.array([-0.5, 3.0])], "test")
    assert (scale.low, scale.centre, scale.high) == (-3.0, 0.0, 3.0)
    assert scale.hex(3.0) == DIVERGING_STOPS[-1] and scale.hex(-3.0) == DIVERGING_STOPS[0]
    assert "max |advantage|" in scale.how and "±3" in scale.how
    # Past the scale it saturates; a zero scale leaves everything neutral.
    assert diverging_hex(10.0, 1.0) == DIVERGING_STOPS[-1] and diverging_hex(-10.0, 1.0) == DIVERGING_STOPS[0]
    assert diverging_hex(0.0, 0.0) == NEUTRAL


def test_ratio_is_centred_at_one():
    scale = make_scale(QUANTITIES["ratio"], [np.array([0.8, 1.0, 1.1])], "test")
    assert scale.centre == 1.0 and scale.scale == pytest.approx(0.2)
    assert scale.hex(1.0) == NEUTRAL
    assert greenness(scale.hex(1.1)) > 0 > greenness(scale.hex(0.9))


def test_sequential_maps_run_pale_to_dark_toward_the_loud_end():
    # Entropy: pale at 0, dark at the highest.
    entropy = make_scale(QUANTITIES["entropy"], [np.array([0.1, 0.5, 2.0])], "test")
    assert (entropy.quiet, entropy.loud) == (0.0, 2.0)
    lum = [relative_luminance(entropy.hex(v)) for v in (0.0, 0.5, 1.0, 2.0)]
    assert lum == sorted(lum, reverse=True)
    # Logprob: pale at 0 (certain), dark at the lowest (surprising).
    logprob = make_scale(QUANTITIES["logprob"], [np.array([-4.0, -0.1, -1.0])], "test")
    assert (logprob.quiet, logprob.loud) == (0.0, -4.0)
    assert relative_luminance(logprob.hex(-4.0)) < relative_luminance(logprob.hex(-0.1))
    assert "lowest logprob" in logprob.how
    # Value (PPO): its own (blue) ramp over its range.
    value = make_scale(QUANTITIES["value"], [np.array([0.2, 0.9])], "test")
    assert (value.quiet, value.loud) == (0.2, 0.9) and value.stops == "blues"
    assert sequential_hex(0.9, 0.2, 0.9, "blues") == "#08306b"


def test_null_values_have_their_own_colour():
    assert diverging_hex(None, 1.0) == NULL_HEX
    assert diverging_hex(float("nan"), 1.0) == NULL_HEX
    assert sequential_hex(None, 0.0, 1.0) == NULL_HEX
    assert NULL_HEX != NEUTRAL


def test_lookup_table_agrees_with_the_scalar_maps():
    values = np.array([-2.0, -0.7, 0.0, 0.3, 1.9, np.nan])
    for scale in (Scale("diverging", scale=2.0), Scale("diverging", centre=1.0, scale=0.5),
                  Scale("sequential", quiet=0.0, loud=-3.0), Scale("sequential", quiet=0.0, loud=2.0, stops="blues")):
        table = scale.table()
        assert len(table) == LUT_SIZE + 1 and table[NULL_INDEX] == NULL_HEX
        idx = lut_indices(values, scale)
        assert idx[-1] == NULL_INDEX
        for v, i in zip(values[:-1], idx[:-1]):
            # One table step (1/256 of the ramp) at most from the exact colour.
            assert distance(table[i], scale.hex(v)) <= 3.0, (scale, v)
    assert lut_indices(np.array([0.0]), Scale("diverging", scale=1.0))[0] == (LUT_SIZE - 1) // 2


def test_text_stays_readable_on_every_background():
    for scale in (Scale("diverging", scale=1.0), Scale("sequential", quiet=0, loud=1),
                  Scale("sequential", quiet=0, loud=1, stops="blues")):
        for colour in scale.table():
            # WCAG AA for large text (3:1) everywhere; most of the ramp reaches 4.5:1.
            assert contrast(colour, text_hex(colour)) >= 4.0, colour
    assert text_hex("#000000") == "#ffffff" and text_hex("#ffffff") == "#000000"


def test_unknown_quantities_get_a_map_by_their_sign():
    assert quantity("new_signed", [np.array([-1.0, 2.0])]).kind == "diverging"
    assert quantity("new_positive", [np.array([1.0, 2.0])]).kind == "sequential"


def test_a_one_sided_quantity_with_values_past_its_anchor_turns_diverging():
    # A k1 KL estimate can be below 0: a pale-at-0 map would hide those tokens.
    scale = make_scale(QUANTITIES["kl"], [np.array([-0.2, 0.0, 0.5])], "test")
    assert scale.kind == "diverging" and scale.centre == 0.0 and scale.scale == 0.5
    assert "both sides" in scale.how
    assert make_scale(QUANTITIES["kl"], [np.array([0.0, 0.5])], "test").kind == "sequential"
