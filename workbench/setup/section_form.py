"""The generated parts of the set-up form: a schema section as a form of field rows, and
the algorithm chooser over one such form per algorithm.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QStyle, QToolButton, QVBoxLayout, QWidget,
)

from workbench.setup import schema
from workbench.setup.document import PresetDocument
from workbench.setup.editors import NOTE_STYLE, FieldEditor, FieldRow, make_editor
from workbench.setup.folding import FoldGroup, Folds
from workbench.setup.schema import format_value
from workbench.setup.switching import same_value
from workbench.setup.options_editor import OptionsEditor
from workbench.setup.unknown_keys import UnknownKeysBanner


Edited = Callable[[str, Any], None]  # a field's path and the value typed into it
CHANGED_STYLE = "color: #1a5fb4;"  # a field whose value is not the preset's


def reset_button(parent: QWidget, path: str) -> QToolButton:
    """A field's Reset: the style's reload icon (a glyph could be a box in the stock fonts),
    hidden until the value differs from the preset's, its room kept meanwhile so that the
    field does not narrow under the user's typing when it appears."""
    reset = QToolButton(parent)
    reset.setObjectName(f"reset:{path}")
    reset.setAccessibleName("Reset")
    icon = parent.style().standardIcon(QStyle.SP_BrowserReload)
    if icon.isNull():
        reset.setText("Reset")
    else:
        reset.setIcon(icon)
    reset.setAutoRaise(True)
    policy = reset.sizePolicy()
    policy.setRetainSizeWhenHidden(True)
    reset.setSizePolicy(policy)
    reset.hide()
    return reset


class SectionForm(QWidget):
    """A form with one FieldRow per field of a schema section (nested sections become
    sub-groups). `rows` maps each dotted path to its row. What is typed goes to
    `edited(path, value)`; `option_defaults()` gives the chosen task's options (the
    task options editor's defaults); `doc` is read by the unknown-key banners and Reset.

    Given `folds` and a `fold` (its key and title), the fields `essential(path)` does not
    name go into a folded group at the form's end (workbench.setup.folding)."""

    def __init__(self, specs: list[schema.FieldSpec], doc: PresetDocument, edited: Edited,
                 option_defaults: Callable[[], dict], parent: QWidget | None = None, section: str | None = None,
                 folds: Folds | None = None, fold: tuple[str, str] | None = None,
                 essential: Callable[[str], bool] = lambda path: True):
        super().__init__(parent)
        self.doc = doc
        self.rows: dict[str, FieldRow] = {}
        self.labels: dict[str, QLabel] = {}
        self.resets: dict[str, QToolButton] = {}
        self.nested: list[SectionForm] = []  # nested sections' forms (model.lora)
        self._lines: dict[str, tuple[QFormLayout, QWidget]] = {}  # a field's form layout and its row there
        self.hidden: set[str] = set()  # fields the chosen algorithm does not read (set_unread)
        self.defaults: dict[str, Any] = {}
        self._folded_sections = 0  # nested sections in the folded group (model.lora)
        # Unknown keys of this section (and of nested ones), at the top of each.
        self.banners: dict[str, UnknownKeysBanner] = {}
        self.form = QFormLayout(self)
        self.form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        self.form.setContentsMargins(4, 4, 4, 4)
        self.form.setVerticalSpacing(4)
        if section is not None:
            self.banners[section] = UnknownKeysBanner(doc, section, self)
            self.form.addRow(self.banners[section])
        self.fold = FoldGroup(fold[0], fold[1], folds, self) if folds is not None and fold is not None else None
        for spec in specs:
            target = self.form if self.fold is None or essential(spec.path) else self.fold.form
            if spec.kind == schema.SECTION:
                box = QGroupBox(spec.label if spec.name != "lora" else "LoRA", self)
                box.setToolTip(spec.description)
                inner = SectionForm(schema.section_fields(spec.model, spec.path + "."), doc, edited, option_defaults,
                                    box, spec.path)
                QVBoxLayout(box).addWidget(inner)
                box.layout().setContentsMargins(2, 2, 2, 2)
                self.rows.update(inner.rows)
                self.banners.update(inner.banners)
                self.nested.append(inner)
                self._folded_sections += self.fold is not None and target is self.fold.form
                target.addRow(box)
                continue
            if spec.kind == schema.MAPPING and spec.path == "data.task_options":
                editor: FieldEditor = OptionsEditor(spec, option_defaults, self)
            else:
                editor = make_editor(spec, self)
            row = FieldRow(editor, self)
            label = QLabel(spec.label, self)
            label.setToolTip(spec.tooltip())
            line = QWidget(self)  # the row and its Reset button, shown while the value is not the preset's
            beside = QHBoxLayout(line)
            beside.setContentsMargins(0, 0, 0, 0)
            beside.setSpacing(2)
            beside.addWidget(row, 1)
            reset = reset_button(line, spec.path)
            reset.clicked.connect(lambda _checked=False, path=spec.path: doc.reset(path))
            beside.addWidget(reset, 0, Qt.AlignTop)
            target.addRow(label, line)
            self.rows[spec.path], self.labels[spec.path], self.resets[spec.path] = row, label, reset
            self._lines[spec.path], self.defaults[spec.path] = (target, line), spec.default
            editor.edited.connect(lambda value, path=spec.path: edited(path, value))
        if self.fold is not None:
            self.form.addRow(self.fold)
            self._count_folded()

    def folded_paths(self) -> list[str]:
        """The fields in this form's folded group (a nested section's count as one each)."""
        return [path for path, (layout, _) in self._lines.items() if self.fold is not None
                and layout is self.fold.form]

    def _count_folded(self) -> None:
        shown = [p for p in self.folded_paths() if p not in self.hidden]
        self.fold.set_count(len(shown) + self._folded_sections)

    def set_unread(self, unread: set[str]) -> None:
        """Hide the rows of fields the chosen algorithm does not read, unless the preset
        gives one a value of its own (then it stays, with its problem, so it can be fixed)."""
        hidden = {path for path in self._lines
                  if path in unread and same_value(self.doc.get(path), self.defaults[path])}
        if hidden == self.hidden:
            return
        self.hidden = hidden
        for path, (layout, line) in self._lines.items():
            layout.setRowVisible(line, path not in hidden)
        if self.fold is not None:
            self._count_folded()

    def show_changed(self) -> None:
        """Mark the fields whose value is not the preset's: the label's colour, and Reset."""
        for path, label in self.labels.items():
            changed = self.doc.changed_from_preset(path)
            self.resets[path].setVisible(changed)
            label.setStyleSheet(CHANGED_STYLE if changed else "")
            if changed:
                was = format_value(self.doc.preset_value(path))
                self.resets[path].setToolTip(f"Put back the preset's value: {was}")
        for child in self.nested:
            child.show_changed()


class AlgorithmBox(QGroupBox):
    """The algorithm chooser (read from the schema's discriminated union) over one form
    per algorithm; switching shows that algorithm's hyperparameters, folded under one
    key (`doc`, `edited`, `option_defaults` and `folds` as SectionForm's). A choice goes to
    `switch(name)` (the panel's, which fits the new section to the model's context)."""

    def __init__(self, doc: PresetDocument, edited: Edited, option_defaults: Callable[[], dict],
                 parent: QWidget | None = None, folds: Folds | None = None,
                 switch: Callable[[str], None] | None = None):
        super().__init__("Algorithm", parent)
        self.doc, self._edited, self._option_defaults = doc, edited, option_defaults
        self._folds, self._switch = folds, switch or doc.switch_algorithm
        self.chooser = QComboBox(self)
        self.chooser.setObjectName("algorithm-chooser")
        self._names = list(schema.algorithm_models())
        for name in self._names:
            self.chooser.addItem(name.upper(), name)
            self.chooser.setItemData(self.chooser.count() - 1, schema.algorithm_summary(name), Qt.ToolTipRole)
        self.summary = QLabel(self)
        self.summary.setWordWrap(True)
        self.summary.setStyleSheet(NOTE_STYLE)
        self.row = FieldRow(self.chooser, self)  # problems about the algorithm as a whole
        # One form per algorithm, the current one shown, the others hidden (so they take
        # no space). Not a QStackedWidget: it keeps the height its form first had, and a
        # note that wraps to more lines in a narrower window was cut off.
        self.stack = QWidget(self)
        self.stack_layout = QVBoxLayout(self.stack)
        self.stack_layout.setContentsMargins(0, 0, 0, 0)
        self.forms: dict[str, SectionForm] = {}
        layout = QVBoxLayout(self)
        top = QFormLayout()
        top.addRow("algorithm", self.row)
        layout.addLayout(top)
        layout.addWidget(self.summary)
        layout.addWidget(self.stack)
        self.chooser.activated.connect(self._chosen)

    def _chosen(self, index: int) -> None:
        name = self.chooser.itemData(index)
        if name in self._names:
            self._switch(name)

    def form(self, name: str) -> SectionForm | None:
        if name not in self._names:
            return None
        if name not in self.forms:
            self.forms[name] = SectionForm(schema.algorithm_fields(name), self.doc, self._edited,
                                           self._option_defaults, self.stack, "algorithm", folds=self._folds,
                                           fold=("algorithm", f"{name.upper()} hyperparameters"),
                                           essential=lambda path: False)
            self.forms[name].hide()
            self.stack_layout.addWidget(self.forms[name])
        return self.forms[name]

    def show_algorithm(self, name: str) -> None:
        if name not in self._names:
            # Not an algorithm this engine has (a preset from a newer version, a typo):
            # shown as such; the schema's message says what is allowed.
            if self.chooser.findData(name) < 0:
                self.chooser.addItem(f"{name} (not available)", name)
            self.chooser.setCurrentIndex(self.chooser.findData(name))
            self.summary.setText("")
            self.stack.hide()
            return
        self.chooser.setCurrentIndex(self.chooser.findData(name))
        self.summary.setText(schema.algorithm_summary(name))
        self.stack.show()
        current = self.form(name)
        for form in self.forms.values():
            form.setVisible(form is current)

