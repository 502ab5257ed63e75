"""Starting, stopping and watching the engine process.

The engine runs as `python -m engine run PRESET --run-dir DIR --quiet`, a separate
process: a crash or a hang in training never takes the window with it. With Processes
above 1 (the set-up form's launch controls) the command adds `--nproc-per-node N` (and
`--gpus LIST`): that engine process is a launcher that starts N workers under torchrun
and passes the stop line and SIGTERM on to them, so Stop works the same.

Why subprocess.Popen and not QProcess: QProcess kills its child when the QProcess is
destroyed, so a run the user chose to leave running when closing the window would die
with it. A Popen child in its own session outlives the window. The window never waits
on it: exit is noticed by polling on a timer, and the only thing written to it is the
five-byte stop line.

Stop is the engine's cooperative stop: the `stop` line on stdin (the step finishes, a
checkpoint is saved, run_finished with status stopped). Only if the engine has not
exited `stop_timeout_s` later is it sent SIGTERM, and `kill_timeout_s` after that,
SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from workbench.runs.process import (OUTPUT_FILE, EngineRef, pid_alive, workbench_dir, write_exit_record,
                                    write_process_record)
from workbench.setup.checks import REPO_ROOT


def engine_environment() -> dict[str, str]:
    env = dict(os.environ)
    # The engine must be importable even when the package is not installed (a checkout).
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def engine_command(preset_path: Path, run_dir: Path, python: str | None = None, processes: int = 1,
                   gpus: str = "") -> list[str]:
    """The engine's command line. `processes` above 1: `--nproc-per-node N`, and `--gpus
    LIST` when `gpus` names some; 1 gives the single-process command, with no new flag."""
    command = [python or sys.executable, "-m", "engine", "run", str(preset_path), "--run-dir", str(run_dir), "--quiet"]
    if processes > 1:
        command += ["--nproc-per-node", str(processes)]
        if gpus:
            command += ["--gpus", gpus]
    return command


def engine_fork_command(parent: Path, checkpoint: str, run_dir: Path, sets: list[str] = (),
                        python: str | None = None) -> list[str]:
    """The engine's command line for a fork of `parent` from its checkpoint `checkpoint`
    (folder name) into `run_dir`, with `--set KEY=VALUE` for each of `sets`."""
    command = [python or sys.executable, "-m", "engine", "fork", str(parent), "--checkpoint", checkpoint,
               "--run-dir", str(run_dir), "--quiet"]
    for item in sets:
        command += ["--set", item]
    return command


def engine_resume_command(run_dir: Path, python: str | None = None, processes: int = 1, gpus: str = "") -> list[str]:
    """The engine's command line to continue `run_dir` from its last complete checkpoint,
    in as many processes as the run had (the engine refuses another world size).

    >>> engine_resume_command(Path("/r/run"), "py")
    ['py', '-m', 'engine', 'resume', '/r/run', '--quiet']
    """
    command = [python or sys.executable, "-m", "engine", "resume", str(run_dir), "--quiet"]
    if processes > 1:
        command += ["--nproc-per-node", str(processes)]
        if gpus:
            command += ["--gpus", gpus]
    return command


def launch_of(command: list) -> tuple[int, str]:
    """(processes, gpus) of an engine command line the window launched (its process
    record): what a resume must launch again.

    >>> launch_of(["py", "-m", "engine", "run", "p.yaml", "--nproc-per-node", "2", "--gpus", "0,1"])
    (2, '0,1')
    >>> launch_of([])
    (1, '')
    """
    def after(flag: str) -> str:
        return str(command[command.index(flag) + 1]) if flag in command[:-1] else ""

    count = after("--nproc-per-node")
    return (int(count) if count.isdigit() else 1), after("--gpus")


class EngineHandle(QObject):
    """What the window needs of a running engine, launched here or found running.

    Signals: `finished(exit_code)` (None when unknown: an engine this window did not
    start and did not kill; -9 when Kill ended it), `stopping()` when a stop was
    requested, `escalated(str)` when Stop had to terminate or kill.

    When the engine ends, an exit record goes into the run folder (write_exit_record),
    so every window and the runs list tell a killed run the same way.
    """

    finished = Signal(object)
    stopping = Signal()
    escalated = Signal(str)

    POLL_MS = 250

    def __init__(self, run_dir: Path, stop_timeout_s: float = 120.0, kill_timeout_s: float = 10.0, parent=None):
        super().__init__(parent)
        self.run_dir = Path(run_dir)
        self.stop_timeout_s = stop_timeout_s
        self.kill_timeout_s = kill_timeout_s
        self.exit_code: object = None
        self.stop_requested = False
        self._done = False
        self._poll = QTimer(self)
        self._poll.setInterval(self.POLL_MS)
        self._poll.timeout.connect(self.poll)
        self._escalate = QTimer(self)
        self._escalate.setSingleShot(True)
        self._escalate.timeout.connect(self._on_escalate)
        self._stage = 0
        self.killed = False  # Kill was pressed (or Stop escalated to SIGKILL)

    pid: int | None = None

    @property
    def running(self) -> bool:
        return not self._done

    def poll(self) -> None:
        if self._done:
            return
        code = self._check_exit()
        if code is not _RUNNING:
            self._done = True
            if code is None and self.killed and hasattr(signal, "SIGKILL"):
                code = -int(signal.SIGKILL)  # not our child, but our SIGKILL ended it
            self.exit_code = code
            write_exit_record(self.run_dir, self.pid, code, killed=self.killed)
            self._poll.stop()
            self._escalate.stop()
            self.finished.emit(code)

    def stop(self) -> None:
        """Ask the engine to stop after its current step (it saves a checkpoint)."""
        if self._done or self.stop_requested:
            return
        self.stop_requested = True
        self._request_stop()
        self.stopping.emit()
        self._stage = 0
        self._escalate.start(int(self.stop_timeout_s * 1000))

    def kill(self) -> None:
        """Kill at once (the step in progress and anything unsaved are lost)."""
        if not self._done:
            self.killed = True
            self._signal(signal.SIGKILL if hasattr(signal, "SIGKILL") else signal.SIGTERM)
            self.escalated.emit("killed (SIGKILL): the step in progress is lost")

    def _on_escalate(self) -> None:
        if self._done:
            return
        if self._stage == 0:
            self._stage = 1
            self._signal(signal.SIGTERM)
            self.escalated.emit(f"the engine had not stopped {self.stop_timeout_s:.0f} s after the stop request; "
                                "sent SIGTERM")
            self._escalate.start(int(self.kill_timeout_s * 1000))
        else:
            self.kill()

    # implemented by the two kinds of handle
    def _check_exit(self) -> object: ...
    def _request_stop(self) -> None: ...
    def _signal(self, sig: int) -> None: ...


_RUNNING = object()


class EngineProcess(EngineHandle):
    """An engine this window starts (and can leave running when it closes)."""

    def __init__(self, run_dir: Path, preset_path: Path, python: str | None = None, env: dict | None = None,
                 stop_timeout_s: float = 120.0, kill_timeout_s: float = 10.0, parent=None, processes: int = 1,
                 gpus: str = "", command: list[str] | None = None):
        super().__init__(run_dir, stop_timeout_s, kill_timeout_s, parent)
        self.preset_path = Path(preset_path)
        self.processes = processes
        # `command`: another engine command than `run` (a fork: engine_fork_command).
        self.command = command or engine_command(self.preset_path, self.run_dir, python, processes, gpus)
        self.env = dict(env or engine_environment())
        if gpus and processes <= 1:
            # One process takes no --gpus (the command stays as it always was): the same
            # choice of GPUs through the environment.
            self.env["CUDA_VISIBLE_DEVICES"] = gpus
        self.popen: subprocess.Popen | None = None
        self.started_at: float | None = None  # when start() launched it (Unix time)
        self.resuming = False  # a resume: the run's events until its run_resumed are the last attempt's

    @property
    def output_path(self) -> Path:
        return workbench_dir(self.run_dir) / OUTPUT_FILE

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self) -> None:
        """Start the engine. Raises OSError when it cannot be started at all."""
        workbench_dir(self.run_dir).mkdir(parents=True, exist_ok=True)
        # stdout/stderr go to a file, not a pipe: a pipe nobody reads would block the
        # engine, and would break (SIGPIPE) once the window is closed on a live run.
        with open(self.output_path, "ab") as output:
            kwargs: dict = {}
            if sys.platform == "win32":  # pragma: no cover
                kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP
            else:
                # Its own session: Ctrl-C in the terminal that started the window, or the
                # terminal closing, does not reach a run left running.
                kwargs["start_new_session"] = True
            self.popen = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT,
                                          cwd=str(self.run_dir), env=self.env, **kwargs)
        self.started_at = time.time()
        write_process_record(self.run_dir, self.popen.pid, self.command)
        self._poll.start()

    def _check_exit(self) -> object:
        if self.popen is None:
            return None
        code = self.popen.poll()
        return _RUNNING if code is None else code

    def _request_stop(self) -> None:
        try:
            self.popen.stdin.write(b"stop\n")
            self.popen.stdin.flush()
        except (OSError, ValueError, AttributeError):
            # stdin gone (the engine is exiting anyway): SIGTERM is the same request.
            self._signal(signal.SIGTERM)

    def _signal(self, sig: int) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        try:
            if sig == signal.SIGTERM:
                self.popen.terminate()
            else:
                self.popen.kill()
        except OSError:
            pass

    def detach(self) -> None:
        """Leave the engine running on its own (the window is closing). Closing stdin
        is harmless: the engine's stop reader just ends."""
        self._poll.stop()
        self._escalate.stop()
        if self.popen is not None and self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass


class AttachedEngine(EngineHandle):
    """An engine found running from its run directory (find_engine: the pid its
    run_started event logs, or the process record of the window that launched it): a
    run left running by an earlier window, or one started with `rl-engine run` in a
    terminal. It has no stdin pipe here; SIGTERM is the engine's other graceful stop
    request (it finishes the step and saves a checkpoint), SIGKILL is Kill."""

    def __init__(self, run_dir: Path, pid: int, stop_timeout_s: float = 120.0, kill_timeout_s: float = 10.0,
                 parent=None, expect: str | None = None, started_by: float | None = None,
                 launched_here: bool = True):
        super().__init__(run_dir, stop_timeout_s, kill_timeout_s, parent)
        self.pid = pid
        self.expect = expect if expect is not None else self.run_dir.name
        self.started_by = started_by
        self.launched_here = launched_here
        self._poll.start()

    @classmethod
    def from_ref(cls, run_dir: Path, ref: "EngineRef", stop_timeout_s: float = 120.0,
                 parent=None) -> "AttachedEngine":
        return cls(run_dir, ref.pid, stop_timeout_s, parent=parent, expect=ref.expect, started_by=ref.started_by,
                   launched_here=ref.launched_here)

    def _check_exit(self) -> object:
        return _RUNNING if pid_alive(self.pid, self.expect, self.started_by) else None

    def _request_stop(self) -> None:
        self._signal(signal.SIGTERM)

    def _signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except OSError:
            pass

    def detach(self) -> None:
        self._poll.stop()
        self._escalate.stop()
