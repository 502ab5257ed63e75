"""The status bar's one message, with what it is about, so that it goes when its cause
goes: "problems" (Run refused for the preset's problems) when they are fixed, "error"
(a file that could not be read or written) when a file opens or saves fine, "engine"
when another run starts."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

_RED = ("error", "problems", "refused")


class StatusMessage(QLabel):
    """`show_message(text, kind)` (escaped; red for an error, problems or a refusal),
    `clear_message(*kinds)`; `kind`: what the message on show is about (None: none)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("run-message")
        self.setTextFormat(Qt.RichText)
        self.kind: str | None = None

    def show_message(self, text: str, kind: str = "info") -> None:
        self.kind = kind
        text = html.escape(text, quote=False)
        self.setText(f"<span style='color:#b00020'>{text}</span>" if kind in _RED else text)

    def clear_message(self, *kinds: str) -> None:
        """Clear the message if it is of one of `kinds` (any kind when none given)."""
        if not kinds or self.kind in kinds:
            self.kind = None
            self.setText("")
