"""Step rewards (engine/rewards/steps.py and their scoring in engine/rewards/combine.py):
splitting at a delimiter, the checks on what a reward returns per completion, the step
mean, the built-in `sort_steps`, the weighted totals with outcome components, an entry's
`step_delimiter`, and the mapping from a step's end character to its last token. Every
expected number is worked out by hand in the comments."""

from __future__ import annotations

import math
import textwrap
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from engine.rewards.config import RewardConfig
from engine.rewards import (
    PROCESS_REWARD_MODEL,
    MissingFieldError,
    RewardError,
    build_reward,
    build_reward_components,
    checked_step_scores,
    combine_rewards,
    exact_match,
    is_step_reward_entry,
    outcome_as_step,
    returns_steps,
    score_rewards_with_steps,
    sort_steps,
    split_step_ends,
    step_mean,
    token_step_ends,
)
from engine.rewards.combine import _with_step_delimiter

X = "reward component 'x'"


def reward_returning(values, *, source=None, steps=False):
    """A reward that returns ``values`` whatever it is asked (``reward_source`` as a
    custom function's, ``returns_steps`` when ``steps``)."""

    def reward(prompts, completions, **fields):
        return values

    if source:
        reward.reward_source = source
    if steps:
        reward.returns_steps = True
    return reward


# ---------------------------------------------------------------------------
# Splitting at a delimiter
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, delimiter, ends", [
    ("a\nb", "\n", [2, 3]),          # "a\n" | "b"
    ("a\nb\n", "\n", [2, 4]),        # trailing delimiter: no empty step after it
    ("abc", "\n", [3]),              # no delimiter: one step, the whole text
    ("", "\n", [0]),                 # empty text: one empty step
    ("\n", "\n", [1]),
    ("a\n\nb", "\n", [2, 3, 4]),     # "a\n" | "\n" | "b"
    ("x\n\ny", "\n\n", [3, 4]),      # a two-character delimiter belongs to its step
    ("1; 2; 3", "; ", [3, 6, 7]),
])
def test_split_step_ends(text, delimiter, ends):
    assert split_step_ends(text, delimiter) == ends


def test_split_step_ends_refuses_an_empty_delimiter():
    with pytest.raises(ValueError, match="must not be empty"):
        split_step_ends("abc", "")


# ---------------------------------------------------------------------------
# What a reward returns for one completion
# ---------------------------------------------------------------------------


def test_a_number_is_an_outcome():
    assert checked_step_scores(X, 0.5, "a\nb", None, 0) is None
    assert checked_step_scores(X, 3, "a\nb", "\n", 0) is None


def test_numbers_score_the_steps_split_at_the_delimiter():
    # "a\nb\n" splits at "\n" (the default for None) into "a\n" | "b\n": ends 2 and 4.
    assert checked_step_scores(X, [1, 0.5], "a\nb\n", None, 0) == [(2, 1.0), (4, 0.5)]
    # "1; 2; 3" at "; ": ends 3, 6, 7.
    assert checked_step_scores(X, [0, -1, 2.5], "1; 2; 3", "; ", 0) == [(3, 0.0), (6, -1.0), (7, 2.5)]
    # An empty text is one step, ending at 0.
    assert checked_step_scores(X, [1.0], "", None, 0) == [(0, 1.0)]


def test_an_empty_list_is_no_steps():
    assert checked_step_scores(X, [], "a\nb", None, 0) == []
    assert checked_step_scores(X, (), "", "\n", 3) == []


def test_pairs_and_dicts_locate_their_steps():
    steps = [(1, 1.0), {"end": 3, "score": 0}, [5, -0.5]]
    assert checked_step_scores(X, steps, "abcde", None, 0) == [(1, 1.0), (3, 0.0), (5, -0.5)]
    # The first step may end at 0 (an empty first step); the last may end at len(text).
    assert checked_step_scores(X, [(0, 1.0), (2, 0.0)], "ab", None, 0) == [(0, 1.0), (2, 0.0)]


def test_numpy_steps_are_plain_python():
    import numpy as np
    assert checked_step_scores(X, np.array([1.0, 0.0]), "a\nb", None, 0) == [(2, 1.0), (3, 0.0)]
    pairs = [(np.int64(2), np.float32(0.5))]
    assert checked_step_scores(X, pairs, "a\nb", None, 0) == [(2, 0.5)]


def test_count_mismatch_names_the_component_the_completion_both_counts_and_the_delimiter():
    described = "reward component 'x' (my.py:f)"
    with pytest.raises(RewardError) as caught:
        checked_step_scores(described, [1, 0, 1], "a\nb", None, 2)
    assert str(caught.value) == (
        "reward component 'x' (my.py:f) returned 3 step scores for completion 2, which splits into "
        "2 steps at '\\n' (step_delimiter); return one score per step, or (end, score) pairs."
    )
    # A trailing delimiter makes no extra step: "a\n\n" at "\n\n" is one step, not two.
    with pytest.raises(RewardError, match=r"returned 2 step scores for completion 0, which splits into 1 steps at '\\n\\n'"):
        checked_step_scores(X, [1, 0], "a\n\n", "\n\n", 0)


def test_ends_must_strictly_increase():
    with pytest.raises(RewardError) as caught:
        checked_step_scores(X, [(2, 1.0), (2, 0.0)], "abcd", None, 1)
    assert str(caught.value).startswith(
        "reward component 'x' returned end 2 for step 1 of completion 1 after end 2 for step 0; "
        "the ends of a completion's steps must strictly increase")
    with pytest.raises(RewardError, match="returned end 1 for step 2 of completion 0 after end 3 for step 1"):
        checked_step_scores(X, [(2, 1.0), (3, 0.0), (1, 0.0)], "abcd", None, 0)


def test_an_end_beyond_the_text_is_refused():
    with pytest.raises(RewardError) as caught:
        checked_step_scores(X, [(2, 1.0), (5, 0.0)], "abc", None, 0)
    assert str(caught.value) == (
        "reward component 'x' returned end 5 for step 1 of completion 0, whose text has 3 characters; "
        "an end is a character offset from 0 to 3 (len of the completion).")
    with pytest.raises(RewardError, match="returned end -1 for step 0 of completion 0"):
        checked_step_scores(X, [(-1, 1.0)], "abc", None, 0)


@pytest.mark.parametrize("end", [1.0, True, "1", None])
def test_an_end_must_be_an_int(end):
    with pytest.raises(RewardError, match=r"returned end .* for step 0 of completion 0; an end is an int"):
        checked_step_scores(X, [(end, 1.0)], "abc", None, 0)


@pytest.mark.parametrize("score, message", [
    (math.nan, "returned nan for step 1 of completion 0; every score must be a finite real number"),
    (math.inf, "returned inf for step 1 of completion 0; every score must be a finite real number"),
    (None, "returned None for step 1 of completion 0; every score must be a finite real number"),
    ("1", "returned '1' for step 1 of completion 0; every score must be a finite real number"),
    (3.5e38, r"returned 3.5e\+38 for step 1 of completion 0; too large: training holds rewards in float32"),
    (10 ** 400, r"returned 1000.* for step 1 of completion 0; too large"),
])
def test_step_scores_are_checked_as_strictly_as_outcomes(score, message):
    with pytest.raises(RewardError, match=message):
        checked_step_scores(X, [(1, 1.0), (2, score)], "abc", None, 0)
    if not isinstance(score, str) and score is not None:  # a None or str item is not a number step
        with pytest.raises(RewardError, match=message):
            checked_step_scores(X, [1.0, score], "a\nb", None, 0)


def test_shapes_that_are_not_steps():
    with pytest.raises(RewardError, match=r"returned str 'good' for completion 4; each completion's reward must be a number, or a list of steps"):
        checked_step_scores(X, "good", "abc", None, 4)
    with pytest.raises(RewardError, match="returned a list mixing numbers and \\(end, score\\) steps for completion 0"):
        checked_step_scores(X, [1.0, (3, 1.0)], "abc", None, 0)
    with pytest.raises(RewardError, match=r"returned a step dict with keys \['end', 'value'\] for step 0 of completion 0; a step dict has exactly the keys 'end' and 'score'"):
        checked_step_scores(X, [{"end": 1, "value": 1.0}], "abc", None, 0)
    with pytest.raises(RewardError, match=r"returned \(1, 1.0, 2\) as step 0 of completion 0; a step is a number, an \(end, score\) pair"):
        checked_step_scores(X, [(1, 1.0, 2)], "abc", None, 0)


def test_a_number_in_a_step_component_is_one_step_at_the_end():
    assert outcome_as_step(X, 1, " 1 2", 0) == [(4, 1.0)]
    assert outcome_as_step(X, -0.5, "", 0) == [(0, -0.5)]
    with pytest.raises(RewardError, match="returned nan for completion 3; every score must be a finite real number"):
        outcome_as_step(X, math.nan, "abc", 3)


def test_step_mean():
    assert step_mean([(2, 1.0), (4, 0.0), (6, 0.0)]) == pytest.approx(1 / 3)
    assert step_mean([(1, 0.5), (2, -1.5)]) == -0.5  # (0.5 - 1.5) / 2
    assert step_mean([(3, 2.0)]) == 2.0
    assert step_mean([]) == 0.0


# ---------------------------------------------------------------------------
# The built-in step reward
# ---------------------------------------------------------------------------


def test_sort_steps_scores_each_digit_until_the_first_mistake():
    reward = sort_steps()
    completions = [
        " 1 2 3",    # right: each digit a step ending after it (offsets 2, 4, 6)
        " 3 2 1",    # first digit wrong: every step 0.0, though the 2 is in its place
        " 1 3 3",    # second digit wrong: 1.0, then 0.0 on (the last 3 matches, but after a mistake)
        " 1 2 3 4",  # an extra digit: 0.0 for it alone
        "1 2",       # stopped early: the two right digits score, no step for the missing one
        "none",      # no digits, no steps
    ]
    assert reward(["p"] * 6, completions, answer=[" 1 2 3"] * 6) == [
        [(2, 1.0), (4, 1.0), (6, 1.0)],
        [(2, 0.0), (4, 0.0), (6, 0.0)],
        [(2, 1.0), (4, 0.0), (6, 0.0)],
        [(2, 1.0), (4, 1.0), (6, 1.0), (8, 0.0)],
        [(1, 1.0), (3, 1.0)],
        [],
    ]


def test_sort_steps_declares_steps_and_reads_its_answer_field():
    assert sort_steps.returns_steps is True and returns_steps(sort_steps()) and returns_steps(build_reward("sort_steps"))
    assert not returns_steps(exact_match())
    reward = build_reward("sort_steps", answer_field="target")
    assert reward(["p"], [" 2 1"], target=[" 1 2"]) == [[(2, 0.0), (4, 0.0)]]
    with pytest.raises(MissingFieldError, match="reward 'sort_steps' needs the field 'target'"):
        reward(["p"], [" 1"], answer=[" 1"])


# ---------------------------------------------------------------------------
# Scoring a batch: outcome and step components together
# ---------------------------------------------------------------------------


def test_one_outcome_and_one_step_component():
    components = [("exact", 1.0, exact_match()), ("steps", 0.5, sort_steps())]
    completions = [" 1 2 3", " 1 3 2", "x"]
    fields = {"answer": [" 1 2 3"] * 3}
    totals, parts, steps = score_rewards_with_steps(components, ["p"] * 3, completions, fields)
    # exact: 1, 0, 0. Step means: (1+1+1)/3 = 1; (1+0+0)/3 = 1/3; no steps = 0.
    assert parts["exact"] == [1.0, 0.0, 0.0]
    assert parts["steps"] == pytest.approx([1.0, 1 / 3, 0.0])
    # totals = 1.0 * exact + 0.5 * step mean: 1.5; 0 + 1/6; 0.
    assert totals == pytest.approx([1.5, 1 / 6, 0.0])
    assert steps == {"steps": [[(2, 1.0), (4, 1.0), (6, 1.0)], [(2, 1.0), (4, 0.0), (6, 0.0)], []]}
    # combine_rewards: the same totals and values, without the steps.
    assert combine_rewards(components, ["p"] * 3, completions, fields) == (totals, parts)


def test_lists_for_some_completions_and_numbers_for_others():
    # Completion 0 "a\nb": two scores at "\n" (ends 2, 3); completion 1 "xy": a number,
    # one step ending at 2; completion 2: an empty list, no steps.
    reward = reward_returning([[1.0, 0.0], 0.5, []])
    totals, parts, steps = score_rewards_with_steps([("mixed", 2.0, reward)], ["p"] * 3, ["a\nb", "xy", "z"], {})
    assert steps == {"mixed": [[(2, 1.0), (3, 0.0)], [(2, 0.5)], []]}
    assert parts == {"mixed": [0.5, 0.5, 0.0]}  # means: (1+0)/2, 0.5, none
    assert totals == [1.0, 1.0, 0.0]            # weight 2


def test_a_declared_step_reward_returning_numbers_has_one_step_each():
    reward = reward_returning([1.0, 0.0], steps=True)
    totals, parts, steps = score_rewards_with_steps([("r", 1.0, reward)], ["p", "p"], ["ab", "a\nb"], {})
    assert steps == {"r": [[(2, 1.0)], [(3, 0.0)]]} and parts == {"r": [1.0, 0.0]} and totals == [1.0, 0.0]


def test_outcome_components_have_no_steps_and_keep_their_messages():
    totals, parts, steps = score_rewards_with_steps([("exact", 1.0, exact_match())], ["p"], [" 1"], {"answer": [" 1"]})
    assert (totals, parts, steps) == ([1.0], {"exact": [1.0]}, {})
    with pytest.raises(RewardError, match="returned nan at index 1; every reward must be a finite real number"):
        score_rewards_with_steps([("x", 1.0, reward_returning([1.0, math.nan]))], ["p", "p"], ["a", "b"], {})


def test_a_step_error_in_a_batch_names_the_component_and_the_completion():
    reward = reward_returning([[1.0], [1.0], [1.0, 0.0, 1.0]], source="my.py:f")
    with pytest.raises(RewardError) as caught:
        score_rewards_with_steps([("x", 1.0, reward)], ["p"] * 3, ["a", "b", "a\nb"], {})
    assert str(caught.value) == (
        "reward component 'x' (my.py:f) returned 3 step scores for completion 2, which splits into "
        "2 steps at '\\n' (step_delimiter); return one score per step, or (end, score) pairs."
    )
    with pytest.raises(RewardError, match="returned 1 values for 2 completions"):
        score_rewards_with_steps([("x", 1.0, reward_returning([[1.0]], steps=True))], ["p", "p"], ["a", "b"], {})


def test_a_steps_delimiter_comes_from_the_reward():
    reward = reward_returning([[1.0, 0.0]])
    reward.step_delimiter = "; "
    _, _, steps = score_rewards_with_steps([("x", 1.0, reward)], ["p"], ["1; 2"], {})
    assert steps == {"x": [[(3, 1.0), (4, 0.0)]]}


# ---------------------------------------------------------------------------
# The preset entry's step_delimiter
# ---------------------------------------------------------------------------

LINES_PY = '''\
def per_paragraph(prompts, completions, **fields):
    return [[1.0] * len(c.split("\\n\\n")) for c in completions]
'''


def test_step_delimiter_makes_an_entry_a_step_reward(tmp_path):
    (tmp_path / "lines.py").write_text(LINES_PY)
    entries = [RewardConfig(name="lines.py:per_paragraph", step_delimiter="\n\n"),
               RewardConfig(name="exact_match", step_delimiter="\n"),
               RewardConfig(name="exact_match", label="plain")]
    (_, _, paragraphs), (_, _, exact), (_, _, plain) = build_reward_components(entries, base_dir=tmp_path)
    assert paragraphs.step_delimiter == "\n\n" and returns_steps(paragraphs)
    assert paragraphs.reward_source == "lines.py:per_paragraph"
    assert exact.step_delimiter == "\n" and returns_steps(exact) and not returns_steps(plain)
    # "a\n\nb" splits at "\n\n" into "a\n\n" | "b" (ends 3, 4): two scores, two steps.
    _, _, steps = score_rewards_with_steps([("p", 1.0, paragraphs)], ["q"], ["a\n\nb"], {})
    assert steps == {"p": [[(3, 1.0), (4, 1.0)]]}
    # "a\n\n" is one step (a trailing delimiter ends it), but str.split finds two pieces:
    # the error names the function and points at its def line.
    with pytest.raises(RewardError) as caught:
        score_rewards_with_steps([("p", 1.0, paragraphs)], ["q"], ["a\n\n"], {})
    assert str(caught.value).startswith(
        "reward component 'p' (lines.py:per_paragraph) returned 2 step scores for completion 0, "
        "which splits into 1 steps at '\\n\\n' (step_delimiter)")
    assert caught.value.user_location == (str(tmp_path / "lines.py"), 1)


def test_a_callable_that_takes_no_attributes_is_wrapped():
    class Scorer:
        def score(self, prompts, completions, **fields):
            return [[1.0] for _ in completions]

    bound = Scorer().score
    with pytest.raises(AttributeError):
        bound.returns_steps = True
    wrapped = _with_step_delimiter(bound, "\n")
    assert wrapped.step_delimiter == "\n" and wrapped.returns_steps is True
    assert wrapped(["p"], ["a"]) == [[1.0]]
    assert _with_step_delimiter(bound, None) is bound


def test_step_delimiter_field():
    assert RewardConfig(name="exact_match").step_delimiter is None
    assert RewardConfig(name="exact_match", step_delimiter="\n\n").step_delimiter == "\n\n"
    with pytest.raises(ValidationError, match="step_delimiter"):
        RewardConfig(name="exact_match", step_delimiter="")
    with pytest.raises(ValidationError, match="step_delimiter"):
        RewardConfig(name="exact_match", step_delimiter=1)


def test_is_step_reward_entry():
    assert is_step_reward_entry(RewardConfig(name="sort_steps"))
    assert not is_step_reward_entry(RewardConfig(name="exact_match"))
    assert is_step_reward_entry(RewardConfig(name="exact_match", step_delimiter="\n"))
    assert not is_step_reward_entry(RewardConfig(name="my_rewards.py:f"))  # found only when it runs
    assert is_step_reward_entry(SimpleNamespace(name=PROCESS_REWARD_MODEL, step_delimiter=None))


# ---------------------------------------------------------------------------
# From a step's end character to its last token
# ---------------------------------------------------------------------------


def char_decode(ids):
    """Toy tokenizer: an id is a character code; 0 is an end token that decodes to nothing."""
    return "".join(chr(i) for i in ids if i)


def test_token_step_ends_with_one_character_per_token():
    ids = [ord(c) for c in "a\nbc\n"] + [0]  # tokens 0..4 the text, 5 the end token
    # end 2 ("a\n"): the prefix of 2 tokens has 2 characters -> token 1; end 5 is the
    # whole text -> the last token (5, the end token).
    assert token_step_ends(char_decode, ids, [2, 5], text_length=5) == [1, 5]
    # end 4 ("a\nbc") -> token 3; end 0 -> token 0 (every prefix is long enough).
    assert token_step_ends(char_decode, ids, [0, 4], text_length=5) == [0, 3]
    assert token_step_ends(char_decode, ids, [], text_length=5) == []


def test_token_step_ends_with_multi_character_pieces():
    pieces = {1: "ab", 2: "c\n", 3: "de", 4: "f", 5: ""}  # 5: an end token
    decode = lambda ids: "".join(pieces[i] for i in ids)
    ids = [1, 2, 3, 4, 5]
    text = decode(ids)  # "abc\ndef": prefixes of 1..5 tokens have 2, 4, 6, 7, 7 characters
    assert text == "abc\ndef"
    # split at "\n": ends 4 and 7. 4 -> token 1 ("c\n"); 7 = len(text) -> the last token.
    assert token_step_ends(decode, ids, split_step_ends(text, "\n"), len(text)) == [1, 4]
    # A step ending inside a piece ends on that piece: 1 -> 0, 3 -> 1, 5 -> 2.
    assert token_step_ends(decode, ids, [1, 3, 5, 7], len(text)) == [0, 1, 2, 4]
    # Two steps ending in the same piece share its token.
    assert token_step_ends(decode, ids, [1, 2], len(text)) == [0, 0]


def test_token_step_ends_searches_rather_than_scans():
    calls = []

    def counting_decode(ids):
        calls.append(len(ids))
        return char_decode(ids)

    ids = [ord("x")] * 1000
    assert token_step_ends(counting_decode, ids, [10, 500, 999], text_length=1000) == [9, 499, 998]
    assert len(calls) <= 3 * math.ceil(math.log2(1000))  # 30: a binary search per end, not a scan


def test_token_step_ends_needs_tokens():
    assert token_step_ends(char_decode, [], [], text_length=0) == []
    with pytest.raises(ValueError, match="no token to end a step on"):
        token_step_ends(char_decode, [], [0], text_length=0)


def test_token_step_ends_with_the_builtin_tokenizer():
    from engine.builtin_model.recipe import build_tokenizer

    tokenizer = build_tokenizer()  # one token per character, EOS skipped on decode
    ids = tokenizer.encode(" 1 3 2") + [tokenizer.eos_token_id]
    decode = lambda part: tokenizer.decode(part, skip_special_tokens=True)
    text = decode(ids)
    assert text == " 1 3 2"
    (steps,) = sort_steps()(["sort 3 2 1 ="], [text], answer=[" 1 2 3"])
    assert steps == [(2, 1.0), (4, 0.0), (6, 0.0)]
    tokens = token_step_ends(decode, ids, [end for end, _ in steps], len(text))
    # Digits at tokens 1 and 3; the last step ends the text, so on the EOS token (6).
    assert tokens == [1, 3, 6]
    assert [decode(ids[t:t + 1]) for t in tokens[:2]] == ["1", "3"]
