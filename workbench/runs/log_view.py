"""The engine log pane: engine.log of the run shown (the engine's logging, warnings and
the traceback of a failure), or the engine process's own output (what it printed,
including a refused preset, which never reaches engine.log). Terminal control in the
output (progress bars redrawn with carriage returns, colour escapes) is shown as a
terminal would leave it: the last state of each progress line (clean_output)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QFontDatabase, QTextCursor
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from engine.run import rundir
from workbench.runs.process import OUTPUT_FILE, WORKBENCH_DIR
from workbench.runs.status import clean_output

FIRST_READ_BYTES = 512 * 1024  # a long log opens at its end


class FileTail:
    """New text appended to a file since the last read (no Qt). A file that shrank
    (rotated, rewritten) is read again from the start.

    >>> import tempfile, os
    >>> path = Path(tempfile.mkdtemp()) / "log"
    >>> tail = FileTail(path); _ = path.write_text("a\\n"); tail.read()
    'a\\n'
    """

    def __init__(self, path: Path, first_read: int = FIRST_READ_BYTES):
        self.path = Path(path)
        self.offset: int | None = None
        self.first_read = first_read

    def read(self) -> str:
        try:
            size = self.path.stat().st_size
        except OSError:
            return ""
        if self.offset is None or size < self.offset:
            self.offset = max(0, size - self.first_read)
        if size == self.offset:
            return ""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(size - self.offset)
        self.offset = size
        return data.decode("utf-8", "replace")


class LogView(QWidget):
    SOURCES = (("engine.log", rundir.LOG_FILE), ("engine process output", f"{WORKBENCH_DIR}/{OUTPUT_FILE}"))

    def __init__(self, parent=None):
        super().__init__(parent)
        self.run_dir: Path | None = None
        self.tail: FileTail | None = None
        self._partial = ""  # the last line read, not yet ended (a progress bar being redrawn)
        self.source = QComboBox()
        self.source.setObjectName("log-source")
        for label, relative in self.SOURCES:
            self.source.addItem(label, relative)
        self.path_label = QLabel()
        self.path_label.setStyleSheet("color:#5f6368")
        self.to_end = QPushButton("Jump to end")
        self.text = QPlainTextEdit()
        self.text.setObjectName("log-text")
        self.text.setReadOnly(True)
        self.text.setMaximumBlockCount(20000)
        self.text.setLineWrapMode(QPlainTextEdit.NoWrap)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
        top = QHBoxLayout()
        top.addWidget(self.source)
        top.addWidget(self.path_label, 1)
        top.addWidget(self.to_end)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(top)
        layout.addWidget(self.text, 1)
        self.source.currentIndexChanged.connect(lambda _i: self._reopen())
        self.to_end.clicked.connect(self.show_end)

    def set_run(self, run_dir: Path | None) -> None:
        self.run_dir = Path(run_dir) if run_dir else None
        self._reopen()

    def show_source(self, relative: str) -> None:
        index = self.source.findData(relative)
        if index >= 0 and index != self.source.currentIndex():
            self.source.setCurrentIndex(index)

    def _reopen(self) -> None:
        self.text.clear()
        self._partial = ""
        if self.run_dir is None:
            self.tail = None
            self.path_label.setText("no run open")
            return
        path = self.run_dir / self.source.currentData()
        self.tail = FileTail(path)
        self.path_label.setText(str(path))
        self.poll()

    def poll(self) -> None:
        if self.tail is None:
            return
        new = self.tail.read()
        if new:
            # Whole lines only: a progress bar's line is shown once it ends, in its last state.
            data = self._partial + new
            cut = data.rfind("\n") + 1
            self._partial = data[cut:]
            new = data[:cut]
            if new and ("\r" in new or "\x1b" in new):
                new = clean_output(new) + "\n"
        if not new:
            if not self.text.toPlainText() and not self.tail.path.exists():
                self.text.setPlainText(f"({self.tail.path.name} does not exist yet)")
            return
        if self.text.toPlainText().startswith("(") and self.text.blockCount() == 1:
            self.text.clear()
        bar = self.text.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 2
        cursor = self.text.textCursor()
        cursor.movePosition(QTextCursor.End)
        cursor.insertText(new)
        if at_end:
            self.show_end()

    def show_end(self) -> None:
        self.text.moveCursor(QTextCursor.End)
        self.text.verticalScrollBar().setValue(self.text.verticalScrollBar().maximum())

    def contents(self) -> str:
        return self.text.toPlainText()
