"""The samples table: generations streaming in from `samples` events, newest first,
filtered by text and step range, sortable by any column, with the whole text of the
selected one in a detail pane. A multi-turn episode's row has an episode column (turns,
each tool's calls, failed calls); its tooltip and the detail pane hold the conversation.

The model keeps an index array of the rows shown (numpy), so filtering and sorting
100,000 samples is a few milliseconds, and new samples re-lay the table out without
losing the selection.
"""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFontDatabase
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableView,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from workbench.runs.rundata import RunData, Sample, SampleStore
from workbench.inspector.episodes import conversation_text, episode_summary
from workbench.inspector.steps import labelled_scores_text, steps_tooltip
from workbench.runs.samples_store import (BASELINE, COMPONENT_ADVANTAGE, EPISODE, LABEL, STEPS, TIE, _fmt,
                                          baseline_text, flag_text, sample_html)

STEP, PROMPT, COMPLETION, REWARD = "step", "prompt", "completion", "reward"
ADVANTAGE = "advantage"
TEXT_COLUMNS = (PROMPT, COMPLETION)
FLAG_COLUMNS = (LABEL, TIE)  # yes/no keys, shown in words
_ROLES = {Qt.DisplayRole, Qt.ToolTipRole, Qt.TextAlignmentRole, Qt.BackgroundRole}
_RIGHT = int(Qt.AlignRight | Qt.AlignVCenter)
_POSITIVE = QColor(220, 245, 225)
_NEGATIVE = QColor(250, 225, 225)
# Headers of the columns some algorithms' rows add (docs/run-directory.md, `samples`).
_HEADERS = {LABEL: "label", BASELINE: "greedy baseline", TIE: "tie", STEPS: "steps", EPISODE: "episode"}
_HEADER_TIPS = {
    LABEL: "desirable: the update pushes this completion up; undesirable: down (unpaired preference data)",
    BASELINE: "the reward of the greedy completion of the same prompt, the baseline the reward is measured "
              "against (advantage = reward - greedy baseline); hover a cell for its text",
    TIE: "the pair's two completions got the same score: the first sampled was taken as chosen",
    STEPS: "each step's score from the step rewards, in order (several rewards: each after its label); "
           "sorts by the mean of the scores; hover a cell for the list",
    ADVANTAGE: "the advantage the update used (green: pushed up, pink: pushed down)",
    EPISODE: "the multi-turn episode: the model's turns, each tool's calls (×count) and the failed calls; "
             "hover a cell for the whole conversation; sorts by the number of turns",
}
_LEFT_COLUMNS = (LABEL, STEPS, EPISODE)  # words: aligned left, as the texts


def one_line(text: str) -> str:
    """Table cells show text on one line; newlines and tabs become visible marks."""
    return text.replace("\n", "⏎").replace("\t", "→")


class SamplesModel(QAbstractTableModel):
    """Samples of one run, as shown: filtered, then sorted."""

    counts_changed = Signal(int, int)  # shown, total

    def __init__(self, parent=None):
        super().__init__(parent)
        self.store: SampleStore = SampleStore()
        self.columns: list[str] = []
        self.visible = np.empty(0, dtype=np.int64)
        self.filter_text = ""
        self.step_min: int | None = None
        self.step_max: int | None = None
        self.sort_key = STEP  # a column name
        self.descending = True  # newest first
        self._match = np.empty(0, dtype=bool)  # text-filter result per stored row
        self._built: dict[int, Sample] = {}  # rows drawn lately (a repaint asks each cell many times)
        self._columns_for()

    # ---------------------------------------------------------------- sources

    def set_store(self, store: SampleStore) -> None:
        self.beginResetModel()
        self.store = store
        self._built.clear()
        self._match = np.empty(0, dtype=bool)
        self._columns_for()
        self.visible = self._compute()
        self.endResetModel()
        self.counts_changed.emit(len(self.visible), len(self.store))

    def _column_names(self) -> list[str]:
        """The columns: step, prompt, completion, total reward, each component,
        advantage, and those of the keys a run's rows have (the episode and label beside the
        completion, the greedy baseline beside the reward, step scores after the
        components, each reward's advantage after the advantage, tie last)."""
        store = self.store
        return [STEP, PROMPT, COMPLETION, *([EPISODE] if store.has(EPISODE) else []),
                *([LABEL] if store.has(LABEL) else []), REWARD,
                *([BASELINE] if store.has(BASELINE) else []), *[f"rewards/{c}" for c in store.components],
                *([STEPS] if store.has(STEPS) else []), ADVANTAGE, *[COMPONENT_ADVANTAGE + c for c in store.advantage_components],
                *([TIE] if store.has(TIE) else [])]

    def _columns_for(self) -> None:
        self.columns = self._column_names()

    def refresh(self) -> None:
        """Re-apply filter and sort after samples arrived (or the filter changed),
        keeping selected rows selected."""
        if self.columns != self._column_names():
            self.set_store(self.store)  # a new reward component (or key): new columns
            return
        self.layoutAboutToBeChanged.emit()
        self._built.clear()  # a resume may have dropped rows: indices can change meaning
        old_visible = self.visible
        self.visible = self._compute()
        where = np.full(len(self.store), -1, dtype=np.int64)
        where[self.visible] = np.arange(len(self.visible))
        persistent = self.persistentIndexList()
        new = []
        for index in persistent:
            row = index.row()
            target = where[old_visible[row]] if 0 <= row < len(old_visible) else -1
            new.append(self.index(int(target), index.column()) if target >= 0 else QModelIndex())
        self.changePersistentIndexList(persistent, new)
        self.layoutChanged.emit()
        self.counts_changed.emit(len(self.visible), len(self.store))

    # ------------------------------------------------------------ filter, sort

    def set_filter(self, text: str, step_min: int | None, step_max: int | None) -> None:
        text = text.strip().lower()
        if text != self.filter_text:
            self._match = np.empty(0, dtype=bool)
        self.filter_text, self.step_min, self.step_max = text, step_min, step_max
        self.refresh()

    def sort(self, column: int, order: Qt.SortOrder = Qt.AscendingOrder) -> None:
        if 0 <= column < len(self.columns):
            self.sort_key = self.columns[column]
            self.descending = order == Qt.DescendingOrder
            self.refresh()

    def _text_match(self) -> np.ndarray:
        rows = self.store.rows
        if len(self._match) < len(rows):
            needle = self.filter_text
            text = self.store.text
            extra = np.fromiter((needle in text(i, PROMPT).lower() or needle in text(i, COMPLETION).lower()
                                 for i in range(len(self._match), len(rows))), dtype=bool)
            self._match = np.concatenate([self._match, extra])
        return self._match

    def _compute(self) -> np.ndarray:
        n = len(self.store)
        if not n:
            return np.empty(0, dtype=np.int64)
        keep = np.ones(n, dtype=bool)
        steps = self.store.numbers(STEP)
        if self.step_min is not None:
            keep &= steps >= self.step_min
        if self.step_max is not None:
            keep &= steps <= self.step_max
        if self.filter_text:
            keep &= self._text_match()
        rows = np.flatnonzero(keep)
        if self.sort_key in TEXT_COLUMNS:
            texts = [self.store.text(int(i), self.sort_key) for i in rows]
            order = np.array(sorted(range(len(rows)), key=texts.__getitem__, reverse=self.descending), dtype=np.int64)
            return rows[order] if len(order) else rows
        if self.sort_key == STEP:
            # Step, then position in the batch; newest first flips only the steps.
            index = self.store.numbers("index")[rows]
            step = steps[rows]
            order = np.lexsort((index, -step if self.descending else step))
            return rows[order]
        values = self.store.numbers(self.sort_key)[rows]
        values = np.where(np.isfinite(values), values, -np.inf)  # nulls last when descending
        order = np.argsort(-values if self.descending else values, kind="stable")
        return rows[order]

    # ------------------------------------------------------------ Qt model API

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.visible)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.columns)

    def sample(self, row: int) -> Sample | None:
        if 0 <= row < len(self.visible):
            i = int(self.visible[row])
            sample = self._built.get(i)
            if sample is None:
                if len(self._built) > 4096:
                    self._built.clear()
                sample = self._built[i] = self.store.row(i)
            return sample
        return None

    def headerData(self, section, orientation, role=Qt.DisplayRole):
        if orientation == Qt.Horizontal and 0 <= section < len(self.columns):
            name = self.columns[section]
            if role == Qt.DisplayRole:
                if name.startswith(COMPONENT_ADVANTAGE):
                    return f"adv: {name.removeprefix(COMPONENT_ADVANTAGE)}"
                return _HEADERS.get(name) or (name.removeprefix("rewards/") if name.startswith("rewards/") else name)
            if role == Qt.ToolTipRole:
                if name.startswith("rewards/"):
                    return f"reward component {name.removeprefix('rewards/')} (unweighted)"
                if name.startswith(COMPONENT_ADVANTAGE):
                    return (f"the advantage from {name.removeprefix(COMPONENT_ADVANTAGE)} alone: that reward "
                            "normalised within the prompt's group, before the weights (the advantage is their "
                            "weighted sum, normalised over the batch)")
                return _HEADER_TIPS.get(name)
        return None

    def data(self, index: QModelIndex, role=Qt.DisplayRole):
        # The view asks for a dozen roles per cell on every repaint; answer the ones
        # not drawn here before touching the sample.
        if role not in _ROLES:
            return None
        sample = self.sample(index.row())
        if sample is None:
            return None
        name = self.columns[index.column()]
        if role == Qt.DisplayRole:
            if name == STEP:
                return str(sample.step)
            if name in TEXT_COLUMNS:
                return one_line(getattr(sample, name))
            if name in FLAG_COLUMNS:
                return flag_text(name, getattr(sample, name))
            if name == BASELINE and sample.baseline is None:
                return ""
            if name == STEPS:
                return labelled_scores_text(sample.steps) if sample.steps else ""
            if name == EPISODE:
                return episode_summary(sample.episode)
            return _fmt(self._number(sample, name))
        if role == Qt.ToolTipRole:
            if sample.episode is not None and name in (COMPLETION, EPISODE):  # the conversation, not the raw text
                return conversation_text(sample.episode)
            if name in TEXT_COLUMNS:
                return getattr(sample, name)
            if name == STEPS:
                return steps_tooltip(sample.steps) if sample.steps else None
            return baseline_text(sample.baseline) if name == BASELINE else None
        if role == Qt.TextAlignmentRole and name not in TEXT_COLUMNS and name not in _LEFT_COLUMNS:
            return _RIGHT
        if role == Qt.BackgroundRole:
            return self._background(sample, name)
        return None

    def _background(self, sample: Sample, name: str) -> QColor | None:
        """Green or pink where the update pushes the completion up or down: an
        advantage (total or one reward's) by its sign, a label by desirable/undesirable."""
        if name == LABEL and sample.label is not None:
            return _POSITIVE if sample.label else _NEGATIVE
        if name == ADVANTAGE or name.startswith(COMPONENT_ADVANTAGE):
            value = self._number(sample, name)
            if math.isfinite(value) and value:
                return _POSITIVE if value > 0 else _NEGATIVE
        return None

    @staticmethod
    def _number(sample: Sample, name: str) -> float:
        if name == REWARD:
            return sample.reward
        if name == ADVANTAGE:
            return sample.advantage
        if name == BASELINE:
            return sample.baseline_reward
        if name.startswith(COMPONENT_ADVANTAGE):
            value = sample.component_advantages.get(name.removeprefix(COMPONENT_ADVANTAGE))
        else:
            value = sample.rewards.get(name.removeprefix("rewards/"))
        return float(value) if isinstance(value, (int, float)) else math.nan


class SamplesView(QWidget):
    """Filter bar, table and detail pane for the samples of one run.

    `inspect_requested(step, index)`: a sample double-clicked (or *Inspect tokens*), to
    be opened in the trajectory inspector."""

    inspect_requested = Signal(int, int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.run: RunData | None = None
        self._stale = False
        self._throttle = QTimer(self)
        self._throttle.setSingleShot(True)
        self._throttle.timeout.connect(self._apply)
        self.model = SamplesModel(self)
        self.search = QLineEdit()
        self.search.setObjectName("samples-filter")
        self.search.setPlaceholderText("Filter: text in the prompt or completion")
        self.search.setClearButtonEnabled(True)
        self.step_from = QSpinBox()
        self.step_from.setObjectName("samples-step-from")
        self.step_to = QSpinBox()
        self.step_to.setObjectName("samples-step-to")
        for box, text in ((self.step_from, "first"), (self.step_to, "last")):
            box.setRange(-1, 10_000_000)
            box.setValue(-1)
            box.setSpecialValueText(text)  # -1 = no bound
        self.newest = QPushButton("Newest first")
        self.newest.setToolTip("Sort by step, newest at the top (click a column header to sort by it)")
        self.count = QLabel()
        self.inspect_button = QPushButton("Inspect tokens ▸")
        self.inspect_button.setObjectName("samples-inspect")
        self.inspect_button.setToolTip("Open the selected sample in the trajectory inspector (or double-click it)")
        self.inspect_button.setEnabled(False)
        bar = QHBoxLayout()
        bar.addWidget(self.search, 3)
        bar.addWidget(QLabel("steps"))
        bar.addWidget(self.step_from)
        bar.addWidget(QLabel("to"))
        bar.addWidget(self.step_to)
        bar.addWidget(self.newest)
        bar.addWidget(self.count, 1)
        bar.addWidget(self.inspect_button)

        self.table = QTableView()
        self.table.setObjectName("samples-table")
        self.table.setModel(self.model)
        self.table.setSortingEnabled(True)
        self.table.horizontalHeader().setSortIndicator(0, Qt.DescendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setWordWrap(False)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        # Fixed row height: the view never measures 100,000 rows.
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.Fixed)
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
        self.detail = QTextBrowser()
        self.detail.setObjectName("sample-detail")
        self.detail.setPlaceholderText("Select a sample to see its whole prompt and completion; double-click it "
                                       "to see its tokens in the inspector.")
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.detail)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(bar)
        layout.addWidget(split, 1)

        self.search.textChanged.connect(self._filter_changed)
        self.step_from.valueChanged.connect(self._filter_changed)
        self.step_to.valueChanged.connect(self._filter_changed)
        self.newest.clicked.connect(lambda: self.table.sortByColumn(0, Qt.DescendingOrder))
        self.model.counts_changed.connect(self._counts)
        self.table.selectionModel().currentRowChanged.connect(self._show_current)
        self.table.doubleClicked.connect(lambda index: self.inspect_row(index.row()))
        self.inspect_button.clicked.connect(lambda: self.inspect_row(self.table.currentIndex().row()))
        self.model.modelReset.connect(self._sized)
        self._sized()

    def set_run(self, run: RunData | None) -> None:
        """Show this run's samples; the table then follows it (its `updated` signal)."""
        if self.run is not None:
            self.run.updated.disconnect(self._run_updated)
        self.run = run
        if run is not None:
            run.updated.connect(self._run_updated)
        self.detail.clear()
        self._stale = True
        self._apply()

    def _run_updated(self, update) -> None:
        if update.samples or update.rewound:
            self.refresh()

    REFRESH_MS = 500

    def refresh(self) -> None:
        """New samples arrived. Shown, the table takes them at most twice a second (a
        re-laid-out table repaints every cell); hidden, it waits: a long run's samples
        are read only when someone looks at them."""
        self._stale = True
        if self.isVisible() and not self._throttle.isActive():
            self._throttle.start(self.REFRESH_MS)

    def _apply(self) -> None:
        if not self.isVisible():
            return
        store = self.run.samples if self.run is not None else SampleStore()
        if store is not self.model.store:
            self.model.set_store(store)
        else:
            self.model.refresh()
        self._stale = False

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._stale:
            self._apply()

    def show_steps(self, first: int, last: int) -> None:
        """Show the samples of steps first..last only (an alarm's *Show samples*): the
        step range set, the text filter cleared (it would hide some of them)."""
        for box, value in ((self.step_from, first), (self.step_to, last)):
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)
        self.search.blockSignals(True)
        self.search.clear()
        self.search.blockSignals(False)
        self._filter_changed()

    def _filter_changed(self) -> None:
        low, high = self.step_from.value(), self.step_to.value()
        self.model.set_filter(self.search.text(), None if low < 0 else low, None if high < 0 else high)

    def _counts(self, shown: int, total: int) -> None:
        self.count.setText(f"{shown:,} of {total:,} samples" if shown != total else f"{total:,} samples")

    def _sized(self) -> None:
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.Interactive)
        metrics = header.fontMetrics()
        for column, name in enumerate(self.model.columns):
            if name in TEXT_COLUMNS:
                header.resizeSection(column, 320)
            elif name == EPISODE:
                header.resizeSection(column, 250)
            else:
                title = str(self.model.headerData(column, Qt.Horizontal))
                header.resizeSection(column, max(60 if name == "step" else 80, metrics.horizontalAdvance(title) + 24))
        header.setStretchLastSection(False)
        if COMPLETION in self.model.columns:
            header.setSectionResizeMode(self.model.columns.index(COMPLETION), QHeaderView.Stretch)

    def _show_current(self, current: QModelIndex, _previous=None) -> None:
        sample = self.model.sample(current.row())
        self.inspect_button.setEnabled(sample is not None)
        if sample is not None:
            self.detail.setHtml(sample_html(sample))

    def inspect_row(self, row: int) -> None:
        sample = self.model.sample(row)
        if sample is not None:
            self.inspect_requested.emit(sample.step, sample.index)

    def select_row(self, row: int) -> None:
        self.table.selectRow(row)
        self._show_current(self.model.index(row, 0))
