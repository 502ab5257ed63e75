"""The generated parts of the set-up form: a schema section as a form of field rows, and
the algorithm chooser over one such form per algorithm.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFormLayout, QGroupBox, QLabel, QVBoxLayout, QWidget

from workbench.setup import schema
from workbench.setup.document import PresetDocument
from workbench.setup.editors import NOTE_STYLE, FieldEditor, FieldRow, make_editor
from workbench.setup.options_editor import OptionsEditor
from workbench.setup.unknown_keys import UnknownKeysBanner


Edited = Callable[[str, Any], None]  # a field's path and the value typed into it


class SectionForm(QWidget):
    """A form with one FieldRow per field of a schema section (nested sections become
    sub-groups). `rows` maps each dotted path to its row. What is typed goes to
    `edited(path, value)`; `option_defaults()` gives the chosen task's options (the
    task options editor's defaults); `doc` is read by the unknown-key banners."""

    def __init__(self, specs: list[schema.FieldSpec], doc: PresetDocument, edited: Edited,
                 option_defaults: Callable[[], dict], parent: QWidget | None = None, section: str | None = None):
        super().__init__(parent)
        self.rows: dict[str, FieldRow] = {}
        # Unknown keys of this section (and of nested ones), at the top of each.
        self.banners: dict[str, UnknownKeysBanner] = {}
        self.form = QFormLayout(self)
        self.form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        self.form.setContentsMargins(4, 4, 4, 4)
        self.form.setVerticalSpacing(4)
        if section is not None:
            self.banners[section] = UnknownKeysBanner(doc, section, self)
            self.form.addRow(self.banners[section])
        for spec in specs:
            if spec.kind == schema.SECTION:
                box = QGroupBox(spec.label if spec.name != "lora" else "LoRA", self)
                box.setToolTip(spec.description)
                inner = SectionForm(schema.section_fields(spec.model, spec.path + "."), doc, edited, option_defaults,
                                    box, spec.path)
                QVBoxLayout(box).addWidget(inner)
                box.layout().setContentsMargins(2, 2, 2, 2)
                self.rows.update(inner.rows)
                self.banners.update(inner.banners)
                self.form.addRow(box)
                continue
            if spec.kind == schema.MAPPING and spec.path == "data.task_options":
                editor: FieldEditor = OptionsEditor(spec, option_defaults, self)
            else:
                editor = make_editor(spec, self)
            row = FieldRow(editor, self)
            label = QLabel(spec.label, self)
            label.setToolTip(spec.tooltip())
            self.form.addRow(label, row)
            self.rows[spec.path] = row
            editor.edited.connect(lambda value, path=spec.path: edited(path, value))


class AlgorithmBox(QGroupBox):
    """The algorithm chooser (read from the schema's discriminated union) over one form
    per algorithm; switching shows that algorithm's hyperparameters (`doc`, `edited`
    and `option_defaults` as SectionForm's)."""

    def __init__(self, doc: PresetDocument, edited: Edited, option_defaults: Callable[[], dict],
                 parent: QWidget | None = None):
        super().__init__("Algorithm", parent)
        self.doc, self._edited, self._option_defaults = doc, edited, option_defaults
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
            self.doc.switch_algorithm(name)

    def form(self, name: str) -> SectionForm | None:
        if name not in self._names:
            return None
        if name not in self.forms:
            self.forms[name] = SectionForm(schema.algorithm_fields(name), self.doc, self._edited,
                                           self._option_defaults, self.stack, "algorithm")
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

