"""The inspector's arrow keys: ←/→ previous/next rollout, ↑/↓ previous/next step,
wherever the focus is on the pickers, the Trajectory page or the Group page.

They stand aside while the focus is where the arrows have a meaning of their own: an
open list (the *Colour by* combo's popup: ↑/↓ there moved the step instead of the
highlighted item) or a field being typed in (the step box, a text field).
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QLineEdit,
    QPlainTextEdit,
    QTextEdit,
    QWidget,
)


def arrows_are_free(focus: QWidget | None) -> bool:
    """Whether the arrow keys may move between rollouts and steps with `focus` focused:
    not in a popup (a combo box's open list, a menu) nor in a field being typed in."""
    if QApplication.activePopupWidget() is not None:
        return False
    if focus is None:
        return True
    if focus.window().windowType() == Qt.Popup:
        return False
    if isinstance(focus, QAbstractSpinBox):
        return False
    if isinstance(focus, QLineEdit | QTextEdit | QPlainTextEdit):
        return focus.isReadOnly()
    if isinstance(focus, QComboBox):
        return not focus.isEditable()
    return True


class ArrowKeys(QObject):
    """The arrow-key shortcuts on `owners` (each with its children), calling `moves`
    (key -> slot); enabled only while `arrows_are_free` for the focused widget. A child
    of `parent`, so the application's focus signal lets go of it with its view."""

    def __init__(self, owners: list[QWidget], moves: dict[Qt.Key, Callable[[], None]], parent: QObject):
        super().__init__(parent)
        self.shortcuts: list[QShortcut] = []
        for owner in owners:
            for key, slot in moves.items():
                shortcut = QShortcut(QKeySequence(key), owner)
                shortcut.setContext(Qt.WidgetWithChildrenShortcut)
                shortcut.activated.connect(slot)
                self.shortcuts.append(shortcut)
        QApplication.instance().focusChanged.connect(self._focus_changed)

    def _focus_changed(self, _old: QWidget | None, new: QWidget | None) -> None:
        free = arrows_are_free(new)
        for shortcut in self.shortcuts:
            shortcut.setEnabled(free)
