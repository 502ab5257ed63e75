"""Work on a worker thread without Python's cyclic garbage collector ever running there.

PySide6 wrappers caught in reference cycles (a closed window, a removed row) are freed
by the garbage collector, in whichever thread happens to trigger a collection. Freed on
a worker thread, a QObject's destructor waits for a Qt lock that the main thread holds
while it waits for the GIL, and the window hangs for good (seen in the test suite with
the set-up panel's pre-launch checks). So while a background job runs, automatic
collection is off; the main thread turns it back on when the last job is done. Jobs are
short (the pre-launch checks: milliseconds to seconds), and memory freed by reference
counting is unaffected.

The owner of the callback may be deleted while its job runs: completion is relayed by
an object that lives as long as the process, so collection is always turned back on,
and the callback is dropped when its owner is gone.
"""

from __future__ import annotations

import gc
import weakref
from concurrent.futures import Executor, Future
from typing import Callable

import shiboken6
from PySide6.QtCore import QObject, Qt, Signal

_pending: dict[int, tuple[weakref.ref, Callable[[Future], None]]] = {}  # job id -> (owner, on_done)
_next_id = 0
_was_enabled = True
_relay: "_Relay | None" = None


class _Relay(QObject):
    finished = Signal(int, object)  # (job id, future), emitted from the worker

    def __init__(self):
        super().__init__()
        self.finished.connect(self._deliver, Qt.QueuedConnection)

    def _deliver(self, job_id: int, future: Future) -> None:
        owner_ref, on_done = _pending.pop(job_id)
        if not _pending and _was_enabled:
            gc.enable()
        owner = owner_ref()
        if owner is not None and shiboken6.isValid(owner):
            on_done(future)


def submit(executor: Executor, job: Callable[[], object], owner: QObject,
           on_done: Callable[[Future], None]) -> Future:
    """Run `job` on `executor`; call `on_done(future)` on the main thread when it ends,
    unless `owner` has been deleted by then. Call from the main thread.

    The worker holds no reference to `owner` or `on_done` (they stay in a main-thread
    table): the last reference to a Qt object must never be dropped on the worker."""
    global _next_id, _was_enabled, _relay
    if _relay is None:
        _relay = _Relay()
    if not _pending:
        _was_enabled = gc.isenabled()
        gc.disable()
    _next_id += 1
    job_id, relay = _next_id, _relay
    _pending[job_id] = (weakref.ref(owner), on_done)
    future = executor.submit(job)
    future.add_done_callback(lambda f: relay.finished.emit(job_id, f))
    return future


def pending_jobs() -> int:
    """Background jobs submitted and not yet delivered (for tests)."""
    return len(_pending)
