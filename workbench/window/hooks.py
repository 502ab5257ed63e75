"""What the window's controllers (presets, run control, fork, export) are given of the
window: the widget their dialogs and processes hang from and the window's callbacks.
MainWindow makes one `WindowHooks` and hands it to each controller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget


@dataclass(frozen=True)
class WindowHooks:
    """`ask(title, text, choices)` -> the choice (the last one cancels); `tell(title,
    text)` an error the user must see; `show_message(text, kind)` and
    `clear_message(*kinds)` the status bar's one message (status_message.py), and
    `message_kind()` what it is about (None: none); `show_tab(index)` brings a tab forward (workbench/window/names.py); `save_settings()`."""

    parent: QWidget
    ask: Callable[[str, str, list[str]], str]
    tell: Callable[[str, str], None]
    show_message: Callable[..., None]
    clear_message: Callable[..., None]
    message_kind: Callable[[], str | None]
    show_tab: Callable[[int], None]
    save_settings: Callable[[], None]

    def refuse(self, reason: str) -> None:
        """Say why an action was refused (in red, until the next message)."""
        self.show_message(reason, "refused")


def make_action(parent: QWidget, text: str, slot: Callable[[], object], shortcut=None, tip: str = "") -> QAction:
    """A menu and tool bar action calling `slot()`, its tip in the tool tip and status bar."""
    act = QAction(text, parent)
    act.triggered.connect(lambda _checked=False: slot())
    if shortcut:
        act.setShortcut(shortcut)
    if tip:
        act.setToolTip(tip)
        act.setStatusTip(tip)
    return act
