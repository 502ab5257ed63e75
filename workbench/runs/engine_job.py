"""An engine command run in the background for a page (the report card's `rl-engine
reward-report`, the Evaluate tab's `rl-engine eval`): a QProcess with the engine's
environment, started in the run's folder as the launcher starts a run, its output kept
(stderr's tail only), a failure to start reported once. A subclass reads its lines
(`stderr_read`) and says how it ended (`process_ended`, `start_failed`), emitting its own
signal once.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment

from workbench.runs.launcher import engine_environment


class EngineJob(QObject):
    """One engine command in the background. `stdout` whole; `stderr` its last
    MAX_STDERR characters (a long computation's progress lines)."""

    MAX_STDERR = 64_000

    def __init__(self, command: list[str], run_dir: Path, parent: QObject | None = None):
        super().__init__(parent)
        self.command, self.run_dir = list(command), Path(run_dir)
        self.stdout = self.stderr = ""
        self.finished = False
        self.process = QProcess(self)
        environment = QProcessEnvironment()
        for key, value in engine_environment().items():
            environment.insert(key, value)
        self.process.setProcessEnvironment(environment)
        self.process.setWorkingDirectory(str(self.run_dir))  # as the launcher starts a run
        self.process.readyReadStandardOutput.connect(self._read_stdout)
        self.process.readyReadStandardError.connect(self._read_stderr)
        self.process.finished.connect(self._finished)
        self.process.errorOccurred.connect(self._error)

    def start(self) -> None:
        self.process.start(self.command[0], self.command[1:])

    # --- what a subclass says

    def stderr_read(self) -> None:
        """New text arrived on stderr (in self.stderr)."""

    def process_ended(self, code: int, crashed: bool) -> None:
        """The process ended (its output read): emit how."""
        raise NotImplementedError

    def start_failed(self, why: str) -> None:
        """It could not be started: emit a failure saying `why`."""
        raise NotImplementedError

    # --- internals

    def _read_stdout(self) -> None:
        self.stdout += bytes(self.process.readAllStandardOutput()).decode("utf-8", "replace")

    def _read_stderr(self) -> None:
        text = bytes(self.process.readAllStandardError()).decode("utf-8", "replace")
        self.stderr = (self.stderr + text)[-self.MAX_STDERR:]
        self.stderr_read()

    def _finished(self, code: int, status) -> None:
        self._read_stdout()
        self._read_stderr()
        self.process_ended(code, status == QProcess.ExitStatus.CrashExit)

    def _error(self, error) -> None:
        # Only a failure to start ends a job here; a crash also emits finished.
        if error == QProcess.ProcessError.FailedToStart:
            self.start_failed(f"cannot start the engine ({self.command[0]}): {self.process.errorString()}")
