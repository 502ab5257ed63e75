"""The strip above the tabs about the run on show: its name and status, a progress bar
with step / max_steps and an ETA, the pipeline it was built from (pipeline_line.py: a run
started from another run, scored by a reward-model run), and, when the engine failed or
was killed, its message (once, cleaned of terminal progress output) with the log one
click away.

A run that ended early (stopped, killed, interrupted, failed) gets the banner with a
Resume button: it says where Resume continues from, or, with Resume greyed out, why it
cannot (no checkpoint yet).

The status is the one runs.describe_run gives, the same word the Runs tab shows. The
header follows the runs on show (`set_runs`: it redraws on their `updated` signal); the
window judges a run's status (`judge`, as only it holds the engine process) and calls
`update_view()` now and then, as an engine can end without writing an event."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from workbench.runs.pipeline_line import PipelineLine
from workbench.runs.rundata import RunData, format_duration
from workbench.runs.status import RESUMABLE, clean_output, resume_note, resume_problem
from workbench.runs.runs_view import STATUS_COLOURS

BANNER_STYLES = {  # (background, border, title colour)
    "failed": ("#fdecea", "#b00020", "#b00020"),
    "killed": ("#fff4e5", "#c75000", "#9a3d00"),
    "interrupted": ("#fff4e5", "#c75000", "#9a3d00"),
    "stopped": ("#fff8e1", "#8a6d00", "#6d5600"),
}


class ElidedLabel(QLabel):
    """A one-line label that gives up width first: its text is elided (the full text is
    its tool tip), so the labels beside it (the ETA) always fit."""

    def __init__(self, text: str = "", parent=None):
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.setMinimumWidth(60)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self._full = text
        self.setToolTip(text)
        self._elide()

    def sizeHint(self):  # noqa: N802
        hint = super().sizeHint()
        hint.setWidth(self.fontMetrics().horizontalAdvance(self._full) + 8)
        return hint

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._full, Qt.ElideMiddle, max(0, self.width() - 4))
        if shown != super().text():
            super().setText(shown)


class FitLabel(QLabel):
    """A label whose minimum width is its text's, at least that of `typical` (so the
    layout around it rarely moves as the text changes); a longer text lays its row out
    again at once, so it is never painted cut off, not even for one frame."""

    def __init__(self, typical: str = "", parent=None):
        super().__init__(parent)
        self._typical = typical

    def setText(self, text: str) -> None:  # noqa: N802
        if text == self.text():
            return
        super().setText(text)
        metrics = self.fontMetrics()
        needed = max(metrics.horizontalAdvance(text), metrics.horizontalAdvance(self._typical) if text else 0) + 6
        if needed != self.minimumWidth():
            self.setMinimumWidth(needed)
        if self.width() < needed and self.parentWidget() is not None and self.parentWidget().layout() is not None:
            self.parentWidget().layout().activate()


class FailureBanner(QFrame):
    """What happened to a run that ended early, with Resume (continue it in its folder),
    Run again (its preset, in a new run folder) and Show engine log."""

    show_log = Signal()
    resume_requested = Signal()
    run_again_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("failure-banner")
        self.setStyleSheet("#failure-banner { background:#fdecea; border:1px solid #b00020; border-radius:4px; }")
        self.title = QLabel()
        self.title.setStyleSheet("color:#b00020; font-weight:bold; font-size:13px;")
        self.message = QLabel()
        self.message.setObjectName("failure-message")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.message.setStyleSheet("color:#5a0010;")
        self.log_button = QPushButton("Show engine log")
        self.log_button.setObjectName("show-log")
        self.log_button.clicked.connect(self.show_log)
        self.resume_button = QPushButton("Resume")
        self.resume_button.setObjectName("banner-resume")
        self.resume_button.clicked.connect(self.resume_requested)
        self.run_again_button = QPushButton("Run again")
        self.run_again_button.setObjectName("banner-run-again")
        self.run_again_button.clicked.connect(self.run_again_requested)
        text = QVBoxLayout()
        text.addWidget(self.title)
        text.addWidget(self.message)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.addLayout(text, 1)
        layout.addWidget(self.resume_button, 0, Qt.AlignTop)
        layout.addWidget(self.run_again_button, 0, Qt.AlignTop)
        layout.addWidget(self.log_button, 0, Qt.AlignTop)
        self.hide()

    def show_failure(self, title: str, message: str, kind: str = "failed") -> None:
        background, border, colour = BANNER_STYLES.get(kind, BANNER_STYLES["failed"])
        self.setStyleSheet(f"#failure-banner {{ background:{background}; border:1px solid {border}; "
                           "border-radius:4px; }")
        self.title.setStyleSheet(f"color:{colour}; font-weight:bold; font-size:13px;")
        self.title.setText(title)
        self.message.setText(clean_output(message))
        self.show()

    def set_resume(self, problem: str | None, run_dir) -> None:
        """Resume enabled, or greyed out with `problem` (why not) as its tool tip."""
        self.resume_button.setEnabled(problem is None)
        self.resume_button.setToolTip(f"Resume is not possible: {problem}" if problem else
                                      "Continue this run in its folder from its last checkpoint, or from step 0 "
                                      "when it has none")

    def set_run_again(self, problem: str | None) -> None:
        """Run again enabled, or greyed out with `problem` (why not) as its tool tip."""
        self.run_again_button.setEnabled(problem is None)
        self.run_again_button.setToolTip(f"Run again is not possible: {problem}" if problem else
                                         "Start this run's preset again, in a new run folder (the same settings "
                                         "and name)")


class RunHeader(QWidget):
    """Signals: show_log(), resume_requested() (the banner's Resume, for the run on show),
    open_requested(path) (an earlier stage of the run's pipeline clicked)."""

    show_log = Signal()
    resume_requested = Signal()
    run_again_requested = Signal(Path)  # the banner's Run again: the run folder whose preset runs again
    open_requested = Signal(Path)
    status_shown = Signal()  # the status on show changed (the window's Run, Stop and Kill follow it)
    # Why no run can be resumed now whatever its state (the window's own engine is busy), or None.
    resume_blocked: Callable[[], str | None] = staticmethod(lambda: None)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.name = ElidedLabel("No run open")
        self.name.setObjectName("run-name")
        self.name.setStyleSheet("font-weight:bold; font-size:13px;")
        self.status = QLabel()
        self.status.setObjectName("run-status")
        self.progress = QProgressBar()
        self.progress.setObjectName("run-progress")
        self.progress.setFormat("%v / %m steps")
        self.progress.setMinimumWidth(160)
        self.progress.setMaximumWidth(320)
        self.progress.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.eta = FitLabel("ETA 59 min 59 s · 99.99 s/step")
        self.eta.setObjectName("run-eta")
        self.note = QLabel()
        self.note.setObjectName("run-note")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color:#c75000;")
        self.note.hide()
        self.pipeline = PipelineLine()
        self.pipeline.open_requested.connect(self.open_requested)
        self.failure = FailureBanner()
        self.failure.show_log.connect(self.show_log)
        self.failure.resume_requested.connect(self.resume_requested)
        self.failure.run_again_requested.connect(lambda: self.runs and self.run_again_requested.emit(
            self.runs[0].run_dir))
        row = QHBoxLayout()
        self.status.setSizePolicy(QSizePolicy.Minimum, QSizePolicy.Preferred)
        self.eta.setSizePolicy(QSizePolicy.Minimum, QSizePolicy.Preferred)
        row.addWidget(self.name, 1)
        row.addWidget(self.status)
        row.addSpacing(12)
        row.addWidget(self.progress, 1)
        row.addWidget(self.eta)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 0)
        layout.addLayout(row)
        layout.addWidget(self.pipeline)
        layout.addWidget(self.note)
        layout.addWidget(self.failure)
        self.progress.hide()

    runs: list[RunData] = []

    def set_runs(self, runs: list[RunData], judge: Callable[[RunData], tuple[str, str]]) -> None:
        """Follow these runs (the first is shown; several: a comparison); `judge(run)` is
        its (status, note)."""
        for run in self.runs:
            run.updated.disconnect(self._run_updated)
        self.runs, self._judge = list(runs), judge
        for run in self.runs:
            run.updated.connect(self._run_updated)
        self.update_view()

    def _run_updated(self, _update) -> None:
        self.update_view()

    def update_view(self) -> None:
        """Redraw from the runs and their statuses as judged now."""
        if not self.runs:
            self.show_run(None, "")
            return
        status, note = self._judge(self.runs[0])
        statuses = [self._judge(r)[0] for r in self.runs] if len(self.runs) > 1 else None
        self.show_run(self.runs[0], status, note, comparing=len(self.runs), statuses=statuses)
        shown = (tuple(r.run_dir for r in self.runs), status, tuple(statuses or ()))
        if shown != self._shown_status:
            self._shown_status = shown
            self.status_shown.emit()

    _shown_status: tuple = ()

    def set_status(self, status: str, note: str = "") -> None:
        colour = STATUS_COLOURS.get(status, "#333")
        self.status.setText(f"<span style='color:{colour}; font-weight:bold'>● {html.escape(status)}</span>")
        self.status_word = status
        note = clean_output(note)
        self.note.setText(note)
        self.note.setVisible(bool(note))

    status_word = ""

    def show_run(self, run: RunData | None, status: str, note: str = "", comparing: int = 0,
                 statuses: list[str] | None = None) -> None:
        if run is None or comparing > 1:
            # No single run's progress or failure to show; each compared run's status.
            self.name.setText("No run open" if run is None else f"Comparing {comparing} runs")
            self.status_word = ""
            if statuses:
                counts: dict[str, int] = {}
                for word in statuses:
                    counts[word] = counts.get(word, 0) + 1
                self.status.setText(" ".join(
                    f"<span style='color:{STATUS_COLOURS.get(word, '#333')}; font-weight:bold'>● "
                    f"{count} {html.escape(word)}</span>" for word, count in counts.items()))
            else:
                self.status.setText("")
            self.progress.hide()
            self.eta.setText("")
            self.note.hide()
            self.failure.hide()
            self.pipeline.show_run(None)
            return
        label = run.label
        self.name.setText(label.text)
        folder = f"folder {run.run_dir.name}" if run.run_dir.name != label.text else ""
        self.name.setToolTip("\n".join(part for part in (label.text, folder, label.detail) if part))
        self.pipeline.show_run(run)
        self.set_status(status, note)
        progress = run.progress()
        if progress.max_steps:
            self.progress.show()
            # QProgressBar repaints at once on a new value; set it only when it changed.
            if self.progress.maximum() != progress.max_steps:
                self.progress.setRange(0, progress.max_steps)
            value = min(progress.step, progress.max_steps)
            if self.progress.value() != value:
                self.progress.setValue(value)
        else:
            self.progress.hide()
        if status in ("running", "starting"):
            rate = f" · {progress.seconds_per_step:.2f} s/step" if progress.seconds_per_step else ""
            self.eta.setText(f"ETA {format_duration(progress.eta_seconds)}{rate}")
        elif run.first_time is not None and run.last_time is not None:
            self.eta.setText(f"took {format_duration(run.last_time - run.first_time)}")
        else:
            self.eta.setText("")
        self._show_banner(run, status, note, progress)

    def _show_banner(self, run: RunData, status: str, note: str, progress) -> None:
        """The banner of a run that ended early: what happened, and whether Resume can
        continue it (its button greyed out, with the reason, when not)."""
        if status not in RESUMABLE and not run.failure:
            self.failure.hide()
            self._banner_key = None
            return
        self.note.hide()
        blocked = self.resume_blocked()
        # Redrawn every second or so: read the checkpoints (and, without one, the events
        # the reason quotes) only when something it depends on changed.
        key = (run.run_dir, status, note, run.num_events, blocked, len(run.checkpoints))
        if key == self._banner_key and self.failure.isVisibleTo(self):
            return
        self._banner_key = key
        if run.failure:
            where = ""
            if run.failure.get("file"):
                where = f"\nat {run.failure['file']}:{run.failure.get('line', '?')}"
            kind = run.failure.get("error_type", "")
            title = f"Run failed{f' ({kind})' if kind else ''}"
            message = str(run.failure.get("message", "")) + where
        else:
            title = {"killed": "The run was killed", "interrupted": "The engine ended without a result",
                     "failed": "The engine ended before the run started", "stopped": "The run was stopped"}[status]
            # The note is the banner's message: shown there, not a second time above it.
            message = note or (f"Stopped after step {progress.step}" + (f" of {progress.max_steps}."
                                                                         if progress.max_steps else "."))
        status = status if status in RESUMABLE else "failed"
        problem = resume_problem(run.run_dir, status)  # reads the checkpoints (and events): once
        message = clean_output(message) + "\n" + resume_note(run.run_dir, problem)
        self.failure.show_failure(title, message, "failed" if run.failure else status)
        self.failure.set_resume(blocked or problem, run.run_dir)
        self.failure.set_run_again(blocked or (None if run.preset else "the run folder holds no preset"))

    _banner_key: tuple | None = None
