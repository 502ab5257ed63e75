"""What the pages that run an engine command share (the Report card, Evaluate and Try
tabs): one job at a time (engine_job.py's EngineJob), the progress bar, its line and the
Stop or Cancel button shown while it runs, the message line under the form, and a catch-up
when the page is shown again (what was written since, by a terminal or the trainer).

A page builds these widgets with `_build_job_widgets`, starts a job with `_start_job`
(its `sig_progress` to the page's `_progressed`, its `sig_finished` to `_job_finished`),
which calls `_job_ended` first, and says which buttons are on in `_update_buttons`.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton, QWidget

from workbench.runs.engine_job import EngineJob


class JobPage(QWidget):
    """A page of one run (`run_dir`) that runs one engine job at a time (`job`)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.run_dir: Path | None = None
        self.job: EngineJob | None = None  # the one running, None once it has ended

    @property
    def running(self) -> bool:
        return self.job is not None and not self.job.finished

    def cancel(self) -> None:
        """Kill the job under way (it keeps nothing)."""
        if self.job is not None:
            self.job.cancel()

    # --- what a page says

    def _update_buttons(self, busy: bool | None = None) -> None:
        """Which of the form's buttons are on (`busy`: a job runs; None: ask `running`)."""
        raise NotImplementedError

    def _catch_up(self) -> None:
        """The page is shown with no job running: read what was written since."""

    # --- for the page

    def _build_job_widgets(self, name: str, halt: QPushButton, width: int) -> None:
        """`progress` (`width` wide, counting done/total), `progress_line` and `halt` (Stop
        or Cancel), shown while a job runs, and `message` (object name NAME-message)."""
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(width)
        self.progress.setFormat("%v/%m")
        self.progress_line = QLabel()
        self.progress_line.setStyleSheet("color:#5f6368")
        self._halt_button = halt
        self.message = QLabel()
        self.message.setObjectName(f"{name}-message")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextSelectableByMouse)

    def _start_job(self, job: EngineJob) -> bool:
        """Run `job`, the page busy until it ends (True: started)."""
        self.job = job
        job.sig_progress.connect(self._progressed)
        job.sig_finished.connect(self._job_finished)
        self._show_message("")
        self.progress.setRange(0, 0)  # busy until a line counts
        self.progress_line.setText("starting the engine…")
        self._set_busy(True)
        job.start()
        return True

    def _job_ended(self) -> EngineJob | None:
        """The job that just ended, let go and the page idle again; None when there was
        none, or it was another run's (the page may show another run by now)."""
        job, self.job = self.job, None  # one job at a time: this one
        self._set_busy(False)
        if job is None:
            return None
        job.deleteLater()  # when control is back in the event loop
        return job if job.run_dir == self.run_dir else None

    def _set_busy(self, busy: bool) -> None:
        for widget in (self.progress, self.progress_line, self._halt_button):
            widget.setVisible(busy)
        self._update_buttons(busy)

    def _show_message(self, text: str, colour: str = "#b00020") -> None:
        self.message.setText(f"<span style='color:{colour}'>{html.escape(text)}</span>" if text else "")
        self.message.setVisible(bool(text))

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self.run_dir is not None and not self.running:
            self._catch_up()
