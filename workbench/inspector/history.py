"""The trajectory inspector's Prompt history page (`HistoryView`): one prompt followed
across the run: its token-level rollouts, its completions in `samples` events and its
greedy completions at each evaluation, with their rewards against the step (a rollout
whose advantage varies by token shows the tokens' mean, marked so)."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.inspector.index import HistoryRow, TrajectoryIndex, prompt_history
from workbench.inspector.navigation import PromptChoice
from workbench.inspector.plot import IntegerAxis
from workbench.inspector.quantities import _num
from workbench.inspector.records import text_display
from workbench.inspector.wording import plural

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
            f"{plural(len(self.rows), 'completion')} of this prompt over {plural(len(steps), 'step')}: "
            f"{counts['rollout']} token by "
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
                      "–" if row.source == "eval" else _num(row.advantage)  # greedy: no advantage
                      + (" (mean)" if row.advantage_is_mean else "")]
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
