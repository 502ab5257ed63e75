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
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFont, QFontDatabase
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from engine.preset import Preset
from engine.rewards import REWARDS, reward_options
from engine.tasks import TASKS, task_options
from workbench import schema
from workbench.checks import prelaunch_checks, preview_prompts
from workbench.document import PresetDocument
from workbench.fields import (
    ERROR_STYLE,
    NOTE_STYLE,
    ChoiceEditor,
    FieldEditor,
    FieldRow,
    NumberEditor,
    OptionsEditor,
    describe_model_source,
    make_editor,
)

def _check_job(preset: Preset | None, problems: list, data: dict, seed, base_dir):
    """The pre-launch checks (for a preset the schema accepts) and the data preview:
    (problems, notes, (examples, reason)). Runs on a worker thread after edits."""
    notes: list = []
    if preset is not None:
        check = prelaunch_checks(preset, base_dir)
        problems, notes = check.problems, check.notes
    return problems, notes, preview_prompts(data, seed, base_dir)


SECTION_TITLES = {"model": "Model", "data": "Data", "training": "Training"}


def _monospace() -> QFont:
    return QFontDatabase.systemFont(QFontDatabase.FixedFont)


class SectionForm(QWidget):
    """A form with one FieldRow per field of a schema section (nested sections become
    sub-groups). `rows` maps each dotted path to its row."""

    def __init__(self, specs: list[schema.FieldSpec], panel: "SetupPanel", parent: QWidget | None = None):
        super().__init__(parent)
        self.rows: dict[str, FieldRow] = {}
        self.form = QFormLayout(self)
        self.form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        self.form.setContentsMargins(4, 4, 4, 4)
        self.form.setVerticalSpacing(4)
        for spec in specs:
            if spec.kind == schema.SECTION:
                box = QGroupBox(spec.label if spec.name != "lora" else "LoRA", self)
                box.setToolTip(spec.description)
                inner = SectionForm(schema.section_fields(spec.model, spec.path + "."), panel, box)
                QVBoxLayout(box).addWidget(inner)
                box.layout().setContentsMargins(2, 2, 2, 2)
                self.rows.update(inner.rows)
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
            self.forms[name] = SectionForm(schema.algorithm_fields(name), self.panel, self.stack)
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


class RewardRow(QFrame):
    """One reward component: name, weight, options, remove."""

    def __init__(self, editor: "RewardsEditor", index: int):
        super().__init__(editor)
        self.editor, self.index = editor, index
        self.setFrameShape(QFrame.StyledPanel)
        self.setObjectName(f"reward:{index}")
        reward_spec = schema.field_spec(_reward_model(), "name", f"rewards.{index}.")
        weight_spec = schema.field_spec(_reward_model(), "weight", f"rewards.{index}.")
        options_spec = schema.field_spec(_reward_model(), "options", f"rewards.{index}.")
        self.name = ChoiceEditor(schema.FieldSpec(reward_spec.path, "name", schema.CHOICE, reward_spec.description,
                                                  choices=tuple(sorted(REWARDS))), self)
        self.weight = NumberEditor(weight_spec, self)
        self.weight.line.setMaximumWidth(80)
        self.options = OptionsEditor(options_spec, self._option_defaults, self)
        self.remove = QPushButton("Remove", self)
        self.remove.setToolTip("Remove this reward component")
        self.problems = FieldRow(self.options, self)
        top = QHBoxLayout()
        top.addWidget(self.name, 2)
        top.addWidget(QLabel("weight"))
        top.addWidget(self.weight)
        top.addWidget(self.remove)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(self.problems)
        self.name.edited.connect(lambda value: editor.set_item(self.index, {"name": value, "options": {}}))
        self.weight.edited.connect(lambda value: editor.set_item(self.index, {"weight": value}))
        self.options.edited.connect(lambda value: editor.set_item(self.index, {"options": value}))
        self.remove.clicked.connect(lambda: editor.remove_item(self.index))

    def _option_defaults(self) -> dict:
        name = self.name.value()
        return reward_options(name) if name in REWARDS else {}

    def show_item(self, item: Any) -> None:
        item = item if isinstance(item, dict) else {}
        self.name.set_value(item.get("name"))
        self.weight.set_value(item.get("weight"))
        self.options.set_value(item.get("options") or {})


def _reward_model():
    return schema.field_spec(Preset, "rewards").model


class RewardsEditor(QGroupBox):
    """The reward components (from the engine's registry), plus the places where reward
    models and custom Python rewards will go."""

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
        self.add_button = QPushButton("Add component", self)
        add = QHBoxLayout()
        add.addWidget(self.adder, 1)
        add.addWidget(self.add_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list_row)
        layout.addLayout(self.rows_box)
        layout.addLayout(add)
        layout.addWidget(self._later_engine_issue())
        self.add_button.clicked.connect(self._add)

    def _later_engine_issue(self) -> QWidget:
        # LATER ENGINE ISSUE: reward models and custom Python reward functions. The
        # engine's preset has no fields for them yet; when it does, these widgets become
        # editors of those fields (a reward model id/folder; a file and function name)
        # and this box is enabled. Until then they are shown, disabled, so users see
        # where they will be.
        box = QGroupBox("Reward model / custom Python function", self)
        box.setObjectName("rewards-later")
        box.setEnabled(False)
        form = QFormLayout(box)
        form.addRow("reward model", QLineEdit(placeholderText="Hugging Face id or folder"))
        file_row = QHBoxLayout()
        file_row.addWidget(QLineEdit(placeholderText="my_rewards.py"))
        file_row.addWidget(QPushButton("Browse…"))
        form.addRow("Python file", file_row)
        form.addRow("function", QLineEdit(placeholderText="reward(prompts, completions, **fields)"))
        note = QLabel("Coming with the next engine issue (reward models and custom Python rewards).")
        note.setWordWrap(True)
        note.setStyleSheet(NOTE_STYLE)
        form.addRow(note)
        return box

    def _items(self) -> list:
        value = self.panel.doc.get("rewards")
        return list(value) if isinstance(value, list) else []

    def refresh(self) -> None:
        items = self._items()
        names = [i.get("name") if isinstance(i, dict) else None for i in items]
        if len(self.items) != len(items):
            for row in self.items:
                self.rows_box.removeWidget(row)
                row.hide()  # at once: deleteLater waits for the event loop
                row.setParent(None)
                row.deleteLater()
            self.items = [RewardRow(self, i) for i in range(len(items))]
            for row in self.items:
                self.rows_box.addWidget(row)
        for row, item in zip(self.items, items):
            row.show_item(item)
        self.adder.clear()
        for name in sorted(REWARDS):
            if name not in names:
                self.adder.addItem(name)
        self.add_button.setEnabled(self.adder.count() > 0)

    def set_item(self, index: int, changes: dict) -> None:
        items = [dict(i) if isinstance(i, dict) else i for i in self._items()]
        if 0 <= index < len(items) and isinstance(items[index], dict):
            items[index].update(changes)
            self.panel.doc.set("rewards", items)

    def remove_item(self, index: int) -> None:
        items = self._items()
        del items[index]
        self.panel.doc.set("rewards", items)

    def _add(self) -> None:
        name = self.adder.currentText()
        if name:
            self.panel.doc.set("rewards", self._items() + [{"name": name, **schema.item_defaults(_reward_model())}])

    def row_for(self, path: str) -> FieldRow | None:
        parts = path.split(".")
        if len(parts) >= 2 and parts[1].isdigit() and int(parts[1]) < len(self.items):
            return self.items[int(parts[1])].problems
        return self.list_row


class SetupPanel(QWidget):
    """Every preset field; problems next to their fields; a summary on top.

    `validated(problems)` is emitted after each validation with the (path, message)
    pairs that block a run (empty when the preset can run).
    """

    validated = Signal(list)
    _checked = Signal(int, object)  # from the worker thread: (generation, future)

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
        self._checked.connect(self._on_checked, Qt.QueuedConnection)

        self.summary = QLabel(self)
        self.summary.setObjectName("setup-summary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.RichText)
        self.summary.linkActivated.connect(self.focus_field)

        # Sections: Experiment + Model + Data | Algorithm + Rewards | Training
        self.forms: dict[str, SectionForm] = {}
        top_specs = {s.name: s for s in schema.section_fields(Preset)}
        experiment = QGroupBox("Experiment", self)
        self.forms["experiment"] = SectionForm([top_specs["name"], top_specs["description"]], self, experiment)
        QVBoxLayout(experiment).addWidget(self.forms["experiment"])
        boxes: dict[str, QGroupBox] = {}
        for key in ("model", "data", "training"):
            box = QGroupBox(SECTION_TITLES[key], self)
            box.setToolTip(top_specs[key].description)
            form = SectionForm(schema.section_fields(top_specs[key].model, key + "."), self, box)
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
        layout.addWidget(self.summary)
        layout.addWidget(self.scroll, 1)

        doc.changed.connect(self._doc_changed)
        doc.replaced.connect(self.refresh)
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

    def refresh(self) -> None:
        """Show the document's values in every editor."""
        self.algorithm.show_algorithm(self.doc.algorithm)
        for path, row in self.rows().items():
            row.editor.set_value(self.doc.get(path))
        self.rewards.refresh()
        self.schedule_validation()

    def _doc_changed(self, path: str) -> None:
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
            self._show(problems, [])  # the schema's verdict at once; the preview follows
        future = self._executor.submit(job)
        generation = self._generation
        future.add_done_callback(lambda f: self._checked.emit(generation, f))
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
        self.problems, self.notes = problems, notes
        self._show(problems, notes)
        self._show_preview(*preview)
        self.validated.emit(list(problems))
        return problems

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
            [r.problems for r in self.rewards.items]
        for row in all_rows:
            by_row[id(row)] = (row, [])
        for path, message in problems:
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
        for index, item in enumerate(self.rewards.items):
            if item.problems is row:
                return f"rewards.{index}"
        return ""

    def _summarise(self, problems: list[tuple[str, str]], unplaced: list[str]) -> None:
        if not problems:
            self.summary.setText("<span style='color:#1e7e34'>✔ Ready to run.</span> "
                                 "<span style='color:#5f6368'>Hover a field's name for its help.</span>")
            return
        items = []
        for path, message in problems[:6]:
            label = html.escape(path or "preset")
            link = f"<a href='{html.escape(path)}'>{label}</a>" if path else label
            items.append(f"{link}: {html.escape(message)}")
        more = f" … and {len(problems) - 6} more" if len(problems) > 6 else ""
        self.summary.setText(
            f"<span style='{ERROR_STYLE}'>✖ {len(problems)} problem{'s' if len(problems) > 1 else ''} "
            f"to fix before running:</span><br>" + "<br>".join(items) + more
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
        row = self.row_for(path)
        if row is None:
            return
        self.scroll.ensureWidgetVisible(row)
        editor = row.editor
        target = editor.input_widget() if isinstance(editor, FieldEditor) else editor
        target.setFocus(Qt.OtherFocusReason)
