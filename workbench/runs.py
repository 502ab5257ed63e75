"""The runs folder: a summary of each run for the runs list, whether a `running` run's
engine is still alive, and which preset fields differ between runs. No Qt.

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
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from engine import rundir

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

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
_BAR = re.compile(r"\|[█▉▊▋▌▍▎▏ #]*\|")


def clean_output(text: str) -> str:
    """Terminal output as a person would have read it: ANSI escapes removed, and of a
    line redrawn with carriage returns (a progress bar) only its last state, with the
    bar's blocks left out; repeated lines once.

    >>> clean_output("\\rLoading weights:   0%|          | 0/52\\rLoading weights: 100%|\\u2588\\u2588| 52/52\\n\\x1b[31mboom\\x1b[0m\\nboom\\n")
    'Loading weights: 100% 52/52\\nboom'
    """
    lines: list[str] = []
    for line in _ANSI.sub("", text).replace("\r\n", "\n").split("\n"):
        if "\r" in line:  # a progress line: its last state, without the bar
            parts = [p for p in line.split("\r") if p.strip()]
            line = re.sub(r"  +", " ", _BAR.sub(" ", parts[-1] if parts else ""))
        line = line.replace("\x08", "").rstrip()
        if line.strip() and (not lines or lines[-1] != line):
            lines.append(line)
    return "\n".join(lines)


def output_excerpt(run_dir: Path, lines: int = 12, max_bytes: int = 8000) -> str:
    """The end of what the engine printed (the workbench's capture), cleaned."""
    path = workbench_dir(run_dir) / OUTPUT_FILE
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = clean_output(data.decode("utf-8", "replace"))
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------- status


_KILL_SIGNALS = {9, 15, 2, 1}  # SIGKILL, SIGTERM, SIGINT, SIGHUP: someone ended it (a crash is another signal)


def judge_status(events_status: str, has_events: bool, alive: bool | None, last_event_age: float | None,
                 exit: dict | None = None) -> tuple[str, str]:
    """(status, note): the one status of a run, shown alike by the run header, the runs
    list and a comparison.

    events_status is rundir.run_status of the events (running/done/stopped/failed); a
    run whose events end in running is checked against its process (`alive`, None when
    unknown) and how it ended (`exit`, the window's exit record, if any). A run whose
    engine ended without a final event is `killed` when a signal ended it (the Kill
    button, kill -9), else `interrupted`; `failed` when it ended before its first event.

    >>> judge_status("running", True, False, 5.0)[0]
    'interrupted'
    >>> judge_status("running", True, False, 5.0, {"code": -9})[0]
    'killed'
    >>> judge_status("running", True, None, 3600.0)[0]
    'stale'
    """
    if has_events and events_status != "running":
        return events_status, ""
    if alive is True:
        return ("running", "") if has_events else ("starting", "the engine is loading the model")
    if alive is False or exit is not None:
        code = exit.get("code") if exit else None
        killed = bool(exit and (exit.get("killed") or (isinstance(code, int) and -code in _KILL_SIGNALS)))
        how = describe_exit(code, bool(exit and exit.get("killed"))) if exit else None
        if killed:
            lost = ("; the step in progress was lost (rl-engine resume continues from the last checkpoint, if any)"
                    if has_events else "")
            return "killed", f"the engine {how} before it wrote a final event{lost}"
        if not has_events:
            return "failed", (f"the engine {how} before the run started" if how else
                              "the engine exited before the run started") + "; its output is in the Log tab"
        return "interrupted", (f"the engine {how} without writing run_finished or run_failed; "
                               if how else "the engine process ended without writing run_finished or run_failed "
                               "(killed, or the machine went down); ") + "engine.log may say more"
    if not has_events:
        return "starting", ""
    if last_event_age is not None and last_event_age > STALE_AFTER_S:
        return "stale", (f"no event for {int(last_event_age // 60)} min and no process id: the engine "
                         "may have died without a final event, or a step is very slow")
    return "running", ""


def describe_run(run_dir: Path, events_status: str, has_events: bool, last_event_age: float | None,
                 started: dict | None = None, alive: bool | None = None) -> tuple[str, str]:
    """judge_status for a run directory: its engine found from the events or the process
    record (`alive` given by a window that holds the process itself), its exit record,
    and, for an engine that failed without an event, the end of what it printed."""
    ref = find_engine(run_dir, started)
    if alive is None and ref is not None:
        alive = ref.alive()
    exit = read_exit_record(run_dir, ref.pid if ref is not None else None) if alive is not True else None
    status, note = judge_status(events_status, has_events, alive, last_event_age, exit)
    if status in ("failed", "interrupted") and not (has_events and events_status != "running"):
        excerpt = output_excerpt(run_dir)
        if excerpt:
            note = f"{note}\n{excerpt}"
    return status, note


# --------------------------------------------------------------------- summaries


@dataclass
class RunSummary:
    """One row of the runs list."""

    path: Path
    name: str
    algorithm: str = ""
    model: str = ""
    status: str = "starting"
    note: str = ""
    step: int = 0
    max_steps: int | None = None
    last_reward: float | None = None
    started: float | None = None  # Unix time of run_started
    preset: dict | None = None


_TAIL_BYTES = 256 * 1024


def summarize_run(run_dir: Path, now: float | None = None) -> RunSummary | None:
    """Summary of a run directory, reading only its first event and its last 256 KB (a
    10,000-step run lists as fast as a short one). None when the folder is not a run."""
    run_dir = Path(run_dir)
    events_path = run_dir / rundir.EVENTS_FILE
    has_preset = (run_dir / rundir.PRESET_FILE).exists()
    if not events_path.exists() and not has_preset and not workbench_dir(run_dir).is_dir():
        return None
    now = time.time() if now is None else now
    summary = RunSummary(path=run_dir, name=run_dir.name)
    size = events_path.stat().st_size if events_path.exists() else 0
    first = rundir.read_first_record(events_path) if size else None
    tail = rundir.read_jsonl_tail(events_path, _TAIL_BYTES) if size else []
    if first and first.get("type") in ("run_started", "run_resumed"):
        summary.started = first.get("time")
        summary.preset = first.get("preset") if isinstance(first.get("preset"), dict) else None
        summary.algorithm = str(first.get("algorithm") or "")
        summary.model = str((first.get("model") or {}).get("name_or_path") or "")
        summary.max_steps = first.get("max_steps")
    if summary.preset is None:
        for path in (run_dir / rundir.PRESET_FILE, workbench_dir(run_dir) / LAUNCH_PRESET):
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(data, dict):
                summary.preset = data
                break
    preset = summary.preset or {}
    summary.algorithm = summary.algorithm or str((preset.get("algorithm") or {}).get("name") or "")
    summary.model = summary.model or str((preset.get("model") or {}).get("name_or_path") or "")
    if summary.max_steps is None:
        summary.max_steps = (preset.get("training") or {}).get("max_steps")
    # Lifecycle events only ever come after the last run_started in the file, and one is
    # at most a resume away, so the tail holds the last one unless the run is still in
    # its first (running) life, which is what "none found" then means.
    lifecycle = [e for e in tail if e.get("type") in rundir.LIFECYCLE_EVENTS]
    events_status = rundir.run_status(lifecycle)
    for event in reversed(tail):
        if event.get("type") == "metrics" and summary.last_reward is None and isinstance(event.get("reward"), (int, float)):
            summary.last_reward = float(event["reward"])
        if isinstance(event.get("step"), int) and not summary.step:
            summary.step = event["step"]
    if lifecycle and lifecycle[-1].get("type") == "run_failed":
        summary.note = str(lifecycle[-1].get("message", ""))
    last_time = tail[-1].get("time") if tail else None
    age = now - last_time if isinstance(last_time, (int, float)) else None
    started = None
    for event in [first or {}] + tail:
        if event.get("type") in ("run_started", "run_resumed"):
            started = event
    status, note = describe_run(run_dir, events_status, bool(size), age, started=started)
    summary.status, summary.note = status, note or summary.note
    if summary.started is None:
        summary.started = (read_process_record(run_dir) or {}).get("started") or run_dir.stat().st_mtime
    return summary


class RunIndex:
    """Summaries of every run in a folder, re-read only for runs whose events changed
    (the runs list refreshes on a timer)."""

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)
        self._cache: dict[Path, tuple[tuple, RunSummary]] = {}

    def _stamp(self, run_dir: Path) -> tuple:
        stamps = []
        for path in (run_dir / rundir.EVENTS_FILE, workbench_dir(run_dir) / PROCESS_FILE,
                     workbench_dir(run_dir) / EXIT_FILE):
            try:
                st = path.stat()
                stamps.append((st.st_size, st.st_mtime_ns))
            except OSError:
                stamps.append(None)
        return tuple(stamps)

    def scan(self) -> list[RunSummary]:
        """Every run, newest first. A `running` summary is always re-judged (its process
        may have died, or it may have gone stale, without its files changing)."""
        try:
            folders = [p for p in self.folder.iterdir() if p.is_dir()]
        except OSError:
            return []
        found = []
        for folder in folders:
            stamp = self._stamp(folder)
            hit = self._cache.get(folder)
            if hit is None or hit[0] != stamp or hit[1].status in ("running", "starting", "stale"):
                summary = summarize_run(folder)
                if summary is None:
                    continue
                self._cache[folder] = (stamp, summary)
            found.append(self._cache[folder][1])
        found.sort(key=lambda s: s.started or 0, reverse=True)
        return found


# ------------------------------------------------------------------- comparing


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaf values. Lists of mappings with a unique `name` (reward
    components) are keyed by name, so runs with components in another order compare
    field by field.

    >>> flatten({"a": {"b": 1}, "rewards": [{"name": "x", "weight": 2}]})
    {'a.b': 1, 'rewards.x.weight': 2}
    """
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        if not value and prefix:
            out[prefix] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value) \
            and len({v["name"] for v in value}) == len(value):
        for item in value:
            rest = {k: v for k, v in item.items() if k != "name"}
            key = f"{prefix}.{item['name']}"
            out.update(flatten(rest, key) if rest else {key: "(on)"})
    else:
        out[prefix] = value
    return out


MISSING = "—"


def differing_fields(presets: list[dict]) -> list[tuple[str, list[Any]]]:
    """(field path, value in each preset) for every field that is not the same in all of
    them; a field one preset lacks shows as "—" there.

    >>> differing_fields([{"a": 1, "b": 2}, {"a": 1, "b": 3}])
    [('b', [2, 3])]
    """
    flat = [flatten(p or {}) for p in presets]
    keys: list[str] = []
    for f in flat:
        keys.extend(k for k in f if k not in keys)
    rows = []
    for key in keys:
        values = [f.get(key, MISSING) for f in flat]
        if any(v != values[0] for v in values[1:]):
            rows.append((key, values))
    return rows
