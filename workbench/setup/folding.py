"""The set-up form's folded groups: the fields beyond the essentials, behind a header the
user clicks to unfold, each group's state remembered across windows (workbench.settings).

`Folds` is the state (no Qt): which groups are unfolded, shared by every group of a panel
(each algorithm's form has its own group under the one key "algorithm"), saved on each
change. `FoldGroup` is a header button over a body of rows.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFormLayout, QSizePolicy, QToolButton, QVBoxLayout, QWidget

from workbench.settings import save_unfolded_groups, unfolded_groups
from workbench.signals import Signal


class Folds:
    """Which groups are unfolded (by key); `changed(key)` after one is folded or unfolded.
    `load` and `save` read and write the remembered keys (the settings' file by default)."""

    def __init__(self, load: Callable[[], set[str]] = unfolded_groups,
                 save: Callable[[set[str]], None] = save_unfolded_groups):
        self.unfolded = set(load())
        self._save = save
        self.changed = Signal()

    def is_open(self, key: str) -> bool:
        return key in self.unfolded

    def set_open(self, key: str, unfolded: bool) -> None:
        if unfolded == self.is_open(key):
            return
        if unfolded:
            self.unfolded.add(key)
        else:
            self.unfolded.discard(key)
        self._save(set(self.unfolded))
        self.changed.emit(key)


def fold_title(title: str, count: int) -> str:
    """The header's words: what is inside and how many fields.

    >>> fold_title("More model settings", 8), fold_title("Alarm thresholds", 1)
    ('More model settings (8 fields)', 'Alarm thresholds (1 field)')
    """
    return f"{title} ({count} field{'s' if count != 1 else ''})"


class FoldGroup(QWidget):
    """A header (an arrow and the group's title, a toggle button) over `form`, a form
    layout its owner fills; the body shows while the group is unfolded."""

    def __init__(self, key: str, title: str, folds: Folds, parent: QWidget | None = None):
        super().__init__(parent)
        self.key, self.title, self.folds = key, title, folds
        self.setObjectName(f"fold:{key}")
        self.button = QToolButton(self)
        self.button.setObjectName(f"fold-button:{key}")
        self.button.setCheckable(True)
        self.button.setAutoRaise(True)
        self.button.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        self.button.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.button.setToolTip("Show or hide these fields; the window remembers which groups are open")
        self.body = QWidget(self)
        self.form = QFormLayout(self.body)
        self.form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        self.form.setContentsMargins(12, 0, 0, 0)
        self.form.setVerticalSpacing(4)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.button)
        layout.addWidget(self.body)
        self.count = 0
        self.forced = False  # open while a field inside has a problem (hold_open)
        self.button.toggled.connect(lambda unfolded: self.folds.set_open(self.key, unfolded))
        folds.changed.connect(self._follow)
        self._follow(key)

    @property
    def unfolded(self) -> bool:
        return self.folds.is_open(self.key)

    def set_count(self, count: int) -> None:
        """The number of fields shown in the body (the header says it; no field: no header)."""
        self.count = count
        self.button.setText(fold_title(self.title, count))
        self.setVisible(count > 0)

    def hold_open(self, forced: bool) -> None:
        """Show the body while a field in it has a problem or an unknown key (a folded
        problem could not be seen nor fixed), without changing the remembered state."""
        if forced != self.forced:
            self.forced = forced
            self._follow(self.key)

    def _follow(self, key: str) -> None:
        if key != self.key:
            return
        unfolded = self.folds.is_open(key) or self.forced
        self.button.blockSignals(True)
        self.button.setChecked(unfolded)
        self.button.blockSignals(False)
        self.button.setArrowType(Qt.DownArrow if unfolded else Qt.RightArrow)
        self.body.setVisible(unfolded)
