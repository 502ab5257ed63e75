"""The playground's table: one row per completion, the new component values, total and
advantage beside what the run had (its reward and advantage from the samples event),
and where the engine gives them, the greedy baseline's total (ReMax), each reward's
own advantage (GDPO) and a step reward's steps (the completion cut at each step's end,
each piece followed by its score)."""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

from workbench.inspector.steps import pieces_text, scores_text, step_pieces
from workbench.playground.model import Completion, ScoreResult
from workbench.runs.samples_view import one_line

GROUP, PROMPT, COMPLETION = "group", "prompt", "completion"
TOTAL, RUN_TOTAL, ADVANTAGE, RUN_ADVANTAGE = "total", "run total", "advantage", "run advantage"
GREEDY_BASELINE = "greedy baseline"  # the prompt's greedy completion, scored by the edited rewards
_CHANGED = QColor(255, 243, 205)  # a value that differs from the run's
_RIGHT = Qt.AlignRight | Qt.AlignVCenter


def component_column(label: str) -> str:
    """The column of a component: `rewards/LABEL` (a label may be any word, `total` too)."""
    return f"rewards/{label}"


def component_advantage_column(label: str) -> str:
    """The column of a reward's own advantage (where the engine gives one): `adv: LABEL`."""
    return f"adv: {label}"


def steps_column(label: str) -> str:
    """The column of a step reward's steps: `steps: LABEL`."""
    return f"steps: {label}"


def advantage_labels(result: ScoreResult | None) -> list[str]:
    """The rewards some completion got an advantage of its own for, in the result's order."""
    if result is None:
        return []
    seen = {k for parts in result.component_advantages for k in parts}
    return [label for label in result.labels if label in seen] + sorted(seen - set(result.labels))


def _baseline_tip(baseline: dict | None, run_reward: float) -> str:
    lines = []
    if baseline is not None:
        parts = ", ".join(f"{k} {_number(v)}" for k, v in (baseline.get("components") or {}).items())
        lines.append(f"greedy completion, scored by these rewards{f' ({parts})' if parts else ''}; "
                     "the advantage is the total minus its total")
    if math.isfinite(run_reward):
        lines.append(f"the run had {run_reward:.4f}")
    return "\n".join(lines)


def _number(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.4f}"


def _differs(new, old) -> bool:
    # at the precision shown: a shaded cell always reads differently from the run's value
    # (a 5e-5 change from the std's epsilon would otherwise be shaded yet look the same)
    return new is not None and old is not None and math.isfinite(old) and _number(new) != _number(old)


class ResultsTable(QTableWidget):
    """Completions with the scores of the last result. `columns` names the columns in
    order: group, prompt, completion, `rewards/LABEL` for each component, total, run
    total, greedy baseline (when the completions carry one), advantage, run advantage,
    `adv: LABEL` for each reward's own advantage (when the engine gives them), `steps:
    LABEL` for each step reward; tests read cells by these names."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("playground-results")
        self.columns: list[str] = []
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.setAlternatingRowColors(True)
        self.verticalHeader().setVisible(False)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.Interactive)
        self.horizontalHeader().setStretchLastSection(False)
        self.show_completions([])

    # --- Public API

    def show_completions(self, completions: list[Completion], result: ScoreResult | None = None) -> None:
        """The completions, with the result's numbers when given (scored, in this order)."""
        labels = result.labels if result is not None else []
        weights = {component_column(k): v for k, v in result.weights.items()} if result is not None else {}
        greedy = any(c.baseline is not None for c in completions) or \
            (result is not None and any(b is not None for b in result.baselines))
        own = advantage_labels(result)
        stepped = result.step_labels if result is not None else []
        self.columns = [GROUP, PROMPT, COMPLETION, *map(component_column, labels), TOTAL, RUN_TOTAL,
                        *([GREEDY_BASELINE] if greedy else []), ADVANTAGE, RUN_ADVANTAGE,
                        *map(component_advantage_column, own), *map(steps_column, stepped)]
        self.clear()
        self.setColumnCount(len(self.columns))
        self.setRowCount(len(completions))
        # A component's header: its label and weight.
        self.setHorizontalHeaderLabels([f"{name.partition('/')[2]}\n× {weights[name]:g}" if name in weights else name
                                        for name in self.columns])
        header_tips = {TOTAL: "Σ weight × component, by the edited rewards",
                       RUN_TOTAL: "The reward the run logged for this completion",
                       ADVANTAGE: "The advantage GRPO would compute from the new totals",
                       RUN_ADVANTAGE: "The advantage the run logged",
                       GREEDY_BASELINE: "The total of the prompt's greedy completion (the run's), which the "
                                        "reward is measured against: advantage = total - this"}
        header_tips.update({component_advantage_column(k): f"The advantage from {k} alone: normalised within the "
                            "group, before weights (the advantage is their weighted sum, normalised)" for k in own})
        header_tips.update({steps_column(k): f"The steps {k} scored: each step's text [in brackets], then its score; "
                            f"{k}'s value above is their mean. Hover a cell for one step a line" for k in stepped})
        if result is not None and not result.advantages_computed and result.advantages_reason:
            header_tips[ADVANTAGE] = f"No advantages: {result.advantages_reason}"
        for column, name in enumerate(self.columns):
            tip = header_tips.get(name) or (f"component {name}, weight {weights[name]:g}" if name in weights else "")
            if tip:
                self.horizontalHeaderItem(column).setToolTip(tip)
        for row, completion in enumerate(completions):
            self._text(row, GROUP, "" if completion.group is None else str(completion.group))
            self._text(row, PROMPT, str(completion.prompt))
            self._text(row, COMPLETION, completion.completion)
            self._value(row, RUN_TOTAL, completion.run_reward)
            self._value(row, RUN_ADVANTAGE, completion.run_advantage)
            if greedy:
                self._value(row, GREEDY_BASELINE, None).setToolTip(_baseline_tip(None, completion.run_baseline_reward))
            if result is None or row >= len(result.totals):
                continue
            for label in labels:
                new, old = result.values[row].get(label), completion.run_rewards.get(label)
                item = self._value(row, component_column(label), new)
                if isinstance(old, (int, float)):
                    item.setToolTip(f"the run had {old:.4f}")
                    if _differs(new, float(old)):
                        item.setBackground(_CHANGED)
            total = self._value(row, TOTAL, result.totals[row])
            if _differs(result.totals[row], completion.run_reward):
                total.setBackground(_CHANGED)
            advantage = self._value(row, ADVANTAGE, result.advantages[row])
            if _differs(result.advantages[row], completion.run_advantage):
                advantage.setBackground(_CHANGED)
            self._extras(row, completion, result, greedy, own)
            self._steps(row, completion, result, stepped)
        self.resizeColumnsToContents()
        for column in (self.columns.index(PROMPT), self.columns.index(COMPLETION), *(
                self.columns.index(steps_column(k)) for k in stepped)):
            self.setColumnWidth(column, min(self.columnWidth(column), 260))

    def cell(self, row: int, name: str) -> str:
        """The text shown in `row` under the column `name`."""
        item = self.item(row, self.columns.index(name))
        return item.text() if item is not None else ""

    # --- Internals

    def _extras(self, row: int, completion: Completion, result: ScoreResult, greedy: bool, own: list[str]) -> None:
        """The greedy baseline's total and each reward's own advantage, where the engine
        gave them, shaded where they read differently from the run's."""
        if greedy:
            baseline = result.baselines[row] if row < len(result.baselines) else None
            total = baseline.get("total") if baseline is not None else None
            item = self._value(row, GREEDY_BASELINE, total if isinstance(total, (int, float)) else None)
            item.setToolTip(_baseline_tip(baseline, completion.run_baseline_reward))
            if isinstance(total, (int, float)) and _differs(total, completion.run_baseline_reward):
                item.setBackground(_CHANGED)
        parts = result.component_advantages[row] if row < len(result.component_advantages) else {}
        for label in own:
            new, old = parts.get(label), completion.run_component_advantages.get(label)
            item = self._value(row, component_advantage_column(label), new if isinstance(new, (int, float)) else None)
            if isinstance(old, (int, float)):
                item.setToolTip(f"the run had {old:.4f}")
                if isinstance(new, (int, float)) and _differs(new, float(old)):
                    item.setBackground(_CHANGED)

    def _steps(self, row: int, completion: Completion, result: ScoreResult, stepped: list[str]) -> None:
        """Each step reward's steps: the pieces of the completion with their scores, shaded
        where the scores read differently from the run's."""
        steps = result.steps[row] if row < len(result.steps) else {}
        for label in stepped:
            pieces = step_pieces(completion.completion, steps.get(label, []))
            item = QTableWidgetItem(pieces_text(pieces))
            lines = [f"step {k + 1}: {score:.4g}  {piece!r}" for k, (piece, score) in enumerate(pieces)]
            old = completion.run_steps.get(label)
            if isinstance(old, list):
                lines.append(f"the run had {scores_text(old)}")
                if scores_text(old) != scores_text([score for _, score in pieces]):
                    item.setBackground(_CHANGED)
            item.setToolTip("\n".join(lines) or "no steps")
            self.setItem(row, self.columns.index(steps_column(label)), item)

    def _text(self, row: int, name: str, text: str) -> QTableWidgetItem:
        item = QTableWidgetItem(one_line(text))
        item.setToolTip(text)
        self.setItem(row, self.columns.index(name), item)
        return item

    def _value(self, row: int, name: str, value) -> QTableWidgetItem:
        item = QTableWidgetItem(_number(value))
        item.setTextAlignment(_RIGHT)
        if value is not None:
            item.setData(Qt.UserRole, value)
        self.setItem(row, self.columns.index(name), item)
        return item
