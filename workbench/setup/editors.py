"""Editors for single preset fields, one class per kind of field (workbench.setup.schema).

An editor shows a value and reports what the user typed as the value the preset file
would hold, valid or not: "abc" in an integer field is reported as the text "abc", so
the engine's own message ("Input should be a valid integer") appears next to the field
instead of the keystroke being swallowed. Editors never write to the document
themselves; `FieldRow` connects them to it.

An editor never rewrites the text the user is typing: the document's change that a
keystroke causes comes back to the form as a refresh, and `set_value` on the editor
that reported the edit does nothing (`FieldEditor.report`), nor does it on any editor
whose text already means the value ("0." is 0.0, "1e-4" is 0.0001: rewriting them as
"0.0" or "0.0001" mid-typing turned `0.002` into `0.0.002`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor, QKeyEvent, QPainter, QWheelEvent
from PySide6.QtWidgets import (
    QBoxLayout,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from engine.builtin_model import BUILTIN_MODELS
from engine.model.config import BUILTIN_MODEL
from workbench.setup import schema
from workbench.setup.schema import FieldSpec, format_value

_INT_TEXT = re.compile(r"^[+-]?\d+$")
_FLOAT_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(inf|nan)$", re.I)

ERROR_COLOUR = "#b00020"
ERROR_STYLE = f"color: {ERROR_COLOUR};"
NOTE_STYLE = "color: #5f6368;"


def parse_number(text: str, kind: str, nullable: bool) -> Any:
    """What a number field's text means in the preset.

    >>> parse_number("8", "int", False), parse_number("1e-4", "float", False), parse_number("", "int", True)
    (8, 0.0001, None)
    >>> parse_number("abc", "int", False), parse_number("1.5", "int", False)
    ('abc', 1.5)
    """
    text = text.strip()
    if not text:
        return None if nullable else ""
    if kind == schema.INT and _INT_TEXT.match(text):
        return int(text)
    if _FLOAT_TEXT.match(text):
        return float(text)
    return text


def parse_names(text: str, words: tuple) -> Any:
    """`auto` -> "auto"; `q_proj, v_proj` -> ["q_proj", "v_proj"]; empty -> [] (which
    the engine refuses with its own message)."""
    text = text.strip()
    if text in words:
        return text
    return [part.strip() for part in text.split(",") if part.strip()]


class FieldEditor(QWidget):
    """Base: `edited(value)` when the user changes the value; `set_value` shows one.

    Subclasses implement `show_value` (draw a value) and `value` (what the user's input
    means), and report input with `report()`."""

    edited = Signal(object)
    _reporting: list["FieldEditor"] = []  # editors whose `edited` is being handled, innermost last

    def __init__(self, spec: FieldSpec, parent: QWidget | None = None):
        super().__init__(parent)
        self.spec = spec
        self.setToolTip(spec.tooltip())
        self.setObjectName(f"field:{spec.path}")

    def report(self, *_args) -> None:
        """Emit `edited` with the current value. While it is handled (the document
        changes, the form refreshes), `set_value` on this editor does nothing: what the
        user typed stays as typed, cursor and all."""
        FieldEditor._reporting.append(self)
        try:
            self.edited.emit(self.value())
        finally:
            FieldEditor._reporting.remove(self)

    def set_value(self, value: Any) -> None:
        if self in FieldEditor._reporting or self.shows(value):
            return
        self.show_value(value)

    def shows(self, value: Any) -> bool:
        """Whether the editor's input already means `value` (so nothing is redrawn)."""
        try:
            current = self.value()
        except Exception:  # an editor not set up yet
            return False
        return type(current) is type(value) and current == value

    def show_value(self, value: Any) -> None:
        raise NotImplementedError

    def value(self) -> Any:
        raise NotImplementedError

    def input_widget(self) -> QWidget:
        """The widget that takes keyboard focus (tests type into it)."""
        return self


class _SteppingLineEdit(QLineEdit):
    """A line edit whose Up/Down keys and mouse wheel step an integer, like a spin box,
    but which can hold any text (so a bad value can be shown, with its message)."""

    stepped = Signal()

    def __init__(self, integer: bool, parent=None):
        super().__init__(parent)
        self._integer = integer

    def _step(self, delta: int) -> bool:
        if not self._integer or not _INT_TEXT.match(self.text().strip() or "x"):
            return False
        self.setText(str(int(self.text()) + delta))
        self.stepped.emit()
        return True

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key_Up, Qt.Key_Down) and self._step(1 if event.key() == Qt.Key_Up else -1):
            return
        super().keyPressEvent(event)

    def wheelEvent(self, event: QWheelEvent) -> None:
        # Only while focused: a wheel over a form being scrolled must not change values.
        if self.hasFocus() and self._step(1 if event.angleDelta().y() > 0 else -1):
            return
        super().wheelEvent(event)


class NumberEditor(FieldEditor):
    def __init__(self, spec: FieldSpec, parent=None):
        super().__init__(spec, parent)
        self.line = _SteppingLineEdit(spec.kind == schema.INT, self)
        words = [*(["null"] if spec.nullable else []), *map(str, spec.choices)]  # e.g. micro_batch_size: auto
        self.line.setPlaceholderText(" or ".join(words) if words else "required")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.line)
        self.line.textEdited.connect(self.report)
        self.line.stepped.connect(self.report)

    def show_value(self, value: Any) -> None:
        text = "" if value is None else format_value(value)
        if self.line.text() != text:
            self.line.setText(text)

    def value(self) -> Any:
        return parse_number(self.line.text(), self.spec.kind, self.spec.nullable)

    def input_widget(self) -> QWidget:
        return self.line


class TextEditor(FieldEditor):
    def __init__(self, spec: FieldSpec, parent=None):
        super().__init__(spec, parent)
        self.line = QLineEdit(self)
        if spec.nullable:
            self.line.setPlaceholderText("null")
        self.layout_ = QHBoxLayout(self)
        self.layout_.setContentsMargins(0, 0, 0, 0)
        self.layout_.addWidget(self.line)
        self.line.textEdited.connect(self.report)

    def show_value(self, value: Any) -> None:
        text = "" if value is None else str(value)
        if self.line.text() != text:
            self.line.setText(text)
            self.line.setCursorPosition(0)  # a long value shows its beginning

    def value(self) -> Any:
        text = self.line.text()
        return None if self.spec.nullable and not text.strip() else text

    def input_widget(self) -> QWidget:
        return self.line


class NamesEditor(TextEditor):
    """A list of names, or one of a few words (target_modules: `auto` or q_proj, v_proj)."""

    def __init__(self, spec: FieldSpec, parent=None):
        super().__init__(spec, parent)
        self.line.setPlaceholderText(" or ".join([*spec.choices, "comma-separated names"]))

    def show_value(self, value: Any) -> None:
        text = ", ".join(map(str, value)) if isinstance(value, list) else ("" if value is None else str(value))
        if self.line.text() != text:
            self.line.setText(text)

    def value(self) -> Any:
        return parse_names(self.line.text(), self.spec.choices)


class BoolEditor(FieldEditor):
    def __init__(self, spec: FieldSpec, parent=None):
        super().__init__(spec, parent)
        self.box = QCheckBox(self)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.box)
        self._raw: Any = None
        self.box.clicked.connect(self.report)

    def show_value(self, value: Any) -> None:
        # A non-bool from a file ("yes") is shown unticked and kept until the user clicks,
        # so its error stays visible rather than being silently replaced.
        self._raw = value
        self.box.setChecked(value is True)

    def value(self) -> Any:
        return self.box.isChecked()

    def input_widget(self) -> QWidget:
        return self.box


NONE_LABEL = "(none)"


class ChoiceEditor(FieldEditor):
    def __init__(self, spec: FieldSpec, parent=None, none_label: str = NONE_LABEL):
        super().__init__(spec, parent)
        self.combo = QComboBox(self)
        self._values: list[Any] = list(spec.choices) + ([None] if spec.nullable else [])
        for value in self._values:
            self.combo.addItem(none_label if value is None else format_value(value))
        set_item_help(self.combo, spec)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.combo)
        layout.addStretch(1)
        self.combo.activated.connect(self.report)

    def show_value(self, value: Any) -> None:
        if value not in self._values:
            # A value the schema does not allow (from a file): shown and kept, marked.
            self._values.append(value)
            self.combo.addItem(f"{format_value(value)} (not allowed)")
        index = self._values.index(value)
        if self.combo.currentIndex() != index:
            self.combo.setCurrentIndex(index)

    def value(self) -> Any:
        return self._values[self.combo.currentIndex()] if self._values else None

    def input_widget(self) -> QWidget:
        return self.combo


def set_item_help(combo: QComboBox, spec: FieldSpec) -> None:
    """Each registered choice's one-line help as its item's tooltip (algorithm.loss_type's
    dapo: "mean over all tokens in the batch")."""
    helps = dict(spec.choice_help)
    for index in range(combo.count()):
        text = helps.get(combo.itemText(index))
        if text:
            combo.setItemData(index, text, Qt.ToolTipRole)


class SuggestEditor(TextEditor):
    """Free text with suggestions (device: auto, cpu, cuda, cuda:N, mps; a registry's
    names where a user's FILE.py:FUNCTION may be typed instead: algorithm.loss_type)."""

    def __init__(self, spec: FieldSpec, suggestions: list[str], parent=None):
        super().__init__(spec, parent)
        self.layout_.removeWidget(self.line)
        self.line.hide()
        self.combo = QComboBox(self)
        self.combo.setEditable(True)
        self.combo.addItems(suggestions)
        set_item_help(self.combo, spec)
        self.combo.setInsertPolicy(QComboBox.NoInsert)
        self.line = self.combo.lineEdit()
        if spec.free_text:
            # A user's FILE.py:FUNCTION is long: the combo takes the field's width, as a
            # text field does, instead of its suggestions' width.
            self.layout_.addWidget(self.combo, 1)
        else:
            self.layout_.addWidget(self.combo)
            self.layout_.addStretch(1)
        self.line.textEdited.connect(self.report)
        self.combo.activated.connect(self.report)

    def input_widget(self) -> QWidget:
        return self.combo


class PathEditor(TextEditor):
    """Text plus a Browse button (a file or a folder)."""

    def __init__(self, spec: FieldSpec, folder: bool, file_filter: str = "", parent=None):
        super().__init__(spec, parent)
        self.folder = folder
        self.file_filter = file_filter
        self.browse = QPushButton("Folder…" if folder else "Browse…", self)
        self.browse.setToolTip("Choose a local model folder" if folder else "Choose a file")
        self.layout_.addWidget(self.browse)
        self.browse.clicked.connect(self._browse)

    def _browse(self) -> None:
        start = self.line.text() or str(Path.cwd())
        if self.folder:
            chosen = QFileDialog.getExistingDirectory(self, self.spec.label, start)
        else:
            chosen, _ = QFileDialog.getOpenFileName(self, self.spec.label, start, self.file_filter)
        if chosen:
            self.line.setText(chosen)
            self.report()


class ModelEditor(PathEditor):
    """The model: the built-in one, a Hugging Face id (typed) or a local folder (Folder…)."""

    def __init__(self, spec: FieldSpec, parent=None):
        super().__init__(spec, folder=True, parent=parent)
        self.line.setPlaceholderText("builtin:tiny, a Hugging Face id (org/name), or a folder")
        self.builtin = QPushButton("Built-in", self)
        self.builtin.setToolTip(f"Use {BUILTIN_MODEL}: the small model shipped with RL Workbench (runs offline on a CPU); "
                                "type builtin:tiny-tools for its variant trained to call the calculator tool")
        self.builtin.clicked.connect(self._use_builtin)
        # The buttons on a line of their own under the text: beside it they left the
        # name about 65 px ("Qwen/Qwen") at the default window size.
        self.layout_.setDirection(QBoxLayout.TopToBottom)
        self.layout_.removeWidget(self.browse)
        self.buttons_ = QHBoxLayout()
        self.buttons_.addWidget(self.builtin)
        self.buttons_.addWidget(self.browse)
        self.buttons_.addStretch(1)
        self.layout_.addLayout(self.buttons_)

    def _use_builtin(self) -> None:
        self.line.setText(BUILTIN_MODEL)
        self.report()


def describe_model_source(name: str) -> str:
    """The line under the model field saying what kind of source it is."""
    from workbench.setup.checks import looks_like_local_path, model_folder, read_model_info

    if name in BUILTIN_MODELS:
        kind = "built-in model"
    elif Path(name).expanduser().is_dir():
        kind = "local folder"
    elif model_folder(name) is not None:
        kind = "Hugging Face hub id, in the local cache"
    elif looks_like_local_path(name) or name.startswith("builtin:"):
        return ""
    else:
        return "Hugging Face hub id: the engine downloads it (or uses the local cache)"
    try:
        info = read_model_info(model_folder(name))
    except (ValueError, TypeError):
        return kind
    context = f", context {info.context_length}" if info.context_length else ""
    return f"{kind}: {info.architecture}{context}"


def make_editor(spec: FieldSpec, parent: QWidget | None = None) -> FieldEditor:
    """The editor for a field: a few fields get a richer one, the rest by kind."""
    if spec.path == "model.name_or_path":
        return ModelEditor(spec, parent)
    if spec.path == "model.start_from":  # a run folder or a checkpoint in one (the field is newer than some engines)
        editor = PathEditor(spec, folder=True, parent=parent)
        editor.browse.setToolTip("Choose a run folder, or a checkpoint folder in one (RUN/checkpoints/step_N)")
        return editor
    if spec.path == "model.chat_template":
        return SuggestEditor(spec, ["auto", "none"], parent)
    if spec.path == "model.device":
        return SuggestEditor(spec, ["auto", "cpu", "cuda", "cuda:0", "mps"], parent)
    if spec.path == "data.path":
        return PathEditor(spec, folder=False, file_filter="Prompt files (*.jsonl *.json *.csv *.parquet);;All files (*)",
                          parent=parent)
    if spec.kind in (schema.INT, schema.FLOAT):
        return NumberEditor(spec, parent)
    if spec.kind == schema.BOOL:
        return BoolEditor(spec, parent)
    if spec.path == "data.task":
        return ChoiceEditor(spec, parent, none_label="(none: a file or data set)")
    if spec.kind == schema.CHOICE and spec.free_text:
        return SuggestEditor(spec, list(spec.choices), parent)
    if spec.kind == schema.CHOICE:
        return ChoiceEditor(spec, parent)
    if spec.kind == schema.NAMES:
        return NamesEditor(spec, parent)
    if spec.kind == schema.TEXT:
        return TextEditor(spec, parent)
    raise TypeError(f"no editor for {spec.path} ({spec.kind})")


class ProblemLine(QLabel):
    """A field's problems on one line of fixed height, cut with … when longer (the whole
    text is its tooltip and is listed in the summary above the form). `text()` is the
    whole message."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Fixed)
        self.setFixedHeight(self.fontMetrics().height())

    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip(text)
        self.update()

    def minimumSizeHint(self) -> QSize:
        return QSize(0, self.fontMetrics().height())

    def paintEvent(self, _event) -> None:
        line = self.text().replace("\n", "; ")
        painter = QPainter(self)
        painter.setPen(QColor(ERROR_COLOUR))
        painter.drawText(self.rect(), Qt.AlignLeft | Qt.AlignVCenter,
                         self.fontMetrics().elidedText(line, Qt.ElideRight, self.width()))


class FieldRow(QWidget):
    """An editor with its problem (red) and note (grey) lines under it.

    The problem line's space is always there, shown or not: problems arrive shortly
    after a keystroke (validation is debounced), and a line appearing then pushed the
    rows below down under a click already on its way (typing meant for algorithm.beta
    went into num_generations)."""

    def __init__(self, editor: QWidget, parent: QWidget | None = None):
        super().__init__(parent)
        self.editor = editor
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(1)
        layout.addWidget(editor)
        self.error = ProblemLine(self)
        self.error.hide()
        self.error_slot = QWidget(self)  # the reserved space the problem line sits in
        self.error_slot.setFixedHeight(self.error.height())
        slot = QVBoxLayout(self.error_slot)
        slot.setContentsMargins(0, 0, 0, 0)
        slot.addWidget(self.error)
        self.note = QLabel(self)
        self.note.setWordWrap(True)
        self.note.setStyleSheet(NOTE_STYLE)
        self.note.hide()
        layout.addWidget(self.error_slot)
        layout.addWidget(self.note)

    def show_problems(self, messages: list[str]) -> None:
        self.error.setText("\n".join(messages))
        self.error.setVisible(bool(messages))

    def show_notes(self, messages: list[str]) -> None:
        self.note.setMinimumHeight(0)
        self.note.setText("\n".join(m for m in messages if m))
        self.note.setVisible(any(messages))

    def show_checking(self) -> None:
        """A note about the preset as it was is out of date while the checks run: it
        reads "checking…" in the height it had (rows below keep their place). A row in a
        folded group counts as shown: its note is there when the group is unfolded."""
        if not self.note.isHidden():
            self.note.setMinimumHeight(self.note.height())
            self.note.setText("checking…")
