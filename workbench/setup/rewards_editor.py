"""The rewards section of the set-up form: one row per reward component (a registry
reward, a reward model, a process reward model, or a Python file and function) with its
label, weight, step delimiter and options, and the Add component chooser.

As a changed field of the form is marked (workbench/setup/section_form.py), a component
that is not the preset's as opened or last saved is marked (workbench/setup/reward_changes.py):
the captions of what differs in blue (an added component framed in blue) and a Reset that
puts that component back as the preset had it (an added one: removes it); under the rows,
what changed (removed components too) and *Reset rewards*, the preset's rewards back.
"""

from __future__ import annotations

import copy

from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from engine.preset.schema import Preset
from engine.rewards import PROCESS_REWARD_MODEL, REWARD_MODEL, REWARDS, component_label
from engine.rewards.custom import function_options
from engine.rewards import PRM_HEADS
from workbench.setup import schema
from workbench.setup.document import PresetDocument
from workbench.setup.editors import NOTE_STYLE, ChoiceEditor, FieldRow, NumberEditor, PathEditor, TextEditor
from workbench.setup.model_picker import type_into
from workbench.setup.reward_changes import compare, describe, entry_name, summary
from workbench.setup.section_form import CHANGED_STYLE, reset_button
from workbench.setup.options_editor import TEXT, OptionsEditor
from workbench.setup.reward_run_picker import RewardRunButton
from workbench.setup.reward_fields import FunctionEditor, RewardFileEditor, StepDelimiterEditor, \
    delimiter_placeholder, functions_in, option_defaults, relative_to_preset, reward_help, reward_row_kind, \
    split_function_name
from workbench.setup.unknown_keys import UnknownKeysBanner


REWARD_MODEL_HELP = ("A Hugging Face sequence-classification model with one label (num_labels 1): its logit on "
                     "prompt + completion is the reward. A hub id (org/name), a local folder, or a reward-model run "
                     "(its folder, or run:PRESET_NAME for that preset's newest run: Run…).")
PROCESS_REWARD_MODEL_HELP = (
    "A Hugging Face process reward model that scores each step of a completion: a token-classification "
    "model (the probability of class `label` at each step's end) or a causal LM (p(good_token) / "
    "(p(good_token) + p(bad_token)) there), as the public math PRMs. Steps are split at the step "
    "delimiter; step_tag is the text written after each step that the score is read at. A hub id "
    "(org/name) or a local folder.")
# Models whose `model` option has its own field (the options box holds the rest).
MODEL_KINDS = {REWARD_MODEL: REWARD_MODEL_HELP, PROCESS_REWARD_MODEL: PROCESS_REWARD_MODEL_HELP}  # kind -> help
# Options whose box the options editor must read as something the default does not say:
# a token is text even when it reads as YAML ("-" a list, "1" a number); head is a choice.
PRM_OPTION_KINDS = {"good_token": TEXT, "bad_token": TEXT, "step_tag": TEXT, "head": PRM_HEADS}
CHANGED_COLOUR = CHANGED_STYLE.partition(":")[2].strip(" ;")  # the set-up form's colour of a changed field
CUSTOM_HELP = ("Your own reward: a function reward(prompts, completions, **fields) -> list of floats in a Python "
               "file (a relative path is found next to the preset). Its keyword parameters with defaults are its "
               "options.")


class RewardRow(QFrame):
    """One reward component: what it is (a registry reward, a reward model, a process
    reward model, or a Python file and function), its label, weight, step delimiter and
    options, and Remove.

    `field_rows` maps a path inside the entry (``""``, ``options.model``, ``name``) to
    the row that shows problems about it."""

    def __init__(self, editor: "RewardsEditor", index: int, kind: str):
        super().__init__(editor)
        self.editor, self.index, self.kind = editor, index, kind
        self._item: dict = {}  # the entry as last shown
        self.setFrameShape(QFrame.StyledPanel)
        self.setObjectName(f"reward:{index}")
        prefix = f"rewards.{index}."
        specs = {name: schema.field_spec(_reward_model(), name, prefix)
                 for name in ("name", "label", "weight", "options", "step_delimiter")}
        self.weight = NumberEditor(specs["weight"], self)
        self.weight.line.setMaximumWidth(70)
        # "0.25" whole beside the Reset each row keeps room for
        self.weight.line.setMinimumWidth(self.weight.line.fontMetrics().horizontalAdvance("0.000") + 12)
        self.label = TextEditor(specs["label"], self)
        self.label.line.setMaximumWidth(130)
        self.options = OptionsEditor(specs["options"], self._option_defaults, self,
                                     kinds=lambda: PRM_OPTION_KINDS if self.kind == PROCESS_REWARD_MODEL else {})
        self.delimiter = StepDelimiterEditor(specs["step_delimiter"], self)
        self.remove = QPushButton("Remove", self)
        self.remove.setToolTip("Remove this reward component")
        self.title: QLabel | None = None  # a reward model's or a function's kind
        self.added = False  # not in the preset as opened or last saved: framed in the changed colour
        self.setStyleSheet(f"RewardRow[added=\"true\"] {{ border: 1px solid {CHANGED_COLOUR}; }}")
        self.reset = reset_button(self, f"rewards.{index}")
        self.reset.clicked.connect(lambda: editor.reset_item(self.index))
        self.problems = FieldRow(self.options, self)
        self.field_rows: dict[str, FieldRow] = {"": self.problems}
        self.name: ChoiceEditor | None = None
        self.model: PathEditor | None = None
        self.file: RewardFileEditor | None = None
        self.function: FunctionEditor | None = None
        self.run_picker: RewardRunButton | None = None  # a reward model's "Run…"

        top = QHBoxLayout()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        layout.addLayout(top)
        self.unknown = UnknownKeysBanner(editor.doc, f"rewards.{index}", self)
        layout.addWidget(self.unknown)
        if kind == "registry":
            names = tuple(sorted(REWARDS))
            self.name = ChoiceEditor(schema.FieldSpec(specs["name"].path, "name", schema.CHOICE,
                                                      specs["name"].description, choices=names,
                                                      choice_help=tuple((n, reward_help(n)) for n in names)), self)
            top.addWidget(self.name, 2)
            self.name.edited.connect(lambda value: editor.set_item(self.index, {"name": value, "options": {}}))
        elif kind in MODEL_KINDS:
            help_text = MODEL_KINDS[kind]
            title = self.title = QLabel(f"<b>{kind.replace('_', ' ')}</b>", self)
            title.setToolTip(help_text)
            top.addWidget(title, 2)
            model_spec = schema.FieldSpec(f"{prefix}options.model", "model", schema.TEXT, help_text)
            self.model = PathEditor(model_spec, folder=True, parent=self)
            self.model.line.setPlaceholderText("Hugging Face id (org/name) or a folder")
            self.model.browse.setToolTip(f"Choose a local {kind.replace('_', ' ')} folder")
            if kind == REWARD_MODEL:
                self.model.line.setPlaceholderText("Hugging Face id (org/name), a folder, or a reward-model run")
                self.run_picker = RewardRunButton(lambda: editor.runs_folder(),
                                                  lambda text: type_into(self.model, text), self.model)
                self.model.layout_.addWidget(self.run_picker)
            self.field_rows["options.model"] = FieldRow(self.model, self)
            layout.addWidget(self.field_rows["options.model"])
            self.model.edited.connect(self._model_edited)
        else:
            title = self.title = QLabel("<b>Python function</b>", self)
            title.setToolTip(CUSTOM_HELP)
            top.addWidget(title, 2)
            file_spec = schema.FieldSpec(specs["name"].path, "file", schema.TEXT, CUSTOM_HELP)
            self.file = RewardFileEditor(file_spec, lambda: editor.doc.base_dir, self)
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
        self.captions = {key: QLabel(key, self) for key in ("label", "weight")}
        top.addWidget(self.captions["label"])
        top.addWidget(self.label)
        top.addWidget(self.captions["weight"])
        top.addWidget(self.weight)
        top.addWidget(self.reset)
        top.addWidget(self.remove)
        delimiter = QWidget(self)
        line = QHBoxLayout(delimiter)
        line.setContentsMargins(0, 0, 0, 0)
        caption = self.captions["step_delimiter"] = QLabel("Step delimiter", delimiter)
        caption.setToolTip(self.delimiter.toolTip())
        line.addWidget(caption)
        line.addWidget(self.delimiter, 1)
        self.field_rows["step_delimiter"] = FieldRow(delimiter, self)
        layout.addWidget(self.field_rows["step_delimiter"])
        layout.addWidget(self.problems)
        self.label.edited.connect(lambda value: editor.set_item(self.index, {"label": value or None}))
        self.weight.edited.connect(lambda value: editor.set_item(self.index, {"weight": value}))
        self.delimiter.edited.connect(lambda value: editor.set_item(self.index, {"step_delimiter": value}))
        self.options.edited.connect(self._options_edited)
        self.remove.clicked.connect(lambda: editor.remove_item(self.index))

    # -------------------------------------------------------------- editing

    def _options_edited(self, value: dict) -> None:
        if self.kind in MODEL_KINDS:
            # `model` has its own field; the options box holds the rest.
            value = {"model": (self._item.get("options") or {}).get("model", ""), **value}
        self.editor.set_item(self.index, {"options": value})

    def _model_edited(self, value: Any) -> None:
        options = dict(self._item.get("options") or {})
        options["model"] = value or ""
        self.editor.set_item(self.index, {"options": options})

    def _file_edited(self, _value: Any) -> None:
        functions = functions_in(self.file.value() or "", self.editor.doc.base_dir)
        self.function.set_choices(functions)
        if functions and self.function.value() not in functions:
            self.function.set_value(functions[0])  # a new file: its first reward-shaped function
        self._source_edited()

    def _source_edited(self) -> None:
        name = f"{(self.file.value() or '').strip()}:{self.function.value()}"
        old = self._item.get("options") or {}
        # Options belong to the function: keep only those the new one takes.
        keep = function_options(name, self.editor.doc.base_dir)
        self.editor.set_item(self.index, {"name": name, "options": {k: v for k, v in old.items() if k in keep}})

    def _option_defaults(self) -> dict:
        name = self._item.get("name") if self._item else None
        defaults = option_defaults(name, self.editor.doc.base_dir)
        # A model's `model` has its own field; the options box holds the rest.
        return {k: v for k, v in defaults.items() if k != "model"} if self.kind in MODEL_KINDS else defaults

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
            self.function.set_choices(functions_in(file, self.editor.doc.base_dir))
            self.function.set_value(function)
        label = item.get("label")
        self.label.set_value(label)
        try:
            default = component_label(name if isinstance(name, str) else "")
        except Exception:  # a half-typed name: no default to show
            default = ""
        self.label.line.setPlaceholderText(default or "label")
        self.weight.set_value(item.get("weight"))
        self.delimiter.set_value(item.get("step_delimiter"))
        self.delimiter.line.setPlaceholderText(delimiter_placeholder(name))
        self.options.set_value(options)

    def show_changes(self, added: bool, fields: list[str], why: str) -> None:
        """Mark the component as added, or the `fields` that differ from the preset's
        entry ("weight", "options.tol"); `why` says how, in the marks' tooltips."""
        changed = added or bool(fields)
        if added != self.added:
            self.added = added
            self.setProperty("added", added)
            self.setToolTip(why if added else "")
            self.style().unpolish(self)
            self.style().polish(self)
        self.reset.setVisible(changed)
        self.reset.setToolTip("Not in the preset: Reset removes it" if added
                              else f"Put back the preset's component:\n{why}")
        for key, caption in self.captions.items():
            caption.setStyleSheet(CHANGED_STYLE if key in fields else "")
        if self.title is not None:
            self.title.setStyleSheet(CHANGED_STYLE if {"name", "options.model"} & set(fields) else "")
        self.options.mark_changed({f.partition(".")[2] for f in fields if f.startswith("options.")}, CHANGED_STYLE)


def _reward_model():
    return schema.field_spec(Preset, "rewards").model


ADD_REWARD_MODEL = "reward model (Hugging Face)…"
ADD_PROCESS_REWARD_MODEL = "process reward model (Hugging Face, per step)…"
ADD_CUSTOM = "Python function…"
ADD_HELP = {ADD_REWARD_MODEL: REWARD_MODEL_HELP, ADD_PROCESS_REWARD_MODEL: PROCESS_REWARD_MODEL_HELP,
            ADD_CUSTOM: CUSTOM_HELP}


class RewardsEditor(QGroupBox):
    """The reward components: registry rewards, reward models, process reward models
    and custom Python functions, each with label, weight, step delimiter and options."""

    def __init__(self, doc: PresetDocument, parent: QWidget | None = None):
        super().__init__("Rewards", parent)
        self.doc = doc
        # The folder whose reward-model runs a reward model's Run… lists (the window sets it).
        self.runs_folder: Callable[[], Path | None] = lambda: None
        self.items: list[RewardRow] = []
        self.list_row = FieldRow(QLabel("total reward = Σ weight × component", self), self)
        self.list_row.editor.setStyleSheet(NOTE_STYLE)
        self.changes = QLabel(self)  # what differs from the preset's rewards, over the rows
        self.changes.setObjectName("rewards-changes")
        self.changes.setWordWrap(True)
        self.changes.setStyleSheet(CHANGED_STYLE)
        self.reset_all = QPushButton("Reset rewards", self)
        self.reset_all.setObjectName("reset:rewards")
        self.reset_all.clicked.connect(lambda: self.doc.reset("rewards"))
        changes = QHBoxLayout()  # under the rows, so that no row moves when it comes
        changes.addWidget(self.changes, 1)
        changes.addWidget(self.reset_all, 0, Qt.AlignTop)
        self.changes.hide()
        self.reset_all.hide()
        self.rows_box = QVBoxLayout()
        self.rows_box.setSpacing(4)
        self.adder = QComboBox(self)
        self.adder.setObjectName("reward-adder")
        self.adder.setToolTip("A reward from the registry, a learned reward model (one score per completion or one "
                              "per step), or your own Python function")
        self.add_button = QPushButton("Add component", self)
        add = QHBoxLayout()
        add.addWidget(self.adder, 1)
        add.addWidget(self.add_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list_row)
        layout.addLayout(self.rows_box)
        layout.addLayout(add)
        layout.addLayout(changes)
        self.add_button.clicked.connect(self._add)

    def _items(self) -> list:
        value = self.doc.get("rewards")
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
                self.adder.setItemData(self.adder.count() - 1, reward_help(name), Qt.ToolTipRole)
        for choice, help_text in ADD_HELP.items():
            self.adder.addItem(choice)
            self.adder.setItemData(self.adder.count() - 1, help_text, Qt.ToolTipRole)
        self.show_changed()

    # ------------------------------------------------- against the preset's

    def _preset_items(self) -> list:
        value = self.doc.preset_value("rewards")
        return list(value) if isinstance(value, list) else []

    def show_changed(self) -> None:
        """Mark each component that is not the preset's as it was, and say over the rows
        what changed, with Reset rewards."""
        items, preset = self._items(), self._preset_items()
        changes = compare(items, preset, lambda name: option_defaults(name, self.doc.base_dir))
        for index, row in enumerate(self.items):
            j = changes.pairs[index] if index < len(changes.pairs) else None
            fields = changes.differences.get(index, [])
            why = ("Not in the preset as opened or last saved" if j is None
                   else describe(items[index], preset[j], fields))
            row.show_changes(j is None, fields, why)
        text = summary(changes, items, preset)
        self.changes.setText(text)
        self.changes.setVisible(bool(text))
        self.reset_all.setVisible(bool(text))
        self.reset_all.setToolTip("Put back the preset's rewards: " + (", ".join(
            f"{entry_name(item)} (weight {schema.format_value(item.get('weight', 1.0))})"
            for item in preset if isinstance(item, dict)) or "none"))

    def reset_item(self, index: int) -> None:
        """Put component `index` back as the preset had it; one the preset did not have is removed."""
        items, preset = self._items(), self._preset_items()
        if not 0 <= index < len(items):
            return
        j = compare(items, preset).pairs[index]
        if j is None:
            del items[index]
        else:
            items[index] = copy.deepcopy(preset[j])
        self.doc.set("rewards", items)

    def set_item(self, index: int, changes: dict) -> None:
        items = [dict(i) if isinstance(i, dict) else i for i in self._items()]
        if 0 <= index < len(items) and isinstance(items[index], dict):
            items[index].update(changes)
            for key in ("label", "step_delimiter"):
                if items[index].get(key, "") is None:
                    del items[index][key]  # unset: the preset leaves it out
            self.doc.set("rewards", items)

    def remove_item(self, index: int) -> None:
        items = self._items()
        del items[index]
        self.doc.set("rewards", items)

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
        elif choice == ADD_PROCESS_REWARD_MODEL:
            self.add_process_reward_model()
        elif choice == ADD_CUSTOM:
            self.add_custom()
        elif choice:
            self.doc.set("rewards", self._items() + [self._new_item(choice)])

    def add_reward_model(self, model: str = "") -> None:
        """A reward-model component (the model field is then edited in its row)."""
        self.doc.set("rewards", self._items() + [self._new_item(REWARD_MODEL, {"model": model})])
        if not model:
            self.items[-1].model.line.setFocus(Qt.OtherFocusReason)

    def add_process_reward_model(self, model: str = "") -> None:
        """A process-reward-model component (the model field is then edited in its row)."""
        self.doc.set("rewards", self._items() + [self._new_item(PROCESS_REWARD_MODEL, {"model": model})])
        if not model:
            self.items[-1].model.line.setFocus(Qt.OtherFocusReason)

    def add_custom(self, path: str | None = None) -> None:
        """A custom-function component from the Python file `path` (asked for when None),
        naming its first function that takes (prompts, completions, ...)."""
        base = self.doc.base_dir
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self, "Python file with the reward function", str(base or Path.cwd()),
                                                  "Python files (*.py);;All files (*)")
            if not path:
                return
        file = relative_to_preset(path, base)
        functions = functions_in(file, base)
        name = f"{file}:{functions[0] if functions else 'reward'}"
        self.doc.set("rewards", self._items() + [self._new_item(name)])

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

    def show_problems(self, problems: list[tuple[str, str]]) -> None:
        """Show the schema's problems about the rewards next to their rows (a form of its
        own, the playground's; the set-up form places every problem itself). On a
        component's row, the message says which of its fields: "weight: must be ..."."""
        owned = {"rewards": self.list_row, **self.all_rows()}
        rows = {id(row): (row, []) for row in owned.values()}
        row_paths = {id(row): path for path, row in owned.items()}
        for path, message in problems:
            if not (path == "rewards" or path.startswith("rewards.")):
                continue
            row = self.row_for(path)
            if row is not None and id(row) in rows:
                own = row_paths[id(row)]
                prefix = path[len(own) + 1:] + ": " if path.startswith(own + ".") else ""
                rows[id(row)][1].append(prefix + message)
        for row, messages in rows.values():
            row.show_problems(messages)
