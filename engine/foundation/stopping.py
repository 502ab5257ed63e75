"""Stopping a run: the flag that the signal handlers and the stdin reader set.

A run has phases, and a stop means something different in each:

    starting   the CLI reads the preset (milliseconds): a stop is recorded, and acted
               on as soon as set-up begins.
    setup      loading the model, building the data, importing reward files. Nothing
               is trained yet, so there is nothing to save: a stop raises
               StopDuringSetup in the main thread at once (the CLI's signal handler
               raises it), and the CLI writes run_finished (stopped) and exits 0.
    training   from Trainer.run on: a stop is cooperative. The step in progress
               finishes, a checkpoint is saved, run_finished (stopped) is written.
    finishing  the final event is being written: further stops are ignored.

A second Ctrl-C aborts in every phase but finishing (the CLI's handler raises
KeyboardInterrupt; the run ends with run_failed). Every SIGINT is counted
(:func:`sigint_count`): a KeyboardInterrupt with no Ctrl-C behind it (a reward function
that raises it) is that code's failure, not the user's abort.

This module imports neither torch nor Qt: the CLI installs its handlers with it before
anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass

STARTING, SETUP, TRAINING, FINISHING = "starting", "setup", "training", "finishing"

# SIGINTs that reached a StopFlag in this process. Only ever grows, so a caller compares
# the count before and after a call instead of resetting it (tests run many flags).
_sigints = 0


def sigint_count() -> int:
    """How many SIGINTs (Ctrl-C) the engine's handlers have received in this process."""
    return _sigints


def ctrl_c_since(count: int) -> bool:
    """Whether a KeyboardInterrupt raised now in the main thread may be the user's
    Ctrl-C: a SIGINT arrived since :func:`sigint_count` was ``count``, or SIGINT is
    still Python's own handler, which raises KeyboardInterrupt without counting it
    (the engine used as a library, not through the CLI).

    e.g. under the CLI, a reward that raises KeyboardInterrupt itself: ctrl_c_since(n)
    is False (nothing arrived), so the run reports the reward, not "aborted".
    """
    return _sigints != count or signal.getsignal(signal.SIGINT) is signal.default_int_handler


def own_exit(exc: SystemExit | KeyboardInterrupt) -> str:
    """A sys.exit() or a KeyboardInterrupt that user code raised itself, in words, for
    the message that names that code.

    e.g. own_exit(SystemExit(3)) -> "called sys.exit(3)"
    """
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    detail = f" ({exc})" if str(exc) else ""
    return f"raised KeyboardInterrupt{detail} though no Ctrl-C was pressed"


def own_exits_as(call, fault):
    """``call()`` in this thread, a ``sys.exit()`` or a KeyboardInterrupt it raised itself
    (no Ctrl-C arrived since the call began) raised as ``fault(exc)``: user code's failure,
    not the engine exiting with status 0 and no final event, nor the user's abort. A real
    Ctrl-C that lands inside the call passes through."""
    sigints = _sigints
    try:
        return call()
    except (SystemExit, KeyboardInterrupt) as exc:
        if isinstance(exc, KeyboardInterrupt) and ctrl_c_since(sigints):
            raise
        raise fault(exc) from exc


@contextlib.contextmanager
def ctrl_c_counted():
    """Ctrl-C raises KeyboardInterrupt as Python's own handler does, and is counted
    (:func:`sigint_count`), for a command without the run's stop handlers (``validate``):
    so user code's own KeyboardInterrupt is told from the user's Ctrl-C there too. Not
    in the main thread: nothing is changed."""
    def on_sigint(_signum, _frame):
        global _sigints
        _sigints += 1
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class StopDuringSetup(BaseException):
    """A stop (SIGTERM, SIGINT, a `stop` line) arrived while the engine was setting up.

    A BaseException, like KeyboardInterrupt, so that library code that catches
    `Exception` (optional imports, model loading fallbacks) does not swallow it."""


@dataclass
class StopFlag:
    """Set from a signal handler or the stdin reader; checked between steps (and, in the
    setup phase, at set-up milestones)."""

    requested: bool = False
    reason: str = ""
    phase: str = TRAINING

    def request(self, reason: str) -> None:
        global _sigints
        if reason == signal.SIGINT.name:  # the CLI's handler passes the signal's name
            _sigints += 1
        if not self.requested:
            self.requested, self.reason = True, reason

    def check_setup(self) -> None:
        """A set-up milestone: StopDuringSetup if a stop was requested during set-up
        (its exception may have been swallowed by library code, or it came from the
        stdin reader, which cannot raise in the main thread)."""
        if self.phase == SETUP and self.requested:
            raise StopDuringSetup(self.reason)

    def enter_training(self) -> None:
        """Set-up is over (Trainer.run calls this before it writes anything): from now
        on a stop is cooperative."""
        self.check_setup()
        self.phase = TRAINING
