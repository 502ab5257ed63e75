"""Resume and Kill in the window, and the run's status around them: Kill asks first
(saying what is lost), a run that ended early offers Resume in its banner and in the
Runs tab (from its last checkpoint, or from step 0 when it has none; greyed out, with the
reason, when it has no preset.yaml to start again from), Resume launches
`rl-engine resume RUN_DIR` and the window follows the run in its folder. Also: the
status once run_finished is read, the export dialog's Show folder when it cannot,
bundled and hub presets opened as copies, and New starting from a runnable preset.

Run, Kill and Resume go through a stand-in engine (tests/stand_in_engine.py: the run
folder, process record, signals and exit codes of the engine, without a model), since the
window is the subject; the engine's own resume is tests/test_reliability.py's. The others
use synthetic run folders and engines that start nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from PySide6.QtCore import Qt
from PySide6.QtGui import QDesktopServices

from engine.run import rundir
from workbench import app
from workbench.runs.process import read_process_record, write_exit_record, write_process_record
from workbench.window.names import CANCEL, DISCARD, RUNS
from workbench.runs import launcher
from workbench.runs.export_dialog import ExportDialog
from workbench.runs.launcher import EngineHandle, EngineProcess
from workbench.window.run_control import KILL
from workbench_helpers import small_preset, write_run
from window_fixtures import Asked, click, click_run, make_window, stand_in, window  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
STAND_IN_TIMEOUT_MS = 30_000  # the stand-in engine: no model to load, a step every 0.2 s


class IdleEngine(EngineHandle):
    """An engine handle with no process: running until told, records Kill and Stop."""

    pid = 4242

    def __init__(self, run_dir: Path, parent=None):
        super().__init__(run_dir, parent=parent)
        self.signals: list[int] = []

    def _check_exit(self):
        return launcher._RUNNING

    def _request_stop(self) -> None:
        pass

    def _signal(self, sig: int) -> None:
        self.signals.append(sig)

    def detach(self) -> None:
        self._poll.stop()
        self._escalate.stop()


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def killed_run(folder: Path, name: str, checkpoint_step: int | None = None) -> Path:
    """A run killed at step 5 by a window (exit record), with one complete checkpoint or none."""
    run_dir = write_run(folder, name, steps=5, status="running")
    pid = dead_pid()
    write_process_record(run_dir, pid, ["python", "-m", "engine", "run", "p.yaml", "--run-dir", str(run_dir)])
    write_exit_record(run_dir, pid, -9, killed=True)
    if checkpoint_step is not None:
        checkpoint = run_dir / rundir.CHECKPOINTS_DIR / f"step_{checkpoint_step:06d}"
        checkpoint.mkdir(parents=True)
        (checkpoint / rundir.CHECKPOINT_STATE).write_text('{"step": %d}' % checkpoint_step)
    return run_dir


def select_in_runs_tab(window, run_dir: Path) -> None:
    window.tabs.setCurrentIndex(RUNS)
    window.runs_view.refresh()
    window.runs_view.select_paths([run_dir])


# ----------------------------------------------------------------- Kill asks


def test_kill_asks_first_and_says_no_checkpoint_exists_yet(window, qtbot, tmp_path):
    run_dir = write_run(tmp_path / "runs", "live", steps=7, status="running")
    engine = IdleEngine(run_dir, parent=window)
    window.run_control.attach(engine, run_dir)
    window.open_run(run_dir)
    window.ask = asked = Asked(CANCEL)
    click(qtbot, window, window.run_control.act_kill)
    assert asked.questions == ["Kill the run?"] and engine.signals == [] and not engine.killed

    texts = []
    window.ask = lambda title, text, choices: texts.append(text) or KILL
    click(qtbot, window, window.run_control.act_kill)
    assert engine.killed and engine.signals
    assert "No checkpoint exists yet" in texts[0] and "7 steps" in texts[0]
    assert "Resume starts the run again from step 0" in texts[0]


def test_kill_says_the_steps_since_the_last_checkpoint_are_lost(window, qtbot, tmp_path):
    run_dir = write_run(tmp_path / "runs", "live", steps=7, status="running")
    checkpoint = run_dir / rundir.CHECKPOINTS_DIR / "step_000004"
    checkpoint.mkdir(parents=True)
    (checkpoint / rundir.CHECKPOINT_STATE).write_text('{"step": 4}')
    window.run_control.attach(IdleEngine(run_dir, parent=window), run_dir)
    window.open_run(run_dir)
    texts = []
    window.ask = lambda title, text, choices: texts.append(text) or CANCEL
    click(qtbot, window, window.run_control.act_kill)
    assert "step_000004" in texts[0] and "3 steps" in texts[0] and "lost" in texts[0]


# ------------------------------------------------------ the banner and Runs tab


def test_a_killed_run_without_a_checkpoint_offers_resume_from_step_0(window, qtbot, tmp_path):
    run_dir = killed_run(tmp_path / "runs", "no-checkpoint")
    window.open_run(run_dir)
    banner = window.header.failure
    assert banner.isVisible() and banner.title.text() == "The run was killed"
    assert "It has no checkpoint: Resume starts it again from step 0 in this folder." in banner.message.text()
    assert banner.resume_button.isEnabled()
    assert "from step 0 when it has none" in banner.resume_button.toolTip()
    select_in_runs_tab(window, run_dir)
    assert window.runs_view.resume_button.isEnabled()
    assert "from step 0 when it has none" in window.runs_view.resume_button.toolTip()


def test_a_killed_run_without_its_preset_says_resume_is_impossible(window, qtbot, tmp_path):
    run_dir = killed_run(tmp_path / "runs", "no-checkpoint")
    (run_dir / rundir.PRESET_FILE).unlink()  # nothing to start it again from
    window.open_run(run_dir)
    banner = window.header.failure
    assert banner.isVisible() and banner.title.text() == "The run was killed"
    assert "Resume is not possible" in banner.message.text() and "no complete checkpoint" in banner.message.text()
    assert not banner.resume_button.isEnabled()
    assert "no complete checkpoint" in banner.resume_button.toolTip()
    select_in_runs_tab(window, run_dir)
    assert not window.runs_view.resume_button.isEnabled()
    assert "no complete checkpoint" in window.runs_view.resume_button.toolTip()


def test_a_stopped_run_offers_resume_in_its_banner(window, qtbot, tmp_path):
    run_dir = write_run(tmp_path / "runs", "stopped-run", steps=6, status="stopped")
    checkpoint = run_dir / rundir.CHECKPOINTS_DIR / "step_000006"
    checkpoint.mkdir(parents=True)
    (checkpoint / rundir.CHECKPOINT_STATE).write_text('{"step": 6}')
    window.open_run(run_dir)
    banner = window.header.failure
    assert banner.isVisible() and banner.title.text() == "The run was stopped"
    assert "continues in this folder from its last checkpoint, step_000006" in banner.message.text()
    assert banner.resume_button.isEnabled()


def test_resume_from_the_runs_tab_launches_rl_engine_resume_in_the_run_folder(window, qtbot, tmp_path,
                                                                              monkeypatch):
    started: list[EngineProcess] = []
    monkeypatch.setattr(EngineProcess, "start", lambda self: started.append(self))
    run_dir = killed_run(tmp_path / "runs", "to-resume", checkpoint_step=3)
    select_in_runs_tab(window, run_dir)
    button = window.runs_view.resume_button
    assert button.isEnabled()
    with qtbot.waitSignal(window.run_launched, timeout=10_000):
        qtbot.mouseClick(button, Qt.LeftButton)
    engine = started[-1]
    assert engine.command[1:] == ["-m", "engine", "resume", str(run_dir.resolve()), "--quiet"]
    assert engine.run_dir == run_dir.resolve() and window.run_control.engine is engine
    assert [r.run_dir for r in window.shown] == [run_dir.resolve()]  # the dashboard follows it, same folder
    assert window.run_control.act_stop.isEnabled() and not window.header.failure.isVisible()


# ------------------------------------------------------------- a real resume


def test_kill_then_resume_from_the_banner_continues_the_run(window, qtbot, stand_in):
    window.doc.new(small_preset(max_steps=400, save_steps=1))
    run_dir = click_run(qtbot, window)
    qtbot.waitUntil(lambda: bool(rundir.complete_checkpoints(run_dir)), timeout=STAND_IN_TIMEOUT_MS)
    window.ask = asked = Asked(KILL)
    with qtbot.waitSignal(window.engine_finished, timeout=60_000):
        click(qtbot, window, window.run_control.act_kill)
    assert asked.questions == ["Kill the run?"]
    banner = window.header.failure
    assert banner.isVisible() and banner.resume_button.isEnabled()
    saved = int(rundir.complete_checkpoints(run_dir)[-1].name.split("_")[1])
    # Resume reads the run's own preset: two steps past the checkpoint keep the test short.
    preset = yaml.safe_load((run_dir / rundir.PRESET_FILE).read_text())
    preset["training"]["max_steps"] = saved + 2
    (run_dir / rundir.PRESET_FILE).write_text(yaml.safe_dump(preset, sort_keys=False))

    with qtbot.waitSignal(window.engine_finished, timeout=STAND_IN_TIMEOUT_MS) as finished:
        qtbot.mouseClick(banner.resume_button, Qt.LeftButton)
    assert finished.args == [0]
    assert "resume" in read_process_record(run_dir)["command"]
    assert any(e.get("type") == "run_resumed" for e in rundir.read_events(run_dir))
    window.shown[0].poll()
    assert window.shown[0].run_dir == run_dir.resolve() and window.shown[0].status == "done"
    assert "done" in window.header.status.text() and not banner.isVisible()


def test_kill_before_the_first_checkpoint_then_resume_starts_the_run_again(window, qtbot, stand_in):
    window.doc.new(small_preset(max_steps=400, save_steps=0))
    run_dir = click_run(qtbot, window)
    steps = lambda: [e["step"] for e in rundir.read_events(run_dir) if e.get("type") == "metrics"]  # noqa: E731
    qtbot.waitUntil(lambda: len(steps()) >= 2, timeout=STAND_IN_TIMEOUT_MS)
    window.ask = Asked(KILL)
    with qtbot.waitSignal(window.engine_finished, timeout=60_000):
        click(qtbot, window, window.run_control.act_kill)
    assert not rundir.complete_checkpoints(run_dir)
    banner = window.header.failure
    assert banner.isVisible() and banner.resume_button.isEnabled()
    assert "Resume starts it again from step 0" in banner.message.text()
    preset = yaml.safe_load((run_dir / rundir.PRESET_FILE).read_text())
    preset["training"]["max_steps"] = 1  # one step keeps the test short
    (run_dir / rundir.PRESET_FILE).write_text(yaml.safe_dump(preset, sort_keys=False))

    with qtbot.waitSignal(window.engine_finished, timeout=STAND_IN_TIMEOUT_MS) as finished:
        qtbot.mouseClick(banner.resume_button, Qt.LeftButton)
    assert finished.args == [0]
    assert "resume" in read_process_record(run_dir)["command"]
    shown = window.shown[0]
    shown.poll()
    assert shown.run_dir == run_dir.resolve() and shown.status == "done" and shown.last_step == 1
    assert shown.metrics.steps.tolist() == [1]  # the killed attempt's steps are gone from the dashboard
    assert shown.started.get("restarted") is True
    assert "done" in window.header.status.text() and not banner.isVisible()


# ----------------------------------------------------- the status after Stop


def test_the_status_changes_as_soon_as_run_finished_is_read(window, qtbot, tmp_path):
    run_dir = write_run(tmp_path / "runs", "stopping", steps=4, status="running")
    engine = IdleEngine(run_dir, parent=window)
    window.run_control.attach(engine, run_dir)
    window.open_run(run_dir)
    engine.stop()
    window._update_header()
    assert window.header.status_word == "running" and "stopping" in window.header.note.text()

    rundir.EventWriter(run_dir).emit("run_finished", step=4, status="stopped", reason="stop")
    window.shown[0].poll()  # the engine is still exiting: its process has not ended
    assert engine.running
    assert window.header.status_word == "stopped"
    assert not window.header.eta.text().startswith("ETA")


# ----------------------------------------------------------- the export dialog


def test_show_folder_says_when_the_folder_cannot_be_shown(qtbot, tmp_path, monkeypatch):
    run_dir = write_run(tmp_path / "runs", "exported", steps=2)
    dialog = ExportDialog(run_dir)
    qtbot.addWidget(dialog)
    dialog.show()
    folder = tmp_path / "out"
    folder.mkdir()
    dialog.show_result(True, f"Exported to {folder}", [folder])
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: False))
    qtbot.mouseClick(dialog.show_folder_button, Qt.LeftButton)
    assert "Cannot show the folder" in dialog.problem.text() and str(folder) in dialog.problem.text()

    folder.rmdir()
    dialog.problem.setText("")
    qtbot.mouseClick(dialog.show_folder_button, Qt.LeftButton)
    assert "no longer exists" in dialog.problem.text()


# ------------------------------------------------------------------ presets


def test_make_run_opens_the_bundled_preset_as_an_untitled_copy(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    bundled = ROOT / "presets" / "grpo-sort.yaml"
    window = app.create_window([str(bundled), "--runs", str(tmp_path / "runs")])  # = make run
    qtbot.addWidget(window)
    window.ask = lambda *a: DISCARD
    assert window.doc.path is None and window.doc.get("name") == "grpo-sort"
    assert window.doc.title == "untitled preset"


def test_the_bundled_menu_lists_the_hub_presets(window, qtbot):
    window.presets.fill_bundled()
    actions = {a.text(): a for a in window.presets.bundled_menu.actions() if a.text()}
    hub = sorted((ROOT / "presets" / "hub").glob("*.yaml"))
    assert hub and all(path.stem in actions for path in hub)
    actions[hub[0].stem].trigger()
    assert window.doc.path is None and "qwen" in str(window.doc.get("model.name_or_path")).lower()


def test_a_new_preset_runs_as_it_is(window, qtbot, tmp_path):
    assert window.setup.validate_now() == []  # the first document of a window (one opened on a run)
    window.doc.new(small_preset())
    window.ask = lambda *a: DISCARD
    click(qtbot, window, window.presets.act_new)
    assert window.doc.get("model.name_or_path") == "builtin:tiny"
    assert window.setup.validate_now() == []  # what the Run button checks
    assert window.run_control.act_run.isEnabled()
