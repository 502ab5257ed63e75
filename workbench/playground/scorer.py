"""`rl-engine score-rewards -` in the background: the request goes in on stdin, the answer
comes back as one JSON line on stdout (engine/commands/score_rewards.py).

A QProcess, not the launcher's detached Popen: a scoring has no reason to outlive the
window (QProcess ends its child when it goes), and its finished signal arrives through
the event loop, so the window never waits on it. One scoring at a time: `score` refuses
while one is running (the view disables its button meanwhile).
"""

from __future__ import annotations

import json
import sys

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Signal

from workbench.playground.model import ScoreError, read_answer
from workbench.runs.launcher import engine_environment


class RewardScorer(QObject):
    # --- Signals
    sig_started = Signal()
    """A scoring started (the engine process is starting)."""
    sig_finished = Signal(object)
    """The scoring ended: a ScoreResult, or a ScoreError (cancelled, failed, or the rewards' error)."""

    def __init__(self, parent: QObject | None = None, python: str | None = None):
        super().__init__(parent)
        self.python = python or sys.executable
        self.process: QProcess | None = None
        self._cancelled = False

    # --- Public API

    @property
    def running(self) -> bool:
        return self.process is not None

    def score(self, request: dict) -> bool:
        """Start scoring `request`; False (nothing started) while a scoring runs."""
        if self.running:
            return False
        process = QProcess(self)
        environment = QProcessEnvironment()
        for key, value in engine_environment().items():
            environment.insert(key, value)
        process.setProcessEnvironment(environment)
        process.finished.connect(self._finished)
        process.errorOccurred.connect(self._error)
        self.process, self._cancelled = process, False
        process.start(self.python, ["-m", "engine", "score-rewards", "-"])
        process.write(json.dumps(request).encode("utf-8"))
        process.closeWriteChannel()
        self.sig_started.emit()
        return True

    def cancel(self) -> None:
        """Stop the scoring in progress (its engine process is killed)."""
        if self.process is not None:
            self._cancelled = True
            self.process.kill()

    # --- Internals

    def _done(self, outcome) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.deleteLater()
        self.sig_finished.emit(outcome)

    def _finished(self, exit_code: int, exit_status) -> None:
        process = self.process
        if process is None:
            return
        if self._cancelled:
            self._done(ScoreError("cancelled"))
            return
        stdout = bytes(process.readAllStandardOutput()).decode("utf-8", "replace")
        stderr = bytes(process.readAllStandardError()).decode("utf-8", "replace")
        code = exit_code if exit_status == QProcess.NormalExit else None
        self._done(read_answer(stdout, stderr, code))

    def _error(self, error) -> None:
        # Only a failure to start ends a scoring here; a crash also emits finished.
        if error == QProcess.FailedToStart and self.process is not None:
            self._done(ScoreError(f"could not start the engine ({self.python} -m engine): "
                                  f"{self.process.errorString()}"))
