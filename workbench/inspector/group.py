"""The Group page of the trajectory inspector (`GroupView`): every completion GRPO
sampled for one prompt at one step, one under the other with its reward, components and
advantage (and, where the run writes them, each reward's own advantage, the reward that
drives it marked, and a label), the recorded ones coloured token by token like the main
text; a greedy baseline the rewards are measured against, when written, in a row of its
own at the top; a group whose rewards are all equal (no learning signal) is flagged.
Completions scored step by step show each step's score (against the group's mean, the
first wrong step marked) and can be ordered by them. A multi-turn episode shows its turns,
its tool calls with their results and its final reward, its tool tokens grey (episodes.py).
(The Prompt history page is history.py.)
"""

from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from workbench.inspector.colors import Scale, diverging_hex, text_hex
from workbench.inspector.episodes import episode_line_html
from workbench.inspector.export import tooltip_html
from workbench.inspector.index import Baseline, Group
from workbench.inspector.quantities import _num
from workbench.inspector.records import text_display
from workbench.inspector.steps import badges, chips_html, order_key, step_parity
from workbench.inspector.text import TokenTextView
from workbench.inspector.text_paint import token_colours
from workbench.inspector.update_effect import token_marks, trajectory_effect_text
from workbench.inspector.wording import signed

FLAG_STYLE = ("QLabel { background: #fff3cd; color: #5c4400; border: 1px solid #e0c060; border-radius: 4px; "
              "padding: 6px; }")
CURRENT_STYLE = "QFrame#group-row { border: 2px solid #1565c0; border-radius: 4px; background: #f3f8ff; }"
ROW_STYLE = "QFrame#group-row { border: 1px solid #d0d0d0; border-radius: 4px; background: white; }"
BASELINE_STYLE = ("QFrame#group-baseline { border: 1px dashed #7a869a; border-radius: 4px; background: #eef1f5; }")
LABEL_COLOUR = {True: "#2e7d32", False: "#b00020"}
ORDER_INDEX, ORDER_STEPS = "index", "steps"  # the Group page's row orders


def _chip(value: float | None, scale: float) -> str:
    """A number on a small background of the advantage colour map."""
    if value is None:
        return "null"
    bg = diverging_hex(value, scale)
    return (f"<span style='background:{bg}; color:{text_hex(bg)}'>&nbsp;{signed(value)}&nbsp;</span>")


class GroupRowWidget(QFrame):
    clicked = Signal(int)
    double_clicked = Signal(int)

    def __init__(self, row, adv_scale: float, parent=None, part_scale: float = 0.0, driver: str | None = None,
                 step_refs: dict | None = None):
        """`part_scale`: the half-width of the per-reward advantage chips' colours;
        `driver`: the reward that moves this completion's advantage most (underlined);
        `step_refs`: each step reward's scores over the group (steps.Reference)."""
        super().__init__(parent)
        self.setObjectName("group-row")
        self.row = row
        self.index = row.index
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(2)
        components = ", ".join(f"{html.escape(str(k))} {_num(v)}" for k, v in row.rewards.items())
        n = len(row.trajectory.sides[0]) if row.trajectory is not None else None
        spread = row.trajectory.advantage_range if row.trajectory is not None else None
        advantage = f"advantage {_chip(row.advantage, adv_scale)}" if spread is None else \
            f"mean advantage {_chip(row.advantage, adv_scale)} " \
            f"(per token {signed(spread[0], 3)} to {signed(spread[1], 3)})"
        parts = [f"<b>#{row.index}</b>", f"reward <b>{_num(row.reward)}</b>" + (f" ({components})" if components else ""),
                 advantage]
        if row.steps:
            parts.insert(2, chips_html(row.steps, step_refs or {}))
        if row.label is not None:
            parts.insert(1, f"<b style='color:{LABEL_COLOUR[row.label]}'>"
                            f"{'desirable' if row.label else 'undesirable'}</b>")
        if row.component_advantages:
            parts.append("per reward " + ", ".join(
                (f"<b><u>{html.escape(name)}</u></b>" if name == driver else html.escape(name)) + " "
                + _chip(value, part_scale) for name, value in row.component_advantages.items()))
        effect = trajectory_effect_text(row.trajectory, 0) if row.trajectory is not None else ""
        if effect:
            parts.append(f"update: {html.escape(effect)}")
        if n is not None:
            parts.append(f"{n} tokens")
            if row.trajectory.record.get("truncated"):
                parts.append("<span style='color:#b00020'>truncated</span>")
        else:
            parts.append("<i style='color:#777'>text only (not recorded token by token)</i>")
        self.header = QLabel(" · ".join(parts))
        self.header.setTextFormat(Qt.RichText)
        if row.steps:
            self.header.setWordWrap(True)  # a long completion has many steps
        layout.addWidget(self.header)
        self.episode_line: QLabel | None = None
        if row.episode is not None:
            self.episode_line = QLabel(episode_line_html(row.episode, row.reward))
            self.episode_line.setObjectName("group-episode")
            self.episode_line.setTextFormat(Qt.RichText)
            self.episode_line.setWordWrap(True)
            layout.addWidget(self.episode_line)
        self.view: TokenTextView | None = None
        if row.trajectory is not None:
            self.view = TokenTextView(compact=True, max_lines=6)
            self.view.set_show_prompt(False)
            trajectory = row.trajectory
            steps, n = trajectory.steps, len(trajectory.sides[0])
            self.view.set_content("", trajectory.sides[0].tokens, badges(steps, step_refs or {}) if steps else None,
                                  step_parity(steps, n),
                                  trajectory.episode.text_tags() if trajectory.episode is not None else None)
            self.view.tooltip_for = lambda i, t=trajectory: tooltip_html(t, 0, i)
            self.view.token_clicked.connect(lambda _i: self.clicked.emit(self.index))
            self.view.token_double_clicked.connect(lambda _i: self.double_clicked.emit(self.index))
            layout.addWidget(self.view)
        else:
            text = QLabel(html.escape(text_display(row.completion)) or "<i>(empty)</i>")
            text.setTextFormat(Qt.RichText)
            text.setWordWrap(True)
            text.setStyleSheet("QLabel { font-family: monospace; color: #333; padding: 4px; }")
            layout.addWidget(text)
        self.set_current(False)

    def set_current(self, current: bool) -> None:
        self.setStyleSheet(CURRENT_STYLE if current else ROW_STYLE)

    def recolour(self, key: str, scale: Scale) -> None:
        if self.view is None:
            return
        trajectory = self.row.trajectory
        values = trajectory.values(key)[0]  # an episode's tool tokens: null, painted grey
        self.view.set_colours(*token_colours(values, scale,
                                             trajectory.episode.tool_mask if trajectory.episode is not None else None))
        marks = token_marks(self.row.trajectory, 0, key)  # clipped (ratio), against the push (change)
        self.view.set_marks([bool(c == 1) for c in marks] if marks is not None else None)

    def mousePressEvent(self, event) -> None:
        if event.button() == Qt.LeftButton:
            self.clicked.emit(self.index)
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event) -> None:
        self.double_clicked.emit(self.index)
        super().mouseDoubleClickEvent(event)


class BaselineRowWidget(QFrame):
    """The greedy completion of the group's prompt, which each sample's reward is measured
    against: text only (it was scored, not trained on, so it has no tokens to colour)."""

    def __init__(self, baseline: Baseline, parent=None):
        super().__init__(parent)
        self.setObjectName("group-baseline")
        self.setStyleSheet(BASELINE_STYLE)
        self.baseline = baseline
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(2)
        components = ", ".join(f"{html.escape(str(k))} {_num(v)}" for k, v in baseline.rewards.items())
        self.header = QLabel(
            f"<b>greedy baseline</b> · reward <b>{_num(baseline.reward)}</b>"
            + (f" ({components})" if components else "")
            + " · <i style='color:#555'>the prompt's greedy completion: each sample's advantage is its reward "
              "minus this one's. Not a trained sample (no tokens to colour).</i>")
        self.header.setTextFormat(Qt.RichText)
        self.header.setWordWrap(True)
        layout.addWidget(self.header)
        self.text = QLabel(html.escape(text_display(baseline.completion)) or "<i>(empty)</i>")
        self.text.setTextFormat(Qt.RichText)
        self.text.setWordWrap(True)
        self.text.setStyleSheet("QLabel { font-family: monospace; color: #333; padding: 4px; }")
        layout.addWidget(self.text)


class GroupView(QWidget):
    """The completions of one prompt group side by side (one under the other)."""

    rollout_chosen = Signal(int)  # a row clicked: make it the current rollout
    rollout_opened = Signal(int)  # a row double-clicked: show it on the Trajectory page

    def __init__(self, parent=None):
        super().__init__(parent)
        self.group: Group | None = None
        self.scale: Scale | None = None
        self.rows: list[GroupRowWidget] = []
        self.baseline: BaselineRowWidget | None = None  # the greedy baseline's row, when the group has one
        self.flag = QLabel()
        self.flag.setObjectName("group-flag")
        self.flag.setWordWrap(True)
        self.flag.setStyleSheet(FLAG_STYLE)
        self.flag.hide()
        self.title = QLabel()
        self.title.setTextFormat(Qt.RichText)
        self.title.setWordWrap(True)
        self.order_box = QComboBox()
        self.order_box.setObjectName("group-order")
        self.order_box.addItem("in sampling order", ORDER_INDEX)
        self.order_box.addItem("by steps: right to the end first, then the latest first wrong step", ORDER_STEPS)
        self.order_box.setToolTip("The order of the completions: as sampled, or by their step scores (those with "
                                  "no wrong step first, then by how late the first wrong step comes; ties by the "
                                  "mean step score)")
        self.order_box.currentIndexChanged.connect(lambda _i: self._order_rows())
        self.order_row = QWidget()
        order_layout = QHBoxLayout(self.order_row)
        order_layout.setContentsMargins(0, 0, 0, 0)
        order_layout.addWidget(QLabel("Order"))
        order_layout.addWidget(self.order_box)
        order_layout.addStretch(1)
        self.order_row.hide()
        self.container = QWidget()
        self.rows_layout = QVBoxLayout(self.container)
        self.rows_layout.setContentsMargins(0, 0, 0, 0)
        self.rows_layout.setSpacing(6)
        self.rows_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.container)
        scroll.setFrameShape(QFrame.NoFrame)
        self.scroll = scroll
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.title)
        layout.addWidget(self.flag)
        layout.addWidget(self.order_row)
        layout.addWidget(scroll, 1)

    def show_group(self, group: Group | None, current: int | None, key: str, scale: Scale,
                   single: bool = False, adv_scale: float | None = None) -> None:
        """`adv_scale`: the half-width of the advantage colours (the step's, so the
        chips match the tokens when colouring by advantage); default the group's.
        `single`: the run's records are one completion per prompt (layout "single")."""
        self.group = group
        for row in self.rows + ([self.baseline] if self.baseline is not None else []):
            row.setParent(None)
            row.deleteLater()
        self.rows = []
        self.baseline = None
        if group is None:
            self.title.setText("No group to show.")
            self.flag.hide()
            return
        rewards = [r.reward for r in group.rows if r.reward is not None]
        recorded = sum(1 for r in group.rows if r.trajectory is not None)
        size = f" of {group.size}" if group.size and group.size != len(group.rows) else ""
        stats = ""
        if rewards:
            stats = (f" · reward mean <b>{_num(float(np.mean(rewards)))}</b>, spread "
                     f"<b>{_num(max(rewards) - min(rewards))}</b>")
        if group.baseline is not None:
            stats += f" · greedy baseline reward <b>{_num(group.baseline.reward)}</b>"
        note = per_reward_note(group) + steps_note(group)
        if single and len(group.rows) == 1:
            note += ("<br><span style='color:#666'>This run samples one completion per prompt "
                    "(num_generations 1): the group has this one.</span>")
        self.title.setText(
            f"<b>step {group.step} · group {group.group}</b> · {len(group.rows)}{size} completions "
            f"({recorded} token by token){stats}<br><span style='color:#666'>prompt:</span> "
            f"<span style='font-family:monospace'>{html.escape(text_display(group.prompt))}</span>{note}")
        message = group.flag()
        self.flag.setText(("⚠ " if group.no_signal else "") + message)
        self.flag.setVisible(bool(message))
        if adv_scale is None:
            advantages = [abs(r.advantage) for r in group.rows if r.advantage is not None]
            adv_scale = max(advantages) if advantages else 0.0
        if group.baseline is not None:
            self.baseline = BaselineRowWidget(group.baseline)
            self.rows_layout.insertWidget(0, self.baseline)
        parts = [abs(v) for r in group.rows for v in r.component_advantages.values() if v is not None]
        refs = group.step_references
        for row in group.rows:
            widget = GroupRowWidget(row, adv_scale, part_scale=max(parts, default=0.0),
                                    driver=group.driving_reward(row), step_refs=refs)
            widget.clicked.connect(self.rollout_chosen)
            widget.double_clicked.connect(self.rollout_opened)
            self.rows_layout.insertWidget(self.rows_layout.count() - 1, widget)
            self.rows.append(widget)
        self.order_row.setVisible(bool(refs))
        self._order_rows()
        self.recolour(key, scale)
        self.set_current(current)

    def shown_order(self) -> list[int]:
        """The completions' indices as the rows stand, top to bottom."""
        widgets = [self.rows_layout.itemAt(k).widget() for k in range(self.rows_layout.count())]
        return [w.index for w in widgets if isinstance(w, GroupRowWidget)]

    def _order_rows(self) -> None:
        """Put the rows in the chosen order (by index, or by their step scores)."""
        if not self.rows or self.group is None:
            return
        refs = self.group.step_references
        by_steps = self.order_box.currentData() == ORDER_STEPS and bool(refs)
        ordered = sorted(self.rows, key=(lambda w: (order_key(w.row.steps, refs), w.index)) if by_steps
                         else (lambda w: w.index))
        first = 1 if self.baseline is not None else 0
        for k, widget in enumerate(ordered):
            self.rows_layout.removeWidget(widget)
            self.rows_layout.insertWidget(first + k, widget)

    def recolour(self, key: str, scale: Scale) -> None:
        self.scale = scale  # what the rows are coloured on (the step's, widened by the group)
        for row in self.rows:
            row.recolour(key, scale)

    def set_current(self, index: int | None) -> None:
        for row in self.rows:
            row.set_current(row.index == index)

    def row(self, index: int) -> GroupRowWidget | None:
        return next((r for r in self.rows if r.index == index), None)


def per_reward_note(group: Group) -> str:
    """The title's line about each reward's own advantage ('' when the rows have none)."""
    names = group.reward_names
    if not names:
        return ""
    weights = ", ".join(f"{html.escape(n)} × {group.weights[n]:g}" for n in names if n in group.weights)
    return ("<br><span style='color:#666'>per reward: each reward's advantage on its own (normalised within "
            "the group, before weights); the advantage is their weighted sum"
            + (f" ({weights})" if weights else "") + ", normalised over the batch. "
            "<u>Underlined</u>: the reward that moves it most.</span>")


def steps_note(group: Group) -> str:
    """The title's line about step scores ('' when the group has none)."""
    refs = group.step_references
    if not refs:
        return ""
    means = ", ".join(f"{html.escape(label)} {_num(ref.mean)}" for label, ref in refs.items())
    return ("<br><span style='color:#666'>steps: each step's score after its end, green above the group's mean "
            f"step score ({means}), pink below; <b><u>bold, underlined</u></b> and named: the completion's first "
            "wrong step (under the midpoint of the group's lowest and highest step score).</span>")
