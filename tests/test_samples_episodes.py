"""A multi-turn episode in the samples table and the dashboard (pytest-qt, offscreen;
issue 26): the episode column's summary (turns, each tool's calls, failed calls), the
conversation in the cell's tooltip and the detail pane, the filter typed into and the
sort by turns; a run without episodes has the columns it had; the episode plots a run
declares come with their help."""

from __future__ import annotations

import json
import time

import pytest
from PySide6.QtCore import Qt

from engine.run import rundir
from episode_helpers import EPISODE, EPISODE_METRICS, PROMPT, episode_run, episode_sample
from workbench.dashboard.view import Dashboard
from workbench.dashboard.plotspec import choose_plots, expected_names
from workbench.inspector.episodes import conversation, conversation_text, episode_summary
from workbench.runs.rundata import RunData
from window_fixtures import open_samples
from workbench_helpers import write_run

FAILED_RESULT = "{'error': 'division by zero'}"


def failed_episode_sample(index: int = 2) -> dict:
    """Three turns, two calculator calls, the first of which failed."""
    row = episode_sample(index=index, group=1, reward=0.0)
    row["completion"] = (f"<tool_call>1/0</tool_call><eos><tool_response>{FAILED_RESULT}</tool_response>"
                         "<tool_call>3+4</tool_call><eos><tool_response>7</tool_response> 7<eos>")
    row["episode"] = {
        "turns": 3, "truncated": False, "reward_source": None,
        "tool_calls": [{"turn": 0, "name": "calculate", "arguments": {"expression": "1/0"}, "result": FAILED_RESULT,
                        "error": True},
                       {"turn": 1, "name": "calculate", "arguments": {"expression": "3+4"}, "result": "7",
                        "error": False}],
        "messages": [{"role": "assistant", "content": "<tool_call>1/0</tool_call>"},
                     {"role": "tool", "name": "calculate", "content": FAILED_RESULT},
                     {"role": "assistant", "content": "<tool_call>3+4</tool_call>"},
                     {"role": "tool", "name": "calculate", "content": "7"},
                     {"role": "assistant", "content": " 7"}]}
    return row


@pytest.fixture
def samples(qtbot, tmp_path):
    """The samples view of an episode run with a second step holding a failed call."""
    run_dir = episode_run(tmp_path)
    with open(run_dir / rundir.EVENTS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps({"type": "samples", "step": 2, "time": time.time(),
                            "samples": [failed_episode_sample()]}) + "\n")
    return open_samples(qtbot, run_dir, rows=lambda count: count == 3)


def cell(view, row: int, column: str, role=Qt.DisplayRole):
    model = view.model
    return model.data(model.index(row, model.columns.index(column)), role)


def row_of(view, index: int, step: int) -> int:
    return next(r for r in range(view.model.rowCount()) if view.model.sample(r).key == (step, index))


def test_an_episode_row_summarises_its_conversation(samples):
    assert samples.model.columns[:4] == ["step", "prompt", "completion", "episode"]
    episode, plain, failed = row_of(samples, 0, 1), row_of(samples, 1, 1), row_of(samples, 2, 2)
    assert cell(samples, episode, "episode") == "2 turns · calculate ×1"
    assert cell(samples, failed, "episode") == "3 turns · calculate ×2 · 1 error"
    assert cell(samples, plain, "episode") == ""
    header = samples.model.headerData(samples.model.columns.index("episode"), Qt.Horizontal)
    assert header == "episode"
    # The cell's tooltip (and the completion's) is the whole conversation, errors marked.
    tip = cell(samples, failed, "episode", Qt.ToolTipRole)
    assert tip == cell(samples, failed, "completion", Qt.ToolTipRole)
    assert tip.splitlines() == ["3 turns · calculate ×2 · 1 error", "── turn 1 ──", "<tool_call>1/0</tool_call>",
                                f'  ✗ error: calculate(expression="1/0") → {FAILED_RESULT}', "── turn 2 ──",
                                "<tool_call>3+4</tool_call>", '  ↳ calculate(expression="3+4") → 7', "── turn 3 ──",
                                " 7"]
    assert cell(samples, plain, "completion", Qt.ToolTipRole) == " 8"  # a plain row: its text, as before
    assert cell(samples, plain, "episode", Qt.ToolTipRole) is None


def test_the_detail_pane_shows_the_conversation(samples):
    samples.select_row(row_of(samples, 2, 2))
    text = samples.detail.toPlainText()
    assert "Episode · 3 turns · calculate ×2 · 1 error" in text
    assert f'error ↳ calculate(expression="1/0") → {FAILED_RESULT}' in text
    assert 'turn 2 · model' in text and '↳ calculate(expression="3+4") → 7' in text
    assert "Episode text (model and tool tokens, as decoded)" in text
    samples.select_row(row_of(samples, 1, 1))  # a plain row: its completion, no episode
    text = samples.detail.toPlainText()
    assert "Completion" in text and "Episode" not in text


def test_the_filter_typed_and_the_sort_by_turns(samples, qtbot):
    qtbot.keyClicks(samples.search, "1/0")
    qtbot.waitUntil(lambda: samples.model.rowCount() == 1, timeout=3000)
    assert cell(samples, 0, "episode") == "3 turns · calculate ×2 · 1 error"
    samples.search.clear()
    qtbot.waitUntil(lambda: samples.model.rowCount() == 3, timeout=3000)
    samples.table.sortByColumn(samples.model.columns.index("episode"), Qt.DescendingOrder)
    assert [samples.model.sample(r).index for r in range(3)] == [2, 0, 1]  # 3 turns, 2 turns, not an episode


def test_a_run_without_episodes_has_its_columns_as_before(qtbot, tmp_path):
    view = open_samples(qtbot, write_run(tmp_path, "plain", steps=2), rows=lambda count: count == 8)
    assert view.model.columns == ["step", "prompt", "completion", "reward", "rewards/exact_match", "advantage"]
    assert view.model.sample(0).episode is None
    view.select_row(0)
    assert "Episode" not in view.detail.toPlainText()


def test_words_for_an_episode():
    assert episode_summary(EPISODE) == "2 turns · calculate ×1"
    assert episode_summary({"turns": 1, "tool_calls": []}) == "1 turn · no tool calls"
    assert episode_summary(None) == ""
    lines = conversation(EPISODE)
    assert [kind for kind, _, _ in lines] == ["turn", "model", "tool", "turn", "model"]
    # Calls without messages: the calls alone.
    assert conversation_text({"turns": 1, "tool_calls": EPISODE["tool_calls"]}).splitlines()[1:] == \
        ['  ↳ calculate(expression="3+4") → 7']
    assert PROMPT not in conversation_text(EPISODE)  # the conversation after the prompt


def test_declared_episode_plots_come_with_their_help(qtbot, tmp_path):
    run = RunData(episode_run(tmp_path, metrics=EPISODE_METRICS))
    run.poll()
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.resize(1200, 900)
    dashboard.show()
    dashboard.set_runs([run])
    titles = {"episode_turns": "Turns per episode", "tool_calls": "Tool calls per episode",
              "episode_truncated": "Truncated episodes", "episode_tokens": "Tokens per episode"}
    for key, title in titles.items():
        plot = dashboard.plot(key)
        assert plot is not None and title in plot.title.text(), key
        assert plot.help, key
    assert "data.tool_timeout" in dashboard.plot("tool_calls").help
    assert "never trained" in dashboard.plot("episode_tokens").help
    # Declared, before the first metrics: the plots are there from the start.
    from episode_helpers import DECLARED_PLOTS
    layout = choose_plots(expected_names(DECLARED_PLOTS), DECLARED_PLOTS)
    assert {"episode_turns", "tool_calls", "episode_truncated"} <= {spec.key for spec, _ in layout.plots}
