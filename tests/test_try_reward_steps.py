"""Step rewards in the reward commands: `rl-engine try-reward` prints each step reward's
steps (characters, score, text) under the total, and `rl-engine score-rewards` gives each
item its steps; the numbers worked out by hand from the completions' characters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine.cli import main
from engine.commands.score_rewards import score
from engine.commands.try_reward import format_step_lines, visible_text

PROCESS = {"name": "grpo", "num_generations": 2, "advantage_estimator": "grpo_process"}

STEP_REWARDS_PY = '''
def checked_lines(prompts, completions, **fields):
    """1.0 for each step whose sum is right: "3+4=7" right, "7*2=15" wrong."""
    out = []
    for c in completions:
        scores = []
        for step in c.split("\\n\\n"):
            left, _, right = step.strip().partition("=")
            scores.append(1.0 if right and eval(left) == int(right) else 0.0)
        out.append(scores)
    return out


def three_steps(prompts, completions, **fields):
    return [[1.0, 0.0, 0.5] for c in completions]
'''


def write_preset(tmp_path: Path, rewards: list[dict]) -> Path:
    (tmp_path / "step_rewards.py").write_text(STEP_REWARDS_PY)
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump({"algorithm": PROCESS, "rewards": rewards}))
    return path


def try_reward(capsys, preset: Path, completion: str, answer: str = " 1 2 3") -> tuple[int, list[str], str]:
    code = main(["try-reward", str(preset), "--prompt", "sort 3 1 2 =", f"--completion={completion}",
                 "--field", f"answer={answer}"])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


# ------------------------------------------------------------------ try-reward


def test_try_reward_prints_each_step_under_the_total(tmp_path, capsys):
    # " 1 3 2\n" against " 1 2 3": digits end at 2, 4, 6; right, wrong, wrong (wrong from the
    # first mistake on) -> mean 1/3 = 0.3333, weighted by 0.5: 0.1667; the "\n" is in no step
    preset = write_preset(tmp_path, [{"name": "exact_match"}, {"name": "sort_steps", "weight": 0.5}])
    code, lines, _ = try_reward(capsys, preset, " 1 3 2\n")
    assert code == 0
    assert [line.split() for line in lines[:4]] == [
        ["component", "weight", "value", "weighted", "source"], ["exact_match", "1", "0.0000", "0.0000"],
        ["sort_steps", "0.5", "0.3333", "0.1667"], ["total", "0.1667"]]
    assert lines[4:] == [
        "",
        "steps of sort_steps (3; its value is their mean):",
        "  step  chars   score  text",
        '     1    0-2  1.0000  " 1"',
        '     2    2-4  0.0000  " 3"',
        '     3    4-6  0.0000  " 2"',
        '          6-7          "\\n" (after the last step)',
    ]


def test_try_reward_splits_a_list_of_numbers_at_the_entrys_delimiter(tmp_path, capsys):
    # "3+4=7\n\n7*2=15" split at "\n\n": "3+4=7\n\n" (0-7) right, "7*2=15" (7-13) wrong -> 0.5
    preset = write_preset(tmp_path, [{"name": "step_rewards.py:checked_lines", "step_delimiter": "\n\n"}])
    code, lines, _ = try_reward(capsys, preset, "3+4=7\n\n7*2=15")
    assert code == 0
    assert lines[1].split() == ["checked_lines", "1", "0.5000", "0.5000", "step_rewards.py:checked_lines"]
    assert lines[2].split() == ["total", "0.5000"]
    assert lines[3:] == [
        "",
        'steps of checked_lines (2; split at "\\n\\n"; its value is their mean):',
        "  step  chars   score  text",
        '     1    0-7  1.0000  "3+4=7\\n\\n"',
        '     2   7-13  0.0000  "7*2=15"',
    ]


def test_try_reward_without_steps_and_without_step_rewards(tmp_path, capsys):
    preset = write_preset(tmp_path, [{"name": "exact_match"}, {"name": "sort_steps"}])
    code, lines, _ = try_reward(capsys, preset, "none")  # no digit, no step: its value is 0
    assert code == 0 and lines[2].split() == ["sort_steps", "1", "0.0000", "0.0000"]
    assert lines[3].split() == ["total", "0.0000"]
    assert lines[4:] == ["", "steps of sort_steps: none (its value is 0)"]
    # a preset without step rewards prints the table alone, the total last (as before)
    outcome = tmp_path / "outcome.yaml"
    outcome.write_text(yaml.safe_dump({"rewards": [{"name": "exact_match"}]}))
    code, lines, _ = try_reward(capsys, outcome, " 1 2 3")
    assert code == 0 and len(lines) == 3 and lines[-1].split() == ["total", "1.0000"]


def test_try_reward_names_a_step_list_that_does_not_fit(tmp_path, capsys):
    # three scores for a completion with two lines: the count, the delimiter, the component
    preset = write_preset(tmp_path, [{"name": "step_rewards.py:three_steps", "step_delimiter": "\n"}])
    code, _, err = try_reward(capsys, preset, "a\nb")
    assert code == 1 and err.startswith("error: reward component 'three_steps'")
    assert "returned 3 step scores for completion 0, which splits into 2 steps" in err
    line = next(i for i, text in enumerate(STEP_REWARDS_PY.splitlines(), 1) if "def three_steps" in text)
    assert err.rstrip().endswith(f"({(tmp_path / 'step_rewards.py').resolve()}:{line})")  # the function's def


def test_a_long_step_keeps_its_start_and_its_end():
    text = "Let us add the numbers one by one: 3 + 4 = 7\n"
    assert len(text) == 45
    # 40 characters shown: the first 20 and the last 20 (the line break written as \n)
    assert visible_text(text) == '"Let us add the numbe" ... "e by one: 3 + 4 = 7\\n"'
    assert visible_text(text, 45) == json.dumps(text)  # short enough: whole
    assert visible_text("  two  spaces ") == '"  two  spaces "'  # quoted: the spaces show
    assert visible_text("é\u00a0") == '"é\u00a0"'  # kept as written, not escaped
    lines = format_step_lines("why", None, text, [(45, 0.25)])
    assert lines == ["steps of why (1; its value is their mean):", "  step  chars   score  text",
                     '     1   0-45  0.2500  "Let us add the numbe" ... "e by one: 3 + 4 = 7\\n"']


# --------------------------------------------------------------- score-rewards


def test_score_rewards_gives_each_item_its_steps():
    items = [{"prompt": "sort 3 1 2 =", "completion": c, "fields": {"answer": " 1 2 3"}}
             for c in (" 1 3 2", " 1 2 3 4")]
    answer = score({"preset": {"rewards": [{"name": "exact_match"}, {"name": "sort_steps", "weight": 0.5}],
                               "algorithm": PROCESS}, "items": items})
    first, second = answer["items"]
    assert first["steps"] == {"sort_steps": [[2, 1.0], [4, 0.0], [6, 0.0]]}
    assert second["steps"] == {"sort_steps": [[2, 1.0], [4, 1.0], [6, 1.0], [8, 0.0]]}  # the extra 4 is wrong
    # the component's value is the steps' mean: 1/3 and 3/4; the totals weigh it by 0.5
    assert first["components"] == pytest.approx({"exact_match": 0.0, "sort_steps": 1 / 3})
    assert second["components"] == pytest.approx({"exact_match": 0.0, "sort_steps": 0.75})
    assert [first["total"], second["total"]] == pytest.approx([1 / 6, 0.375])
    json.dumps(answer)  # the answer the command prints
    # per-token advantages: not computed from texts, and the reason says why
    assert not answer["advantages"]["computed"] and "end each step" in answer["advantages"]["reason"]


def test_score_rewards_without_step_rewards_has_no_steps_key():
    items = [{"prompt": "p", "completion": c, "fields": {"answer": "a"}} for c in ("a", "b")]
    answer = score({"preset": {"rewards": [{"name": "exact_match"}], "algorithm": {"name": "grpo",
                                                                                  "num_generations": 2}},
                    "items": items})
    assert all("steps" not in item for item in answer["items"])
    # rewards 1, 0: mean 0.5, std (unbiased) sqrt(0.5); GRPO's (r - mean) / (std + 1e-4)
    assert [item["advantage"] for item in answer["items"]] == pytest.approx([0.5 / (0.5 ** 0.5 + 1e-4),
                                                                              -0.5 / (0.5 ** 0.5 + 1e-4)])
