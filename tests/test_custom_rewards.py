"""Custom reward functions (`name: FILE.py:FUNCTION`): loading, calling, the error
messages for faults in the user's code, `rl-engine try-reward`, and a run that fails
in a user's reward reporting the file and line in run_failed."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, small_preset_dict
from engine.run import rundir
from engine.cli import main
from engine.run.failures import user_code_location
from engine.rewards.custom import function_options, static_problems
from engine.foundation.errors import PresetError
from engine.preset.schema import preset_from_dict
from engine.rewards import RewardError, absolute_reward_paths, build_reward_components, combine_rewards
from engine_runs import cli

REWARDS_PY = '''\
import math


def brevity(prompts, completions, target=10, **fields):
    return [-abs(len(c) - target) / target for c in completions]


def answer_length(prompts, completions, answer):
    return [float(len(a)) for a in answer]


def broken(prompts, completions, **fields):
    scale = 0
    return [len(c) / scale for c in completions]


def too_few(prompts, completions, **fields):
    return [1.0]


def words(prompts, completions, **fields):
    return ["good" for _ in completions]


def not_a_number(prompts, completions, **fields):
    return [math.nan for _ in completions]


def as_tuple(prompts, completions, **fields):
    return tuple(1.0 for _ in completions)


async def later(prompts, completions, **fields):
    return [1.0 for _ in completions]


def _helper():
    pass


THRESHOLD = 3
'''


@pytest.fixture
def rewards_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARDS_PY)
    return path


def build(name, options=None, base_dir=None, label=None):
    entry = {"name": name, "options": options or {}}
    if label:
        entry["label"] = label
    preset = preset_from_dict({"rewards": [{"name": "exact_match"}, entry]})
    return build_reward_components(preset.rewards, base_dir=base_dir)


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# ------------------------------------------------------------------ preset syntax


def test_the_preset_checks_the_syntax_only():
    preset = preset_from_dict({"rewards": [{"name": "lib/my_rewards.py:brevity", "options": {"target": 4}}]})
    assert preset.rewards[0].component_name == "brevity"
    for name, expected in [("my_rewards.py", "is not FILE.py:FUNCTION"), ("my_rewards.py:", "is not FILE.py:FUNCTION"),
                           ("my_rewards.py:2fast", "is not FILE.py:FUNCTION"), ("my_rewards:brevity", "is not FILE.py")]:
        with pytest.raises(PresetError) as info:
            preset_from_dict({"rewards": [{"name": name}]})
        (problem,) = info.value.problems
        assert problem.startswith("rewards.0.name: ") and expected in problem, problem


def test_labels_name_components_and_must_be_distinct():
    with pytest.raises(PresetError) as info:
        preset_from_dict({"rewards": [{"name": "a.py:score"}, {"name": "b.py:score"}]})
    (problem,) = info.value.problems
    assert problem.startswith("rewards: rewards.0, rewards.1 are both logged as 'score'") and "`label`" in problem
    preset = preset_from_dict({"rewards": [{"name": "a.py:score"}, {"name": "b.py:score", "label": "score_b"}]})
    assert [r.component_name for r in preset.rewards] == ["score", "score_b"]
    # label is written only when set
    dumped = preset.model_dump(mode="json")["rewards"]
    assert "label" not in dumped[0] and dumped[1]["label"] == "score_b"
    with pytest.raises(PresetError, match=r"rewards.0.label: must be letters, digits"):
        preset_from_dict({"rewards": [{"name": "exact_match", "label": "has space"}]})


# ------------------------------------------------------------- loading, calling


def test_a_function_gets_its_options_and_the_fields(rewards_file, tmp_path):
    (_, (label, weight, reward)) = build("my_rewards.py:brevity", {"target": 2}, base_dir=tmp_path)
    assert (label, weight) == ("brevity", 1.0)
    assert reward(["p", "p"], ["ab", "abcd"], answer=["x", "y"]) == [0.0, -1.0]
    # a function without **fields gets the fields it names
    (_, (_, _, reward)) = build("my_rewards.py:answer_length", base_dir=tmp_path)
    assert reward(["p"], ["c"], answer=["abc"], other=[1]) == [3.0]
    (_, (_, _, reward)) = build("my_rewards.py:as_tuple", base_dir=tmp_path, label="tup")
    assert combine_rewards([("tup", 1.0, reward)], ["p"], ["c"], {})[0] == [1.0]


def test_relative_files_are_found_next_to_the_preset_then_in_the_current_folder(rewards_file, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    (_, (_, _, reward)) = build("my_rewards.py:brevity", base_dir=tmp_path)
    assert reward.source_file == str(rewards_file.resolve())
    monkeypatch.chdir(tmp_path)
    (_, (_, _, reward)) = build("my_rewards.py:brevity", base_dir=elsewhere)
    assert reward.source_file == str(rewards_file.resolve())
    name, _ = absolute_reward_paths("my_rewards.py:brevity", {}, elsewhere)
    assert name == f"{rewards_file.resolve()}:brevity"


@pytest.mark.parametrize("name, options, expected", [
    ("nowhere.py:brevity", {}, "rewards[1] (nowhere.py:brevity): file nowhere.py not found (looked in {dir} and "),
    ("my_rewards.py:brevty", {}, "rewards[1] (my_rewards.py:brevty): no function 'brevty' in {dir}/my_rewards.py; "
                                 "it defines: brevity, answer_length, broken, too_few, words, not_a_number, as_tuple, later"),
    ("my_rewards.py:THRESHOLD", {}, "rewards[1] (my_rewards.py:THRESHOLD): 'THRESHOLD' in {dir}/my_rewards.py is a int, "
                                    "not a function"),
    ("my_rewards.py:answer_length", {"scale": 3}, "rewards[1] (my_rewards.py:answer_length): answer_length(prompts, "
                                                  "completions, answer) cannot be called as answer_length(prompts, "
                                                  "completions, scale=3)"),
    ("my_rewards.py:later", {}, "rewards[1] (my_rewards.py:later): later is `async def`"),
])
def test_load_errors_name_the_entry(rewards_file, tmp_path, monkeypatch, name, options, expected):
    monkeypatch.chdir(ROOT)
    with pytest.raises(RewardError) as info:
        build(name, options, base_dir=tmp_path)
    assert str(info.value).startswith(expected.format(dir=tmp_path.resolve())), str(info.value)


def test_a_file_that_does_not_import_names_its_line(tmp_path):
    (tmp_path / "syntax.py").write_text("def f(prompts, completions):\n    return [1.0 for c in completions\n")
    with pytest.raises(RewardError) as info:
        build("syntax.py:f", base_dir=tmp_path)
    assert str(info.value).startswith(f"rewards[1] (syntax.py:f): {tmp_path.resolve()}/syntax.py, line 2: SyntaxError")
    assert user_code_location(info.value) == (str((tmp_path / "syntax.py").resolve()), 2)

    (tmp_path / "fails.py").write_text("import json\nCONFIG = json.loads('{')\n")
    with pytest.raises(RewardError) as info:
        build("fails.py:f", base_dir=tmp_path)
    assert f"importing {tmp_path.resolve()}/fails.py failed with JSONDecodeError" in str(info.value)
    assert f"(at {tmp_path.resolve()}/fails.py, line 2)" in str(info.value)
    assert user_code_location(info.value) == (str((tmp_path / "fails.py").resolve()), 2)


# --------------------------------------------------- faults while scoring


def test_an_exception_names_the_function_file_and_line_and_keeps_its_cause(rewards_file, tmp_path):
    components = build("my_rewards.py:broken", base_dir=tmp_path)
    with pytest.raises(RewardError) as info:
        combine_rewards(components, ["p"], ["c"], {"answer": ["c"]})
    line = line_of(rewards_file, "len(c) / scale")
    assert str(info.value) == (f"reward component 'broken' (my_rewards.py:broken) failed with ZeroDivisionError: "
                               f"division by zero (at {rewards_file.resolve()}, line {line})")
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert user_code_location(info.value) == (str(rewards_file.resolve()), line)


@pytest.mark.parametrize("function, expected", [
    ("too_few", "reward component 'too_few' (my_rewards.py:too_few) returned 1 values for 2 completions; "
                "it must return exactly one float per completion."),
    ("words", "reward component 'words' (my_rewards.py:words) returned 'good' at index 0; every reward must be a "
              "finite real number"),
    ("not_a_number", "reward component 'not_a_number' (my_rewards.py:not_a_number) returned nan at index 0; "
                     "every reward must be a finite real number (no None, NaN or inf)."),
])
def test_bad_return_values_name_the_function(rewards_file, tmp_path, function, expected):
    components = build(f"my_rewards.py:{function}", base_dir=tmp_path)
    with pytest.raises(RewardError) as info:
        combine_rewards(components, ["p", "p"], ["a", "b"], {"answer": ["a", "b"]})
    assert str(info.value).startswith(expected)


def test_bad_return_values_point_at_the_function(rewards_file, tmp_path):
    from engine.run.failures import failure_location

    components = build("my_rewards.py:not_a_number", base_dir=tmp_path)
    with pytest.raises(RewardError) as info:
        combine_rewards(components, ["p"], ["a"], {"answer": ["a"]})
    assert failure_location(info.value) == (str(rewards_file.resolve()), line_of(rewards_file, "def not_a_number"))


SLOW_PY = '''\
import time


def slow(prompts, completions, timeout="mine", **fields):
    while True:
        time.sleep(0.01)


def takes_timeout(prompts, completions, timeout=1, **fields):
    return [float(timeout) + len(fields) for _ in completions]
'''


def test_a_reward_that_does_not_return_times_out_with_its_line(tmp_path):
    from engine.run.failures import failure_location
    from engine.rewards import RewardTimeout

    (tmp_path / "slow_rewards.py").write_text(SLOW_PY)
    components = build("slow_rewards.py:slow", {"reward_timeout": 0.3}, base_dir=tmp_path)
    start = time.monotonic()
    with pytest.raises(RewardTimeout) as info:
        combine_rewards(components, ["p"], ["a"], {"answer": ["a"]})
    assert time.monotonic() - start < 30
    path = (tmp_path / "slow_rewards.py").resolve()
    assert str(info.value) == (
        f"reward component 'slow' (slow_rewards.py:slow) did not return within 0.3 s (it was at {path}, line 6); "
        "make it faster, or give it more time with options: {reward_timeout: SECONDS} (null: no limit)")
    assert failure_location(info.value) == (str(path), 6)


def test_reward_timeout_is_reserved_not_passed_and_checked(rewards_file, tmp_path):
    from engine.rewards.custom import DEFAULT_TIMEOUT_S

    (tmp_path / "slow_rewards.py").write_text(SLOW_PY)
    # the function's own `timeout` option still reaches it; reward_timeout does not
    components = build("slow_rewards.py:takes_timeout", {"timeout": 5, "reward_timeout": None}, base_dir=tmp_path)
    assert combine_rewards(components, ["p"], ["a"], {"answer": ["a"]})[1]["takes_timeout"] == [6.0]
    assert components[1][2].timeout is None
    assert build("slow_rewards.py:takes_timeout", base_dir=tmp_path)[1][2].timeout == DEFAULT_TIMEOUT_S == 300
    for bad in (0, -1, "soon", True):
        with pytest.raises(RewardError, match=r"rewards\[1\] \(slow_rewards.py:takes_timeout\): "
                                              r"options.reward_timeout must be a number of seconds > 0"):
            build("slow_rewards.py:takes_timeout", {"reward_timeout": bad}, base_dir=tmp_path)
        ((field, message),) = static_problems("slow_rewards.py:takes_timeout", {"reward_timeout": bad}, tmp_path)
        assert field == "options" and message.startswith("reward_timeout must be")
    # a function without **fields is not told about an unknown option reward_timeout
    assert static_problems("my_rewards.py:answer_length", {"reward_timeout": 5}, tmp_path) == []


def test_sys_exit_in_a_reward_is_a_reward_error(tmp_path):
    (tmp_path / "exits.py").write_text("import sys\n\ndef score(prompts, completions, **fields):\n    sys.exit(3)\n")
    components = build("exits.py:score", base_dir=tmp_path)
    with pytest.raises(RewardError, match=r"failed with RuntimeError: called sys.exit\(3\)"):
        combine_rewards(components, ["p"], ["a"], {"answer": ["a"]})


def test_without_a_time_limit_a_reward_runs_in_the_engines_thread(tmp_path):
    # Code tied to one thread (a sqlite connection opened at import) must keep working
    # when the user turns the limit off; with a limit it runs in a worker thread.
    (tmp_path / "thread_rewards.py").write_text(
        "import threading\n\ndef where(prompts, completions, **fields):\n"
        "    return [float(threading.current_thread() is threading.main_thread())] * len(completions)\n")
    unlimited = build("thread_rewards.py:where", {"reward_timeout": None}, base_dir=tmp_path)
    assert combine_rewards(unlimited, ["p"], ["a"], {"answer": ["a"]})[1]["where"] == [1.0]
    limited = build("thread_rewards.py:where", base_dir=tmp_path)
    assert combine_rewards(limited, ["p"], ["a"], {"answer": ["a"]})[1]["where"] == [0.0]
    (tmp_path / "exits2.py").write_text("import sys\n\ndef score(prompts, completions, **fields):\n    sys.exit(3)\n")
    with pytest.raises(RewardError, match=r"failed with RuntimeError: called sys.exit\(3\)"):
        combine_rewards(build("exits2.py:score", {"reward_timeout": None}, base_dir=tmp_path), ["p"], ["a"], {"answer": ["a"]})


def test_numpy_results_are_accepted(tmp_path):
    # numpy is a hard dependency (torch and transformers need it). "Accepted" means a
    # numpy array, or a list of numpy scalars, comes out as plain Python floats: numpy
    # scalars compare equal to floats, so the values alone would not tell; the types do
    # (np.float64 subclasses float, hence `type(v) is float`), and json writes them.
    (tmp_path / "np_rewards.py").write_text(
        "import numpy as np\n\ndef score(prompts, completions, **fields):\n"
        "    return np.array([len(c) for c in completions], dtype=np.float32)\n\n"
        "def scalars(prompts, completions, **fields):\n"
        "    return [np.int64(len(c)) for c in completions]\n\n"
        "def wide(prompts, completions, **fields):\n"
        "    return np.ones(len(completions) + 1)\n\n"
        "def nan(prompts, completions, **fields):\n"
        "    return np.array([np.nan] * len(completions))\n")
    for function in ("score", "scalars"):
        components = build(f"np_rewards.py:{function}", base_dir=tmp_path)
        total, parts = combine_rewards(components, ["p", "p"], ["ab", "c"], {"answer": ["ab", "x"]})
        assert parts[function] == [2.0, 1.0] and total == [3.0, 1.0]  # + exact_match: "ab" is right
        assert all(type(v) is float for v in [*parts[function], *total]), (function, parts, total)
        assert json.loads(json.dumps(parts))[function] == [2.0, 1.0]
    # A numpy result is held to the same checks as a list: the count, and finite values.
    with pytest.raises(RewardError, match="returned 3 values for 2 completions"):
        combine_rewards(build("np_rewards.py:wide", base_dir=tmp_path), ["p", "p"], ["ab", "c"], {"answer": ["ab", "x"]})
    with pytest.raises(RewardError, match="returned nan at index 0"):
        combine_rewards(build("np_rewards.py:nan", base_dir=tmp_path), ["p", "p"], ["ab", "c"], {"answer": ["ab", "x"]})


# ------------------------------------------------- reading a file without running it


def test_static_checks_match_what_loading_finds(rewards_file, tmp_path):
    assert static_problems("my_rewards.py:brevity", {"target": 3}, tmp_path) == []
    ((field, message),) = static_problems("my_rewards.py:brevty", {}, tmp_path)
    assert field == "name" and message == (f"no function 'brevty' in {rewards_file.resolve()}; it defines: brevity, "
                                           "answer_length, broken, too_few, words, not_a_number, as_tuple, later")
    ((field, message),) = static_problems("my_rewards.py:answer_length", {"scale": 2}, tmp_path)
    assert field == "options" and "answer_length has no parameter 'scale'" in message
    ((field, message),) = static_problems("missing.py:f", {}, tmp_path)
    assert field == "name" and message.startswith("file missing.py not found")
    assert static_problems("my_rewards.py:THRESHOLD", {}, tmp_path) == []  # bound, not a def: checked on load
    assert function_options("my_rewards.py:brevity", tmp_path) == {"target": 10}
    assert function_options("my_rewards.py:answer_length", tmp_path) == {}


# ------------------------------------------------------------------ try-reward


def write_preset(tmp_path, rewards, **extra) -> Path:
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump({"rewards": rewards, **extra}))
    return path


def test_try_reward_prints_each_component_and_the_total(rewards_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the file is found next to the preset
    preset = write_preset(tmp_path, [{"name": "exact_match"}, {"name": "sort_position", "weight": 0.5},
                                     {"name": "my_rewards.py:brevity", "weight": 0.1, "options": {"target": 4}}])
    assert main(["try-reward", str(preset), "--prompt", "sort 3 1 2 =", "--completion", " 1 2 3",
                 "--field", "answer= 1 2 3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["component", "weight", "value", "weighted", "source"]
    assert lines[1].split() == ["exact_match", "1", "1.0000", "1.0000"]
    assert lines[2].split() == ["sort_position", "0.5", "1.0000", "0.5000"]
    assert lines[3].split() == ["brevity", "0.1", "-0.5000", "-0.0500", "my_rewards.py:brevity"]
    assert lines[4].split() == ["total", "1.4500"]


def test_try_reward_failures(rewards_file, tmp_path, capsys):
    preset = write_preset(tmp_path, [{"name": "exact_match"}, {"name": "my_rewards.py:broken"}])
    args = ["try-reward", str(preset), "--prompt", "p", "--completion", "c"]
    assert main(args) == 2  # exact_match needs the answer
    err = capsys.readouterr().err
    assert "needs the field 'answer'" in err and "--field NAME=VALUE" in err
    assert main([*args, "--field", "answer"]) == 2
    assert "--field 'answer': expected NAME=VALUE" in capsys.readouterr().err
    assert main([*args, "--set", "rewards.0.weight=heavy"]) == 2
    assert "rewards.0.weight" in capsys.readouterr().err
    assert main([*args, "--field", "answer=c"]) == 1
    err = capsys.readouterr().err
    line = line_of(rewards_file, "len(c) / scale")
    assert err.startswith("error: reward component 'broken' (my_rewards.py:broken) failed with ZeroDivisionError")
    assert f"{rewards_file.resolve()}, line {line}" in err
    assert main([*args, "--field", "answer=c", "--set", "rewards.1.name=my_rewards.py:nope"]) == 1
    assert "rewards[1] (my_rewards.py:nope): no function 'nope'" in capsys.readouterr().err


def test_validate_reports_a_missing_function(rewards_file, tmp_path):
    preset = write_preset(tmp_path, [{"name": "my_rewards.py:nope"}])
    result = cli("validate", preset)
    assert result.code == 2 and "rewards.0.name: no function 'nope'" in result.err


# ------------------------------------------------------------- a run that fails


def test_a_run_whose_reward_raises_reports_the_users_file_and_line(tmp_path):
    folder = tmp_path / "presets"
    folder.mkdir()
    rewards_file = folder / "my_rewards.py"
    rewards_file.write_text(textwrap.dedent('''\
        def strict(prompts, completions, **fields):
            for c in completions:
                if len(c) > 0:
                    raise ValueError(f"cannot score {c!r}")
            return [0.0 for c in completions]
        '''))
    data = small_preset_dict(max_steps=2)
    data["rewards"] = [{"name": "exact_match"}, {"name": "my_rewards.py:strict", "weight": 0.5}]
    (folder / "p.yaml").write_text(yaml.safe_dump(data))
    run = tmp_path / "run"
    # started from another folder: the file is found next to the preset
    result = cli("run", folder / "p.yaml", "--run-dir", run, "--quiet", cwd=ROOT)
    assert result.returncode == 1
    saved = yaml.safe_load((run / "preset.yaml").read_text())
    assert saved["rewards"][1]["name"] == f"{rewards_file.resolve()}:strict"  # resume finds it from anywhere
    (failed,) = [e for e in rundir.read_events(run) if e["type"] == "run_failed"]
    assert failed["file"] == str(rewards_file.resolve()) and failed["line"] == 4
    assert failed["message"].startswith("reward component 'strict' (")
    assert "failed with ValueError: cannot score" in failed["message"]
    # The place is said once (the message's "(at FILE, line 4)"), not again as FILE:4.
    error = next(l for l in result.stderr.splitlines() if l.startswith("error:"))
    assert error.count(f"{rewards_file.resolve()}, line 4") == 1 and f"{rewards_file.resolve()}:4" not in error
    assert "Traceback" not in result.stderr
