"""A tool's call in a thread of its own, under ``data.tool_timeout``, and what is done
with one that does not return in time.

Python cannot kill a thread. A tool that loops in Python (``while True: pass``) is
stopped by raising :class:`ToolStopped` inside its thread
(``PyThreadState_SetAsyncExc``, raised again while it unwinds, in case the tool
swallows the first); a BaseException, so a tool's ``except Exception`` does not catch
it. A thread blocked outside Python (a wait, a C library call) cannot be stopped that
way: the exception stays pending and stops it when it next runs Python. Such a thread
is left running, counted by the environment's :class:`ToolThreads`, warned about once
per tool (a log line, and an alarm the run writes), and past :data:`MAX_UNSTOPPED` live
ones the episode's call raises (engine/episodes/environment.py), so a tool that keeps
hanging costs a bounded number of threads, not a slower step each time.

Torch-free; environment.py calls it.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["ToolStopped", "ToolThreads", "Outcome", "MAX_UNSTOPPED", "GRACE", "run_in_thread", "stop_thread",
           "KIND"]

log = logging.getLogger(__name__)

# Tool threads that ran past their limit and could not be stopped, alive at once, that a
# run tolerates: each holds a thread (and, busy in C, a core); one more ends the run.
MAX_UNSTOPPED = 4
# Seconds a stopped thread is given to unwind. A Python loop sees the exception within
# the interpreter's switch interval (5 ms); a blocked thread never does.
GRACE = 0.3
KIND = "tool_not_stopped"  # the alarm's kind (docs/episodes.md)


class ToolStopped(BaseException):
    """Raised inside a tool's thread that ran past its time limit, to end it."""


@dataclass
class Outcome:
    """A call in a thread: ``finished`` (it returned or raised in time), ``result`` (what
    the work returned, or the exception it raised), ``stopped`` (it ran late and was
    ended), ``thread`` (the worker, still alive when neither finished nor stopped)."""

    finished: bool
    result: Any
    stopped: bool
    thread: threading.Thread


def _raise_in(thread: threading.Thread) -> bool:
    """ToolStopped set to be raised in ``thread``; False when it is gone already."""
    count = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(ToolStopped))
    return count == 1


def stop_thread(thread: threading.Thread, grace: float = GRACE) -> bool:
    """Whether ``thread`` ended once ToolStopped was raised in it (again every 20 ms,
    for ``grace`` seconds at most). True for a loop in Python; False for a thread
    blocked outside Python (its exception stays pending)."""
    deadline = time.monotonic() + grace
    while thread.is_alive() and _raise_in(thread):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        thread.join(min(0.02, left))
    return not thread.is_alive()


def run_in_thread(work: Callable[[], Any], timeout: float, name: str, grace: float = GRACE) -> Outcome:
    """``work()`` in a daemon thread, waited on for ``timeout`` seconds; one that runs
    late is stopped (:func:`stop_thread`). The result is what it returned or raised
    (``sys.exit()`` in a tool is the tool's fault, not the engine's exit: caught too)."""
    outcome: dict[str, Any] = {}

    def run():
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, ToolStopped: the tool's
            outcome["value"] = exc

    worker = threading.Thread(target=run, name=f"tool {name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if not worker.is_alive():
        return Outcome(True, outcome.get("value"), False, worker)
    return Outcome(False, None, stop_thread(worker, grace), worker)


class ToolThreads:
    """The tool threads of one environment (one run's) that ran past their time limit
    and could not be stopped: each kept with its tool's name and where it was stuck."""

    def __init__(self):
        self._left: list[tuple[str, threading.Thread, tuple[str, int] | None]] = []
        self._warned: set[str] = set()
        self._warnings: list[dict] = []
        self._lock = threading.Lock()

    def left(self, tool: str, label: str, thread: threading.Thread, where: tuple[str, int] | None,
             timeout: float) -> None:
        """A thread of ``tool`` (``label``: Class.method) that could not be stopped; the
        first of each tool is warned about."""
        with self._lock:
            self._left.append((tool, thread, where))
            if tool in self._warned:
                return
            self._warned.add(tool)
            at = f" (at {where[0]}, line {where[1]})" if where else ""
            saw = (f"the tool {label} ran past data.tool_timeout ({timeout:g} s) and could not be stopped{at}: it is "
                   "blocked outside Python (a wait, a C library call), so its thread keeps running")
            log.warning("data.environment: %s", saw)
            self._warnings.append({"kind": KIND, "tool": tool, "title": "A tool could not be stopped", "saw": saw,
                                   "why": (f"Each such call holds a thread; after {MAX_UNSTOPPED} at once the run "
                                           "stops rather than slow down."),
                                   "metric": "tools/failure_frequency",
                                   "try": [{"field": "data.environment", "advice": f"make {label} return within "
                                                                                  "data.tool_timeout (a timeout of "
                                                                                  "its own on what it waits for)"},
                                           {"field": "data.tool_timeout", "advice": "more time, if the tool is "
                                                                                    "slow rather than stuck"}],
                                   "evidence": {}})

    def unstopped(self) -> list[tuple[str, tuple[str, int] | None]]:
        """(tool, where it was stuck) of each such thread still alive."""
        with self._lock:
            self._left = [entry for entry in self._left if entry[1].is_alive()]
            return [(tool, where) for tool, _thread, where in self._left]

    def take_warnings(self) -> list[dict]:
        """The warnings not taken yet (each tool's first unstoppable call): an alarm's
        fields but its step (engine/algorithms/episodes.py adds it)."""
        with self._lock:
            taken, self._warnings = self._warnings, []
            return taken
