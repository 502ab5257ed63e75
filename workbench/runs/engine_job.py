"""An engine command run in the background for a page (the report card's `rl-engine
reward-report`, the Evaluate tab's `rl-engine eval`, the Try tab's `rl-engine try`): a
QProcess with the engine's environment, started in the run's folder as the launcher starts
a run, its output kept (stderr's tail only), a failure to start reported once. A subclass
reads its lines (`stderr_read`, `last_line`) and says how it ended (`process_ended`, with
`why_failed`), emitting its own `sig_finished` once through `finish`; *Cancel* kills it
(`cancel`, then `cancelled`). workbench/runs/job_page.py is the page's side.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment

from workbench.runs.launcher import engine_environment
from workbench.runs.reward_report import failure_text, last_line


class EngineJob(QObject):
    """One engine command in the background. `stdout` whole; `stderr` its last
    MAX_STDERR characters (a long computation's progress lines). A subclass declares
    `sig_finished` (its outcome, why it failed or "", what it wrote or None)."""

    MAX_STDERR = 64_000
    FAILED: object = "failed"
    """The outcome `sig_finished` gives a job that could not start (the report card's: False)."""

    def __init__(self, command: list[str], run_dir: Path, parent: QObject | None = None):
        super().__init__(parent)
        self.command, self.run_dir = list(command), Path(run_dir)
        self.stdout = self.stderr = ""
        self.finished = self.cancelled = False
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

    def cancel(self) -> None:
        """Kill it (`cancelled` from then on): for a command that writes nothing, or whose
        half-written output is not kept."""
        if not self.finished:
            self.cancelled = True
            self.process.kill()

    @property
    def last_line(self) -> str:
        """stderr's last line as a person would see it (reward_report.last_line)."""
        return last_line(self.stderr)

    def why_failed(self, code: int, crashed: bool) -> str:
        """Why the command failed: its `error:` line, else how it ended (reward_report.failure_text)."""
        return failure_text(self.stderr, None if crashed else code)

    def finish(self, *outcome) -> None:
        """Emit `sig_finished(*outcome)`, the first time only."""
        if not self.finished:
            self.finished = True
            self.sig_finished.emit(*outcome)

    # --- what a subclass says

    def stderr_read(self) -> None:
        """New text arrived on stderr (in self.stderr)."""

    def process_ended(self, code: int, crashed: bool) -> None:
        """The process ended (its output read): `finish` with how."""
        raise NotImplementedError

    def start_failed(self, why: str) -> None:
        """It could not be started: a failure saying `why`, nothing written."""
        self.finish(self.FAILED, why, None)

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
