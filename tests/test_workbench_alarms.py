"""The window side of alarms (issue 15): `alarm` events of a run (docs/run-directory.md)
read into RunData.alarms, listed in the Alarms panel with what they saw, why it matters,
what to try and their numbers, marked on the dashboard's plot of their metric, and
leading to the samples and recorded rollouts of their steps."""

from __future__ import annotations

import doctest
import json
import time

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt

from engine.run import rundir
from inspector_helpers import grpo_record, write_steps
from window_fixtures import make_window, window  # noqa: F401  (fixtures)
from workbench.alarms import model as alarm_model
from workbench.alarms.details import details_html
from workbench.alarms.model import alarm_from_event
from workbench.dashboard import markers
from workbench.window.names import DASHBOARD, INSPECTOR, SAMPLES
from workbench.runs import rundata
from workbench.runs.rundata import RunData
from workbench_helpers import write_run

ZERO_STD = [[10, 0.9], [11, 0.95], [12, 1.0], [13, 0.9], [14, 0.95]]


def no_signal_alarm(step: int = 14, began: int = 10) -> dict:
    return {"type": "alarm", "time": time.time(), "step": step, "kind": "no_learning_signal",
            "title": "No learning signal", "began": began, "steps": [began, step], "metric": "frac_reward_zero_std",
            "saw": f"frac_reward_zero_std averaged 0.94 over steps {began}-{step} (alarm at 0.8 or more)",
            "why": "A group whose completions all get the same reward has zero advantage, so it teaches nothing.",
            "try": [{"field": "algorithm.num_generations", "advice": "more completions per prompt"},
                    {"field": "rewards", "advice": "a reward with partial credit"}],
            "evidence": {"frac_reward_zero_std": ZERO_STD}}


def entropy_alarm() -> dict:
    return {"type": "alarm", "time": time.time(), "step": 18, "kind": "entropy_collapse", "title": "Entropy collapse",
            "began": 15, "steps": [15, 18], "metric": "entropy", "saw": "entropy fell to 0.1 of its first level",
            "why": "With little entropy left the policy samples nearly the same completion every time.",
            "try": [{"field": "training.learning_rate", "advice": "lower it"}],
            "evidence": {"entropy": [[15, 0.2], [16, 0.15], [17, 0.1], [18, 0.1]], "reward": [[18, 0.5]]}}


def eval_alarm() -> dict:
    return {"type": "alarm", "time": time.time(), "step": 20, "kind": "eval_falling", "title": "Held-out score falling",
            "began": 16, "steps": [16, 20], "metric": "eval/accuracy", "saw": "accuracy fell from 0.5 to 0.3",
            "why": "The training reward rises while the held-out score falls.",
            "try": [{"field": "training.learning_rate", "advice": "lower it"}],
            "evidence": {"eval/accuracy": [[16, 0.5], [20, 0.3]]}}


def append(run_dir, *events) -> None:
    with open(run_dir / rundir.EVENTS_FILE, "a", encoding="utf-8") as f:
        for event in events:
            f.write((event if isinstance(event, str) else json.dumps(event)) + "\n")


def alarmed_run(folder, name: str = "alarmed", status: str = "running"):
    """20 steps of metrics and samples (4 a step), trajectories recorded at steps 12 (rollouts
    2 and 3 only) and 20, and two alarms: no learning signal (steps 10-14, which hold step
    12's records) and entropy collapse (steps 15-18, which hold none)."""
    run_dir = write_run(folder, name, steps=20, samples_per_step=4, status=status,
                        extra_metrics={"frac_reward_zero_std": 0.9})
    write_steps(run_dir, {12: [grpo_record(12, i, 1, 0.5, 0.0, seed=12) for i in (2, 3)],
                          20: [grpo_record(20, i, 0, 0.5, 0.0, seed=20) for i in range(4)]})
    append(run_dir, no_signal_alarm(), entropy_alarm())
    return run_dir


def click_row(qtbot, widget, row: int) -> None:
    rect = widget.visualItemRect(widget.item(row))
    qtbot.mouseClick(widget.viewport(), Qt.LeftButton, pos=rect.center())
    assert widget.currentRow() == row


def click_tab(qtbot, window, index: int) -> None:
    bar = window.tabs.tabBar()
    qtbot.mouseClick(bar, Qt.LeftButton, pos=bar.tabRect(index).center())
    assert window.tabs.currentIndex() == index


def marker_point(plot, marker) -> QPoint:
    """Where a marker is drawn, in the plot widget's viewport (half way up the plot)."""
    box = plot.item.getViewBox()
    (_x0, _x1), (y0, y1) = box.viewRange()
    scene = box.mapViewToScene(QPointF(marker.value(), (y0 + y1) / 2))
    return plot.widget.mapFromScene(scene)


# ------------------------------------------------------------------ the model


def test_the_models_examples_hold():
    for module in (alarm_model, markers, rundata):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_run_data_keeps_alarms_in_order_and_skips_those_without_kind_or_step(tmp_path):
    run_dir = write_run(tmp_path, "r", steps=6, status="running")
    append(run_dir, {"type": "alarm", "step": 3, "kind": "kl_spike", "title": "KL spike"},
           {"type": "alarm", "step": 4},  # no kind
           {"type": "alarm", "kind": "kl_spike", "step": "4"},  # a step that is not a number
           {"type": "alarm", "kind": "", "step": 4},
           {"type": "alarm", "kind": "length_drift", "step": 5, "steps": "odd", "try": "odd", "evidence": [1]})
    run = RunData(run_dir)
    update = run.poll()
    assert update.alarms == 2
    assert [(a["kind"], a["step"]) for a in run.alarms] == [("kl_spike", 3), ("length_drift", 5)]
    odd = alarm_from_event(run.alarms[1])  # odd fields read as absent
    assert (odd.title, odd.first, odd.last, odd.tries, odd.evidence) == ("Length drift", 5, 5, [], {})
    assert "Length drift" in details_html(odd)

    # Appended during a live run: read by the next poll, after the first ones.
    append(run_dir, {"type": "alarm", "step": 6, "kind": "entropy_collapse"})
    assert run.poll().alarms == 1 and [a["step"] for a in run.alarms] == [3, 5, 6]
    # A resume from step 4 redoes steps 5 and 6: their alarms go with their metrics.
    append(run_dir, {"type": "run_resumed", "step": 4, "time": time.time()})
    update = run.poll()
    assert update.rewound and [a["step"] for a in run.alarms] == [3]


def test_details_put_each_field_in_bold_and_the_evidence_in_a_table():
    alarm = alarm_from_event(entropy_alarm())
    text = details_html(alarm)
    assert "<b>training.learning_rate</b>: lower it" in text
    names, rows = alarm_model.evidence_table(alarm)
    assert names == ["entropy", "reward"] and rows[0] == (15, [0.2, None]) and rows[-1] == (18, [0.1, 0.5])
    assert text.count("<tr>") == 1 + 4  # the header and a row per step


# ------------------------------------------------------------------ the window


def test_alarms_panel_lists_explains_and_links_a_runs_alarms(qtbot, window, tmp_path):
    run_dir = alarmed_run(tmp_path)
    window.open_run(run_dir)
    panel = window.alarms
    assert window.tabs.currentIndex() == DASHBOARD and panel.isVisible() and panel.body.isVisible()
    assert panel.list.row_texts() == ["step 14 · No learning signal", "step 18 · Entropy collapse"]
    assert "Alarms (2)" in panel.title.text()
    # The newest is selected; its steps have no records, and the panel says so.
    assert panel.current.step == 18
    assert not panel.open_inspector.isEnabled()
    assert "No rollouts were recorded at steps 15–18" in panel.note.text()
    assert "training.record_rollouts" in panel.note.text()

    click_row(qtbot, panel.list, 0)
    text = panel.details.toPlainText()
    for part in ("No learning signal", "frac_reward_zero_std averaged 0.94 over steps 10-14",
                 "teaches nothing", "algorithm.num_generations", "more completions per prompt", "rewards"):
        assert part in text, part
    assert "0.95" in text and "13" in text  # the evidence table
    assert panel.open_inspector.isEnabled() and "rollout 2 of step 12" in panel.note.text()

    # Markers: on the plot of each alarm's metric, where its evidence began.
    dash = window.dashboard
    zero_std, entropy, reward = dash.plot("zero_std"), dash.plot("entropy"), dash.plot("reward")
    assert [(m.value(), m.alarm.title) for m in zero_std.markers] == [(10, "No learning signal")]
    assert [(m.value(), m.alarm.kind) for m in entropy.markers] == [(15, "entropy_collapse")]
    assert reward.markers == []
    assert zero_std.markers[0].pen.color().name() == alarm_model.KIND_COLOURS["no_learning_signal"]
    assert "No learning signal" in zero_std.markers[0].label.toPlainText()

    # Open in inspector: the first recorded rollout at a step of 10-14 (step 12's rollout 2).
    qtbot.mouseClick(panel.open_inspector, Qt.LeftButton)
    assert window.tabs.currentIndex() == INSPECTOR
    qtbot.waitUntil(lambda: window.inspector.current is not None, timeout=3000)
    assert (window.inspector.step, window.inspector.current.index) == (12, 2)

    # Show samples: the Samples tab filtered to steps 10-14 (a text filter typed there goes).
    click_tab(qtbot, window, SAMPLES)
    qtbot.keyClicks(window.samples.search, "zzz")
    qtbot.waitUntil(lambda: window.samples.model.rowCount() == 0, timeout=3000)
    click_tab(qtbot, window, DASHBOARD)
    qtbot.mouseClick(panel.show_samples, Qt.LeftButton)
    assert window.tabs.currentIndex() == SAMPLES
    samples = window.samples
    assert (samples.step_from.value(), samples.step_to.value(), samples.search.text()) == (10, 14, "")
    qtbot.waitUntil(lambda: samples.model.rowCount() == 5 * 4, timeout=3000)
    shown = {samples.model.sample(row).step for row in range(samples.model.rowCount())}
    assert shown == {10, 11, 12, 13, 14}


def test_a_marker_clicked_or_hovered_names_its_alarm(qtbot, window, tmp_path):
    window.open_run(alarmed_run(tmp_path))
    panel, dash = window.alarms, window.dashboard
    plot = dash.plot("zero_std")
    dash.scroll.ensureWidgetVisible(plot)
    qtbot.waitUntil(lambda: not plot.visibleRegion().isEmpty() and not plot.stale, timeout=3000)
    assert panel.current.step == 18
    marker = plot.markers[0]
    point = marker_point(plot, marker)
    qtbot.mouseMove(plot.widget.viewport(), point)
    qtbot.waitUntil(lambda: "No learning signal" in plot.readout.text(), timeout=3000)
    assert "steps 10–14" in plot.readout.text()
    qtbot.mouseClick(plot.widget.viewport(), Qt.LeftButton, pos=point)
    assert panel.current.step == 14  # the alarm is selected in the panel
    # Away from the marker, the readout is the values only.
    qtbot.mouseMove(plot.widget.viewport(), marker_point(plot, marker) + QPoint(60, 0))
    qtbot.waitUntil(lambda: "No learning signal" not in plot.readout.text(), timeout=3000)


def test_alarms_of_a_live_run_appear_on_the_next_tick(qtbot, window, tmp_path):
    run_dir = write_run(tmp_path, "live", steps=20, samples_per_step=4, status="running",
                        extra_metrics={"frac_reward_zero_std": 0.9})
    window.open_run(run_dir)
    panel = window.alarms
    assert panel.list.count() == 0 and "Alarms (0)" in panel.title.text() and not panel.body.isVisible()
    assert all(not p.markers for p in window.dashboard.plots)

    append(run_dir, no_signal_alarm())
    qtbot.waitUntil(lambda: panel.list.count() == 1, timeout=3000)  # the window's timer polls the run
    assert panel.body.isVisible() and "Alarms (1)" in panel.title.text()
    assert panel.current.step == 14  # nothing was selected: the new one is
    assert "Alarm at step 14: No learning signal" in window.run_message.text()
    assert [m.value() for m in window.dashboard.plot("zero_std").markers] == [10]

    # A torn line, alarms without kind or step, and odd fields: no crash, the valid ones shown.
    append(run_dir, '{"type": "alarm", "kind"', {"type": "alarm", "step": 15}, {"type": "alarm", "kind": "x"},
           {"type": "alarm", "kind": "mystery", "step": 16, "title": 7, "steps": [1], "metric": None,
            "try": [None, {"field": ""}], "evidence": {"m": "bad", "n": [[1], [2, "x"], [3, 1.5]]}},
           eval_alarm())
    qtbot.waitUntil(lambda: panel.list.count() == 3, timeout=3000)
    assert panel.list.row_texts()[1:] == ["step 16 · Mystery", "step 20 · Held-out score falling"]
    assert panel.current.step == 14  # the user's selection stays
    click_row(qtbot, panel.list, 1)
    assert "Mystery" in panel.details.toPlainText() and "1.5" in panel.details.toPlainText()
    # An evaluation's alarm is marked on the held-out plot; one without a metric on the first plot.
    assert [m.value() for m in window.dashboard.plot("eval").markers] == [16]
    assert 16 in [m.value() for m in window.dashboard.plots[0].markers]

    # A resume from step 15 redoes the later steps: their alarms go, and nothing is announced.
    window.run_message.clear_message()
    append(run_dir, {"type": "run_resumed", "step": 15, "time": time.time()})
    qtbot.waitUntil(lambda: panel.list.count() == 1, timeout=3000)
    assert panel.current.step == 14 and window.run_message.text() == ""
    assert window.dashboard.plot("eval").markers == []

    # Another run opened: its (no) alarms replace these, markers and all.
    window.open_run(write_run(tmp_path, "quiet", steps=5))
    assert panel.list.count() == 0 and "Alarms (0)" in panel.title.text()
    assert all(not p.markers for p in window.dashboard.plots)


def test_compared_runs_each_show_their_alarms_on_the_plots(qtbot, window, tmp_path):
    first = alarmed_run(tmp_path, "first", status="done")
    second = write_run(tmp_path, "second", steps=20, extra_metrics={"frac_reward_zero_std": 0.9})
    append(second, no_signal_alarm(step=8, began=4))
    window.compare_runs([first, second])
    labels = sorted((m.value(), m.label.toPlainText()) for m in window.dashboard.plot("zero_std").markers)
    assert labels == [(4, "second: No learning signal"), (10, "first: No learning signal")]
    # The panel lists the first run's alarms (as the Samples tab shows its samples).
    assert "Alarms of first (2)" in window.alarms.title.text()


def test_markers_follow_the_x_axis(qtbot, window, tmp_path):
    window.open_run(alarmed_run(tmp_path))
    dash = window.dashboard
    dash.x_axis.setFocus()
    qtbot.keyClick(dash.x_axis, Qt.Key_Down)  # the next choice: x: wall time
    assert dash.x_mode == "time"
    run = window.shown[0]
    # write_run logs a step a second: step 10 is 10 s after the run began.
    expected = float(run.metrics.times[list(run.metrics.steps).index(10)] - run.first_time)
    assert [m.value() for m in dash.plot("zero_std").markers] == [pytest.approx(expected)]


def test_selecting_an_alarm_brings_its_plot_into_view(qtbot, window, tmp_path):
    window.resize(1200, 700)  # a dashboard taller than its view: the plots scroll
    window.open_run(alarmed_run(tmp_path))
    dash, panel = window.dashboard, window.alarms
    qtbot.waitUntil(lambda: dash.scroll.verticalScrollBar().maximum() > 0, timeout=5000)
    zero_std = dash.plot("zero_std")
    dash.scroll.verticalScrollBar().setValue(0)
    click_row(qtbot, panel.list, 1)  # entropy collapse: the entropy plot
    dash.scroll.verticalScrollBar().setValue(dash.scroll.verticalScrollBar().maximum())
    top = zero_std.mapTo(dash.scroll.widget(), zero_std.rect().topLeft()).y()
    click_row(qtbot, panel.list, 0)  # no learning signal: the plot of frac_reward_zero_std
    view = dash.scroll.viewport().rect().translated(0, dash.scroll.verticalScrollBar().value())
    assert view.top() <= top and top + zero_std.height() <= view.bottom() + 1
    entropy = dash.plot("entropy")
    click_row(qtbot, panel.list, 1)
    view = dash.scroll.viewport().rect().translated(0, dash.scroll.verticalScrollBar().value())
    assert view.top() <= entropy.mapTo(dash.scroll.widget(), entropy.rect().topLeft()).y() < view.bottom()
