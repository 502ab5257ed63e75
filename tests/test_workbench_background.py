"""workbench.setup.background: no garbage collection on a worker thread (it would free Qt
objects there and hang the window), collection back on once the jobs are done, and no
callback to an owner deleted meanwhile."""

import gc
import threading
from concurrent.futures import ThreadPoolExecutor

from PySide6.QtWidgets import QWidget

from workbench.setup import background


def test_collection_is_off_while_a_job_runs_and_back_on_after(qtbot):
    widget = QWidget()
    qtbot.addWidget(widget)
    release = threading.Event()
    seen = {}

    def job():
        release.wait(10)
        seen["gc_enabled_in_worker"] = gc.isenabled()
        return 42

    results = []
    assert gc.isenabled()
    with ThreadPoolExecutor(max_workers=1) as pool:
        background.submit(pool, job, widget, lambda f: results.append(f.result()))
        background.submit(pool, lambda: 7, widget, lambda f: results.append(f.result()))
        assert not gc.isenabled() and background.pending_jobs() == 2
        release.set()
        qtbot.waitUntil(lambda: len(results) == 2, timeout=10_000)
    assert results == [42, 7]
    assert seen["gc_enabled_in_worker"] is False
    assert gc.isenabled() and background.pending_jobs() == 0


def test_a_deleted_owner_gets_no_callback_and_collection_comes_back(qtbot):
    widget = QWidget()
    release = threading.Event()
    called = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        background.submit(pool, lambda: release.wait(10), widget, called.append)
        widget.deleteLater()
        qtbot.waitUntil(lambda: not background.shiboken6.isValid(widget), timeout=5_000)
        release.set()
        qtbot.waitUntil(lambda: background.pending_jobs() == 0, timeout=10_000)
    assert called == [] and gc.isenabled()
