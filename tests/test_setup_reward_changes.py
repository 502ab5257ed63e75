"""The set-up form's rewards marked as its other fields are (workbench/setup/rewards_editor.py,
workbench/setup/reward_changes.py): a component whose weight or options differ from the
preset's has them in blue and a Reset beside it; one added is framed, its Reset removes
it; one removed is named under the rows; Reset rewards puts the preset's rewards back.
Driven as a user drives it: typing, the Add component chooser, Remove, Reset."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

from PySide6.QtCore import Qt

from workbench.setup.document import PresetDocument
from workbench.setup.panel import SetupPanel
from workbench.setup.reward_changes import compare, differences
from workbench_helpers import type_text

ROOT = Path(__file__).resolve().parents[1]


def _panel(qtbot, tmp_path, monkeypatch) -> SetupPanel:
    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    path = tmp_path / "grpo-sort.yaml"
    shutil.copy(ROOT / "presets" / "grpo-sort.yaml", path)
    doc = PresetDocument()
    doc.open(path)
    panel = SetupPanel(doc)
    qtbot.addWidget(panel)
    panel.resize(1500, 1000)
    panel.show()
    qtbot.waitExposed(panel)
    panel.activateWindow()
    return panel


def _marked(row) -> list[str]:
    """The captions of a reward's row shown as changed."""
    captions = [key for key, label in row.captions.items() if label.styleSheet()]
    return captions + [f"options.{key}" for key, label in row.options._captions.items()
                       if "#1a5fb4" in label.styleSheet()]


def test_a_changed_reward_is_marked_and_its_reset_puts_the_presets_back(qtbot, tmp_path, monkeypatch):
    panel = _panel(qtbot, tmp_path, monkeypatch)
    rewards, doc = panel.rewards, panel.doc
    preset = copy.deepcopy(doc.get("rewards"))
    assert [r["name"] for r in preset] == ["exact_match", "sort_inclusion_order"]
    partial = rewards.items[1]
    assert not partial.reset.isVisible() and not rewards.reset_all.isVisible() and not _marked(partial)

    type_text(qtbot, partial.weight.line, "0.25")
    assert doc.get("rewards")[1]["weight"] == 0.25
    assert partial.reset.isVisible() and _marked(partial) == ["weight"]
    assert "weight: 0.5 in the preset, 0.25 now" in partial.reset.toolTip()
    assert not rewards.items[0].reset.isVisible()  # the other component is the preset's
    assert rewards.reset_all.isVisible()
    assert rewards.changes.text() == "Changed from the preset: sort_inclusion_order: weight"

    type_text(qtbot, partial.options.option_widget("inclusion_weight"), "0.7")
    assert _marked(rewards.items[1]) == ["weight", "options.inclusion_weight"]
    type_text(qtbot, rewards.items[1].options.option_widget("inclusion_weight"), "0.5")  # its default
    assert _marked(rewards.items[1]) == ["weight"]  # the default written out is no change

    qtbot.mouseClick(rewards.items[1].reset, Qt.LeftButton)
    assert doc.get("rewards") == preset
    assert rewards.items[1].weight.line.text() == "0.5" and not rewards.items[1].reset.isVisible()
    assert not rewards.reset_all.isVisible() and not _marked(rewards.items[1])


def test_added_and_removed_rewards_are_marked_and_reset_rewards_restores_the_presets(qtbot, tmp_path,
                                                                                      monkeypatch):
    panel = _panel(qtbot, tmp_path, monkeypatch)
    rewards, doc = panel.rewards, panel.doc
    preset = copy.deepcopy(doc.get("rewards"))

    rewards.adder.setFocus(Qt.OtherFocusReason)
    qtbot.keyClicks(rewards.adder, "numeric_match")  # the closed chooser's keyboard search
    assert rewards.adder.currentText() == "numeric_match"
    qtbot.mouseClick(rewards.add_button, Qt.LeftButton)
    added = rewards.items[2]
    qtbot.waitUntil(added.isVisible, timeout=2000)  # a new row is shown by the event loop
    assert added.property("added") is True and added.reset.isVisible()
    assert added.reset.toolTip() == "Not in the preset: Reset removes it"
    assert not rewards.items[0].reset.isVisible() and not rewards.items[1].reset.isVisible()
    assert rewards.changes.text() == "Changed from the preset: added numeric_match"

    qtbot.mouseClick(rewards.items[0].remove, Qt.LeftButton)  # exact_match
    assert [r["name"] for r in doc.get("rewards")] == ["sort_inclusion_order", "numeric_match"]
    # The preset's sort_inclusion_order, now first, is still the preset's: not marked.
    assert not rewards.items[0].reset.isVisible() and rewards.items[0].property("added") is not True
    assert rewards.changes.text() == "Changed from the preset: added numeric_match; removed exact_match"
    assert "exact_match (weight 1.0), sort_inclusion_order (weight 0.5)" in rewards.reset_all.toolTip()

    qtbot.mouseClick(rewards.items[1].reset, Qt.LeftButton)  # the added one's Reset removes it
    assert [r["name"] for r in doc.get("rewards")] == ["sort_inclusion_order"]
    qtbot.mouseClick(rewards.reset_all, Qt.LeftButton)
    assert doc.get("rewards") == preset and len(rewards.items) == 2
    qtbot.waitUntil(rewards.items[1].isVisible, timeout=2000)
    assert not rewards.reset_all.isVisible() and not any(row.reset.isVisible() for row in rewards.items)
    assert not any(row.property("added") for row in rewards.items)

    # Saved, the form's rewards are the preset's: nothing is marked any more.
    type_text(qtbot, rewards.items[0].weight.line, "2")
    assert rewards.items[0].reset.isVisible()
    doc.save(tmp_path / "saved.yaml")
    panel.refresh()
    assert not rewards.items[0].reset.isVisible() and not rewards.reset_all.isVisible()


def test_entries_are_paired_by_label_then_by_name():
    preset = [{"name": "reward_model", "label": "rm", "options": {"model": "a"}}, {"name": "exact_match"}]
    # Reordered, and the reward model's label edited: the same two, each with what differs.
    current = [{"name": "exact_match", "weight": 1.0, "options": {}},
               {"name": "reward_model", "label": "rm2", "options": {"model": "b"}}]
    changes = compare(current, preset)
    assert changes.pairs == [1, 0] and changes.removed == []
    assert changes.differences == {0: [], 1: ["label", "options.model"]}
    assert changes.any  # the order differs too
    assert differences({"name": "x", "step_delimiter": "\n"}, {"name": "x"}) == ["step_delimiter"]


def test_docstring_examples_hold():
    import doctest

    from workbench.setup import reward_changes

    result = doctest.testmod(reward_changes)
    assert result.attempted > 0 and result.failed == 0
