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
    sets are written; an empty box means "the default", shown greyed in the box."""

    def __init__(self, spec: FieldSpec, defaults: Callable[[], dict], parent=None):
        super().__init__(spec, parent)
        self._defaults = defaults
        self._value: dict = {}
        self._shown_defaults: dict | None = None
        self._rows: dict[str, QWidget] = {}
        self.form = QFormLayout(self)
        self.form.setContentsMargins(0, 0, 0, 0)
        self.form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)

    def rebuild(self) -> None:
        while self.form.rowCount():
            self.form.removeRow(0)  # deletes the row's widgets at once
        self._rows.clear()
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
            label.setStyleSheet(NOTE_STYLE)
            self.form.addRow(label, widget)
            self._rows[key] = widget

    def _option_widget(self, key: str, default: Any) -> QWidget:
        current = self._value.get(key, _UNSET)
        if isinstance(default, bool) and (current is _UNSET or isinstance(current, bool)):
            combo = QComboBox(self)
            combo.addItems([f"default ({format_value(default)})", "true", "false"])
            combo.setCurrentIndex(0 if current is _UNSET else 1 if current else 2)
            combo.setObjectName(f"option:{key}")
            combo.activated.connect(lambda _i: self._changed())
            return combo
        line = QLineEdit(self)
        line.setObjectName(f"option:{key}")
        line.setPlaceholderText("default: " + (format_value(default) if default is not _UNKNOWN else "–"))
        if current is not _UNSET:
            line.setText(option_text(current))
        line.textEdited.connect(lambda _t: self._changed())
        return line

    def _parse(self, key: str, widget: QWidget, default: Any) -> Any:
        if isinstance(widget, QComboBox):
            return {0: _UNSET, 1: True, 2: False}[widget.currentIndex()]
        text = widget.text()
        if not text.strip():
            return _UNSET
        if isinstance(default, (int, float)) and not isinstance(default, bool):
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
