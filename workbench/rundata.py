"""One run, as read from its run directory: metric columns, evaluations, sampled
generations and lifecycle. No Qt: the dashboard, samples table and runs list are views
of this model, and a live run and a past run are read the same way (tail the events).

`RunData.poll()` reads whatever was appended to events.jsonl since the last call (with
engine.rundir's reader) and returns what changed; the window calls it on a timer. When
something new arrived it emits `updated`, which the views of the run follow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from engine import rundir
from workbench.signals import Signal

# How the engine (rundir.dumps: compact separators, `type` first) starts a samples line.
_SAMPLES_PREFIX = b'{"type":"samples"'
LIFECYCLE = rundir.LIFECYCLE_EVENTS
_NOT_METRICS = {"type", "time", "step"}


class MetricTable:
    """Numeric fields of a stream of events, as growable numpy columns sharing one row
    index: `step`, `time` and one column per field name (NaN where an event lacks the
    field or logged null). Appending is amortised O(1) (capacity doubles), so curves can
    be redrawn from the arrays without copying events.

    >>> t = MetricTable()
    >>> t.append([{"step": 1, "time": 0.0, "loss": 2.0}, {"step": 2, "time": 1.0, "loss": None}])
    2
    >>> t.column("loss").tolist(), t.steps.tolist()
    ([2.0, nan], [1.0, 2.0])
    """

    def __init__(self) -> None:
        self.size = 0
        self._capacity = 0
        self._step = np.empty(0)
        self._time = np.empty(0)
        self._columns: dict[str, np.ndarray] = {}

    @property
    def steps(self) -> np.ndarray:
        return self._step[: self.size]

    @property
    def times(self) -> np.ndarray:
        return self._time[: self.size]

    def names(self) -> list[str]:
        return list(self._columns)

    def __contains__(self, name: str) -> bool:
        return name in self._columns

    def column(self, name: str) -> np.ndarray:
        """The column's values so far (a view: use it before the next append)."""
        col = self._columns.get(name)
        return col[: self.size] if col is not None else np.full(self.size, np.nan)

    def last(self, name: str) -> float | None:
        """Last finite value of a column, or None."""
        col = self.column(name)
        finite = np.flatnonzero(np.isfinite(col))
        return float(col[finite[-1]]) if finite.size else None

    def _grow(self, needed: int) -> None:
        if needed <= self._capacity:
            return
        capacity = max(256, self._capacity * 2, needed)

        def grown(array: np.ndarray) -> np.ndarray:
            out = np.full(capacity, np.nan)
            out[: self.size] = array[: self.size]
            return out

        self._step, self._time = grown(self._step), grown(self._time)
        self._columns = {k: grown(v) for k, v in self._columns.items()}
        self._capacity = capacity

    def append(self, events: list[dict]) -> int:
        """Add one row per event; fields that are not numbers (lists, text) are skipped."""
        n = len(events)
        if not n:
            return 0
        self._grow(self.size + n)
        rows = slice(self.size, self.size + n)
        self._step[rows] = _floats([e.get("step") for e in events])
        self._time[rows] = _floats([e.get("time") for e in events])
        keys: set[str] = set()
        for event in events:
            keys.update(event)
        for key in keys - _NOT_METRICS:
            values = [e.get(key) for e in events]
            column = self._columns.get(key)
            if column is None:
                # A field that is not a number (eval's list of samples, text) is not a
                # metric. One logged only as null so far (kl with beta 0) is: its plot can
                # say "no values" instead of vanishing.
                kinds = set(map(type, values))  # C speed: a 10,000-step run has 400,000 values
                if not kinds & _NUMBER_TYPES:
                    if kinds - {type(None)}:
                        continue
                elif kinds - _NUMBER_TYPES - {type(None)}:
                    values = [v if _is_number(v) else None for v in values]
                column = self._columns[key] = np.full(self._capacity, np.nan)
            column[rows] = _floats(values)
        self.size += n
        return n

    def append_columns(self, steps: list, columns: dict[str, list], times: list | None = None) -> int:
        """Add rows given column-wise (cheaper than a mapping per row)."""
        n = len(steps)
        if not n:
            return 0
        self._grow(self.size + n)
        rows = slice(self.size, self.size + n)
        self._step[rows] = _floats(steps)
        self._time[rows] = _floats(times) if times is not None else np.nan
        for key, values in columns.items():
            column = self._columns.get(key)
            if column is None:
                column = self._columns[key] = np.full(self._capacity, np.nan)
            column[rows] = _floats(values)
        self.size += n
        return n

    def truncate_after(self, step: float) -> int:
        """Drop rows with a step greater than `step` (a resumed run redoes those steps
        from its checkpoint; the new values replace the old). Returns rows dropped."""
        keep = ~(self.steps > step)
        dropped = int(self.size - keep.sum())
        if dropped:
            n = int(keep.sum())
            self._step[:n] = self.steps[keep]
            self._time[:n] = self.times[keep]
            for key, column in self._columns.items():
                column[:n] = column[: self.size][keep]
            self.size = n
        return dropped


_NUMBER_TYPES = {int, float, bool}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))  # bool included: a flag plots as 0/1


def _floats(values: list) -> np.ndarray:
    try:
        return np.array(values, dtype=float)
    except (TypeError, ValueError):
        # Something that is not a number (a string where a number was expected): show a
        # gap there rather than losing the whole batch.
        return np.array([float(v) if _is_number(v) else np.nan for v in values], dtype=float)


@dataclass
class Sample:
    """One sampled generation from a `samples` event."""

    step: int
    index: int
    group: int
    prompt: str
    completion: str
    reward: float
    rewards: dict
    advantage: float

    @property
    def key(self) -> tuple[int, int]:
        return (self.step, self.index)


def _number(value: Any) -> float:
    return float(value) if _is_number(value) else math.nan


class SampleStore:
    """Every sampled generation of a run, in arrival order, with numpy columns of the
    numbers (step, index, reward, advantage, each component) so the table can filter
    and sort 100,000 rows in milliseconds.

    `samples` events are kept unparsed until the samples are first needed: most of a
    long run's events.jsonl is generated text, and opening the run for its curves need
    not read it.
    """

    def __init__(self) -> None:
        self._pending: list = []  # raw lines (bytes) or parsed samples events, in order
        self._step: list[int] = []
        self._raw: list[dict] = []  # the sample mappings as logged
        self.components_seen: list[str] = []
        self._numbers = MetricTable()

    # ------------------------------------------------------------------ adding

    def add(self, item) -> None:
        """Queue one `samples` event (a parsed mapping, or its raw JSON line)."""
        self._pending.append(item)

    def append(self, step: int, samples: Iterable[dict]) -> int:
        """Add samples of one step now (parsed)."""
        self.add({"type": "samples", "step": step, "samples": list(samples)})
        before = len(self._raw)
        self._materialize()
        return len(self._raw) - before

    @property
    def pending_events(self) -> int:
        return len(self._pending)

    def _materialize(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        # Raw lines parsed as rundir.read_jsonl parses them (a torn line is skipped).
        lines = [i for i, item in enumerate(pending) if isinstance(item, (bytes, str))]
        parsed = rundir.parse_lines([p.encode() if isinstance(p, str) else p for p in (pending[i] for i in lines)])
        for i, event in zip(lines, parsed):
            pending[i] = event
        steps: list[int] = []
        raws: list[dict] = []
        for item in pending:
            if not isinstance(item, dict):
                continue
            step = item.get("step", 0)
            step = int(step) if isinstance(step, (int, float)) else 0
            for sample in item.get("samples") or []:
                if isinstance(sample, dict):
                    steps.append(step)
                    raws.append(sample)
        if not raws:
            return
        columns: dict[str, list] = {
            "index": [r.get("index") for r in raws],
            "reward": [r.get("reward") for r in raws],
            "advantage": [r.get("advantage") for r in raws],
        }
        for raw in raws:
            rewards = raw.get("rewards")
            if isinstance(rewards, dict):
                for name in rewards:
                    if name not in self.components_seen:
                        self.components_seen.append(name)
        for name in self.components_seen:
            columns[f"rewards/{name}"] = [r["rewards"].get(name) if isinstance(r.get("rewards"), dict) else None
                                          for r in raws]
        self._numbers.append_columns(steps, columns)
        self._step.extend(steps)
        self._raw.extend(raws)

    # ---------------------------------------------------------------- reading

    def __len__(self) -> int:
        self._materialize()
        return len(self._raw)

    @property
    def components(self) -> list[str]:
        self._materialize()
        return self.components_seen

    def row(self, i: int) -> Sample:
        self._materialize()
        raw = self._raw[i]
        rewards = raw.get("rewards")
        index, group = raw.get("index"), raw.get("group")
        return Sample(step=self._step[i], index=int(index) if _is_number(index) else 0,
                      group=int(group) if _is_number(group) else 0,
                      prompt=str(raw.get("prompt", "")), completion=str(raw.get("completion", "")),
                      reward=_number(raw.get("reward")), rewards=dict(rewards) if isinstance(rewards, dict) else {},
                      advantage=_number(raw.get("advantage")))

    def text(self, i: int, name: str) -> str:
        """The prompt or completion of row i, without building the whole Sample."""
        return str(self._raw[i].get(name, ""))

    @property
    def rows(self) -> "_Rows":
        self._materialize()
        return _Rows(self)

    def numbers(self, name: str) -> np.ndarray:
        """`step`, `index`, `reward`, `advantage` or `rewards/<component>` for every row."""
        self._materialize()
        if name == "step":
            return self._numbers.steps
        return self._numbers.column(name)

    def truncate_after(self, step: float) -> None:
        self._materialize()
        if any(s > step for s in self._step):
            keep = [i for i, s in enumerate(self._step) if s <= step]
            self._step = [self._step[i] for i in keep]
            self._raw = [self._raw[i] for i in keep]
            self._numbers.truncate_after(step)


class _Rows:
    """The samples as a read-only sequence of Sample (built on access)."""

    def __init__(self, store: SampleStore):
        self._store = store

    def __len__(self) -> int:
        return len(self._store)

    def __getitem__(self, i: int) -> Sample:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._store.row(i)

    def __iter__(self):
        return (self._store.row(i) for i in range(len(self)))


@dataclass
class RunUpdate:
    """What one poll added."""

    events: int = 0
    metrics: int = 0
    evals: int = 0
    samples: int = 0  # samples events (their generations are parsed when first shown)
    lifecycle: bool = False
    rewound: bool = False  # a resume dropped steps that are being redone

    def __bool__(self) -> bool:
        return self.events > 0


class RunData:
    """Everything the window shows about one run, kept up to date by `poll()`."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.updated = Signal()  # (RunUpdate)
        self._offset = 0  # bytes of events.jsonl read so far
        self.metrics = MetricTable()
        self.evals = MetricTable()
        self.samples = SampleStore()
        self.started: dict | None = None  # the last run_started / run_resumed event
        self.finished: dict | None = None  # run_finished
        self.failure: dict | None = None  # run_failed
        self.lifecycle: str | None = None  # type of the last lifecycle event
        self._last_lifecycle: dict = {}
        self.checkpoints: list[dict] = []
        # (step, samples) of each eval event: greedy completions of the same held-out
        # prompts at every evaluation (the inspector's prompt history follows them).
        self.eval_samples: list[tuple[int, list[dict]]] = []
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.last_step = 0
        self.num_events = 0

    # --------------------------------------------------------------- reading

    @property
    def name(self) -> str:
        return self.run_dir.name

    def poll(self) -> RunUpdate:
        """Read new events (a partly written last line waits for the next poll)."""
        update = self.ingest(self._read_new())
        if update:
            self.updated.emit(update)
        return update

    def _read_new(self) -> list:
        """Complete lines appended since the last read (rundir.read_lines), parsed as
        rundir.read_jsonl parses them, except that `samples` lines as the engine writes
        them are not parsed here (SampleStore parses them when the samples are first
        shown): that halves the time to open a long run."""
        lines, self._offset = rundir.read_lines(self.run_dir / rundir.EVENTS_FILE, self._offset)
        others = [i for i, line in enumerate(lines) if not line.startswith(_SAMPLES_PREFIX)]
        items = list(lines)
        for i, event in zip(others, rundir.parse_lines([lines[i] for i in others])):
            items[i] = event if isinstance(event, dict) else None
        return [item for item in items if item is not None]

    def ingest(self, events: list) -> RunUpdate:
        """Take events (mappings; raw `samples` lines are queued for the SampleStore)."""
        update = RunUpdate(events=len(events))
        if not events:
            return update
        metrics: list[dict] = []
        evals: list[dict] = []

        def flush() -> None:
            update.metrics += self.metrics.append(metrics)
            update.evals += self.evals.append(evals)
            metrics.clear()
            evals.clear()

        for event in events:
            if isinstance(event, bytes):
                self.samples.add(event)
                update.samples += 1
                continue
            kind = event.get("type")
            time = event.get("time")
            if isinstance(time, (int, float)):
                self.first_time = time if self.first_time is None else self.first_time
                self.last_time = time
            step = event.get("step")
            if isinstance(step, int):
                self.last_step = max(self.last_step, step) if kind != "run_resumed" else step
            if kind == "metrics":
                metrics.append(event)
            elif kind == "samples":
                self.samples.add(event)
                update.samples += 1
            elif kind == "eval":
                evals.append(event)
                if isinstance(event.get("samples"), list) and event["samples"]:
                    self.eval_samples.append((step if isinstance(step, int) else 0, event["samples"]))
            elif kind == "checkpoint":
                self.checkpoints.append(event)
            elif kind in LIFECYCLE:
                flush()
                update.lifecycle = True
                self.lifecycle = kind
                self._last_lifecycle = event
                if kind in ("run_started", "run_resumed"):
                    if kind == "run_resumed" and isinstance(step, int):
                        # Steps after the checkpoint are being redone: their old values go.
                        dropped = self.metrics.truncate_after(step) + self.evals.truncate_after(step)
                        self.samples.truncate_after(step)
                        self.eval_samples = [e for e in self.eval_samples if e[0] <= step]
                        update.rewound = bool(dropped)
                    self.started, self.finished, self.failure = event, None, None
                elif kind == "run_finished":
                    self.finished = event
                else:
                    self.failure = event
        flush()
        self.num_events += len(events)
        return update

    # ---------------------------------------------------------------- facts

    @property
    def status(self) -> str:
        """running | done | stopped | failed, by engine.rundir.lifecycle_status of the
        last lifecycle event; `empty` before the first event. (Whether a `running` run's
        process is still alive is for workbench.runs to judge.)"""
        if self.lifecycle is None:
            return "empty"
        return rundir.lifecycle_status(self._last_lifecycle)

    @property
    def algorithm(self) -> str:
        return str((self.started or {}).get("algorithm") or (self.preset.get("algorithm") or {}).get("name") or "")

    @property
    def max_steps(self) -> int | None:
        value = (self.started or {}).get("max_steps")
        if value is None:
            value = (self.preset.get("training") or {}).get("max_steps")
        return int(value) if isinstance(value, int) else None

    @property
    def preset(self) -> dict:
        """The resolved preset the run trains from (run_started carries it; preset.yaml
        too, for a run that failed before its first event)."""
        if self.started and isinstance(self.started.get("preset"), dict):
            return self.started["preset"]
        if not getattr(self, "_preset_file", None):
            # Before run_started: the preset the workbench launched it with, if any.
            self._preset_file = _read_yaml(self.run_dir / rundir.PRESET_FILE) or \
                _read_yaml(self.run_dir / "workbench" / "preset.yaml")
        return self._preset_file

    @property
    def model_name(self) -> str:
        return str(((self.started or {}).get("model") or {}).get("name_or_path")
                   or (self.preset.get("model") or {}).get("name_or_path") or "")

    def progress(self) -> Progress:
        return progress_of(self.metrics, self.last_step, self.max_steps)


def _read_yaml(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass
class Progress:
    step: int
    max_steps: int | None
    seconds_per_step: float | None = None
    eta_seconds: float | None = None

    @property
    def fraction(self) -> float | None:
        return min(1.0, self.step / self.max_steps) if self.max_steps else None


def progress_of(metrics: MetricTable, step: int, max_steps: int | None, window: int = 20) -> Progress:
    """Step, rate and ETA from the last `window` metric rows (wall time between them, so
    evaluation and checkpoint pauses count), falling back to the logged step_time.

    >>> t = MetricTable(); _ = t.append([{"step": s, "time": 2.0 * s} for s in range(1, 6)])
    >>> p = progress_of(t, 5, 10); (p.seconds_per_step, p.eta_seconds)
    (2.0, 10.0)
    """
    result = Progress(step=step, max_steps=max_steps)
    steps, times = metrics.steps, metrics.times
    if metrics.size >= 2:
        s, t = steps[-window:], times[-window:]
        if s[-1] > s[0] and t[-1] > t[0]:
            result.seconds_per_step = float((t[-1] - t[0]) / (s[-1] - s[0]))
    if result.seconds_per_step is None and "step_time" in metrics:
        result.seconds_per_step = metrics.last("step_time")
    if result.seconds_per_step is not None and max_steps:
        result.eta_seconds = max(0.0, (max_steps - step) * result.seconds_per_step)
    return result


def format_duration(seconds: float | None) -> str:
    """A short duration for the ETA.

    >>> format_duration(3725), format_duration(42.4), format_duration(None)
    ('1 h 02 min', '42 s', '–')
    """
    if seconds is None or not math.isfinite(seconds):
        return "–"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
