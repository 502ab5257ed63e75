"""The Runs list and Compare (issue 41): held-out accuracy, status, steps and time in the
list, sorted by a click on a column (accuracy as numbers); two stopped runs compared on
axes that fit their data, with the differences table whole; and the run-control rough
edges: Kill's confirmation defaults to Cancel, Stop and Kill follow the header's status
the same tick, and the status bar drops a run's message when another run is shown; and
opening a run from the list loads a copy of its preset into Set-up.

Run folders are written by hand; the window's engine is an IdleEngine (no process)."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

import yaml

from engine.run import rundir
from workbench.runs.rundata import RunData
from workbench.runs.runs_view import COLUMNS, RunsView
from workbench.window.dashboard_tab import DashboardTab
from workbench.window.names import RUNS
from test_workbench_resume import IdleEngine
from window_fixtures import click, make_window, window  # noqa: F401 (fixtures)


def small_run(folder: Path, name: str, steps: int = 3, status: str = "done", max_steps: int | None = None,
              preset: dict | None = None, accuracy: tuple[float, float] = (0.1, 0.5),
              step_seconds: float = 1.0) -> Path:
    """A run folder written by hand: run_started declaring one plot (the window builds one, not
    twenty), a reward a step, evaluations at step 0 and at its end, then `status`
    (done, stopped, failed; running: no final event)."""
    run_dir = Path(folder) / name
    run_dir.mkdir(parents=True)
    preset = preset or {"name": name, "training": {"learning_rate": 0.01, "max_steps": max_steps or steps}}
    (run_dir / rundir.PRESET_FILE).write_text(json.dumps(preset))
    start = 1_700_000_000.0
    events = [{"type": "run_started", "step": 0, "algorithm": "grpo", "preset": preset, "max_steps": max_steps or steps,
               "plots": [{"key": "reward", "title": "Reward", "curves": [{"metric": "reward"}]}]},
              {"type": "eval", "step": 0, "accuracy": accuracy[0]}]
    events += [{"type": "metrics", "step": s, "reward": 0.1 + 0.4 * s / steps} for s in range(1, steps + 1)]
    if status in ("done", "stopped"):
        events += [{"type": "eval", "step": steps, "accuracy": accuracy[1]},
                   {"type": "run_finished", "step": steps, "status": status}]
    elif status == "failed":
        events.append({"type": "run_failed", "step": steps, "message": "synthetic failure", "error_type": "ValueError"})
    with open(run_dir / rundir.EVENTS_FILE, "w") as f:
        for event in events:
            f.write(json.dumps({**event, "time": start + event["step"] * step_seconds}) + "\n")
    return run_dir


def rewrite(run_dir: Path, change) -> Path:
    """The run's events, each passed through `change(event)` (which edits it in place)."""
    events = rundir.read_events(run_dir)
    for event in events:
        change(event)
    (run_dir / rundir.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in events))
    return run_dir


def with_accuracy(run_dir: Path, first: float, last: float) -> Path:
    def change(event):
        if event["type"] == "eval":
            event["accuracy"] = first if event["step"] == 0 else last
    return rewrite(run_dir, change)


def header_click(qtbot, view: RunsView, column: str) -> None:
    header = view.table.horizontalHeader()
    x = header.sectionViewportPosition(COLUMNS.index(column)) + header.sectionSize(COLUMNS.index(column)) // 2
    qtbot.mouseClick(header.viewport(), Qt.LeftButton, pos=QPoint(x, header.height() // 2))


def test_the_runs_list_shows_accuracy_and_time_and_sorts_accuracy_as_numbers(qtbot, tmp_path):
    folder = tmp_path / "runs"
    # By the last accuracy: b 0.6 < a 0.9 < c 1.0. As text, "0.00 → 0.90" < "0.20 → 1.00" < "0.50 → 0.60".
    small_run(folder, "a", steps=4, accuracy=(0.0, 0.9), step_seconds=30.0)
    small_run(folder, "b", steps=4, accuracy=(0.5, 0.6))
    small_run(folder, "c", steps=4, accuracy=(0.2, 1.0))
    small_run(folder, "d", steps=2, status="failed")  # failed after its step-0 evaluation: 0.1
    no_eval = small_run(folder, "e", steps=2, status="running")  # no evaluation yet: last, either way
    (no_eval / rundir.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in rundir.read_events(no_eval)
                                                      if e["type"] != "eval"))
    view = RunsView(folder)
    qtbot.addWidget(view)
    view.resize(1000, 400)
    view.show()
    qtbot.waitExposed(view)
    model = view.model

    def column(name: str) -> list[str]:
        return [model.data(model.index(row, COLUMNS.index(name))) for row in range(model.rowCount())]

    header_click(qtbot, view, "accuracy")
    ascending = view.table.horizontalHeader().sortIndicatorOrder() == Qt.AscendingOrder
    expected = ["d", "b", "a", "c"] if ascending else ["c", "a", "b", "d"]
    assert [r.name for r in model.runs] == expected + ["e"]
    texts = {"a": "0.00 → 0.90", "b": "0.50 → 0.60", "c": "0.20 → 1.00", "d": "0.10", "e": ""}
    assert column("accuracy") == [texts[n] for n in expected + ["e"]]
    view.select_paths([folder / "a"])
    header_click(qtbot, view, "accuracy")  # again: the other way round, the selection kept
    assert [r.name for r in model.runs] == expected[::-1] + ["e"]
    assert view.selected_paths() == [folder / "a"]
    times = dict(zip([r.name for r in model.runs], column("time")))
    statuses = dict(zip([r.name for r in model.runs], column("status")))
    assert times["a"] == "2 min 00 s" and statuses["d"] == "failed"
    view.refresh()  # the timer's refresh keeps the order chosen
    assert [r.name for r in model.runs] == expected[::-1] + ["e"]


def stopped_run(folder: Path, name: str, learning_rate: float) -> RunData:
    """A run of max_steps 400 stopped at step 100."""
    preset = {"name": name, "training": {"learning_rate": learning_rate, "max_steps": 400}}
    run = RunData(small_run(folder, name, steps=100, max_steps=400, status="stopped", preset=preset))
    run.poll()
    return run


def test_compare_fits_two_stopped_runs_and_shows_their_differences_whole(qtbot, tmp_path):
    runs = [stopped_run(tmp_path, "lr-small-20261128-100000", 0.01),
            stopped_run(tmp_path, "lr-large-with-a-long-name-20261128-110000", 0.05)]
    runs[1].preset["data"] = {"path": "/a/folder/with/a/long/name/prompts-for-the-sorting-task.jsonl"}
    tab = DashboardTab(0.0)
    qtbot.addWidget(tab)
    tab.resize(1024, 700)
    tab.show()
    qtbot.waitExposed(tab)
    tab.show_runs(runs, compare=True, width=1024)
    dashboard = tab.dashboard
    box = dashboard.plot("reward").item.getViewBox()
    qtbot.waitUntil(lambda: box.viewRange()[0][1] < 400, timeout=3000)
    low, high = box.viewRange()[0]
    assert low <= 0 and 100 <= high <= 110 + 1e-6  # the data (and a tenth), not max_steps' 0-400
    box.sigRangeChangedManually.emit([True, True])  # a mouse zoom
    box.setXRange(20, 30, padding=0)
    box.setYRange(-5, 5, padding=0)
    qtbot.mouseClick(dashboard.reset, Qt.LeftButton)
    qtbot.waitUntil(lambda: box.viewRange()[0][1] < 111 and box.viewRange()[1][1] < 5, timeout=3000)
    (x0, _), (y0, y1) = box.viewRange()
    assert x0 <= 0 and 0.05 < y0 < 0.1 and 0.5 < y1 < 0.55  # rewards 0.1-0.5: y fits them, not a 0-1 axis
    assert "lr-small" in dashboard.legend.text() and "20261128" not in dashboard.legend.text()
    table = tab.differences
    QApplication.processEvents()
    assert table.columnCount() == 2 and not table.horizontalScrollBar().isVisible()  # no column clipped
    assert table.viewport().width() >= sum(table.columnWidth(c) for c in range(2))
    assert table.horizontalHeaderItem(0).text() == "lr-small"


# ------------------------------------------------------------ the run control


def live_run(folder: Path, name: str) -> Path:
    return small_run(folder, name, steps=5, status="running")


def double_click_run(qtbot, window, run_dir: Path) -> None:
    """Open a run from the Runs list as a user does: a double click on its row."""
    window.tabs.setCurrentIndex(RUNS)
    window.runs_view.refresh()
    table = window.runs_view.table
    row = [r.path.resolve() for r in window.runs_view.model.runs].index(run_dir.resolve())
    where = table.visualRect(window.runs_view.model.index(row, 0)).center()
    qtbot.mouseClick(table.viewport(), Qt.LeftButton, pos=where)  # QTest sends only the double-click event
    qtbot.mouseDClick(table.viewport(), Qt.LeftButton, pos=where)


def test_kill_and_stop_follow_the_run_and_opening_another_loads_its_preset(window, qtbot, tmp_path):
    """One window through a run's end: Kill's question defaults to Cancel; Stop and Kill grey
    out the tick the header reads the final event; opening another run from the list drops
    the first's message and loads a copy of its preset into Set-up (edits there are kept)."""
    saved = tmp_path / "mine.yaml"
    saved.write_text(yaml.safe_dump({"name": "mine"}))
    window.presets.open_preset(str(saved))
    run_dir = live_run(tmp_path / "runs", "live")
    other = small_run(tmp_path / "runs", "other", preset={"name": "other", "training": {"learning_rate": 0.02}})
    engine = IdleEngine(run_dir, parent=window)
    control = window.run_control
    control.attach(engine, run_dir)
    window.open_run(run_dir)
    # Kill asks, with Cancel as the default button: Return keeps the run.
    del window.ask  # the window's own question box, not the tests' scripted answers
    seen = []

    def press_return() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, press_return)
            return
        default = box.defaultButton()
        seen.append(default.text() if default is not None else None)
        qtbot.keyClick(box, Qt.Key_Return)  # a user hurrying through the question
        if box.isVisible():  # Return did nothing (no default button): close it, so the test fails, not hangs
            box.reject()

    QTimer.singleShot(0, press_return)
    click(qtbot, window, control.act_kill)
    assert seen == ["Cancel"] and not engine.killed and engine.signals == []
    # Stop; the engine's final event is read while its process is still exiting.
    click(qtbot, window, control.act_stop)
    assert "Stopping" in window.run_message.text()
    with open(run_dir / rundir.EVENTS_FILE, "a") as f:
        f.write(json.dumps({"type": "run_finished", "step": 5, "status": "stopped", "time": 0.0}) + "\n")
    window.tick()  # one tick: the header reads the event...
    assert window.header.status_word == "stopped"
    assert not control.act_kill.isEnabled() and not control.act_stop.isEnabled()  # ...and the tool bar follows
    assert "has ended (stopped)" in control.act_kill.toolTip()
    # Another run opened from the Runs list: the stopped run's message goes; its preset, copied, in Set-up.
    double_click_run(qtbot, window, other)
    assert window.shown[0].run_dir == other.resolve() and window.run_message.text() == ""
    doc = window.doc
    assert doc.get("training.learning_rate") == 0.02 and doc.get("name") == "other"
    assert doc.path is None and not doc.dirty  # a copy: Save asks where; no file on disk is overwritten
    assert window.windowTitle().startswith("copy of other's preset")
    assert saved.read_text() == yaml.safe_dump({"name": "mine"})
    doc.set("training.learning_rate", 0.5)  # unsaved edits in Set-up are kept when another run opens
    double_click_run(qtbot, window, run_dir)
    assert doc.get("training.learning_rate") == 0.5 and "unsaved edits" in window.run_message.text()
