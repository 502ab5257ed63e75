"""The views follow the run model: a change of a RunData (new events read by its poll)
reaches the dashboard, the samples table and the run header through RunData.updated,
with no refresh() pushed into them by hand."""

from __future__ import annotations

import json
import time

from engine.run import rundir
from workbench.dashboard.view import Dashboard
from workbench.runs.run_header import RunHeader
from workbench.runs.rundata import RunData
from workbench.runs.samples_view import SamplesView
from workbench_helpers import write_run


def append_steps(run_dir, first: int, last: int, samples: int = 2) -> None:
    with open(run_dir / rundir.EVENTS_FILE, "a", encoding="utf-8") as f:
        for step in range(first, last + 1):
            f.write(json.dumps({"type": "metrics", "step": step, "time": time.time(), "reward": 0.5,
                                "loss": 0.1}) + "\n")
            f.write(json.dumps({"type": "samples", "step": step, "time": time.time(), "samples": [
                {"index": i, "group": 0, "prompt": "p", "completion": "c", "reward": 1.0,
                 "rewards": {"exact_match": 1.0}, "advantage": 0.0} for i in range(samples)]}) + "\n")


def test_views_follow_the_run_model(qtbot, tmp_path):
    run_dir = write_run(tmp_path, "live", steps=3, status="running")
    run = RunData(run_dir)
    run.poll()
    dashboard, samples, header = Dashboard(), SamplesView(), RunHeader()
    for widget in (dashboard, samples, header):
        qtbot.addWidget(widget)
        widget.resize(900, 600)
        widget.show()
    dashboard.set_runs([run])
    samples.set_run(run)
    header.set_runs([run], lambda r: (r.status, ""))
    qtbot.waitUntil(lambda: samples.model.rowCount() == 12, timeout=3000)
    assert header.progress.value() == 3 and "running" in header.status.text()
    assert header.eta.text().startswith("ETA")

    append_steps(run_dir, 4, 5)
    with open(run_dir / rundir.EVENTS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps({"type": "run_finished", "step": 5, "time": time.time(), "status": "stopped"}) + "\n")
    seen = []
    run.updated.connect(seen.append)
    assert run.poll()  # the model changes; nothing else is called
    assert len(seen) == 1 and seen[0].metrics == 2 and seen[0].samples == 2

    assert "stopped" in header.status.text() and header.eta.text().startswith("took")
    plot = dashboard.plot("reward")
    qtbot.waitUntil(lambda: plot.curves[0].line.getData()[0] is not None
                    and len(plot.curves[0].line.getData()[0]) == 5, timeout=3000)
    qtbot.waitUntil(lambda: samples.model.rowCount() == 16, timeout=3000)  # the table's throttle

    # Nothing new: no signal, no redraw.
    assert not run.poll() and len(seen) == 1


def test_views_let_go_of_a_run_they_no_longer_show(qtbot, tmp_path):
    first = RunData(write_run(tmp_path, "a", steps=2))
    second = RunData(write_run(tmp_path, "b", steps=2))
    dashboard, samples, header = Dashboard(), SamplesView(), RunHeader()
    for widget in (dashboard, samples, header):
        qtbot.addWidget(widget)
    dashboard.set_runs([first])
    samples.set_run(first)
    header.set_runs([first], lambda r: (r.status, ""))
    dashboard.set_runs([second])
    samples.set_run(second)
    header.set_runs([second], lambda r: (r.status, ""))
    assert first.updated._slots == []
    assert len(second.updated._slots) == 3
