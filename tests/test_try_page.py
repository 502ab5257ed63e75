"""The Try tab (workbench/runs/try_page.py, issue 41): a prompt typed key by key, Try clicked,
the answers of the base and a checkpoint read from the stand-in engine's `try`
(tests/stand_in_try.py: hand-written numbers) and drawn side by side, coloured by the
log-ratio log p_checkpoint - log p_base or by the logprob."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

import workbench.runs.try_answers
from stand_in_engine import stand_in_command
from workbench.inspector.colors import DIVERGING_STOPS, SEQUENTIAL_STOPS, relative_luminance
from workbench.runs.try_answers import GivenAnswer, try_command
from workbench.runs.try_page import TryPage

PRESET = """name: grpo-sort
algorithm: {name: grpo, temperature: 0.7, max_completion_length: 16}
data: {task: sort, num_eval: 10}
"""


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A run with checkpoints at steps 2 and 4, and one being written (no state.json)."""
    run = tmp_path / "runs" / "grpo-sort-20261128-190000"
    for step, complete in ((2, True), (4, True), (6, False)):
        folder = run / "checkpoints" / f"step_{step:06d}"
        folder.mkdir(parents=True)
        if complete:
            (folder / "state.json").write_text(json.dumps({"step": step}))
    (run / "preset.yaml").write_text(PRESET)
    return run


def open_page(qtbot, run_dir: Path, commands: list) -> TryPage:
    def command_for(*args, **kwargs):
        commands.append(try_command(*args, **kwargs))
        return stand_in_command(commands[-1])

    page = TryPage(command_for)
    qtbot.addWidget(page)
    page.resize(1000, 700)
    page.set_run(run_dir)
    page.show()
    return page


def test_the_examples_hold():
    result = doctest.testmod(workbench.runs.try_answers)
    assert result.failed == 0 and result.attempted >= 4


def hexes(panel) -> list[str]:
    return [colour.name() for colour in panel.view.background]


def test_try_shows_both_answers_and_where_they_differ(qtbot, run_dir):
    commands = []
    page = open_page(qtbot, run_dir, commands)
    assert [page.checkpoint_box.itemText(i) for i in range(page.checkpoint_box.count())] == ["step 4", "step 2"]
    assert page.temperature_spin.value() == 0.7 and page.max_tokens_spin.value() == 16  # the preset's
    assert not page.try_button.isEnabled() and not page.sides.isVisible()  # nothing typed yet
    qtbot.keyClicks(page.prompt_edit, "sort 3 1 2 =")
    with qtbot.waitSignal(page.sig_finished, timeout=10_000) as finished:
        qtbot.mouseClick(page.try_button, Qt.LeftButton)
        assert page.running and page.cancel_button.isVisible() and not page.try_button.isEnabled()
        qtbot.waitUntil(lambda: page.progress.value() == 2, timeout=5_000)
        assert page.progress.maximum() == 4 and page.progress_line.text() == "sampling step_000004"
        (run_dir / "go-on").touch()  # the stand-in waits at 2 of 4 until the bar has shown it
    assert finished.args == ["done", ""]
    assert commands[0][4:] == [str(run_dir), "--checkpoint", "step_000004", "--json", "--progress",
                               "--prompt=sort 3 1 2 =", "--greedy", "--max-new-tokens", "16"]
    base, checkpoint = page.base_panel, page.checkpoint_panel
    assert page.sides.isVisible() and not page.cancel_button.isVisible() and page.try_button.isEnabled()
    assert base.view.tokens == [" ", "2", " ", "1", "<eos>"]
    assert checkpoint.view.tokens == [" ", "1", " ", "2", "<eos>"]
    assert base.view.prompt == "sort 3 1 2 =" and "base (no adapter)" in base.header.text()
    assert "step 4" in checkpoint.header.text() and "sort 3 1 2 =" in page.prompt_line.text()
    # Coloured by the log-ratio, one scale over both sides: the checkpoint's "1" (+1.2, the
    # largest |ratio|) is the darkest green, the base's "2" (-0.8) pink, an unchanged token neutral.
    assert page.quantity == "log_ratio"
    assert hexes(checkpoint)[1] == DIVERGING_STOPS[-1] and hexes(base)[0] == DIVERGING_STOPS[5]
    pink = hexes(base)[1]
    assert int(pink[1:3], 16) > int(pink[3:5], 16)  # more red than green
    tip = checkpoint.view.tooltip_for(1)
    assert "log p under step 4: -0.3" in tip and "log p under base (no adapter): -1.5" in tip
    assert "log-ratio (checkpoint − base): 1.2" in tip
    assert "±1.2 = max |log-ratio|" in page.legend.plain_text()
    # Switched to the logprob, by keyboard: the lowest of both answers (-1.2, the base's "2") darkest
    page.quantity_box.setFocus()
    qtbot.keyClick(page.quantity_box, Qt.Key_Down)
    assert page.quantity == "logprob"
    assert hexes(base)[1] == SEQUENTIAL_STOPS["heat"][-1]
    assert relative_luminance(hexes(checkpoint)[4]) > relative_luminance(hexes(base)[3])  # -0.01 paler than -0.5
    assert "pale 0 to dark -1.2" in page.legend.plain_text()


def test_a_held_out_prompt_sampled_and_the_engines_error_line(qtbot, run_dir):
    commands = []
    page = open_page(qtbot, run_dir, commands)
    (run_dir / "go-on").touch()
    qtbot.mouseClick(page.held_out_box, Qt.LeftButton)
    assert not page.prompt_edit.isEnabled() and page.try_button.isEnabled()
    page.held_out_spin.selectAll()
    qtbot.keyClicks(page.held_out_spin, "9")  # the preset holds out 10; the stand-in engine 8
    with qtbot.waitSignal(page.sig_finished, timeout=10_000) as finished:
        qtbot.mouseClick(page.try_button, Qt.LeftButton)
    assert finished.args[0] == "failed"
    text = page.message.text()
    assert "--held-out: 9 is out of range; run grpo-sort-20261128-190000 holds out 8 prompts (0 to 7)" in text
    assert "error:" not in text and "Traceback" not in text and not page.sides.isVisible()
    page.held_out_spin.selectAll()
    qtbot.keyClicks(page.held_out_spin, "1")
    page.decoding_box.setFocus()
    qtbot.keyClick(page.decoding_box, Qt.Key_Down)  # sampled
    page.samples_spin.selectAll()
    qtbot.keyClicks(page.samples_spin, "3")
    with qtbot.waitSignal(page.sig_finished, timeout=10_000) as finished:
        qtbot.mouseClick(page.try_button, Qt.LeftButton)
    assert finished.args == ["done", ""] and not page.message.isVisible()
    assert commands[-1][9:] == ["--held-out", "1", "--samples", "3", "--temperature", "0.7", "--seed", "0",
                                "--max-new-tokens", "16"]
    assert "held-out prompt #1" in page.prompt_line.text() and "sort 9 4 =" in page.prompt_line.text()
    assert page.answer_spin.isVisible() and page.answer_spin.maximum() == 3


def test_cancel_ends_the_engine_and_the_form_is_ready_again(qtbot, run_dir):
    page = open_page(qtbot, run_dir, [])
    qtbot.keyClicks(page.prompt_edit, "sort 2 1 =")
    with qtbot.waitSignal(page.sig_finished, timeout=10_000) as finished:
        qtbot.keyClick(page.prompt_edit, Qt.Key_Return)
        qtbot.waitUntil(lambda: page.progress.value() == 2, timeout=5_000)  # waiting there for go-on
        qtbot.mouseClick(page.cancel_button, Qt.LeftButton)
    assert finished.args == ["cancelled", ""] and "Cancelled" in page.message.text()
    assert page.try_button.isEnabled() and not page.cancel_button.isVisible() and not page.sides.isVisible()


def test_the_window_shows_the_tab_for_a_run_on_show(qtbot, tmp_path, run_dir, monkeypatch):
    from workbench.main_window import MainWindow
    from workbench.settings import Settings

    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    (run_dir / "events.jsonl").write_text(json.dumps({"type": "run_started", "time": 1.8e9, "step": 0}) + "\n")
    window = MainWindow(Settings(runs_folder=str(run_dir.parent)), settings_path=tmp_path / "config" / "s.json")
    qtbot.addWidget(window)
    tab = window.tabs.indexOf(window.try_page)
    assert window.tabs.tabText(tab) == "Try" and not window.tabs.isTabVisible(tab)
    window.open_run(run_dir)
    assert window.tabs.isTabVisible(tab) and window.try_page.run_dir == run_dir.resolve()
    assert window.try_page.checkpoint_box.currentData() == "step_000004"


def test_a_reward_model_run_has_nothing_to_try(qtbot, run_dir):
    for step in (2, 4):
        (run_dir / "checkpoints" / f"step_{step:06d}" / "adapter_config.json").write_text(
            json.dumps({"modules_to_save": ["score"]}))
    page = open_page(qtbot, run_dir, [])
    qtbot.keyClicks(page.prompt_edit, "sort 2 1 =")
    assert not page.try_button.isEnabled() and "trains a reward model" in page.message.text()


def test_a_given_answer_is_scored_by_both_models_until_sample_instead(qtbot, run_dir):
    commands = []
    page = open_page(qtbot, run_dir, commands)
    (run_dir / "go-on").touch()  # the stand-in's sampling waits for it at 2 of 4
    given = GivenAnswer(run_dir, 1, " 9 4", "step_000002", "sample 3 of step 2 in eval-1", max_new_tokens=12)
    with qtbot.waitSignal(page.sig_finished, timeout=10_000) as finished:
        assert page.start_given(given)
    assert finished.args == ["done", ""]
    assert commands[-1][4:] == [str(run_dir), "--checkpoint", "step_000002", "--json", "--progress", "--held-out", "1",
                                "--completion= 9 4", "--max-new-tokens", "12"]
    base, checkpoint = page.base_panel, page.checkpoint_panel
    assert base.view.tokens == checkpoint.view.tokens == [" ", "9", " ", "4", "<eos>"]  # the same answer both sides
    assert "not sampled" in page.prompt_line.text() and "sort 9 4 =" in page.prompt_line.text()
    assert page.given_note.isVisible() and "sample 3 of step 2 in eval-1" in page.given_note.text()
    assert page.try_button.text() == "Score" and not page.prompt_edit.isEnabled()
    assert not page.held_out_spin.isEnabled() and not page.decoding_box.isEnabled()  # the answer's prompt, unsampled
    tip = checkpoint.view.tooltip_for(1)
    assert "log p under step 2: -0.2" in tip and "log p under base (no adapter): -0.4" in tip
    assert "log p under base (no adapter): -0.4" in base.view.tooltip_for(1)
    # Another checkpoint picked by keyboard, and Score: the same answer under it
    page.checkpoint_box.setFocus()
    qtbot.keyClick(page.checkpoint_box, Qt.Key_Up)
    with qtbot.waitSignal(page.sig_finished, timeout=10_000):
        qtbot.mouseClick(page.try_button, Qt.LeftButton)
    assert commands[-1][5:8] == ["--checkpoint", "step_000004", "--json"] and "--completion= 9 4" in commands[-1]
    assert "step 4" in page.checkpoint_panel.header.text()
    qtbot.mouseClick(page.sample_button, Qt.LeftButton)
    assert not page.given_note.isVisible() and page.try_button.text() == "Try" and page.decoding_box.isEnabled()
    with qtbot.waitSignal(page.sig_finished, timeout=10_000):
        qtbot.mouseClick(page.try_button, Qt.LeftButton)
    assert "--greedy" in commands[-1] and not any(a.startswith("--completion") for a in commands[-1])
    assert page.base_panel.view.tokens != page.checkpoint_panel.view.tokens  # sampled: each model its own answer


def test_a_given_answer_under_a_checkpoint_that_is_gone(qtbot, run_dir):
    commands = []
    page = open_page(qtbot, run_dir, commands)
    assert not page.start_given(GivenAnswer(run_dir, 0, " 1 3", "step_000008", "sample 0 of step 8"))
    assert commands == [] and "step_000008 is not in this run" in page.message.text()
