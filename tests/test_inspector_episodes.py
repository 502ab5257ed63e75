"""A multi-turn episode in the trajectory inspector (pytest-qt, offscreen; issue 26):
turn blocks in the text, tool tokens grey whatever the quantity with their own legend
entry, a token's tooltip naming its turn and the tool it answers, the tool spans shaded
in the plot with no curve there, the Group page's episode line, the HTML export; and a
plain record beside it drawn as before."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from PySide6.QtCore import QEvent
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from episode_helpers import PROMPT, TOKENS, TOOL_FIRST, TOOL_LAST, episode_record, episode_run
from inspector_helpers import grpo_record
from workbench.inspector import episodes
from workbench.inspector.view import GROUP_PAGE
from workbench.inspector.colors import hex_to_rgb
from workbench.inspector.episodes import TOOL_HEX, TOOL_LEGEND
from workbench.inspector.records import Trajectory
from workbench.inspector.text import MARGIN
from workbench.inspector.text_paint import TURN_RULE
from window_fixtures import inspector, open_run  # noqa: F401 (fixtures)

MODEL_TOKEN = 3  # in turn 1, before the tool reply
SECOND_TURN = TOOL_LAST + 1  # the first token of turn 2


def painted(view, i: int) -> str:
    """The colour painted behind token i (just inside its box, above the glyphs)."""
    rect = view.token_rect(i)
    image = view.viewport().grab().toImage()
    dpr = image.devicePixelRatio()
    return image.pixelColor(int((rect.left() + 1) * dpr), int((rect.top() + 1) * dpr)).name()


def close(a: str, b: str, tol: float = 4.0) -> bool:
    return float(np.abs(np.subtract(hex_to_rgb(a), hex_to_rgb(b))).max()) <= tol


def tooltip(view, i: int, qtbot) -> str:
    pos = view.token_rect(i).center().toPoint()
    QApplication.sendEvent(view.viewport(), QHelpEvent(QEvent.ToolTip, pos, view.viewport().mapToGlobal(pos)))
    qtbot.waitUntil(QToolTip.isVisible, timeout=3000)
    text = QToolTip.text()
    QToolTip.hideText()
    return text


@pytest.fixture
def episode_shown(inspector, tmp_path):
    open_run(inspector, episode_run(tmp_path))
    assert inspector.current.index == 0 and inspector.current.episode is not None
    return inspector


def test_the_episode_helpers_examples_hold():
    result = doctest.testmod(episodes, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 10 and result.failed == 0


def test_tool_tokens_are_grey_whatever_the_quantity(episode_shown):
    view = episode_shown.sides[0].view
    advantage = episode_shown.current.sides[0].numbers["advantage"]
    # The scale is the model tokens' (both records ±0.8); the tool tokens are in no scale.
    assert episode_shown.scale.scale == pytest.approx(0.8)
    assert close(painted(view, MODEL_TOKEN), episode_shown.scale.hex(advantage[MODEL_TOKEN]))
    assert close(painted(view, MODEL_TOKEN), "#2f6300")  # +0.8 of ±0.8: the darkest green
    for i in range(TOOL_FIRST, TOOL_LAST + 1):
        assert close(painted(view, i), TOOL_HEX), i
    episode_shown.set_quantity("entropy")
    entropy = episode_shown.current.sides[0].numbers["entropy"]
    assert close(painted(view, MODEL_TOKEN), episode_shown.scale.hex(entropy[MODEL_TOKEN]))
    assert not close(painted(view, MODEL_TOKEN), TOOL_HEX)
    assert all(close(painted(view, i), TOOL_HEX) for i in range(TOOL_FIRST, TOOL_LAST + 1))
    # tool_mask and turn are the episode's, not quantities to colour by.
    offered = [episode_shown.quantity_box.itemData(i) for i in range(episode_shown.quantity_box.count())]
    assert "tool_mask" not in offered and "turn" not in offered and "advantage" in offered


def test_turns_are_drawn_as_blocks(episode_shown):
    view = episode_shown.sides[0].view
    tags = [(token, text) for kind, token, text in view.drawn_boxes() if kind == "tag"]
    assert tags == [(0, "turn 1"), (TOOL_FIRST, "↳ calculate"), (SECOND_TURN, "turn 2")]
    # Each block starts a line of its own: the prompt's line, turn 1, the tool reply, turn 2.
    tops = [view.token_rect(i).top() for i in (0, TOOL_FIRST - 1, TOOL_FIRST, TOOL_LAST, SECOND_TURN)]
    assert tops[0] == tops[1] < tops[2] == tops[3] < tops[4]
    # A rule between the turns, drawn across the text above turn 2.
    assert len(view._rule_lines) == 1
    y = view._line_top(view._rule_lines[0]) - view.verticalScrollBar().value()
    image = view.viewport().grab().toImage()
    dpr = image.devicePixelRatio()
    assert close(image.pixelColor(int((MARGIN + 300) * dpr), int(y * dpr)).name(), TURN_RULE.name(), tol=24)
    assert "2 turns" in episode_shown.rollout_box.currentText()
    summary = episode_shown.summary.text()
    assert "episode <b>2 turns · calculate ×1</b>" in summary and "3 tool tokens, not trained" in summary


def test_the_legend_has_the_tool_entry(episode_shown):
    assert TOOL_LEGEND == "tool / environment: not trained"
    assert TOOL_LEGEND in episode_shown.legend.plain_text()
    assert TOOL_HEX in episode_shown.legend.text.text()
    episode_shown.next_rollout()  # the plain record: no tool entry
    assert episode_shown.current.index == 1
    assert TOOL_LEGEND not in episode_shown.legend.plain_text()


def test_a_tokens_tooltip_names_its_turn_and_the_tool(episode_shown, qtbot):
    view = episode_shown.sides[0].view
    tip = tooltip(view, TOOL_FIRST + 1, qtbot)  # the tool's "7"
    assert "turn 1 of 2" in tip and TOOL_LEGEND in tip and "answers the call to calculate" in tip
    tip = tooltip(view, SECOND_TURN + 1, qtbot)
    assert "turn 2 of 2" in tip and "written by the model" in tip and "calculate" not in tip
    tip = tooltip(view, MODEL_TOKEN, qtbot)
    assert "turn 1 of 2" in tip and "written by the model" in tip


def test_the_plot_shades_the_tool_span_and_draws_no_value_there(episode_shown):
    plot = episode_shown.plot
    shown = [region for region in plot.tool_regions if region.isVisible()]
    assert len(shown) == 1 and shown[0].getRegion() == pytest.approx((TOOL_FIRST - 0.5, TOOL_LAST + 0.5))
    x, y = plot.curves[0].getData()
    assert np.isnan(y[TOOL_FIRST:TOOL_LAST + 1]).all() and np.isfinite(y[:TOOL_FIRST]).all()
    points_x, _ = plot.points.getData()
    assert not set(range(TOOL_FIRST, TOOL_LAST + 1)) & set(points_x.astype(int).tolist())
    assert len(points_x) == len(TOKENS) - (TOOL_LAST - TOOL_FIRST + 1)
    episode_shown.next_rollout()  # the plain record: nothing shaded
    assert not any(region.isVisible() for region in plot.tool_regions)


def test_a_plain_record_beside_it_looks_as_before(episode_shown):
    episode_shown.next_rollout()
    plain = episode_shown.current
    assert plain.episode is None and "episode" not in episode_shown.summary.text()
    view = episode_shown.sides[0].view
    assert all(kind == "token" for kind, _, _ in view.drawn_boxes()) and view._rule_lines == []
    advantage = plain.sides[0].numbers["advantage"]
    assert all(close(painted(view, i), episode_shown.scale.hex(advantage[i])) for i in range(len(plain.sides[0])))
    assert "turn" not in episode_shown.rollout_box.currentText()


def test_the_group_page_shows_each_episodes_turns_calls_and_reward(episode_shown):
    episode_shown.pages.setCurrentIndex(GROUP_PAGE)
    rows = {row.index: row for row in episode_shown.group_view.rows}
    line = rows[0].episode_line
    assert line is not None and not line.isHidden()
    assert ("<b>episode</b> 2 turns · 1 tool call: calculate(expression=&quot;3+4&quot;) → 7 · "
            "final reward <b>1</b>") == line.text()
    assert rows[1].episode_line is None  # the plain completion
    assert close(rows[0].view.background[TOOL_FIRST].name(), TOOL_HEX)
    assert [text for kind, _, text in rows[0].view.drawn_boxes() if kind == "tag"] == \
        ["turn 1", "↳ calculate", "turn 2"]


def test_a_failed_call_is_red_on_the_group_page():
    record = episode_record()
    record["episode"]["tool_calls"][0].update(error=True, result="{'error': 'division by zero'}")
    line = episodes.episode_line_html(record["episode"], 0.0)
    assert "<span style='color:#b00020'>✗ calculate(expression=&quot;3+4&quot;) → {&#x27;error&#x27;" in line
    assert "final reward <b>0</b>" in line


def test_the_html_export_greys_the_tool_tokens(episode_shown, tmp_path):
    page = episode_shown.export_html_to(tmp_path / "episode.html").read_text(encoding="utf-8")
    assert page.count(f"background:{TOOL_HEX}") == TOOL_LAST - TOOL_FIRST + 1
    assert "token 9: 7\nturn 1 of 2 · tool / environment: not trained\nanswers the call to calculate" in page


def test_odd_episode_lists_are_left_out_not_misdrawn():
    record = episode_record()
    record["tool_mask"] = record["tool_mask"][:-1]  # one short: no tool tokens to draw
    record["turn"] = "x"
    trajectory = Trajectory.from_record(record)
    assert trajectory.episode is not None and not trajectory.episode.has_tool_tokens
    assert trajectory.episode.text_tags() == {} and trajectory.episode.turns == 2
    plain = Trajectory.from_record(grpo_record(1, 1, 0, 0.0, 0.5, prompt=PROMPT))
    assert plain.episode is None and "turn" not in plain.quantities()
