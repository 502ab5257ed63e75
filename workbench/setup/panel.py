"""The set-up panel: every preset field, generated from the schema, with the engine's
own message next to each invalid field.

The panel is a view of a `PresetDocument`: editors write what the user typed into the
document, and the document's changes are drawn back into the editors. Validation (the
schema, then the pre-launch checks of workbench.setup.checks) runs shortly after each change.
The panel's parts: workbench.setup.section_form (a section's form, the algorithm chooser)
and workbench.setup.rewards_editor (the rewards section); workbench.setup.panel_problems
shows the problems and notes.

The essentials (ESSENTIALS, the algorithm's chooser, the rewards) are shown; each section's
other fields are in its folded group (workbench.setup.folding), and the fields the chosen
algorithm does not read (its declaration: engine.preset.schema.unread_fields) are hidden.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from PySide6.QtCore import QCoreApplication, QEventLoop, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QFontDatabase
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QGroupBox,
    QLabel,
    QPlainTextEdit,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from engine.data.tasks import TASKS, task_options
from engine.preset.schema import Preset, unread_fields
from workbench.setup import schema
from workbench.setup.background import submit as submit_in_background
from workbench.setup.checks import completion_room, launch_problems, prelaunch_checks, preview_prompts
from workbench.setup.document import PresetDocument
from workbench.setup.editors import FieldEditor, FieldRow
from workbench.setup.folding import Folds
from workbench.setup.launch_options import LaunchOptions
from workbench.setup.model_picker import CachePicker, DatasetPicker, ModelPicker, add_cache_button, type_into
from workbench.setup.rewards_editor import RewardsEditor
from workbench.setup.panel_problems import SUMMARY_LINES, ProblemsShown
from workbench.setup.section_form import AlgorithmBox, SectionForm
from workbench.setup.unknown_keys import UnknownKeysBanner

def _check_job(preset: Preset | None, problems: list, data: dict, seed, base_dir, model: dict,
               launch: list | None = None, processes: int = 1):
    """The pre-launch checks (for a preset the schema accepts) and the data preview:
    (problems, notes, (examples, reason)); notes None when the checks could not run.
    The launch controls' problems (`launch`) come last; the memory note is per process
    (`processes`, the launch controls' count). Runs on a worker thread after edits."""
    notes = None
    if preset is not None:
        check = prelaunch_checks(preset, base_dir, processes)
        problems, notes = check.problems, check.notes
    return list(problems) + list(launch or []), notes, preview_prompts(data, seed, base_dir, model=model)


SECTION_TITLES = {"model": "Model", "data": "Data", "training": "Training", "alarms": "Alarms"}
# What a first run needs (issue 41): the model, the data's source, the steps and the learning
# rate, shown; with the algorithm's chooser and the rewards. Every other field is in its
# section's folded group, titled here.
ESSENTIALS = {"model.name_or_path", "data.task", "data.task_options", "data.path", "data.dataset",
              "training.max_steps", "training.learning_rate"}
FOLD_TITLES = {"model": "More model settings", "data": "More data settings", "training": "More training settings",
               "alarms": "Alarm thresholds"}


def _monospace() -> QFont:
    return QFontDatabase.systemFont(QFontDatabase.FixedFont)


class SetupPanel(ProblemsShown, QWidget):
    """Every preset field; problems next to their fields; a summary on top.

    `validated(problems)` is emitted after each validation with the (path, message)
    pairs that block a run (empty when the preset can run).
    """

    validated = Signal(list)

    def __init__(self, doc: PresetDocument, parent: QWidget | None = None, folds: Folds | None = None):
        super().__init__(parent)
        self.doc = doc
        self.folds = folds or Folds()  # which groups are unfolded, remembered across windows
        self._unfitted: str | None = None  # an algorithm switched to before the prompts were counted
        self.problems: list[tuple[str, str]] = []
        self.notes: list[tuple[str, str]] = []
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(150)
        self._timer.timeout.connect(self._validate)
        self._generation = 0  # validations started
        self._checked = 0  # the newest of them whose pre-launch checks answered
        self.waiting = False  # validate_now is waiting for the checks (Run pressed again meanwhile: ignored)
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
        # How to launch (Processes, GPUs): not preset fields, so not in the document.
        self.launch = LaunchOptions(self)
        self.launch.changed.connect(self.schedule_validation)

        # Sections: Experiment + Model + Data | Algorithm + Rewards | Training
        self.forms: dict[str, SectionForm] = {}
        top_specs = {s.name: s for s in schema.section_fields(Preset)}
        experiment = QGroupBox("Experiment", self)
        self.forms["experiment"] = SectionForm([top_specs["name"], top_specs["description"]], self.doc, self.field_edited,
                                               self.task_option_defaults, experiment, "")
        QVBoxLayout(experiment).addWidget(self.forms["experiment"])
        boxes: dict[str, QGroupBox] = {}
        for key in ("model", "data", "training", "alarms"):
            box = QGroupBox(SECTION_TITLES[key], self)
            box.setToolTip(top_specs[key].description)
            form = SectionForm(schema.section_fields(top_specs[key].model, key + "."), self.doc, self.field_edited,
                               self.task_option_defaults, box, key, folds=self.folds, fold=(key, FOLD_TITLES[key]),
                               essential=ESSENTIALS.__contains__)
            self.forms[key] = form
            QVBoxLayout(box).addWidget(form)
            boxes[key] = box
        self.model_note = self.forms["model"].rows["model.name_or_path"]
        self.preview = QPlainTextEdit(self)
        self.preview.setObjectName("prompt-preview")
        self.preview.setReadOnly(True)
        self.preview.setFont(_monospace())
        self.preview.setMaximumHeight(170)  # templated prompts run over several lines
        self.preview.setToolTip("The first training prompts of this data, with the answer the rewards compare against")
        boxes["data"].layout().addWidget(QLabel("Preview: first training prompts"))
        boxes["data"].layout().addWidget(self.preview)
        self.algorithm = AlgorithmBox(self.doc, self.field_edited, self.task_option_defaults, self, self.folds,
                                      self.switch_algorithm)
        self.rewards = RewardsEditor(self.doc, self)

        self.grid = QGridLayout()
        self.sections = [[experiment, boxes["model"], boxes["data"]], [self.algorithm, self.rewards],
                         [boxes["training"], boxes["alarms"]]]
        self.columns = [QVBoxLayout() for _ in self.sections]
        for col, column in enumerate(self.columns):
            self.grid.addLayout(column, 0, col)
        self.narrow: bool | None = None  # two columns rather than three (_arrange)
        inner = QWidget()
        inner.setLayout(self.grid)
        self.scroll = QScrollArea(self)
        self.scroll.setWidgetResizable(True)
        self.scroll.setWidget(inner)
        self.scroll.setFrameShape(QFrame.NoFrame)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.launch)
        layout.addWidget(self.summary_area)
        layout.addWidget(self.scroll, 1)

        # "Cached…" beside the fields a hub id goes in: pick what is already downloaded.
        self.cache_picker: CachePicker | None = None  # the picker open now (tests drive it)
        self.cache_buttons = {}
        for path, picker_class in (("model.name_or_path", ModelPicker), ("data.dataset", DatasetPicker)):
            row = self.rows().get(path)  # data.dataset is newer than some engines: no field, no button
            button = add_cache_button(row.editor, picker_class) if row is not None else None
            if button is not None:
                button.clicked.connect(partial(self.open_cache_picker, path, picker_class))
                self.cache_buttons[path] = button

        doc.changed.connect(self._doc_changed)
        doc.replaced.connect(self._doc_replaced)
        self._arrange(False)
        self.refresh()

    # ------------------------------------------------------------ layout

    def _arrange(self, narrow: bool) -> None:
        """Three columns (Experiment, Model, Data | Algorithm, Rewards | Training,
        Alarms), or, where they do not fit side by side (1024 px), two: Training under
        Rewards and Alarms under Data, rather than behind a horizontal scroll bar."""
        if narrow == self.narrow:
            return
        self.narrow = narrow
        first, second, third = self.sections
        placed = [first + third[1:], second + third[:1], []] if narrow else [first, second, third]
        for column in self.columns:
            for section in self.sections:
                for widget in section:
                    # removeWidget deletes the layout's item for it: one left alive keeps
                    # the widget's size cache from being refreshed in its new column.
                    column.removeWidget(widget)
            while column.count():
                column.takeAt(0)  # the stretch
        for column, widgets in zip(self.columns, placed):
            for widget in widgets:
                column.addWidget(widget)
            column.addStretch(1)
        for col, widgets in enumerate(placed):
            self.grid.setColumnStretch(col, 1 if widgets else 0)

    def _wide_width(self) -> int:
        """The width three columns need (each its widest section's minimum)."""
        widths = [max(max(w.minimumSizeHint().width(), w.minimumWidth()) for w in section)
                  for section in self.sections]
        margins = self.grid.contentsMargins()
        return sum(widths) + 2 * self.grid.horizontalSpacing() + margins.left() + margins.right()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        # From the panel's own width: the scroll area inside may not be resized yet.
        margins = self.layout().contentsMargins()
        room = self.width() - margins.left() - margins.right() - self.scroll.verticalScrollBar().sizeHint().width()
        self._arrange(room < self._wide_width())

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

    def section_forms(self) -> list[SectionForm]:
        """The forms on show: the sections' and the current algorithm's."""
        current = self.algorithm.form(self.doc.algorithm)
        return [*self.forms.values(), *([current] if current is not None else [])]

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
        unread = set(unread_fields(self.doc.algorithm))
        for form in self.section_forms():
            form.set_unread(unread)
            form.show_changed()
        self.rewards.refresh()
        unknown = self.doc.unknown_keys()
        for banner in self.banners().values():
            banner.show_keys(unknown)
        self.open_troubled_folds()
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
                changes.update({"data.path": None, "data.dataset": None, "data.subset": None, "data.eval_split": None})
            self.doc.update(changes)
        elif path in ("data.path", "data.dataset") and value:
            # A prompt file or a data set replaces the other sources.
            changes = {"data.path": None, "data.dataset": None, "data.task": None, "data.task_options": {}}
            if path == "data.path":
                changes.update({"data.subset": None, "data.eval_split": None})
            self.doc.update({**changes, path: value})
        else:
            self.doc.set(path, value)

    def open_troubled_folds(self) -> None:
        """Hold open each folded group with a problem or an unknown key inside."""
        troubled = [row for row in self.rows().values() if not row.error.isHidden()]
        troubled += [banner for banner in self.banners().values() if banner.rows]
        for form in self.section_forms():
            if form.fold is not None:
                form.fold.hold_open(any(form.fold.body.isAncestorOf(w) for w in troubled))

    def switch_algorithm(self, name: str) -> None:
        """The chooser's choice: the document switches, a default completion length cut to
        the room the prompts leave in the model's context. The checks count the prompts on
        their worker; a switch made before they have is fitted when they answer (_finish),
        never by counting here (a big data set would freeze the window)."""
        room = completion_room(self.doc.data, self.doc.base_dir, count=False)
        self.doc.switch_algorithm(name, room=room)
        self._unfitted = None if room is not None else name

    def open_cache_picker(self, path: str, picker_class: type[CachePicker]) -> CachePicker:
        """Open the picker for `path`; its choice is put in the field as if typed."""
        picker = picker_class(self)
        self.cache_picker = picker
        # Put in the field as the user's typing would be, so validation and preview follow.
        picker.accepted.connect(lambda: self._take_cached(path, picker.chosen()))
        picker.finished.connect(picker.deleteLater)
        picker.open()  # window-modal, without blocking: the scan's result arrives through the event loop
        return picker

    def _take_cached(self, path: str, chosen: str | None) -> None:
        """A model or data set chosen from the cache, typed into its field. A new model
        gets the LoRA targets of its own architecture (`auto`): module names listed for
        another architecture would match nothing in it."""
        if chosen and path == "model.name_or_path" and self.doc.get("model.lora.target_modules") != "auto":
            self.doc.set("model.lora.target_modules", "auto")
        type_into(self.rows()[path].editor, chosen)

    def task_option_defaults(self) -> dict:
        task = self.doc.get("data.task")
        return task_options(task) if task in TASKS else {}

    # -------------------------------------------------------------- validation

    def schedule_validation(self) -> None:
        self._timer.start()

    def validate_now(self) -> list[tuple[str, str]]:
        """Validate the document now, pre-launch checks included, and return the problems
        (Run does). The checks run on the worker thread as after an edit, and this waits
        for them in a local event loop: the window keeps painting and shows "Checking…"
        meanwhile (a check on a big data set takes seconds)."""
        self._validate()
        self.waiting = True
        try:
            while self._checked < self._generation:  # an edit made while waiting is checked too
                if self._timer.isActive():
                    self._validate()
                QCoreApplication.processEvents(QEventLoop.AllEvents | QEventLoop.WaitForMoreEvents, 50)
        finally:
            self.waiting = False
        return self.problems

    def _validate(self) -> list[tuple[str, str]]:
        # The schema check takes a millisecond and runs here. The pre-launch checks
        # generate the data (seconds for 100,000 prompts) and count tokens: they run on a
        # worker thread, so neither typing nor Run ever waits on them with a frozen window.
        self._timer.stop()
        self._generation += 1
        preset, problems = self.doc.validate()
        launch = launch_problems(preset, self.launch.process_count(), self.launch.gpu_text())
        data, seed, base_dir = copy.deepcopy(self.doc.get("data") or {}), self.doc.get("training.seed"), self.doc.base_dir
        model = copy.deepcopy(self.doc.get("model") or {})
        job = partial(_check_job, preset, problems, data, seed, base_dir, model, launch, self.launch.process_count())
        problems = problems + launch
        if problems:
            self._show(problems, self._kept_notes(problems))  # the schema's verdict at once; the preview follows
        else:
            # Nothing found yet, but the checks have not answered: never "Ready" on the
            # previous preset's notes (context, memory) while they run.
            self._show_checking()
        generation = self._generation
        # Through workbench.setup.background: no garbage collection on the worker (it would
        # free Qt objects there and hang the window), and no callback to a deleted panel.
        submit_in_background(self._executor, job, self, partial(self._on_checked, generation))
        return problems

    def _on_checked(self, generation: int, future) -> None:
        self._checked = max(self._checked, generation)
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
        if self._unfitted is not None and self._unfitted == self.doc.algorithm:
            room = completion_room(self.doc.data, self.doc.base_dir, count=False)
            if room is not None:
                self._unfitted = None
                self.doc.fit_completion(room)
                if self._timer.isActive():
                    return problems  # the field changed: validated again, this result is stale
        if notes is None:
            notes = self._kept_notes(problems)
        self.problems, self.notes = problems, notes
        self._show(problems, notes)
        self._show_preview(*preview)
        self.validated.emit(list(problems))
        return problems

    @property
    def checking(self) -> bool:
        """Whether the pre-launch checks of the document as it is have not answered yet."""
        return self._checked < self._generation or self._timer.isActive()
