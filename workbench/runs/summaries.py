"""Summaries of the runs folder for the runs list: each run's label (labels.py), status,
steps, time and held-out accuracy. No Qt."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from engine.run import rundir
from workbench.runs.labels import RunLabel, label_of
from workbench.runs.lineage import Stage, family_text, pipeline_tooltip, stages_of
from workbench.runs.process import EXIT_FILE, LAUNCH_PRESET, PROCESS_FILE, read_process_record, workbench_dir
from workbench.runs.status import describe_run


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
    parent: dict | None = None  # a fork's: run_started's `parent` {run, checkpoint, step}
    forks: int = 0  # runs of the same folder forked from this one
    lineage: list[Stage] = field(default_factory=list)  # run_started's `lineage` (lineage.py)
    used_by: int = 0  # runs of the same folder whose lineage names this one
    label: RunLabel | None = None  # what the run is called (labels.py): its preset and what differs
    accuracy: tuple[float | None, float | None] = (None, None)  # held-out accuracy: first and last evaluation
    seconds: float | None = None  # from its first event to its last

    @property
    def title(self) -> str:
        return self.label.text if self.label is not None else self.name

    @property
    def family(self) -> str:
        """"fork of NAME @ step N", "from SFT-RUN · RM RM-RUN", "2 forks", "used by 1
        run", some of them, or ""."""
        parts = [fork_label(self.parent)] if self.parent else []
        if self.lineage:
            parts.append(family_text(self.lineage))
        if self.forks:
            parts.append(f"{self.forks} fork{'s' if self.forks > 1 else ''}")
        if self.used_by:
            parts.append(f"used by {self.used_by} run{'s' if self.used_by > 1 else ''}")
        return "; ".join(parts)

    @property
    def family_tooltip(self) -> str:
        """The family spelled out: the fork's parent and checkpoint, the whole pipeline
        with its folders and checkpoints."""
        lines = [f"forked from {self.parent.get('run')} at {self.parent.get('checkpoint')}"] if self.parent else []
        if self.lineage:
            lines.append(pipeline_tooltip(self.lineage, self.algorithm, self.name))
        return "\n".join(lines)


def fork_label(parent: dict | None) -> str:
    """How the runs list names a fork's origin.

    >>> fork_label({"run": "/runs/grpo-sort-20260101-000000", "checkpoint": "step_000050", "step": 50})
    'fork of grpo-sort-20260101-000000 @ step 50'
    """
    if not isinstance(parent, dict) or not parent.get("run"):
        return ""
    return f"fork of {Path(str(parent['run'])).name} @ step {parent.get('step', '?')}"


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
    first_eval = _first_eval(events_path) if size else None
    if first and first.get("type") in ("run_started", "run_resumed"):
        summary.started = first.get("time")
        summary.preset = first.get("preset") if isinstance(first.get("preset"), dict) else None
        summary.algorithm = str(first.get("algorithm") or "")
        summary.model = str((first.get("model") or {}).get("name_or_path") or "")
        summary.max_steps = first.get("max_steps")
        summary.parent = first.get("parent") if isinstance(first.get("parent"), dict) else None
        summary.lineage = stages_of(first.get("lineage"))
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
        if event.get("type") == "metrics" and summary.last_reward is None \
                and isinstance(event.get("reward"), (int, float)):
            summary.last_reward = float(event["reward"])
        if isinstance(event.get("step"), int) and not summary.step:
            summary.step = event["step"]
    last_eval = next((e for e in reversed(tail) if e.get("type") == "eval" and _number(e.get("accuracy"))), None)
    summary.accuracy = (_number((first_eval or {}).get("accuracy")), _number((last_eval or {}).get("accuracy")))
    first_time, last_time = (first or {}).get("time"), tail[-1].get("time") if tail else None
    if _number(first_time) is not None and _number(last_time) is not None:
        summary.seconds = max(0.0, float(last_time) - float(first_time))
    summary.label = label_of(run_dir, summary.preset)
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


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _first_eval(events_path: Path, lines: int = 6, max_bytes: int = 4 << 20) -> dict | None:
    """The run's first `eval` event (its step-0 evaluation comes right after run_started),
    read from the head of events.jsonl: a few lines, never the whole file."""
    try:
        with open(events_path, "rb") as f:
            for _ in range(lines):
                line = f.readline(max_bytes)
                if not line.endswith(b"\n"):
                    return None
                if b'"eval"' not in line:
                    continue
                event = rundir.parse_lines([line])[0]
                if isinstance(event, dict) and event.get("type") == "eval" \
                        and _number(event.get("accuracy")) is not None:
                    return event
    except OSError:
        return None
    return None


def run_stamp(run_dir: Path) -> tuple:
    """What says a run changed: the sizes and times of its events, process record and exit
    record (a summary is read again when its stamp differs)."""
    stamps, own = [], workbench_dir(run_dir)
    for path in (run_dir / rundir.EVENTS_FILE, own / PROCESS_FILE, own / EXIT_FILE):
        try:
            st = path.stat()
            stamps.append((st.st_size, st.st_mtime_ns))
        except OSError:
            stamps.append(None)
    return tuple(stamps)


def read_runs(folders: list[Path], stop: Callable[[], bool] = lambda: False) -> dict[Path, tuple]:
    """folder -> (stamp, summary or None: not a run) for each folder, until `stop()` is
    true. It touches no index, so a worker thread may run it (RunIndex.add takes the
    result); a folder that cannot be read is left out (the next scan reads it again)."""
    found = {}
    for folder in folders:
        if stop():
            break
        try:
            stamp = run_stamp(folder)  # before the summary: a change while reading is read next time
            found[folder] = (stamp, summarize_run(folder))
        except OSError:
            continue
    return found


class RunIndex:
    """Summaries of every run in a folder, re-read only for runs whose events changed
    (the runs list refreshes on a timer). Not thread-safe: one thread scans it; the window
    reads many new runs with `read_runs` on a worker and `add`s them."""

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)
        self._cache: dict[Path, tuple[tuple, RunSummary]] = {}
        self._not_runs: set[Path] = set()  # folders found not to be runs (cheap to look at again)
        self._resolved: dict[Path, Path] = {}  # path -> path.resolve() (half a scan of read runs, uncached)

    def folders(self) -> list[Path]:
        """The folder's sub-folders, each a run or not."""
        try:
            return [p for p in self.folder.iterdir() if p.is_dir()]
        except OSError:
            return []

    def unread(self) -> list[Path]:
        """The sub-folders a scan would read for the first time (~3-10 ms a run: its
        events' head and tail): all of them on the first scan, new runs after."""
        return [p for p in self.folders() if p not in self._cache and p not in self._not_runs]

    def add(self, found: dict[Path, tuple]) -> None:
        """`read_runs`' result into the cache; a summary cached meanwhile is newer and stays."""
        for folder, (stamp, summary) in found.items():
            if summary is None:
                self._not_runs.add(folder)
            else:
                self._cache.setdefault(folder, (stamp, summary))

    def scan(self) -> list[RunSummary]:
        """Every run, newest first. A `running` summary is always re-judged (its process
        may have died, or it may have gone stale, without its files changing)."""
        found = []
        for folder in self.folders():
            stamp = run_stamp(folder)
            hit = self._cache.get(folder)
            if hit is None or hit[0] != stamp or hit[1].status in ("running", "starting", "stale"):
                summary = summarize_run(folder)
                if summary is None:
                    self._not_runs.add(folder)
                    self._cache.pop(folder, None)
                    continue
                self._not_runs.discard(folder)
                self._cache[folder] = (stamp, summary)
            found.append(self._cache[folder][1])
        found.sort(key=lambda s: s.started or 0, reverse=True)
        by_path = {self._resolve(s.path): s for s in found}
        for summary in found:
            summary.forks = summary.used_by = 0
        for summary in found:
            parent = by_path.get(self._resolve(Path(str(summary.parent["run"])))) if summary.parent else None
            if parent is not None:
                parent.forks += 1
            for path in {self._resolve(stage.run) for stage in summary.lineage} & by_path.keys():
                by_path[path].used_by += 1
        return found

    def _resolve(self, path: Path) -> Path:
        if path not in self._resolved:
            self._resolved[path] = path.resolve()
        return self._resolved[path]
