"""The main window: presets (New, Open, Save, recent, bundled), Run and Stop, and the
tabs Set-up | Dashboard | Samples | Runs | Log.

One timer drives everything live: it polls the events of the runs on show (a few
milliseconds when nothing is new); a run model that read something new announces it
(RunData.updated) and the views that show it (dashboard, samples, header) redraw
themselves. Nothing the window does waits on the engine.

The preset actions (workbench/window/presets.py) and Run / Stop / Kill
(workbench/window/run_control.py) are mixins of MainWindow; the tab and answer names
are in workbench/window/names.py.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from engine.run import rundir
from workbench import runs
from workbench.alarms.model import arrival_message
from workbench.alarms.panel import AlarmsPanel
from workbench.dashboard import Dashboard, run_colour
from workbench.inspector import InspectorView
from workbench.runs.launcher import AttachedEngine, EngineHandle
from workbench.runs.log_view import LogView
from workbench.runs.run_header import RunHeader
from workbench.runs.rundata import RunData
from workbench.runs.runs_view import DifferencesTable, RunsView
from workbench.runs.samples_view import SamplesView
from workbench.settings import Settings
from workbench.setup import PresetDocument, SetupPanel
from workbench.window.names import (CANCEL, DASHBOARD, DISCARD, INSPECTOR, LEAVE_RUNNING, LOG,  # noqa: F401
                                    RUNS, SAMPLES, SAVE, SETUP, STOP_RUN)
from workbench.window.export import ExportMixin
from workbench.window.fork import ForkMixin
from workbench.window.presets import PresetsMixin
from workbench.window.run_control import RunControlMixin, run_dir_name  # noqa: F401


class MainWindow(PresetsMixin, RunControlMixin, ForkMixin, ExportMixin, QMainWindow):
    """Signals: `run_launched(path)`, `engine_finished(exit code)` (tests wait on them)."""

    run_launched = Signal(Path)
    engine_finished = Signal(object)

    POLL_MS = 200

    def __init__(self, settings: Settings | None = None, settings_path: Path | None = None):
        super().__init__()
        self.settings = settings or Settings.load(settings_path)
        self._settings_path = settings_path
        self.doc = PresetDocument()
        self.engine: EngineHandle | None = None
        self.engine_dir: Path | None = None
        self.shown: list[RunData] = []
        self._cache: dict[Path, RunData] = {}
        self._message_kind: str | None = None  # what the status bar message is about (show_message)
        self._ticks = 0

        self.setup = SetupPanel(self.doc)
        self.dashboard = Dashboard(self.settings.smoothing)
        self.differences = DifferencesTable()
        self.differences.hide()
        self.samples = SamplesView()
        self.inspector = InspectorView()
        self.runs_view = RunsView(self.settings.runs_path)
        self.log_view = LogView()
        self.header = RunHeader()

        dash_split = QSplitter(Qt.Horizontal)
        # The plots over the Alarms panel (folded to its header while there are none).
        self.alarms = AlarmsPanel()
        self.dash_column = QSplitter(Qt.Vertical)
        self.dash_column.addWidget(self.dashboard)
        self.dash_column.addWidget(self.alarms)
        self.dash_column.setStretchFactor(0, 2)
        self.dash_column.setStretchFactor(1, 1)
        self.dash_column.setCollapsible(1, False)
        dash_split.addWidget(self.dash_column)
        compare_box = QWidget()
        compare_layout = QVBoxLayout(compare_box)
        compare_layout.setContentsMargins(0, 6, 6, 6)
        self.compare_title = QLabel("<b>Preset fields that differ</b>")
        compare_layout.addWidget(self.compare_title)
        compare_layout.addWidget(self.differences, 1)
        self.compare_box = compare_box
        compare_box.hide()
        dash_split.addWidget(compare_box)
        dash_split.setStretchFactor(0, 4)
        dash_split.setStretchFactor(1, 1)
        self.dash_split = dash_split

        self.tabs = QTabWidget()
        self.tabs.setObjectName("tabs")
        self.tabs.addTab(self.setup, "Set-up")
        self.tabs.addTab(dash_split, "Dashboard")
        self.tabs.addTab(self.samples, "Samples")
        self.tabs.addTab(self.inspector, "Inspector")
        self.tabs.addTab(self.runs_view, "Runs")
        self.tabs.addTab(self.log_view, "Log")
        # The reward playground: last, so the positions of the tabs before it stay as they were.
        from workbench.playground.view import PlaygroundView

        self.playground = PlaygroundView(
            self.doc, current_run=lambda: self.shown[0].run_dir if self.shown else None,
            runs_folder=lambda: self.settings.runs_path, show_setup=lambda: self.tabs.setCurrentWidget(self.setup))
        self.tabs.addTab(self.playground, "Reward playground")
        self.tabs.setTabToolTip(self.tabs.indexOf(self.playground), "Score a run's completions (or typed ones) "
                                "with edited rewards, beside what the run had")
        self.tabs.setTabToolTip(INSPECTOR, "Every token of a recorded rollout, coloured by its advantage, logprob, "
                                "KL, entropy or ratio")
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.header)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)
        self.run_message = QLabel()
        self.run_message.setObjectName("run-message")
        self.run_message.setTextFormat(Qt.RichText)  # show_message escapes the text it is given
        self._make_actions()
        self.statusBar().addWidget(self.run_message, 1)

        self.doc.dirty_changed.connect(lambda _dirty: self._update_title())
        self.doc.replaced.connect(self._update_title)
        self.doc.saved.connect(lambda _path: self._update_title())
        self.setup.validated.connect(self._validated)
        self.header.show_log.connect(self.show_engine_log)
        self.header.resume_requested.connect(lambda: self.resume())
        self.header.resume_blocked = self.resume_blocked
        self.samples.inspect_requested.connect(self.inspect)
        self.alarms.inspect_requested.connect(self.inspect)
        self.alarms.samples_requested.connect(self.show_samples_of_steps)
        self.alarms.alarm_selected.connect(lambda alarm: self.dashboard.show_metric(alarm.metric))
        self.alarms.alarms_arrived.connect(lambda alarms: self.show_message(arrival_message(alarms), "alarm"))
        self.dashboard.alarm_clicked.connect(lambda alarm: self.alarms.select_event(alarm.event))
        self.runs_view.open_requested.connect(self.open_run)
        self.runs_view.compare_requested.connect(self.compare_runs)
        self.runs_view.preset_requested.connect(self.load_run_preset)
        self.runs_view.fork_requested.connect(self.fork_run)
        self.runs_view.export_requested.connect(self.export_run)
        self.runs_view.resume_requested.connect(self.resume)
        self.runs_view.folder_changed.connect(self._runs_folder_changed)
        self.tabs.currentChanged.connect(self._tab_changed)

        self.timer = QTimer(self)
        self.timer.setInterval(self.POLL_MS)
        self.timer.timeout.connect(self.tick)
        self.timer.start()
        self.resize(1500, 950)
        self._update_title()
        self._update_actions()

    # ================================================================= actions

    def _make_actions(self) -> None:
        def action(text, slot, shortcut=None, tip=""):
            act = QAction(text, self)
            act.triggered.connect(lambda _checked=False: slot())
            if shortcut:
                act.setShortcut(shortcut)
            if tip:
                act.setToolTip(tip)
                act.setStatusTip(tip)
            return act

        self.act_new = action("New", self.new_preset, QKeySequence.New, "A new preset with every field at its default")
        self.act_open = action("Open…", self.open_preset_dialog, QKeySequence.Open, "Open a preset (YAML)")
        self.act_save = action("Save", self.save, QKeySequence.Save, "Save the preset")
        self.act_save_as = action("Save As…", self.save_as_dialog, QKeySequence.SaveAs, "Save the preset to a new file")
        self.act_open_run = action("Open Run Folder…", self.open_run_dialog, None, "Open a past or running run")
        self.act_run = action("▶ Run", self.run, "Ctrl+R", "Start the engine on this preset, in a new run folder")
        self.act_stop = action("■ Stop", self.stop, None,
                               "Ask the engine to stop after its current step (it saves a checkpoint)")
        self.act_kill = action("Kill", self.kill, None, "Kill the engine now (the step in progress is lost)")
        self.act_quit = action("Quit", self.close, QKeySequence.Quit)

        menu = self.menuBar().addMenu("&File")
        menu.addAction(self.act_new)
        menu.addAction(self.act_open)
        self.recent_menu = menu.addMenu("Open Recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        self.bundled_menu = menu.addMenu("Bundled Presets")
        self.bundled_menu.aboutToShow.connect(self._fill_bundled)
        menu.addAction(self.act_save)
        menu.addAction(self.act_save_as)
        menu.addSeparator()
        menu.addAction(self.act_open_run)
        menu.addAction(self.make_export_action())  # File ▸ Export Run… (workbench/window/export.py)
        menu.addSeparator()
        menu.addAction(self.act_quit)
        run_menu = self.menuBar().addMenu("&Run")
        for act in (self.act_run, self.act_stop, self.act_kill):
            run_menu.addAction(act)

        bar = QToolBar("Main")
        bar.setObjectName("main-toolbar")
        bar.setMovable(False)
        bar.setToolButtonStyle(Qt.ToolButtonTextOnly)
        for act in (self.act_new, self.act_open, self.act_save, self.act_save_as):
            bar.addAction(act)
        recent = bar.addAction("Recent ▾")
        recent.triggered.connect(lambda: self._popup(self.recent_menu, bar, recent))
        bundled = bar.addAction("Bundled ▾")
        bundled.triggered.connect(lambda: self._popup(self.bundled_menu, bar, bundled))
        bar.addSeparator()
        for act in (self.act_run, self.act_stop, self.act_kill):
            bar.addAction(act)
        self.addToolBar(bar)
        self.toolbar = bar

    def _popup(self, menu, bar, act) -> None:
        widget = bar.widgetForAction(act)
        menu.popup(widget.mapToGlobal(widget.rect().bottomLeft()))

    # ================================================================ dialogs

    def ask(self, title: str, text: str, choices: list[str]) -> str:
        """Ask the user to pick one of `choices` (the last is the cancel choice). Tests
        replace this method; nothing else in the window opens a modal question."""
        box = QMessageBox(self)
        box.setWindowTitle(title)
        box.setText(text)
        buttons = {}
        for choice in choices:
            role = QMessageBox.RejectRole if choice == choices[-1] else QMessageBox.AcceptRole
            buttons[box.addButton(choice, role)] = choice
        box.exec()
        return buttons.get(box.clickedButton(), choices[-1])

    def tell(self, title: str, text: str) -> None:
        """Report an error the user must see (a file that cannot be read or written)."""
        self.show_message(f"{title}: {text}", "error")
        self.ask(title, text, ["OK"])

    # The status bar holds one message, with what it is about, so that it goes when its
    # cause goes: "problems" (Run refused for the preset's problems) when they are fixed,
    # "error" (a file that could not be read or written) when a file opens or saves fine,
    # "engine" when another run starts.
    def show_message(self, text: str, kind: str = "info") -> None:
        self._message_kind = kind
        if kind in ("error", "problems", "refused"):
            self.run_message.setText(f"<span style='color:#b00020'>{html.escape(text, quote=False)}</span>")
        else:
            self.run_message.setText(html.escape(text, quote=False))

    def clear_message(self, *kinds: str) -> None:
        """Clear the message if it is of one of `kinds` (any kind when none given)."""
        if not kinds or self._message_kind in kinds:
            self._message_kind = None
            self.run_message.setText("")

    # =================================================================== runs

    def _run_data(self, path: Path) -> RunData:
        path = Path(path).resolve()
        run = self._cache.get(path)
        if run is None:
            run = self._cache[path] = RunData(path)
            run.poll()
        return run

    def open_run(self, path: str | Path) -> RunData | None:
        """Show a run (past or running) in the dashboard, samples and log."""
        path = Path(path).resolve()
        if not (path / rundir.EVENTS_FILE).exists() and not (path / rundir.PRESET_FILE).exists() \
                and not runs.workbench_dir(path).is_dir():
            self.tell("Not a run folder", f"{path} has no events.jsonl or preset.yaml")
            return None
        run = self._run_data(path)
        self.shown = [run]
        self.dashboard.set_runs([run])
        self.compare_box.hide()
        self.samples.set_run(run)
        self.alarms.set_run(run)
        self.inspector.set_run(run)
        self.log_view.set_run(path)
        if self.engine_dir is None or self.engine_dir.resolve() != path:
            self._maybe_attach(path)
        self.clear_message("error")
        self.header.set_runs(self.shown, self._header_status)
        self._update_actions()
        self.tabs.setCurrentIndex(DASHBOARD)
        return run

    def _maybe_attach(self, path: Path) -> None:
        """A run left running by an earlier window: attach to its engine so Stop works
        (unless this window is already running an engine of its own)."""
        if self.engine is not None and self.engine.running:
            return
        run = self._run_data(path)
        ref = runs.find_engine(path, run.started)
        if ref is not None and run.status in ("running", "empty") and ref.alive() and runs.can_signal(ref.pid):
            self._attach(AttachedEngine.from_ref(path, ref, self.settings.stop_timeout_s, parent=self), path)

    def open_run_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open run", str(self.settings.runs_path))
        if path:
            self.open_run(path)

    def compare_runs(self, paths: list) -> list[RunData]:
        runs_ = [self._run_data(Path(p)) for p in paths]
        self.shown = runs_
        self.dashboard.set_runs(runs_)
        self.differences.show_runs([r.name for r in runs_], [r.preset for r in runs_],
                                   [run_colour(i) for i in range(len(runs_))])
        self.differences.show()
        self.compare_box.show()
        width = self.dash_split.width() or self.width()
        self.dash_split.setSizes([max(400, width - 430), 430])
        self.samples.set_run(runs_[0])
        self.alarms.set_run(runs_[0], of_run=True)
        self.inspector.set_run(runs_[0])
        self.log_view.set_run(runs_[0].run_dir)
        self.clear_message("error")
        self.header.set_runs(self.shown, self._header_status)
        self._update_actions()
        self.tabs.setCurrentIndex(DASHBOARD)
        return runs_

    def _status(self, run: RunData) -> tuple[str, str]:
        """The run's status and note, by the one rule the runs list uses too
        (runs.describe_run); for this window's own engine, the process it holds."""
        alive = None
        if self.engine is not None and self.engine_dir is not None and self.engine_dir.resolve() == run.run_dir:
            alive = True if self.engine.running else None
            if alive and getattr(self.engine, "resuming", False) and \
                    (run.started or {}).get("time", 0) < (self.engine.started_at or 0):
                # Until its run_resumed event, the events are the last attempt's (stopped, killed).
                return "starting", "resuming (from the last checkpoint, or from step 0 when there is none): " \
                                   "the engine is loading the model"
        age = time.time() - run.last_time if run.last_time else None
        events_status = run.status if run.status != "empty" else "running"
        return runs.describe_run(run.run_dir, events_status, run.num_events > 0, age, started=run.started, alive=alive)

    def _header_status(self, run: RunData) -> tuple[str, str]:
        """The header's status of a run: _status, or `stopping` while this window's
        engine finishes its last step (only until its final event is read: the engine
        takes a moment to exit after it, and the run is stopped from then on)."""
        if self.engine is not None and self.engine.running and self.engine.stop_requested \
                and self.engine_dir and self.engine_dir.resolve() == run.run_dir and run.status in ("running", "empty"):
            return "running", "stopping: finishing the current step and saving a checkpoint…"
        return self._status(run)

    def _update_header(self) -> None:
        """Re-judge the statuses on show: the header redraws itself on new events, but an
        engine can end (or go stale) without writing one."""
        self.header.update_view()
        if not (self.engine is not None and self.engine.running) and self._ticks % 25 == 0:
            self._update_actions()  # a run on show may have started or ended elsewhere

    def show_engine_log(self) -> None:
        run = self.shown[0] if self.shown else None
        if run is not None and not (run.run_dir / rundir.LOG_FILE).exists():
            self.log_view.show_source(f"{runs.WORKBENCH_DIR}/{runs.OUTPUT_FILE}")
        self.tabs.setCurrentIndex(LOG)
        self.log_view.poll()
        self.log_view.show_end()

    def _runs_folder_changed(self, folder: Path) -> None:
        self.settings.runs_folder = str(folder)
        self._save_settings()

    def _tab_changed(self, index: int) -> None:
        if index == RUNS:
            self.runs_view.refresh()
        elif index == INSPECTOR:
            self.inspector.poll()

    def inspect(self, step: int, index: int) -> bool:
        """Open a sample's trajectory in the inspector (the samples table's double-click)."""
        self.tabs.setCurrentIndex(INSPECTOR)
        return self.inspector.open_trajectory(step, index)

    def show_samples_of_steps(self, first: int, last: int) -> None:
        """The Samples tab, filtered to steps first..last (an alarm's *Show samples*)."""
        self.samples.show_steps(first, last)
        self.tabs.setCurrentIndex(SAMPLES)

    # ================================================================== timer

    def tick(self) -> None:
        """Poll the runs on show (their views follow them) and the files no run model
        covers: the log, the runs folder, the inspector's step files."""
        self._ticks += 1
        for run in self.shown:
            run.poll()  # new events: the views of the run redraw themselves (RunData.updated)
        if self._ticks % 5 == 0:
            self._update_header()
            self.log_view.poll()
        if self.tabs.currentIndex() == RUNS and self._ticks % 10 == 0:
            self.runs_view.refresh()
        if self.tabs.currentIndex() == INSPECTOR and self._ticks % 5 == 0:
            self.inspector.poll()  # new step files of a live run (a stat when there are none)

    # ================================================================== close

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.confirm_discard() or not self.close_export():
            event.ignore()
            return
        if self.engine is not None and self.engine.running:
            answer = self.ask(
                "A run is in progress",
                f"{self.engine.run_dir.name} is still training. Stop it (it finishes its step and saves a "
                "checkpoint), or leave it running? A run left running shows as running when you open the "
                "window again, and its plots continue.",
                [STOP_RUN, LEAVE_RUNNING, CANCEL])
            if answer == CANCEL:
                event.ignore()
                return
            if answer == STOP_RUN:
                # The stop line is delivered before the window goes; the engine then
                # stops on its own, so closing never waits on it.
                self.engine.stop()
            self.engine.detach()
        self.timer.stop()
        self._save_settings()
        event.accept()
