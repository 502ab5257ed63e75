"""The headless CLI as a user runs it: progress, stop by signal or stdin, failures.

Where the process is the subject (its progress bar and exit status, a signal, stdin) the
engine is a real process: test_run_to_the_end is run's real-process check, the sigterm
case of test_stop_... resume's. The rest call the CLI in this process (engine_runs.cli)."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, small_preset_dict
from engine.run import rundir
from engine_runs import cli, engine, start_engine, wait_for


def write_preset(tmp_path, **training) -> Path:
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump(small_preset_dict(**training)))
    return path


def metrics_written(run_dir):
    return lambda: any(e["type"] == "metrics" for e in rundir.read_events(run_dir))


def test_run_to_the_end(tmp_path, engine_env):
    # run's real-process check: a `python -m engine run` process, its progress bar and exit status.
    preset = write_preset(tmp_path, max_steps=2)
    run = tmp_path / "run"
    result = engine("run", preset, "--run-dir", run, env=engine_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "2/2" in result.stderr  # the progress bar reached the end
    events = rundir.read_events(run)
    assert events[-1] == {**events[-1], "type": "run_finished", "status": "done", "step": 2}
    again = cli("run", preset, "--run-dir", run, cwd=tmp_path)
    assert again.returncode == 2 and "already holds a run" in again.stderr


def test_stop_saves_a_checkpoint_and_exits_zero(tmp_path, engine_env):
    # The stop line on stdin (the window's Stop). SIGTERM's stop in a real process is
    # tests/test_reliability.py's test_a_stop_mid_step_finishes_the_step_and_saves_it.
    preset = write_preset(tmp_path, max_steps=500)
    run = tmp_path / "run"
    proc = start_engine(["run", preset, "--run-dir", run, "--quiet"], engine_env, tmp_path, stdin=subprocess.PIPE)
    try:
        assert wait_for(metrics_written(run)), "no step was taken"
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    events = rundir.read_events(run)
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "stopped"
    step = events[-1]["step"]
    assert 1 <= step < 500
    (checkpoint,) = rundir.complete_checkpoints(run)
    assert json.loads((checkpoint / "state.json").read_text())["step"] == step

    # resume's real-process check
    resumed = engine("resume", run, "--quiet", "--set", f"training.max_steps={step + 1}", env=engine_env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    events = rundir.read_events(run)
    assert [e["step"] for e in events if e["type"] == "metrics"][-1] == step + 1
    assert events[-1]["status"] == "done"


def test_failure_writes_run_failed_and_exits_nonzero(tmp_path):
    preset = write_preset(tmp_path)
    run = tmp_path / "run"
    result = cli("run", preset, "--run-dir", run, "--set", f"model.name_or_path={tmp_path / 'no-such-model'}",
                 cwd=tmp_path)
    assert result.returncode == 2  # a model the preset names that cannot load: input, as validate says
    assert "Traceback" not in result.stderr and "model.name_or_path" in result.stderr
    (failed,) = [e for e in rundir.read_events(run) if e["type"] == "run_failed"]
    assert "model.name_or_path" in failed["message"]
    assert "Traceback" in (run / "engine.log").read_text()  # the details stay in the log


def test_bad_preset_is_exit_2_and_writes_no_run(tmp_path):
    preset = write_preset(tmp_path)
    result = cli("run", preset, "--run-dir", tmp_path / "run", "--set", "algorithm.temperature=-1", cwd=tmp_path)
    assert result.returncode == 2
    assert "algorithm.temperature:" in result.stderr and "greater than 0" in result.stderr
    assert not (tmp_path / "run").exists()


def test_prompt_file_run_resolves_its_path(tmp_path):
    rows = [{"prompt": f"sort {a} {b} =", "answer": f" {min(a, b)} {max(a, b)}"} for a in range(5) for b in range(4)]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = small_preset_dict(max_steps=1)
    data["data"] = {"task": None, "path": "data/pairs.jsonl", "num_eval": 4}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    run = tmp_path / "run"
    # started from another folder: the path is relative to the preset file
    result = cli("run", tmp_path / "p.yaml", "--run-dir", run, "--quiet", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    saved = yaml.safe_load((run / "preset.yaml").read_text())
    assert Path(saved["data"]["path"]).is_absolute()
    started = rundir.read_events(run)[0]
    assert started["num_train"] == 16 and started["num_eval"] == 4
    evals = [e for e in rundir.read_events(run) if e["type"] == "eval"]
    assert evals and evals[0]["accuracy"] is not None  # the file has answers


def test_user_code_location_finds_the_users_frame(tmp_path):
    import importlib.util

    from engine.run.failures import user_code_location
    from engine.rewards import combine_rewards

    source = tmp_path / "my_reward.py"
    source.write_text("def reward(prompts, completions, **kw):\n    return [1 / 0 for _ in prompts]\n")
    spec = importlib.util.spec_from_file_location("my_reward", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(Exception) as info:
        combine_rewards([("mine", 1.0, module.reward)], ["p"], ["c"], {})
    assert "mine" in str(info.value)
    assert user_code_location(info.value) == (str(source.resolve()), 2)


@pytest.mark.parametrize("metrics, shown", [
    ({"reward": 0.25, "loss": 0.5}, {"reward": "0.250", "loss": "0.500"}),  # GRPO, PPO
    ({"loss": 0.69, "rewards/accuracies": 0.75}, {"acc": "0.750", "loss": "0.690"}),  # DPO: no reward
    ({"reward": 0.25, "loss": None}, {"reward": "0.250"}),  # a skipped (non-finite) step
    ({}, {}),
])
def test_progress_bar_shows_what_the_algorithm_logs(metrics, shown):
    from engine.run.progress import progress_callback, progress_postfix

    assert progress_postfix(metrics) == shown
    on_step, close = progress_callback(max_steps=3, start_step=0, quiet=False)
    try:
        on_step(1, metrics)  # DPO's metrics once raised KeyError 'reward' here
    finally:
        close()
