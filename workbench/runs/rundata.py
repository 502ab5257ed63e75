"""One run, as read from its run directory: metric columns, evaluations, sampled
generations and lifecycle. No Qt: the dashboard, samples table and runs list are views
of this model, and a live run and a past run are read the same way (tail the events).

`RunData.poll()` reads whatever was appended to events.jsonl since the last call (with
engine.run.rundir's reader) and returns what changed; the window calls it on a timer. When
something new arrived it emits `updated`, which the views of the run follow.

`alarm` events (the engine's watch over its own metrics, docs/run-directory.md) are kept
as logged, in order, in `RunData.alarms`; workbench/alarms/ shows them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from engine.run import rundir
from workbench.signals import Signal
from workbench.runs.labels import RunLabel, label_of
from workbench.runs.lineage import Stage, stages_of
from workbench.runs.metric_table import MetricTable
from workbench.runs.samples_store import SampleStore, sample_fields_of

# How the engine (rundir.dumps: compact separators, `type` first) starts a samples line.
_SAMPLES_PREFIX = b'{"type":"samples"'
LIFECYCLE = rundir.LIFECYCLE_EVENTS


@dataclass
class RunUpdate:
    """What one poll added."""

    events: int = 0
    metrics: int = 0
    evals: int = 0
    samples: int = 0  # samples events (their generations are parsed when first shown)
    alarms: int = 0  # alarm events
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
        self.alarms: list[dict] = []  # `alarm` events with a kind and a step, in order (is_alarm)
        self.parent: dict | None = None  # a fork's run_started `parent`: {run, checkpoint, step}
        # The runs it was built from (run_started's `lineage`: the run it starts from, its
        # reward models), as workbench/runs/lineage.py reads them; [] for most runs.
        self.lineage: list[Stage] = []
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

    _label: tuple | None = None

    @property
    def label(self) -> RunLabel:
        """What the run is called where it is shown (workbench/runs/labels.py): its preset
        and the fields that differ from it, or the name typed at Run."""
        key = id(self.started)  # a new run_started (or resume) may carry another preset
        if self._label is None or self._label[0] != key:
            self._label = (key, label_of(self.run_dir, self.preset))
        return self._label[1]

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
            elif kind == "alarm":
                if is_alarm(event):
                    self.alarms.append(event)
                    update.alarms += 1
            elif kind in LIFECYCLE:
                flush()
                update.lifecycle = True
                self.lifecycle = kind
                self._last_lifecycle = event
                if kind in ("run_started", "run_resumed"):
                    if kind == "run_started":
                        self.parent = event.get("parent") if isinstance(event.get("parent"), dict) else None
                        self.lineage = stages_of(event.get("lineage"))
                    if kind == "run_resumed" and isinstance(step, int):
                        # Steps after the checkpoint are being redone: their old values go.
                        # A restart (no checkpoint: trained again from step 0) redoes them
                        # all, the evaluation at step 0 too.
                        cut = -1 if event.get("restarted") else step
                        dropped = self.metrics.truncate_after(cut) + self.evals.truncate_after(cut)
                        self.samples.truncate_after(cut)
                        self.eval_samples = [e for e in self.eval_samples if e[0] <= cut]
                        # Alarms of the redone steps go too: the watch fires them again
                        # if the condition comes back.
                        kept = [a for a in self.alarms if a["step"] <= cut]
                        dropped += len(self.alarms) - len(kept)
                        self.alarms = kept
                        update.rewound = bool(dropped)
                    if kind == "run_started" or sample_fields_of(event) is not None:
                        # The samples table's columns: the fields the run declares (none: an
                        # old run, whose rows' known keys are its fields).
                        self.samples.set_fields(sample_fields_of(event))
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
        """running | done | stopped | failed, by engine.run.rundir.lifecycle_status of the
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

    def progress(self) -> Progress:
        return progress_of(self.metrics, self.last_step, self.max_steps)


def is_alarm(event: dict) -> bool:
    """Whether an `alarm` event can be shown: it names its kind and the step it fired
    at (anything else in it may be missing or odd; the views make do).

    >>> is_alarm({"type": "alarm", "kind": "kl_spike", "step": 3}), is_alarm({"type": "alarm", "step": 3})
    (True, False)
    """
    kind, step = event.get("kind"), event.get("step")
    return isinstance(kind, str) and bool(kind) and isinstance(step, int) and not isinstance(step, bool)


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
