"""The main window as the GUI tests drive it: a fixture that makes windows (and kills
their engines and frees them in the main thread afterwards), scripted answers to its
questions, and clicks on its toolbar buttons."""

from __future__ import annotations

import gc
import os
import signal
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

import yaml

from workbench.runs.process import pid_alive
from workbench.inspector.view import InspectorView
from workbench.runs.rundata import RunData
from workbench.runs.launcher import AttachedEngine, EngineProcess
from workbench.runs.samples_view import SamplesView
from workbench.main_window import MainWindow
from workbench.window.names import DISCARD, STOP_RUN
from workbench.settings import Settings
from workbench.setup.document import PresetDocument
from workbench.setup.panel import SetupPanel
from workbench_helpers import small_preset


class Asked:
    """Stands in for the window's modal questions: answers from a script, records them."""

    def __init__(self, *answers: str):
        self.answers = list(answers)
        self.questions: list[str] = []

    def __call__(self, title: str, text: str, choices: list[str]) -> str:
        self.questions.append(title)
        if not self.answers:
            raise AssertionError(f"unexpected question: {title}: {text}")
        answer = self.answers.pop(0)
        assert answer in choices, (answer, choices)
        return answer


def collect_in_main_thread() -> None:
    """Delete closed windows and collect their garbage now, in the main thread, rather
    than whenever the collector next runs."""
    from PySide6.QtCore import QCoreApplication, QEvent

    QCoreApplication.sendPostedEvents(None, QEvent.DeferredDelete)
    gc.collect()


@pytest.fixture
def make_window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    made: list[MainWindow] = []

    def make() -> MainWindow:
        collect_in_main_thread()  # a window closed during the test
        settings = Settings(runs_folder=str(tmp_path / "runs"), stop_timeout_s=60)
        window = MainWindow(settings, settings_path=tmp_path / "config" / "settings.json")
        window.ask = Asked()
        window.resize(1280, 800)
        window.show()  # closed by this fixture (qtbot would close it before the answers below are set)
        made.append(window)
        return window

    yield make
    for window in made:
        engine = window.run_control.engine
        if isinstance(engine, EngineProcess) and engine.popen is not None and engine.popen.poll() is None:
            engine.popen.kill()
            engine.popen.wait(30)
        elif isinstance(engine, AttachedEngine) and pid_alive(engine.pid):
            os.kill(engine.pid, signal.SIGKILL)
        window.ask = lambda title, text, choices: DISCARD if DISCARD in choices else STOP_RUN if STOP_RUN in choices \
            else choices[0]
        window.close()
        window.deleteLater()
    collect_in_main_thread()


@pytest.fixture
def window(make_window):
    return make_window()


@pytest.fixture
def stand_in(monkeypatch):
    """The windows of this test launch tests/stand_in_engine.py where they would launch the
    engine (`python -m engine run | resume ...`): the same run folder, process record, stop
    line, signals and exit codes, at once and at a pace, with no model. For tests whose
    subject is the window (attach, kill, a run left running, Resume), not training."""
    from stand_in_engine import stand_in_command

    real_start = EngineProcess.start

    def start(self):
        self.command = stand_in_command(self.command)
        real_start(self)

    monkeypatch.setattr(EngineProcess, "start", start)


def click(qtbot, window: MainWindow, action) -> None:
    """A mouse click on the toolbar button of `action` (Run, Stop, Kill), as a user does;
    the button must be enabled."""
    button = window.toolbar.widgetForAction(action)
    assert button is not None and button.isEnabled(), action.text()
    qtbot.mouseClick(button, Qt.LeftButton)


def click_run(qtbot, window: MainWindow) -> Path:
    """Click Run; the run folder it launched."""
    with qtbot.waitSignal(window.run_launched, timeout=30_000) as launched:
        click(qtbot, window, window.run_control.act_run)
    return launched.args[0]


def show_setup_panel(qtbot, folder: Path, size: tuple[int, int] | None = None) -> SetupPanel:
    """The set-up panel on the tests' small preset, saved in `folder` (its base_dir), shown."""
    path = folder / "preset.yaml"
    path.write_text(yaml.safe_dump(small_preset()))
    doc = PresetDocument()
    doc.open(path)
    widget = SetupPanel(doc)
    qtbot.addWidget(widget)
    if size is not None:
        widget.resize(*size)
    widget.show()
    return widget


def unfold(qtbot, panel: SetupPanel, *keys: str) -> None:
    """Click the set-up form's folded groups `keys` open (model, data, algorithm, training,
    alarms), as a user unfolds the fields beyond the essentials; one already open stays."""
    for key in keys:
        groups = [form.fold for form in panel.section_forms() if form.fold is not None and form.fold.key == key]
        assert groups, f"no folded group {key!r}"
        if not groups[0].body.isVisible():
            qtbot.mouseClick(groups[0].button, Qt.LeftButton)
        assert groups[0].body.isVisible(), key


@pytest.fixture
def panel(qtbot, tmp_path, monkeypatch):
    """The set-up panel on the tests' small preset, opened from a file, shown and active;
    the groups it unfolds are remembered in this test's own settings folder."""
    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    widget = show_setup_panel(qtbot, tmp_path, size=(1400, 900))
    qtbot.waitExposed(widget)
    widget.activateWindow()
    return widget


# ------------------------------------------------------------------ the inspector alone


@pytest.fixture
def inspector(qtbot):
    view = InspectorView()
    qtbot.addWidget(view)
    view.resize(1300, 800)
    view.show()
    qtbot.waitExposed(view)
    return view


def open_run(view: InspectorView, run_dir) -> RunData:
    run = RunData(run_dir)
    run.poll()
    view.set_run(run)
    return run


def open_samples(qtbot, run_dir, rows=lambda count: count > 0, width: int = 1300) -> SamplesView:
    """A shown samples table on the run in `run_dir`, once `rows(row count)` holds."""
    view = SamplesView()
    qtbot.addWidget(view)
    view.resize(width, 600)
    view.show()
    open_run(view, run_dir)
    qtbot.waitUntil(lambda: rows(view.model.rowCount()), timeout=3000)
    return view
