"""Run, Stop, Kill and Resume: launching the engine on the form's preset into a new run
folder, continuing a run that ended early in its own folder (`rl-engine resume`),
attaching to an engine, and the actions' states and tool tips. A mixin of MainWindow."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import yaml

from engine.run import rundir
from engine.preset.paths import absolute_preset_paths
from workbench import runs
from workbench.runs.launcher import EngineHandle, EngineProcess, engine_resume_command, launch_of
from workbench.runs.status import last_checkpoint, resume_problem
from workbench.window.names import CANCEL, SETUP

KILL = "Kill"


def run_dir_name(preset_name: str, now: float | None = None) -> str:
    """`NAME-YYYYmmdd-HHMMSS` as the engine names runs, the name made safe for a folder.

    >>> run_dir_name("grpo sort/v2", 0.0).startswith("grpo-sort-v2-19")
    True
    """
    safe = re.sub(r"[^\w.-]+", "-", preset_name).strip("-.") or "run"
    return f"{safe}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}"


class RunControlMixin:
    """The Run / Stop / Kill control of MainWindow."""

    def _validated(self, problems: list) -> None:
        if problems:
            path, message = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            self.act_run.setToolTip(f"Cannot run yet: {path + ': ' if path else ''}{message}{more}")
            if self._message_kind == "problems":  # a refused Run: say what is left to fix
                self.show_message(self._problems_text(problems), "problems")
        else:
            self.act_run.setToolTip("Start the engine on this preset, in a new run folder")
            self.clear_message("problems")

    @staticmethod
    def _problems_text(problems: list) -> str:
        path, message = problems[0]
        return (f"Cannot run: {len(problems)} problem{'s' if len(problems) > 1 else ''} in the preset. "
                f"First: {path + ': ' if path else ''}{message}")

    def run(self) -> Path | None:
        """Launch the engine on the form's preset (saved or not). Refused, with the
        reason shown, while the preset has problems or a run is in progress."""
        if self.setup.waiting:  # Run pressed again while the first press waits for the checks
            return None
        problems = self.setup.validate_now()
        if problems:
            path, message = problems[0]
            self.show_message(self._problems_text(problems), "problems")
            self.tabs.setCurrentIndex(SETUP)
            self.setup.focus_field(path)
            return None
        if self.engine is not None and self.engine.running:
            self.refuse(f"A run is in progress ({self.engine.run_dir.name}); stop it before starting another.")
            return None
        preset, _ = self.doc.validate()
        folder = self.settings.runs_path
        run_dir: Path | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            run_dir = folder / run_dir_name(preset.name)
            suffix = 2
            while run_dir.exists():
                run_dir = folder / f"{run_dir_name(preset.name)}-{suffix}"
                suffix += 1
            launch = runs.workbench_dir(run_dir) / runs.LAUNCH_PRESET
            launch.parent.mkdir(parents=True)
            # The launch preset lives in the run folder: a relative prompt file, custom
            # reward file or reward-model folder is made absolute (the engine's one rule).
            data = absolute_preset_paths(preset, self.doc.base_dir).model_dump(mode="json")
            launch.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
            engine = EngineProcess(run_dir, launch, stop_timeout_s=self.settings.stop_timeout_s, parent=self,
                                   processes=self.setup.launch.process_count(), gpus=self.setup.launch.gpu_list())
            engine.start()
        except OSError as exc:
            self.show_message(f"Cannot start the engine: {exc}", "error")
            if run_dir is not None and not (run_dir / rundir.EVENTS_FILE).exists():
                # Only what this method wrote is there; a folder with no engine behind
                # it would list as a run forever.
                shutil.rmtree(run_dir, ignore_errors=True)
            return None
        self._attach(engine, run_dir)
        many = f" in {engine.processes} processes (torchrun)" if engine.processes > 1 else ""
        self.show_message(f"Started {run_dir}{many}", "engine")
        self.open_run(run_dir)
        self.run_launched.emit(run_dir)
        return run_dir

    def refuse(self, reason: str) -> None:
        self.show_message(reason, "refused")

    def _attach(self, engine: EngineHandle, run_dir: Path) -> None:
        self.engine = engine
        self.engine_dir = Path(run_dir)
        engine.finished.connect(self._engine_finished)
        engine.stopping.connect(lambda: self._update_actions())
        engine.escalated.connect(lambda text: self.show_message(f"{engine.run_dir.name}: {text}", "engine"))
        self._update_actions()

    def stop(self) -> None:
        if self.engine is not None and self.engine.running:
            self.engine.stop()
            how = "" if isinstance(self.engine, EngineProcess) else f" (SIGTERM to pid {self.engine.pid})"
            self.show_message(f"Stopping{how}: the engine finishes its current step and saves a checkpoint…",
                              "engine")
            self._update_actions()

    def kill(self) -> None:
        """Kill the engine now, once the user has agreed to lose the steps since the last
        checkpoint (all of them, when there is none yet: then Resume starts it again from
        step 0)."""
        if self.engine is None or not self.engine.running:
            return
        if self.ask("Kill the run?", self._kill_question(), [KILL, CANCEL]) == KILL and self.engine.running:
            self.engine.kill()

    def _kill_question(self) -> str:
        run_dir = self.engine.run_dir
        run = self._run_data(run_dir)
        run.poll()
        step = run.last_step
        saved = last_checkpoint(run_dir)
        if saved is None:
            lost = (f"No checkpoint exists yet: the {step} step{'s' if step != 1 else ''} trained so far "
                    "are lost, and Resume starts the run again from step 0.")
        else:
            name, at = saved
            since = max(0, step - at)
            lost = (f"The steps since the last checkpoint ({name}, step {at}) are lost: {since} "
                    f"step{'s' if since != 1 else ''} and the one in progress. Resume continues from {name}.")
        return (f"Kill {run_dir.name} now (SIGKILL)? {lost}\n\nStop instead finishes the current step and "
                "saves a checkpoint.")

    def resume(self, run_dir: Path | None = None) -> Path | None:
        """Continue a run that ended early (stopped, killed, failed) in its own folder from
        its last checkpoint, or from step 0 when it has none: `rl-engine resume RUN_DIR`,
        launched as Run launches `run`, in as many processes as it had; the dashboard
        follows it there."""
        if run_dir is None:
            if len(self.shown) != 1:
                return None
            run_dir = self.shown[0].run_dir
        run_dir = Path(run_dir).resolve()
        if self.engine is not None and self.engine.running:
            self.refuse(f"A run is in progress ({self.engine.run_dir.name}); stop it before resuming another.")
            return None
        run = self._run_data(run_dir)
        run.poll()
        problem = resume_problem(run_dir, self._status(run)[0])
        if problem:
            self.refuse(f"Cannot resume {run_dir.name}: {problem}")
            return None
        record = runs.read_process_record(run_dir)
        processes, gpus = launch_of(record.get("command", []) if record else [])
        command = engine_resume_command(run_dir, processes=processes, gpus=gpus)
        engine = EngineProcess(run_dir, run_dir / rundir.PRESET_FILE, stop_timeout_s=self.settings.stop_timeout_s,
                               parent=self, processes=processes, command=command)
        engine.resuming = True
        try:
            engine.start()
        except OSError as exc:
            self.show_message(f"Cannot start the engine: {exc}", "error")
            return None
        self._attach(engine, run_dir)
        saved = last_checkpoint(run_dir)
        self.show_message(f"Resuming {run_dir.name} from {saved[0]}" if saved else
                          f"Starting {run_dir.name} again from step 0 (it has no checkpoint)", "engine")
        self.open_run(run_dir)
        self.run_launched.emit(run_dir)
        return run_dir

    def resume_blocked(self) -> str | None:
        """Why no run can be resumed now, whatever its state (the header's Resume)."""
        if self.engine is not None and self.engine.running:
            return f"a run of this window is in progress ({self.engine.run_dir.name})"
        return None

    def _engine_finished(self, code) -> None:
        run_dir = self.engine_dir
        run = self._cache.get(run_dir) if run_dir else None
        if run is not None:
            run.poll()
        how = runs.describe_exit(code, bool(self.engine and self.engine.killed))
        name = run_dir.name if run_dir else "the engine"
        outcome = ""
        if run is not None:
            status, _ = self._status(run)
            outcome = f"; the run is {status}"
        self.show_message(f"{name}: the engine {how}{outcome}", "engine")
        self._update_actions()
        self._update_header()
        self.runs_view.refresh()
        self.engine_finished.emit(code)

    def _update_actions(self) -> None:
        running = self.engine is not None and self.engine.running
        self.act_stop.setEnabled(running and not self.engine.stop_requested)
        self.act_kill.setEnabled(running)
        self.act_run.setEnabled(not running)
        if running:  # the run Stop acts on, which need not be the one on show
            name = self.engine.run_dir.name
            how = "" if isinstance(self.engine, EngineProcess) else f" (SIGTERM to its pid {self.engine.pid})"
            self.act_stop.setToolTip(f"Ask {name} to stop after its current step{how}; it saves a checkpoint")
            if self.engine.stop_requested:
                self.act_stop.setToolTip(f"{name} is stopping: it finishes its step and saves a checkpoint")
            self.act_kill.setToolTip(f"Kill {name} now (SIGKILL to pid {self.engine.pid}): the step in progress "
                                     "is lost")
        else:
            reason = self._why_no_stop()
            self.act_stop.setToolTip(f"Stop is not available: {reason}")
            self.act_kill.setToolTip(f"Kill is not available: {reason}")
        for act in (self.act_stop, self.act_kill):
            act.setStatusTip(act.toolTip())

    def _why_no_stop(self) -> str:
        """Why Stop and Kill are greyed out, in words (their tool tips)."""
        run = self.shown[0] if len(self.shown) == 1 else None
        if run is None or self._status(run)[0] not in ("running", "starting", "stale"):
            return "no run of this window is in progress"
        ref = runs.find_engine(run.run_dir, run.started)
        if ref is None:
            return (f"{run.name} was started outside this window and its events name no process id: stop it "
                    "with Ctrl-C in the terminal that runs it (or kill its engine process)")
        if not runs.can_signal(ref.pid):
            return (f"{run.name} runs as pid {ref.pid}, a process of another user: stop it with Ctrl-C in its "
                    f"terminal, or as that user: kill -TERM {ref.pid}")
        return f"{run.name} (pid {ref.pid}) is not attached to this window"
