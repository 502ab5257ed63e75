"""Help ▸ Keyboard shortcuts: every shortcut the window has, read from its actions (menus,
tool bar, and actions added to widgets) and its QShortcuts, so the list is never typed
twice and a new action's shortcut shows up by itself."""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QDialog, QHeaderView, QLabel, QMainWindow, QTableWidget, QTableWidgetItem, QVBoxLayout


def action_name(text: str) -> str:
    """An action's text as a list reads it: no mnemonic `&`, no leading symbol, no `…`.

    >>> action_name("&File"), action_name("▶ Run"), action_name("Open…"), action_name("Save && Run")
    ('File', 'Run', 'Open', 'Save & Run')
    """
    text = text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…").strip()
    while text and not text[0].isalnum():
        text = text[1:].lstrip()
    return text


def _menu_actions(window: QMainWindow) -> list[tuple[QAction, str]]:
    """Every action of the menu bar, with its menu's path ("File ▸ Open Recent")."""
    found = []

    def walk(actions, where: str) -> None:
        for act in actions:
            if act.menu() is not None:
                walk(act.menu().actions(), f"{where} ▸ {action_name(act.text())}" if where else action_name(act.text()))
            elif not act.isSeparator():
                found.append((act, where))

    walk(window.menuBar().actions(), "")
    return found


def shortcut_rows(window: QMainWindow) -> list[tuple[str, str, str]]:
    """(what, keys, where) for each shortcut of the window, menus first: an action's
    shortcuts in the platform's spelling; a QShortcut's help is its whatsThis."""
    rows, seen = [], set()
    native = QKeySequence.NativeText
    for act, where in _menu_actions(window) + [(a, "") for a in window.findChildren(QAction)]:
        keys = ", ".join(s.toString(native) for s in act.shortcuts() if not s.isEmpty())
        if keys and id(act) not in seen:
            seen.add(id(act))
            rows.append((action_name(act.text()), keys, where or "tool bar"))
    for shortcut in window.findChildren(QShortcut):
        keys, tab = shortcut.key().toString(native), _tab_of(window, shortcut.parent())
        row = (shortcut.whatsThis() or f"a key of the {tab or 'window'}", keys, f"{tab or 'its pane'} focused")
        if keys and row not in rows:  # one key on several panes of a tab: one row
            rows.append(row)
    return rows


def _tab_of(window: QMainWindow, widget) -> str:
    """The title of the window's tab that holds `widget` ("" when none does)."""
    tabs = getattr(window, "tabs", None)
    while widget is not None and tabs is not None:
        index = tabs.indexOf(widget)
        if index >= 0:
            return tabs.tabText(index)
        widget = widget.parentWidget() if hasattr(widget, "parentWidget") else None
    return ""


class ShortcutList(QDialog):
    """The window's shortcuts in a table; read again each time it is shown."""

    def __init__(self, window: QMainWindow):
        super().__init__(window)
        self.window_ = window
        self.setWindowTitle("Keyboard shortcuts")
        self.setObjectName("shortcut-list")
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["Action", "Shortcut", "Where"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        note = QLabel("In the Inspector, ←/→ go to the previous or next rollout and ↑/↓ to the previous or next "
                      "step (docs/workbench.md).")
        note.setWordWrap(True)
        layout.addWidget(note)
        self.resize(560, 420)

    def refresh(self) -> None:
        rows = shortcut_rows(self.window_)
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                self.table.setItem(r, c, QTableWidgetItem(text))

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.refresh()
        super().showEvent(event)
