"""Keys in an opened preset that the schema does not have (`learnin_rate` under
training): shown at the top of their own section with one-click Remove and, when a
known key is close, Rename to it. The engine refuses a preset with an unknown key, and
no field of the form can edit one, so without this the problem could not be fixed in
the window (and Save wrote the typo back).
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QMessageBox, QPushButton, QVBoxLayout, QWidget

from workbench.setup.document import PresetDocument, UnknownKey, get_path
from workbench.setup.editors import ERROR_STYLE
from workbench.setup.schema import format_value

BANNER_STYLE = "QFrame#unknown-keys { background: #fdecea; border: 1px solid #f5c2c0; border-radius: 3px; }"


def shown_value(value: Any, limit: int = 40) -> str:
    """A value as a short line.

    >>> shown_value(0.002), shown_value({"r": 4}), shown_value("x" * 50)[-3:]
    ('0.002', "{'r': 4}", 'xx…')
    """
    text = format_value(value) if not isinstance(value, dict) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class UnknownKeyRow(QWidget):
    """One unknown key: what it is, Rename to the suggested key (when there is one), Remove."""

    def __init__(self, banner: "UnknownKeysBanner", key: UnknownKey):
        super().__init__(banner)
        self.key = key
        self.setObjectName(f"unknown:{key.path}")
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.RichText)
        self.label.setText(f"<span style='{ERROR_STYLE}'>Unknown key <b>{html.escape(key.key)}</b></span>"
                           f" = {html.escape(shown_value(key.value))}")
        hint = f" Did you mean {key.suggestion}?" if key.suggestion else ""
        self.label.setToolTip(f"{key.path} is not a field of this section: the engine refuses a preset with it, "
                              f"and Save would write it back.{hint}")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label, 1)
        self.rename: QPushButton | None = None
        if key.suggestion:
            self.rename = QPushButton(f"Rename to {key.suggestion}", self)
            self.rename.setToolTip(f"Move this value to {key.suggestion} and drop {key.key}")
            self.rename.clicked.connect(lambda: banner.rename(key))
            layout.addWidget(self.rename)
        self.remove = QPushButton("Remove", self)
        self.remove.setToolTip(f"Drop {key.key} from the preset")
        self.remove.clicked.connect(lambda: banner.remove(key))
        layout.addWidget(self.remove)


class UnknownKeysBanner(QFrame):
    """The unknown keys of one section (`section` "" is the top level), hidden when
    there are none."""

    def __init__(self, doc: PresetDocument, section: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc, self.section = doc, section
        self.setObjectName("unknown-keys")
        self.setStyleSheet(BANNER_STYLE)
        self.rows: dict[str, UnknownKeyRow] = {}
        self._shown: list[UnknownKey] = []
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(4, 2, 4, 2)
        self.layout_.setSpacing(2)
        self.hide()

    def show_keys(self, keys: list[UnknownKey]) -> None:
        keys = [k for k in keys if k.section == self.section]
        if keys == self._shown:
            return
        self._shown = keys
        for row in self.rows.values():
            self.layout_.removeWidget(row)
            row.hide()
            row.setParent(None)
            row.deleteLater()
        self.rows = {}
        for key in keys:
            self.rows[key.key] = UnknownKeyRow(self, key)
            self.layout_.addWidget(self.rows[key.key])
        self.setVisible(bool(keys))

    def row(self, key: str) -> UnknownKeyRow:
        return self.rows[key]

    def remove(self, key: UnknownKey) -> None:
        self.doc.remove_key(key.path)

    def rename(self, key: UnknownKey) -> None:
        target = f"{key.section}.{key.suggestion}" if key.section else key.suggestion
        if self.doc.was_set(target):
            current = shown_value(get_path(self.doc.data, target))
            answer = QMessageBox.question(
                self, "Replace a field that is set?",
                f"{target} is already set to {current} in this preset.\n\n"
                f"Replace it with {shown_value(key.value)} from {key.key}? (No keeps {current}; "
                f"Remove drops {key.key} instead.)",
                QMessageBox.Yes | QMessageBox.No, QMessageBox.No)
            if answer != QMessageBox.Yes:
                return
        self.doc.rename_key(key.path, key.suggestion)
