""""Fork from here…" (the Runs tab's button and a run's context menu): the fork dialog,
then the engine's `fork` command launched like a run. A mixin of MainWindow."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.run import rundir
from workbench import runs
from workbench.runs.fork_dialog import ForkDialog
from workbench.runs.launcher import EngineProcess


class ForkMixin:
    """Fork a run from one of its checkpoints."""

    fork_dialog: ForkDialog | None = None

    def fork_run(self, path: str | Path) -> ForkDialog | None:
        """Open the fork dialog on a run (not modal: the window goes on); its Fork and run
        button launches the fork (launch_fork)."""
        path = Path(path).resolve()
        if not rundir.complete_checkpoints(path):
            self.refuse(f"{path.name} has no complete checkpoint to fork from (one is saved every "
                        "training.save_steps steps and when a run ends or is stopped)")
            return None
        dialog = ForkDialog(path, self.settings.runs_path, parent=self)
        dialog.accepted.connect(lambda: self.launch_fork(dialog))
        self.fork_dialog = dialog
        dialog.open()
        return dialog

    def launch_fork(self, dialog: ForkDialog) -> Path | None:
        """Start `python -m engine fork PARENT --checkpoint step_N --run-dir NEW --quiet
        --set ...` as the window's engine, and show the new run."""
        if self.engine is not None and self.engine.running:
            self.refuse(f"A run is in progress ({self.engine.run_dir.name}); stop it before starting a fork.")
            return None
        run_dir = dialog.run_dir()
        if run_dir.exists():
            self.refuse(f"{run_dir.name} exists already; fork again with a new name.")
            return None
        try:
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            engine = EngineProcess(run_dir, dialog.parent_run / rundir.PRESET_FILE,
                                   stop_timeout_s=self.settings.stop_timeout_s, parent=self,
                                   command=dialog.command())
            engine.start()
        except OSError as exc:
            self.show_message(f"Cannot start the engine: {exc}", "error")
            if not (run_dir / rundir.EVENTS_FILE).exists():
                shutil.rmtree(run_dir, ignore_errors=True)
            return None
        self._attach(engine, run_dir)
        self.show_message(f"Started {run_dir}: a fork of {dialog.parent_run.name} @ step {dialog.step()}", "engine")
        self.open_run(run_dir)
        self.run_launched.emit(run_dir)
        return run_dir
