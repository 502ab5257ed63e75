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

from workbench.runs.rundata import RunData
from workbench.inspector.episodes import conversation_text, episode_summary
from workbench.inspector.steps import labelled_scores_text, step_scores, steps_tooltip
from workbench.runs.samples_store import (AFTER_ADVANTAGE, AFTER_COMPONENTS, AFTER_REWARD, AFTER_TEXT,
                                          BASELINE_KIND, EPISODE_KIND, FLAG, LAST, NUMBER_KINDS,
                                          SCORES, STEPS_KIND, Sample, SampleField, SampleStore, _fmt, baseline_text, compact_json,
                                          field_number, field_text, sample_html)

STEP, PROMPT, COMPLETION, REWARD = "step", "prompt", "completion", "reward"
ADVANTAGE = "advantage"
TEXT_COLUMNS = (PROMPT, COMPLETION)
_ROLES = {Qt.DisplayRole, Qt.ToolTipRole, Qt.TextAlignmentRole, Qt.BackgroundRole}
_RIGHT = int(Qt.AlignRight | Qt.AlignVCenter)
_POSITIVE = QColor(220, 245, 225)
_NEGATIVE = QColor(250, 225, 225)
_HEADER_TIPS = {ADVANTAGE: "the advantage the update used (green: pushed up, pink: pushed down)"}
_RIGHT_KINDS = tuple(k for k in NUMBER_KINDS if k not in (FLAG, STEPS_KIND, EPISODE_KIND))  # numbers: aligned right


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
        self.fields: dict[str, tuple[SampleField, str]] = {}  # a field column -> (its field, scores name)
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

    def _field_columns(self) -> dict[str, tuple[SampleField, str]]:
        return {name: (field_, part) for name, field_, part in self.store.field_columns()}

    def _column_names(self) -> list[str]:
        """The columns: step, prompt, completion, total reward, each component,
        advantage (once a row has one: KTO's have none), and one for each sample field
        the run's rows have (declared by the run, or an old run's known keys), each where
        its kind goes: texts, flags and the episode beside the completion, the greedy
        baseline beside the reward, numbers and step scores after the components, scores
        (each reward's advantage) after the advantage, an unknown kind (or the tie) last."""
        by_place: dict[str, list[str]] = {}
        for name, (field_, _part) in self._field_columns().items():
            by_place.setdefault(field_.where, []).append(name)
        at = by_place.get
        # KTO's rows have no advantage: no column of nulls (it comes with the first row that has one)
        advantage = [ADVANTAGE] if len(self.store) and np.isfinite(self.store.numbers(ADVANTAGE)).any() else []
        return [STEP, PROMPT, COMPLETION, *at(AFTER_TEXT, []), REWARD, *at(AFTER_REWARD, []),
                *[f"rewards/{c}" for c in self.store.components], *at(AFTER_COMPONENTS, []), *advantage,
                *at(AFTER_ADVANTAGE, []), *at(LAST, [])]

    def _columns_for(self) -> None:
        self.fields = self._field_columns()
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

    def _sort_text(self, i: int) -> str:
        if self.sort_key in TEXT_COLUMNS:
            return self.store.text(i, self.sort_key)
        field_, _ = self.fields[self.sort_key]
        return field_text(field_, self.store.value(i, field_.key))

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
        sorts_by_text = self.sort_key in self.fields and self.fields[self.sort_key][0].kind not in NUMBER_KINDS
        if self.sort_key in TEXT_COLUMNS or sorts_by_text:
            texts = [self._sort_text(int(i)) for i in rows]
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
            field_, part = self.fields.get(name, (None, ""))
            if role == Qt.DisplayRole:
                if field_ is not None:
                    return f"{field_.header}: {part}" if field_.kind == SCORES else field_.header
                return name.removeprefix("rewards/") if name.startswith("rewards/") else name
            if role == Qt.ToolTipRole:
                if name.startswith("rewards/"):
                    return f"reward component {name.removeprefix('rewards/')} (unweighted)"
                if field_ is not None:
                    return field_.help.replace("{name}", part) or None
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
        field_, part = self.fields.get(name, (None, ""))
        if role == Qt.DisplayRole:
            if name == STEP:
                return str(sample.step)
            if name in TEXT_COLUMNS:
                return one_line(getattr(sample, name))
            if field_ is not None:
                return self._field_display(sample, field_, part)
            return _fmt(self._number(sample, name))
        if role == Qt.ToolTipRole:
            episode = self._episode(sample)
            if episode is not None and name == COMPLETION:  # the conversation, not the raw text
                return conversation_text(episode)
            if name in TEXT_COLUMNS:
                return getattr(sample, name)
            return self._field_tooltip(sample, field_) if field_ is not None else None
        if role == Qt.TextAlignmentRole and name not in TEXT_COLUMNS and (field_ is None
                                                                         or field_.kind in _RIGHT_KINDS):
            return _RIGHT
        if role == Qt.BackgroundRole:
            return self._background(sample, name, field_)
        return None

    @staticmethod
    def _episode(sample: Sample) -> dict | None:
        return next((sample.values[f.key] for f in sample.fields
                     if f.kind == EPISODE_KIND and isinstance(sample.values[f.key], dict)), None)

    def _field_display(self, sample: Sample, field_: SampleField, part: str) -> str:
        """A field's cell by its kind: a flag in its words, step scores and an episode
        summed up, numbers formatted, a text on one line, any other kind as compact JSON."""
        value = sample.values.get(field_.key)
        if value is None:
            return ""
        kind = field_.kind
        if kind == FLAG:
            return field_.word(value)
        if kind == STEPS_KIND:
            scores = step_scores(value)
            return labelled_scores_text(scores) if scores else ""
        if kind == EPISODE_KIND:
            return episode_summary(value)
        if kind in NUMBER_KINDS:
            number = field_number(field_, value, part)
            return "" if kind == BASELINE_KIND and not isinstance(value, dict) else _fmt(
                float(number) if isinstance(number, (int, float)) else math.nan)
        return one_line(field_text(field_, value))

    @staticmethod
    def _field_tooltip(sample: Sample, field_: SampleField) -> str | None:
        value = sample.values.get(field_.key)
        if value is None:
            return None
        kind = field_.kind
        if kind == EPISODE_KIND:
            return conversation_text(value)
        if kind == STEPS_KIND:
            scores = step_scores(value)
            return steps_tooltip(scores) if scores else None
        if kind == BASELINE_KIND:
            return baseline_text(value) or None
        if kind in NUMBER_KINDS:
            return None
        return field_text(field_, value) if isinstance(value, str) else compact_json(value)

    def _background(self, sample: Sample, name: str, field_: SampleField | None) -> QColor | None:
        """Green or pink where the update pushes the completion up or down: the advantage
        by its sign, and a signed field (each reward's advantage by its sign, a label by
        desirable/undesirable)."""
        if field_ is not None and field_.signed and field_.kind == FLAG:
            value = sample.values.get(field_.key)
            return None if not isinstance(value, bool) else _POSITIVE if value else _NEGATIVE
        if name == ADVANTAGE or (field_ is not None and field_.signed):
            value = self._number(sample, name)
            if math.isfinite(value) and value:
                return _POSITIVE if value > 0 else _NEGATIVE
        return None

    def _number(self, sample: Sample, name: str) -> float:
        if name == REWARD:
            return sample.reward
        if name == ADVANTAGE:
            return sample.advantage
        if name in self.fields:
            field_, part = self.fields[name]
            value = field_number(field_, sample.values.get(field_.key), part)
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
            elif name in self.model.fields and self.model.fields[name][0].kind == EPISODE_KIND:
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
