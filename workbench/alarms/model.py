"""An alarm as the window shows it, read leniently from an `alarm` event (the format is
in docs/run-directory.md); its colour; the recorded rollout its steps lead to. No Qt.

The engine writes every field, but a run directory is a file anyone can edit and an
older or newer engine may write a little less or more: a field that is missing or of
the wrong type is shown as absent, never a crash. (RunData keeps only events with a
kind and a step: `workbench.runs.rundata.is_alarm`.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# One colour per kind, so an alarm's row in the list and its marker on the plots match,
# and the same trouble looks the same in every run. Dark enough to read on white, and
# apart from the run colours of the curves (tab10) where that was possible.
KIND_COLOURS = {
    "no_learning_signal": "#b36b00",
    "step_reward_no_signal": "#8d5524",
    "steps_not_split": "#283593",
    "kl_spike": "#c2185b",
    "update_against_advantage": "#558b2f",
    "entropy_collapse": "#6a1b9a",
    "length_drift": "#00838f",
    "reward_hacking": "#d50000",
    "eval_falling": "#5d4037",
    "nonfinite_steps": "#212121",
    "reward_model_exploited": "#ad1457",
}
OTHER_COLOUR = "#757575"  # a kind this window does not know (a newer engine)


def alarm_colour(kind: str) -> str:
    return KIND_COLOURS.get(kind, OTHER_COLOUR)


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _text(value) -> str:
    return value.strip() if isinstance(value, str) else ""


@dataclass
class Alarm:
    """One alarm: where it fired, what it saw, why it matters, what to try, the numbers."""

    step: int  # the step it fired at
    kind: str
    title: str
    began: int  # the first step of the evidence: where the plot marker goes
    first: int  # the evidence's steps, inclusive
    last: int
    metric: str = ""  # the metric it is about ("eval/<key>" for an evaluation's)
    saw: str = ""
    why: str = ""
    tries: list[tuple[str, str]] = field(default_factory=list)  # (preset field, advice)
    evidence: dict[str, list[tuple[int, float | None]]] = field(default_factory=dict)
    # (label, step, [(prompt, completion, reward)]): samples from either side of the change, when it has them
    samples: list[tuple[str, int, list[tuple[str, str, float | None]]]] = field(default_factory=list)
    event: dict = field(default_factory=dict, repr=False)  # as logged

    @property
    def colour(self) -> str:
        return alarm_colour(self.kind)

    @property
    def steps_text(self) -> str:
        return f"step {self.first}" if self.first == self.last else f"steps {self.first}–{self.last}"

    @property
    def row_text(self) -> str:
        """Its row in the list."""
        return f"step {self.step} · {self.title}"


def alarm_from_event(event: dict) -> Alarm:
    """The alarm of an event that has a kind and a step; other fields as far as they
    make sense.

    >>> a = alarm_from_event({"kind": "kl_spike", "step": 9, "steps": [7, "x"], "try": [{"field": "beta"}, 3]})
    >>> (a.title, a.began, a.first, a.last, a.tries)
    ('Kl spike', 9, 9, 9, [('beta', '')])
    """
    step = _int(event.get("step")) or 0
    kind = str(event.get("kind") or "alarm")
    steps = event.get("steps")
    first = last = None
    if isinstance(steps, (list, tuple)) and len(steps) == 2 and all(_int(s) is not None for s in steps):
        first, last = sorted(steps)
    began = _int(event.get("began"))
    if began is None:
        began = first if first is not None else step
    if first is None:
        first, last = min(began, step), max(began, step)
    tries = []
    for entry in event.get("try") if isinstance(event.get("try"), list) else []:
        if isinstance(entry, dict) and _text(entry.get("field")):
            tries.append((_text(entry.get("field")), _text(entry.get("advice"))))
    evidence: dict[str, list[tuple[int, float | None]]] = {}
    raw = event.get("evidence")
    for name, points in (raw.items() if isinstance(raw, dict) else []):
        rows = [(_int(p[0]), _number(p[1])) for p in points if isinstance(p, (list, tuple)) and len(p) == 2
                and _int(p[0]) is not None] if isinstance(points, list) else []
        if rows:
            evidence[str(name)] = rows
    return Alarm(step=step, kind=kind, title=_text(event.get("title")) or kind.replace("_", " ").capitalize(),
                 began=began, first=first, last=last, metric=_text(event.get("metric")), saw=_text(event.get("saw")),
                 why=_text(event.get("why")), tries=tries, evidence=evidence, samples=_samples(event), event=event)


def _samples(event: dict) -> list[tuple[str, int, list[tuple[str, str, float | None]]]]:
    """The event's `samples` ({"before": {"step", "rows"}, "after": ...}) as (label, step,
    rows), read leniently.

    >>> _samples({"samples": {"before": {"step": 0, "rows": [{"prompt": "p", "completion": " c", "reward": 1}]}}})
    [('before', 0, [('p', ' c', 1.0)])]
    """
    raw = event.get("samples")
    out = []
    for label in ("before", "after"):
        side = raw.get(label) if isinstance(raw, dict) else None
        if isinstance(side, dict) and _int(side.get("step")) is not None and isinstance(side.get("rows"), list):
            rows = [(_text(r.get("prompt")), str(r.get("completion") or ""), _number(r.get("reward")))
                    for r in side["rows"] if isinstance(r, dict)]
            out.append((label, side["step"], rows))
    return out


def evidence_table(alarm: Alarm) -> tuple[list[str], list[tuple[int, list[float | None]]]]:
    """The evidence as one table: its metrics, and a row per step with each metric's
    value there (None where a metric has none, e.g. an evaluation between its steps).

    >>> evidence_table(alarm_from_event({"kind": "k", "step": 2, "evidence": {"a": [[1, 0.5], [2, 0.7]], "b": [[2, 1]]}}))
    (['a', 'b'], [(1, [0.5, None]), (2, [0.7, 1.0])])
    """
    names = list(alarm.evidence)
    by_step: dict[int, list[float | None]] = {}
    for column, name in enumerate(names):
        for step, value in alarm.evidence[name]:
            by_step.setdefault(step, [None] * len(names))[column] = value
    return names, sorted(by_step.items())


def first_recorded(index, first: int, last: int) -> tuple[int, int] | None:
    """(step, rollout index) of the first recorded rollout at a step in first..last,
    from a workbench.inspector.index.TrajectoryIndex (None: no step in range has one)."""
    if index is None:
        return None
    index.poll()
    for step in index.steps:
        if first <= step <= last:
            records = index.records(step)
            if records:
                return step, records[0].index
    return None


def no_records_note(alarm: Alarm, record_rollouts) -> str:
    """Why "Open in inspector" has nothing to open. `record_rollouts`: the run's
    training.record_rollouts (None when the preset does not say)."""
    if record_rollouts == 0:
        why = "training.record_rollouts is 0: this run records none"
    elif isinstance(record_rollouts, int):
        why = f"training.record_rollouts = {record_rollouts}; only steps with a trajectories/ file have them"
    else:
        why = "training.record_rollouts"
    return f"No rollouts were recorded at {alarm.steps_text} ({why})."


def arrival_message(alarms: list[Alarm]) -> str:
    """The window's one-line message when alarms arrive on a live run."""
    newest = alarms[-1]
    more = f" (and {len(alarms) - 1} more)" if len(alarms) > 1 else ""
    return f"⚠ Alarm at step {newest.step}: {newest.title}{more}. See the Alarms panel under the plots."
