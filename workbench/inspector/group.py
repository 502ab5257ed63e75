"""Two pages of the trajectory inspector besides the token text:

- `GroupView`: every completion GRPO sampled for one prompt at one step, one under the
  other with its reward, components and advantage (and, where the run writes them, each
  reward's own advantage, the reward that drives it marked, and a label), the recorded
  ones coloured token by token like the main text; a greedy baseline the rewards are
  measured against, when written, in a row of its own at the top; a group whose
  rewards are all equal (no learning signal) is flagged.
- `HistoryView`: one prompt followed across the run: its token-level rollouts, its
  completions in `samples` events and its greedy completions at each evaluation, with
  their rewards against the step.
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.inspector.colors import Scale, diverging_hex, text_hex
from workbench.inspector.export import tooltip_html
from workbench.inspector.index import Baseline, Group, HistoryRow, TrajectoryIndex, prompt_history
from workbench.inspector.navigation import PromptChoice
from workbench.inspector.quantities import _num
from workbench.inspector.records import text_display
from workbench.inspector.plot import IntegerAxis
from workbench.inspector.text import TokenTextView, token_colours

FLAG_STYLE = ("QLabel { background: #fff3cd; color: #5c4400; border: 1px solid #e0c060; border-radius: 4px; "
              "padding: 6px; }")
CURRENT_STYLE = "QFrame#group-row { border: 2px solid #1565c0; border-radius: 4px; background: #f3f8ff; }"
ROW_STYLE = "QFrame#group-row { border: 1px solid #d0d0d0; border-radius: 4px; background: white; }"
BASELINE_STYLE = ("QFrame#group-baseline { border: 1px dashed #7a869a; border-radius: 4px; background: #eef1f5; }")
LABEL_COLOUR = {True: "#2e7d32", False: "#b00020"}


def _chip(value: float | None, scale: float) -> str:
    """A number on a small background of the advantage colour map."""
    if value is None:
        return "null"
    bg = diverging_hex(value, scale)
    return (f"<span style='background:{bg}; color:{text_hex(bg)}'>&nbsp;{value:+.4g}&nbsp;</span>")


class GroupRowWidget(QFrame):
    clicked = Signal(int)
    double_clicked = Signal(int)

    def __init__(self, row, adv_scale: float, parent=None, part_scale: float = 0.0, driver: str | None = None):
        """`part_scale`: the half-width of the per-reward advantage chips' colours;
        `driver`: the reward that moves this completion's advantage most (underlined)."""
        super().__init__(parent)
        self.setObjectName("group-row")
        self.row = row
        self.index = row.index
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(2)
        components = ", ".join(f"{html.escape(str(k))} {_num(v)}" for k, v in row.rewards.items())
        n = len(row.trajectory.sides[0]) if row.trajectory is not None else None
        parts = [f"<b>#{row.index}</b>", f"reward <b>{_num(row.reward)}</b>" + (f" ({components})" if components else ""),
                 f"advantage {_chip(row.advantage, adv_scale)}"]
        if row.label is not None:
            parts.insert(1, f"<b style='color:{LABEL_COLOUR[row.label]}'>"
                            f"{'desirable' if row.label else 'undesirable'}</b>")
        if row.component_advantages:
            parts.append("per reward " + ", ".join(
                (f"<b><u>{html.escape(name)}</u></b>" if name == driver else html.escape(name)) + " "
                + _chip(value, part_scale) for name, value in row.component_advantages.items()))
        if n is not None:
            parts.append(f"{n} tokens")
            if row.trajectory.record.get("truncated"):
                parts.append("<span style='color:#b00020'>truncated</span>")
        else:
            parts.append("<i style='color:#777'>text only (not recorded token by token)</i>")
        self.header = QLabel(" · ".join(parts))
        self.header.setTextFormat(Qt.RichText)
        layout.addWidget(self.header)
        self.view: TokenTextView | None = None
        if row.trajectory is not None:
            self.view = TokenTextView(compact=True, max_lines=6)
            self.view.set_show_prompt(False)
            self.view.set_content("", row.trajectory.sides[0].tokens)
            trajectory = row.trajectory
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
        side = self.row.trajectory.sides[0]
        values = side.numbers.get(key, np.full(len(side), np.nan))
        self.view.set_colours(*token_colours(values, scale))
        clipped = side.clipped
        self.view.set_marks([bool(c == 1) for c in clipped] if key == "ratio" and clipped is not None else None)

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
        note = per_reward_note(group)
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
        for row in group.rows:
            widget = GroupRowWidget(row, adv_scale, part_scale=max(parts, default=0.0),
                                    driver=group.driving_reward(row))
            widget.clicked.connect(self.rollout_chosen)
            widget.double_clicked.connect(self.rollout_opened)
            self.rows_layout.insertWidget(self.rows_layout.count() - 1, widget)
            self.rows.append(widget)
        self.recolour(key, scale)
        self.set_current(current)

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


# ===================================================================== history

SOURCE_LABEL = {"rollout": "rollout (tokens)", "sample": "sample", "eval": "eval (greedy)"}
SOURCE_STYLE = {  # symbol, brush, pen
    "eval": ("s", "#1565c0", "#0d47a1"),
    "rollout": ("o", "#2e7d32", "#1b5e20"),
    "sample": ("o", None, "#757575"),
}


class HistoryView(QWidget):
    """One prompt across the run's steps."""

    rollout_opened = Signal(int, int)  # step, index

    def __init__(self, parent=None):
        super().__init__(parent)
        self.index: TrajectoryIndex | None = None
        self.run = None
        self.choice = PromptChoice()
        self.rows: list[HistoryRow] = []
        self._stale = True
        self.prompt_box = QComboBox()
        self.prompt_box.setObjectName("history-prompt")
        self.prompt_box.setEditable(True)
        self.prompt_box.setInsertPolicy(QComboBox.NoInsert)
        self.prompt_box.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.prompt_box.setToolTip("The prompt to follow: the shown rollout's, a held-out prompt the evaluations "
                                   "use, or any text typed here (Enter)")
        self.follow = QCheckBox("follow the shown rollout")
        self.follow.setChecked(True)
        self.follow.setToolTip("Follow the prompt of the rollout shown on the Trajectory page")
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setStyleSheet("QLabel { color: #666; }")
        self.key = QLabel("In the plot: <span style='color:#1565c0'>■</span> eval (greedy, held out) · "
                          "<span style='color:#2e7d32'>●</span> rollout (recorded token by token) · "
                          "<span style='color:#757575'>○</span> sample (samples event)")
        self.key.setTextFormat(Qt.RichText)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Prompt"))
        bar.addWidget(self.prompt_box, 1)
        bar.addWidget(self.follow)
        self.plot = pg.PlotWidget(background="w", axisItems={"bottom": IntegerAxis("bottom")})
        self.plot.setMinimumHeight(160)
        for name in ("left", "bottom"):
            axis = self.plot.getPlotItem().getAxis(name)
            axis.enableAutoSIPrefix(False)
            axis.setPen(pg.mkPen("#555"))
            axis.setTextPen(pg.mkPen("#333"))
        self.plot.getPlotItem().showGrid(x=True, y=True, alpha=0.15)
        self.plot.getPlotItem().setLabel("bottom", "step")
        self.plot.getPlotItem().setLabel("left", "reward")
        self.scatter = {}
        for source, (symbol, brush, pen) in SOURCE_STYLE.items():
            item = pg.ScatterPlotItem(symbol=symbol, size=8, pen=pg.mkPen(pen, width=1.2),
                                      brush=pg.mkBrush(brush) if brush else pg.mkBrush(255, 255, 255, 0))
            self.plot.getPlotItem().addItem(item)
            self.scatter[source] = item
        self.table = QTableWidget(0, 6)
        self.table.setObjectName("history-table")
        self.table.setHorizontalHeaderLabels(["step", "source", "#", "completion", "reward", "advantage"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(3, QHeaderView.Stretch)
        self.table.setToolTip("Double-click a rollout (tokens) row to inspect it")
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.plot)
        split.addWidget(self.table)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(bar)
        layout.addWidget(self.status)
        layout.addWidget(self.key)
        layout.addWidget(split, 1)
        self._scan = QTimer(self)
        self._scan.setSingleShot(True)
        self._scan.timeout.connect(self._scan_some)
        self.prompt_box.activated.connect(lambda _i: self._prompt_picked())
        self.prompt_box.lineEdit().returnPressed.connect(self._prompt_picked)
        self.table.cellDoubleClicked.connect(self._double_clicked)

    def set_sources(self, index: TrajectoryIndex | None, run) -> None:
        self.index = index
        self.run = run
        self.choice.reset()
        self._fill_prompts()
        self._stale = True
        self.rows = []
        self.table.setRowCount(0)
        for item in self.scatter.values():
            item.setData([], [])

    def _fill_prompts(self) -> None:
        self.prompt_box.blockSignals(True)
        self.prompt_box.clear()
        for label, prompt in self.choice.options(getattr(self.run, "eval_samples", None)):
            self.prompt_box.addItem(label, prompt)
        self.prompt_box.setCurrentIndex(0 if self.prompt else -1)
        self.prompt_box.blockSignals(False)

    def follow_prompt(self, prompt: str) -> None:
        """The shown rollout changed: follow its prompt (when following)."""
        self.choice.following = self.follow.isChecked()
        if self.choice.follow(prompt):
            self._show_prompt()

    @property
    def prompt(self) -> str:
        return self.choice.prompt

    def set_prompt(self, prompt: str) -> None:
        self.choice.prompt = prompt
        self._show_prompt()

    def _show_prompt(self) -> None:
        self._fill_prompts()
        self._stale = True
        if self.isVisible():
            self.refresh()

    def _prompt_picked(self) -> None:
        i = self.prompt_box.currentIndex()
        data = self.prompt_box.itemData(i) if i >= 0 and self.prompt_box.itemText(i) == self.prompt_box.currentText() \
            else None
        prompt = data if isinstance(data, str) else self.prompt_box.currentText()
        if self.choice.pick(prompt):
            self.follow.setChecked(False)
            self._show_prompt()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._stale:
            self.refresh()

    def refresh(self) -> None:
        """Scan the step files not yet scanned (a slice at a time), then list."""
        self._stale = False
        if self.index is not None and self.index.prompts_scanned() < len(self.index.steps):
            self._scan_some()
        else:
            self._rebuild()

    def scan_all(self) -> None:
        """Scan every step file now (tests, small runs)."""
        if self.index is not None:
            while not self.index.scan_prompts(1.0):
                pass
        self._rebuild()

    def _scan_some(self) -> None:
        if self.index is None:
            return
        done = self.index.scan_prompts(0.015)
        total = len(self.index.steps)
        if not done:
            self.status.setText(f"Reading the trajectory files for this prompt… "
                                f"{self.index.prompts_scanned():,} of {total:,} steps")
            self._scan.start(0)
            return
        self._rebuild()

    def _rebuild(self) -> None:
        if not self.prompt:
            self.status.setText("No prompt chosen.")
            return
        samples = self.run.samples if self.run is not None else None
        eval_samples = getattr(self.run, "eval_samples", None)
        self.rows = prompt_history(self.prompt, self.index, samples, eval_samples)
        counts = {s: sum(1 for r in self.rows if r.source == s) for s in SOURCE_LABEL}
        steps = sorted({r.step for r in self.rows})
        self.status.setText(
            f"{len(self.rows)} completions of this prompt over {len(steps)} steps: {counts['rollout']} token by "
            f"token, {counts['sample']} in samples events, {counts['eval']} at evaluations (greedy). "
            "A training prompt comes back once an epoch of the data; held-out prompts at every evaluation.")
        for source, item in self.scatter.items():
            pts = [(r.step, r.reward) for r in self.rows if r.source == source and r.reward is not None]
            item.setData([p[0] for p in pts], [p[1] for p in pts])
        table = self.table
        table.setRowCount(len(self.rows))
        for k, row in enumerate(self.rows):
            values = [str(row.step), SOURCE_LABEL[row.source], "" if row.index is None else str(row.index),
                      text_display(row.completion), _num(row.reward),
                      "–" if row.source == "eval" else _num(row.advantage)]  # greedy: no advantage
            for c, value in enumerate(values):
                item = QTableWidgetItem(value)
                if c in (0, 2, 4, 5):
                    item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                if c == 3:
                    item.setToolTip(row.completion)
                if row.source == "rollout":
                    item.setForeground(QColor("#1b5e20"))
                table.setItem(k, c, item)
        table.resizeColumnsToContents()
        table.horizontalHeader().setSectionResizeMode(3, QHeaderView.Stretch)

    def _double_clicked(self, row: int, _column: int) -> None:
        if 0 <= row < len(self.rows) and self.rows[row].has_tokens and self.rows[row].index is not None:
            self.rollout_opened.emit(self.rows[row].step, self.rows[row].index)
