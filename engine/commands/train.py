"""`rl-engine run`, `resume` and `fork`: one training process from its first line to its
final event. The stop handlers (SIGTERM, SIGINT, a `stop` line on stdin; what a stop does
in each phase is engine/foundation/stopping.py's), the run folder and its log, `train` (set-up,
the trainer's run, and the final event however it ends) and the exit statuses. A fork
is planned by engine/commands/fork.py (torch-free: the window's fork dialog uses it) and
trains through the same `train`. engine/cli.py installs the handlers first thing
(`watch_process`) and dispatches here.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from engine.distributed.launch import (checkpoint_world_size_problem, launch_from_cli, launched_by_torchrun,
                                      launched_rank)
from engine.foundation.errors import PresetError
from engine.preset.paths import absolute_preset_paths
from engine.preset.schema import Preset, load_preset
from engine.run import rundir
from engine.run.failures import can_restart, failure_location, failure_message, no_checkpoint_message, restart_message, startup_problems, storage_error, storage_message
from engine.run.rundir import naming_the_file
from engine.run.progress import print_alarm, progress_callback
from engine.foundation.stopping import FINISHING, SETUP, STARTING, StopDuringSetup, StopFlag

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


def build_trainer(preset: Preset, run_dir: str | Path, stop: StopFlag | None = None,
                  preset_dir: Path | None = None, world=None):
    """The trainer for the preset's algorithm (engine.algorithms.ALGORITHMS; its module,
    which imports torch, is imported here); `world` (engine.distributed.world.World)
    when this process is one of several."""
    from engine.algorithms import trainer_class

    return trainer_class(preset.algorithm.name)(preset, run_dir, stop=stop, preset_dir=preset_dir, world=world)


def default_run_dir(preset_name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{preset_name}-{stamp}"


class _QuietFileHandler(logging.FileHandler):
    """A log write the disk refuses (full, say) is dropped: logging's own report of it
    is a traceback on stderr, over the one line that says what happened."""

    def handleError(self, record) -> None:
        pass


def open_run_folder(run_dir: Path, retry: str) -> str | None:
    """Create the run folder (where missing) and its log; None, or the one line saying
    why the folder cannot be written (`retry`: what to do then, see storage_message)."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        setup_logging(run_dir)
    except OSError as exc:
        error = storage_error(exc) or exc
        return storage_message(error, run_dir, retry)
    return None


def setup_logging(run_dir: Path) -> None:
    """engine.log; engine.rankN.log for rank N > 0 of a run in several processes."""
    rank = launched_rank()
    name = rundir.LOG_FILE if rank == 0 else f"engine.rank{rank}.log"
    handler = _QuietFileHandler(run_dir / name, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)


# The run the current main() drives: its stop flag (main installs the handlers with it
# first thing), and its folder until a final event is written there.
_ACTIVE_STOP: StopFlag | None = None
_UNFINISHED_RUN: Path | None = None
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _say(text: str) -> None:
    # From a signal handler: print() can fail with "reentrant call" when the signal
    # interrupted a write to stderr (the progress bar's), so write the bytes directly.
    try:
        os.write(2, text.encode("utf-8", "replace"))
    except OSError:
        pass


def install_stop_handlers(stop: StopFlag) -> dict:
    """SIGTERM and SIGINT stop the run; what a stop does depends on the phase (see
    engine/foundation/stopping.py): while starting, it is recorded; during set-up, StopDuringSetup
    is raised at once; while training, the current step finishes first. A second
    Ctrl-C raises KeyboardInterrupt (the run is aborted) in every phase but finishing.
    Returns the previous handlers, for restore_handlers."""
    def on_signal(signum, _frame):
        if stop.phase == FINISHING:
            return  # the final event is being written
        name = signal.Signals(signum).name
        again = stop.requested
        stop.request(name)
        if again and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: the user does not want to wait
        if stop.phase == SETUP:
            raise StopDuringSetup(stop.reason)
        if not again:
            when = "as soon as set-up begins" if stop.phase == STARTING else "after the current step"
            _say(f"\n{name}: stopping {when} (Ctrl-C again to abort)…\n")

    previous = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
    for signum in _STOP_SIGNALS:
        signal.signal(signum, on_signal)
    return previous


def restore_handlers(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def start_stdin_reader(stop: StopFlag) -> None:
    """A `stop` line on stdin stops the run. The reader is a thread, which cannot raise
    in the main thread: during set-up it sends SIGTERM to the main thread, whose
    handler then raises StopDuringSetup (with the reason "stop requested")."""
    def read_stdin():
        try:
            for line in sys.stdin:
                if line.strip().lower() == "stop":
                    stop.request("stop requested")
                    if stop.phase == SETUP:
                        if hasattr(signal, "pthread_kill"):
                            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
                        else:  # pragma: no cover (Windows)
                            import _thread
                            _thread.interrupt_main(signal.SIGTERM)
                    return
        except (OSError, ValueError):
            return

    if sys.stdin is not None and not sys.stdin.closed:
        threading.Thread(target=read_stdin, name="stdin-stop", daemon=True).start()


def _final_event(run_dir: Path, type: str, **fields) -> bool:
    """Write a run's last event (run_finished or run_failed), once; rank 0's to write.
    False when the disk refused it (full, say): the caller's message is then all there is."""
    global _UNFINISHED_RUN
    if launched_rank() != 0:
        _UNFINISHED_RUN = None
        return True
    written = True
    try:
        events = rundir.EventWriter(run_dir)
        try:
            events.emit(type, **fields)
        finally:
            events.close()
    except OSError:
        written = False
    if _UNFINISHED_RUN == run_dir:
        _UNFINISHED_RUN = None
    return written


def _record_setup_stop(run_dir: Path, reason: str) -> None:
    step, checkpoint = 0, None
    newest = rundir.complete_checkpoints(run_dir)  # a resumed run's: it continues from there
    if newest:
        checkpoint = str(newest[-1].relative_to(run_dir))
        try:
            step = json.loads((newest[-1] / rundir.CHECKPOINT_STATE).read_text())["step"]
        except (OSError, ValueError, KeyError):
            pass
    message = f"stopped during set-up ({reason}), before the first step: nothing to checkpoint"
    if checkpoint:
        message += f"; resume continues from {checkpoint}"
    _final_event(run_dir, "run_finished", step=step, status="stopped", reason=reason, during_setup=True,
                 checkpoint=checkpoint, message=message)
    print(f"run {message} ({run_dir})", file=sys.stderr)


def _record_failure(run_dir: Path, exc: BaseException, during_setup: bool, world=None) -> None:
    """run_failed with the failure's message. In a run of several processes a rank other
    than 0 leaves why it failed for rank 0, which names the rank that ended the run."""
    logging.getLogger("engine").error("run failed:\n%s", "".join(traceback.format_exception(exc)))
    refused = storage_error(exc)
    message = storage_message(refused, run_dir, "") if refused else failure_message(exc, during_setup)
    where = None if refused else failure_location(exc)
    fields = {"message": message, "error_type": type(exc).__name__}
    if world is not None and world.distributed:
        from engine.distributed.ranks import root_cause, write_rank_failure

        if not world.is_main:
            write_rank_failure(run_dir, world.rank, message, type(exc).__name__)
            print(f"error (rank {world.rank}): {message}", file=sys.stderr)
            return
        cause = root_cause(run_dir, world.processes)
        if cause is not None:
            fields.update(message=cause["message"], rank=cause["rank"])
            message, where = cause["message"], None
    if isinstance(exc, KeyboardInterrupt):
        fields["aborted"] = True
    if where:
        fields.update(file=where[0], line=where[1])
    written = _final_event(run_dir, "run_failed", **fields)
    # The message may name the place already ("(at FILE, line 13)"): say it once.
    suffix = f" ({where[0]}:{where[1]})" if where and where[0] not in message else ""
    see = f"\nsee {run_dir / rundir.LOG_FILE}" if written else ""
    print(f"error: {message}{suffix}{see}", file=sys.stderr)


def train(preset, run_dir: Path, resume_from: Path | None, preset_dir: Path | None, quiet: bool,
          fork_of: dict | None = None, restart: bool = False) -> int:
    """Set up and run the trainer; every way it ends writes a final event: run_finished
    (done, stopped, or stopped during set-up) or run_failed (a failure, or a second
    Ctrl-C). Exit status 0 for run_finished, 1 for run_failed, 2 for run_failed during
    set-up on input the preset gave (a model, data or reward that cannot be used: what
    `validate` refuses with 2). `restart`: `resume` of a run that has no checkpoint, which
    starts again from step 0 in its folder (Trainer.run)."""
    global _UNFINISHED_RUN
    stop, previous = _ACTIVE_STOP, None
    if stop is None:  # called without main(): install the handlers here
        stop = StopFlag(phase=STARTING)
        previous = install_stop_handlers(stop)
    _UNFINISHED_RUN = run_dir
    start_stdin_reader(stop)
    world = None
    try:
        stop.phase = SETUP  # from here until Trainer.run, a stop ends the run at once
        stop.check_setup()  # a stop that came while the preset was read
        if launched_by_torchrun():  # a worker of a run in several processes: join the others
            from engine.distributed.launch import exit_when_orphaned
            from engine.distributed.ranks import write_ranks

            exit_when_orphaned()
            from engine.distributed.world import init_world

            world = init_world(preset.model.device)
            quiet = quiet or not world.is_main
            if world.is_main:
                write_ranks(run_dir, world.processes)
        if resume_from is None and launched_rank() == 0:
            from engine.algorithms.context_fit import unset_fitted_fields
            from engine.foundation.io import save_preset

            try:  # what the run is, even if set-up is stopped; a default the set-up fits left unset
                save_preset(preset, run_dir / rundir.PRESET_FILE, leave_out=unset_fitted_fields(preset))
            except OSError as exc:
                raise naming_the_file(exc, run_dir / rundir.PRESET_FILE) from exc
        from engine.hub.access import go_offline_if_unreachable, hub_ids_of

        go_offline_if_unreachable(hub_ids_of(preset, preset_dir))  # before the hub libraries load
        if quiet:  # --quiet: transformers' "Loading weights" bar too
            from engine.model.loading import quiet_progress_bars

            quiet_progress_bars()
        trainer = build_trainer(preset, run_dir, stop=stop, preset_dir=preset_dir, world=world)
        if launched_rank() == 0:
            for note in trainer.setup_notes:  # a default max_completion_length cut to the context
                print(f"note: {note}", file=sys.stderr)
        start = trainer.step
        if resume_from is not None:
            start = json.loads((resume_from / rundir.CHECKPOINT_STATE).read_text())["step"]
        on_step, close = progress_callback(preset.training.max_steps, start, quiet)
        trainer.on_alarm = print_alarm
        if trainer.episodes is not None and on_step is not None:
            trainer.episodes.report = on_step.within_step  # each turn of a step's episodes on the bar
        try:
            status = trainer.run(on_step=on_step, resume_from=resume_from, fork_of=fork_of, restart=restart)
        finally:
            close()
        stop.phase = FINISHING
        _UNFINISHED_RUN = None  # Trainer.run wrote run_finished
        if launched_rank() == 0:
            print(f"run {status} at step {trainer.step}: {run_dir}", file=sys.stderr)
        return EXIT_OK
    except StopDuringSetup:
        stop.phase = FINISHING
        if launched_rank() == 0:
            _record_setup_stop(run_dir, stop.reason)
        return EXIT_OK
    except (Exception, KeyboardInterrupt) as exc:  # every failure is reported in the event stream
        during_setup = stop.phase == SETUP
        stop.phase = FINISHING
        _record_failure(run_dir, exc, during_setup, world)
        return EXIT_INVALID if during_setup and is_input_error(exc) else EXIT_FAILED
    finally:
        if previous is not None:
            restore_handlers(previous)
        if world is not None:
            world.close()


def is_input_error(exc: BaseException) -> bool:
    """A set-up failure on what the preset names (a bad value, a model folder or data
    file that cannot be used, a reward that cannot load), not the engine or the machine."""
    from engine.model.loading import ModelLoadError

    if storage_error(exc) is not None or isinstance(exc, KeyboardInterrupt):
        return False
    return isinstance(exc, (ValueError, ModelLoadError, FileNotFoundError, ImportError))


def refused_at_start(preset, base_dir: Path, source) -> bool:
    """Print what keeps the preset from starting, as `validate` does (failures.startup_problems)."""
    problems = startup_problems(preset, base_dir)
    if problems:
        print(f"error: {source} is invalid:\n" + "\n".join(f"  - {p}" for p in problems), file=sys.stderr)
    return bool(problems)


def cmd_run(args) -> int:
    try:
        preset = load_preset(args.preset, args.set)
    except PresetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(preset.name)
    if launched_by_torchrun() and not args.run_dir:
        print("error: under torchrun give --run-dir (every process must write to the same folder)", file=sys.stderr)
        return EXIT_INVALID
    if launched_rank() == 0 and (run_dir / rundir.EVENTS_FILE).exists():
        print(f"error: {run_dir} already holds a run; choose a new --run-dir, or continue it with `rl-engine resume "
              f"{run_dir}` (from its last checkpoint, or from step 0 when it has none)", file=sys.stderr)
        return EXIT_INVALID
    preset_dir = Path(args.preset).resolve().parent
    # The run's preset.yaml must still find its prompt file, custom rewards and reward
    # models when the run is resumed or reopened from elsewhere.
    preset = absolute_preset_paths(preset, preset_dir)
    if refused_at_start(preset, preset_dir, args.preset):
        return EXIT_INVALID
    if args.nproc_per_node and not launched_by_torchrun():
        return launch_from_cli(args, preset, run_dir, ["run", args.preset, "--run-dir", str(run_dir)])
    problem = open_run_folder(run_dir, " or choose another --run-dir")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_INVALID
    return train(preset, run_dir, None, preset_dir, args.quiet)


def cmd_resume(args) -> int:
    """`rl-engine resume RUN_DIR`: continue the run in its folder from its newest complete
    checkpoint; a run with none (killed, stopped or failed before its first checkpoint:
    a long set-up is easily interrupted) starts again from step 0 in the same folder, from
    the folder's preset.yaml (its events appended: run_resumed with `restarted`)."""
    run_dir = Path(args.run_dir)
    checkpoints = rundir.complete_checkpoints(run_dir)
    restart = not checkpoints
    if restart:
        if not can_restart(run_dir):  # not a run folder: nothing to start again from
            print(f"error: {no_checkpoint_message(run_dir)}", file=sys.stderr)
            return EXIT_INVALID
        if not launched_by_torchrun():  # said once, by the launcher of a run in several processes
            print(restart_message(run_dir), file=sys.stderr)
    try:
        preset = load_preset(run_dir / rundir.PRESET_FILE, args.set)
    except PresetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if refused_at_start(preset, run_dir, run_dir / rundir.PRESET_FILE):  # --set may have changed it
        return EXIT_INVALID
    launching = bool(args.nproc_per_node) and not launched_by_torchrun()
    size = args.nproc_per_node if launching else int(os.environ.get("WORLD_SIZE", "1"))
    problem = checkpoint_world_size_problem(checkpoints[-1], size or 1) if checkpoints else None
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_INVALID
    if launching:
        return launch_from_cli(args, preset, run_dir, ["resume", str(run_dir)])
    problem = open_run_folder(run_dir, f", then rl-engine resume {run_dir}")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_INVALID
    return train(preset, run_dir, None if restart else checkpoints[-1], run_dir, args.quiet, restart=restart)


def cmd_fork(args) -> int:
    """`rl-engine fork`: check the fork (engine/commands/fork.py's plan_fork), write its
    folder and preset, then train from the parent's checkpoint as resume does, or launch
    N processes that do. Exit 0 or 1 as `run`; 2 for bad input (no such checkpoint, a
    field the checkpoint fixes)."""
    from engine.commands.fork import ForkError, plan_fork
    from engine.foundation.io import save_preset

    try:
        preset, checkpoint, run_dir, parent = plan_fork(args)
    except (ForkError, PresetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    retry = " or choose another --run-dir"
    if launched_rank() == 0:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            save_preset(preset, run_dir / rundir.PRESET_FILE)  # what the run is, even if set-up is stopped
        except OSError as exc:  # one line naming the folder, as `run` says it
            print(f"error: {storage_message(storage_error(exc) or exc, run_dir, retry)}", file=sys.stderr)
            return EXIT_INVALID
    if args.nproc_per_node and not launched_by_torchrun():
        engine_args = ["fork", str(Path(args.parent).resolve()), "--checkpoint", checkpoint.name,
                       "--run-dir", str(run_dir)]
        return launch_from_cli(args, preset, run_dir, engine_args)
    problem = open_run_folder(run_dir, retry)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_INVALID
    return train(preset, run_dir, checkpoint, run_dir, args.quiet, fork_of=parent)


def watch_process(stop: StopFlag) -> dict:
    """Make `stop` the process's stop flag and install its handlers (engine/cli.py's main,
    first thing for run, resume and fork). Returns the previous handlers, for `unwatch`."""
    global _ACTIVE_STOP, _UNFINISHED_RUN
    previous = install_stop_handlers(stop)
    _ACTIVE_STOP, _UNFINISHED_RUN = stop, None
    return previous


def unwatch(stop: StopFlag, previous: dict) -> None:
    global _ACTIVE_STOP, _UNFINISHED_RUN
    stop.phase = FINISHING
    _ACTIVE_STOP = _UNFINISHED_RUN = None
    restore_handlers(previous)


def end_interrupted(stop: StopFlag, exc: BaseException) -> int:
    """A second signal that landed outside train()'s own handling (while the preset was
    read, or while the first stop was being recorded): the final event, the exit status."""
    stop.phase = FINISHING
    if _UNFINISHED_RUN is not None:
        if isinstance(exc, StopDuringSetup):
            _record_setup_stop(_UNFINISHED_RUN, stop.reason)
        else:
            _record_failure(_UNFINISHED_RUN, exc, during_setup=True)
    else:
        print("aborted before the run started", file=sys.stderr)
    return EXIT_OK if isinstance(exc, StopDuringSetup) else EXIT_FAILED
