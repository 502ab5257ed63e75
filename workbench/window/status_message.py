"""The status bar's one message, with what it is about, so that it goes when its cause
goes: "problems" (Run refused for the preset's problems) when they are fixed, "error"
(a file that could not be read or written) when a file opens or saves fine, "engine"
when another run starts; and a message about one run (`run`: its folder) when other
runs are shown instead."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

_RED = ("error", "problems", "refused")


class StatusMessage(QLabel):
    """`show_message(text, kind, run=None)` (escaped; red for an error, problems or a
    refusal), `clear_message(*kinds)`, `runs_shown(folders)`; `kind`: what the message on
    show is about (None: none), `run`: the run folder it is about (None: no one run)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("run-message")
        self.setTextFormat(Qt.RichText)
        self.kind: str | None = None
        self.run: Path | None = None

    def show_message(self, text: str, kind: str = "info", run: str | Path | None = None) -> None:
        self.kind = kind
        self.run = Path(run).resolve() if run else None
        text = html.escape(text, quote=False)
        self.setText(f"<span style='color:#b00020'>{text}</span>" if kind in _RED else text)

    def clear_message(self, *kinds: str) -> None:
        """Clear the message if it is of one of `kinds` (any kind when none given)."""
        if not kinds or self.kind in kinds:
            self.kind = None
            self.run = None
            self.setText("")

    def runs_shown(self, folders: list[Path]) -> None:
        """These runs are on show now: a message about another run goes (the engine of a
        run no longer shown, its alarms)."""
        if self.run is not None and self.run not in {Path(f).resolve() for f in folders}:
            self.clear_message()
