"""The main window: presets (New, Open, Save, recent, bundled), Run and Stop, and the
tabs Set-up | Dashboard | Samples | Runs | Log.

One timer drives everything live: it polls the events of the runs on show (a few
milliseconds when nothing is new); a run model that read something new announces it
(RunData.updated) and the views that show it (dashboard, samples, header) redraw
themselves. Nothing the window does waits on the engine.

MainWindow composes: the views, and five controllers it owns, each given what it needs
(the document, the set-up form, the window's callbacks: workbench/window/hooks.py):
`presets` (workbench/window/presets.py: New, Open, Save, recent and bundled menus),
`run_control` (run_control.py: Run, Stop, Kill, Resume, the window's engine and a run's
status), `fork` (fork.py), `export` (export.py) and `pipeline` (pipeline.py: a run as the
next stage's starting point or reward model, in the set-up form). The Dashboard tab's layout is
window/dashboard_tab.py, the status bar's message window/status_message.py, the tab and
answer names window/names.py.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QMainWindow,
    QMessageBox,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from engine.run import rundir
from workbench.runs.process import OUTPUT_FILE, WORKBENCH_DIR, workbench_dir
from workbench.alarms.model import arrival_message
from workbench.inspector.view import InspectorView
from workbench.runs.evaluate_page import EvaluatePage
from workbench.runs.lineage import is_reward_model_run
from workbench.runs.log_view import LogView
from workbench.runs.reward_report_page import RewardReportPage
from workbench.runs.try_page import TryPage
from workbench.runs.run_header import RunHeader
from workbench.runs.rundata import RunData
from workbench.runs.runs_view import RunsView
from workbench.runs.samples_view import SamplesView
from workbench.settings import Settings
from workbench.setup.document import PresetDocument
from workbench.setup.panel import SetupPanel
from workbench.window.dashboard_tab import DashboardTab
from workbench.window.export import ExportController
from workbench.window.fork import ForkController
from workbench.window.hooks import WindowHooks, make_action
from workbench.window.names import DASHBOARD, INSPECTOR, LOG, RUNS, SAMPLES, DefaultChoice
from workbench.window.pipeline import PipelineController
from workbench.window.presets import PresetsController
from workbench.window.run_control import RunControl
from workbench.window.status_message import StatusMessage


class MainWindow(QMainWindow):
    """Signals: `run_launched(path)`, `engine_finished(exit code)` (tests wait on them)."""

    run_launched = Signal(Path)
    engine_finished = Signal(object)

    POLL_MS = 200

    def __init__(self, settings: Settings | None = None, settings_path: Path | None = None):
        super().__init__()
        self.settings = settings or Settings.load(settings_path)
        self._settings_path = settings_path
        self.doc = PresetDocument()
        self.shown: list[RunData] = []
        self._cache: dict[Path, RunData] = {}
        self._ticks = 0

        self.setup = SetupPanel(self.doc)
        self.dash = DashboardTab(self.settings.smoothing)
        self.dashboard, self.alarms = self.dash.dashboard, self.dash.alarms
        self.samples = SamplesView()
        self.inspector = InspectorView()
        self.runs_view = RunsView(self.settings.runs_path)
        self.log_view = LogView()
        self.header = RunHeader()

        self.tabs = QTabWidget()
        self.tabs.setObjectName("tabs")
        self.tabs.addTab(self.setup, "Set-up")
        self.tabs.addTab(self.dash, "Dashboard")
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
        # A reward-model run's report card: last too, and shown only while such a run is on show.
        self.report_card = RewardReportPage()
        self.tabs.addTab(self.report_card, "Report card")
        self.tabs.setTabToolTip(self.tabs.indexOf(self.report_card), "How well the reward model ranks held-out "
                                "pairs: accuracy, margins, calibration, length, the checks before scoring")
        self.tabs.setTabVisible(self.tabs.indexOf(self.report_card), False)
        # A run's evaluations (rl-engine eval): last too, shown while any run is on show.
        self.evaluate = EvaluatePage()
        self.tabs.addTab(self.evaluate, "Evaluate")
        self.tabs.setTabToolTip(self.tabs.indexOf(self.evaluate), "Sample N answers per held-out prompt from the "
                                "base and the checkpoints: pass@k, maj@k, and what RL taught prompt by prompt")
        self.tabs.setTabVisible(self.tabs.indexOf(self.evaluate), False)
        # Try a checkpoint (rl-engine try): last too, shown while a run is on show.
        self.try_page = TryPage()
        self.tabs.addTab(self.try_page, "Try")
        self.tabs.setTabToolTip(self.tabs.indexOf(self.try_page), "Type a prompt: the base and a checkpoint "
                                "answer side by side, each token coloured by where training changed it")
        self.tabs.setTabVisible(self.tabs.indexOf(self.try_page), False)
        # An evaluation sample's "tokens ▸": the Try tab scores it token by token.
        self.evaluate.sig_open_tokens.connect(lambda _given: self.tabs.setCurrentWidget(self.try_page))
        self.evaluate.sig_open_tokens.connect(self.try_page.start_given)
        self.tabs.setTabToolTip(INSPECTOR, "Every token of a recorded rollout, coloured by its advantage, logprob, "
                                "KL, entropy or ratio")
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.header)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)
        self.run_message = StatusMessage()  # the status bar's one message

        # Tests replace `ask`: the hooks call the window's method of the moment.
        message = self.run_message
        hooks = WindowHooks(self, ask=lambda *a: self.ask(*a), tell=self.tell, show_message=message.show_message,
                            clear_message=message.clear_message, message_kind=lambda: message.kind,
                            show_tab=self.tabs.setCurrentIndex, save_settings=self._save_settings)
        self.presets = PresetsController(hooks, self.doc, self.settings, lambda path: self._run_data(path).preset)
        self.run_control = RunControl(hooks, self.doc, self.setup, self.settings, lambda: self.shown,
                                      self._run_data, self.open_run, self.run_launched.emit, self._engine_finished)
        self.run_control.origin = lambda: self.presets.origin  # what a run's label is worked out against
        self.fork = ForkController(hooks, self.settings, self.run_control)
        self.export = ExportController(hooks, lambda: self.shown[0].run_dir if self.shown else None)
        self.pipeline = PipelineController(hooks, self.setup, lambda path: self._run_data(path).preset)
        # A reward model's Run… lists this folder's reward-model runs (the playground's editor too).
        self.setup.rewards.runs_folder = self.playground.rewards.runs_folder = lambda: self.settings.runs_path
        self._make_actions()
        from workbench.start.controller import StartController

        self.start = StartController(self)  # the Help menu, and the Start tab when app.py or Help asks for it
        self.statusBar().addWidget(self.run_message, 1)

        self.doc.dirty_changed.connect(lambda _dirty: self._update_title())
        self.doc.replaced.connect(self._update_title)
        self.doc.saved.connect(lambda _path: self._update_title())
        self.header.show_log.connect(self.show_engine_log)
        self.header.resume_requested.connect(lambda: self.run_control.resume())
        self.header.resume_blocked = self.run_control.resume_blocked
        self.header.run_again_requested.connect(self.run_control.run_again)
        self.header.status_shown.connect(self.run_control.update_actions)  # the tool bar follows the header at once
        self.samples.inspect_requested.connect(self.inspect)
        self.alarms.inspect_requested.connect(self.inspect)
        self.alarms.samples_requested.connect(self.show_samples_of_steps)
        self.alarms.alarm_selected.connect(lambda alarm: self.dashboard.show_metric(alarm.metric))
        self.alarms.alarms_arrived.connect(lambda alarms: message.show_message(
            arrival_message(alarms), "alarm", run=self.shown[0].run_dir if self.shown else None))
        self.dashboard.alarm_clicked.connect(lambda alarm: self.alarms.select_event(alarm.event))
        self.runs_view.open_requested.connect(self.open_run_and_preset)
        self.runs_view.compare_requested.connect(self.compare_runs)
        self.runs_view.preset_requested.connect(self.presets.load_run_preset)
        self.runs_view.fork_requested.connect(self.fork.fork_run)
        self.runs_view.export_requested.connect(self.export.export_run)
        self.runs_view.resume_requested.connect(self.run_control.resume)
        self.runs_view.start_from_requested.connect(self.pipeline.start_policy_from)
        self.runs_view.reward_model_requested.connect(self.pipeline.use_as_reward_model)
        self.header.open_requested.connect(self.open_run)  # an earlier stage of the run's pipeline
        self.runs_view.folder_changed.connect(self._runs_folder_changed)
        self.tabs.currentChanged.connect(self._tab_changed)

        self.timer = QTimer(self)
        self.timer.setInterval(self.POLL_MS)
        self.timer.timeout.connect(self.tick)
        self.timer.start()
        self.resize(1500, 950)
        self._update_title()
        self.run_control.update_actions()

    # ================================================================= actions

    def _make_actions(self) -> None:
        presets, control = self.presets, self.run_control
        open_run = make_action(self, "Open Run Folder…", self.open_run_dialog, None, "Open a past or running run")
        menu = self.menuBar().addMenu("&File")
        menu.addAction(presets.act_new)
        menu.addAction(presets.act_open)
        menu.addMenu(presets.recent_menu)
        menu.addMenu(presets.bundled_menu)
        menu.addAction(presets.act_save)
        menu.addAction(presets.act_save_as)
        menu.addSeparator()
        menu.addAction(open_run)
        menu.addAction(self.export.act_export)  # File ▸ Export Run… (workbench/window/export.py)
        menu.addSeparator()
        menu.addAction(make_action(self, "Quit", self.close, QKeySequence.Quit))
        run_menu = self.menuBar().addMenu("&Run")
        for act in control.actions:
            run_menu.addAction(act)

        bar = QToolBar("Main")
        bar.setObjectName("main-toolbar")
        bar.setMovable(False)
        bar.setToolButtonStyle(Qt.ToolButtonTextOnly)
        for act in (presets.act_new, presets.act_open, presets.act_save, presets.act_save_as):
            bar.addAction(act)
        recent = bar.addAction("Recent ▾")
        recent.triggered.connect(lambda: self._popup(presets.recent_menu, bar, recent))
        bundled = bar.addAction("Bundled ▾")
        bundled.triggered.connect(lambda: self._popup(presets.bundled_menu, bar, bundled))
        bar.addSeparator()
        bar.addWidget(control.name_field)  # the next run's name, optional
        for act in control.actions:
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
            button = box.addButton(choice, role)
            buttons[button] = choice
            if isinstance(choice, DefaultChoice):  # Return picks it (Kill's Cancel)
                box.setDefaultButton(button)
        box.exec()
        return buttons.get(box.clickedButton(), choices[-1])

    def tell(self, title: str, text: str) -> None:
        """Report an error the user must see (a file that cannot be read or written)."""
        self.run_message.show_message(f"{title}: {text}", "error")
        self.ask(title, text, ["OK"])

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
                and not workbench_dir(path).is_dir():
            self.tell("Not a run folder", f"{path} has no events.jsonl or preset.yaml")
            return None
        run = self._run_data(path)
        self.run_control.maybe_attach(path)  # a run left running by an earlier window
        self._show([run], compare=False)
        return run

    def open_run_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open run", str(self.settings.runs_path))
        if path:
            self.open_run_and_preset(path)

    def open_run_and_preset(self, path: str | Path) -> RunData | None:
        """A run the user opens (Open Run Folder, the Runs list): shown, and a copy of its
        preset in Set-up (window/presets.py: unsaved edits there are kept)."""
        run = self.open_run(path)
        if run is not None:
            self.presets.load_run_copy(run.run_dir)
        return run

    def compare_runs(self, paths: list) -> list[RunData]:
        runs_ = [self._run_data(Path(p)) for p in paths]
        self._show(runs_, compare=True)
        return runs_

    def _show(self, runs_: list[RunData], compare: bool) -> None:
        """The runs on show: all in the dashboard (their differences beside it when
        comparing), the first in the samples, inspector and log."""
        self.shown = runs_
        self.dash.show_runs(runs_, compare, self.width())
        self.samples.set_run(runs_[0])
        self.inspector.set_run(runs_[0])
        self.log_view.set_run(runs_[0].run_dir)
        scorer = is_reward_model_run(runs_[0].run_dir)
        self.report_card.set_run(runs_[0].run_dir if scorer else None)
        self.tabs.setTabVisible(self.tabs.indexOf(self.report_card), scorer)
        self.evaluate.set_run(runs_[0].run_dir, [r.run_dir for r in runs_[1:]])  # the others overlaid
        self.tabs.setTabVisible(self.tabs.indexOf(self.evaluate), True)
        self.try_page.set_run(runs_[0].run_dir)
        self.tabs.setTabVisible(self.tabs.indexOf(self.try_page), True)
        self.run_message.clear_message("error")
        self.run_message.runs_shown([r.run_dir for r in runs_])  # another run's message goes
        self.header.set_runs(self.shown, self.run_control.header_status)
        self._update_title()
        self.run_control.update_actions()
        self.tabs.setCurrentIndex(DASHBOARD)

    def _update_header(self) -> None:
        """Re-judge the statuses on show: the header redraws itself on new events, but an
        engine can end (or go stale) without writing one."""
        self.header.update_view()
        if not self.run_control.running and self._ticks % 25 == 0:
            self.run_control.update_actions()  # a run on show may have started or ended elsewhere

    def _engine_finished(self, code) -> None:
        """The window's engine ended (RunControl said so in the status bar)."""
        self._update_header()
        self.runs_view.refresh()
        self.engine_finished.emit(code)

    def show_engine_log(self) -> None:
        run = self.shown[0] if self.shown else None
        if run is not None and not (run.run_dir / rundir.LOG_FILE).exists():
            self.log_view.show_source(f"{WORKBENCH_DIR}/{OUTPUT_FILE}")
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
        if not self.presets.confirm_discard() or not self.export.close_export() or not self.run_control.may_close():
            event.ignore()
            return
        self.timer.stop()
        self._save_settings()
        event.accept()

    def _update_title(self) -> None:
        shown = f" — {self.shown[0].label.text}" if len(self.shown) == 1 else (
            f" — comparing {len(self.shown)} runs" if self.shown else "")
        self.setWindowTitle(f"{self.presets.title}[*]{shown} — RL Workbench")
        self.setWindowModified(self.doc.dirty)

    def _save_settings(self) -> None:
        self.settings.smoothing = self.dashboard.smoothing_weight
        self.settings.save(self._settings_path)
