"""Where the playground's completions come from: a run's logged samples of one step (the
run open in the window, one from the runs folder, or any folder), or typed in."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from engine.run import rundir
from workbench.playground.model import Completion, run_completions, sample_steps, typed_completions
from workbench.runs.rundata import RunData

RUN, TYPED = "run", "typed"


def runs_in(folder: Path | None) -> list[Path]:
    """Run folders (those with events) directly under `folder`, newest first."""
    if folder is None:
        return []
    try:
        found = [p for p in Path(folder).iterdir() if (p / rundir.EVENTS_FILE).is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda p: (p / rundir.EVENTS_FILE).stat().st_mtime, reverse=True)


class SourceBox(QGroupBox):
    # --- Signals
    sig_run_chosen = Signal(object)
    """A run was chosen (its RunData; None when there is none): the view loads its rewards."""
    sig_changed = Signal()
    """The completions to score changed (another step, source, or typed text)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Completions", parent)
        self.run: RunData | None = None
        self._current: Path | None = None  # the window's open run, when last told
        self.from_run = QRadioButton("A run's samples", self)
        self.typed = QRadioButton("Typed in", self)
        self.from_run.setChecked(True)
        choice = QButtonGroup(self)
        choice.addButton(self.from_run)
        choice.addButton(self.typed)
        self.run_combo = QComboBox(self)
        self.run_combo.setObjectName("playground-run")
        self.run_combo.setToolTip("The run open in the window, or one from the runs folder")
        self.browse = QPushButton("Browse…", self)
        self.browse.setToolTip("Another run folder")
        self.step_combo = QComboBox(self)
        self.step_combo.setObjectName("playground-step")
        self.step_combo.setToolTip("The step whose logged samples are scored")
        self.run_info = QLabel(self)
        self.run_info.setWordWrap(True)
        self.run_info.setStyleSheet("color: #5f6368;")

        self.prompt = QPlainTextEdit(self)
        self.prompt.setObjectName("playground-prompt")
        self.prompt.setPlaceholderText("the prompt, as the policy sees it (e.g. sort 3 1 2 =)")
        self.prompt.setMaximumHeight(60)
        self.completions_edit = QPlainTextEdit(self)
        self.completions_edit.setObjectName("playground-completions")
        self.completions_edit.setPlaceholderText("one completion a line (one group); \\n for a line break inside one")
        self.fields_edit = QPlainTextEdit(self)
        self.fields_edit.setObjectName("playground-fields")
        self.fields_edit.setPlaceholderText("data fields the rewards read, NAME=VALUE a line, e.g. answer= 1 2 3")
        self.fields_edit.setMaximumHeight(60)

        run_line = QHBoxLayout()
        run_line.addWidget(self.run_combo, 1)
        run_line.addWidget(self.browse)
        run_line.addWidget(QLabel("step"))
        run_line.addWidget(self.step_combo)
        self.run_panel = QWidget(self)
        run_layout = QVBoxLayout(self.run_panel)
        run_layout.setContentsMargins(0, 0, 0, 0)
        run_layout.addLayout(run_line)
        run_layout.addWidget(self.run_info)
        self.typed_panel = QWidget(self)
        form = QFormLayout(self.typed_panel)
        form.setContentsMargins(0, 0, 0, 0)
        form.addRow("prompt", self.prompt)
        form.addRow("completions", self.completions_edit)
        form.addRow("fields", self.fields_edit)
        modes = QHBoxLayout()
        modes.addWidget(self.from_run)
        modes.addWidget(self.typed)
        modes.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(modes)
        layout.addWidget(self.run_panel)
        layout.addWidget(self.typed_panel)
        self.typed_panel.hide()

        self.from_run.toggled.connect(self._mode_changed)
        self.run_combo.activated.connect(lambda _index: self.choose_run(self.run_combo.currentData()))
        self.browse.clicked.connect(self._browse)
        self.step_combo.currentIndexChanged.connect(lambda _index: self.sig_changed.emit())
        for edit in (self.prompt, self.completions_edit, self.fields_edit):
            edit.textChanged.connect(self.sig_changed.emit)

    # --- Public API

    @property
    def mode(self) -> str:
        return RUN if self.from_run.isChecked() else TYPED

    @property
    def step(self) -> int | None:
        return self.step_combo.currentData()

    def set_runs(self, current: Path | None, folder: Path | None) -> None:
        """List the window's open run and the runs folder's; a newly opened run is chosen."""
        current = Path(current).resolve() if current else None
        chosen = self.run.run_dir.resolve() if self.run is not None else None
        paths = ([current] if current else []) + [p.resolve() for p in runs_in(folder) if p.resolve() != current]
        if chosen is not None and chosen not in paths:
            paths.append(chosen)
        self.run_combo.blockSignals(True)
        self.run_combo.clear()
        for path in paths:
            self.run_combo.addItem(f"{path.name}  (open)" if path == current else path.name, path)
            self.run_combo.setItemData(self.run_combo.count() - 1, str(path), Qt.ToolTipRole)
        self.run_combo.blockSignals(False)
        if current is not None and current != self._current:
            self._current = current
            self.choose_run(current)
        elif chosen is not None:
            self.run_combo.setCurrentIndex(paths.index(chosen))
        elif paths:
            self.choose_run(paths[0])
        else:
            self.run_info.setText("No run with samples yet: open one, browse to one, or type completions in.")

    def choose_run(self, path: Path | None) -> None:
        """Read the run's samples, list its steps (the last chosen) and announce it."""
        if path is None:
            return
        path = Path(path).resolve()
        index = self.run_combo.findData(path)
        if index < 0:
            self.run_combo.addItem(path.name, path)
            index = self.run_combo.count() - 1
        self.run_combo.setCurrentIndex(index)
        self.run = RunData(path)
        self.run.poll()
        steps = sample_steps(self.run)
        self.step_combo.blockSignals(True)
        self.step_combo.clear()
        for step in steps:
            self.step_combo.addItem(str(step), step)
        self.step_combo.setCurrentIndex(len(steps) - 1)
        self.step_combo.blockSignals(False)
        self.run_info.setText(f"{len(steps)} steps with samples; the run's total and advantage are shown beside "
                              "the new ones" if steps else f"{path.name} has logged no samples yet")
        self.sig_run_chosen.emit(self.run)
        self.sig_changed.emit()

    def completions(self) -> list[Completion]:
        """What to score now (TypedInputError for typed text that cannot be scored)."""
        if self.mode == TYPED:
            return typed_completions(self.prompt.toPlainText(), self.completions_edit.toPlainText(),
                                     self.fields_edit.toPlainText())
        if self.run is None or self.step is None:
            return []
        return run_completions(self.run, self.step)

    def group_size(self, preset: dict) -> int:
        """Completions a group: the run's num_generations (1 when it has none, as DPO);
        typed completions are one group."""
        if self.mode == TYPED:
            try:
                return max(1, len(self.completions()))
            except ValueError:
                return 1
        value = (preset.get("algorithm") or {}).get("num_generations", 1)
        return value if isinstance(value, int) and value > 0 else 1

    # --- Internals

    def _mode_changed(self) -> None:
        self.run_panel.setVisible(self.mode == RUN)
        self.typed_panel.setVisible(self.mode == TYPED)
        self.sig_changed.emit()

    def _browse(self) -> None:
        start = str(self.run.run_dir.parent) if self.run is not None else ""
        path = QFileDialog.getExistingDirectory(self, "Run folder", start)
        if path:
            self.choose_run(Path(path))
