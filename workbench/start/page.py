"""The start page: the bundled experiments as cards, grouped by what they teach
(presets/catalog.yml), each with Open and Run; recent runs and recent presets beside.

The page only says what was asked (its signals); workbench/start/controller.py loads the
preset, starts the run or opens the folder through the window's own controllers.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from workbench.start.catalog import Catalog, CatalogError, Entry, missing_entries

CARD_COLUMNS = 2
RECENT_RUNS = 8
SIDE_WIDTH = 260  # the recent lists' column: run names (preset-YYYYmmdd-HHMMSS) read whole

INTRO = ("<b>Pick an experiment.</b> Each trains the built-in model on a CPU in a minute or two. "
         "<i>Open</i> loads it into Set-up to read or change it; <i>Run</i> starts it at once and shows the "
         "Dashboard. Help ▸ Start page brings this page back; Help ▸ Documentation has the docs.")


def _label(text: str, name: str = "") -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setTextFormat(Qt.RichText if "<" in text else Qt.PlainText)
    if name:
        label.setObjectName(name)
    return label


class Card(QFrame):
    """One bundled preset: its name and description, the paragraph, the measured result,
    what to look at, and Open and Run."""

    def __init__(self, entry: Entry, description: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.entry = entry
        self.setObjectName(f"card-{entry.preset}")
        self.setFrameShape(QFrame.StyledPanel)
        layout = QVBoxLayout(self)
        title = _label(f"<b>{entry.preset}</b>")
        title.setToolTip(description)  # the preset's own one line; the paragraph says more
        layout.addWidget(title)
        layout.addWidget(_label(entry.paragraph, "paragraph"))
        layout.addWidget(_label(f"<b>Measured:</b> {entry.result_text}", "result"))
        layout.addWidget(_label(f"<b>Once it runs, look at</b> {entry.look_at}", "look-at"))
        layout.addStretch(1)
        row = QHBoxLayout()
        self.open_button = QPushButton("Open")
        self.open_button.setToolTip(f"Load presets/{entry.preset}.yaml into Set-up (an untitled copy)")
        self.run_button = QPushButton("Run")
        self.run_button.setToolTip(f"Load presets/{entry.preset}.yaml and start it, as the Run button does")
        row.addStretch(1)
        row.addWidget(self.open_button)
        row.addWidget(self.run_button)
        layout.addLayout(row)


class StartPage(QWidget):
    """Signals: `open_requested(preset path)`, `run_requested(preset path)`,
    `run_folder_requested(run folder)`, `preset_file_requested(preset path)`."""

    open_requested = Signal(Path)
    run_requested = Signal(Path)
    run_folder_requested = Signal(Path)
    preset_file_requested = Signal(Path)

    def __init__(self, load_catalog, presets: list[Path], parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("start-page")
        self.cards: dict[str, Card] = {}
        self._paths = {p.stem: p for p in presets}

        cards = QWidget()
        self.cards_layout = QVBoxLayout(cards)
        self.cards_layout.addWidget(_label(INTRO, "intro"))
        try:
            catalog = load_catalog()
        except CatalogError as exc:
            problems = "".join(f"<br>• {p}" for p in exc.problems)
            self.cards_layout.addWidget(_label(f"<b>{exc.path} cannot be used:</b>{problems}", "catalog-problem"))
        else:
            self._add_cards(catalog, presets)
        self.cards_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        scroll.setFrameShape(QFrame.NoFrame)
        scroll.setWidget(cards)

        side = QWidget()
        side.setMaximumWidth(SIDE_WIDTH)
        side_layout = QVBoxLayout(side)
        side_layout.setContentsMargins(0, 0, 0, 0)
        self.recent_runs = QListWidget()
        self.recent_runs.setObjectName("recent-runs")
        self.recent_runs.setToolTip("Double-click (or Return) to show the run")
        self.recent_presets = QListWidget()
        self.recent_presets.setObjectName("recent-presets")
        self.recent_presets.setToolTip("Double-click (or Return) to open the preset in Set-up")
        for title, widget in (("<b>Recent runs</b>", self.recent_runs), ("<b>Recent presets</b>", self.recent_presets)):
            side_layout.addWidget(_label(title))
            side_layout.addWidget(widget, 1)
        self.recent_runs.itemActivated.connect(lambda item: self._activated(item, self.run_folder_requested))
        self.recent_presets.itemActivated.connect(lambda item: self._activated(item, self.preset_file_requested))

        layout = QHBoxLayout(self)
        layout.addWidget(scroll, 1)
        layout.addWidget(side)

    def _add_cards(self, catalog: Catalog, presets: list[Path]) -> None:
        missing = missing_entries(catalog, presets)
        if missing:  # a preset added without its card still reaches the user, through the Bundled menu
            self.cards_layout.addWidget(_label(f"Not in presets/catalog.yml (File ▸ Bundled Presets has them): "
                                               f"{', '.join(missing)}", "catalog-missing"))
        for group in catalog.groups:
            entries = [e for e in catalog.in_group(group.key) if e.preset in self._paths]
            if not entries:
                continue
            self.cards_layout.addWidget(_label(f"<h3>{group.title}</h3>{group.teaches}", f"group-{group.key}"))
            grid = QGridLayout()
            for i, entry in enumerate(entries):
                card = Card(entry, preset_description(self._paths[entry.preset]))
                path = self._paths[entry.preset]
                card.open_button.clicked.connect(lambda _c=False, p=path: self.open_requested.emit(p))
                card.run_button.clicked.connect(lambda _c=False, p=path: self.run_requested.emit(p))
                grid.addWidget(card, i // CARD_COLUMNS, i % CARD_COLUMNS)
                self.cards[entry.preset] = card
            for column in range(CARD_COLUMNS):
                grid.setColumnStretch(column, 1)
            self.cards_layout.addLayout(grid)

    @staticmethod
    def _activated(item: QListWidgetItem, signal) -> None:
        path = item.data(Qt.UserRole)
        if path:
            signal.emit(Path(path))

    def set_recent(self, runs: list[tuple[str, str, Path]], presets: list[str], waiting: str = "") -> None:
        """`runs`: (name, a line about it, folder), newest first; `presets`: paths, the latest first;
        `waiting`: what the runs list says while no runs are known yet ("Reading 300 runs…")."""
        self.recent_runs.clear()
        for name, about, folder in runs[:RECENT_RUNS]:
            item = QListWidgetItem(f"{name}\n  {about}" if about else name)
            item.setData(Qt.UserRole, str(folder))
            item.setToolTip(str(folder))
            self.recent_runs.addItem(item)
        if not runs:
            self.recent_runs.addItem(QListWidgetItem(waiting or "(no runs in the runs folder yet)"))
        self.recent_presets.clear()
        for path in presets:
            item = QListWidgetItem(Path(path).name)
            item.setData(Qt.UserRole, path)
            item.setToolTip(path)
            if not Path(path).exists():
                item.setFlags(Qt.NoItemFlags)
                item.setToolTip(f"{path} (no longer there)")
            self.recent_presets.addItem(item)
        if not presets:
            self.recent_presets.addItem(QListWidgetItem("(none yet: Save or Open one)"))

    def set_run_enabled(self, enabled: bool, why: str = "") -> None:
        """Follow the toolbar's Run: disabled while a run of this window is in progress."""
        for card in self.cards.values():
            card.run_button.setEnabled(enabled)
            card.run_button.setToolTip(why or f"Load presets/{card.entry.preset}.yaml and start it, as the Run "
                                              "button does")


def preset_description(path: Path) -> str:
    """The preset file's `description:` line, read without the schema (a card must not
    need the preset to be valid to draw); "" when there is none."""
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("description:"):
                text = line.partition(":")[2].strip()
                return text[1:-1] if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'" else text
    except OSError:
        pass
    return ""
