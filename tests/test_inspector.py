"""The trajectory inspector (pytest-qt, offscreen): token colours as painted, the
quantity picker, tooltips, the text and the plot kept in step (hover and selection,
both ways), keyboard navigation, the GRPO group view and its no-signal flag, DPO pairs
side by side, export, a live run's new steps, and the samples table's double-click."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QHelpEvent, QMouseEvent
from PySide6.QtWidgets import QApplication, QToolTip

from engine.run import rundir
from inspector_helpers import dpo_record, grpo_record, grpo_run, ppo_record, write_steps
from workbench.inspector.view import GROUP_PAGE, HISTORY_PAGE, TRAJECTORY_PAGE
from workbench.inspector.colors import DIVERGING_STOPS, hex_to_rgb, text_hex
from workbench.inspector.records import token_display
from window_fixtures import inspector, open_run  # noqa: F401 (fixtures)
from workbench_helpers import write_run

NEUTRAL = DIVERGING_STOPS[len(DIVERGING_STOPS) // 2]


def painted(view, i: int) -> str:
    """The colour painted behind token i (just inside its box, above the glyphs)."""
    rect = view.token_rect(i)
    image = view.viewport().grab().toImage()
    dpr = image.devicePixelRatio()
    colour = image.pixelColor(int((rect.left() + 1) * dpr), int((rect.top() + 1) * dpr))
    return colour.name()


def hover(widget, pos) -> None:
    """Move the pointer over a widget (a real mouse-move event; QTest's mouseMove does
    not deliver one on every platform plugin)."""
    pos = QPointF(pos)
    event = QMouseEvent(QEvent.MouseMove, pos, widget.mapToGlobal(pos), Qt.NoButton, Qt.NoButton, Qt.NoModifier)
    QApplication.sendEvent(widget, event)


def close(a: str, b: str, tol: float = 4.0) -> bool:
    return float(np.abs(np.subtract(hex_to_rgb(a), hex_to_rgb(b))).max()) <= tol


def test_tokens_are_painted_in_the_colour_of_their_advantage(inspector, tmp_path):
    run_dir = write_run(tmp_path, "colours", steps=1)
    write_steps(run_dir, {1: [grpo_record(1, 0, 0, 0.0, -1.2, n=6), grpo_record(1, 1, 0, 1.0, 1.2, n=6),
                              grpo_record(1, 2, 0, 0.5, 0.0, n=6)]})
    open_run(inspector, run_dir)
    assert inspector.step == 1 and inspector.key == "advantage"
    assert inspector.scale.scale == pytest.approx(1.2) and inspector.scale.low == pytest.approx(-1.2)
    text = inspector.sides[0].view
    seen = {}
    for position in range(3):
        inspector.rollout_box.setCurrentIndex(position)
        seen[position] = painted(text, 2)
        assert close(seen[position], inspector.scale.hex(inspector.current.sides[0].numbers["advantage"][2]))
        assert text.foreground[2].name() == text_hex(text.background[2].name())
    neg, pos, zero = (hex_to_rgb(seen[k]) for k in range(3))
    assert neg[0] > neg[1] and pos[1] > pos[0]  # pink (pushed down) and green (pushed up)
    assert close(seen[2], NEUTRAL)  # zero: neutral
    assert close(seen[0], DIVERGING_STOPS[0]) and close(seen[1], DIVERGING_STOPS[-1])  # ±scale: the ends
    assert "max |advantage|" in inspector.legend.plain_text()
    # Switching the quantity recolours with its own map.
    inspector.set_quantity("entropy")
    values = inspector.current.sides[0].numbers["entropy"]
    assert close(painted(text, 2), inspector.scale.hex(values[2]))
    assert inspector.scale.kind == "sequential" and "entropy" in inspector.legend.name.text()
    inspector.scope_box.setCurrentIndex(1)  # the rollout's own scale
    assert inspector.scale.loud == pytest.approx(np.nanmax(values)) and "this rollout" in inspector.scale.how


def test_the_picker_offers_only_the_quantities_the_record_has(inspector, tmp_path):
    def offered():
        return [inspector.quantity_box.itemData(i) for i in range(inspector.quantity_box.count())]

    run_dir = write_run(tmp_path, "grpo", steps=1)
    write_steps(run_dir, {1: [grpo_record(1, 0, 0, 1.0, 0.5)]})
    open_run(inspector, run_dir)
    assert offered() == ["advantage", "logprob", "probability", "ref_logprob", "kl", "entropy", "ratio"]
    run_dir = write_run(tmp_path, "ppo", steps=1, algorithm="ppo")
    write_steps(run_dir, {1: [ppo_record(1, 0), ppo_record(1, 1)]})
    open_run(inspector, run_dir)
    assert {"value", "return", "kl_reward", "reward_per_token"} <= set(offered())
    assert inspector.key == "advantage"
    advantage = inspector.current.sides[0].numbers["advantage"]
    assert len(set(advantage.tolist())) > 1  # per token
    colours = {c.name() for c in inspector.sides[0].view.background}
    assert len(colours) > 5  # each token its own colour
    inspector.set_quantity("value")
    assert inspector.scale.stops == "blues"
    run_dir = write_run(tmp_path, "dpo", steps=1, algorithm="dpo")
    write_steps(run_dir, {1: [dpo_record(1, 0)]})
    open_run(inspector, run_dir)
    assert offered() == ["logprob", "probability", "ref_logprob", "entropy", "implicit_reward"]
    assert inspector.key == "implicit_reward"


def test_the_tooltip_shows_the_records_numbers(inspector, tmp_path, qtbot):
    run_dir = write_run(tmp_path, "tips", steps=1, algorithm="ppo")
    record = ppo_record(1, 0, n=10)
    write_steps(run_dir, {1: [record]})
    open_run(inspector, run_dir)
    view = inspector.sides[0].view
    rect = view.token_rect(4)
    pos = rect.center().toPoint()
    event = QHelpEvent(QEvent.ToolTip, pos, view.viewport().mapToGlobal(pos))
    QApplication.sendEvent(view.viewport(), event)
    qtbot.waitUntil(QToolTip.isVisible, timeout=3000)
    tip = QToolTip.text()
    for key in ("logprob", "ref_logprob", "kl", "entropy", "advantage", "ratio", "value", "return", "kl_reward",
                "reward_per_token"):
        assert key in tip and f"{record[key][4]:.4g}" in tip, key
    for token, prob in zip(record["top_tokens"][4], record["top_probs"][4]):
        assert f"{prob:.4g}" in tip
    QToolTip.hideText()
    # Outside any token: no tooltip.
    assert view.token_at(QPoint(view.viewport().width() - 5, view.viewport().height() - 5)) == -1


def test_text_and_plot_stay_in_step(inspector, tmp_path, qtbot):
    run_dir = write_run(tmp_path, "linked", steps=1, algorithm="ppo")
    write_steps(run_dir, {1: [ppo_record(1, 0, n=2000)]})
    open_run(inspector, run_dir)
    view, plot = inspector.sides[0].view, inspector.plot
    assert view.verticalScrollBar().maximum() > 0  # 2,000 tokens: the text scrolls
    # Hover a token in the text: the plot marks that position.
    hover(view.viewport(), view.token_rect(7).center())
    qtbot.waitUntil(lambda: view.hovered == 7, timeout=2000)
    assert plot.hovered == 7 and plot.hover_line.isVisible() and plot.hover_line.value() == 7
    x, y = plot.hover_dots.getData()
    assert list(x) == [7.0] and y[0] == pytest.approx(inspector.current.sides[0].numbers["advantage"][7])
    assert "token 7" in inspector.details.text()
    # Hover a point of the plot: the token is highlighted, and scrolled into view.
    # (A pixel of the plot is about two tokens wide here: the position under the
    # pointer is the one the plot maps that pixel to.)
    point = plot.mapFromScene(plot.scene_pos_of(1500))
    target = plot.index_at(plot.mapToScene(point))
    assert abs(target - 1500) <= 2
    hover(plot.viewport(), point)
    qtbot.waitUntil(lambda: view.hovered == target, timeout=2000)
    assert plot.hovered == target
    rect = view.token_rect(target)
    assert 0 <= rect.top() and rect.bottom() <= view.viewport().height()
    # Click a token: selected in the plot too; click the plot: selected in the text.
    qtbot.mouseClick(view.viewport(), Qt.LeftButton, pos=view.token_rect(1490).center().toPoint())
    assert view.selected == 1490 and plot.selected == 1490 and plot.select_line.value() == 1490
    point = plot.mapFromScene(plot.scene_pos_of(20))
    target = plot.index_at(plot.mapToScene(point))
    qtbot.mouseClick(plot.viewport(), Qt.LeftButton, pos=point)
    qtbot.waitUntil(lambda: view.selected == target, timeout=2000)
    assert plot.selected == target and inspector.selected == target
    assert 0 <= view.token_rect(target).top() <= view.viewport().height()
    assert f"token {target}" in inspector.details.text()


def test_clipped_tokens_are_marked_when_the_ratio_is_shown(inspector, tmp_path):
    run_dir = write_run(tmp_path, "ratio", steps=1)
    record = grpo_record(1, 0, 0, 1.0, 0.5, n=40)
    write_steps(run_dir, {1: [record]})
    open_run(inspector, run_dir)
    assert inspector.sides[0].view.marks is None
    inspector.set_quantity("ratio")
    assert inspector.sides[0].view.marks == [bool(c) for c in record["clipped"]]
    assert inspector.scale.centre == 1.0
    x, _ = inspector.plot.clip_marks.getData()
    assert sorted(x.tolist()) == [i for i, c in enumerate(record["clipped"]) if c]
    assert sum(record["clipped"]) > 0


def test_keyboard_moves_between_rollouts_and_steps(inspector, tmp_path, qtbot):
    run_dir = grpo_run(tmp_path, steps=3)
    open_run(inspector, run_dir)
    assert (inspector.step, inspector.current.index) == (3, 0)
    text = inspector.sides[0].view
    text.setFocus()
    qtbot.keyClick(text, Qt.Key_Right)
    qtbot.keyClick(text, Qt.Key_Right)
    assert inspector.current.index == 2
    qtbot.keyClick(text, Qt.Key_Left)
    assert inspector.current.index == 1
    qtbot.keyClick(text, Qt.Key_Up)
    assert (inspector.step, inspector.current.index) == (2, 1)  # the same rollout, a step back
    assert not inspector.follow_check.isChecked()
    qtbot.keyClick(text, Qt.Key_Up)
    qtbot.keyClick(text, Qt.Key_Up)  # no step before the first
    assert inspector.step == 1
    qtbot.keyClick(text, Qt.Key_Down)
    assert inspector.step == 2
    inspector.step_box.setValue(3)
    assert inspector.step == 3 and inspector.follow_check.isChecked()
    # On the Group page too; the history table keeps its arrow keys.
    inspector.pages.setCurrentIndex(GROUP_PAGE)
    inspector.group_view.rows[0].view.setFocus()
    qtbot.keyClick(inspector.group_view.rows[0].view, Qt.Key_Up)
    assert inspector.step == 2
    inspector.pages.setCurrentIndex(HISTORY_PAGE)
    inspector.history_view.table.setFocus()
    qtbot.keyClick(inspector.history_view.table, Qt.Key_Up)
    assert inspector.step == 2


def test_the_group_view_flags_a_group_with_no_spread(inspector, tmp_path, qtbot):
    run_dir = grpo_run(tmp_path, steps=3, zero_spread_step=2)
    open_run(inspector, run_dir)
    inspector.pages.setCurrentIndex(GROUP_PAGE)
    group = inspector.group_view
    assert len(group.rows) == 4 and not group.flag.isVisible()
    assert all(row.view is not None for row in group.rows)
    assert "advantage" in group.rows[0].header.text() and "reward" in group.rows[0].header.text()
    inspector.prev_step()
    assert inspector.step == 2
    assert group.flag.isVisible() and "No learning signal" in group.flag.text()
    # The rows are coloured like the text (advantage 0: neutral) and follow the quantity.
    assert all(close(c.name(), NEUTRAL) for c in group.rows[0].view.background)
    inspector.set_quantity("logprob")
    row = group.rows[1]
    values = row.row.trajectory.sides[0].numbers["logprob"]
    assert close(row.view.background[0].name(), inspector.scale.hex(values[0]))
    # A row clicked becomes the current rollout; double-clicked, it opens.
    qtbot.mouseClick(group.rows[3].header, Qt.LeftButton)
    assert inspector.current.index == 3
    assert group.rows[3].styleSheet() != group.rows[0].styleSheet()
    group.rows[2].double_clicked.emit(2)
    assert inspector.current.index == 2 and inspector.pages.currentIndex() == TRAJECTORY_PAGE


def test_a_dpo_pair_is_shown_side_by_side(inspector, tmp_path, qtbot):
    run_dir = write_run(tmp_path, "dpo", steps=1, algorithm="dpo")
    record = dpo_record(1, 0)
    write_steps(run_dir, {1: [record, dpo_record(1, 1)]})
    open_run(inspector, run_dir)
    chosen, rejected = (panel.view for panel in inspector.sides)
    assert inspector.sides[1].isVisible() and rejected.tokens == record["rejected"]["tokens"]
    assert "chosen" in inspector.sides[0].header.text() and "rejected" in inspector.sides[1].header.text()
    assert not inspector.pages.isTabEnabled(GROUP_PAGE)
    assert len([c for c in inspector.plot.curves if c.isVisible()]) == 2
    # One scale over both sides.
    inspector.scope_box.setCurrentIndex(1)
    both = np.concatenate([np.array(record[s]["implicit_reward"]) for s in ("chosen", "rejected")])
    assert inspector.scale.scale == pytest.approx(np.abs(both).max())
    hover(chosen.viewport(), chosen.token_rect(3).center())
    qtbot.waitUntil(lambda: chosen.hovered == 3, timeout=2000)
    assert rejected.hovered == 3 and inspector.plot.hovered == 3
    assert "margin" in inspector.summary.text()


def test_export_writes_every_token_with_its_colour(inspector, tmp_path):
    run_dir = grpo_run(tmp_path, steps=1)
    open_run(inspector, run_dir)
    inspector.set_quantity("logprob")
    page = inspector.export_html_to(tmp_path / "t.html").read_text(encoding="utf-8")
    side = inspector.current.sides[0]
    spans = re.findall(r"data-i='(\d+)' style='background:(#[0-9a-f]{6})", page)
    assert len(spans) == len(side)
    for (i, colour), bg in zip(spans, inspector.sides[0].view.background):
        assert close(colour, bg.name(), 3.0)  # the view's colours (a table step apart at most)
    for token in side.tokens:
        assert token_display(token).replace("<", "&lt;").replace(">", "&gt;") in page
    # each token's span carries its own numbers: the title holds the logprob shown,
    # the one the engine wrote for that token (4 significant digits)
    on_disk = next(r for r in rundir.read_trajectories(run_dir, inspector.step) if r["index"] == inspector.current.index)
    titles = [html.unescape(t) for t in re.findall(r"data-i='\d+' style='[^']*' title='([^']*)'", page)]
    assert len(titles) == len(on_disk["tokens"]) == len(side)
    for i, title in enumerate(titles):
        lines = title.split("\n")
        assert lines[0].startswith(f"token {i}: ")
        shown = [line for line in lines if line.startswith("logprob ")]
        assert shown and float(shown[0].split()[-1]) == pytest.approx(on_disk["logprob"][i], rel=1e-3, abs=1e-4)
    # the JSON export is the engine's record, read back number for number
    record = json.loads(inspector.export_json_to(tmp_path / "t.json").read_text(encoding="utf-8"))
    assert record == on_disk
    assert record["logprob"] == on_disk["logprob"] and record["ratio"] == on_disk["ratio"]


def test_a_live_run_shows_its_new_steps(inspector, tmp_path):
    run_dir = write_run(tmp_path, "live", steps=5, status="running")
    write_steps(run_dir, {1: [grpo_record(1, 0, 0, 1.0, 0.5)]})
    open_run(inspector, run_dir)
    assert inspector.step == 1 and "1 recorded" in inspector.steps_label.text()
    write_steps(run_dir, {2: [grpo_record(2, 0, 0, 1.0, 0.5), grpo_record(2, 1, 0, 0.0, -0.5)]})
    assert inspector.poll() is True
    assert inspector.step == 2  # following the newest
    inspector.next_rollout()
    write_steps(run_dir, {3: [grpo_record(3, 0, 0, 1.0, 0.5), grpo_record(3, 1, 0, 0.0, -0.5)]})
    inspector.poll()
    assert (inspector.step, inspector.current.index) == (3, 1)  # the same position in the new step
    inspector.prev_step()  # looking back: stay there
    write_steps(run_dir, {4: [grpo_record(4, 0, 0, 1.0, 0.5)]})
    inspector.poll()
    assert inspector.step == 2 and "3 recorded" not in inspector.steps_label.text()
    assert "4 recorded (1–4)" in inspector.steps_label.text()
    assert inspector.poll() is False  # nothing new: nothing re-read


def test_a_run_without_records_says_why(inspector, tmp_path):
    run_dir = write_run(tmp_path, "none", steps=2, status="running")
    open_run(inspector, run_dir)
    assert inspector.message.isVisible() and "No trajectory records yet" in inspector.message.text()
    assert not inspector.export_html_button.isEnabled()


def test_a_rollout_that_was_not_recorded_opens_its_group(inspector, tmp_path):
    run_dir = grpo_run(tmp_path, steps=2, group_size=2)
    open_run(inspector, run_dir)
    assert inspector.open_trajectory(1, 1) is True and inspector.current.key == (1, 1)
    # write_run's samples: index 0-1 are group 0 (recorded), 2-3 group 1 (not recorded).
    assert inspector.open_trajectory(2, 3) is False
    assert "not recorded token by token" in inspector.message.text()
    assert inspector.open_trajectory(9, 0) is False and "nearest" in inspector.message.text()


def test_prompt_history_page(inspector, tmp_path):
    run_dir = write_run(tmp_path, "hist", steps=4)
    write_steps(run_dir, {s: [grpo_record(s, 0, 0, 0.25 * s, 0.1, prompt="same")] for s in (1, 3, 4)})
    open_run(inspector, run_dir)
    inspector.pages.setCurrentIndex(HISTORY_PAGE)
    history = inspector.history_view
    history.scan_all()
    assert history.prompt == "same"
    assert [(r.step, r.source) for r in history.rows] == [(1, "rollout"), (3, "rollout"), (4, "rollout")]
    assert history.table.rowCount() == 3 and history.table.item(2, 4).text() == "1"
    history._double_clicked(1, 0)
    assert inspector.step == 3 and inspector.pages.currentIndex() == TRAJECTORY_PAGE


def test_samples_double_click_opens_the_trajectory(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    from workbench.main_window import MainWindow
    from workbench.window.names import INSPECTOR, SAMPLES
    from workbench.settings import Settings

    run_dir = grpo_run(tmp_path / "runs", steps=3)
    window = MainWindow(Settings(runs_folder=str(tmp_path / "runs")), settings_path=tmp_path / "config" / "s.json")
    qtbot.addWidget(window)
    window.show()
    window.open_run(run_dir)
    window.tabs.setCurrentIndex(SAMPLES)
    model = window.samples.model
    row = next(r for r in range(model.rowCount()) if model.sample(r).key == (2, 1))
    window.samples.table.doubleClicked.emit(model.index(row, 1))
    assert window.tabs.currentIndex() == INSPECTOR
    assert window.inspector.current.key == (2, 1)


def test_odd_records_do_not_break_the_view(inspector, tmp_path):
    run_dir = write_run(tmp_path, "odd", steps=1)
    empty = {"step": 1, "index": 0, "prompt": "p", "completion": "", "tokens": [], "token_ids": [], "reward": 0.0}
    nulls = grpo_record(1, 1, 0, 0.0, 0.0, n=5)
    nulls["advantage"] = [None] * 5
    nulls["kl"] = None  # not a list: not a quantity
    write_steps(run_dir, {1: [empty, nulls]})
    open_run(inspector, run_dir)
    assert inspector.current.index == 0 and inspector.quantity_box.count() == 0
    inspector.next_rollout()
    assert inspector.current.index == 1 and "kl" not in inspector.current.quantities()
    assert inspector.key == "advantage" and inspector.scale.scale == 0.0
    assert all(c.name() == "#d4d4d4" for c in inspector.sides[0].view.background)  # nulls: grey
    # the export of a record with no values: each of its 5 tokens grey, as in the view
    page = inspector.export_html_to(tmp_path / "n.html").read_text(encoding="utf-8")
    assert re.findall(r"data-i='\d+' style='background:(#[0-9a-f]{6})", page) == ["#d4d4d4"] * 5
