"""A custom reward's call under its time limit (`options: {reward_timeout: SECONDS}`):
in a worker thread that is abandoned when it does not return in time (RewardTimeout,
naming the line it was stuck at); with no limit, in the engine's own thread. A
`sys.exit()` or a KeyboardInterrupt the function raised itself is its failure, not the
engine's exit or the user's Ctrl-C. engine/rewards/custom.py calls it.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from engine.rewards.base import RewardTimeout
from engine.foundation.stopping import own_exit, own_exits_as

TIMEOUT_OPTION = "reward_timeout"


def stuck_at(thread: threading.Thread, path: Path | None) -> tuple[str, int] | None:
    """(file, line) of the innermost frame of ``thread`` in ``path`` (the user's file: a
    reward's, an environment's), None when it is not there (or ``path`` is None)."""
    if path is None:
        return None
    frame = sys._current_frames().get(thread.ident)  # noqa: SLF001 - the one way to see where a thread is
    while frame is not None:
        if frame.f_code.co_filename == str(path):
            return str(path), frame.f_lineno
        frame = frame.f_back
    return None


def _as_failure(exc: SystemExit | KeyboardInterrupt) -> RuntimeError:
    """sys.exit(), or a KeyboardInterrupt the function raised itself (no Ctrl-C behind
    it), as the function's failure: reported naming the reward, not as the engine
    exiting or the user aborting the run. It keeps ``exc``'s traceback, so the message
    can give the line in the user's file."""
    error = RuntimeError(f"{own_exit(exc)}; a reward function must return its values")
    error.__cause__, error.__traceback__ = exc, exc.__traceback__
    return error


def call_with_timeout(fn, args: tuple, kwargs: dict, timeout: float | None, path: Path, function: str):
    """``fn(*args, **kwargs)`` in a worker thread, waiting at most ``timeout`` seconds
    (None: no limit). RewardTimeout when it does not return in time: the thread is
    abandoned (a daemon: it does not keep the process alive). An exception in ``fn``
    is raised here with its traceback (the user's frames included)."""
    if timeout is None:
        # No limit: run in the engine's own thread, so a function whose state is tied to
        # one thread (a sqlite connection opened at import, say) keeps working.
        return own_exits_as(lambda: fn(*args, **kwargs), _as_failure)
    outcome: dict[str, Any] = {}

    def call():
        try:
            outcome["value"] = fn(*args, **kwargs)
        except Exception as exc:
            outcome["error"] = exc
        except (SystemExit, KeyboardInterrupt) as exc:
            # sys.exit() would end the engine unreported; signals reach only the main
            # thread, so a KeyboardInterrupt here is the function's own, not a Ctrl-C.
            outcome["error"] = _as_failure(exc)
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=call, name=f"reward {function}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        at = stuck_at(worker, path)
        where = f" (it was at {at[0]}, line {at[1]})" if at else ""
        error = RewardTimeout(
            f"did not return within {timeout:g} s{where}; make it faster, or give it more time with "
            f"options: {{{TIMEOUT_OPTION}: SECONDS}} (null: no limit)")
        error.user_location = at
        raise error
    if "error" in outcome:
        error = outcome.pop("error")
        try:
            raise error
        finally:
            del error
    return outcome["value"]
