"""The runs list's reads of many runs at once (the window's start, a new runs folder) on a
worker thread, so the window paints and answers meanwhile.

A run read for the first time costs its events' head and tail (~3-10 ms: a second for a
few hundred runs); a run already read costs three stats. `RunsView.refresh` hands the
runs its index has not read to `RunsReader.start` once there are `BACKGROUND_FROM` or
more, and scans on the window's thread otherwise (a scan of a read folder: ~10 ms for 300
runs). The worker runs `summaries.read_runs`, which touches no index; the result goes
into the index on the window's thread, through workbench/setup/background.py (no garbage
collection on the worker, nothing delivered to a deleted view). A read of a folder the
view has left since is stopped and its result dropped.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Callable

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QLabel

from workbench.runs.summaries import RunIndex, read_runs
from workbench.setup.background import submit as submit_in_background

BACKGROUND_FROM = 8  # runs to read from which they are read on the worker (8: ~25-80 ms on the window's thread)


class RunsReader:
    """One read at a time, for `owner` (a widget): `start(index, folders)` reads `folders`
    on the worker and calls `on_read(index)` on the window's thread once `index` holds them,
    unless `cancel()` or another `start` came first. `label` says "Reading N runs…" meanwhile."""

    def __init__(self, owner: QObject, on_read: Callable[[RunIndex], None]):
        self._owner = owner
        self._on_read = on_read
        self._stop: threading.Event | None = None
        self.index: RunIndex | None = None  # the index being filled, None when no read is under way
        self.count = 0  # the runs being read
        self.label = QLabel()
        self.label.setObjectName("runs-reading")
        self.label.setStyleSheet("color:#5f6368")
        self.label.hide()
        # A read for a closed window stops (the process may be leaving); the label is gone by then.
        owner.destroyed.connect(lambda *_: self._stop is not None and self._stop.set())

    @property
    def reading(self) -> bool:
        return self.index is not None

    def start(self, index: RunIndex, folders: list) -> None:
        self.cancel()
        stop = threading.Event()
        self._stop, self.index, self.count = stop, index, len(folders)
        self.label.setText(f"Reading {len(folders)} runs…")
        self.label.show()
        # From the event loop: the worker's Python holds the GIL half the time, and the window
        # being built (the window's start) is drawn first.
        QTimer.singleShot(0, self._owner, partial(self._submit, index, list(folders), stop))

    def _submit(self, index: RunIndex, folders: list, stop: threading.Event) -> None:
        if stop.is_set():
            return
        # A thread for this read, which ends with it (a cancelled read's ends at its next run,
        # beside the next read's). The job holds the folders and the stop flag: no Qt object, no index.
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runs-read")
        submit_in_background(executor, partial(read_runs, folders, stop.is_set), self._owner,
                             partial(self._done, index, stop))
        executor.shutdown(wait=False)

    def cancel(self) -> None:
        """Stop the read under way (at its next run); its result is dropped."""
        if self._stop is not None:
            self._stop.set()
        self._stop, self.index, self.count = None, None, 0
        self.label.hide()

    def _done(self, index: RunIndex, stop: threading.Event, future: Future) -> None:
        if stop.is_set() or index is not self.index:
            return  # cancelled, or another folder's read since
        self._stop, self.index, self.count = None, None, 0
        self.label.hide()
        try:
            index.add(future.result())
        except Exception:  # read_runs leaves out what it cannot read: a bug. The scan on the window's thread
            pass           # reads those runs again, and fails there as it always did.
        self._on_read(index)
