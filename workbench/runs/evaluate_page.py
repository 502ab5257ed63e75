"""The Evaluate page of a run: evaluate its base model and checkpoints like a researcher
(`rl-engine eval`: N samples per held-out prompt, graded by the task's verifier) and read
what the engine wrote into `RUN/evals/NAME/` (workbench/runs/evaluations.py reads it):
pass@k and maj@k against k, where the curves cross, best-of-N as a reward model picks
against the oracle, a summary per model, and per prompt which of two models solves it
(what RL taught, and what it lost), with each model's samples of a prompt.

*Run evaluation* runs the CLI in the background as the report card does (a QProcess,
reward_report_page.py's ReportJob): its `progress DONE/TOTAL` lines move a bar, *Stop*
sends SIGINT so the engine keeps what it has done, and *Resume* runs the same command
again (the window names the evaluation itself, so a stopped one can be carried on).

With several runs on show, the other runs' evaluations are drawn over the first's
(evaluate_overlays.py picks them, evaluation_compare.py pairs them up).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QFileDialog, QHBoxLayout, QLabel, QLineEdit, QPushButton, QScrollArea, QSpinBox,
    QStackedWidget, QVBoxLayout, QWidget,
)

from workbench.runs.evaluate_overlays import OverlayBar
from workbench.runs.evaluate_views import EvaluationView
from workbench.runs.evaluation_compare import Comparison
from workbench.runs.evaluations import (
    EVAL_FILE, EVALS_DIR, Evaluation, EvaluationError, eval_command, list_evaluations, load_evaluation,
    new_eval_name, progress_count, run_checkpoints, written_folder,
)
from workbench.runs.engine_job import EngineJob
from workbench.runs.job_page import JobPage

STOPPED_CODE = 130  # the engine's exit after Ctrl-C or SIGINT, what it did kept
INTRO = ("<h3>Evaluate like a researcher</h3>"
         "<p>Sample N completions for each held-out prompt from the run's starting model (the base, no adapter) "
         "and from its checkpoints, grade them with the task's verifier, and compare: pass@k (solved in k tries), "
         "maj@k (the majority answer of k is right), where the curves cross (RL often wins at k = 1 and loses at "
         "large k: it sharpens what the base could already do), and, prompt by prompt, what the checkpoint solves "
         "that the base never did, and what it lost.</p>"
         "<p>This run has no evaluation yet: pick the models above and <b>Run evaluation</b>.</p>")


class EvalJob(EngineJob):
    """One `rl-engine eval` in the background."""

    # --- Signals
    sig_progress = Signal(int, int)
    """(done, total) prompt-model units, from the `progress DONE/TOTAL` lines."""
    sig_line = Signal(str)
    """The engine's last line on stderr that is not a progress count (what it is doing)."""
    sig_finished = Signal(str, str, object)
    """(outcome: done | stopped | failed, why it failed or "", the evaluation folder or None)."""

    def __init__(self, command: list[str], run_dir: Path, folder: Path, parent: QObject | None = None):
        super().__init__(command, run_dir, parent)
        self.folder = Path(folder)
        self.stopping = False

    def stop(self) -> None:
        """Ask the engine to stop as Ctrl-C does (it keeps what it has done); a second
        stop kills it."""
        if self.finished:
            return
        pid = self.process.processId()
        if self.stopping or pid <= 0 or sys.platform == "win32":
            self.process.kill()
        else:
            os.kill(pid, signal.SIGINT)  # QProcess sends SIGTERM or SIGKILL only
        self.stopping = True

    # --- EngineJob

    def stderr_read(self) -> None:
        line = self.last_line
        count = progress_count(line)
        if count is not None:
            self.sig_progress.emit(*count)
        elif line and not line.startswith("error: "):
            self.sig_line.emit(line)

    def process_ended(self, code: int, crashed: bool) -> None:
        folder = written_folder(self.stdout) or self.folder
        kept = (folder / EVAL_FILE).is_file()
        if not crashed and code == 0:
            self.finish("done", "" if kept else f"the engine ended without writing {folder / EVAL_FILE}",
                        folder if kept else None)
        elif self.stopping or code == STOPPED_CODE:
            self.finish("stopped", "", folder if kept else None)
        else:
            self.finish("failed", self.why_failed(code, crashed), folder if kept else None)


class EvaluatePage(JobPage):
    """The evaluations of one run (`set_run`), and the form that starts another (job_page.py's
    JobPage runs the EvalJob)."""

    # --- Signals
    sig_evaluation_shown = Signal(object)
    """An evaluation is on show (its folder)."""
    sig_run_finished = Signal(str, str)
    """An evaluation run ended: (done | stopped | failed, why it failed or "")."""
    sig_open_tokens = Signal(object)
    """A sample's "tokens ▸" was clicked: its GivenAnswer, for the Try tab to score token by token."""

    DEFAULT_N = 32

    def __init__(self, command_for: Callable[..., list[str]] = eval_command, parent: QWidget | None = None):
        super().__init__(parent)
        self.command_for = command_for  # (run_dir, models, n, reward_model, name) -> argv; tests give a stand-in
        # Replaced in tests: asks for a reward model's folder (None: the user cancelled).
        self.ask_reward_model: Callable[[], Path | None] = self._ask_reward_model
        self.folder: Path | None = None  # the evaluation on show
        self.evaluation: Evaluation | None = None  # and as read
        self.stopped: EvalJob | None = None  # the last job stopped: Resume runs its command again
        self._seen_write = 0.0  # when the running evaluation's eval.json was last shown
        self.model_boxes: dict[str, QCheckBox] = {}
        self._build()

    # --- Public API

    def set_run(self, run_dir: Path | None, others: list[Path] = ()) -> None:
        """Show `run_dir`'s evaluations (the newest first) and its models in the form;
        `others`: the other runs on show (in the dashboard's order), whose evaluations
        can be overlaid on it."""
        same = run_dir is not None and self.run_dir is not None and Path(run_dir) == self.run_dir
        if not same:
            self.run_dir = None if run_dir is None else Path(run_dir)
            self.folder, self.evaluation, self.stopped = None, None, None
            self._show_message("")
        self.overlay_bar.set_runs(self.run_dir, list(others))
        self._fill_models(keep=same)
        self.refresh_evaluations()

    def refresh_evaluations(self, select: Path | None = None) -> None:
        """Re-list the run's evaluations (keeping the one on show, or selecting `select`)."""
        keep = select or self.folder
        entries = list_evaluations(self.run_dir) if self.run_dir else []
        folders = [e.folder for e in entries]
        self.picker.blockSignals(True)
        self.picker.clear()
        for entry in entries:
            self.picker.addItem(entry.name, str(entry.folder))
        # By name: the engine's `wrote` path is absolute and resolved, the run folder may not be.
        names = [e.name for e in entries]
        index = names.index(keep.name) if keep is not None and keep.name in names else 0
        self.picker.setCurrentIndex(index)
        self.picker.blockSignals(False)
        self.picker.setEnabled(bool(entries))
        if not entries:
            self.folder = None
            self.body.setCurrentWidget(self.intro)
        elif folders[index] != self.folder or select is not None:
            self.show_evaluation(folders[index])
        self._update_buttons()

    def show_evaluation(self, folder: Path) -> bool:
        """Load and show the evaluation in `folder`; one that cannot be read says why."""
        try:
            evaluation = load_evaluation(folder)
        except EvaluationError as error:
            self.folder, self.evaluation = Path(folder), None
            self._show_message(f"Cannot show this evaluation: {error}")
            self.body.setCurrentWidget(self.unreadable)
            return False
        self.folder, self.evaluation = evaluation.folder, evaluation
        problems = "; ".join(evaluation.problems)  # a run's outcome, said after this, replaces them
        self._show_message(problems[:1].upper() + problems[1:] + "." if problems else "", "#8a6d00")
        self.view.show_evaluation(evaluation, self.comparison())
        self.body.setCurrentWidget(self.view)
        self._update_buttons()
        self.sig_evaluation_shown.emit(evaluation.folder)
        return True

    def comparison(self) -> Comparison | None:
        """The evaluation on show and the other runs' evaluations overlaid on it."""
        if self.evaluation is None:
            return None
        return Comparison(self.overlay_bar.first, self.evaluation, self.overlay_bar.overlays())

    def chosen_models(self) -> list[str]:
        return [name for name, box in self.model_boxes.items() if box.isChecked()]

    def start(self) -> bool:
        """Run an evaluation of the models ticked (False, nothing started: no run, no model,
        a reward model folder that is not there, or one is running)."""
        models = self.chosen_models()
        if self.run_dir is None or self.running or not models:
            return False
        reward_model = self.reward_model.text().strip()
        if reward_model and not Path(reward_model).expanduser().is_dir():
            self._show_message(f"The reward model {reward_model} is not a folder: give a reward-model run or one "
                               "of its checkpoints, or leave it empty.")
            return False
        name = new_eval_name()
        command = self.command_for(self.run_dir, models, self.n_spin.value(),
                                   Path(reward_model).expanduser() if reward_model else None, name)
        return self._run(command, self.run_dir / EVALS_DIR / name)

    def resume(self) -> bool:
        """Carry on the evaluation last stopped: the same command, the same --name."""
        job = self.stopped
        if job is None or self.running or job.run_dir != self.run_dir:
            return False
        return self._run(job.command, job.folder)

    def stop(self) -> None:
        if self.job is not None:
            self.job.stop()
            self.stop_button.setText("Kill")
            self.stop_button.setToolTip("The engine has been asked to stop; kill it without waiting")
            self.progress_line.setText("stopping: the engine keeps what it has done…")

    # --- The page

    def _build(self) -> None:
        self.models_row = QHBoxLayout()
        holder = QWidget()
        holder.setLayout(self.models_row)
        self.models_row.setContentsMargins(0, 0, 0, 0)
        self.models_row.addStretch(1)
        models = QScrollArea()  # a run with many checkpoints scrolls sideways
        models.setWidget(holder)
        models.setWidgetResizable(True)
        models.setFrameShape(QScrollArea.NoFrame)
        models.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.models_strip = models
        self.n_spin = QSpinBox()
        self.n_spin.setObjectName("eval-n")
        self.n_spin.setRange(1, 1024)
        self.n_spin.setValue(self.DEFAULT_N)
        self.n_spin.setToolTip("Samples per prompt (N): pass@k and maj@k are measured for k = 1, 2, 4, … up to N")
        self.reward_model = QLineEdit()
        self.reward_model.setObjectName("eval-reward-model")
        self.reward_model.setPlaceholderText("optional: a reward-model run or checkpoint folder")
        self.reward_model.setToolTip("Best-of-N: the verifier's score of the sample this reward model picks among N, "
                                     "against the verifier's own pick")
        self.browse_button = QPushButton("Browse…")
        self.run_button = QPushButton("Run evaluation")
        self.run_button.setObjectName("run-eval")
        self.run_button.setToolTip("rl-engine eval RUN --models … --n N, in the background")
        self.stop_button = QPushButton("Stop")
        self._build_job_widgets("eval", self.stop_button, 180)
        self.resume_button = QPushButton("Resume")
        self.resume_button.setToolTip("Run the stopped evaluation again: what it had done is kept, the rest sampled")
        self.picker = QComboBox()
        self.picker.setObjectName("eval-picker")
        self.picker.setMinimumContentsLength(20)
        self.picker.setToolTip("This run's evaluations, the newest first")
        first = QHBoxLayout()
        first.addWidget(QLabel("<b>Evaluate</b>"))
        first.addWidget(models, 1)
        second = QHBoxLayout()
        for widget in (QLabel("Samples per prompt"), self.n_spin, QLabel("Reward model"), self.reward_model,
                       self.browse_button, self.run_button, self.progress, self.progress_line, self.stop_button,
                       self.resume_button):
            second.addWidget(widget)
        second.setStretchFactor(self.reward_model, 1)
        second.addSpacing(16)
        second.addWidget(QLabel("Evaluation:"))
        second.addWidget(self.picker)
        self.body = QStackedWidget()
        self.intro = QLabel(INTRO)
        self.intro.setObjectName("eval-intro")
        self.intro.setWordWrap(True)
        self.intro.setAlignment(Qt.AlignTop | Qt.AlignLeft)
        self.intro.setContentsMargins(40, 30, 40, 0)
        self.unreadable = QLabel("Run the evaluation again (Resume, or the same --name) to replace this file.")
        self.unreadable.setAlignment(Qt.AlignCenter)
        self.view = EvaluationView()
        self.view.prompts.sig_open_tokens.connect(self.sig_open_tokens)
        self.overlay_bar = OverlayBar()
        for page in (self.intro, self.unreadable, self.view):
            self.body.addWidget(page)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        for row in (first, second):
            layout.addLayout(row)
        layout.addWidget(self.overlay_bar)
        layout.addWidget(self.message)
        layout.addWidget(self.body, 1)
        self.picker.currentIndexChanged.connect(self._picked)
        self.overlay_bar.sig_changed.connect(self._overlays_changed)
        self.browse_button.clicked.connect(self._browse)
        self.run_button.clicked.connect(self.start)
        self.stop_button.clicked.connect(self.stop)
        self.resume_button.clicked.connect(self.resume)
        self._set_busy(False)
        self._show_message("")
        self.body.setCurrentWidget(self.intro)

    def _fill_models(self, keep: bool) -> None:
        """A box for the base and each complete checkpoint; ticked: what was ticked (`keep`),
        else the base and the last checkpoint."""
        checkpoints = run_checkpoints(self.run_dir) if self.run_dir else []
        names = [("base", "base (no adapter)")] + [(name, f"step {step}") for name, step in checkpoints]
        if keep and [name for name, _text in names] == list(self.model_boxes):
            return  # no checkpoint saved since
        ticked = set(self.chosen_models()) if keep else None
        last = checkpoints[-1][0] if checkpoints else None
        for box in self.model_boxes.values():
            self.models_row.removeWidget(box)
            box.deleteLater()
        self.model_boxes = {}
        for name, text in names:
            box = QCheckBox(text)
            box.setObjectName(f"eval-model-{name}")
            box.setToolTip("the run's starting model, with no adapter" if name == "base" else
                           str(self.run_dir / "checkpoints" / name))
            box.setChecked(name in ticked if ticked is not None else name in ("base", last))
            box.toggled.connect(lambda _on: self._update_buttons())
            self.models_row.insertWidget(self.models_row.count() - 1, box)  # before the stretch
            self.model_boxes[name] = box
        self._fit_models_strip()
        self._update_buttons()

    def _fit_models_strip(self) -> None:
        """The boxes' height, and the sideways scroll bar's only when they do not fit."""
        strip = self.models_strip
        wide = strip.widget().sizeHint().width() > strip.width()
        bar = strip.style().pixelMetric(strip.style().PixelMetric.PM_ScrollBarExtent) if wide else 0
        strip.setFixedHeight(QCheckBox("base").sizeHint().height() + bar + 2)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_models_strip()

    # --- Reactions

    def _picked(self, index: int) -> None:
        if index >= 0:
            self.show_evaluation(Path(self.picker.itemData(index)))

    def _overlays_changed(self) -> None:
        if self.evaluation is not None and self.body.currentWidget() is self.view:
            self.view.show_evaluation(self.evaluation, self.comparison())

    def _browse(self) -> None:
        path = self.ask_reward_model()
        if path:
            self.reward_model.setText(str(path))

    def _run(self, command: list[str], folder: Path) -> bool:
        job = EvalJob(command, self.run_dir, folder, self)
        job.sig_line.connect(self.progress_line.setText)
        self.stopped, self._seen_write = None, 0.0
        self.stop_button.setText("Stop")
        self.stop_button.setToolTip("Stop as Ctrl-C does: the engine keeps the prompts it has done; Resume carries on")
        return self._start_job(job)

    def _progressed(self, done: int, total: int) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        if not self.job.stopping:
            self.progress_line.setText(f"{done} of {total} prompt × model")
        self._show_written(self.job.folder)

    def _show_written(self, folder: Path) -> None:
        """The running evaluation on show as soon as a model's results are written (the
        engine rewrites eval.json after each model)."""
        try:
            written = (folder / EVAL_FILE).stat().st_mtime
        except OSError:
            return
        if written != self._seen_write:
            self._seen_write = written
            self.refresh_evaluations(select=folder)

    def _job_finished(self, outcome: str, message: str, folder) -> None:
        job = self._job_ended()
        if job is not None:
            self.stopped = job if outcome == "stopped" else None
            if folder is not None:
                self.refresh_evaluations(select=Path(folder))
            self._say_outcome(outcome, message, job)
        self._update_buttons()
        self.sig_run_finished.emit(outcome, message)

    def _say_outcome(self, outcome: str, message: str, job: EvalJob) -> None:
        if outcome == "stopped":
            self._show_message(f"Stopped: what was done is kept in {job.folder.name} (a model stopped part-way is "
                               "marked). Resume carries it on.", "#5f6368")
        elif outcome == "failed":
            self._show_message(f"The evaluation failed: {message}")
        elif message:
            self._show_message(f"The evaluation ended oddly: {message}")

    def _update_buttons(self, busy: bool | None = None) -> None:
        busy = self.running if busy is None else busy
        self.run_button.setEnabled(self.run_dir is not None and not busy and bool(self.chosen_models()))
        self.resume_button.setVisible(not busy and self.stopped is not None)
        for widget in [self.n_spin, self.reward_model, self.browse_button, *self.model_boxes.values()]:
            widget.setEnabled(self.run_dir is not None and not busy)

    def _ask_reward_model(self) -> Path | None:
        start = str(self.run_dir.parent) if self.run_dir else ""
        path = QFileDialog.getExistingDirectory(self, "A reward-model run or checkpoint", start)
        return Path(path) if path else None

    def _catch_up(self) -> None:
        self._fill_models(keep=True)  # checkpoints saved since
        self.refresh_evaluations()  # an evaluation run from a terminal since
        self.overlay_bar.refresh()  # or of another run on show
