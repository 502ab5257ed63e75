"""Run, Stop, Kill and Resume: launching the engine on the form's preset into a new run
folder, continuing a run that ended early in its own folder (`rl-engine resume`),
attaching to an engine, the actions' states and tool tips, and a run's status as this
window sees it (its own engine's process). `RunControl`, owned by MainWindow, holds the
window's engine; it is given the set-up form, the document and the window's callbacks."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Callable

import yaml
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLineEdit

from engine.run import rundir
from engine.preset.paths import absolute_preset_paths
from workbench.runs.process import (LAUNCH_PRESET, can_signal, describe_exit, find_engine, read_process_record,
                                    workbench_dir)
from workbench.runs.labels import read_label_record, resolved, write_label_record
from workbench.runs.status import describe_run
from workbench.runs.launcher import AttachedEngine, EngineHandle, EngineProcess, engine_resume_command, launch_of
from workbench.runs.status import last_checkpoint, resume_problem
from workbench.runs.rundata import RunData
from workbench.window.hooks import WindowHooks, make_action
from workbench.settings import bundled_presets
from workbench.window.names import CANCEL, LEAVE_RUNNING, SETUP, STOP_RUN, DefaultChoice
from workbench.window.pipeline import unresolved_problems

KILL = "Kill"


def run_dir_name(preset_name: str, now: float | None = None) -> str:
    """`NAME-YYYYmmdd-HHMMSS` as the engine names runs, the name made safe for a folder.

    >>> run_dir_name("grpo sort/v2", 0.0).startswith("grpo-sort-v2-19")
    True
    """
    safe = re.sub(r"[^\w.-]+", "-", preset_name).strip("-.") or "run"
    return f"{safe}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}"


class RunControl:
    """Run, Stop, Kill and Resume, and the engine this window started or attached to
    (`engine`, running in `engine_dir`).

    Given: `window`'s callbacks (workbench/window/hooks.py); `doc` and `setup` (the
    set-up form: its checks before a launch, the processes and GPUs it launches on);
    `settings`; `shown()` the runs on show; `run_data(path)` the window's model of a
    run; `open_run(path)` shows one; `launched(run dir)` after a launch and
    `finished(exit code)` after the engine ended (the window's signals); `origin()` the
    preset the form was opened as (window/presets.py's PresetOrigin; None: unknown), which
    a run's label is worked out against. `name_field`: the Run name the user may type
    (the tool bar holds it), the run's label instead of its preset and differences."""

    origin: Callable[[], object] = staticmethod(lambda: None)

    def __init__(self, window: WindowHooks, doc, setup, settings, shown: Callable[[], list[RunData]],
                 run_data: Callable[[Path], RunData], open_run: Callable[[Path], object],
                 launched: Callable[[Path], None], finished: Callable[[object], None]):
        self.window, self.doc, self.setup, self.settings = window, doc, setup, settings
        self.shown, self.run_data, self.open_run = shown, run_data, open_run
        self.launched, self.finished = launched, finished
        self.engine: EngineHandle | None = None
        self.engine_dir: Path | None = None
        parent = window.parent
        self.act_run = make_action(parent, "▶ Run", self.run, "Ctrl+R",
                                   "Start the engine on this preset, in a new run folder")
        self.act_stop = make_action(parent, "■ Stop", self.stop, None,
                                    "Ask the engine to stop after its current step (it saves a checkpoint)")
        self.act_kill = make_action(parent, "Kill", self.kill, None,
                                    "Kill the engine now (the step in progress is lost)")
        self.name_field = QLineEdit()
        self.name_field.setObjectName("run-name-field")
        self.name_field.setPlaceholderText("Run name (optional)")
        self.name_field.setClearButtonEnabled(True)
        self.name_field.setMaximumWidth(220)
        self.name_field.setToolTip("What the next run is called in the Runs list, the header and Compare. Empty: "
                                   "its preset's name and the fields that differ from it (grpo-sort · lr 3e-4)")
        self.name_field.returnPressed.connect(self.run)
        setup.validated.connect(self.validated)

    @property
    def actions(self) -> tuple[QAction, QAction, QAction]:
        return self.act_run, self.act_stop, self.act_kill

    @property
    def running(self) -> bool:
        return self.engine is not None and self.engine.running

    def validated(self, problems: list) -> None:
        if problems:
            path, message = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            self.act_run.setToolTip(f"Cannot run yet: {path + ': ' if path else ''}{message}{more}")
            if self.window.message_kind() == "problems":  # a refused Run: say what is left to fix
                self.window.show_message(problems_text(problems), "problems")
        else:
            self.act_run.setToolTip("Start the engine on this preset, in a new run folder")
            self.window.clear_message("problems")

    def run(self) -> Path | None:
        """Launch the engine on the form's preset (saved or not). Refused, with the
        reason shown, while the preset has problems or a run is in progress."""
        if self.setup.waiting:  # Run pressed again while the first press waits for the checks
            return None
        problems = self.setup.validate_now()
        if problems:
            path, message = problems[0]
            self.window.show_message(problems_text(problems), "problems")
            self.window.show_tab(SETUP)
            self.setup.focus_field(path)
            return None
        if self.running:
            self.window.refuse(f"A run is in progress ({self.engine.run_dir.name}); stop it before starting another.")
            return None
        preset, _ = self.doc.validate()
        folder = self.settings.runs_path
        # A later RLHF stage before its earlier runs exist: the engine would start, refuse
        # it and leave a failed run folder behind.
        unresolved = unresolved_problems(preset.model_dump(mode="json"), {p.stem: p for p in bundled_presets()},
                                         folder)
        if unresolved:
            self.window.show_message(problems_text(unresolved), "problems")
            self.window.show_tab(SETUP)
            self.setup.focus_field(unresolved[0][0])
            return None
        run_dir: Path | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            run_dir = folder / run_dir_name(preset.name)
            suffix = 2
            while run_dir.exists():
                run_dir = folder / f"{run_dir_name(preset.name)}-{suffix}"
                suffix += 1
            launch = workbench_dir(run_dir) / LAUNCH_PRESET
            launch.parent.mkdir(parents=True)
            # The launch preset lives in the run folder: a relative prompt file, custom
            # reward file or reward-model folder is made absolute (the engine's one rule).
            data = absolute_preset_paths(preset, self.doc.base_dir).model_dump(mode="json")
            launch.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
            self._write_label(run_dir, preset.name)
            processes = self.setup.launch.process_count()
            engine = EngineProcess(run_dir, launch, stop_timeout_s=self.settings.stop_timeout_s,
                                   parent=self.window.parent, processes=processes, gpus=self.setup.launch.gpu_list())
        except OSError as exc:
            self.window.show_message(f"Cannot start the engine: {exc}", "error")
            if run_dir is not None:
                remove_unstarted(run_dir)
            return None
        many = f" in {processes} processes (torchrun)" if processes > 1 else ""
        started = self.start(engine, run_dir, f"Started {run_dir}{many}", remove_on_failure=True)
        if started is not None:
            self.name_field.clear()  # a name is one run's: the next is labelled by its preset again
        return started

    def _write_label(self, run_dir: Path, preset_name: str) -> None:
        """What the run's label is worked out from (workbench/runs/labels.py): the name typed
        at Run, the preset the form was opened as, resolved as the run's own preset is."""
        origin = self.origin()
        fields = None
        if origin is not None:
            fields = origin.data if origin.resolved else resolved(origin.data, self.doc.base_dir)
        write_label_record(run_dir, self.name_field.text().strip() or None,
                           origin.title if origin is not None else preset_name, fields,
                           origin.path if origin is not None else None)

    def run_again(self, run_dir: Path) -> Path | None:
        """A run's preset once more, in a new run folder (the banner's Run again): the same
        settings and label, and its name unless one is typed in the Run name field (which
        names the next run, however it is started); the form's preset is not involved."""
        run_dir = Path(run_dir)
        if self.running:
            self.window.refuse(f"A run is in progress ({self.engine.run_dir.name}); stop it before starting another.")
            return None
        preset = self.run_data(run_dir).preset
        if not preset:
            self.window.refuse(f"Cannot run {run_dir.name} again: its folder holds no preset")
            return None
        folder = run_dir.parent
        new_dir = folder / run_dir_name(str(preset.get("name") or "run"))
        suffix = 2
        while new_dir.exists():
            new_dir = folder / f"{run_dir_name(str(preset.get('name') or 'run'))}-{suffix}"
            suffix += 1
        record = read_label_record(run_dir)
        processes, gpus = launch_of((read_process_record(run_dir) or {}).get("command", []))
        try:
            launch = workbench_dir(new_dir) / LAUNCH_PRESET
            launch.parent.mkdir(parents=True)
            launch.write_text(yaml.safe_dump(preset, sort_keys=False, allow_unicode=True), encoding="utf-8")
            typed = self.name_field.text().strip()
            if record or typed:
                write_label_record(new_dir, typed or record.get("name"), str(record.get("preset") or ""),
                                   record.get("preset_fields"), record.get("preset_file"))
            engine = EngineProcess(new_dir, launch, stop_timeout_s=self.settings.stop_timeout_s,
                                   parent=self.window.parent, processes=processes, gpus=gpus)
        except OSError as exc:
            self.window.show_message(f"Cannot start the engine: {exc}", "error")
            remove_unstarted(new_dir)
            return None
        started = self.start(engine, new_dir, f"Started {new_dir} (again: {run_dir.name}'s preset)",
                             remove_on_failure=True)
        if started is not None:
            self.name_field.clear()
        return started

    def start(self, engine: EngineProcess, run_dir: Path, message: str, remove_on_failure: bool) -> Path | None:
        """Start `engine` as this window's (Run, Resume, a fork), show `message` and the
        run. A start that fails says why; `remove_on_failure`: the run folder goes too
        while the engine has written nothing in it (a folder with no engine behind it
        would list as a run forever)."""
        try:
            engine.start()
        except OSError as exc:
            self.window.show_message(f"Cannot start the engine: {exc}", "error")
            if remove_on_failure:
                remove_unstarted(run_dir)
            return None
        self.attach(engine, run_dir)
        self.open_run(run_dir)
        self.window.show_message(message, "engine", run=run_dir)
        self.launched(run_dir)
        return run_dir

    def attach(self, engine: EngineHandle, run_dir: Path) -> None:
        self.engine = engine
        self.engine_dir = Path(run_dir)
        engine.finished.connect(self._engine_finished)
        engine.stopping.connect(lambda: self.update_actions())
        engine.escalated.connect(lambda text: self.window.show_message(f"{engine.run_dir.name}: {text}", "engine",
                                                                       run=engine.run_dir))
        self.update_actions()

    def maybe_attach(self, path: Path) -> None:
        """A run left running by an earlier window: attach to its engine so Stop works
        (unless this window is already running an engine of its own)."""
        if self.running or (self.engine_dir is not None and self.engine_dir.resolve() == Path(path).resolve()):
            return
        run = self.run_data(path)
        ref = find_engine(path, run.started)
        if ref is not None and run.status in ("running", "empty") and ref.alive() and can_signal(ref.pid):
            self.attach(AttachedEngine.from_ref(path, ref, self.settings.stop_timeout_s, parent=self.window.parent),
                        path)

    def stop(self) -> None:
        if self.running:
            self.engine.stop()
            how = "" if isinstance(self.engine, EngineProcess) else f" (SIGTERM to pid {self.engine.pid})"
            self.window.show_message(f"Stopping{how}: the engine finishes its current step and saves a "
                                     "checkpoint…", "engine", run=self.engine.run_dir)
            self.update_actions()

    def kill(self) -> None:
        """Kill the engine now, once the user has agreed to lose the steps since the last
        checkpoint (all of them, when there is none yet: then Resume starts it again from
        step 0)."""
        if not self.running:
            return
        # Cancel is the default: Return (or a hurried click on the default button) loses nothing.
        if self.window.ask("Kill the run?", self._kill_question(), [KILL, DefaultChoice(CANCEL)]) == KILL \
                and self.engine.running:
            self.engine.kill()

    def _kill_question(self) -> str:
        run_dir = self.engine.run_dir
        run = self.run_data(run_dir)
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
            shown = self.shown()
            if len(shown) != 1:
                return None
            run_dir = shown[0].run_dir
        run_dir = Path(run_dir).resolve()
        if self.running:
            self.window.refuse(f"A run is in progress ({self.engine.run_dir.name}); stop it before resuming another.")
            return None
        run = self.run_data(run_dir)
        run.poll()
        problem = resume_problem(run_dir, self.status(run)[0])
        if problem:
            self.window.refuse(f"Cannot resume {run_dir.name}: {problem}")
            return None
        record = read_process_record(run_dir)
        processes, gpus = launch_of(record.get("command", []) if record else [])
        command = engine_resume_command(run_dir, processes=processes, gpus=gpus)
        engine = EngineProcess(run_dir, run_dir / rundir.PRESET_FILE, stop_timeout_s=self.settings.stop_timeout_s,
                               parent=self.window.parent, processes=processes, command=command)
        engine.resuming = True
        saved = last_checkpoint(run_dir)
        return self.start(engine, run_dir, f"Resuming {run_dir.name} from {saved[0]}" if saved else
                          f"Starting {run_dir.name} again from step 0 (it has no checkpoint)", remove_on_failure=False)

    def resume_blocked(self) -> str | None:
        """Why no run can be resumed now, whatever its state (the header's Resume)."""
        if self.running:
            return f"a run of this window is in progress ({self.engine.run_dir.name})"
        return None

    def _engine_finished(self, code) -> None:
        run_dir = self.engine_dir
        run = self.run_data(run_dir) if run_dir else None
        if run is not None:
            run.poll()
        how = describe_exit(code, bool(self.engine and self.engine.killed))
        name = run_dir.name if run_dir else "the engine"
        outcome = ""
        if run is not None:
            status, _ = self.status(run)
            outcome = f"; the run is {status}"
        self.window.show_message(f"{name}: the engine {how}{outcome}", "engine", run=run_dir)
        self.update_actions()
        self.finished(code)

    # ------------------------------------------------------------- statuses

    def _is_mine(self, run: RunData) -> bool:
        return self.engine is not None and self.engine_dir is not None and self.engine_dir.resolve() == run.run_dir

    def status(self, run: RunData) -> tuple[str, str]:
        """The run's status and note, by the one rule the runs list uses too
        (describe_run); for this window's own engine, the process it holds."""
        alive = None
        if self._is_mine(run):
            alive = True if self.engine.running else None
            if alive and getattr(self.engine, "resuming", False) and \
                    (run.started or {}).get("time", 0) < (self.engine.started_at or 0):
                # Until its run_resumed event, the events are the last attempt's (stopped, killed).
                return "starting", "resuming (from the last checkpoint, or from step 0 when there is none): " \
                                   "the engine is loading the model"
        age = time.time() - run.last_time if run.last_time else None
        events_status = run.status if run.status != "empty" else "running"
        return describe_run(run.run_dir, events_status, run.num_events > 0, age, started=run.started, alive=alive)

    def header_status(self, run: RunData) -> tuple[str, str]:
        """The header's status of a run: status(), or `stopping` while this window's
        engine finishes its last step (only until its final event is read: the engine
        takes a moment to exit after it, and the run is stopped from then on)."""
        if self.running and self.engine.stop_requested and self._is_mine(run) and run.status in ("running", "empty"):
            return "running", "stopping: finishing the current step and saving a checkpoint…"
        return self.status(run)

    def _ended(self) -> str | None:
        """The status of the window's engine's run once its events say it ended (done,
        stopped, failed), while the process is still exiting; else None. The header shows
        that status at once, so Stop and Kill grey out with it, not when the process is
        seen gone a poll later."""
        if not self.running:
            return None
        run = self.run_data(self.engine.run_dir)
        if run.status not in ("done", "stopped", "failed"):
            return None
        final = run.finished or run.failure or {}
        if (final.get("time") or 0) < (getattr(self.engine, "started_at", None) or 0):
            return None  # the last attempt's end: this engine is resuming the run (or starting it again)
        return run.status

    def update_actions(self) -> None:
        """Run, Stop and Kill as the run's status stands: called when the engine starts or
        ends, and whenever the header's status on show changes (the window connects it)."""
        running = self.running
        ended = self._ended()
        self.act_stop.setEnabled(running and not self.engine.stop_requested and ended is None)
        self.act_kill.setEnabled(running and ended is None)
        self.act_run.setEnabled(not running)
        if ended is not None:
            name = self.engine.run_dir.name
            for act in (self.act_stop, self.act_kill):
                act.setToolTip(f"{act.text().strip('■ ')} is not available: {name} has ended ({ended}); its engine "
                               "is exiting")
        elif running:  # the run Stop acts on, which need not be the one on show
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
        shown = self.shown()
        run = shown[0] if len(shown) == 1 else None
        if run is None or self.status(run)[0] not in ("running", "starting", "stale"):
            return "no run of this window is in progress"
        ref = find_engine(run.run_dir, run.started)
        if ref is None:
            return (f"{run.name} was started outside this window and its events name no process id: stop it "
                    "with Ctrl-C in the terminal that runs it (or kill its engine process)")
        if not can_signal(ref.pid):
            return (f"{run.name} runs as pid {ref.pid}, a process of another user: stop it with Ctrl-C in its "
                    f"terminal, or as that user: kill -TERM {ref.pid}")
        return f"{run.name} (pid {ref.pid}) is not attached to this window"

    def may_close(self) -> bool:
        """The window is closing: a run in progress is stopped (it finishes its step and
        saves a checkpoint) or left running, as the user says; False: keep the window."""
        if not self.running:
            return True
        answer = self.window.ask(
            "A run is in progress",
            f"{self.engine.run_dir.name} is still training. Stop it (it finishes its step and saves a "
            "checkpoint), or leave it running? A run left running shows as running when you open the "
            "window again, and its plots continue.",
            [STOP_RUN, LEAVE_RUNNING, CANCEL])
        if answer == CANCEL:
            return False
        if answer == STOP_RUN:
            # The stop line is delivered before the window goes; the engine then
            # stops on its own, so closing never waits on it.
            self.engine.stop()
        self.engine.detach()
        return True


def problems_text(problems: list) -> str:
    path, message = problems[0]
    return (f"Cannot run: {len(problems)} problem{'s' if len(problems) > 1 else ''} in the preset. "
            f"First: {path + ': ' if path else ''}{message}")


def remove_unstarted(run_dir: Path) -> None:
    """A run folder the engine wrote nothing in (no events) goes: only the window wrote
    there, and with no engine behind it it would list as a run forever."""
    if not (Path(run_dir) / rundir.EVENTS_FILE).exists():
        shutil.rmtree(run_dir, ignore_errors=True)
