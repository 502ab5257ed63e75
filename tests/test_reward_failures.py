"""Failures that must be reported as what they are, naming the culprit: a reward that
raises KeyboardInterrupt itself (not "aborted by a second Ctrl-C"), a reward too large
for float32 (not every step skipped in silence), a corrupt parquet prompt file (not a
made-up location in pyarrow's compiled code)."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

import pytest
import yaml

from conftest import small_preset_dict
from engine.run import rundir
from engine.cli import main
from engine.data.files import load_prompt_file
from engine.run.failures import failure_location, user_code_location
from engine.preset.schema import preset_from_dict
from engine.rewards import RewardError, build_reward_components, combine_rewards

REWARDS_PY = textwrap.dedent('''\
    import signal


    def interrupts(prompts, completions, **fields):
        raise KeyboardInterrupt


    def ctrl_c_twice(prompts, completions, **fields):
        signal.raise_signal(signal.SIGINT)  # the first stops after the step
        signal.raise_signal(signal.SIGINT)  # the second aborts
        return [0.0 for _ in completions]


    def huge(prompts, completions, **fields):
        return [1e300 for _ in completions]


    def big(prompts, completions, **fields):
        return [3e38 for _ in completions]
    ''')


@pytest.fixture
def rewards_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARDS_PY)
    return path


def build(function, base_dir, **options):
    preset = preset_from_dict({"rewards": [{"name": f"my_rewards.py:{function}", "options": options}]})
    return build_reward_components(preset.rewards, base_dir=base_dir)


def score(components):
    return combine_rewards(components, ["p"], ["c"], {"answer": ["c"]})


def raised_by(components) -> BaseException:
    # BaseException: a KeyboardInterrupt that escaped would otherwise end the test session.
    with pytest.raises(BaseException) as info:
        score(components)
    return info.value


# ------------------------------------------------- 6a: KeyboardInterrupt raised by a reward


@pytest.mark.parametrize("options", [{}, {"reward_timeout": None}], ids=["worker thread", "main thread"])
def test_a_reward_raising_keyboard_interrupt_is_its_failure(rewards_file, tmp_path, engine_handlers, options):
    error = raised_by(build("interrupts", tmp_path, **options))
    assert isinstance(error, RewardError), repr(error)
    assert str(error).startswith("reward component 'interrupts' (my_rewards.py:interrupts) failed with RuntimeError: "
                                 "raised KeyboardInterrupt though no Ctrl-C was pressed")
    assert f"(at {rewards_file.resolve()}, line 5)" in str(error)
    assert failure_location(error) == (str(rewards_file.resolve()), 5)


def test_a_real_second_ctrl_c_inside_a_reward_still_aborts(rewards_file, tmp_path, engine_handlers):
    # In the engine's own thread a Ctrl-C can land inside the function: that is the user's.
    error = raised_by(build("ctrl_c_twice", tmp_path, reward_timeout=None))
    assert type(error) is KeyboardInterrupt
    assert engine_handlers.requested and engine_handlers.reason == "SIGINT"


def test_without_the_engines_handlers_a_keyboard_interrupt_in_the_main_thread_is_kept(rewards_file, tmp_path):
    # Python's own SIGINT handler does not count Ctrl-C: it may be the user's, keep it.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert type(raised_by(build("interrupts", tmp_path, reward_timeout=None))) is KeyboardInterrupt
    # in a worker thread it cannot be a Ctrl-C, handlers or not
    assert isinstance(raised_by(build("interrupts", tmp_path)), RewardError)


def test_a_run_whose_reward_raises_keyboard_interrupt_names_the_reward(rewards_file, tmp_path):
    data = small_preset_dict(max_steps=1)
    data["rewards"] = [{"name": "exact_match"}, {"name": f"{rewards_file}:interrupts"}]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    run = tmp_path / "run"
    assert main(["run", str(tmp_path / "p.yaml"), "--run-dir", str(run), "--quiet"]) == 1
    (failed,) = [e for e in rundir.read_events(run) if e["type"] == "run_failed"]
    assert "Ctrl-C" not in failed["message"].replace("though no Ctrl-C was pressed", "")
    assert failed["message"].startswith("reward component 'interrupts' (")
    assert "aborted" not in failed
    assert (failed["file"], failed["line"]) == (str(rewards_file.resolve()), 5)


# ------------------------------------------------------ 6b: rewards too large for float32


def test_a_reward_too_large_for_float32_is_refused_naming_it(rewards_file, tmp_path):
    error = raised_by(build("huge", tmp_path))
    assert isinstance(error, RewardError)
    assert str(error).startswith("reward component 'huge' (my_rewards.py:huge) returned 1e+300 at index 0; "
                                 "too large")
    assert "float32" in str(error)
    assert failure_location(error) == (str(rewards_file.resolve()), 14)  # its `def`


@pytest.mark.parametrize("value", [3.5e38, -3.5e38, 10**400], ids=["3.5e38", "-3.5e38", "10**400"])
def test_values_beyond_float32_are_refused_up_to_its_largest(value):
    # float32's largest is 3.4028234663852886e38: 3.4e38 fits, 3.5e38 would be inf
    def reward(prompts, completions, **fields):
        return [3.4e38, value]

    with pytest.raises(RewardError, match=r"returned .* at index 1; too large"):
        combine_rewards([("r", 1.0, reward)], ["p", "p"], ["a", "b"], {})


def test_a_weighted_sum_too_large_for_float32_is_refused(rewards_file, tmp_path):
    # each 3e38 fits; the sum 6e38 does not
    components = [("a", 1.0, build("big", tmp_path)[0][2]), ("b", 1.0, lambda p, c, **f: [3e38])]
    with pytest.raises(RewardError, match=r"weighted sum of the rewards at index 0 is 6e\+38 \(a=3e\+38, b=3e\+38\)"):
        combine_rewards(components, ["p"], ["c"], {})
    assert combine_rewards(components[:1], ["p"], ["c"], {})[0] == [3e38]


# ------------------------------------------------------------ 6c: a corrupt parquet file


def test_a_corrupt_parquet_file_is_named_with_no_made_up_location(tmp_path, monkeypatch):
    import pyarrow  # noqa: F401  (the [test] extra, and datasets needs it: missing fails, not skips)
    monkeypatch.chdir(tmp_path)  # pyarrow's frames said `<cwd>/pyarrow/error.pxi`
    bad = tmp_path / "prompts.parquet"
    bad.write_bytes(b"PAR1 not a parquet file")
    with pytest.raises(ValueError) as info:
        load_prompt_file(bad)
    assert str(info.value).startswith(f"{bad}: cannot read it as parquet (")
    # the innermost frame outside the engine is this test's call, not pyarrow's code
    assert failure_location(info.value) == (__file__, info.traceback[0].lineno + 1)


def test_a_run_on_a_corrupt_parquet_file_names_the_file(tmp_path, monkeypatch, capsys):
    import pyarrow  # noqa: F401  (the [test] extra, and datasets needs it: missing fails, not skips)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts.parquet").write_bytes(b"PAR1 not a parquet file")
    data = small_preset_dict(max_steps=1)
    data["data"] = {"task": None, "path": "prompts.parquet", "num_eval": 0}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    # (the exit status, 1 or 2 for bad input, is test_cli's subject)
    assert main(["run", str(tmp_path / "p.yaml"), "--run-dir", str(tmp_path / "run"), "--quiet"]) != 0
    (failed,) = [e for e in rundir.read_events(tmp_path / "run") if e["type"] == "run_failed"]
    assert "file" not in failed and "line" not in failed
    assert f"{tmp_path / 'prompts.parquet'}: cannot read it as parquet" in failed["message"]
    assert "error.pxi" not in capsys.readouterr().err


def test_a_frame_of_a_file_that_does_not_exist_is_no_location(tmp_path, monkeypatch):
    # Compiled modules name sources relative to nothing; resolved against the current
    # folder they became a location the user could not open.
    monkeypatch.chdir(tmp_path)
    code = compile("raise ValueError('bad')", "somelib/error.pxi", "exec")
    with pytest.raises(ValueError) as info:
        exec(code)
    # the innermost frame in a real file is this test's exec, not `<cwd>/somelib/error.pxi`
    assert user_code_location(info.value) == (__file__, info.traceback[0].lineno + 1)
    real = tmp_path / "real.py"
    real.write_text("raise ValueError('bad')\n")
    with pytest.raises(ValueError) as info:
        exec(compile(real.read_text(), str(real), "exec"))
    assert user_code_location(info.value) == (str(real), 1)
