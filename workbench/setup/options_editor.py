"""The options editor: a task's or a reward's options as a small form generated from the
option defaults, next to the single-field editors of workbench.setup.editors.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtWidgets import QComboBox, QFormLayout, QLabel, QLineEdit, QWidget

from workbench.setup import schema
from workbench.setup.editors import NOTE_STYLE, FieldEditor, parse_number
from workbench.setup.schema import FieldSpec, format_value


class OptionsEditor(FieldEditor):
    """Options of a task or reward as a small form generated from the option defaults
    (engine.data.task_options / engine.rewards.reward_options). Only options the user
    sets are written; an empty box means "the default", shown greyed in the box.

    An option is read as its default's type (a number, text; a null default: YAML).
    `kinds` overrides that where the default says too little: ``TEXT`` reads the box as
    text (a token "-" or "1", which YAML would make a list or a number); a tuple of
    words makes the option a choice among them (a process reward model's head)."""

    def __init__(self, spec: FieldSpec, defaults: Callable[[], dict], parent=None,
                 kinds: Callable[[], dict] | None = None):
        super().__init__(spec, parent)
        self._defaults = defaults
        self._kinds = kinds or dict
        self._value: dict = {}
        self._shown_defaults: dict | None = None
        self._rows: dict[str, QWidget] = {}
        self._captions: dict[str, QLabel] = {}
        self._marked: tuple[set[str], str] = (set(), "")  # options changed from the preset's, their style
        self.form = QFormLayout(self)
        self.form.setContentsMargins(0, 0, 0, 0)
        self.form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)

    def rebuild(self) -> None:
        while self.form.rowCount():
            self.form.removeRow(0)  # deletes the row's widgets at once
        self._rows.clear()
        self._captions.clear()
        defaults = self._defaults()
        self._shown_defaults = defaults
        keys = list(defaults) + [k for k in self._value if k not in defaults]
        if not keys:
            empty = QLabel("no options", self)
            empty.setStyleSheet(NOTE_STYLE)
            self.form.addRow(empty)
            return
        for key in keys:
            default = defaults.get(key, _UNKNOWN)
            widget = self._option_widget(key, default)
            label = QLabel(key if default is not _UNKNOWN else f"{key} (unknown)")
            self.form.addRow(label, widget)
            self._rows[key], self._captions[key] = widget, label
        self._show_marks()

    def mark_changed(self, keys: set[str], style: str) -> None:
        """Show the captions of options `keys` in `style` (changed from the preset's; the
        rewards editor's marks), the others as notes."""
        if self._marked != (keys, style):
            self._marked = (set(keys), style)
            self._show_marks()

    def _show_marks(self) -> None:
        keys, style = self._marked
        for key, caption in self._captions.items():
            caption.setStyleSheet(style if key in keys else NOTE_STYLE)

    def _option_widget(self, key: str, default: Any) -> QWidget:
        current = self._value.get(key, _UNSET)
        words = self._kinds().get(key)
        if isinstance(words, tuple):
            return self._choice_widget(key, default, words, current)
        if isinstance(default, bool) and (current is _UNSET or isinstance(current, bool)):
            combo = QComboBox(self)
            combo.addItems([f"default ({format_value(default)})", "true", "false"])
            combo.setCurrentIndex(0 if current is _UNSET else 1 if current else 2)
            combo.setObjectName(f"option:{key}")
            combo.activated.connect(lambda _i: self._changed())
            return combo
        line = QLineEdit(self)
        line.setObjectName(f"option:{key}")
        shown = "–" if default is _UNKNOWN else '""' if default == "" else format_value(default)
        line.setPlaceholderText(f"default: {shown}")
        if current is not _UNSET:
            line.setText(option_text(current))
        line.textEdited.connect(lambda _t: self._changed())
        return line

    def _choice_widget(self, key: str, default: Any, words: tuple, current: Any) -> QComboBox:
        """The default, then each allowed word; a value from a file that is not one of
        them is shown (marked) and kept, so the engine's message about it makes sense."""
        combo = QComboBox(self)
        combo.setObjectName(f"option:{key}")
        values = [_UNSET, *words] + ([current] if current is not _UNSET and current not in words else [])
        for value in values:
            combo.addItem(f"default ({format_value(default)})" if value is _UNSET
                          else option_text(value) + ("" if value in words else " (not allowed)"), value)
        combo.setCurrentIndex(values.index(current))
        combo.activated.connect(lambda _i: self._changed())
        return combo

    def _parse(self, key: str, widget: QWidget, default: Any) -> Any:
        if isinstance(widget, QComboBox):
            if isinstance(self._kinds().get(key), tuple):
                return widget.currentData()
            return {0: _UNSET, 1: True, 2: False}[widget.currentIndex()]
        text = widget.text()
        if not text.strip():
            return _UNSET
        if self._kinds().get(key) == TEXT:
            return text
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            if text.strip() == "null":
                return None  # the engine says whether this option may be null
            kind = schema.INT if isinstance(default, int) else schema.FLOAT
            return parse_number(text, kind, False)
        if isinstance(default, str):
            return text
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return text

    def _changed(self) -> None:
        defaults = self._defaults()
        value = {}
        for key, widget in self._rows.items():
            parsed = self._parse(key, widget, defaults.get(key, _UNKNOWN))
            if parsed is not _UNSET:
                value[key] = parsed
        self._value = value
        self.report()

    def set_value(self, value: Any) -> None:
        if self not in FieldEditor._reporting:
            self.show_value(value)

    def show_value(self, value: Any) -> None:
        value = dict(value) if isinstance(value, dict) else {}
        if value != self._value or self._defaults() != self._shown_defaults:
            self._value = value
            self.rebuild()

    def value(self) -> Any:
        return dict(self._value)

    def option_widget(self, key: str) -> QWidget:
        return self._rows[key]


_UNSET = object()
_UNKNOWN = object()
TEXT = "text"  # a `kinds` value: the option's box is read as text


def option_text(value: Any) -> str:
    """How an option value is written in its box (parsed back by the option's type).

    >>> option_text("+-"), option_text(0.5), option_text([1, 2])
    ('+-', '0.5', '[1, 2]')
    """
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return format_value(value)
    import yaml

    return yaml.safe_dump(value, default_flow_style=True).strip()
