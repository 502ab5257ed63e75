"""The strip above the tabs about the run on show: its name and status, a progress bar
with step / max_steps and an ETA, and, when the engine failed, its message in red with
the log one click away."""

from __future__ import annotations

from workbench import qt_compat  # noqa: F401  (first: guards a PySide6 refcount bug)

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from workbench.rundata import RunData, format_duration
from workbench.runs_view import STATUS_COLOURS


class FailureBanner(QFrame):
    show_log = Signal()

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
        text = QVBoxLayout()
        text.addWidget(self.title)
        text.addWidget(self.message)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.addLayout(text, 1)
        layout.addWidget(self.log_button, 0, Qt.AlignTop)
        self.hide()

    def show_failure(self, title: str, message: str) -> None:
        self.title.setText(title)
        self.message.setText(message)
        self.show()


class RunHeader(QWidget):
    show_log = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.name = QLabel("No run open")
        self.name.setObjectName("run-name")
        self.name.setStyleSheet("font-weight:bold; font-size:13px;")
        self.status = QLabel()
        self.status.setObjectName("run-status")
        self.progress = QProgressBar()
        self.progress.setObjectName("run-progress")
        self.progress.setFormat("%v / %m steps")
        self.progress.setMinimumWidth(280)
        self.eta = QLabel()
        self.eta.setObjectName("run-eta")
        self.note = QLabel()
        self.note.setObjectName("run-note")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color:#c75000;")
        self.note.hide()
        self.failure = FailureBanner()
        self.failure.show_log.connect(self.show_log)
        row = QHBoxLayout()
        row.addWidget(self.name)
        row.addWidget(self.status)
        row.addStretch(1)
        row.addWidget(self.progress)
        row.addWidget(self.eta)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 0)
        layout.addLayout(row)
        layout.addWidget(self.note)
        layout.addWidget(self.failure)
        self.progress.hide()

    def set_status(self, status: str, note: str = "") -> None:
        colour = STATUS_COLOURS.get(status, "#333")
        self.status.setText(f"<span style='color:{colour}; font-weight:bold'>● {html.escape(status)}</span>")
        self.note.setText(note)
        self.note.setVisible(bool(note))

    def show_run(self, run: RunData | None, status: str, note: str = "", comparing: int = 0) -> None:
        if run is None or comparing > 1:
            # No single run's status, progress or failure to show.
            self.name.setText("No run open" if run is None else f"Comparing {comparing} runs")
            self.status.setText("")
            self.progress.hide()
            self.eta.setText("")
            self.note.hide()
            self.failure.hide()
            return
        self.name.setText(run.name)
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
        if run.failure:
            where = ""
            if run.failure.get("file"):
                where = f"\nat {run.failure['file']}:{run.failure.get('line', '?')}"
            kind = run.failure.get("error_type", "")
            self.failure.show_failure(f"Run failed{f' ({kind})' if kind else ''}",
                                      str(run.failure.get("message", "")) + where)
        elif status in ("interrupted",) or (status == "failed" and not run.failure):
            self.failure.show_failure("The engine ended without a result", note)
        else:
            self.failure.hide()
