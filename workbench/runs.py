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

STATUSES = ("starting", "running", "done", "stopped", "failed", "interrupted", "stale")


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


def pid_alive(pid: int, expect_in_cmdline: str | None = None) -> bool:
    """Whether process `pid` exists (and, where /proc says, is still the one whose
    command line names `expect_in_cmdline`, so a reused pid does not count)."""
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
        return True
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
        return state != "Z"
    return True


def engine_alive(run_dir: Path) -> bool | None:
    """True / False when the workbench launched this run (it knows the process), None
    for a run started elsewhere."""
    record = read_process_record(run_dir)
    if record is None:
        return None
    return pid_alive(record["pid"], str(Path(run_dir).name))


def judge_status(events_status: str, has_events: bool, alive: bool | None, last_event_age: float | None) -> tuple[str, str]:
    """(status, note) for the runs list and the run header.

    events_status is rundir.run_status of the events (running/done/stopped/failed); a
    run whose events end in running is checked against its process.

    >>> judge_status("running", True, False, 5.0)[0]
    'interrupted'
    >>> judge_status("running", True, None, 3600.0)[0]
    'stale'
    """
    if has_events and events_status != "running":
        return events_status, ""
    if alive is True:
        return ("running", "") if has_events else ("starting", "the engine is loading the model")
    if alive is False:
        if not has_events:
            return "failed", "the engine exited before the run started; its output is in the Log tab"
        return "interrupted", ("the engine process ended without writing run_finished or run_failed "
                               "(killed, or the machine went down); engine.log may say more")
    if not has_events:
        return "starting", ""
    if last_event_age is not None and last_event_age > STALE_AFTER_S:
        return "stale", (f"no event for {int(last_event_age // 60)} min and no process record: the engine "
                         "may have died without a final event, or a step is very slow")
    return "running", ""


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


def _first_line(path: Path) -> dict | None:
    try:
        with open(path, "rb") as f:
            line = f.readline()
    except OSError:
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _tail_events(path: Path, size: int) -> list[dict]:
    """Complete events in the last _TAIL_BYTES of the file (the first, cut line skipped)."""
    start = max(0, size - _TAIL_BYTES)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    if start:
        data = data[data.find(b"\n") + 1:]
    out = []
    for line in data.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


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
    first = _first_line(events_path) if size else None
    tail = _tail_events(events_path, size) if size else []
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
    lifecycle = [e for e in tail if e.get("type") in ("run_started", "run_resumed", "run_finished", "run_failed")]
    events_status = rundir.run_status(lifecycle) if lifecycle else "running"
    for event in reversed(tail):
        if event.get("type") == "metrics" and summary.last_reward is None and isinstance(event.get("reward"), (int, float)):
            summary.last_reward = float(event["reward"])
        if isinstance(event.get("step"), int) and not summary.step:
            summary.step = event["step"]
    if lifecycle and lifecycle[-1].get("type") == "run_failed":
        summary.note = str(lifecycle[-1].get("message", ""))
    last_time = tail[-1].get("time") if tail else None
    age = now - last_time if isinstance(last_time, (int, float)) else None
    status, note = judge_status(events_status, bool(size), engine_alive(run_dir), age)
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
        for path in (run_dir / rundir.EVENTS_FILE, workbench_dir(run_dir) / PROCESS_FILE):
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
