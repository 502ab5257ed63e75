""""Fork from here…" (the Runs tab's button and a run's context menu): the fork dialog,
then the engine's `fork` command launched like a run. `ForkController`, owned by
MainWindow: it starts the fork through the window's RunControl."""

from __future__ import annotations

from pathlib import Path

from engine.run import rundir
from workbench.runs.fork_dialog import ForkDialog
from workbench.runs.launcher import EngineProcess
from workbench.window.hooks import WindowHooks
from workbench.window.run_control import RunControl


class ForkController:
    """Fork a run from one of its checkpoints: the dialog, then the engine's fork as the
    window's engine (`run_control`, workbench/window/run_control.py)."""

    def __init__(self, window: WindowHooks, settings, run_control: RunControl):
        self.window, self.settings, self.run_control = window, settings, run_control
        self.dialog: ForkDialog | None = None

    def fork_run(self, path: str | Path) -> ForkDialog | None:
        """Open the fork dialog on a run (not modal: the window goes on); its Fork and run
        button launches the fork (launch_fork)."""
        path = Path(path).resolve()
        if not rundir.complete_checkpoints(path):
            self.window.refuse(f"{path.name} has no complete checkpoint to fork from (one is saved every "
                               "training.save_steps steps and when a run ends or is stopped)")
            return None
        dialog = ForkDialog(path, self.settings.runs_path, parent=self.window.parent)
        dialog.accepted.connect(lambda: self.launch_fork(dialog))
        self.dialog = dialog
        dialog.open()
        return dialog

    def launch_fork(self, dialog: ForkDialog) -> Path | None:
        """Start `python -m engine fork PARENT --checkpoint step_N --run-dir NEW --quiet
        --set ...` as the window's engine, and show the new run."""
        control = self.run_control
        if control.running:
            self.window.refuse(f"A run is in progress ({control.engine.run_dir.name}); stop it before starting a "
                               "fork.")
            return None
        run_dir = dialog.run_dir()
        if run_dir.exists():
            self.window.refuse(f"{run_dir.name} exists already; fork again with a new name.")
            return None
        try:
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            engine = EngineProcess(run_dir, dialog.parent_run / rundir.PRESET_FILE,
                                   stop_timeout_s=self.settings.stop_timeout_s, parent=self.window.parent,
                                   command=dialog.command())
        except OSError as exc:
            self.window.show_message(f"Cannot start the engine: {exc}", "error")
            return None
        return control.start(engine, run_dir, f"Started {run_dir}: a fork of {dialog.parent_run.name} @ step "
                             f"{dialog.step()}", remove_on_failure=True)
