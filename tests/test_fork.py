"""Forks: `rl-engine fork RUN_DIR` starts a new run from a run's checkpoint with settings
changed (engine/commands/fork.py), and the window's "Fork from here…" launches it and shows the
family in the Runs tab (workbench/runs/fork_dialog.py, workbench/window/fork.py).

The parent is the session's trained run (tests/conftest.py: 4 steps, checkpoints at 2 and
4). Forks and refusals run in this process (engine_runs.cli); the first test is fork's
real-process check, and the window's test launches its fork as the window does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from PySide6.QtCore import Qt

from engine.run import rundir
from engine.preset.schema import load_preset
from engine_runs import cli, engine
from workbench.runs.fork_dialog import ForkDialog
from workbench.runs.launcher import engine_fork_command
from workbench.runs.runs_view import COLUMNS
from workbench.runs.summaries import RunIndex
from workbench_helpers import type_text, write_run
from window_fixtures import Asked, make_window, window  # noqa: F401 (fixtures)

# What differs between two runs of the very same steps: the clock.
TIMING = ("step_time", "timing/", "throughput/", "time")


@pytest.fixture
def parent_run(trained_run) -> Path:
    """The session's trained run: grpo-sort, 4 steps, checkpoints at steps 2 and 4 (read
    only: forks go to folders of their own)."""
    return trained_run


def metrics_by_step(run: Path) -> dict[int, dict]:
    return {e["step"]: e for e in rundir.read_events(run) if e["type"] == "metrics"}


def without_timing(event: dict) -> dict:
    return {k: v for k, v in event.items() if not k.startswith(TIMING)}


# ------------------------------------------------------------------ the engine


def test_a_fork_with_no_changes_takes_the_parents_very_steps(parent_run, tmp_path, engine_env):
    # fork's real-process check: a `python -m engine fork` process, to its exit status.
    fork = tmp_path / "fork"
    result = engine("fork", parent_run, "--checkpoint", "step_000002", "--run-dir", fork, "--quiet",
                    env=engine_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    events = rundir.read_events(fork)
    started = events[0]
    assert started["type"] == "run_started" and started["step"] == 2
    assert started["parent"] == {"run": str(parent_run.resolve()), "checkpoint": "step_000002", "step": 2}
    assert "run_resumed" not in [e["type"] for e in events]
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done" and events[-1]["step"] == 4
    # Its steps go on numbering from the checkpoint's, with the parent's very metrics.
    parent, child = metrics_by_step(parent_run), metrics_by_step(fork)
    assert sorted(child) == [3, 4]
    for step in (3, 4):
        assert without_timing(child[step]) == without_timing(parent[step]), step
    parent_samples = {e["step"]: e["samples"] for e in rundir.read_events(parent_run) if e["type"] == "samples"}
    for e in events:
        if e["type"] == "samples":
            assert [s["completion"] for s in e["samples"]] == [s["completion"] for s in parent_samples[e["step"]]]
    # A new run folder of its own: its preset, its checkpoints; the parent untouched.
    assert load_preset(fork / rundir.PRESET_FILE) == load_preset(parent_run / rundir.PRESET_FILE)
    assert [p.name for p in rundir.complete_checkpoints(fork)] == ["step_000004"]
    assert [e["type"] for e in rundir.read_events(parent_run)].count("run_started") == 1


def test_a_fork_with_a_change_trains_with_it_into_a_default_folder(parent_run, tmp_path):
    result = cli("fork", parent_run, "--checkpoint", "2", "--quiet",
                 "--set", "training.learning_rate=0.0005", "--set", "training.max_steps=5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (fork,) = (tmp_path / "runs").iterdir()  # runs/<parent>-fork-<step>-<timestamp>
    assert re.fullmatch(rf"{parent_run.name}-fork-2-\d{{8}}-\d{{6}}", fork.name), fork.name
    preset = load_preset(fork / rundir.PRESET_FILE)
    assert preset.training.learning_rate == 0.0005 and preset.training.max_steps == 5
    started = rundir.read_events(fork)[0]
    assert started["preset"]["training"]["learning_rate"] == 0.0005 and started["max_steps"] == 5
    assert started["parent"]["step"] == 2
    parent, child = metrics_by_step(parent_run), metrics_by_step(fork)
    assert sorted(child) == [3, 4, 5]
    # Step 3's rollout comes before its update: the same samples, a different step size.
    assert child[3]["reward"] == parent[3]["reward"]
    # The new learning rate at the schedule's position (not the checkpoint's optimizer's).
    assert child[3]["learning_rate"] == pytest.approx(parent[3]["learning_rate"] / 2)


@pytest.mark.parametrize("args, expected", [
    (["--checkpoint", "step_9"], ["--checkpoint step_9", "no complete checkpoint 'step_9'",
                                  "available: step_000002, step_000004"]),
    (["--checkpoint", "2", "--set", "model.lora.r=8"], ["model.lora.r", "16 -> 8", "rank"]),
    (["--checkpoint", "2", "--set", "model.lora.target_modules=[c_attn]"], ["model.lora.target_modules"]),
    (["--checkpoint", "2", "--set", "model.name_or_path=gpt2"], ["model.name_or_path", "base model"]),
    (["--checkpoint", "2", "--set", "algorithm.name=ppo"], ["algorithm.name", "'grpo'"]),
    (["--set", "training.learning_rate=0.1"], ["training.max_steps 4", "starts at step 4"]),
    (["--checkpoint", "2", "--run-dir", "{parent}"], ["the parent's folder", "rl-engine resume"]),
    (["--checkpoint", "2", "--run-dir", "{existing}"], ["already holds a run"]),
    (["--checkpoint", "2", "--nproc-per-node", "2"], ["written by a run in 1 process", "this fork would have 2"]),
])
def test_what_a_fork_refuses(parent_run, tmp_path, args, expected):
    existing = write_run(tmp_path, "existing", steps=2)
    args = [a.format(parent=parent_run, existing=existing) for a in args]
    result = cli("fork", parent_run, *args, "--quiet", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    for text in expected:
        assert text in result.stderr, (text, result.stderr)
    assert not (tmp_path / "runs").exists()  # nothing written


def test_a_run_with_no_checkpoint_cannot_be_forked(tmp_path):
    run = write_run(tmp_path, "no-checkpoints", steps=2, status="failed")
    result = cli("fork", run, "--quiet", cwd=tmp_path)
    assert result.returncode == 2 and "to fork from" in result.stderr and "Traceback" not in result.stderr


# ------------------------------------------------------------------ the window


def write_fork(folder: Path, parent: Path, name: str, step: int, learning_rate: float) -> Path:
    """A synthetic fork of `parent`: its run_started carries `parent`."""
    run = write_run(folder, name, steps=20, learning_rate=learning_rate)
    events = rundir.read_events(run)
    events[0]["parent"] = {"run": str(parent.resolve()), "checkpoint": f"step_{step:06d}", "step": step}
    (run / rundir.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def test_the_runs_tab_shows_the_family_and_compare_the_changed_fields(window, tmp_path):
    folder = tmp_path / "runs"
    parent = write_run(folder, "base", steps=20, learning_rate=0.01)
    fork = write_fork(folder, parent, "base-fork", 10, learning_rate=0.05)
    window.runs_view.refresh()
    model = window.runs_view.model
    column = COLUMNS.index("family")
    family = {run.name: model.data(model.index(row, column)) for row, run in enumerate(model.runs)}
    assert family == {"base-fork": "fork of base @ step 10", "base": "1 fork"}
    summaries = {s.name: s for s in RunIndex(folder).scan()}
    assert summaries["base-fork"].parent["checkpoint"] == "step_000010"
    compared = window.compare_runs([parent, fork])
    assert compared[1].parent["step"] == 10 and compared[0].parent is None
    table = window.dash.differences
    rows = {table.verticalHeaderItem(r).text(): [table.item(r, c).text() for c in range(2)]
            for r in range(table.rowCount())}
    assert rows["training.learning_rate"] == ["0.01", "0.05"]


def test_the_fork_dialog_builds_the_engine_command(qtbot, parent_run, tmp_path):
    runs_folder = tmp_path / "runs"
    dialog = ForkDialog(parent_run, runs_folder)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    assert dialog.checkpoint_name() == "step_000004"  # the newest first
    assert not dialog.fork_button.isEnabled() and "starts at step 4" in dialog.problem.text()
    dialog.checkpoint.setFocus()
    qtbot.keyClick(dialog.checkpoint, Qt.Key_Up)  # the older one
    assert dialog.checkpoint_name() == "step_000002" and dialog.fork_button.isEnabled()
    assert dialog.name.text().startswith(f"{parent_run.name}-fork-2-")

    qtbot.mouseClick(dialog.sets.viewport(), Qt.LeftButton)
    qtbot.keyClicks(dialog.sets, "model.lora.r=8")
    assert not dialog.fork_button.isEnabled() and "model.lora.r" in dialog.problem.text()
    qtbot.keyClick(dialog.sets, Qt.Key_A, Qt.ControlModifier)
    qtbot.keyClick(dialog.sets, Qt.Key_Backspace)
    qtbot.keyClicks(dialog.sets, "training.learning_rate=0.0005")
    qtbot.keyClick(dialog.sets, Qt.Key_Return)
    qtbot.keyClicks(dialog.sets, "training.max_steps=6")
    assert dialog.fork_button.isEnabled(), dialog.problem.text()
    type_text(qtbot, dialog.name, "my-fork")
    assert dialog.command("py") == [
        "py", "-m", "engine", "fork", str(parent_run.resolve()), "--checkpoint", "step_000002",
        "--run-dir", str((runs_folder / "my-fork").resolve()), "--quiet",
        "--set", "training.learning_rate=0.0005", "--set", "training.max_steps=6"]
    assert engine_fork_command(Path("p"), "step_000002", Path("n"), [], "py") == [
        "py", "-m", "engine", "fork", "p", "--checkpoint", "step_000002", "--run-dir", "n", "--quiet"]


def test_fork_from_here_launches_the_fork_and_lists_it(window, qtbot, trained_run_copy, tmp_path):
    folder = tmp_path / "runs"
    parent = trained_run_copy  # in the window's runs folder
    window.tabs.setCurrentIndex(window.tabs.indexOf(window.runs_view))
    window.runs_view.refresh()
    window.runs_view.select_paths([parent])
    assert window.runs_view.fork_button.isEnabled()
    qtbot.mouseClick(window.runs_view.fork_button, Qt.LeftButton)
    dialog = window.fork.dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.keyClick(dialog.checkpoint, Qt.Key_Up)
    qtbot.mouseClick(dialog.sets.viewport(), Qt.LeftButton)
    qtbot.keyClicks(dialog.sets, "training.learning_rate=0.0005")
    with qtbot.waitSignal(window.run_launched, timeout=30_000) as launched:
        qtbot.mouseClick(dialog.fork_button, Qt.LeftButton)
    fork = launched.args[0]
    assert fork.parent == folder.resolve() and fork.name.startswith(f"{parent.name}-fork-2-")
    assert window.run_control.engine.command[3:5] == ["fork", str(parent.resolve())]
    with qtbot.waitSignal(window.engine_finished, timeout=150_000) as finished:
        pass
    assert finished.args[0] == 0, (fork / "workbench" / "engine-output.log").read_text()
    window.runs_view.refresh()
    summary = window.runs_view.summary(fork)
    assert summary.status == "done" and summary.family == f"fork of {parent.name} @ step 2"
    assert window.runs_view.summary(parent).family == "1 fork"
    assert sorted(metrics_by_step(fork)) == [3, 4]
    assert yaml.safe_load((fork / rundir.PRESET_FILE).read_text())["training"]["learning_rate"] == 0.0005
