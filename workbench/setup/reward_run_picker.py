""""Run…" beside a reward model's field in the rewards editor: a menu of the runs folder's
reward-model runs that have a complete checkpoint (name, step, held-out accuracy), and
`run:PRESET` for the newest run of each of their presets. A choice is put in the field as
if typed; a hub id or a model folder is still typed (or chosen with Folder…) as before."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtWidgets import QMenu, QToolButton, QWidget

from workbench.runs.lineage import RewardModelRun, reward_model_runs

NO_FOLDER = "(no runs folder)"


class RewardRunButton(QToolButton):
    """The button and its menu, filled each time it opens (runs finish meanwhile).
    `runs_folder()` the folder to list (None: none); `choose(text)` puts a choice in the
    field."""

    def __init__(self, runs_folder: Callable[[], Path | None], choose: Callable[[str], None],
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.runs_folder, self.choose = runs_folder, choose
        self.setObjectName("reward-run-picker")
        self.setText("Run…")
        self.setToolTip("A reward-model run of the runs folder (algorithm reward_model): its newest checkpoint's "
                        "adapter and score head score the completions")
        self.setPopupMode(QToolButton.InstantPopup)
        menu = QMenu(self)
        menu.setToolTipsVisible(True)
        menu.aboutToShow.connect(self.fill)
        self.setMenu(menu)

    def fill(self) -> list[RewardModelRun]:
        """List the runs now (newest first), then the presets' `run:NAME`; the runs listed."""
        menu = self.menu()
        menu.clear()
        folder = self.runs_folder()
        runs = reward_model_runs(folder)
        if not runs:
            text = NO_FOLDER if folder is None else f"(no reward-model run with a checkpoint in {folder})"
            menu.addAction(text).setEnabled(False)
            return runs
        for run in runs:
            action = menu.addAction(run.describe(), lambda p=str(run.path): self.choose(p))
            action.setToolTip(f"{run.path}: its newest checkpoint (step {run.step}) when the run starts")
        presets = sorted({run.preset for run in runs if run.preset})
        if presets:
            menu.addSection("The newest run of a preset, when the run starts")
            for preset in presets:
                newest = next(run for run in runs if run.preset == preset)
                action = menu.addAction(f"run:{preset}", lambda p=preset: self.choose(f"run:{p}"))
                action.setToolTip(f"The newest {preset} run in the runs folder when the run starts (now {newest.name})")
        return runs
