"""Inspector fixes (pytest-qt, offscreen): the Group page's colours are scaled over the
whole group (its unrecorded completions' advantages from the samples event); the arrow
keys leave an open list alone; a quantity the run recorded no value of is not offered;
a partial character is drawn as ∅."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from inspector_helpers import grpo_record, grpo_run, write_steps
from workbench.inspector.view import GROUP_PAGE
from workbench.inspector.colors import diverging_hex
from workbench.inspector.records import Trajectory, token_display, token_segments
from window_fixtures import inspector, open_run  # noqa: F401 (fixtures)
from workbench_helpers import write_run


def group_of_eight_run(folder):
    """One step, one group of 8: the 4 recorded completions at advantage -0.35; the best
    answer (+2.47) and three others only in the samples event."""
    run_dir = write_run(folder, "group-of-8", steps=1, samples_per_step=0)
    advantages = [-0.35] * 4 + [2.47, -0.35, -0.35, -0.35]
    samples = [{"index": i, "group": 0, "prompt": "sort 3 1 2 =", "completion": f" answer {i}",
                "reward": 1.0 if i == 4 else 0.0, "rewards": {"exact_match": 1.0 if i == 4 else 0.0},
                "advantage": adv} for i, adv in enumerate(advantages)]
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"type": "samples", "time": 0, "step": 1, "samples": samples}) + "\n")
    write_steps(run_dir, {1: [grpo_record(1, i, 0, 0.0, -0.35, prompt="sort 3 1 2 =") for i in range(4)]})
    return run_dir


def test_the_group_page_is_scaled_over_every_completion_of_the_group(inspector, tmp_path):
    open_run(inspector, group_of_eight_run(tmp_path))
    inspector.set_quantity("advantage")
    inspector.pages.setCurrentIndex(GROUP_PAGE)
    group = inspector.group_view
    assert len(group.rows) == 8
    assert group.scale.scale == pytest.approx(2.47)  # was 0.35: the recorded four alone
    assert "completions of the group" in group.scale.how
    # -0.35 is a light pink on a ±2.47 scale, not the deepest one; the chips agree.
    assert diverging_hex(-0.35, group.scale.scale) != diverging_hex(-0.35, 0.35)
    assert diverging_hex(-0.35, 2.47) in group.rows[0].header.text()
    assert diverging_hex(2.47, 2.47) in group.rows[4].header.text()


def test_up_and_down_in_an_open_colour_list_move_in_the_list(inspector, tmp_path, qtbot):
    open_run(inspector, grpo_run(tmp_path, steps=3))
    inspector.step_box.setValue(2)
    assert inspector.step == 2
    box = inspector.quantity_box
    box.setFocus()
    box.showPopup()
    popup = box.view()
    qtbot.waitUntil(lambda: popup.isVisible() and QApplication.focusWidget() is popup, timeout=3000)
    row = popup.currentIndex().row()
    qtbot.keyClick(popup, Qt.Key_Down)
    assert inspector.step == 2  # was 3: the step moved under the open list
    assert popup.currentIndex().row() == row + 1
    qtbot.keyClick(popup, Qt.Key_Escape)
    qtbot.waitUntil(lambda: not popup.isVisible(), timeout=3000)
    # Closed, the pickers step again (as documented).
    box.setFocus()
    qtbot.keyClick(box, Qt.Key_Down)
    assert inspector.step == 3


def test_a_quantity_with_no_recorded_value_is_not_offered():
    record = grpo_record(1, 0, 0, 1.0, 0.5)
    n = len(record["tokens"])
    record["ref_logprob"] = [None] * n  # beta 0: no reference pass
    record["kl"] = [None] * n
    keys = Trajectory.from_record(record).quantities()
    assert "kl" not in keys and "ref_logprob" not in keys
    assert keys[:2] == ["advantage", "logprob"]


def test_a_partial_character_is_drawn_as_the_empty_set_mark():
    assert token_segments("\ufffd") == [("∅", "mark")]
    assert token_display(" \ufffd") == "·∅"


def test_fewer_rollouts_than_a_small_group_record_the_whole_first_group():
    from types import SimpleNamespace

    from engine.algorithms.base import Trainer
    from engine.distributed.world import World

    def recorded(record_rollouts: int, batch: int, group: int, world: World = World()) -> int:
        trainer = SimpleNamespace(cfg=SimpleNamespace(record_rollouts=record_rollouts), world=world)
        return Trainer.num_recorded(trainer, batch, group)

    assert recorded(4, 32, 8) == 8  # was 4: half a group, its best answer maybe not among them
    assert recorded(2, 8, 4) == 4
    assert recorded(0, 32, 8) == 0  # recording off stays off
    assert recorded(4, 64, 16) == 4  # a large group: as asked
    assert recorded(12, 32, 8) == 12 and recorded(4, 16, 1) == 4  # a group or more; PPO's groups of 1
    assert recorded(4, 16, 8, World(rank=0, size=2)) == 8  # rank 0's share is the first group
