"""A run's metric columns: one numpy column per metric name, grown as events arrive.
No Qt."""

from __future__ import annotations

from typing import Any

import numpy as np

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
