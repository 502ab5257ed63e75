"""The main window: presets (New, Open, Save, recent, bundled), Run and Stop, and the
tabs Set-up | Dashboard | Samples | Runs | Log.

One timer drives everything live: it polls the events of the runs on show (a few
milliseconds when nothing is new); a run model that read something new announces it
(RunData.updated) and the views that show it (dashboard, samples, header) redraw
themselves. Nothing the window does waits on the engine.
"""

from __future__ import annotations

from workbench import qt_compat  # noqa: F401  (first: guards a PySide6 refcount bug)

import html
import re
import shutil
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

import yaml

from engine import rundir
from engine.preset import PresetError
from engine.preset_paths import absolute_preset_paths
from workbench import runs
from workbench.dashboard import Dashboard, run_colour
from workbench.document import PresetDocument
from workbench.inspector import InspectorView
from workbench.launcher import AttachedEngine, EngineHandle, EngineProcess
from workbench.log_view import LogView
from workbench.run_header import RunHeader
from workbench.rundata import RunData
from workbench.runs_view import DifferencesTable, RunsView
from workbench.samples_view import SamplesView
from workbench.settings import Settings, bundled_presets
from workbench.setup_panel import SetupPanel

# Tab positions. (The inspector would sit best after Samples; it is last so that the
# positions of the first five stay as they were.)
SETUP, DASHBOARD, SAMPLES, INSPECTOR, RUNS, LOG = range(6)
SAVE, DISCARD, CANCEL = "Save", "Discard", "Cancel"
STOP_RUN, LEAVE_RUNNING = "Stop the run", "Leave it running"


def run_dir_name(preset_name: str, now: float | None = None) -> str:
    """`NAME-YYYYmmdd-HHMMSS` as the engine names runs, the name made safe for a folder.

    >>> run_dir_name("grpo sort/v2", 0.0).startswith("grpo-sort-v2-19")
    True
    """
    safe = re.sub(r"[^\w.-]+", "-", preset_name).strip("-.") or "run"
    return f"{safe}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}"


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
        dash_split.addWidget(self.dashboard)
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
        self.samples.inspect_requested.connect(self.inspect)
        self.runs_view.open_requested.connect(self.open_run)
        self.runs_view.compare_requested.connect(self.compare_runs)
        self.runs_view.preset_requested.connect(self.load_run_preset)
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

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        paths = [p for p in self.settings.recent_presets]
        if not paths:
            self.recent_menu.addAction("(none yet)").setEnabled(False)
        for path in paths:
            act = self.recent_menu.addAction(path)
            act.setEnabled(Path(path).exists())
            act.triggered.connect(lambda _c=False, p=path: self.open_preset(p))

    def _fill_bundled(self) -> None:
        self.bundled_menu.clear()
        presets = bundled_presets()
        if not presets:
            self.bundled_menu.addAction("(no presets/ folder found)").setEnabled(False)
        for path in presets:
            act = self.bundled_menu.addAction(path.stem)
            act.setToolTip(str(path))
            act.triggered.connect(lambda _c=False, p=path: self.open_bundled(p))

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

    # ================================================================ presets

    def _update_title(self) -> None:
        self.setWindowTitle(f"{self.doc.title}[*] — RL Workbench")
        self.setWindowModified(self.doc.dirty)

    def confirm_discard(self) -> bool:
        """True when the current preset may be replaced: no unsaved changes, or the user
        saved them or chose to discard them."""
        if not self.doc.dirty:
            return True
        answer = self.ask("Unsaved changes", f"Save the changes to {self.doc.title}?", [SAVE, DISCARD, CANCEL])
        if answer == SAVE:
            return self.save()
        return answer == DISCARD

    def new_preset(self) -> None:
        if self.confirm_discard():
            self.doc.new()
            self.clear_message("error", "problems")
            self.tabs.setCurrentIndex(SETUP)

    def open_preset_dialog(self) -> None:
        if not self.confirm_discard():
            return
        start = str(self.doc.base_dir or Path.cwd())
        path, _ = QFileDialog.getOpenFileName(self, "Open preset", start, "Presets (*.yaml *.yml);;All files (*)")
        if path:
            self.open_preset(path, confirmed=True)

    def open_preset(self, path: str | Path, confirmed: bool = False) -> bool:
        if not confirmed and not self.confirm_discard():
            return False
        try:
            self.doc.open(path)
        except PresetError as exc:
            self.tell("Cannot open preset", str(exc))
            return False
        self.settings.add_recent(path)
        self._save_settings()
        self.show_message(f"Opened {path}")
        self.tabs.setCurrentIndex(SETUP)
        return True

    def open_bundled(self, path: Path) -> bool:
        """A bundled preset opens as a new, untitled preset (Save writes a copy, so the
        shipped file is not overwritten by accident)."""
        if not self.confirm_discard():
            return False
        try:
            data = self._read_preset(path)
        except PresetError as exc:
            self.tell("Cannot open preset", str(exc))
            return False
        self.doc.new(data, clean=True)
        self.show_message(f"Opened the bundled preset {Path(path).stem} (Save writes a copy)")
        self.tabs.setCurrentIndex(SETUP)
        return True

    @staticmethod
    def _read_preset(path: Path) -> dict:
        from engine.preset import read_preset_dict

        data = read_preset_dict(path)
        if not isinstance(data, dict):
            raise PresetError(["the top level must be a mapping of sections"], str(path))
        return data

    def save(self) -> bool:
        if self.doc.path is None:
            return self.save_as_dialog()
        return self.save_as(self.doc.path)

    def save_as_dialog(self) -> bool:
        start = str(self.doc.path or (Path.cwd() / f"{self.doc.get('name') or 'preset'}.yaml"))
        path, _ = QFileDialog.getSaveFileName(self, "Save preset as", start, "Presets (*.yaml *.yml)")
        return self.save_as(path) if path else False

    def save_as(self, path: str | Path) -> bool:
        _, problems = self.doc.validate()
        if problems:
            answer = self.ask("The preset has problems",
                              f"{len(problems)} field(s) are not valid yet; the engine will refuse this preset "
                              "until they are fixed. Save it anyway, as it is?", ["Save anyway", CANCEL])
            if answer != "Save anyway":
                return False
        try:
            self.doc.save(path)
        except OSError as exc:
            self.tell("Cannot save preset", f"{path}: {exc.strerror or exc}")
            return False
        self.settings.add_recent(path)
        self._save_settings()
        self.show_message(f"Saved {path}")
        return True

    def load_run_preset(self, run_dir: Path) -> None:
        """Start a new preset from a run's resolved preset (to run a variation)."""
        if not self.confirm_discard():
            return
        run = self._run_data(run_dir)
        if not run.preset:
            self.tell("No preset", f"{run_dir} has no preset.yaml")
            return
        self.doc.new(run.preset)
        self.tabs.setCurrentIndex(SETUP)

    def _save_settings(self) -> None:
        self.settings.smoothing = self.dashboard.smoothing_weight
        self.settings.save(self._settings_path)

    # ================================================================ running

    def _validated(self, problems: list) -> None:
        if problems:
            path, message = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            self.act_run.setToolTip(f"Cannot run yet: {path + ': ' if path else ''}{message}{more}")
            if self._message_kind == "problems":  # a refused Run: say what is left to fix
                self.show_message(self._problems_text(problems), "problems")
        else:
            self.act_run.setToolTip("Start the engine on this preset, in a new run folder")
            self.clear_message("problems")

    @staticmethod
    def _problems_text(problems: list) -> str:
        path, message = problems[0]
        return (f"Cannot run: {len(problems)} problem{'s' if len(problems) > 1 else ''} in the preset. "
                f"First: {path + ': ' if path else ''}{message}")

    def run(self) -> Path | None:
        """Launch the engine on the form's preset (saved or not). Refused, with the
        reason shown, while the preset has problems or a run is in progress."""
        problems = self.setup.validate_now()
        if problems:
            path, message = problems[0]
            self.show_message(self._problems_text(problems), "problems")
            self.tabs.setCurrentIndex(SETUP)
            self.setup.focus_field(path)
            return None
        if self.engine is not None and self.engine.running:
            self.refuse(f"A run is in progress ({self.engine.run_dir.name}); stop it before starting another.")
            return None
        preset, _ = self.doc.validate()
        folder = self.settings.runs_path
        run_dir: Path | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            run_dir = folder / run_dir_name(preset.name)
            suffix = 2
            while run_dir.exists():
                run_dir = folder / f"{run_dir_name(preset.name)}-{suffix}"
                suffix += 1
            launch = runs.workbench_dir(run_dir) / runs.LAUNCH_PRESET
            launch.parent.mkdir(parents=True)
            # The launch preset lives in the run folder: a relative prompt file, custom
            # reward file or reward-model folder is made absolute (the engine's one rule).
            data = absolute_preset_paths(preset, self.doc.base_dir).model_dump(mode="json")
            launch.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
            engine = EngineProcess(run_dir, launch, stop_timeout_s=self.settings.stop_timeout_s, parent=self)
            engine.start()
        except OSError as exc:
            self.show_message(f"Cannot start the engine: {exc}", "error")
            if run_dir is not None and not (run_dir / rundir.EVENTS_FILE).exists():
                # Only what this method wrote is there; a folder with no engine behind
                # it would list as a run forever.
                shutil.rmtree(run_dir, ignore_errors=True)
            return None
        self._attach(engine, run_dir)
        self.show_message(f"Started {run_dir}", "engine")
        self.open_run(run_dir)
        self.run_launched.emit(run_dir)
        return run_dir

    def refuse(self, reason: str) -> None:
        self.show_message(reason, "refused")

    def _attach(self, engine: EngineHandle, run_dir: Path) -> None:
        self.engine = engine
        self.engine_dir = Path(run_dir)
        engine.finished.connect(self._engine_finished)
        engine.stopping.connect(lambda: self._update_actions())
        engine.escalated.connect(lambda text: self.show_message(f"{engine.run_dir.name}: {text}", "engine"))
        self._update_actions()

    def stop(self) -> None:
        if self.engine is not None and self.engine.running:
            self.engine.stop()
            how = "" if isinstance(self.engine, EngineProcess) else f" (SIGTERM to pid {self.engine.pid})"
            self.show_message(f"Stopping{how}: the engine finishes its current step and saves a checkpoint…",
                              "engine")
            self._update_actions()

    def kill(self) -> None:
        if self.engine is not None and self.engine.running:
            self.engine.kill()

    def _engine_finished(self, code) -> None:
        run_dir = self.engine_dir
        run = self._cache.get(run_dir) if run_dir else None
        if run is not None:
            run.poll()
        how = runs.describe_exit(code, bool(self.engine and self.engine.killed))
        name = run_dir.name if run_dir else "the engine"
        outcome = ""
        if run is not None:
            status, _ = self._status(run)
            outcome = f"; the run is {status}"
        self.show_message(f"{name}: the engine {how}{outcome}", "engine")
        self._update_actions()
        self._update_header()
        self.runs_view.refresh()
        self.engine_finished.emit(code)

    def _update_actions(self) -> None:
        running = self.engine is not None and self.engine.running
        self.act_stop.setEnabled(running and not self.engine.stop_requested)
        self.act_kill.setEnabled(running)
        self.act_run.setEnabled(not running)
        if running:  # the run Stop acts on, which need not be the one on show
            name = self.engine.run_dir.name
            how = "" if isinstance(self.engine, EngineProcess) else f" (SIGTERM to its pid {self.engine.pid})"
            self.act_stop.setToolTip(f"Ask {name} to stop after its current step{how}; it saves a checkpoint")
            if self.engine.stop_requested:
                self.act_stop.setToolTip(f"{name} is stopping: it finishes its step and saves a checkpoint")
            self.act_kill.setToolTip(f"Kill {name} now (SIGKILL to pid {self.engine.pid}): the step in progress "
                                     "is lost")
        else:
            reason = self._why_no_stop()
            self.act_stop.setToolTip(f"Stop is not available: {reason}")
            self.act_kill.setToolTip(f"Kill is not available: {reason}")
        for act in (self.act_stop, self.act_kill):
            act.setStatusTip(act.toolTip())

    def _why_no_stop(self) -> str:
        """Why Stop and Kill are greyed out, in words (their tool tips)."""
        run = self.shown[0] if len(self.shown) == 1 else None
        if run is None or self._status(run)[0] not in ("running", "starting", "stale"):
            return "no run of this window is in progress"
        ref = runs.find_engine(run.run_dir, run.started)
        if ref is None:
            return (f"{run.name} was started outside this window and its events name no process id: stop it "
                    "with Ctrl-C in the terminal that runs it (or kill its engine process)")
        if not runs.can_signal(ref.pid):
            return (f"{run.name} runs as pid {ref.pid}, a process of another user: stop it with Ctrl-C in its "
                    f"terminal, or as that user: kill -TERM {ref.pid}")
        return f"{run.name} (pid {ref.pid}) is not attached to this window"

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
        age = time.time() - run.last_time if run.last_time else None
        events_status = run.status if run.status != "empty" else "running"
        return runs.describe_run(run.run_dir, events_status, run.num_events > 0, age, started=run.started, alive=alive)

    def _header_status(self, run: RunData) -> tuple[str, str]:
        """The header's status of a run: _status, or `stopping` while this window's
        engine finishes its last step."""
        if self.engine is not None and self.engine.running and self.engine.stop_requested \
                and self.engine_dir and self.engine_dir.resolve() == run.run_dir:
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
        if not self.confirm_discard():
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
