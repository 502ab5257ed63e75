"""The set-up form and step rewards (issue 25; pytest-qt, offscreen): the
process_reward_model kind with its options, the step delimiter every reward entry may
set (typed with \\n for a newline, saved and read back exactly), the built-in sort_steps
among the registry rewards, and the preset's refusal of a step reward that the chosen
advantage estimator cannot use, shown at the reward it is about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from PySide6.QtCore import Qt

from engine.preset.schema import preset_from_dict
from engine.rewards import PROCESS_REWARD_MODEL_OPTIONS
from workbench.setup.document import PresetDocument
from workbench.setup.panel import SetupPanel
from workbench.setup.reward_fields import PRM_STEP_DELIMITER, delimiter_text, parse_delimiter
from workbench.setup.rewards_editor import ADD_PROCESS_REWARD_MODEL
from workbench_helpers import type_text
from window_fixtures import show_setup_panel


@pytest.fixture
def panel(qtbot, tmp_path):
    """The set-up panel on the tests' small preset (grpo, rewards exact_match and
    sort_position), saved in tmp_path."""
    return show_setup_panel(qtbot, tmp_path)


def rewards(panel) -> list[dict]:
    return panel.doc.get("rewards")


def add(panel, qtbot, choice: str) -> None:
    panel.rewards.adder.setCurrentText(choice)
    assert panel.rewards.adder.currentText() == choice  # offered
    qtbot.mouseClick(panel.rewards.add_button, Qt.LeftButton)


def combo_items(combo) -> list[str]:
    return [combo.itemText(i) for i in range(combo.count())]


def prm_folder(path: Path) -> Path:
    """A folder that looks like a token-classification PRM to the torch-free checks."""
    path.mkdir()
    config = {"architectures": ["GPT2ForTokenClassification"], "model_type": "gpt2",
              "id2label": {"0": "wrong", "1": "right"}}
    (path / "config.json").write_text(json.dumps(config))
    return path


def choose(qtbot, combo, text: str) -> None:
    """Pick `text` in a (non-editable) combo with the keyboard, as a user steps through it."""
    combo.setFocus(Qt.OtherFocusReason)
    while combo.currentIndex() > 0:
        qtbot.keyClick(combo, Qt.Key_Up)
    for _ in range(combo.count()):
        if combo.currentText() == text:
            return
        qtbot.keyClick(combo, Qt.Key_Down)
    assert combo.currentText() == text, combo_items(combo)


def set_estimator(panel, qtbot, name: str) -> None:
    type_text(qtbot, panel.editor("algorithm.advantage_estimator").line, name)
    assert panel.doc.get("algorithm.advantage_estimator") == name


# ------------------------------------------------------------ process reward model


def test_a_process_reward_model_is_added_with_its_own_options(panel, qtbot, tmp_path):
    add(panel, qtbot, ADD_PROCESS_REWARD_MODEL)
    row = panel.rewards.items[-1]
    assert row.kind == "process_reward_model"
    assert rewards(panel)[-1] == {"name": "process_reward_model", "weight": 1.0, "options": {"model": ""}}
    # the options are the kinds module's, each empty box showing its default there
    assert list(row.options._rows) == [k for k in PROCESS_REWARD_MODEL_OPTIONS if k != "model"]
    assert row.options.option_widget("batch_size").placeholderText() == \
        f"default: {PROCESS_REWARD_MODEL_OPTIONS['batch_size']}"
    assert row.options.option_widget("step_tag").placeholderText() == 'default: ""'
    assert row.delimiter.line.placeholderText() == "default: \\n\\n"
    panel.validate_now()
    model_row = row.field_rows["options.model"]
    assert "needs the option 'model'" in model_row.error.text() and not model_row.error.isHidden()

    type_text(qtbot, row.model.line, "./no-such-prm")
    panel.validate_now()
    # a PRM scores steps: GRPO's default estimator cannot use them
    assert [path for path, _ in panel.problems] == ["rewards.2"]
    assert "grpo_process" in row.problems.error.text()
    set_estimator(panel, qtbot, "grpo_process")
    panel.validate_now()
    assert model_row.error.text().startswith("folder ./no-such-prm does not exist")

    prm_folder(tmp_path / "prm")
    type_text(qtbot, row.model.line, "prm")  # relative: found next to the preset
    # a causal-LM PRM's tokens are text: "-" is not YAML's list, "+" not a number's sign
    choose(qtbot, row.options.option_widget("head"), "causal_lm")
    type_text(qtbot, row.options.option_widget("good_token"), "+")
    type_text(qtbot, row.options.option_widget("bad_token"), "-")
    type_text(qtbot, row.options.option_widget("batch_size"), "4")
    assert rewards(panel)[-1] == {"name": "process_reward_model", "weight": 1.0, "options": {
        "model": "prm", "head": "causal_lm", "good_token": "+", "bad_token": "-", "batch_size": 4}}
    panel.validate_now()
    assert panel.problems == []

    # a label with a causal_lm head: the engine's message, at the component
    type_text(qtbot, row.options.option_widget("label"), "1")
    assert rewards(panel)[-1]["options"]["label"] == 1
    panel.validate_now()
    assert "option 'label' is for head token_classification" in row.problems.error.text()
    choose(qtbot, row.options.option_widget("head"), "default (auto)")
    type_text(qtbot, row.options.option_widget("good_token"), "")
    type_text(qtbot, row.options.option_widget("bad_token"), "")
    assert rewards(panel)[-1]["options"] == {"model": "prm", "label": 1, "batch_size": 4}
    panel.validate_now()
    assert panel.problems == []


def test_a_head_the_engine_does_not_know_is_shown_and_refused(panel):
    entry = {"name": "process_reward_model", "options": {"model": "org/prm", "head": "classifier"}}
    panel.doc.set("rewards", rewards(panel) + [entry])
    row = panel.rewards.items[-1]
    assert row.options.option_widget("head").currentText() == "classifier (not allowed)"
    panel.validate_now()
    assert "option 'head' must be one of auto, token_classification, causal_lm" in row.problems.error.text()


def test_the_form_knows_the_engines_prm_step_delimiter():
    from engine.rewards.process_model import STEP_DELIMITER_DEFAULT

    assert PRM_STEP_DELIMITER == STEP_DELIMITER_DEFAULT


# ------------------------------------------------------------------ step delimiter


@pytest.mark.parametrize("delimiter", ["\n", "\n\n", "Step", " ; ", "\t", "a\\nb", "\\", "\\\\n", "\r\n"])
def test_a_delimiter_is_read_back_as_it_was_shown(delimiter):
    assert parse_delimiter(delimiter_text(delimiter)) == delimiter


def test_typed_escapes_mean_what_the_tooltip_says():
    assert parse_delimiter("\\n\\n") == "\n\n"  # typed: backslash, n, backslash, n
    assert parse_delimiter("\\d") == "\\d"  # a backslash before anything else is itself
    assert parse_delimiter("\\\\n") == "\\n"  # \\ is one backslash, then n
    assert parse_delimiter("") is None and parse_delimiter(" ") == " "  # empty: unset; a space is a delimiter
    assert delimiter_text("\n\n") == "\\n\\n" and delimiter_text("\\n") == "\\\\n"


def test_step_delimiter_and_prm_round_trip_through_the_preset_file(panel, qtbot, tmp_path):
    set_estimator(panel, qtbot, "grpo_process")  # step rewards need a step-aware estimator
    first = panel.rewards.items[0]
    assert first.delimiter.line.text() == "" and first.delimiter.line.placeholderText() == \
        "none: one score per completion"
    assert "\\n is a newline" in first.delimiter.toolTip()
    type_text(qtbot, first.delimiter.line, "\\n\\n")
    assert first.delimiter.line.text() == "\\n\\n"  # as typed, not rewritten
    assert rewards(panel)[0] == {"name": "exact_match", "weight": 1.0, "options": {}, "step_delimiter": "\n\n"}

    prm_folder(tmp_path / "prm")
    add(panel, qtbot, ADD_PROCESS_REWARD_MODEL)
    prm = panel.rewards.items[-1]
    type_text(qtbot, prm.model.line, "prm")
    type_text(qtbot, prm.delimiter.line, "Step ")
    type_text(qtbot, prm.options.option_widget("step_tag"), " <step>")
    panel.validate_now()
    assert panel.problems == []
    path = panel.doc.save()

    saved = yaml.safe_load(path.read_text())
    assert saved["rewards"][0]["step_delimiter"] == "\n\n"
    assert "step_delimiter" not in saved["rewards"][1]  # unset: left out
    assert saved["rewards"][2] == {"name": "process_reward_model", "weight": 1.0, "step_delimiter": "Step ",
                                   "options": {"model": "prm", "step_tag": " <step>"}}
    written, _ = panel.doc.validate()
    assert preset_from_dict(saved) == written

    doc = PresetDocument()
    doc.open(path)
    other = SetupPanel(doc)
    qtbot.addWidget(other)
    assert doc.data == panel.doc.data and not doc.dirty
    assert [row.kind for row in other.rewards.items] == ["registry", "registry", "process_reward_model"]
    assert other.rewards.items[0].delimiter.line.text() == "\\n\\n"  # shown as it was typed
    assert other.rewards.items[1].delimiter.line.text() == ""
    assert other.rewards.items[2].delimiter.line.text() == "Step "
    assert other.rewards.items[2].model.value() == "prm"
    assert other.rewards.items[2].options.option_widget("step_tag").text() == " <step>"
    assert doc.validate()[0] == written

    # emptied: unset again, and the key leaves the entry
    other.show()
    type_text(qtbot, other.rewards.items[0].delimiter.line, "")
    assert "step_delimiter" not in doc.get("rewards")[0]


# --------------------------------------------------- sort_steps and the estimator


def test_sort_steps_with_the_grpo_estimator_is_a_problem_at_the_reward(panel, qtbot):
    assert "sort_steps" in combo_items(panel.rewards.adder)
    assert "sort_steps" in combo_items(panel.rewards.items[0].name.combo)  # a registry reward like the others
    add(panel, qtbot, "sort_steps")
    row = panel.rewards.items[-1]
    assert rewards(panel)[-1] == {"name": "sort_steps", "weight": 1.0, "options": {}}
    assert row.delimiter.line.placeholderText() == "none: the reward places its steps"
    assert panel.doc.get("algorithm.advantage_estimator") == "grpo"

    panel.validate_now()
    (path, message), = panel.problems
    assert path == "rewards.2"
    assert "sort_steps" in message and "advantage_estimator grpo" in message and "grpo_process" in message
    assert "advantage_estimator grpo" in row.problems.error.text() and not row.problems.error.isHidden()
    assert "<a href='rewards.2'>rewards.2</a>" in panel.summary.text()

    set_estimator(panel, qtbot, "grpo_process")
    panel.validate_now()
    assert panel.problems == [] and row.problems.error.isHidden()
    assert "Ready to run" in panel.summary.text()

    # a delimiter makes any reward a step reward: back on grpo, both are refused by the first
    set_estimator(panel, qtbot, "grpo")
    panel.validate_now()
    assert [p for p, _ in panel.problems] == ["rewards.2"]
    type_text(qtbot, panel.rewards.items[0].delimiter.line, "\\n")
    panel.validate_now()
    assert [p for p, _ in panel.problems] == ["rewards.0"]  # the first step reward is named
