"""What a failed run reports: a readable message, and the file and line of a fault in
the user's own code (a custom reward function), for `run_failed` and the CLI."""

from __future__ import annotations

import errno
import re
import sys
import traceback
from pathlib import Path

from engine.run import rundir
from engine.foundation.errors import PresetError

_ENGINE_ROOT = Path(__file__).resolve().parents[1]


def user_code_location(exc: BaseException) -> tuple[str, int] | None:
    """File and line of the innermost traceback frame outside the engine, the standard
    library and installed packages: where a fault in the user's own code (a custom
    reward function) happened. None when the fault is not in user code."""
    skip = {_ENGINE_ROOT, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    found = None
    chain = []
    while exc is not None and exc not in chain:  # the engine re-raises user errors with context
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__

    def user_file(filename: str | None) -> Path | None:
        if not filename or filename.startswith("<"):  # <frozen importlib...>, <string>
            return None
        path = Path(filename).resolve()
        # A compiled module's frames name their source relative to nothing ("pyarrow/
        # error.pxi"): resolved against the current folder, a file that does not exist.
        if not path.is_file() or "site-packages" in path.parts or any(root in path.parents for root in skip):
            return None
        return path

    for error in chain:
        for frame, line in traceback.walk_tb(error.__traceback__):
            path = user_file(frame.f_code.co_filename)
            if path is not None:
                found = (str(path), line)
        if isinstance(error, SyntaxError) and error.lineno:
            # A syntax error in the user's file has no frame there: it was never run.
            path = user_file(error.filename)
            if path is not None:
                found = (str(path), error.lineno)
    return found


def failure_location(exc: BaseException) -> tuple[str, int] | None:
    """Where a failure points in the user's code: a ``user_location`` the engine set
    (a reward function that timed out, or returned bad values: its line), else
    user_code_location."""
    seen, error = [], exc
    while error is not None and error not in seen:
        seen.append(error)
        location = getattr(error, "user_location", None)
        if location:
            return str(location[0]), int(location[1])
        error = error.__cause__ or error.__context__
    return user_code_location(exc)


def failure_message(exc: BaseException, during_setup: bool = False) -> str:
    if isinstance(exc, KeyboardInterrupt):
        if during_setup:
            return "aborted by a second Ctrl-C during set-up; nothing was trained"
        return "aborted by a second Ctrl-C before the step finished; the last checkpoint is intact"
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, (ValueError, PresetError, RuntimeError, OSError)) and not isinstance(exc, NotImplementedError):
        return text
    return f"{type(exc).__name__}: {text}"


# A write the disk refused: why, in words, and what the user can do about it.
_STORAGE_REASONS = {
    errno.ENOSPC: ("no space is left on its device", "free some space there"),
    errno.EDQUOT: ("the disk quota is used up", "free some space there"),
    errno.EROFS: ("its file system is read-only", "use a folder you can write to"),
    errno.EACCES: ("permission denied", "use a folder you can write to (or fix its permissions)"),
    errno.EPERM: ("permission denied", "use a folder you can write to (or fix its permissions)"),
    errno.ENOTDIR: ("a part of its path is a file, not a folder", "use another folder"),
}


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def storage_error(exc: BaseException) -> OSError | None:
    """The refused write in `exc`'s chain: an OSError of a full, read-only or forbidden
    disk, or safetensors' Rust error for a full disk (not an OSError: "... (os error 28)")."""
    for error in _chain(exc):
        if isinstance(error, OSError) and error.errno in _STORAGE_REASONS:
            return error
        if re.search(r"\(os error 28\)", str(error)):
            return OSError(errno.ENOSPC, "No space left on device")
    return None


def storage_message(error: OSError, run_dir: Path, retry: str) -> str:
    """One line for a write the disk refused: the run folder, the file being written (as
    a path inside the folder where it is one), why, and what to do; `retry` says how to
    go on afterwards ("or choose another --run-dir", "then rl-engine resume DIR").

    >>> storage_message(OSError(28, "No space left on device", "/r/checkpoints/step_4.tmp/a"), Path("/r"), "")
    'cannot write the run folder /r (checkpoints/step_4.tmp/a): no space is left on its device; free some space there'
    """
    reason, fix = _STORAGE_REASONS.get(error.errno, (error.strerror or str(error), "check the folder"))
    what = ""
    if error.filename:
        name = Path(str(error.filename))
        try:
            inside = name.resolve().relative_to(Path(run_dir).resolve())
            what = f" ({inside})" if inside.parts else ""  # the folder itself: named already
        except ValueError:
            what = f" ({name})"
    return f"cannot write the run folder {run_dir}{what}: {reason}; {fix}{retry}"


def startup_problems(preset, base_dir: Path | None) -> list[str]:
    """What `rl-engine validate` refuses in a valid preset without loading anything: a
    custom reward's, loss's or estimator's file or function that is missing, a reward-model
    folder that is not one, a `training.report_to` whose package is not installed. `run` and `resume`
    refuse them before the run folder is made, with validate's exit status 2, rather
    than failing the run after the model has loaded. Lines like "rewards.0.name: ..."."""
    from engine.run.reporting import missing_reporter
    from engine.rewards import reward_source_problems
    from engine.rl.user_files import source_problems

    problems = [f"{field}: {message}" for field, message in reward_source_problems(preset.rewards, base_dir)]
    # A loss_type or advantage_estimator naming FILE.py:FUNCTION whose file or function is missing.
    problems += [f"{field}: {message}" for field, message in source_problems(preset.algorithm, base_dir)]
    missing = missing_reporter(preset.training.report_to)
    if missing:
        problems.append(f"training.report_to: {missing}")
    return problems


def _no_checkpoint_reason(run_dir: Path) -> str:
    """What the events of a run folder without a complete checkpoint say happened (the
    folder holds a run): "the engine was killed (it wrote no final event) after step 3,
    before its first checkpoint", without a final period."""
    events = rundir.read_events(run_dir)
    lifecycle = [e for e in events if e.get("type") in ("run_started", "run_resumed", "run_finished", "run_failed")]
    last = lifecycle[-1] if lifecycle else {}
    steps = [e["step"] for e in events if e.get("type") == "metrics" and isinstance(e.get("step"), int)]
    kind = last.get("type")
    if kind == "run_failed":
        why = f"the run failed before its first checkpoint: {last.get('message', 'no message')}"
    elif kind == "run_finished" and last.get("during_setup"):
        why = f"the run was stopped during set-up ({last.get('reason', 'stop')}), before its first step"
    elif kind == "run_finished":
        why = f"the run ended ({last.get('status')}) at step {last.get('step', 0)} without saving a checkpoint"
    elif kind in ("run_started", "run_resumed"):
        reached = f"after step {max(steps)}" if steps else "before its first step"
        why = f"the engine was killed (it wrote no final event) {reached}, before its first checkpoint"
    else:
        why = "the engine was killed (it wrote no event) while it was setting up"
    partial = sorted(p.name for p in (run_dir / rundir.CHECKPOINTS_DIR).glob("step_*.tmp"))
    if partial:
        why = f"{_sentence_end(why)}; {partial[-1]} is a checkpoint it did not finish writing (ignored)"
    return _sentence_end(why)


def _sentence_end(text: str) -> str:
    """`text` without the period (or spaces) it may end with: a message quoted inside a
    sentence that goes on ("...: give a model folder.. Start it again" would be said twice).

    >>> _sentence_end("give a model folder. ")
    'give a model folder'
    """
    return text.rstrip().rstrip(".").rstrip()


def can_restart(run_dir: Path) -> bool:
    """Whether `rl-engine resume RUN_DIR` starts the run again from step 0 in its folder:
    the folder has the run's preset.yaml but no complete checkpoint to continue from (the
    engine was killed, stopped or failed before its first one)."""
    run_dir = Path(run_dir)
    return (run_dir / rundir.PRESET_FILE).is_file() and not rundir.complete_checkpoints(run_dir)


def restart_message(run_dir: Path) -> str:
    """What `rl-engine resume` says when it starts a run without a checkpoint again.

    e.g. "runs/x has no complete checkpoint: the run was stopped during set-up (SIGTERM),
    before its first step; starting it again from step 0 in the same folder"
    """
    return (f"{run_dir} has no complete checkpoint: {_no_checkpoint_reason(Path(run_dir))}; starting it again "
            "from step 0 in the same folder")


def no_checkpoint_message(run_dir: Path) -> str:
    """Why RUN_DIR has no checkpoint to resume from (or, as the callers replace those
    words, to export or fork from), read from the folder, and how to start again: a
    folder with the run's preset.yaml is started again by `rl-engine resume` (from step 0,
    in the same folder); one without needs `rl-engine run PRESET --run-dir NEW_FOLDER`.

    e.g. "runs/x has no complete checkpoint to resume from: the run was stopped during
    set-up (SIGTERM), before its first step. Start it again from step 0: rl-engine resume runs/x"
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return f"{run_dir} is not a folder"
    if not (run_dir / rundir.EVENTS_FILE).exists() and not (run_dir / rundir.PRESET_FILE).exists():
        return f"{run_dir} holds no run (no {rundir.EVENTS_FILE} or {rundir.PRESET_FILE})"
    why = _no_checkpoint_reason(run_dir)
    if (run_dir / rundir.PRESET_FILE).is_file():
        again = f"Start it again from step 0: rl-engine resume {run_dir}"
    else:
        again = "Start it again: rl-engine run PRESET --run-dir NEW_FOLDER"
    return f"{run_dir} has no complete checkpoint to resume from: {why}. {again}"


class NoSuchCheckpoint(ValueError):
    """`named_checkpoint` found none: the message says why (the available ones, or why
    the run has none)."""


def checkpoint_step(name: str) -> int | None:
    """`step_50`, `step_000050`, `50` or `checkpoints/step_000050` -> 50; None otherwise.

    >>> [checkpoint_step(n) for n in ("step_50", "step_000050", "50", "checkpoints/step_000050/", "best")]
    [50, 50, 50, 50, None]
    """
    match = re.fullmatch(r"(?:step_)?(\d+)", Path(str(name).strip()).name)
    return int(match.group(1)) if match else None


def named_checkpoint(run_dir: Path, name: str | None, purpose: str) -> Path:
    """The complete checkpoint `name` names (step_N, step_000050 or N), or the newest one
    when None; NoSuchCheckpoint listing the available ones, or saying why the run has
    none ("... no complete checkpoint to {purpose}: ..."), when there is none such."""
    run_dir = Path(run_dir)
    available = rundir.complete_checkpoints(run_dir)
    if not available:
        why = no_checkpoint_message(run_dir)
        if why.startswith(f"{run_dir} has no complete checkpoint"):
            why = why.replace("to resume from", purpose, 1)
        raise NoSuchCheckpoint(why)
    if name is None:
        return available[-1]
    step = checkpoint_step(name)
    found = [p for p in available if step is not None and checkpoint_step(p.name) == step]
    if not found:
        names = ", ".join(p.name for p in available)
        raise NoSuchCheckpoint(f"--checkpoint {name}: {run_dir} has no complete checkpoint {name!r}; available: {names}")
    return found[0]
