"""Several runs' evaluations compared, as the dashboard compares their curves: which
evaluation of a run to overlay by default, the models of the evaluation on show and of
those overlaid (each keyed, labelled "RUN · model", with its run's position for the
run's colour), where curves cross (the first run's own, from its eval.json, and its last
model against each other run's last model), and whether two evaluations were made on the
same held-out prompts (only then are their prompts compared one by one). No Qt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from workbench.runs.evaluations import (
    Evaluation, EvaluationEntry, EvaluationError, ModelResult, PromptRow, crossing_text, load_evaluation, short_name,
)

SEPARATOR = " · "


# ------------------------------------------------------------ which evaluation


def default_evaluation(entries: list[EvaluationEntry],
                       load: Callable[[Path], Evaluation] = load_evaluation) -> EvaluationEntry | None:
    """The evaluation of another run to overlay at first: its newest finished one, else
    its newest readable one (a running or stopped evaluation), else None. `entries` are
    newest first (list_evaluations); they are read only until a finished one is found."""
    readable = None
    for entry in entries:
        try:
            evaluation = load(entry.folder)
        except EvaluationError:
            continue
        if evaluation.finished:
            return entry
        readable = readable or entry
    return readable


def unique_names(names: list[str]) -> list[str]:
    """Run names as labels tell them apart: a name met again gets its position.

    >>> unique_names(["grpo-sort", "ppo-sort", "grpo-sort"])
    ['grpo-sort', 'ppo-sort', 'grpo-sort (3)']
    """
    seen: set[str] = set()
    out = []
    for position, name in enumerate(names):
        out.append(name if name not in seen else f"{name} ({position + 1})")
        seen.add(name)
    return out


# ------------------------------------------------------------------ the runs


@dataclass
class Overlay:
    """Another run's evaluation drawn over the one on show. `position`: the run's place
    among the runs on show (the first is 0), which gives it its colour."""

    run: str
    position: int
    evaluation: Evaluation


@dataclass
class ComparedModel:
    """A model as the plots, the summary and the per-prompt table name it."""

    key: str  # the model's name for the first run's; POSITION/name for another run's
    label: str  # short: "step 400", or "RUN · step 400" when runs are overlaid
    long_label: str  # the summary's: "base (no adapter)", or "RUN · base (no adapter)"
    run: str
    position: int  # the run's, among the runs on show (its colour)
    order: int  # the model's, within its evaluation (its line style when runs are overlaid)
    evaluation: Evaluation
    model: ModelResult


@dataclass
class CompareCrossing:
    """Where model b's curve crosses model a's at k; `rising`: b goes above a there."""

    a: ComparedModel
    b: ComparedModel
    k: float
    rising: bool
    between_runs: bool
    overlaid: bool  # runs are overlaid: a mark names the run

    def text(self, alone: bool) -> str:
        """The mark's label: `alone` when it is the only crossing on the plot."""
        if self.between_runs:
            verb = "rises above" if self.rising else "falls below"
            return f"{self.b.run} {verb} {self.a.run} at k ≈ {self.k:.3g}"
        if alone and not self.overlaid:
            return crossing_text(self.k)
        names = f"{short_name(self.a.model)} × {short_name(self.b.model)}"
        return f"{self.a.run}: {names} at k ≈ {self.k:.3g}" if self.overlaid else f"{names}: k ≈ {self.k:.3g}"


@dataclass
class Comparison:
    """The evaluation on show (of the run `run`, first among those on show) and the
    other runs' evaluations overlaid on it (none: one run's evaluation, as ever)."""

    run: str
    evaluation: Evaluation
    overlays: list[Overlay] = field(default_factory=list)

    @property
    def overlaid(self) -> bool:
        return bool(self.overlays)

    def models(self, evaluation: Evaluation | None = None) -> list[ComparedModel]:
        """Every model, the first run's first; or those of one `evaluation` of them."""
        out = []
        for position, run, each in [(0, self.run, self.evaluation)] + [(o.position, o.run, o.evaluation)
                                                                         for o in self.overlays]:
            if evaluation is not None and each is not evaluation:
                continue
            for order, model in enumerate(each.models):
                key = model.name if position == 0 else f"{position}/{model.name}"
                prefix = f"{run}{SEPARATOR}" if self.overlaid else ""
                out.append(ComparedModel(key, prefix + short_name(model), prefix + model.label, run, position, order,
                                         each, model))
        return out

    def crossings(self, metric: str) -> list[CompareCrossing]:
        """The first run's crossings of `metric` (eval.json's: its first model against
        each other), then, for each overlay, where its last model crosses the first run's
        last model. The engine finds crossings of pass@k only, and so does this: "does
        run B pass run A at large k" is asked of pass@k."""
        drawn = {m.key: m for m in self.models() if getattr(m.model, metric)}
        out = [CompareCrossing(drawn[c.a], drawn[c.b], c.k, _rising_at(drawn[c.a], drawn[c.b], c.k, metric), False,
                               self.overlaid)
               for c in self.evaluation.crossings if c.metric == metric and c.a in drawn and c.b in drawn]
        for first, other in self.last_models(metric) if metric == "pass_at_k" else []:
            out += [CompareCrossing(first, other, k, rising, True, True)
                    for k, rising in crossings(getattr(first.model, metric), getattr(other.model, metric))]
        return out

    def last_models(self, metric: str) -> list[tuple[ComparedModel, ComparedModel]]:
        """(the first run's last model, an overlay's last model) for each overlay, both
        with a curve of `metric`."""
        first = last_model(self.models(self.evaluation), metric)
        others = [last_model(self.models(o.evaluation), metric) for o in self.overlays]
        return [(first, other) for other in others if first is not None and other is not None]

    def standing(self, metric: str) -> str:
        """In words, where the runs' last models stand when they do not cross ("" when
        some do, or nothing is overlaid): which stays above."""
        pairs = self.last_models(metric)
        if not pairs or any(crossings(getattr(a.model, metric), getattr(b.model, metric)) for a, b in pairs):
            return ""
        if len(pairs) > 1:
            return "the runs' last models do not cross"
        a, b = pairs[0]
        curve_a, curve_b = getattr(a.model, metric), getattr(b.model, metric)
        gaps = [curve_b[k] - curve_a[k] for k in sorted(set(curve_a) & set(curve_b))]
        if not gaps:
            return "the runs' last models share no k"
        above, below = (b.run, a.run) if sum(gaps) > 0 else (a.run, b.run)
        return f"{above} stays above {below}" if any(gaps) else f"{b.run} equals {a.run}"

    def identical(self) -> list[tuple[ComparedModel, ComparedModel]]:
        """(a model of an overlay, an earlier model) whose pass@k and maj@k curves are the
        same: the one drawn over the other (two runs' common base, evaluated alike)."""
        out, earlier = [], []
        for model in self.models():
            curves = (model.model.pass_at_k, model.model.maj_at_k)
            twin = next((e for e in earlier if (e.model.pass_at_k, e.model.maj_at_k) == curves), None)
            if twin is not None and model.position != 0 and any(curves):
                out.append((model, twin))
            earlier.append(model)
        return out

    def prompt_models(self) -> tuple[list[ComparedModel], list[str]]:
        """The models whose prompts can be compared with the first run's one by one (its
        own, and those of each overlay made on the same held-out prompts), and a note
        for each overlay that is not."""
        models, notes = self.models(self.evaluation), []
        for overlay in self.overlays:
            why = prompts_differ(self.evaluation, overlay.evaluation)
            if why:
                notes.append(f"{overlay.run}'s {overlay.evaluation.name} is not offered here: {why}.")
            else:
                models += self.models(overlay.evaluation)
        return models, notes

    def prompt_rows(self, models: list[ComparedModel]) -> list[PromptRow]:
        """The first run's per-prompt rows, each with the correct samples of every model
        of `models` (keyed as they are) on the same prompt."""
        counts: dict[int, dict[str, int]] = {}
        for model in models:
            for row in model.evaluation.per_prompt:
                if model.model.name in row.correct:
                    counts.setdefault(row.index, {})[model.key] = row.correct[model.model.name]
        return [PromptRow(row.index, row.prompt, counts.get(row.index, {})) for row in self.evaluation.per_prompt]


def last_model(models: list[ComparedModel], metric: str) -> ComparedModel | None:
    """The last model of an evaluation with a curve of `metric` (its latest checkpoint)."""
    return next((m for m in reversed(models) if getattr(m.model, metric)), None)


def _rising_at(a: ComparedModel, b: ComparedModel, k: float, metric: str) -> bool:
    found = crossings(getattr(a.model, metric), getattr(b.model, metric))
    return min(found, key=lambda c: abs(c[0] - k))[1] if found else False


# ------------------------------------------------------------------ the curves


def crossings(a: dict[int, float], b: dict[int, float]) -> list[tuple[float, bool]]:
    """(k, whether b rises above a there) where curve b crosses curve a: b - a changes
    sign between two k measured by both, interpolated in log2 k; a touch (b = a at a k)
    is a crossing at that k. The engine's rule (engine/evaluate/estimators.py), so that
    two runs' curves cross where one evaluation's would.

    >>> crossings({1: 0.5, 2: 0.6, 4: 0.7}, {1: 0.6, 2: 0.6, 4: 0.6})
    [(2.0, False)]
    >>> [(round(k, 3), up) for k, up in crossings({1: 0.4, 4: 0.6, 8: 0.7}, {1: 0.2, 4: 0.8, 8: 0.9})]
    [(2.0, True)]
    >>> crossings({1: 0.2, 2: 0.5}, {1: 0.3, 2: 0.6, 4: 0.7})
    []
    """
    ks = sorted(set(a) & set(b))
    out: list[tuple[float, bool]] = []
    for k0, k1 in zip(ks, ks[1:]):
        d0, d1 = b[k0] - a[k0], b[k1] - a[k1]
        if d0 == 0 and (not out or out[-1][0] != k0):
            out.append((float(k0), d1 > 0))
        elif d0 * d1 < 0:
            x0, x1 = math.log2(k0), math.log2(k1)
            out.append((2 ** (x0 + (x1 - x0) * d0 / (d0 - d1)), d1 > 0))
    return out


# ------------------------------------------------------------------ the prompts


def prompts_differ(a: Evaluation, b: Evaluation) -> str | None:
    """Why the prompts of evaluation b cannot be compared one by one with a's (None: they
    can): the same number of held-out prompts, and the same text at each index both have
    sampled (a stopped evaluation has sampled some of them).

    >>> rows = [PromptRow(0, "sort 3 1 =", {}), PromptRow(1, "sort 2 7 =", {})]
    >>> a = Evaluation(Path("a"), prompts=2, per_prompt=rows)
    >>> prompts_differ(a, Evaluation(Path("b"), prompts=2, per_prompt=rows[1:])) is None
    True
    >>> prompts_differ(a, Evaluation(Path("b"), prompts=3, per_prompt=rows))
    'it is on 3 held-out prompts, this one on 2'
    >>> prompts_differ(a, Evaluation(Path("b"), prompts=2, per_prompt=[PromptRow(1, "sort 9 =", {})]))
    'its prompt 1 differs'
    """
    if a.prompts is None or b.prompts is None:
        return "the number of its held-out prompts is not recorded"
    if a.prompts != b.prompts:
        return f"it is on {b.prompts} held-out prompts, this one on {a.prompts}"
    if not a.per_prompt or not b.per_prompt:
        return "its prompts are not recorded"
    texts = {row.index: row.prompt for row in a.per_prompt}
    differ = [row.index for row in b.per_prompt if row.index in texts and texts[row.index] != row.prompt]
    if differ:
        more = f" (and {len(differ) - 1} more)" if len(differ) > 1 else ""
        return f"its prompt {differ[0]} differs{more}"
    return None
