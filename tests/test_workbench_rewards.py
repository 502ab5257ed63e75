"""The set-up panel's rewards editor (pytest-qt, offscreen): registry rewards, reward
models and custom Python functions, with label, weight and options, and the engine's
problems shown next to the fields they are about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFormLayout

from engine.preset.schema import preset_from_dict
from workbench.setup import rewards_editor
from workbench.setup.document import PresetDocument
from workbench.setup.panel import SetupPanel
from workbench.setup.rewards_editor import ADD_CUSTOM, ADD_REWARD_MODEL
from workbench_helpers import type_text
from window_fixtures import show_setup_panel

REWARDS_PY = '''\
def brevity(prompts, completions, target=10, *, scale=1.0, **fields):
    return [-scale * abs(len(c) - target) for c in completions]


def exact(prompts, completions, answer):
    return [float(c.strip() == a.strip()) for c, a in zip(completions, answer)]


def _helper(x):
    return x
'''


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "my_rewards.py").write_text(REWARDS_PY)
    return tmp_path


@pytest.fixture
def panel(qtbot, folder):
    """The set-up panel on the tests' small preset, saved in `folder` (its base_dir)."""
    return show_setup_panel(qtbot, folder)


def rewards(panel) -> list[dict]:
    return panel.doc.get("rewards")


def problems_at(panel, path: str) -> list[str]:
    return [message for p, message in panel.problems if p == path]


def add(panel, qtbot, choice: str) -> None:
    panel.rewards.adder.setCurrentText(choice)
    qtbot.mouseClick(panel.rewards.add_button, Qt.LeftButton)


def model_folder(path: Path, labels: int) -> Path:
    """A folder that looks like a sequence-classification model to the torch-free checks."""
    path.mkdir()
    config = {"architectures": ["GPT2ForSequenceClassification"], "model_type": "gpt2",
              "id2label": {str(i): f"LABEL_{i}" for i in range(labels)}}
    (path / "config.json").write_text(json.dumps(config))
    return path


# ------------------------------------------------------------------ reward model


def test_adding_a_reward_model_shows_its_problems_at_the_model_field(panel, folder, qtbot):
    add(panel, qtbot, ADD_REWARD_MODEL)
    row = panel.rewards.items[-1]
    assert row.kind == "reward_model" and rewards(panel)[-1] == {"name": "reward_model", "weight": 1.0,
                                                                   "options": {"model": ""}}
    panel.validate_now()
    model_row = row.field_rows["options.model"]
    assert "needs the option 'model'" in model_row.error.text() and not model_row.error.isHidden()
    assert "rewards.2.options.model" in panel.summary.text()

    type_text(qtbot, row.model.line, "./no-such-rm")
    panel.validate_now()
    assert model_row.error.text().startswith("folder ./no-such-rm does not exist")

    model_folder(folder / "classifier", labels=3)
    type_text(qtbot, row.model.line, "classifier")  # relative: found next to the preset
    panel.validate_now()
    assert "num_labels 3" in model_row.error.text()

    model_folder(folder / "rm", labels=1)
    type_text(qtbot, row.model.line, "rm")
    panel.validate_now()
    assert model_row.error.isHidden() and panel.problems == []
    assert rewards(panel)[-1]["options"] == {"model": "rm"}


def test_reward_model_options_label_and_weight(panel, folder, qtbot):
    model_folder(folder / "rm", labels=1)
    panel.rewards.add_reward_model(str(folder / "rm"))
    row = panel.rewards.items[-1]
    assert set(row.options._rows) == {"batch_size", "max_length", "dtype"}  # `model` has its own field
    type_text(qtbot, row.options.option_widget("batch_size"), "8")
    type_text(qtbot, row.options.option_widget("max_length"), "512")
    type_text(qtbot, row.weight.line, "0.5")
    type_text(qtbot, row.label.line, "judge")
    assert rewards(panel)[-1] == {"name": "reward_model", "weight": 0.5, "label": "judge",
                                  "options": {"model": str(folder / "rm"), "batch_size": 8, "max_length": 512}}
    type_text(qtbot, row.options.option_widget("batch_size"), "many")
    panel.validate_now()
    assert "option 'batch_size' must be an int >= 1" in row.problems.error.text()
    type_text(qtbot, row.options.option_widget("batch_size"), "")
    type_text(qtbot, row.label.line, "")  # back to the default label: the key goes
    assert "label" not in rewards(panel)[-1]
    assert row.label.line.placeholderText() == "reward_model"
    panel.validate_now()
    assert panel.problems == []


def test_a_second_reward_model_gets_its_own_label(panel, folder, qtbot):
    model_folder(folder / "rm", labels=1)
    panel.rewards.add_reward_model("rm")
    panel.rewards.add_reward_model("rm")
    assert [r.get("label") for r in rewards(panel)[-2:]] == [None, "reward_model_2"]
    panel.validate_now()
    assert panel.problems == []
    # a clash typed by the user is the engine's message, on the list
    type_text(qtbot, panel.rewards.items[-1].label.line, "reward_model")
    panel.validate_now()
    assert "are both logged as 'reward_model'" in panel.rewards.list_row.error.text()


# ---------------------------------------------------------------- custom function


def test_adding_a_python_function_from_the_file_dialog(panel, folder, monkeypatch, qtbot):
    monkeypatch.setattr(rewards_editor.QFileDialog, "getOpenFileName",
                        lambda *args, **kwargs: (str(folder / "my_rewards.py"), ""))
    add(panel, qtbot, ADD_CUSTOM)
    row = panel.rewards.items[-1]
    assert row.kind == "custom"
    # relative to the preset's folder; the first function that takes (prompts, completions)
    assert rewards(panel)[-1] == {"name": "my_rewards.py:brevity", "weight": 1.0, "options": {}}
    assert row.file.value() == "my_rewards.py" and row.function.value() == "brevity"
    assert [row.function.combo.itemText(i) for i in range(row.function.combo.count())] == ["brevity", "exact"]
    assert row.label.line.placeholderText() == "brevity"
    # its keyword parameters with defaults are its options
    assert set(row.options._rows) == {"target", "scale"}
    assert row.options.option_widget("target").placeholderText() == "default: 10"
    type_text(qtbot, row.options.option_widget("target"), "4")
    assert rewards(panel)[-1]["options"] == {"target": 4}
    panel.validate_now()
    assert panel.problems == []


def test_a_cancelled_file_dialog_adds_nothing(panel, monkeypatch, qtbot):
    monkeypatch.setattr(rewards_editor.QFileDialog, "getOpenFileName", lambda *args, **kwargs: ("", ""))
    before = rewards(panel)
    add(panel, qtbot, ADD_CUSTOM)
    assert rewards(panel) == before


def test_function_and_file_problems_are_shown_at_the_source(panel, folder, qtbot):
    panel.rewards.add_custom(str(folder / "my_rewards.py"))
    row = panel.rewards.items[-1]
    source = row.field_rows["name"]
    type_text(qtbot, row.function.combo.lineEdit(), "brevty")
    assert row.function.combo.currentText() == "brevty"
    assert rewards(panel)[-1]["name"] == "my_rewards.py:brevty"
    panel.validate_now()
    assert source.error.text() == (f"no function 'brevty' in {(folder / 'my_rewards.py').resolve()}; "
                                   "it defines: brevity, exact")
    assert problems_at(panel, "rewards.2.name")

    # pick `exact` from the list: the arrow keys step through it
    qtbot.mouseClick(row.function.combo.lineEdit(), Qt.LeftButton)
    for _ in range(row.function.combo.count()):
        if row.function.combo.currentText() == "exact":
            break
        qtbot.keyClick(row.function.combo, Qt.Key_Down)
    assert rewards(panel)[-1]["name"] == "my_rewards.py:exact"
    panel.validate_now()
    assert source.error.isHidden()
    assert set(row.options._rows) == set()  # exact takes no options

    type_text(qtbot, row.file.line, "missing.py")
    panel.validate_now()
    assert source.error.text().startswith("file missing.py not found")

    type_text(qtbot, row.file.line, "")
    panel.validate_now()
    assert "is not FILE.py:FUNCTION" in source.error.text()  # the engine's own message


def test_options_a_function_does_not_take_are_refused(panel, folder):
    panel.doc.set("rewards", rewards(panel) + [{"name": "my_rewards.py:exact", "options": {"tolerance": 0.5}}])
    panel.validate_now()
    row = panel.rewards.items[-1]
    assert "exact has no parameter 'tolerance'" in row.problems.error.text()
    labels = [row.options.form.itemAt(i, QFormLayout.LabelRole).widget().text()
              for i in range(row.options.form.rowCount())]
    assert labels == ["tolerance (unknown)"]  # shown, so it can be cleared


def test_browse_writes_a_path_relative_to_the_preset(panel, folder, monkeypatch, qtbot):
    (folder / "lib").mkdir()
    (folder / "lib" / "more.py").write_text("def shorter(prompts, completions, **fields):\n    return [0.0]\n")
    panel.rewards.add_custom(str(folder / "my_rewards.py"))
    row = panel.rewards.items[-1]
    monkeypatch.setattr(rewards_editor.QFileDialog, "getOpenFileName",
                        lambda *args, **kwargs: (str(folder / "lib" / "more.py"), ""))
    qtbot.mouseClick(row.file.browse, Qt.LeftButton)
    assert rewards(panel)[-1]["name"] == "lib/more.py:shorter"  # the new file's function


def test_rewards_of_every_kind_round_trip_through_a_preset_file(panel, folder, qtbot):
    model_folder(folder / "rm", labels=1)
    panel.rewards.add_reward_model("rm")
    panel.rewards.add_custom(str(folder / "my_rewards.py"))
    type_text(qtbot, panel.rewards.items[-1].options.option_widget("target"), "3")
    type_text(qtbot, panel.rewards.items[-1].label.line, "short")
    panel.validate_now()
    assert panel.problems == []
    path = panel.doc.save()
    saved = yaml.safe_load(path.read_text())["rewards"]
    assert saved[2:] == [
        {"name": "reward_model", "weight": 1.0, "options": {"model": "rm"}},
        {"name": "my_rewards.py:brevity", "label": "short", "weight": 1.0, "options": {"target": 3}},
    ]
    assert [r.component_name for r in preset_from_dict(yaml.safe_load(path.read_text())).rewards] == \
        ["exact_match", "sort_position", "reward_model", "short"]

    doc = PresetDocument()
    doc.open(path)
    other = SetupPanel(doc)
    qtbot.addWidget(other)
    assert [row.kind for row in other.rewards.items] == ["registry", "registry", "reward_model", "custom"]
    assert other.rewards.items[2].model.value() == "rm"
    assert other.rewards.items[3].file.value() == "my_rewards.py"
    assert other.rewards.items[3].label.value() == "short"
    assert not doc.dirty

    # removing a component rebuilds the rows below it as their own kind
    other.show()
    qtbot.mouseClick(other.rewards.items[2].remove, Qt.LeftButton)
    assert [row.kind for row in other.rewards.items] == ["registry", "registry", "custom"]
    assert other.rewards.items[2].function.value() == "brevity"


def test_doctests_of_the_rewards_editor():
    import doctest

    from workbench.setup import reward_fields

    result = doctest.testmod(reward_fields)
    assert result.failed == 0 and result.attempted >= 3
