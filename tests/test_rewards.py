"""Tests for engine.rewards: each reward against hand-checked values, building and combining."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from engine.rewards import (
    REWARDS,
    RewardError,
    build_reward,
    combine_rewards,
    exact_match,
    length_penalty,
    numeric_match,
    regex_format,
    reward_options,
    sort_inclusion_order,
    sort_position,
)


def score(reward, completions, answers=None, **extra):
    """Call a reward with dummy prompts, the way the trainer does."""
    fields = dict(extra)
    if answers is not None:
        fields["answer"] = answers
    return reward(["prompt"] * len(completions), completions, **fields)


# ---------------------------------------------------------------------------
# Individual rewards
# ---------------------------------------------------------------------------


def test_exact_match():
    assert score(exact_match(), [" 1 2 3", "1 2 3\n", " 1 2", ""], [" 1 2 3"] * 4) == [1.0, 1.0, 0.0, 0.0]


def test_exact_match_case_and_field_options():
    reward = exact_match(answer_field="label", case_sensitive=False)
    assert score(reward, ["YES", "no"], label=["yes", "yes"]) == [1.0, 0.0]


def test_exact_match_accepts_non_string_answers():
    assert score(exact_match(), ["20", "21"], [20, 20]) == [1.0, 0.0]


def test_rewards_accept_unknown_extra_fields():
    assert score(exact_match(), ["a"], ["a"], task=["sort"], id=[3]) == [1.0]


def test_numeric_match_last_and_first():
    completions = [" 20", " -16", "it is 4 then 5", "5.0", "no number", " 19"]
    answers = [" 20", " -16", "5", 5, "5", "20"]
    assert score(numeric_match(), completions, answers) == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert score(numeric_match(which="first"), ["it is 4 then 5"], ["5"]) == [0.0]


def test_numeric_match_tolerance_and_bad_answer():
    assert score(numeric_match(tolerance=0.5), ["3.4", "3.6"], ["3", "3"]) == [1.0, 0.0]
    assert score(numeric_match(), ["3"], ["three"]) == [0.0]


def test_regex_format_fullmatch_and_search():
    default = regex_format()
    assert score(default, [" 1 2 3", " 12", "-4", "1, 2", "1 2 x"]) == [1.0, 1.0, 1.0, 0.0, 0.0]
    search = regex_format(pattern=r"\d", match="search")
    assert score(search, ["abc 7", "abc"]) == [1.0, 0.0]


def test_regex_format_rejects_bad_pattern_and_mode():
    with pytest.raises(ValueError, match="not a valid regular expression"):
        regex_format(pattern="(")
    with pytest.raises(ValueError, match="'fullmatch' or 'search'"):
        regex_format(match="prefix")


def test_sort_position():
    answers = [" 1 1 3 4"] * 6
    completions = [" 1 1 3 4", " 1 3 1 4", " 1 1", " 1 1 3 4 4", "", " 4 3 1 1"]
    assert score(sort_position(), completions, answers) == [1.0, 0.5, 0.5, 0.8, 0.0, 0.0]


def test_sort_position_ignores_separators():
    assert score(sort_position(), ["1134", "1,1,3,4"], [" 1 1 3 4"] * 2) == [1.0, 1.0]


def test_sort_inclusion_order():
    answers = [" 1 2 3"] * 6
    completions = [" 1 2 3", " 3 1 2", " 1 2 2", " 1 2", "", " 9"]
    # right+sorted, right digits only, sorted only, too short (nothing), empty, wrong
    assert score(sort_inclusion_order(), completions, answers) == [1.0, 0.5, 0.5, 0.0, 0.0, 0.0]


def test_sort_inclusion_order_weight():
    reward = sort_inclusion_order(inclusion_weight=0.75)
    assert score(reward, [" 3 1 2", " 1 2 2"], [" 1 2 3"] * 2) == [0.75, 0.25]
    with pytest.raises(ValueError, match="inclusion_weight"):
        sort_inclusion_order(inclusion_weight=2.0)


def test_length_penalty():
    reward = length_penalty(target=4, per_char=0.5)
    assert score(reward, ["", "abcd", "abcdefg"]) == [0.0, 0.0, -1.5]
    default = length_penalty()
    assert score(default, ["x" * 16, "x" * 26]) == [0.0, pytest.approx(-0.2)]


def test_missing_answer_field_is_named():
    with pytest.raises(RewardError, match="reward 'exact_match' needs the field 'answer'.*'label'"):
        exact_match()(["p"], ["x"], label=["x"])


def test_misaligned_field_is_named():
    with pytest.raises(RewardError, match="field 'answer' has 2 values for 1 completions"):
        sort_position()(["p"], ["x"], answer=["a", "b"])


def test_rewards_module_does_not_import_torch():
    code = "import sys, engine.rewards; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# ---------------------------------------------------------------------------
# Registry, building
# ---------------------------------------------------------------------------


def test_registry_contents():
    assert set(REWARDS) == {
        "math_answer",
        "think_answer_format",
        "exact_match",
        "numeric_match",
        "regex_format",
        "sort_position",
        "sort_inclusion_order",
        "sort_steps",
        "length_penalty",
    }


@pytest.mark.parametrize("name", [n for n in sorted(REWARDS) if not getattr(REWARDS[n], "returns_steps", False)])
def test_every_reward_builds_with_defaults_and_returns_floats(name):
    reward = build_reward(name)
    values = score(reward, [" 1 2", "x"], [" 1 2", " 1 2"])
    assert len(values) == 2 and all(isinstance(v, float) and math.isfinite(v) for v in values)


def test_reward_options():
    assert reward_options("numeric_match") == {"answer_field": "answer", "tolerance": 1e-6, "which": "last"}
    assert reward_options("length_penalty") == {"target": 16, "per_char": 0.02}


def test_build_reward_passes_options():
    reward = build_reward("length_penalty", target=1, per_char=1)
    assert score(reward, ["abc"]) == [-2.0]


def test_build_reward_unknown_name():
    with pytest.raises(ValueError, match="unknown reward 'accuracy'; allowed rewards: exact_match"):
        build_reward("accuracy")
    with pytest.raises(ValueError, match="unknown reward"):
        reward_options("accuracy")


def test_build_reward_unknown_option_names_reward_option_and_allowed():
    with pytest.raises(ValueError) as info:
        build_reward("sort_position", field="answer")
    message = str(info.value)
    assert "'sort_position'" in message and "'field'" in message and "answer_field='answer'" in message


def test_build_reward_wrong_option_type():
    with pytest.raises(ValueError, match="option 'tolerance' must be float"):
        build_reward("numeric_match", tolerance="0.1")
    with pytest.raises(ValueError, match="option 'target' must be int"):
        build_reward("length_penalty", target=2.5)
    with pytest.raises(ValueError, match="option 'case_sensitive' must be bool"):
        build_reward("exact_match", case_sensitive=1)


def test_build_reward_bad_option_value():
    with pytest.raises(ValueError, match="which must be 'first' or 'last'"):
        build_reward("numeric_match", which="middle")


# ---------------------------------------------------------------------------
# combine_rewards
# ---------------------------------------------------------------------------


def test_combine_rewards_weighted_sum_and_parts():
    components = [
        ("correct", 1.0, exact_match()),
        ("format", 0.5, regex_format()),
        ("length", 2.0, length_penalty(target=3, per_char=0.25)),
    ]
    total, parts = combine_rewards(
        components, ["p", "p"], [" 12", "twelve"], {"answer": ["12", "12"], "extra": [1, 2]}
    )
    assert parts == {"correct": [1.0, 0.0], "format": [1.0, 0.0], "length": [0.0, -0.75]}
    assert total == [1.5, -1.5]


def test_combine_rewards_with_no_components():
    assert combine_rewards([], ["p"], ["c"], {}) == ([0.0], {})


def _constant(values):
    return lambda prompts, completions, **fields: values


@pytest.mark.parametrize(
    "returned, message",
    [
        ([1.0], "returned 1 values for 2 completions"),
        ("11", "returned str"),
        (None, "returned NoneType"),
        ([1.0, None], r"returned None at index 1"),
        ([1.0, float("nan")], r"returned nan at index 1"),
        ([float("inf"), 0.0], r"returned inf at index 0"),
        ([1.0, "2"], r"returned '2' at index 1"),
    ],
)
def test_combine_rewards_rejects_bad_outputs_and_names_component(returned, message):
    components = [("good", 1.0, exact_match()), ("broken", 1.0, _constant(returned))]
    with pytest.raises(RewardError, match=rf"reward component 'broken' {message}"):
        combine_rewards(components, ["p", "p"], ["a", "b"], {"answer": ["a", "b"]})


def test_combine_rewards_wraps_exceptions_with_component_name():
    def explode(prompts, completions, **fields):
        raise ZeroDivisionError("boom")

    with pytest.raises(RewardError, match="reward component 'risky' failed with ZeroDivisionError: boom"):
        combine_rewards([("risky", 1.0, explode)], ["p"], ["c"], {})


def test_combine_rewards_names_component_missing_a_field():
    with pytest.raises(RewardError, match="component 'acc' failed.*needs the field 'answer'"):
        combine_rewards([("acc", 1.0, exact_match())], ["p"], ["c"], {})


def test_combine_rewards_checks_alignment_and_names():
    with pytest.raises(RewardError, match="2 completions for 1 prompts"):
        combine_rewards([], ["p"], ["a", "b"], {})
    with pytest.raises(RewardError, match="field 'answer' has 2 values for 1 prompts"):
        combine_rewards([], ["p"], ["a"], {"answer": ["x", "y"]})
    with pytest.raises(RewardError, match="'acc' is used twice"):
        combine_rewards([("acc", 1.0, exact_match()), ("acc", 1.0, exact_match())], ["p"], ["a"], {"answer": ["a"]})
    with pytest.raises(RewardError, match="'acc' has weight nan"):
        combine_rewards([("acc", float("nan"), exact_match())], ["p"], ["a"], {"answer": ["a"]})
