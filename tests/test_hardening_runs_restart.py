"""A run killed before its first checkpoint is not a dead end: `rl-engine resume RUN_DIR`
starts it again from step 0 in the same folder (from the folder's preset.yaml), appending
a `run_resumed` with `restarted: true` to events.jsonl; the window's reader drops what the
aborted attempt logged, and the window offers Resume for such a run.

The kill is a process subject: the engine is started as a process and killed with
SIGKILL during set-up, then (resumed as a process) again after its first step; the last
resume runs in this process (tests/engine_runs.py's `cli`) to the end.
"""

from __future__ import annotations

import signal

import pytest
import yaml

from conftest import ROOT, small_preset_dict
from engine.run import rundir
from engine.run.failures import no_checkpoint_message
from engine_runs import cli, start_engine, subprocess_env, wait_for
from workbench.runs.rundata import RunData
from workbench.runs.status import resume_note, resume_problem
from workbench.runs.summaries import summarize_run

SETS = ["training.max_steps=40", "training.save_steps=0", "training.eval_steps=0", "training.batch_size=8",
        "algorithm.num_generations=4", "algorithm.max_completion_length=8", "data.num_train=64",
        "data.num_eval=4", "training.log_completions=2", "training.record_rollouts=2"]


def killed(proc) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdout.close()
    proc.stderr.close()


def test_a_run_killed_before_its_first_checkpoint_is_started_again_by_resume(tmp_path):
    run = tmp_path / "run"
    env = subprocess_env(OMP_NUM_THREADS="1")
    sets = [a for item in SETS for a in ("--set", item)]
    # 1. killed during set-up: the folder holds the resolved preset (and a log), no event yet
    proc = start_engine(["run", ROOT / "presets" / "grpo-sort.yaml", "--run-dir", run, "--quiet", *sets],
                        env=env, cwd=tmp_path)
    assert wait_for(lambda: (run / rundir.PRESET_FILE).exists()), "the run folder never appeared"
    killed(proc)
    assert not rundir.complete_checkpoints(run) and (run / rundir.PRESET_FILE).exists()

    # 2. resumed (a process): it starts again from step 0; killed after its first step,
    #    still before any checkpoint (save_steps 0: the first is the last step's)
    proc = start_engine(["resume", run, "--quiet"], env=env, cwd=tmp_path)
    steps = lambda: [e["step"] for e in rundir.read_events(run) if e["type"] == "metrics"]  # noqa: E731
    assert wait_for(lambda: len(steps()) >= 1 or proc.poll() is not None), "no step was trained"
    assert proc.poll() is None, proc.stderr.read()
    killed(proc)
    assert not rundir.complete_checkpoints(run)
    first = [e for e in rundir.read_events(run) if e["type"] in rundir.LIFECYCLE_EVENTS]
    assert [(e["type"], e.get("restarted"), e.get("checkpoint")) for e in first] == [("run_resumed", True, None)]
    assert first[0]["step"] == 0 and first[0]["data_position"] == 0 and first[0]["preset"]["name"] == "grpo-sort"
    assert "has no complete checkpoint to resume from" in no_checkpoint_message(run)
    assert f"Start it again from step 0: rl-engine resume {run}" in no_checkpoint_message(run)

    # 3. resumed again, to the end (two steps, in this process)
    result = cli("resume", run, "--quiet", "--set", "training.max_steps=2", cwd=tmp_path)
    assert result.code == 0, result.err
    assert f"{run} has no complete checkpoint: the engine was killed (it wrote no final event) after step" in result.err
    assert "; starting it again from step 0 in the same folder" in result.err and "Traceback" not in result.err
    events = rundir.read_events(run)
    lifecycle = [(e["type"], e.get("restarted")) for e in events if e["type"] in rundir.LIFECYCLE_EVENTS]
    assert lifecycle == [("run_resumed", True), ("run_resumed", True), ("run_finished", None)]
    assert events[-1] == {**events[-1], "type": "run_finished", "status": "done", "step": 2,
                          "checkpoint": "checkpoints/step_000002"}
    assert [p.name for p in rundir.complete_checkpoints(run)] == ["step_000002"]
    assert yaml.safe_load((run / rundir.PRESET_FILE).read_text())["training"]["max_steps"] == 2

    # what the window shows of it: the last attempt alone, done
    data = RunData(run)
    data.poll()
    assert data.status == "done" and data.last_step == 2 and data.max_steps == 2
    assert data.metrics.steps.tolist() == [1, 2]
    assert data.evals.steps.tolist() == [0, 2]  # step 0's evaluation once: the earlier attempt's is dropped
    assert sorted({s.step for s in data.samples.rows}) == [1, 2]
    summary = summarize_run(run)
    assert summary.status == "done" and summary.step == 2
    assert resume_problem(run, summary.status).startswith("the run is done")


def write_aborted_attempt(run, **training) -> None:
    """A run folder as an engine killed at step 3 of its first attempt leaves it: the
    resolved preset, run_started, step 0's evaluation, three steps' metrics and samples,
    an alarm; no checkpoint."""
    run.mkdir()
    data = small_preset_dict(**training)
    data["data"]["num_eval"] = 4
    (run / rundir.PRESET_FILE).write_text(yaml.safe_dump(data))
    writer = rundir.EventWriter(run)
    writer.emit("run_started", step=0, preset=data, max_steps=3, pid=1)
    writer.emit("eval", step=0, reward=0.125, accuracy=0.0, samples=[{"prompt": "old", "completion": "x",
                                                                       "reward": 0.125}])
    for step in (1, 2, 3):
        writer.emit("metrics", step=step, reward=9.0, loss=1.0)
        writer.emit("samples", step=step, samples=[{"index": 0, "group": 0, "prompt": "old", "completion": "x",
                                                    "reward": 9.0, "rewards": {}, "advantage": 0.0}])
    writer.emit("alarm", step=2, kind="kl_spike", title="KL spike", began=1, steps=[1, 2], metric="kl",
                saw="old", why="old", evidence={}, **{"try": []})
    writer.close()


def test_the_window_reader_drops_the_aborted_attempt_of_a_restarted_run(tmp_path):
    run = tmp_path / "run"
    write_aborted_attempt(run, max_steps=2)
    live = RunData(run)
    live.poll()  # a window that had the killed run open
    assert live.metrics.steps.tolist() == [1, 2, 3] and len(live.alarms) == 1

    result = cli("resume", run, "--quiet", cwd=tmp_path)
    assert result.code == 0, result.err
    for data in (live, RunData(run)):  # followed live, and opened afresh
        data.poll()
        assert data.status == "done" and data.last_step == 2
        assert data.metrics.steps.tolist() == [1, 2] and 9.0 not in data.metrics.column("reward").tolist()
        assert data.evals.steps.tolist() == [0, 2]  # step 0 evaluated again, and shown once; then the final one
        assert [s for s, _ in data.eval_samples] == [0, 2] and data.eval_samples[0][1][0]["prompt"] != "old"
        assert all(s.prompt != "old" for s in data.samples.rows)
        assert data.alarms == [] or all(a["saw"] != "old" for a in data.alarms)
        assert data.started["restarted"] is True and data.started["checkpoint"] is None


def test_a_restart_tells_tensorboard_to_drop_the_aborted_attempt(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    write_aborted_attempt(run, max_steps=1)
    assert cli("resume", run, "--quiet", cwd=tmp_path).code == 0
    out = tmp_path / "tb"
    assert cli("export", run, "--tensorboard", out).code == 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(out))
    accumulator.Reload()
    assert [e.step for e in accumulator.Scalars("reward")] == [1]  # the aborted attempt's 9.0 at steps 1-3 dropped
    assert 9.0 not in [e.value for e in accumulator.Scalars("reward")]
    assert [e.step for e in accumulator.Scalars("eval/reward")] == [0, 1]  # step 0's once


def test_resume_of_a_folder_without_the_runs_preset_still_says_why(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / rundir.LOG_FILE).write_text("")
    result = cli("resume", empty, cwd=tmp_path)
    assert result.code == 2
    assert result.err.strip() == f"error: {empty} holds no run (no events.jsonl or preset.yaml)"
    assert cli("resume", tmp_path / "nowhere", cwd=tmp_path).err.strip() == f"error: {tmp_path / 'nowhere'} is not a folder"


def test_the_banner_and_runs_tab_offer_resume_for_a_run_without_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    write_aborted_attempt(run, max_steps=2)
    assert resume_problem(run, "killed") is None and resume_problem(run, "failed") is None
    assert resume_note(run, None) == "It has no checkpoint: Resume starts it again from step 0 in this folder."
    assert resume_problem(run, "running") == "the run is still training"
    (run / rundir.PRESET_FILE).unlink()  # no preset to start again from: greyed out, saying why
    assert "no complete checkpoint" in resume_problem(run, "killed")


def test_a_restart_is_a_new_tracked_run_not_a_continued_one(tmp_path, monkeypatch):
    """wandb/trackio: a resume continues the tracked run (its steps go on); a restart logs
    step 0 onwards again, so it is a run of its own."""
    import sys

    from test_trackers import StandIn, trainer

    module = StandIn("wandb")
    monkeypatch.setitem(sys.modules, "wandb", module)
    assert trainer(tmp_path, "wandb", max_steps=1).run() == "done"
    assert trainer(tmp_path, "wandb", max_steps=1).run(restart=True) == "done"
    first, again = module.inits
    assert "resume" not in again and "id" not in again and again["name"] == first["name"] == "run"
