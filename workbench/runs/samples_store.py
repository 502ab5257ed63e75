"""Every sampled generation of a run (Sample, SampleStore), parsed when first needed.
No Qt."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from engine.run import rundir
from workbench.runs.metric_table import MetricTable, _is_number


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
