"""What the alarms read and give: the run's `History` (every step's metrics and every
evaluation), a `Finding`, each alarm's `Kind` (title, why, what to try), and the helpers
their words are made with (a metric's raw values quoted by name and steps). The
detectors (detectors.py, exploitation.py) stand on it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["Kind", "History", "Finding", "number", "mean", "evidence", "span", "raw", "evaluations", "correlation"]


@dataclass(frozen=True)
class Kind:
    title: str
    why: str
    try_fields: tuple[tuple[str, str], ...]  # (preset field, advice)


@dataclass
class History:
    """Every step's metrics and every evaluation the watcher has seen, in order."""

    steps: list[int] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    evals: list[tuple[int, dict]] = field(default_factory=list)
    # step -> (preset field, message): a skipped step whose NaN or inf a user's loss or
    # estimator returned (AlarmWatcher.explain_nonfinite), named in its alarm
    nonfinite_causes: dict[int, tuple[str, str]] = field(default_factory=dict)
    # the labels of the run's learned rewards and of the checks read against them
    # (engine.rewards.kinds.learned_and_checks): the exploitation alarm's (exploitation.py)
    learned_rewards: list[str] = field(default_factory=list)
    check_rewards: list[str] = field(default_factory=list)
    # the exploitation alarm's finding and the (steps, evaluations, thresholds) it was found
    # at: three detectors ask it each step (exploitation.py)
    exploited: tuple | None = field(default=None, repr=False, compare=False)

    def series(self, key: str, last: int | None = None) -> list[tuple[int, float]]:
        """(step, value) of the last `last` steps (all when None) where `key` is a finite number."""
        rows = zip(self.steps[-last:] if last else self.steps, self.metrics[-last:] if last else self.metrics)
        return [(s, float(m[key])) for s, m in rows if number(m.get(key))]


@dataclass(frozen=True)
class Finding:
    began: int
    end: int
    metric: str
    saw: str
    evidence: dict[str, list[list[float]]]
    # (preset field, advice) to try instead of the kind's own (KINDS), when the finding knows better
    try_fields: tuple[tuple[str, str], ...] | None = None
    # {"before": {"step", "rows"}, "after": {...}}: samples from either side of the change, when the finding has them
    samples: dict | None = None


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def signed(value: float) -> str:
    """A signed value in a text, to 3 significant digits; round-off (the mean of values
    that cancel, 4.4e-16) as 0.

    >>> signed(-0.0123), signed(0.5), signed(4.440892098500626e-16)
    ('-0.0123', '+0.5', '0')
    """
    return "0" if abs(value) < 1e-7 else f"{value:+.3g}"


def mean(pairs: list[tuple[int, float]]) -> float:
    return sum(v for _, v in pairs) / len(pairs)


def evidence(**series: list[tuple[int, float]]) -> dict[str, list[list[float]]]:
    return {key.replace("__", "/"): [[s, round(v, 6)] for s, v in pairs] for key, pairs in series.items()}


def span(pairs: list[tuple[int, float]]) -> str:
    return f"steps {pairs[0][0]}-{pairs[-1][0]}" if pairs[0][0] != pairs[-1][0] else f"step {pairs[0][0]}"


def raw(key: str, pairs: list[tuple[int, float]]) -> str:
    """Which values a text quotes: the metric's curve by its name, and its raw values (one
    step's, or their mean), never the dashboard's smoothed line, which peaks lower.

    >>> raw("kl", [(120, 1.17)]), raw("entropy", [(5, 0.2), (8, 0.1)])
    ('kl (raw, step 120)', 'entropy (raw, mean over steps 5-8)')
    """
    return f"{key} (raw, step {pairs[0][0]})" if len(pairs) == 1 else f"{key} (raw, mean over {span(pairs)})"


def evaluations(scores: list[tuple[int, float, str]]) -> str:
    steps = sorted({s for s, _, _ in scores})
    return f"raw evaluations at steps {steps[0]} and {steps[-1]}" if len(steps) > 1 else f"raw evaluation at step {steps[0]}"


def correlation(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0
