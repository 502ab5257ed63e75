"""The math rewards: ``math_answer`` (math-verify's parse and verify) and
``think_answer_format``: hand-checked cases, a run in a worker thread (where math-verify
must run without its signal.alarm time limit), try-reward, and the option checks."""

from __future__ import annotations

import os
import threading

import pytest
import yaml

from engine.cli import main
from engine.rewards import RewardError, build_reward, check_reward, reward_options
from engine.rewards import math_parse

# (completion, reference, expected score with wrong=-0.5, unparsable=-1.0)
MATH_CASES = [
    (r"The sum is \boxed{72}.", "72", 1.0),
    ("The answer is 72.", "72", 1.0),
    ("So she has 72.0 apples left.", "72", 1.0),
    ("72", "72.0", 1.0),
    ("so x = 1/2", "0.5", 1.0),
    ("It is 0.5.", r"\frac{1}{2}", 1.0),
    (r"$\frac{1}{2}$", "1/2", 1.0),
    (r"\boxed{\dfrac{1}{2}}", "0.5", 1.0),
    ("It costs 1,000 dollars.", "1000", 1.0),
    ("1000", "1,000", 1.0),
    ("Subtracting, we get -16.", "-16", 1.0),
    ("Subtracting, we get 16.", "-16", -0.5),
    ("-16", 16, -0.5),
    ("-16", -16, 1.0),  # a number, not a string, in the answer column
    (r"\boxed{3\sqrt{2}}", r"$3\sqrt{2}$", 1.0),
    (r"\boxed{3\sqrt{2}}", r"3\sqrt{2}", 1.0),  # bare LaTeX reference: 3*sqrt(2), not 3
    (r"\boxed{3}", r"3\sqrt{2}", -0.5),
    ("First 5, then 7 more: 12", "12", 1.0),  # the last number is the answer
    (r"\boxed{12} (check: 5 + 7)", "12", 1.0),  # a boxed answer wins over later numbers
    ("Natalia sold 48/2 = 24 clips in May, 48 + 24 = 72 in all. #### 72", "72", 1.0),
    ("The answer is 71.", "72", -0.5),
    ("I do not know.", "72", -1.0),
    ("", "72", -1.0),
    ("<think>13 and 29</think><answer>42</answer>", "42", 1.0),  # the answer block, not 29
    ("<think>40 + 2</think>\n<answer>The answer is 42.</answer>", "42", 1.0),
    (r"<answer>3\sqrt{2}</answer>", r"3\sqrt{2}", 1.0),
    ("<answer>41</answer> or maybe 42", "42", -0.5),  # the block is the answer
    ("<think>hmm</think><answer>no idea</answer>", "42", -1.0),
    ("<think>6 * 7 = 42", "42", 1.0),  # cut off before the answer block: the whole text
]


def score_math(cases, **options):
    reward = build_reward("math_answer", wrong=-0.5, unparsable=-1.0, **options)
    completions = [c for c, _, _ in cases]
    return reward(["p"] * len(cases), completions, answer=[a for _, a, _ in cases])


def test_math_answer_cases():
    got = score_math(MATH_CASES)
    wrong = [(c, a, e, g) for (c, a, e), g in zip(MATH_CASES, got) if g != e]
    assert not wrong, wrong


def test_math_answer_defaults_and_other_field():
    reward = build_reward("math_answer", answer_field="solution")
    assert reward(["p"] * 3, ["72", "71", "none"], solution=["72"] * 3, answer=["x"] * 3) == [1.0, 0.0, 0.0]
    assert reward_options("math_answer") == {"answer_field": "answer", "wrong": 0.0, "unparsable": 0.0}


@pytest.mark.parametrize("reference", ["", "   ", "not given", None])
def test_a_reference_without_an_answer_is_an_error_naming_it(reference):
    reward = build_reward("math_answer")
    with pytest.raises(RewardError, match=rf"field 'answer' holds {reference!r}, in which math-verify finds no answer"):
        reward(["p", "p"], ["72", "72"], answer=["72", reference])


def test_a_missing_field_is_named():
    with pytest.raises(RewardError, match="reward 'math_answer' needs the field 'answer'"):
        build_reward("math_answer")(["p"], ["72"], label=["72"])


def test_each_reference_is_parsed_once_a_call(monkeypatch):
    parsed = []
    original = math_parse.parse_bare

    def counting(text):
        parsed.append(text)
        return original(text)

    monkeypatch.setattr(math_parse, "parse_bare", counting)
    reward = build_reward("math_answer")
    assert reward(["p"] * 4, ["72", "71", "5", "72"], answer=["72", "72", "5", "72"]) == [1.0, 0.0, 1.0, 1.0]
    assert parsed == ["72", "5"]


def test_math_answer_in_a_worker_thread_matches_the_main_thread():
    main_thread = score_math(MATH_CASES)
    result: dict = {}

    def work():
        result["timeout"] = math_parse._timeout()
        try:
            result["scores"] = score_math(MATH_CASES)
        except BaseException as exc:  # reported below, not lost in the thread
            result["error"] = exc

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive()
    assert "error" not in result, result.get("error")
    assert result["timeout"] is None and result["scores"] == main_thread
    assert math_parse._timeout() == (math_parse.TIMEOUT_SECONDS if os.name == "posix" else None)


THINK_CASES = [
    ("<think>2+2</think><answer>4</answer>", 1.0, 1.0),
    ("  <think>\nadd\n</think>\n\n<answer>\n4\n</answer>\n ", 1.0, 1.0),
    ("<think></think><answer></answer>", 1.0, 1.0),
    ("<answer>4</answer>", 0.0, 1.0),
    ("<think>2+2</think><answer>4</answer> so 4", 0.0, 0.0),  # text after the answer
    ("so <think>2+2</think><answer>4</answer>", 0.0, 0.0),  # text before
    ("<think>2+2</think> so <answer>4</answer>", 0.0, 0.0),  # text between
    ("<answer>4</answer><think>2+2</think>", 0.0, 0.0),  # out of order
    ("<think>a</think><think>b</think><answer>4</answer>", 0.0, 0.0),  # a tag twice
    ("<think>a</think><answer>4</answer><answer>5</answer>", 0.0, 0.0),
    ("<think>a <answer>3</answer></think><answer>4</answer>", 0.0, 0.0),  # a tag inside a block
    ("<think>2+2</think><answer>4", 0.0, 0.0),  # unclosed
    ("4", 0.0, 0.0),
    ("", 0.0, 0.0),
]


def test_think_answer_format():
    completions = [c for c, _, _ in THINK_CASES]
    prompts = ["p"] * len(completions)
    assert build_reward("think_answer_format")(prompts, completions) == [t for _, t, _ in THINK_CASES]
    relaxed = build_reward("think_answer_format", require_think=False)
    assert relaxed(prompts, completions, answer=["4"] * len(prompts)) == [r for _, _, r in THINK_CASES]


# ------------------------------------------------------------------ option checks


@pytest.mark.parametrize("name, options, message", [
    ("math_answer", {"wrng": -1.0},
     "reward 'math_answer' has no option 'wrng'; allowed options: answer_field='answer', wrong=0.0, unparsable=0.0."),
    ("math_answer", {"wrong": "-1"},
     "reward 'math_answer': option 'wrong' must be float (default 0.0), got str '-1'."),
    ("math_answer", {"answer_field": 3},
     "reward 'math_answer': option 'answer_field' must be str (default 'answer'), got int 3."),
    ("think_answer_format", {"require_think": "no"},
     "reward 'think_answer_format': option 'require_think' must be bool (default True), got str 'no'."),
    ("think_answer_format", {"strict": True},
     "reward 'think_answer_format' has no option 'strict'; allowed options: require_think=True."),
])
def test_option_errors_are_readable(name, options, message):
    with pytest.raises(ValueError) as info:
        build_reward(name, **options)
    assert str(info.value) == message
    with pytest.raises(ValueError, match="option"):
        check_reward(name, options)


def test_an_int_is_a_fine_float_option():
    assert build_reward("math_answer", wrong=-1, unparsable=-2)(["p"] * 2, ["7", "?"], answer=[8, 8]) == [-1, -2]
    check_reward("math_answer", {"wrong": -1, "unparsable": -2.0})


# ------------------------------------------------------------------ try-reward


def write_preset(tmp_path, rewards):
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump({"rewards": rewards}))
    return path


def test_try_reward_scores_math_answer(tmp_path, capsys):
    preset = write_preset(tmp_path, [{"name": "math_answer"}, {"name": "think_answer_format", "weight": 0.5}])
    completion = r"<think>half of 1</think> <answer>\frac{1}{2}</answer>"
    assert main(["try-reward", str(preset), "--prompt", "What is half of 1?", "--completion", completion,
                 "--field", "answer=0.5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["math_answer", "1", "1.0000", "1.0000"]
    assert lines[2].split() == ["think_answer_format", "0.5", "1.0000", "0.5000"]
    assert lines[3].split() == ["total", "1.5000"]


def test_try_reward_math_answer_failures(tmp_path, capsys):
    preset = write_preset(tmp_path, [{"name": "math_answer", "options": {"unparsable": -1.0}}])
    args = ["try-reward", str(preset), "--prompt", "p", "--completion", "no idea"]
    assert main([*args, "--field", "answer=72"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["math_answer", "1", "-1.0000", "-1.0000"]
    assert main(args) == 2  # no answer field
    assert "needs the field 'answer'" in capsys.readouterr().err
    assert main([*args, "--field", "answer=not given"]) == 1
    err = capsys.readouterr().err
    assert "math_answer" in err and "'not given'" in err and "finds no answer" in err
    assert main([*args, "--field", "answer=72", "--set", "rewards.0.options.wrong=bad"]) == 2
    assert "option 'wrong' must be float" in capsys.readouterr().err
