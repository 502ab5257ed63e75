""""Export…" (the Runs tab's button, a run's context menu, File ▸ Export Run…): the
export dialog, then the engine's `export` command run in the background while the
dialog and the status bar show its progress. `ExportController`, owned by MainWindow.

Why QProcess here and not subprocess.Popen as for runs (runs/launcher.py): an export
is not left running when the window closes, its output is read as it comes (the
`progress:` lines), and QProcess tells its end by a signal, with no timer to poll.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer, Signal

from engine.run import rundir
from workbench.runs.export_dialog import KINDS, ExportDialog
from workbench.runs.launcher import engine_environment
from workbench.runs.status import clean_output
from workbench.window.hooks import WindowHooks, make_action
from workbench.window.names import CANCEL, CANCEL_EXPORT

_PROGRESS = re.compile(r"progress: (\d+)/(\d+) (.*)")


def parse_progress(line: str) -> tuple[int, int, str] | None:
    """(done, total, what) of an engine `progress:` line; None for any other line.

    >>> parse_progress("progress: 3/11 merged: merging"), parse_progress("adapter (step_2): out")
    ((3, 11, 'merged: merging'), None)
    """
    match = _PROGRESS.fullmatch(line.strip())
    return (int(match.group(1)), int(match.group(2)), match.group(3)) if match else None


def engine_error(stderr: str, code: int | None) -> str:
    """What went wrong, from the engine's error output: its last `error: ` line; of a
    traceback (an engine bug) only the exception's line; else the exit status.

    >>> engine_error("Loading weights: 100%\\nerror: SafetensorError: header too large\\n", 1)
    'SafetensorError: header too large'
    >>> engine_error("Traceback (most recent call last):\\n  File \\"x.py\\", line 1\\nKeyError: 'step'\\n", 1)
    "the engine failed: KeyError: 'step' (exit status 1)"
    """
    lines = clean_output(stderr).splitlines()
    errors = [line[len("error: "):] for line in lines if line.startswith("error: ")]
    if errors:
        return errors[-1]
    status = "killed by a signal" if code is None else f"exit status {code}"
    if any(line.startswith("Traceback") for line in lines):
        last = next((line for line in reversed(lines) if line and not line[0].isspace()), "")
        return f"the engine failed: {last} ({status})"
    return f"the engine stopped without saying why ({status}); its last words: {lines[-1]}" if lines else \
        f"the engine stopped without saying why ({status})"


def staged_folder(out: Path) -> Path:
    """The hidden folder the engine writes `out` into before renaming it (engine/commands/export.py)."""
    return out.with_name(f".{out.name}.export.tmp")


class ExportJob(QObject):
    """One `python -m engine export ...` in the background.

    Signals: `progressed(done, total, what)` for each progress line, `done(ok, message)`
    when it ends (message: empty on success, else why it failed or that it was cancelled).
    """

    progressed = Signal(int, int, str)
    done = Signal(bool, str)

    KILL_AFTER_MS = 10_000  # Cancel sends SIGTERM (the engine removes what it was writing); then SIGKILL
    MAX_STDERR = 64_000

    def __init__(self, command: list[str], run_dir: Path, outputs: dict[str, Path], parent=None):
        super().__init__(parent)
        self.command = list(command)
        self.run_dir = Path(run_dir)
        self.outputs = {flag: Path(p) for flag, p in outputs.items()}  # the engine's flag -> folder
        self.cancelled = False
        self.finished = False
        self.ok = False
        self.message = ""
        self.stdout_lines: list[str] = []
        self.stderr = ""
        self._partial = ""
        self.process = QProcess(self)
        env = QProcessEnvironment()
        for key, value in engine_environment().items():
            env.insert(key, value)
        self.process.setProcessEnvironment(env)
        self.process.setWorkingDirectory(str(self.run_dir))
        self.process.readyReadStandardOutput.connect(self._read_stdout)
        self.process.readyReadStandardError.connect(self._read_stderr)
        self.process.finished.connect(self._finished)
        self.process.errorOccurred.connect(self._error)
        self._kill = QTimer(self)
        self._kill.setSingleShot(True)
        self._kill.timeout.connect(self.process.kill)

    @property
    def running(self) -> bool:
        return not self.finished

    def start(self) -> None:
        self.process.start(self.command[0], self.command[1:])

    def cancel(self) -> None:
        """Ask the engine to stop (SIGTERM: it removes the folder it was writing);
        kill it if it has not ended KILL_AFTER_MS later."""
        if self.finished or self.cancelled:
            return
        self.cancelled = True
        self.process.terminate()
        self._kill.start(self.KILL_AFTER_MS)

    def cancel_and_wait(self) -> None:
        """Cancel, and block until the engine has ended (killed KILL_AFTER_MS after the
        SIGTERM at the latest) with no half-written folder left: for a window that is
        closing, where the process would otherwise be killed outright and leave its
        hidden staged folders behind."""
        self.cancel()
        if not self.process.waitForFinished(self.KILL_AFTER_MS):
            self.process.kill()
            self.process.waitForFinished(5_000)
        self._end(False, "export cancelled; nothing was left half-written")  # no-op if it ended

    # ------------------------------------------------------------ the process

    def _read_stdout(self) -> None:
        text = self._partial + bytes(self.process.readAllStandardOutput()).decode("utf-8", "replace")
        *lines, self._partial = text.split("\n")
        for line in lines:
            progress = parse_progress(line)
            if progress is not None:
                self.progressed.emit(*progress)
            elif line.strip():
                self.stdout_lines.append(line.strip())

    def _read_stderr(self) -> None:
        self.stderr += bytes(self.process.readAllStandardError()).decode("utf-8", "replace")
        self.stderr = self.stderr[-self.MAX_STDERR:]

    def _finished(self, code: int, status) -> None:
        self._read_stdout()
        self._read_stderr()
        crashed = status == QProcess.ExitStatus.CrashExit
        ok = not crashed and code == 0 and not self.cancelled
        if self.cancelled:
            message = "export cancelled; nothing was left half-written"
        elif ok:
            message = ""
        else:
            message = engine_error(self.stderr, None if crashed else code)
        self._end(ok, message)

    def _error(self, error) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self._end(False, f"cannot start the engine ({self.command[0]}): {self.process.errorString()}")

    def _end(self, ok: bool, message: str) -> None:
        if self.finished:
            return
        self.finished, self.ok, self.message = True, ok, message
        self._kill.stop()
        if not ok:  # killed before it could tidy up: its hidden half-written folders
            for out in self.outputs.values():
                shutil.rmtree(staged_folder(out), ignore_errors=True)
        self.done.emit(ok, message)


class ExportController:
    """Export a run's adapter, a merged model or its TensorBoard events: File ▸ Export
    Run… (`act_export`, on the run `shown_run()` gives; None: none) and the Runs tab's
    Export. `dialog` and `job`: the last export's."""

    def __init__(self, window: WindowHooks, shown_run: Callable[[], Path | None]):
        self.window, self.shown_run = window, shown_run
        self.dialog: ExportDialog | None = None
        self.job: ExportJob | None = None
        self.act_export = make_action(window.parent, "Export Run…", self.export_open_run, None,
                                      "Export the run on show: its LoRA adapter, a merged model or its TensorBoard "
                                      "events")

    def export_open_run(self) -> ExportDialog | None:
        run_dir = self.shown_run()
        if run_dir is None:
            self.window.refuse("Open a run first (File ▸ Open Run Folder…, or the Runs tab), then export it.")
            return None
        return self.export_run(run_dir)

    def export_run(self, path: str | Path) -> ExportDialog | None:
        """Open the export dialog on a run (not modal: the window goes on). While an
        export runs, its dialog comes back instead."""
        if self.job is not None and self.job.running and self.dialog is not None:
            self.window.refuse(f"An export of {self.dialog.run_dir.name} is in progress; cancel it or wait for it "
                        "before exporting again.")
            self.dialog.show()
            self.dialog.raise_()
            return self.dialog
        path = Path(path).resolve()
        if not rundir.complete_checkpoints(path) and not (path / rundir.EVENTS_FILE).exists():
            self.window.refuse(f"{path.name} has nothing to export: no complete checkpoint (one is saved every "
                        "training.save_steps steps and when a run ends or is stopped) and no events.")
            return None
        if self.dialog is not None:
            self.dialog.deleteLater()
        dialog = ExportDialog(path, parent=self.window.parent)
        dialog.export_requested.connect(lambda: self.start_export(dialog))
        dialog.cancel_requested.connect(self.cancel_export)
        self.dialog = dialog
        dialog.show()
        return dialog

    def start_export(self, dialog: ExportDialog) -> ExportJob | None:
        """Run `python -m engine export RUN --checkpoint step_N --adapter OUT ... --quiet
        --progress` in the background; its progress and result go to the dialog and the
        status bar."""
        if self.job is not None and self.job.running:
            self.window.refuse("An export is in progress; cancel it or wait for it.")
            return None
        if dialog.check():
            return None
        job = ExportJob(dialog.command(), dialog.run_dir, dialog.outputs(), parent=self.window.parent)
        name = dialog.run_dir.name
        job.progressed.connect(lambda done, total, what: self._export_progressed(dialog, done, total, what))
        job.done.connect(lambda ok, message: self._export_done(dialog, job, ok, message))
        self.job = job
        dialog.set_running(True)
        self.window.show_message(f"Exporting {name}…", "export")
        job.start()
        return job

    def close_export(self) -> bool:
        """The window is closing: an export in progress is cancelled (nothing half-written
        is left) if the user agrees. False: keep the window open."""
        job = self.job
        if job is None or not job.running:
            return True
        name = self.dialog.run_dir.name if self.dialog is not None else "A run"
        answer = self.window.ask("An export is in progress",
                          f"{name} is being exported. Closing the window cancels the export (nothing "
                          "half-written is left); or keep the window open until it is done.",
                          [CANCEL_EXPORT, CANCEL])
        if answer != CANCEL_EXPORT:
            return False
        job.cancel_and_wait()
        return True

    def cancel_export(self) -> None:
        if self.job is not None and self.job.running:
            self.job.cancel()
            if self.dialog is not None:
                self.dialog.status.setText("cancelling…")
            self.window.show_message("Cancelling the export…", "export")

    def _export_progressed(self, dialog: ExportDialog, done: int, total: int, what: str) -> None:
        dialog.show_progress(done, total, what)
        self.window.show_message(f"Exporting {dialog.run_dir.name} ({done}/{total}): {what}", "export")

    def _export_done(self, dialog: ExportDialog, job: ExportJob, ok: bool, message: str) -> None:
        name = dialog.run_dir.name
        if ok:
            labels = {kind.flag: kind.label for kind in KINDS}
            made = "; ".join(f"{labels[flag]}: {out}" for flag, out in job.outputs.items())
            if "--checkpoint" in job.command:
                made = f"{job.command[job.command.index('--checkpoint') + 1]}: {made}"
            dialog.show_result(True, f"Exported {made}", list(job.outputs.values()))
            self.window.show_message(f"Exported {name}: {made}", "export")
        else:
            dialog.show_result(False, message, [])
            self.window.show_message(f"Export of {name} {'cancelled' if job.cancelled else 'failed'}: {message}",
                              "export" if job.cancelled else "error")
