"""The runs folder's first read off the window's thread (workbench/runs/runs_reader.py):
the window paints while a slow read goes on, the Runs list and the start page's recent
runs say "Reading N runs…" and fill when it ends; a folder switched during a read shows
only the new folder's runs; a run selected meanwhile stays selected; RunIndex's parts
(read_runs, unread, add) without Qt. The read is made slow deterministically: summarize_run
waits for a gate the test opens, and records the thread it ran on."""

from __future__ import annotations

import threading

from PySide6.QtCore import QEvent, QObject

from test_runs_list import small_run, with_accuracy
from workbench import app
from workbench.runs import summaries
from workbench.runs.runs_reader import BACKGROUND_FROM
from workbench.runs.runs_view import RunsView
from workbench.runs.summaries import RunIndex, read_runs
from workbench.setup import background
from workbench.start.page import RECENT_RUNS


class Gate:
    """summarize_run, held off the main thread until `open()`; the threads it ran on."""

    def __init__(self, monkeypatch):
        self.event = threading.Event()
        self.threads: set[str] = set()
        real = summaries.summarize_run

        def gated(run_dir, now=None):
            self.threads.add(threading.current_thread().name)
            if threading.current_thread() is not threading.main_thread():
                assert self.event.wait(20), "the gate was never opened"
            return real(run_dir, now)

        monkeypatch.setattr(summaries, "summarize_run", gated)

    def open(self) -> None:
        self.event.set()


class Paints(QObject):
    def __init__(self):
        super().__init__()
        self.count = 0

    def eventFilter(self, obj, event):
        if event.type() == QEvent.Paint:
            self.count += 1
        return False


def runs_in(folder, count: int, prefix: str = "run") -> list:
    return [small_run(folder, f"{prefix}-{i:02d}", steps=2) for i in range(count)]


def names(view: RunsView) -> set[str]:
    return {r.name for r in view.model.runs}


def test_the_window_paints_before_a_slow_read_ends_and_the_list_fills_after(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    count = BACKGROUND_FROM + 4
    runs_in(tmp_path / "runs", count)
    gate = Gate(monkeypatch)
    window = app.create_window(["--runs", str(tmp_path / "runs")])  # on its start page, as `rl-workbench`
    qtbot.addWidget(window)
    view, recent = window.runs_view, window.start.page.recent_runs
    paints = Paints()
    window.installEventFilter(paints)
    try:
        window.update()
        qtbot.waitUntil(lambda: paints.count > 0, timeout=5000)  # painted while the read waits at the gate
        assert view.reader.reading and view.model.rowCount() == 0
        assert view.reader.label.isVisibleTo(view) and view.reader.label.text() == f"Reading {count} runs…"
        assert [recent.item(i).text() for i in range(recent.count())] == [f"Reading {count} runs…"]
        view.refresh()  # the timer's, or the Runs tab's: waits for the read, reads nothing here
        assert view.model.rowCount() == 0
    finally:
        gate.open()
    qtbot.waitUntil(lambda: view.model.rowCount() == count, timeout=10000)
    assert not view.reader.reading and not view.reader.label.isVisibleTo(view)
    assert recent.count() == min(count, RECENT_RUNS) and recent.item(0).text().startswith("run-")
    assert threading.main_thread().name not in gate.threads  # every run was read on the worker
    qtbot.waitUntil(lambda: background.pending_jobs() == 0, timeout=5000)
    view.refresh()  # read: a scan on the window's thread (a few stats a run), nothing read again
    assert view.model.rowCount() == count and not view.reader.reading


def test_a_folder_switched_during_a_read_shows_only_the_new_folders_runs(qtbot, tmp_path, monkeypatch):
    runs_in(tmp_path / "a", BACKGROUND_FROM + 2, "a")
    b_runs = runs_in(tmp_path / "b", BACKGROUND_FROM, "b")
    gate = Gate(monkeypatch)
    view = RunsView(tmp_path / "a")
    qtbot.addWidget(view)
    assert view.reader.reading  # a's read waits at the gate
    qtbot.waitUntil(lambda: background.pending_jobs() == 1, timeout=5000)
    shown: set[str] = set()
    view.runs_changed.connect(lambda: shown.update(names(view)))
    view.set_folder(tmp_path / "b")  # the Change… button's
    assert view.reader.label.text() == f"Reading {BACKGROUND_FROM} runs…" and view.model.rowCount() == 0
    view.select_paths([b_runs[3]])  # selected while b is read (the window opened it, say)
    gate.open()
    qtbot.waitUntil(lambda: not view.reader.reading and background.pending_jobs() == 0, timeout=10000)
    assert names(view) == shown == {p.name for p in b_runs}  # a's read ended, and was dropped: never shown
    assert view.selected_paths() == [b_runs[3]]

    # A list already shown, and many new runs (copied in): read on the worker, the list and
    # its selection kept meanwhile, the new runs added after.
    view.select_paths([b_runs[1]])
    more = runs_in(tmp_path / "b", BACKGROUND_FROM, "c")
    view.refresh()
    assert view.reader.reading and names(view) == {p.name for p in b_runs}
    view.select_paths([b_runs[1], b_runs[2]])  # a click meanwhile
    qtbot.waitUntil(lambda: not view.reader.reading and background.pending_jobs() == 0, timeout=10000)
    assert names(view) == {p.name for p in b_runs + more}
    assert sorted(view.selected_paths()) == [b_runs[1], b_runs[2]]


def test_a_few_new_runs_are_read_on_the_windows_thread(qtbot, tmp_path, monkeypatch):
    """Below BACKGROUND_FROM a refresh is a scan there and then (what callers of refresh()
    that read the list straight after rely on)."""
    gate = Gate(monkeypatch)
    gate.open()
    view = RunsView(tmp_path)
    qtbot.addWidget(view)
    runs_in(tmp_path, BACKGROUND_FROM - 1)
    view.refresh()
    assert not view.reader.reading and view.model.rowCount() == BACKGROUND_FROM - 1
    assert gate.threads == {threading.main_thread().name}


def test_a_refresh_redraws_only_the_rows_that_changed(qtbot, tmp_path):
    """(Redrawing every row made the timer's refresh of 300 runs take 0.4 s.)"""
    runs = runs_in(tmp_path, 3)
    view = RunsView(tmp_path)
    qtbot.addWidget(view)
    changes = []
    view.model.dataChanged.connect(lambda top, bottom, *_: changes.append((top.row(), bottom.row())))
    view.refresh()
    assert changes == []
    with_accuracy(runs[1], 0.2, 0.7)
    view.refresh()
    row = [r.path for r in view.model.runs].index(runs[1])
    assert changes == [(row, row)] and view.model.data(view.model.index(row, 2)) == "0.20 → 0.70"


def test_read_runs_unread_and_add(tmp_path):
    runs = runs_in(tmp_path, 3)
    (tmp_path / "not-a-run").mkdir()
    index = RunIndex(tmp_path)
    assert sorted(index.unread()) == sorted(runs + [tmp_path / "not-a-run"])
    assert read_runs(index.unread(), stop=lambda: True) == {}  # stopped before the first
    found = read_runs(index.unread())
    assert found[tmp_path / "not-a-run"][1] is None and {found[p][1].name for p in runs} == {p.name for p in runs}
    scanned = RunIndex(tmp_path).scan()[0]
    index._cache[scanned.path] = (summaries.run_stamp(scanned.path), scanned)  # read on this thread meanwhile
    index.add(found)
    assert index.unread() == []  # the folder that is not a run is not read again as new
    assert {s.name for s in index.scan()} == {p.name for p in runs}
    assert index._cache[scanned.path][1] is scanned  # what was read meanwhile is newer: kept
