"""A run's engine process: the workbench's folder in a run directory, the process
record, whether a `running` run's engine is still alive, and exit records. No Qt.

A run the workbench launched has a `workbench/` folder inside its run directory (the
engine never reads it): the preset as launched, the engine's stdout/stderr and
`process.json` with the engine's process id. The process id is how a window opened
later tells a run that is still training from one whose engine died without writing
run_finished or run_failed. For a run started headless (no process.json) the age of
its last event is all there is, and the list says so.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

WORKBENCH_DIR = "workbench"
PROCESS_FILE = "process.json"
OUTPUT_FILE = "engine-output.log"
LAUNCH_PRESET = "preset.yaml"

# A headless run with no event for this long is shown as `stale`: it may still be
# training a slow step, or its engine may be gone; nothing in the run directory says.
STALE_AFTER_S = 15 * 60

STATUSES = ("starting", "running", "done", "stopped", "failed", "killed", "interrupted", "stale")


def workbench_dir(run_dir: Path) -> Path:
    return Path(run_dir) / WORKBENCH_DIR


def write_process_record(run_dir: Path, pid: int, command: list[str]) -> None:
    folder = workbench_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    record = {"pid": pid, "command": command, "started": time.time(), "host": os.uname().nodename
              if hasattr(os, "uname") else ""}
    (folder / PROCESS_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")


def read_process_record(run_dir: Path) -> dict | None:
    try:
        record = json.loads((workbench_dir(run_dir) / PROCESS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("pid"), int) else None


def _process_start_time(pid: int) -> float | None:
    """When process `pid` started (Unix time, to a second), from /proc; None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22, starttime, in clock ticks since boot
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration, AttributeError):
        return None


def pid_alive(pid: int, expect_in_cmdline: str | None = None, started_by: float | None = None) -> bool:
    """Whether process `pid` exists (and, where /proc says, is still the one whose
    command line names `expect_in_cmdline` and that had started by the Unix time
    `started_by`, so a reused pid does not count)."""
    if pid <= 0:
        return False
    if sys.platform == "win32":  # pragma: no cover - no os.kill(pid, 0) there
        import ctypes

        handle = ctypes.windll.kernel32.OpenProcess(0x1000, False, pid)
        if handle:
            ctypes.windll.kernel32.CloseHandle(handle)
        return bool(handle)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: alive, but this window cannot signal it
    cmdline = Path(f"/proc/{pid}/cmdline")
    if expect_in_cmdline and cmdline.exists():
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            return True
        if expect_in_cmdline not in text:
            return False
        # A zombie (exited, not yet reaped by its parent) is not training.
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return False
    if started_by is not None:
        began = _process_start_time(pid)
        if began is not None and began > started_by + 2.0:
            return False  # a newer process with a recycled pid
    return True


def can_signal(pid: int) -> bool:
    """Whether this user may send signals to process `pid` (it exists and is ours)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


@dataclass
class EngineRef:
    """The engine process of a run, as the run directory names it: the pid in the last
    run_started / run_resumed event (every engine writes it, however it was started),
    else the workbench's process record (an engine still loading its model)."""

    pid: int
    expect: str  # text its command line must contain
    started_by: float | None  # it had started by then (a later process reused the pid)
    launched_here: bool  # the workbench launched it (a process record names the same pid)

    def alive(self) -> bool:
        return pid_alive(self.pid, self.expect, self.started_by)


def find_engine(run_dir: Path, started: dict | None = None) -> EngineRef | None:
    """The engine of a run (see EngineRef); None when nothing names one (a run started
    by an engine too old to log its pid, and not from a window)."""
    record = read_process_record(run_dir)
    pid = started.get("pid") if isinstance(started, dict) else None
    if isinstance(pid, int) and not isinstance(pid, bool):
        when = started.get("time")
        launched = bool(record and record["pid"] == pid)
        return EngineRef(pid, str(Path(run_dir).name) if launched else "engine",
                         float(when) if isinstance(when, (int, float)) else None, launched)
    if record is not None:
        return EngineRef(record["pid"], str(Path(run_dir).name), None, True)
    return None


def engine_alive(run_dir: Path, started: dict | None = None) -> bool | None:
    """True / False when the run directory names its engine process (find_engine),
    None when it does not."""
    ref = find_engine(run_dir, started)
    return None if ref is None else ref.alive()


# ------------------------------------------------------------------ exit records

EXIT_FILE = "exit.json"


def write_exit_record(run_dir: Path, pid: int | None, code: int | None, killed: bool = False) -> None:
    """What the window saw of its engine's end: the exit code (negative: the signal that
    ended it), and whether its Kill button did it. Read by every window and the runs list,
    so a run has one status everywhere."""
    folder = workbench_dir(run_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        record = {"pid": pid, "code": code, "killed": killed, "time": time.time()}
        (folder / EXIT_FILE).write_text(json.dumps(record), encoding="utf-8")
    except OSError:
        pass


def read_exit_record(run_dir: Path, pid: int | None = None) -> dict | None:
    """The exit record, if there is one for process `pid` (any pid when None)."""
    try:
        record = json.loads((workbench_dir(run_dir) / EXIT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or (pid is not None and record.get("pid") != pid):
        return None
    return record


def describe_exit(code: int | None, killed: bool = False) -> str:
    """How a process ended, in words.

    >>> describe_exit(0), describe_exit(2), describe_exit(-9)
    ('exited normally (code 0)', 'exited with code 2', 'was killed by signal SIGKILL')
    >>> describe_exit(None)
    'ended (its exit code is unknown: this window did not start it)'
    """
    if code is None:
        return "was killed (SIGKILL)" if killed else "ended (its exit code is unknown: this window did not start it)"
    if code == 0:
        return "exited normally (code 0)"
    if code < 0:
        import signal as _signal

        try:
            name = _signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"was killed by signal {name}"
    return f"exited with code {code}"


# ------------------------------------------------------------- engine output
