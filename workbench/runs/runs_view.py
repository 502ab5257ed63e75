"""The runs list: every run in the runs folder with its status, opened with a double
click; two or more selected can be compared."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QAbstractTableModel, QItemSelectionModel, QModelIndex, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QMenu,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.runs.lineage import algorithm_label, has_complete_checkpoint, is_reward_model_run, strip_stamp
from workbench.runs.status import resume_problem
from workbench.runs.labels import MISSING, SEPARATOR, differing_fields
from workbench.runs.rundata import format_duration
from workbench.runs.runs_reader import BACKGROUND_FROM, RunsReader
from workbench.runs.summaries import RunIndex, RunSummary
from workbench.setup.schema import format_value

STATUS_COLOURS = {
    "running": "#1565c0", "starting": "#1565c0", "done": "#1e7e34", "stopped": "#8a6d00",
    "failed": "#b00020", "interrupted": "#b00020", "stale": "#c75000",
}
START_POLICY = "Start a policy from this run"
USE_AS_REWARD_MODEL = "Use as reward model"
# The model is the algorithm column's tool tip (and in the label when it differs from the preset's).
COLUMNS = ("name", "status", "accuracy", "steps", "time", "algorithm", "started", "family")
NUMERIC = ("accuracy", "steps", "time")
COLUMN_TIPS = {
    "name": "The run's preset and the fields that differ from it, or the name typed at Run (its folder in the "
            "tool tip)",
    "accuracy": "Held-out accuracy at the first evaluation → the last (a click sorts by the last)",
    "time": "From the run's first event to its last",
}
SORT_ROLE = Qt.UserRole + 1  # what a column sorts by: numbers for the numeric columns


def format_started(timestamp: float | None) -> str:
    if not timestamp:
        return ""
    return time.strftime("%m-%d %H:%M", time.localtime(timestamp))  # the year: in the folder's name


def accuracy_text(accuracy: tuple[float | None, float | None]) -> str:
    """Held-out accuracy from the first evaluation to the last.

    >>> accuracy_text((0.1, 0.52)), accuracy_text((None, 0.5)), accuracy_text((0.1, 0.1)), accuracy_text((None, None))
    ('0.10 → 0.52', '0.50', '0.10', '')
    """
    start, last = accuracy
    if last is None:
        return ""
    if start is None or start == last:
        return f"{last:.2f}"
    return f"{start:.2f} → {last:.2f}"


def sort_key(run: RunSummary, column: str):
    """What `column` sorts `run` by: a number for accuracy (the last), steps and time
    (None: the run has none, listed last); text otherwise."""
    if column == "accuracy":
        return run.accuracy[1]
    if column == "steps":
        return run.step
    if column == "time":
        return run.seconds
    if column == "started":
        return run.started or 0.0
    return str(RunsModel.text(run, column)).lower()


def sorted_runs(runs: list[RunSummary], column: str, descending: bool) -> list[RunSummary]:
    """`runs` sorted by `column`; runs without a value (no evaluation yet) last either way."""
    known = [r for r in runs if sort_key(r, column) is not None]
    unknown = [r for r in runs if sort_key(r, column) is None]
    return sorted(known, key=lambda r: sort_key(r, column), reverse=descending) + unknown


class RunsModel(QAbstractTableModel):
    """The runs, in the order of the column sorted on (newest first until one is clicked)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.runs: list[RunSummary] = []
        self.sorting: tuple[str, bool] = ("started", True)  # (column, descending)
        self._shown: dict[Path, tuple] = {}  # what each run's row showed (the summaries change in place)

    @staticmethod
    def shown(run: RunSummary) -> tuple:
        """All a row shows: its cells, colour and tool tips."""
        return (*(RunsModel.text(run, c) for c in COLUMNS), run.note, run.model, run.family_tooltip,
                run.label.detail if run.label is not None else "")

    def set_runs(self, runs: list[RunSummary]) -> None:
        """Only the rows whose runs show something new are redrawn (each cell ~25 us, widths
        measured again: redrawing all made the timer's refresh of 300 runs take 0.4 s)."""
        runs = sorted_runs(runs, *self.sorting)
        shown = {run.path: self.shown(run) for run in runs}
        if [r.path for r in runs] == [r.path for r in self.runs]:
            changed = [row for row, run in enumerate(runs) if shown[run.path] != self._shown.get(run.path)]
            self.runs, self._shown = runs, shown
            if changed:
                self.dataChanged.emit(self.index(min(changed), 0), self.index(max(changed), len(COLUMNS) - 1))
            return
        self.beginResetModel()
        self.runs, self._shown = runs, shown
        self.endResetModel()

    def sort(self, column: int, order=Qt.AscendingOrder) -> None:  # noqa: A003 (Qt's name)
        """A click on a column's header (QTableView.setSortingEnabled): the rows move, the
        selection moves with them."""
        self.layoutAboutToBeChanged.emit()
        self.sorting = (COLUMNS[column], order == Qt.DescendingOrder)
        before = {id(run): row for row, run in enumerate(self.runs)}
        self.runs = sorted_runs(self.runs, *self.sorting)
        after = {before[id(run)]: row for row, run in enumerate(self.runs)}
        old = self.persistentIndexList()
        self.changePersistentIndexList(old, [self.index(after[i.row()], i.column()) if i.row() in after else
                                             QModelIndex() for i in old])
        self.layoutChanged.emit()

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.runs)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):
        if orientation == Qt.Horizontal and role == Qt.DisplayRole:
            return COLUMNS[section]
        if orientation == Qt.Horizontal and role == Qt.ToolTipRole:
            return COLUMN_TIPS.get(COLUMNS[section])
        return None

    @staticmethod
    def text(run: RunSummary, column: str) -> str:
        if column == "name":
            return run.title
        if column == "algorithm":
            return algorithm_label(run.algorithm)
        if column == "status":
            return run.status
        if column == "steps":
            return f"{run.step} / {run.max_steps}" if run.max_steps else str(run.step)
        if column == "accuracy":
            return accuracy_text(run.accuracy)
        if column == "time":
            return format_duration(run.seconds) if run.seconds is not None else ""
        if column == "started":
            return format_started(run.started)
        if column == "family":
            return run.family
        return ""

    def data(self, index: QModelIndex, role=Qt.DisplayRole):
        if not index.isValid() or index.row() >= len(self.runs):
            return None
        run = self.runs[index.row()]
        column = COLUMNS[index.column()]
        if role == Qt.DisplayRole:
            return self.text(run, column)
        if role == SORT_ROLE:
            return sort_key(run, column)
        if role == Qt.ForegroundRole and column == "status":
            return QColor(STATUS_COLOURS.get(run.status, "#333"))
        if role == Qt.ToolTipRole:
            if column == "family" and run.family_tooltip:
                return run.family_tooltip
            if column == "algorithm":
                return f"{algorithm_label(run.algorithm)} on {run.model}" if run.model else None
            if column == "name":
                detail = run.label.detail if run.label is not None else ""
                return "\n".join(part for part in (run.title, f"folder {run.name}" if run.name != run.title else "",
                                                    detail) if part)
            return run.note or str(run.path)
        if role == Qt.TextAlignmentRole and column in NUMERIC:
            return int(Qt.AlignRight | Qt.AlignVCenter)
        return None


class RunsView(QWidget):
    """Signals: open_requested(path), compare_requested([paths]), preset_requested(path),
    fork_requested(path), export_requested(path), resume_requested(path), folder_changed(path),
    start_from_requested(path) (a new policy from the run's adapter), reward_model_requested(path)
    (the reward-model run as a reward of the set-up form's preset); runs_changed() (`runs` or
    `reader.reading` changed: the start page's recent runs follow them)."""

    open_requested = Signal(Path)
    compare_requested = Signal(list)
    preset_requested = Signal(Path)
    fork_requested = Signal(Path)
    export_requested = Signal(Path)
    resume_requested = Signal(Path)
    folder_changed = Signal(Path)
    start_from_requested = Signal(Path)
    reward_model_requested = Signal(Path)
    runs_changed = Signal()

    def __init__(self, folder: Path, parent=None):
        super().__init__(parent)
        self.index = RunIndex(folder)
        self.runs: list[RunSummary] = []  # the last scan's, newest first
        self._wanted: list[Path] = []  # runs selected (select_paths) while their folder was being read
        self.reader = RunsReader(self, self._read)
        self.model = RunsModel(self)
        self.folder_label = QLabel()
        self.folder_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        change = QPushButton("Change…")
        change.setToolTip("Choose the folder new runs are written to and runs are listed from")
        refresh = QPushButton("Refresh")
        top = QHBoxLayout()
        top.addWidget(QLabel("Runs folder:"))
        top.addWidget(self.folder_label, 1)
        top.addWidget(change)
        top.addWidget(refresh)
        self.table = QTableView()
        self.table.setObjectName("runs-table")
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.ExtendedSelection)
        self.table.verticalHeader().hide()
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)  # an elided family stays on one line (its tooltip says it all)
        header = self.table.horizontalHeader()
        # Newest first until a column's header is clicked (sorted by that column, again: reversed).
        header.setSortIndicator(COLUMNS.index("started"), Qt.DescendingOrder)
        self.table.setSortingEnabled(True)
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        # The family at a set width, elided (its tooltip says it all): sized to its
        # contents, one fork's "fork of <a whole run name> @ step N" took the names' room.
        header.setSectionResizeMode(COLUMNS.index("family"), QHeaderView.Interactive)
        header.resizeSection(COLUMNS.index("family"),
                             self.fontMetrics().horizontalAdvance("fork of grpo-sort @ step 100"))

        self.open_button = QPushButton("Open")
        self.compare_button = QPushButton("Compare selected")
        self.compare_button.setToolTip("Overlay the curves of the selected runs (select two or more with Ctrl/Shift)")
        self.preset_button = QPushButton("Load its preset into Set-up")
        self.fork_button = QPushButton("Fork from here…")
        self.fork_button.setToolTip("A new run from one of this run's checkpoints, with settings changed")
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Export this run: a checkpoint's LoRA adapter, a merged model, or its "
                                      "metrics as TensorBoard events")
        self.resume_button = QPushButton("Resume")
        self.resume_button.setObjectName("runs-resume")
        self.hint = QLabel("Double-click a run to open it; select two or more and Compare.")
        self.hint.setStyleSheet("color:#5f6368")
        self.hint.setWordWrap(True)  # wraps rather than holding the window wider than a 1024 px screen
        buttons = QHBoxLayout()
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.resume_button)
        buttons.addWidget(self.compare_button)
        buttons.addWidget(self.preset_button)
        buttons.addWidget(self.fork_button)
        buttons.addWidget(self.export_button)
        buttons.addWidget(self.hint, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(top)
        layout.addWidget(self.reader.label)  # "Reading 300 runs…" while they are read
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)

        change.clicked.connect(self._choose_folder)
        refresh.clicked.connect(self.refresh)
        self.table.doubleClicked.connect(lambda index: self.open_requested.emit(self.model.runs[index.row()].path))
        self.compare_button.clicked.connect(self._compare)
        for button, signal in ((self.open_button, self.open_requested), (self.preset_button, self.preset_requested),
                               (self.fork_button, self.fork_requested), (self.export_button, self.export_requested),
                               (self.resume_button, self.resume_requested)):
            button.clicked.connect(lambda _checked=False, s=signal: self._for_one(s))
        self.table.setContextMenuPolicy(Qt.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._update_buttons())
        self.set_folder(folder)

    def set_folder(self, folder: Path) -> None:
        self.reader.cancel()  # a read of the folder left: stopped, its result dropped
        self.index = RunIndex(folder)
        self.folder_label.setText(str(folder))
        self.runs, self._wanted = [], []
        self.model.set_runs([])  # the old folder's runs go at once, even while the new one is read
        self.refresh()

    def _choose_folder(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "Runs folder", str(self.index.folder))
        if chosen:
            self.set_folder(Path(chosen))
            self.folder_changed.emit(Path(chosen))

    def refresh(self) -> None:
        """Scan the runs folder and show its runs. BACKGROUND_FROM or more runs never read
        (the window's start, another folder) are read on a worker (runs_reader.py) and the
        list fills when they are; a refresh meanwhile does nothing."""
        unread = [] if self.reader.reading else self.index.unread()
        if len(unread) >= BACKGROUND_FROM:
            self.reader.start(self.index, unread)
            self.runs_changed.emit()
        elif not self.reader.reading:
            self._show(self.index.scan())

    def _read(self, index: RunIndex) -> None:
        if index is self.index:  # the worker's read is in the index: a scan of a few stats a run
            self._show(index.scan())  # (not refresh(): runs new since are read here, however many)

    def _show(self, runs: list[RunSummary]) -> None:
        selected = set(self.selected_paths()) | set(self._wanted)
        self.runs, self._wanted = runs, []
        self.model.set_runs(runs)
        if selected and set(self.selected_paths()) != selected:
            self.select_paths(list(selected))
        self._update_buttons()
        self.runs_changed.emit()

    def selected_paths(self) -> list[Path]:
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        return [self.model.runs[r].path for r in rows if r < len(self.model.runs)]

    def select_paths(self, paths: list[Path]) -> None:
        """Select these runs; while the folder is being read, they are selected once it is."""
        if self.reader.reading:
            self._wanted = [Path(p) for p in paths]
        selection = self.table.selectionModel()
        selection.clearSelection()
        wanted = {Path(p).resolve() for p in paths}
        for row, run in enumerate(self.model.runs):
            if run.path.resolve() in wanted:
                selection.select(self.model.index(row, 0),
                                 QItemSelectionModel.Select | QItemSelectionModel.Rows)

    def summary(self, path: Path) -> RunSummary | None:
        return next((r for r in self.model.runs if r.path.resolve() == Path(path).resolve()), None)

    def _update_buttons(self) -> None:
        count = len(self.selected_paths())
        self.open_button.setEnabled(count == 1)
        self.preset_button.setEnabled(count == 1)
        self.fork_button.setEnabled(count == 1)
        self.export_button.setEnabled(count == 1)
        self.compare_button.setEnabled(count >= 2)
        self._update_resume()

    def _update_resume(self) -> None:
        """Resume: for one selected run that ended early (from its last checkpoint, or
        from step 0 when it has none); else greyed out, with the reason as its tool tip."""
        paths = self.selected_paths()
        summary = self.summary(paths[0]) if len(paths) == 1 else None
        problem = "select one run" if summary is None else resume_problem(summary.path, summary.status)
        self.resume_button.setEnabled(problem is None)
        self.resume_button.setToolTip("Continue the run in its folder from its last checkpoint (from step 0 "
                                      "when it has none)" if problem is None else f"Resume is not possible: {problem}")

    def _compare(self) -> None:
        paths = self.selected_paths()
        if len(paths) >= 2:
            self.compare_requested.emit(paths)

    def _for_one(self, signal) -> None:
        """A button for one run (Open, Resume, Load its preset, Fork, Export): `signal` with it."""
        paths = self.selected_paths()
        if len(paths) == 1:
            signal.emit(paths[0])

    def context_menu(self, row: int) -> QMenu:
        """The menu of a run's row: Open, Resume, Fork from here…, Export…, Load its preset,
        and the next stage of a pipeline: Start a policy from this run (a run that trained
        a policy), or Use as reward model (a reward-model run)."""
        run = self.model.runs[row]
        path = run.path
        menu = QMenu(self)
        menu.setToolTipsVisible(True)  # why an action is greyed out
        menu.addAction("Open", lambda: self.open_requested.emit(path))
        problem = resume_problem(path, run.status)
        resume = menu.addAction("Resume", lambda: self.resume_requested.emit(path))
        resume.setEnabled(problem is None)
        resume.setToolTip(f"Resume is not possible: {problem}" if problem else
                          "Continue from its last checkpoint (from step 0 when it has none)")
        menu.addAction("Fork from here…", lambda: self.fork_requested.emit(path))
        menu.addAction("Export…", lambda: self.export_requested.emit(path))
        menu.addAction("Load its preset into Set-up", lambda: self.preset_requested.emit(path))
        menu.addSeparator()
        self._add_pipeline_action(menu, run)
        return menu

    def _add_pipeline_action(self, menu: QMenu, run: RunSummary) -> None:
        """The pipeline's next stage from this run, enabled once the run has a complete
        checkpoint (what the next run loads); greyed out, with the reason, before."""
        path = run.path
        if is_reward_model_run(path):
            action = menu.addAction(USE_AS_REWARD_MODEL, lambda: self.reward_model_requested.emit(path))
            action.setToolTip("Add this reward model to the rewards of the preset in Set-up")
        else:
            action = menu.addAction(START_POLICY, lambda: self.start_from_requested.emit(path))
            action.setToolTip("Set the preset in Set-up to start from this run's adapter (model.start_from) on its "
                              "base model")
        if not has_complete_checkpoint(path):
            action.setEnabled(False)
            action.setToolTip(f"{run.name} has no complete checkpoint yet (one is saved every training.save_steps "
                              "steps and when a run ends or is stopped)")

    def _context_menu(self, pos) -> None:
        index = self.table.indexAt(pos)
        if index.isValid() and index.row() < len(self.model.runs):
            self.context_menu(index.row()).exec(self.table.viewport().mapToGlobal(pos))


def short_names(names: list[str]) -> list[str]:
    """Run names without the launch time stamp, where that keeps them apart.

    >>> short_names(["grpo-sort-20261121-014143", "grpo-kl-20261121-020013"])
    ['grpo-sort', 'grpo-kl']
    >>> short_names(["a-20261121-014143", "a-20261121-020013"])
    ['a-20261121-014143', 'a-20261121-020013']
    """
    short = [strip_stamp(n) for n in names]
    return short if len(set(short)) == len(short) else list(names)


def header_text(label: str) -> str:
    """A run's label as a column header: the preset over what differs, so a column is
    as wide as its longest part, not the whole label.

    >>> header_text("grpo-sort · lr 3e-4, beta 0.04")
    'grpo-sort\\nlr 3e-4\\nbeta 0.04'
    """
    base, _, rest = label.partition(SEPARATOR)
    return "\n".join([base] + [part.strip() for part in rest.split(", ") if part.strip()])


CELL_CHARS = 28  # a longer value (a path) is cut, whole in its tool tip: no column runs off the table


class DifferencesTable(QTableWidget):
    """The preset fields that differ between compared runs, one column per run in the
    run's colour, headed by the run's label. `needed_width()`, `needed_height()`: what
    shows it whole."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("differences")
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.verticalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.setAlternatingRowColors(True)

    def show_runs(self, names: list[str], presets: list[dict], colours: list[str],
                  labels: list[str] | None = None) -> list[tuple[str, list]]:
        rows = differing_fields(presets)
        self.clear()
        self.setColumnCount(len(names))
        self.setRowCount(max(1, len(rows)))
        titles = [header_text(label) for label in labels] if labels else short_names(names)
        for column, (name, title, colour) in enumerate(zip(names, titles, colours)):
            item = QTableWidgetItem(title)
            item.setToolTip(name if not labels else f"{labels[column]}\n{name}")
            item.setForeground(QColor(colour))
            self.setHorizontalHeaderItem(column, item)
        if not rows:
            self.setVerticalHeaderItem(0, QTableWidgetItem(""))
            self.setItem(0, 0, QTableWidgetItem("(the presets are identical)"))
            return rows
        for row, (path, values) in enumerate(rows):
            self.setVerticalHeaderItem(row, QTableWidgetItem(path))
            for column, value in enumerate(values):
                text = value if value is MISSING else format_value(value)
                item = QTableWidgetItem(text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…")
                item.setToolTip(text)
                self.setItem(row, column, item)
        return rows

    def needed_width(self) -> int:
        """The width that shows every column whole: the field names, each run's column,
        the frame and a vertical scroll bar."""
        self.resizeColumnsToContents()
        columns = sum(self.columnWidth(c) for c in range(self.columnCount()))
        return (self.verticalHeader().sizeHint().width() + columns + 2 * self.frameWidth()
                + self.verticalScrollBar().sizeHint().width() + 4)

    def needed_height(self) -> int:
        """The height that shows every row: the runs' headers, each field, the frame and a
        horizontal scroll bar."""
        self.resizeRowsToContents()
        rows = sum(self.rowHeight(r) for r in range(self.rowCount()))
        return (self.horizontalHeader().sizeHint().height() + rows + 2 * self.frameWidth()
                + self.horizontalScrollBar().sizeHint().height())
