""""Export…": a run's LoRA adapter, a merged model or its TensorBoard events, written
by the engine (`python -m engine export RUN --checkpoint step_N --adapter OUT ...
--quiet --progress`, engine/commands/export.py) while this dialog shows its progress.

The dialog picks what to export (several at once), the checkpoint and an output folder
for each, checks them as the engine will (a folder that exists and is not empty is
refused) as the user types, and shows the progress and the result that the window's
export job (workbench/window/export.py) reports. It starts nothing itself.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
)

from engine.run.failures import no_checkpoint_message
from workbench.runs.fork_dialog import checkpoint_steps

EXPORTS_DIR = "exports"  # beside the runs, in the runs folder (not a run: the runs list skips it)


@dataclass(frozen=True)
class ExportKind:
    key: str  # the default folder's suffix
    flag: str  # the engine's option
    label: str
    tip: str
    needs_checkpoint: bool


KINDS = (
    ExportKind("adapter", "--adapter", "LoRA adapter", "The checkpoint's adapter in peft's format, the tokenizer as "
               "the run used it and a model card: PeftModel.from_pretrained(base, FOLDER)", True),
    ExportKind("merged", "--merged", "Merged model", "The base model with the adapter merged in (saved in the base's own dtype), "
               "the tokenizer and a model card: AutoModelForCausalLM.from_pretrained(FOLDER)", True),
    ExportKind("tensorboard", "--tensorboard", "TensorBoard events", "Every metric, evaluation and sample the run "
               "logged, as TensorBoard event files: tensorboard --logdir FOLDER", False),
)


def engine_export_command(run_dir: Path, checkpoint: str | None, outputs: dict[str, Path],
                          python: str | None = None) -> list[str]:
    """The engine's command line for an export of `run_dir`; `outputs` maps the
    engine's flags (`--adapter`, ...) to folders.

    >>> engine_export_command(Path("/r/run"), "step_000002", {"--adapter": Path("/o/a")}, "py")
    ['py', '-m', 'engine', 'export', '/r/run', '--checkpoint', 'step_000002', '--adapter', '/o/a', '--quiet', '--progress']
    """
    command = [python or sys.executable, "-m", "engine", "export", str(run_dir)]
    if checkpoint:
        command += ["--checkpoint", checkpoint]
    for flag, folder in outputs.items():
        command += [flag, str(folder)]
    return command + ["--quiet", "--progress"]


def folder_problem(text: str, label: str) -> str | None:
    """Why `text` cannot be an output folder (as the engine's check_output judges it),
    or None."""
    if not text.strip():
        return f"{label}: give an output folder"
    path = Path(text.strip()).expanduser()
    if path.exists() and not path.is_dir():
        return f"{label}: {path} is a file; choose a new folder"
    if path.is_dir() and any(path.iterdir()):
        return f"{label}: {path} exists and is not empty; the export never writes into a folder with files in it " \
               "(choose a new folder, or empty it)"
    return None


def free_folder(path: Path) -> Path:
    """`path`, or `path-2`, `path-3`, ... : the first that does not exist."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


class ExportDialog(QDialog):
    """Choose what of `run_dir` to export and where. Signals: `export_requested()` when
    Export is pressed with nothing to fix, `cancel_requested()` when Cancel export is."""

    export_requested = Signal()
    cancel_requested = Signal()

    def __init__(self, run_dir: Path, exports_folder: Path | None = None, parent=None):
        super().__init__(parent)
        self.run_dir = Path(run_dir).resolve()
        self.exports_folder = Path(exports_folder) if exports_folder else self.run_dir.parent / EXPORTS_DIR
        self.setWindowTitle(f"Export {self.run_dir.name}")
        self.setObjectName("export-dialog")
        self.running = False
        self.exported: list[Path] = []
        self.checkpoints = checkpoint_steps(self.run_dir)
        self.checkpoint = QComboBox()
        self.checkpoint.setObjectName("export-checkpoint")
        for name, step in self.checkpoints:
            self.checkpoint.addItem(f"{name} (step {step})", name)
        if not self.checkpoints:
            self.checkpoint.addItem("(no complete checkpoint)", "")
            self.checkpoint.setEnabled(False)
        self.checkpoint.setCurrentIndex(self.checkpoint.count() - 1)  # the newest
        self.checkpoint.setToolTip("The adapter and the merged model are made from this checkpoint; the TensorBoard "
                                   "events are all the run logged")

        grid = QGridLayout()
        grid.addWidget(QLabel("Checkpoint:"), 0, 0)
        grid.addWidget(self.checkpoint, 0, 1, 1, 2)
        self.boxes: dict[str, QCheckBox] = {}
        self.folders: dict[str, QLineEdit] = {}
        self._defaults: dict[str, str] = {}
        for row, kind in enumerate(KINDS, 1):
            box = QCheckBox(kind.label)
            box.setObjectName(f"export-{kind.key}")
            box.setToolTip(kind.tip)
            folder = QLineEdit()
            folder.setObjectName(f"export-{kind.key}-folder")
            folder.setToolTip(f"The folder to write the {kind.label.lower()} into: a new or empty one")
            browse = QPushButton("Browse…")
            browse.clicked.connect(lambda _=False, k=kind.key: self._browse(k))
            grid.addWidget(box, row, 0)
            grid.addWidget(folder, row, 1)
            grid.addWidget(browse, row, 2)
            self.boxes[kind.key], self.folders[kind.key] = box, folder
        # The adapter is what most want; a run with no checkpoint has only its events to give.
        self.boxes["adapter" if self.checkpoints else "tensorboard"].setChecked(True)
        self._update_defaults()

        self.problem = QLabel()
        self.problem.setObjectName("export-problem")
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color:#b00020")
        self.progress = QProgressBar()
        self.progress.setObjectName("export-progress")
        self.progress.setTextVisible(True)
        self.progress.hide()
        self.status = QLabel()
        self.status.setObjectName("export-status")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.show_folder_button = QPushButton("Show folder")
        self.copy_button = QPushButton("Copy path")
        self.copy_button.setToolTip("Copy the exported folder's path (one a line when several)")
        self.export_button = QPushButton("Export")
        self.export_button.setObjectName("export-start")
        self.export_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel export")
        self.cancel_button.setObjectName("export-cancel")
        self.close_button = QPushButton("Close")
        self.close_button.setToolTip("Close this dialog; an export in progress goes on (its progress shows in the "
                                     "window's status bar)")
        buttons = QHBoxLayout()
        buttons.addWidget(self.show_folder_button)
        buttons.addWidget(self.copy_button)
        buttons.addStretch(1)
        for button in (self.export_button, self.cancel_button, self.close_button):
            buttons.addWidget(button)
        note = QLabel("Written by the engine in the background; each folder appears only when complete.")
        note.setWordWrap(True)
        note.setStyleSheet("color:#5f6368")
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addLayout(grid)
        layout.addWidget(self.problem)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addLayout(buttons)
        self.resize(720, 300)
        self._show_result_buttons(False)
        self.cancel_button.hide()

        self.checkpoint.currentIndexChanged.connect(lambda _i: (self._update_defaults(), self.check()))
        for key in self.boxes:
            self.boxes[key].toggled.connect(lambda _on: self.check())
            self.folders[key].textChanged.connect(lambda _t: self.check())
        self.export_button.clicked.connect(self._export)
        self.cancel_button.clicked.connect(self.cancel_requested.emit)
        self.close_button.clicked.connect(self.close)
        self.show_folder_button.clicked.connect(self.show_folder)
        self.copy_button.clicked.connect(self.copy_path)
        self.check()

    # ------------------------------------------------------------- the choices

    def checkpoint_name(self) -> str:
        return str(self.checkpoint.currentData() or "")

    def step(self) -> int:
        return dict(self.checkpoints).get(self.checkpoint_name(), 0)

    def chosen(self) -> list[ExportKind]:
        return [kind for kind in KINDS if self.boxes[kind.key].isChecked()]

    def outputs(self) -> dict[str, Path]:
        """The engine's flag -> the absolute folder, for each output chosen."""
        return {kind.flag: Path(self.folders[kind.key].text().strip()).expanduser().resolve()
                for kind in self.chosen()}

    def command(self, python: str | None = None) -> list[str]:
        needs = any(kind.needs_checkpoint for kind in self.chosen())
        return engine_export_command(self.run_dir, self.checkpoint_name() if needs else None, self.outputs(), python)

    def default_folder(self, key: str) -> Path:
        """exports/<run>-step<N>-adapter (or -merged); exports/<run>-tensorboard; with
        -2, -3, ... when that exists already."""
        name = f"{self.run_dir.name}-tensorboard" if key == "tensorboard" else \
            f"{self.run_dir.name}-step{self.step()}-{key}"
        return free_folder(self.exports_folder / name)

    def _update_defaults(self) -> None:
        """New default folders (for the checkpoint chosen, not yet taken), except where
        the user typed one."""
        for key, line in self.folders.items():
            if line.text() in ("", self._defaults.get(key)):
                self._defaults[key] = str(self.default_folder(key))
                line.setText(self._defaults[key])

    def _browse(self, key: str) -> None:
        start = self.folders[key].text().strip() or str(self.exports_folder)
        chosen = QFileDialog.getExistingDirectory(self, "Export into (a new or empty folder)",
                                                  str(Path(start).parent))
        if chosen:
            self.folders[key].setText(chosen)
            self.boxes[key].setChecked(True)

    # ---------------------------------------------------------------- checking

    def problems(self) -> list[str]:
        """What keeps the export from starting, checked as the engine checks it."""
        chosen = self.chosen()
        if not chosen:
            return ["choose what to export: the LoRA adapter, a merged model or the TensorBoard events"]
        problems = []
        needing = [kind.label for kind in chosen if kind.needs_checkpoint]
        if needing and not self.checkpoints:
            why = no_checkpoint_message(self.run_dir).replace("to resume from", "to export", 1)
            problems.append(f"{' and '.join(needing)}: {why} (only its TensorBoard events can be exported)")
        for kind in chosen:
            problem = folder_problem(self.folders[kind.key].text(), kind.label)
            if problem:
                problems.append(problem)
        folders = [self.folders[kind.key].text().strip() for kind in chosen]
        if not problems and len({Path(f).expanduser().resolve() for f in folders}) < len(folders):
            problems.append("give each output its own folder")
        return problems

    def check(self) -> list[str]:
        problems = [] if self.running else self.problems()
        self.problem.setText(problems[0] if problems else "")
        self.export_button.setEnabled(not problems and not self.running)
        return problems

    def _export(self) -> None:
        if not self.running and not self.check():
            self.export_requested.emit()

    # ----------------------------------------------------- progress and result

    def set_running(self, running: bool) -> None:
        """While the engine exports: the choices are fixed and Cancel export shows."""
        self.running = running
        for widget in (self.checkpoint, *self.boxes.values(), *self.folders.values()):
            widget.setEnabled(not running and (widget is not self.checkpoint or bool(self.checkpoints)))
        self.cancel_button.setVisible(running)
        self.cancel_button.setEnabled(running)
        if running:
            self._show_result_buttons(False)
            self.progress.setRange(0, 0)  # busy until the engine's first progress line
            self.progress.show()
            self.status.setStyleSheet("")
            self.status.setText("starting the engine…")
        self.check()

    def show_progress(self, done: int, total: int, what: str) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.progress.setFormat(f"%v/%m  {what}")
        self.status.setText(what)

    def show_result(self, ok: bool, text: str, folders: list[Path]) -> None:
        """The export ended: `text` says how (the folders, or the engine's message)."""
        self.set_running(False)
        self.exported = list(folders) if ok else []
        if ok:
            self.progress.setValue(self.progress.maximum())
        else:
            self.progress.hide()
        self.status.setStyleSheet("" if ok else "color:#b00020")
        self.status.setText(text)
        self._show_result_buttons(ok)
        self._update_defaults()  # the folders just written are taken: the next export gets new ones
        self.check()

    def _show_result_buttons(self, on: bool) -> None:
        self.show_folder_button.setVisible(on)
        self.copy_button.setVisible(on)

    def result_folder(self) -> Path | None:
        """The folder Show folder opens: the one exported, or the folder holding them all."""
        if not self.exported:
            return None
        return self.exported[0] if len(self.exported) == 1 else Path(os.path.commonpath(self.exported))

    def show_folder(self) -> bool:
        """Open the exported folder in the file manager; when it is gone, or no file
        manager opens it (openUrl returns False, e.g. no desktop integration), say so in
        the dialog with the path, rather than nothing happening."""
        folder = self.result_folder()
        if folder is None:
            return False
        if not folder.is_dir():
            problem = f"{folder} no longer exists (moved or deleted since the export)"
        elif QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            return True
        else:
            problem = f"no file manager could open {folder}; Copy path gives its path"
        self.problem.setText(f"Cannot show the folder: {problem}")
        return False

    def copy_path(self) -> None:
        QGuiApplication.clipboard().setText("\n".join(str(p) for p in self.exported))
