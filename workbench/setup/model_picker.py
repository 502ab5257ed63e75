"""Dialogs that list what the local Hugging Face cache already holds, to pick a model
(`ModelPicker`) or a data set (`DatasetPicker`) by its hub id instead of typing it.

The cache is read by engine.hub.cache (safetensors headers only, no torch); on a big
cache that takes a while, so the scan runs on a worker thread (through
workbench.setup.background) while the dialog says "Scanning…".
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.hub.cache import (
    CachedDataset,
    CachedModel,
    cached_datasets,
    cached_models,
    human_count,
    human_size,
    hub_cache_dir,
)
from workbench.setup.background import submit as submit_in_background

GREY = QColor("#9aa0a6")
SORT_ROLE = Qt.UserRole + 1  # what a column sorts by (sizes as numbers, not as text)


class _Item(QTableWidgetItem):
    """A cell that sorts by its SORT_ROLE value when it has one."""

    def __init__(self, text: str, sort_key: Any = None):
        super().__init__(text)
        self.setData(SORT_ROLE, text.lower() if sort_key is None else sort_key)

    def __lt__(self, other: QTableWidgetItem) -> bool:
        mine, theirs = self.data(SORT_ROLE), other.data(SORT_ROLE)
        if type(mine) is type(theirs):
            return mine < theirs
        return str(mine) < str(theirs)


class CachePicker(QDialog):
    """A table of cached repos, one per row; OK (or a double click) on a usable row
    accepts, and `chosen()` is its repo id. Subclasses say what is listed."""

    scanned = Signal()  # the table is filled (tests wait on it)

    TITLE = ""
    KIND = ""  # "models", "data sets": used in messages
    COLUMNS: list[str] = []
    DOWNLOAD_HINT = ""

    def __init__(self, parent: QWidget | None = None, cache_dir: str | Path | None = None):
        super().__init__(parent)
        self.setWindowTitle(self.TITLE)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else hub_cache_dir()
        self.entries: list = []
        self.scanning = True
        self.message = QLabel(f"Scanning {self.cache_dir}…", self)
        self.message.setObjectName("cache-picker-message")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.table = QTableWidget(0, len(self.COLUMNS), self)
        self.table.setObjectName("cache-picker-table")
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel, self)
        self.ok_button = self.buttons.button(QDialogButtonBox.Ok)
        self.ok_button.setEnabled(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.message)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.buttons)
        self.resize(900, 420)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.cellDoubleClicked.connect(self._double_clicked)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hub-cache-scan")
        submit_in_background(self._executor, partial(type(self).scan, self.cache_dir), self, self._on_scanned)

    # ------------------------------------------------------------ for subclasses

    @staticmethod
    def scan(cache_dir: Path) -> list:
        raise NotImplementedError

    def cells(self, entry) -> list[_Item]:
        raise NotImplementedError

    def why_not(self, entry) -> str | None:
        """Why `entry` cannot be chosen (shown as its tooltip), or None."""
        return entry.problem

    # ------------------------------------------------------------------- filling

    def _on_scanned(self, future: Future) -> None:
        self._executor.shutdown(wait=False)
        self.scanning = False
        try:
            entries = future.result()
        except Exception as exc:  # engine.hub.cache tolerates bad repos; this is a bug, shown as such
            self.message.setText(f"Could not read the Hugging Face cache at {self.cache_dir}: "
                                 f"{type(exc).__name__}: {exc}")
            self.scanned.emit()
            return
        self.show_entries(entries)
        self.scanned.emit()

    def show_entries(self, entries: list) -> None:
        self.entries = list(entries)
        self.table.setSortingEnabled(False)  # rows must stay where they are put while filling
        self.table.setRowCount(len(self.entries))
        for row, entry in enumerate(self.entries):
            reason = self.why_not(entry)
            for column, item in enumerate(self.cells(entry)):
                item.setData(Qt.UserRole, entry.repo_id)
                if reason is not None:
                    # Greyed and not selectable; the reason on hover.
                    item.setFlags(Qt.NoItemFlags)
                    item.setForeground(QBrush(GREY))
                    item.setToolTip(reason)
                self.table.setItem(row, column, item)
        self.table.setSortingEnabled(True)
        self.table.sortItems(0)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.message.setText(self._summary())

    def _summary(self) -> str:
        if not self.entries:
            return (f"No {self.KIND} in the Hugging Face cache. Looked in {self.cache_dir} "
                    f"(set HF_HOME or HF_HUB_CACHE to look elsewhere).\n{self.DOWNLOAD_HINT}")
        unusable = sum(1 for entry in self.entries if self.why_not(entry) is not None)
        kind = self.KIND if len(self.entries) != 1 else self.KIND.removesuffix("s")
        text = f"{len(self.entries)} {kind} in {self.cache_dir}."
        if unusable:
            text += f" {unusable} greyed out cannot be chosen: hover one to see why."
        return text

    # ----------------------------------------------------------------- choosing

    def choosable(self, repo_id: str) -> bool:
        return any(e.repo_id == repo_id and self.why_not(e) is None for e in self.entries)

    def select(self, repo_id: str) -> bool:
        """Select the row of `repo_id` (as a click does); False when it cannot be chosen."""
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item.data(Qt.UserRole) == repo_id and item.flags() & Qt.ItemIsSelectable:
                self.table.selectRow(row)
                return True
        return False

    def chosen(self) -> str | None:
        """The repo id of the selected row, when it can be chosen."""
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        repo_id = self.table.item(rows[0].row(), 0).data(Qt.UserRole)
        return repo_id if self.choosable(repo_id) else None

    def _selection_changed(self) -> None:
        self.ok_button.setEnabled(self.chosen() is not None)

    def _double_clicked(self, row: int, _column: int) -> None:
        repo_id = self.table.item(row, 0).data(Qt.UserRole)
        if self.choosable(repo_id):
            self.table.selectRow(row)
            self.accept()

    def accept(self) -> None:
        if self.chosen() is not None:  # Enter with nothing (usable) selected does nothing
            super().accept()


class ModelPicker(CachePicker):
    """Models in the cache; only complete causal language models can be chosen."""

    TITLE = "Models in the local Hugging Face cache"
    KIND = "models"
    COLUMNS = ["Repo id", "Size", "Architecture", "Parameters", "Chat template", "Context length"]
    DOWNLOAD_HINT = ("Download one from a terminal:  hf download Qwen/Qwen2.5-0.5B-Instruct\n"
                     "(with huggingface_hub older than 1.0:  huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct)")

    @staticmethod
    def scan(cache_dir: Path) -> list[CachedModel]:
        return cached_models(cache_dir)

    def why_not(self, entry: CachedModel) -> str | None:
        if entry.problem is not None:
            return entry.problem
        if not entry.is_causal_lm:
            return (f"not a causal LM: {entry.architecture or 'this model'} does not generate text, "
                    "and RL here trains text generators (…ForCausalLM)")
        return None

    def cells(self, entry: CachedModel) -> list[_Item]:
        architecture = entry.architecture or "?"
        if entry.problem is None and not entry.is_causal_lm:
            architecture += " (not a causal LM)"
        parameters = entry.parameters
        return [
            _Item(entry.repo_id),
            _Item(human_size(entry.size_on_disk), entry.size_on_disk),
            _Item(architecture),
            _Item(human_count(parameters) if parameters is not None else "?", parameters or 0),
            _Item("yes" if entry.has_chat_template else "no"),
            _Item(f"{entry.context_length:,}" if entry.context_length else "?", entry.context_length or 0),
        ]


class DatasetPicker(CachePicker):
    """Data sets in the cache (hub data sets, e.g. openai/gsm8k)."""

    TITLE = "Data sets in the local Hugging Face cache"
    KIND = "data sets"
    COLUMNS = ["Repo id", "Size", "Subsets", "Files"]
    DOWNLOAD_HINT = ("Download one from a terminal:  hf download --repo-type dataset openai/gsm8k\n"
                     "(with huggingface_hub older than 1.0:  "
                     "huggingface-cli download --repo-type dataset openai/gsm8k)")

    @staticmethod
    def scan(cache_dir: Path) -> list[CachedDataset]:
        return cached_datasets(cache_dir)

    def cells(self, entry: CachedDataset) -> list[_Item]:
        return [
            _Item(entry.repo_id),
            _Item(human_size(entry.size_on_disk), entry.size_on_disk),
            _Item(", ".join(entry.subsets) or "?"),
            _Item(str(entry.files), entry.files),
        ]


# ------------------------------------------------------------- in the set-up form


def add_cache_button(editor: QWidget, picker_class: type[CachePicker]) -> QPushButton | None:
    """A "Cached…" button right after a text field's line, or first on its row of buttons
    (the model's); None for an editor without a line. The caller connects it."""
    buttons = getattr(editor, "buttons_", None)
    line_layout = getattr(editor, "layout_", None)
    if line_layout is None:
        return None
    button = QPushButton("Cached…", editor)
    button.setObjectName(f"cached:{editor.spec.path}")
    button.setToolTip(f"Choose one of the {picker_class.KIND} already in the local Hugging Face cache")
    if buttons is not None:
        buttons.insertWidget(0, button)
    else:
        line_layout.insertWidget(1, button)
    return button


def type_into(editor: QWidget, text: str | None) -> None:
    """Put `text` in a text field's line and report it, as Folder… does: the document,
    the validation and the preview then follow as after typing."""
    if text is None or not hasattr(editor, "line"):
        return
    editor.line.setText(text)
    editor.report()
