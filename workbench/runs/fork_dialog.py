""""Fork from here…": a new run from one of a run's checkpoints, with some settings
changed. The dialog picks the checkpoint, takes the settings to change as KEY=VALUE
lines and the new run's folder name, checks them against the parent's preset as the
user types, and gives the engine command (`python -m engine fork PARENT --checkpoint
step_N --run-dir NEW --quiet --set ...`, engine/commands/fork.py) that the window launches as a
run."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QVBoxLayout,
)

from engine.run import rundir
from engine.commands.fork import CARRIED_FIELDS, carried_field_problems, carried_set_problem
from engine.foundation.errors import PresetError
from engine.preset.schema import load_preset
from workbench.runs.launcher import engine_fork_command


def checkpoint_steps(run_dir: Path) -> list[tuple[str, int]]:
    """(folder name, step) of each complete checkpoint of a run, oldest first."""
    found = []
    for folder in rundir.complete_checkpoints(run_dir):
        try:
            step = int(json.loads((folder / rundir.CHECKPOINT_STATE).read_text())["step"])
        except (OSError, ValueError, KeyError):
            continue
        found.append((folder.name, step))
    return found


def fork_name(parent: str, step: int, now: float | None = None) -> str:
    """The fork's default folder name, as the engine names one.

    >>> fork_name("grpo-sort-20260101-000000", 50, 0.0).startswith("grpo-sort-20260101-000000-fork-50-19")
    True
    """
    return f"{parent}-fork-{step}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}"


class ForkDialog(QDialog):
    """Pick a checkpoint of `parent`, the settings to change and the new folder's name
    (in `runs_folder`); `command()` is the engine command for it."""

    def __init__(self, parent_run: Path, runs_folder: Path, parent=None):
        super().__init__(parent)
        self.parent_run = Path(parent_run).resolve()
        self.runs_folder = Path(runs_folder)
        self.setWindowTitle(f"Fork {self.parent_run.name}")
        self.setObjectName("fork-dialog")
        self.checkpoints = checkpoint_steps(self.parent_run)
        self.checkpoint = QComboBox()
        self.checkpoint.setObjectName("fork-checkpoint")
        for name, step in self.checkpoints:
            self.checkpoint.addItem(f"{name} (step {step})", name)
        self.checkpoint.setCurrentIndex(len(self.checkpoints) - 1)  # the newest
        self.sets = QPlainTextEdit()
        self.sets.setObjectName("fork-sets")
        self.sets.setPlaceholderText("training.learning_rate=5e-4\ntraining.max_steps=400")
        self.sets.setToolTip("Fields of the parent's preset to change, one KEY=VALUE a line")
        self.name = QLineEdit()
        self.name.setObjectName("fork-name")
        self._default_name = ""
        self._update_name()
        fixed = ", ".join(path for path, _, _ in CARRIED_FIELDS)
        note = QLabel(f"The fork continues from the checkpoint exactly as a resume would, in a new run folder, "
                      f"with these settings changed. Fixed by the checkpoint: {fixed}.")
        note.setWordWrap(True)
        note.setStyleSheet("color:#5f6368")
        self.problem = QLabel()
        self.problem.setObjectName("fork-problem")
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color:#b00020")
        self.buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.fork_button = self.buttons.button(QDialogButtonBox.Ok)
        self.fork_button.setText("Fork and run")
        form = QFormLayout()
        form.addRow("Checkpoint:", self.checkpoint)
        form.addRow("Settings to change:", self.sets)
        form.addRow("New run folder:", self.name)
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addLayout(form)
        layout.addWidget(self.problem)
        layout.addWidget(self.buttons)
        self.resize(560, 360)

        self.checkpoint.currentIndexChanged.connect(lambda _i: (self._update_name(), self.check()))
        self.sets.textChanged.connect(self.check)
        self.name.textChanged.connect(lambda _t: self.check())
        self.buttons.accepted.connect(self._accept)
        self.buttons.rejected.connect(self.reject)
        self.check()

    # ------------------------------------------------------------- the choices

    def checkpoint_name(self) -> str:
        return str(self.checkpoint.currentData() or "")

    def step(self) -> int:
        return dict(self.checkpoints).get(self.checkpoint_name(), 0)

    def set_lines(self) -> list[str]:
        """The KEY=VALUE lines typed (blank lines and `#` comments left out)."""
        lines = [line.strip() for line in self.sets.toPlainText().splitlines()]
        return [line for line in lines if line and not line.startswith("#")]

    def run_dir(self) -> Path:
        return (self.runs_folder / self.name.text().strip()).resolve()

    def command(self, python: str | None = None) -> list[str]:
        return engine_fork_command(self.parent_run, self.checkpoint_name(), self.run_dir(), self.set_lines(), python)

    def _update_name(self) -> None:
        """A new default name for the checkpoint chosen, unless the user typed one."""
        if self.name.text() in ("", self._default_name):
            self._default_name = fork_name(self.parent_run.name, self.step())
            self.name.setText(self._default_name)

    # ---------------------------------------------------------------- checking

    def problems(self) -> list[str]:
        """What keeps the fork from starting, checked as the engine checks it."""
        if not self.checkpoints:
            return [f"{self.parent_run.name} has no complete checkpoint to fork from"]
        problems = []
        lines = self.set_lines()
        for line in lines:
            key, sep, _ = line.partition("=")
            if not sep or not re.fullmatch(r"[\w.]+", key.strip()):
                problems.append(f"{line!r}: expected KEY=VALUE, e.g. training.learning_rate=5e-4")
        name = self.name.text().strip()
        if not name or "/" in name or name in (".", ".."):
            problems.append("give the new run folder a name")
        elif (self.runs_folder / name).exists():
            problems.append(f"{name} exists in the runs folder; choose a new name")
        if problems:
            return problems
        preset_path = self.parent_run / rundir.PRESET_FILE
        try:
            parent = load_preset(preset_path)
        except PresetError as exc:
            return [str(exc)]
        try:
            fork = load_preset(preset_path, lines)
        except PresetError as exc:
            return [carried_set_problem(lines, parent) or str(exc).replace(str(preset_path), "the parent's preset")]
        problems = carried_field_problems(parent, fork)
        if fork.training.max_steps <= self.step():
            problems.append(f"training.max_steps {fork.training.max_steps}: the fork starts at step {self.step()}; "
                            f"give more, e.g. training.max_steps={2 * self.step()}")
        return problems

    def check(self) -> list[str]:
        problems = self.problems()
        self.problem.setText(problems[0].replace("--set ", "") if problems else "")
        self.fork_button.setEnabled(not problems)
        return problems

    def _accept(self) -> None:
        if not self.check():
            self.accept()
