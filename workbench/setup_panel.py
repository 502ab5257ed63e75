"""The set-up panel: every preset field, generated from the schema, with the engine's
own message next to each invalid field.

The panel is a view of a `PresetDocument`: editors write what the user typed into the
document, and the document's changes are drawn back into the editors. Validation (the
schema, then the pre-launch checks of workbench.checks) runs shortly after each change.
"""

from __future__ import annotations

from workbench import qt_compat  # noqa: F401  (first: guards a PySide6 refcount bug)

import copy
import html
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFont, QFontDatabase
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from engine.rewards.custom import function_options
from engine.preset import Preset
from engine.rewards import REWARD_MODEL, REWARDS, component_label, reward_options
from engine.data.tasks import TASKS, task_options
from workbench import schema
from workbench.background import submit as submit_in_background
from workbench.checks import prelaunch_checks, preview_prompts
from workbench.document import PresetDocument
from workbench.reward_fields import FunctionEditor, RewardFileEditor, functions_in, relative_to_preset, \
    reward_row_kind, split_function_name
from workbench.unknown_keys import UnknownKeysBanner
from workbench.fields import (
    ERROR_STYLE,
    NOTE_STYLE,
    ChoiceEditor,
    FieldEditor,
    FieldRow,
    NumberEditor,
    OptionsEditor,
    PathEditor,
    TextEditor,
    describe_model_source,
    make_editor,
)

def _check_job(preset: Preset | None, problems: list, data: dict, seed, base_dir):
    """The pre-launch checks (for a preset the schema accepts) and the data preview:
    (problems, notes, (examples, reason)); notes None when the checks could not run.
    Runs on a worker thread after edits."""
    notes = None
    if preset is not None:
        check = prelaunch_checks(preset, base_dir)
        problems, notes = check.problems, check.notes
    return problems, notes, preview_prompts(data, seed, base_dir)


SECTION_TITLES = {"model": "Model", "data": "Data", "training": "Training"}
SUMMARY_LINES = 3  # the problem summary's fixed height, in lines


def _monospace() -> QFont:
    return QFontDatabase.systemFont(QFontDatabase.FixedFont)


class SectionForm(QWidget):
    """A form with one FieldRow per field of a schema section (nested sections become
    sub-groups). `rows` maps each dotted path to its row."""

    def __init__(self, specs: list[schema.FieldSpec], panel: "SetupPanel", parent: QWidget | None = None,
                 section: str | None = None):
        super().__init__(parent)
        self.rows: dict[str, FieldRow] = {}
        # Unknown keys of this section (and of nested ones), at the top of each.
        self.banners: dict[str, UnknownKeysBanner] = {}
        self.form = QFormLayout(self)
        self.form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        self.form.setContentsMargins(4, 4, 4, 4)
        self.form.setVerticalSpacing(4)
        if section is not None:
            self.banners[section] = UnknownKeysBanner(panel.doc, section, self)
            self.form.addRow(self.banners[section])
        for spec in specs:
            if spec.kind == schema.SECTION:
                box = QGroupBox(spec.label if spec.name != "lora" else "LoRA", self)
                box.setToolTip(spec.description)
                inner = SectionForm(schema.section_fields(spec.model, spec.path + "."), panel, box, spec.path)
                QVBoxLayout(box).addWidget(inner)
                box.layout().setContentsMargins(2, 2, 2, 2)
                self.rows.update(inner.rows)
                self.banners.update(inner.banners)
                self.form.addRow(box)
                continue
            if spec.kind == schema.MAPPING and spec.path == "data.task_options":
                editor: FieldEditor = OptionsEditor(spec, panel.task_option_defaults, self)
            else:
                editor = make_editor(spec, self)
            row = FieldRow(editor, self)
            label = QLabel(spec.label, self)
            label.setToolTip(spec.tooltip())
            self.form.addRow(label, row)
            self.rows[spec.path] = row
            editor.edited.connect(lambda value, path=spec.path: panel.field_edited(path, value))


class AlgorithmBox(QGroupBox):
    """The algorithm chooser (read from the schema's discriminated union) over one form
    per algorithm; switching shows that algorithm's hyperparameters."""

    def __init__(self, panel: "SetupPanel"):
        super().__init__("Algorithm", panel)
        self.panel = panel
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
        self.stack = QStackedWidget(self)
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
            self.panel.doc.switch_algorithm(name)

    def form(self, name: str) -> SectionForm | None:
        if name not in self._names:
            return None
        if name not in self.forms:
            self.forms[name] = SectionForm(schema.algorithm_fields(name), self.panel, self.stack, "algorithm")
            self.stack.addWidget(self.forms[name])
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
        self.stack.setCurrentWidget(self.form(name))


REWARD_MODEL_HELP = ("A Hugging Face sequence-classification model with one label (num_labels 1): its logit on "
                     "prompt + completion is the reward. A hub id (org/name) or a local folder.")
CUSTOM_HELP = ("Your own reward: a function reward(prompts, completions, **fields) -> list of floats in a Python "
               "file (a relative path is found next to the preset). Its keyword parameters with defaults are its "
               "options.")


class RewardRow(QFrame):
    """One reward component: what it is (a registry reward, a reward model, or a Python
    file and function), its label, weight and options, and Remove.

    `field_rows` maps a path inside the entry (``""``, ``options.model``, ``name``) to
    the row that shows problems about it."""

    def __init__(self, editor: "RewardsEditor", index: int, kind: str):
        super().__init__(editor)
        self.editor, self.index, self.kind = editor, index, kind
        self._item: dict = {}  # the entry as last shown
        self.setFrameShape(QFrame.StyledPanel)
        self.setObjectName(f"reward:{index}")
        prefix = f"rewards.{index}."
        specs = {name: schema.field_spec(_reward_model(), name, prefix) for name in ("name", "label", "weight", "options")}
        self.weight = NumberEditor(specs["weight"], self)
        self.weight.line.setMaximumWidth(70)
        self.label = TextEditor(specs["label"], self)
        self.label.line.setMaximumWidth(130)
        self.options = OptionsEditor(specs["options"], self._option_defaults, self)
        self.remove = QPushButton("Remove", self)
        self.remove.setToolTip("Remove this reward component")
        self.problems = FieldRow(self.options, self)
        self.field_rows: dict[str, FieldRow] = {"": self.problems}
        self.name: ChoiceEditor | None = None
        self.model: PathEditor | None = None
        self.file: RewardFileEditor | None = None
        self.function: FunctionEditor | None = None

        top = QHBoxLayout()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        layout.addLayout(top)
        self.unknown = UnknownKeysBanner(editor.panel.doc, f"rewards.{index}", self)
        layout.addWidget(self.unknown)
        if kind == "registry":
            self.name = ChoiceEditor(schema.FieldSpec(specs["name"].path, "name", schema.CHOICE,
                                                      specs["name"].description, choices=tuple(sorted(REWARDS))), self)
            top.addWidget(self.name, 2)
            self.name.edited.connect(lambda value: editor.set_item(self.index, {"name": value, "options": {}}))
        elif kind == "reward_model":
            title = QLabel("<b>reward model</b>", self)
            title.setToolTip(REWARD_MODEL_HELP)
            top.addWidget(title, 2)
            model_spec = schema.FieldSpec(f"{prefix}options.model", "model", schema.TEXT, REWARD_MODEL_HELP)
            self.model = PathEditor(model_spec, folder=True, parent=self)
            self.model.line.setPlaceholderText("Hugging Face id (org/name) or a folder")
            self.model.browse.setToolTip("Choose a local reward-model folder")
            self.field_rows["options.model"] = FieldRow(self.model, self)
            layout.addWidget(self.field_rows["options.model"])
            self.model.edited.connect(self._model_edited)
        else:
            title = QLabel("<b>Python function</b>", self)
            title.setToolTip(CUSTOM_HELP)
            top.addWidget(title, 2)
            file_spec = schema.FieldSpec(specs["name"].path, "file", schema.TEXT, CUSTOM_HELP)
            self.file = RewardFileEditor(file_spec, lambda: editor.panel.doc.base_dir, self)
            self.function = FunctionEditor(schema.FieldSpec(specs["name"].path, "function", schema.TEXT, CUSTOM_HELP),
                                           self)
            source = QWidget(self)
            form = QFormLayout(source)
            form.setContentsMargins(0, 0, 0, 0)
            form.addRow("file", self.file)
            form.addRow("function", self.function)
            self.field_rows["name"] = FieldRow(source, self)
            layout.addWidget(self.field_rows["name"])
            self.file.edited.connect(self._file_edited)
            self.function.edited.connect(lambda _value: self._source_edited())
        top.addWidget(QLabel("label"))
        top.addWidget(self.label)
        top.addWidget(QLabel("weight"))
        top.addWidget(self.weight)
        top.addWidget(self.remove)
        layout.addWidget(self.problems)
        self.label.edited.connect(lambda value: editor.set_item(self.index, {"label": value or None}))
        self.weight.edited.connect(lambda value: editor.set_item(self.index, {"weight": value}))
        self.options.edited.connect(self._options_edited)
        self.remove.clicked.connect(lambda: editor.remove_item(self.index))

    # -------------------------------------------------------------- editing

    def _options_edited(self, value: dict) -> None:
        if self.kind == "reward_model":
            # `model` has its own field; the options box holds the rest.
            value = {"model": (self._item.get("options") or {}).get("model", ""), **value}
        self.editor.set_item(self.index, {"options": value})

    def _model_edited(self, value: Any) -> None:
        options = dict(self._item.get("options") or {})
        options["model"] = value or ""
        self.editor.set_item(self.index, {"options": options})

    def _file_edited(self, _value: Any) -> None:
        functions = functions_in(self.file.value() or "", self.editor.panel.doc.base_dir)
        self.function.set_choices(functions)
        if functions and self.function.value() not in functions:
            self.function.set_value(functions[0])  # a new file: its first reward-shaped function
        self._source_edited()

    def _source_edited(self) -> None:
        name = f"{(self.file.value() or '').strip()}:{self.function.value()}"
        old = self._item.get("options") or {}
        # Options belong to the function: keep only those the new one takes.
        keep = function_options(name, self.editor.panel.doc.base_dir)
        self.editor.set_item(self.index, {"name": name, "options": {k: v for k, v in old.items() if k in keep}})

    def _option_defaults(self) -> dict:
        name = self._item.get("name") if self._item else None
        if self.kind == "registry":
            return reward_options(name) if name in REWARDS else {}
        if self.kind == "reward_model":
            return {k: v for k, v in reward_options(REWARD_MODEL).items() if k != "model"}
        return function_options(name, self.editor.panel.doc.base_dir) if isinstance(name, str) else {}

    # ------------------------------------------------------------- showing

    def show_item(self, item: Any) -> None:
        item = item if isinstance(item, dict) else {}
        self._item = item
        name = item.get("name")
        options = item.get("options") if isinstance(item.get("options"), dict) else {}
        if self.name is not None:
            self.name.set_value(name)
        if self.model is not None:
            model = options.get("model")
            self.model.set_value(model if isinstance(model, str) else ("" if model is None else str(model)))
            options = {k: v for k, v in options.items() if k != "model"}
        if self.file is not None:
            file, function = split_function_name(name)
            self.file.set_value(file)
            self.function.set_choices(functions_in(file, self.editor.panel.doc.base_dir))
            self.function.set_value(function)
        label = item.get("label")
        self.label.set_value(label)
        try:
            default = component_label(name if isinstance(name, str) else "")
        except Exception:  # a half-typed name: no default to show
            default = ""
        self.label.line.setPlaceholderText(default or "label")
        self.weight.set_value(item.get("weight"))
        self.options.set_value(options)


def _reward_model():
    return schema.field_spec(Preset, "rewards").model


ADD_REWARD_MODEL = "reward model (Hugging Face)…"
ADD_CUSTOM = "Python function…"


class RewardsEditor(QGroupBox):
    """The reward components: registry rewards, reward models and custom Python
    functions, each with label, weight and options."""

    def __init__(self, panel: "SetupPanel"):
        super().__init__("Rewards", panel)
        self.panel = panel
        self.items: list[RewardRow] = []
        self.list_row = FieldRow(QLabel("total reward = Σ weight × component", self), self)
        self.list_row.editor.setStyleSheet(NOTE_STYLE)
        self.rows_box = QVBoxLayout()
        self.rows_box.setSpacing(4)
        self.adder = QComboBox(self)
        self.adder.setObjectName("reward-adder")
        self.adder.setToolTip("A reward from the registry, a learned reward model, or your own Python function")
        self.add_button = QPushButton("Add component", self)
        add = QHBoxLayout()
        add.addWidget(self.adder, 1)
        add.addWidget(self.add_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list_row)
        layout.addLayout(self.rows_box)
        layout.addLayout(add)
        self.add_button.clicked.connect(self._add)

    def _items(self) -> list:
        value = self.panel.doc.get("rewards")
        return list(value) if isinstance(value, list) else []

    def refresh(self) -> None:
        items = self._items()
        names = [i.get("name") if isinstance(i, dict) else None for i in items]
        kinds = [reward_row_kind(n) for n in names]
        if [row.kind for row in self.items] != kinds:
            for row in self.items:
                self.rows_box.removeWidget(row)
                row.hide()  # at once: deleteLater waits for the event loop
                row.setParent(None)
                row.deleteLater()
            self.items = [RewardRow(self, i, kind) for i, kind in enumerate(kinds)]
            for row in self.items:
                self.rows_box.addWidget(row)
        for row, item in zip(self.items, items):
            row.show_item(item)
        self.adder.clear()
        for name in sorted(REWARDS):
            if name not in names:
                self.adder.addItem(name)
        self.adder.addItem(ADD_REWARD_MODEL)
        self.adder.addItem(ADD_CUSTOM)

    def set_item(self, index: int, changes: dict) -> None:
        items = [dict(i) if isinstance(i, dict) else i for i in self._items()]
        if 0 <= index < len(items) and isinstance(items[index], dict):
            items[index].update(changes)
            if items[index].get("label", "") is None:
                del items[index]["label"]  # unset: the preset leaves it out
            self.panel.doc.set("rewards", items)

    def remove_item(self, index: int) -> None:
        items = self._items()
        del items[index]
        self.panel.doc.set("rewards", items)

    def _new_item(self, name: str, options: dict | None = None) -> dict:
        defaults = {k: v for k, v in schema.item_defaults(_reward_model()).items() if v is not None}
        item = {"name": name, **defaults, "options": options or {}}
        # Two components may not share a label: number a second reward model, say.
        taken = {component_label(i.get("name", ""), i.get("label")) for i in self._items()
                 if isinstance(i, dict) and isinstance(i.get("name"), str)}
        label, n = component_label(name), 2
        while label in taken:
            label, n = f"{component_label(name)}_{n}", n + 1
        if label != component_label(name):
            item["label"] = label
        return item

    def _add(self) -> None:
        choice = self.adder.currentText()
        if choice == ADD_REWARD_MODEL:
            self.add_reward_model()
        elif choice == ADD_CUSTOM:
            self.add_custom()
        elif choice:
            self.panel.doc.set("rewards", self._items() + [self._new_item(choice)])

    def add_reward_model(self, model: str = "") -> None:
        """A reward-model component (the model field is then edited in its row)."""
        self.panel.doc.set("rewards", self._items() + [self._new_item(REWARD_MODEL, {"model": model})])
        if not model:
            self.items[-1].model.line.setFocus(Qt.OtherFocusReason)

    def add_custom(self, path: str | None = None) -> None:
        """A custom-function component from the Python file `path` (asked for when None),
        naming its first function that takes (prompts, completions, ...)."""
        base = self.panel.doc.base_dir
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self, "Python file with the reward function", str(base or Path.cwd()),
                                                  "Python files (*.py);;All files (*)")
            if not path:
                return
        file = relative_to_preset(path, base)
        functions = functions_in(file, base)
        name = f"{file}:{functions[0] if functions else 'reward'}"
        self.panel.doc.set("rewards", self._items() + [self._new_item(name)])

    def row_for(self, path: str) -> FieldRow | None:
        parts = path.split(".")
        if len(parts) >= 2 and parts[1].isdigit() and int(parts[1]) < len(self.items):
            rows = self.items[int(parts[1])].field_rows
            inner = ".".join(parts[2:])
            while inner:
                if inner in rows:
                    return rows[inner]
                inner = inner.rpartition(".")[0]
            return rows[""]
        return self.list_row

    def all_rows(self) -> dict[str, FieldRow]:
        """Every row that shows problems, by the path it is about (rewards.1.options.model)."""
        found = {}
        for index, item in enumerate(self.items):
            for inner, row in item.field_rows.items():
                found[f"rewards.{index}" + (f".{inner}" if inner else "")] = row
        return found


class SetupPanel(QWidget):
    """Every preset field; problems next to their fields; a summary on top.

    `validated(problems)` is emitted after each validation with the (path, message)
    pairs that block a run (empty when the preset can run).
    """

    validated = Signal(list)

    def __init__(self, doc: PresetDocument, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.problems: list[tuple[str, str]] = []
        self.notes: list[tuple[str, str]] = []
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(150)
        self._timer.timeout.connect(self._validate)
        self._generation = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prelaunch-checks")

        # The problems, in an area of fixed height (scrolled when they are many): the
        # fields below must not move as problems come and go, or a click aimed at one
        # field lands on another.
        self.summary = QLabel(self)
        self.summary.setObjectName("setup-summary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.RichText)
        self.summary.setAlignment(Qt.AlignLeft | Qt.AlignTop)
        self.summary.linkActivated.connect(self.focus_field)
        self.summary_area = QScrollArea(self)
        self.summary_area.setObjectName("setup-summary-area")
        self.summary_area.setWidgetResizable(True)
        self.summary_area.setFrameShape(QFrame.NoFrame)
        self.summary_area.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.summary_area.setWidget(self.summary)
        self.summary_area.setFixedHeight(SUMMARY_LINES * self.fontMetrics().lineSpacing() + 6)

        # Sections: Experiment + Model + Data | Algorithm + Rewards | Training
        self.forms: dict[str, SectionForm] = {}
        top_specs = {s.name: s for s in schema.section_fields(Preset)}
        experiment = QGroupBox("Experiment", self)
        self.forms["experiment"] = SectionForm([top_specs["name"], top_specs["description"]], self, experiment, "")
        QVBoxLayout(experiment).addWidget(self.forms["experiment"])
        boxes: dict[str, QGroupBox] = {}
        for key in ("model", "data", "training"):
            box = QGroupBox(SECTION_TITLES[key], self)
            box.setToolTip(top_specs[key].description)
            form = SectionForm(schema.section_fields(top_specs[key].model, key + "."), self, box, key)
            self.forms[key] = form
            QVBoxLayout(box).addWidget(form)
            boxes[key] = box
        self.model_note = self.forms["model"].rows["model.name_or_path"]
        self.preview = QPlainTextEdit(self)
        self.preview.setObjectName("prompt-preview")
        self.preview.setReadOnly(True)
        self.preview.setFont(_monospace())
        self.preview.setMaximumHeight(110)
        self.preview.setToolTip("The first training prompts of this data, with the answer the rewards compare against")
        boxes["data"].layout().addWidget(QLabel("Preview: first training prompts"))
        boxes["data"].layout().addWidget(self.preview)
        self.algorithm = AlgorithmBox(self)
        self.rewards = RewardsEditor(self)

        grid = QGridLayout()
        columns = [[experiment, boxes["model"], boxes["data"]], [self.algorithm, self.rewards], [boxes["training"]]]
        for col, widgets in enumerate(columns):
            column = QVBoxLayout()
            for widget in widgets:
                column.addWidget(widget)
            column.addStretch(1)
            grid.addLayout(column, 0, col)
            grid.setColumnStretch(col, 1)
        inner = QWidget()
        inner.setLayout(grid)
        self.scroll = QScrollArea(self)
        self.scroll.setWidgetResizable(True)
        self.scroll.setWidget(inner)
        self.scroll.setFrameShape(QFrame.NoFrame)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.summary_area)
        layout.addWidget(self.scroll, 1)

        doc.changed.connect(self._doc_changed)
        doc.replaced.connect(self._doc_replaced)
        self.refresh()

    # ------------------------------------------------------------ model -> view

    def rows(self) -> dict[str, FieldRow]:
        """Every field row by path (the current algorithm's included)."""
        rows: dict[str, FieldRow] = {}
        for form in self.forms.values():
            rows.update(form.rows)
        form = self.algorithm.form(self.doc.algorithm)
        if form is not None:
            rows.update(form.rows)
        return rows

    def editor(self, path: str) -> FieldEditor:
        return self.rows()[path].editor

    def banners(self) -> dict[str, UnknownKeysBanner]:
        """The unknown-key banner of each section ("" the top level, model.lora, ...)."""
        found: dict[str, UnknownKeysBanner] = {}
        for form in [*self.forms.values(), self.algorithm.form(self.doc.algorithm)]:
            if form is not None:
                found.update(form.banners)
        found.update({row.unknown.section: row.unknown for row in self.rewards.items})
        return found

    def refresh(self) -> None:
        """Show the document's values in every editor (an editor the user is typing in
        keeps its text: see FieldEditor.report)."""
        self.algorithm.show_algorithm(self.doc.algorithm)
        for path, row in self.rows().items():
            row.editor.set_value(self.doc.get(path))
        self.rewards.refresh()
        unknown = self.doc.unknown_keys()
        for banner in self.banners().values():
            banner.show_keys(unknown)
        self.schedule_validation()

    def _doc_changed(self, path: str) -> None:
        self.refresh()

    def _doc_replaced(self) -> None:
        self.notes = []  # about the preset that was open: not kept for this one (_kept_notes)
        self.refresh()

    # ------------------------------------------------------------ view -> model

    def field_edited(self, path: str, value: Any) -> None:
        # The data source is either a built-in task or a file: choosing one clears the other.
        if path == "data.task":
            changes = {"data.task": value, "data.task_options": {}}
            if value is not None:
                changes["data.path"] = None
            self.doc.update(changes)
        elif path == "data.path" and value:
            self.doc.update({"data.path": value, "data.task": None, "data.task_options": {}})
        else:
            self.doc.set(path, value)

    def task_option_defaults(self) -> dict:
        task = self.doc.get("data.task")
        return task_options(task) if task in TASKS else {}

    # -------------------------------------------------------------- validation

    def schedule_validation(self) -> None:
        self._timer.start()

    def validate_now(self) -> list[tuple[str, str]]:
        """Validate the document now, pre-launch checks included, waiting for them (Run
        does); show problems and notes; return the problems."""
        return self._validate(background=False)

    def _validate(self, background: bool = True) -> list[tuple[str, str]]:
        # The schema check takes a millisecond and runs here. The pre-launch checks
        # generate the data (seconds for 100,000 prompts) and count tokens: after an
        # edit they run on a worker thread, so typing never waits on them.
        self._timer.stop()
        self._generation += 1
        preset, problems = self.doc.validate()
        data, seed, base_dir = copy.deepcopy(self.doc.get("data") or {}), self.doc.get("training.seed"), self.doc.base_dir
        job = partial(_check_job, preset, problems, data, seed, base_dir)
        if not background:
            return self._finish(self._generation, *job())
        if problems:
            self._show(problems, self._kept_notes(problems))  # the schema's verdict at once; the preview follows
        generation = self._generation
        # Through workbench.background: no garbage collection on the worker (it would
        # free Qt objects there and hang the window), and no callback to a deleted panel.
        submit_in_background(self._executor, job, self, partial(self._on_checked, generation))
        return problems

    def _on_checked(self, generation: int, future) -> None:
        if generation != self._generation:
            return  # the preset changed meanwhile; a newer check is coming
        try:
            result = future.result()
        except Exception as exc:  # a bug in a check must not pass silently, nor block editing
            result = ([("", f"the pre-launch check failed: {type(exc).__name__}: {exc}")], [], ([], ""))
        self._finish(generation, *result)

    def _finish(self, generation, problems, notes, preview):
        if generation != self._generation:
            return problems
        if notes is None:
            notes = self._kept_notes(problems)
        self.problems, self.notes = problems, notes
        self._show(problems, notes)
        self._show_preview(*preview)
        self.validated.emit(list(problems))
        return problems

    def _kept_notes(self, problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """While the preset has problems the pre-launch checks cannot run: their last
        notes stay (so rows do not shrink and grow under the user's pointer as problems
        come and go elsewhere), except on a field that now has a problem."""
        broken = {path for path, _ in problems}
        return [(path, note) for path, note in self.notes if path not in broken]

    def row_for(self, path: str) -> FieldRow | None:
        """The row a problem about `path` belongs to: the field itself, or the closest
        enclosing one (rewards.1.options.x -> reward component 1)."""
        if path == "rewards" or path.startswith("rewards."):
            return self.rewards.row_for(path)
        if path == "algorithm" or path.startswith(f"algorithm.{schema.algorithm_tag()}"):
            return self.algorithm.row
        rows = self.rows()
        parts = path.split(".")
        while parts:
            candidate = ".".join(parts)
            if candidate in rows:
                return rows[candidate]
            parts.pop()
        # A problem about a section as a whole (data: set exactly one of task or path)
        # or an unknown field in it goes to the section's first field.
        section = path.split(".")[0]
        if section == "algorithm":
            return self.algorithm.row
        return next((row for p, row in rows.items() if p.startswith(section + ".")), None)

    def _show(self, problems: list[tuple[str, str]], notes: list[tuple[str, str]]) -> None:
        by_row: dict[int, tuple[FieldRow, list[str]]] = {}
        unplaced: list[str] = []
        all_rows = list(self.rows().values()) + [self.algorithm.row, self.rewards.list_row] + \
            list(self.rewards.all_rows().values())
        for row in all_rows:
            by_row[id(row)] = (row, [])
        unknown = {key.path for key in self.doc.unknown_keys()}
        for path, message in problems:
            if path in unknown:
                continue  # on its section's banner, with Remove / Rename
            row = self.row_for(path) if path else None
            if row is None or id(row) not in by_row:
                unplaced.append(f"{path}: {message}" if path else message)
                continue
            own = self._row_path(row)
            prefix = path[len(own) + 1:] + ": " if own and path.startswith(own + ".") else ""
            by_row[id(row)][1].append(prefix + message)
        for row, messages in by_row.values():
            row.show_problems(messages)
        note_rows: dict[int, tuple[FieldRow, list[str]]] = {id(r): (r, []) for r in all_rows}
        for path, message in notes:
            row = self.row_for(path)
            if row is not None and id(row) in note_rows:
                note_rows[id(row)][1].append(message)
        source = describe_model_source(str(self.doc.get("model.name_or_path") or ""))
        if id(self.model_note) in note_rows and source:
            note_rows[id(self.model_note)][1].insert(0, source)
        for row, messages in note_rows.values():
            row.show_notes(messages)
        self._summarise(problems, unplaced)

    def _row_path(self, row: FieldRow) -> str:
        for path, candidate in self.rows().items():
            if candidate is row:
                return path
        for path, candidate in self.rewards.all_rows().items():
            if candidate is row:
                return path
        return ""

    def _summarise(self, problems: list[tuple[str, str]], unplaced: list[str]) -> None:
        if not problems:
            self.summary.setText("<span style='color:#1e7e34'>✔ Ready to run.</span> "
                                 "<span style='color:#5f6368'>Hover a field's name for its help.</span>")
            return
        items = []
        unknown = {key.path: key for key in self.doc.unknown_keys()}
        for path, message in problems:
            if path in unknown:  # the engine's message lists every allowed key: too long here
                key = unknown[path]
                message = (f"unknown key (Rename to {key.suggestion} or Remove" if key.suggestion
                           else "unknown key (Remove") + " at the top of its section)"
            label = html.escape(path or "preset")
            link = f"<a href='{html.escape(path)}'>{label}</a>" if path else label
            items.append(f"{link}: {html.escape(message)}")
        more = " (scroll for all)" if len(problems) >= SUMMARY_LINES else ""
        self.summary.setText(
            f"<span style='{ERROR_STYLE}'>✖ {len(problems)} problem{'s' if len(problems) > 1 else ''} "
            f"to fix before running{more}:</span><br>" + "<br>".join(items)
        )

    def _show_preview(self, examples: list, reason: str) -> None:
        if not examples:
            self.preview.setPlainText(reason)
            return
        lines = []
        for example in examples:
            answer = example.fields.get("answer")
            lines.append(example.prompt + (f"  →  {answer!r}" if answer is not None else ""))
        self.preview.setPlainText("\n".join(lines))

    def focus_field(self, path: str) -> None:
        key = next((k for k in self.doc.unknown_keys() if k.path == path), None)
        banner = self.banners().get(key.section) if key is not None else None
        if banner is not None and key.key in banner.rows:
            self.scroll.ensureWidgetVisible(banner)
            banner.row(key.key).remove.setFocus(Qt.OtherFocusReason)
            return
        row = self.row_for(path)
        if row is None:
            return
        self.scroll.ensureWidgetVisible(row)
        editor = row.editor
        target = editor.input_widget() if isinstance(editor, FieldEditor) else editor
        target.setFocus(Qt.OtherFocusReason)
