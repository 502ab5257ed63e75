"""Runs you can tell apart (issue 41): a run's label is its preset plus the fields that
differ from it (workbench/runs/labels.py, a pure function), or the name typed at Run; the
window records what it is worked out from (RUN/workbench/label.json), shows it in the
header and the title. A failed run's banner runs its preset again. (Opening a run loads a
copy of its preset into Set-up: tests/test_runs_list.py.)

Run folders are written by hand; the one launch goes through the stand-in engine
(tests/stand_in_engine.py), as the window is the subject."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from PySide6.QtCore import Qt

from workbench.runs.labels import (LABEL_FILE, bundled_preset, distinct, format_value, label_of, run_label,
                                   write_label_record)
from engine.run import rundir
from workbench.runs.process import LAUNCH_PRESET, workbench_dir, write_exit_record, write_process_record
from test_runs_list import small_run
from test_workbench_resume import dead_pid
from workbench_helpers import small_preset, type_text
from window_fixtures import click_run, make_window, stand_in, window  # noqa: F401 (fixtures)

STAND_IN_TIMEOUT_MS = 30_000

GRPO = {"name": "grpo-sort", "training": {"learning_rate": 1e-3, "max_steps": 400},
        "algorithm": {"name": "grpo", "beta": 0.0}, "model": {"lora": {"r": 16, "alpha": 32.0}},
        "rewards": [{"name": "exact_match", "weight": 1.0}, {"name": "sort_inclusion_order", "weight": 0.5}]}


def changed(preset: dict, **paths) -> dict:
    """A copy of `preset` with dotted fields set (`training__learning_rate=3e-4`)."""
    out = copy.deepcopy(preset)
    for path, value in paths.items():
        *parents, last = path.split("__")
        node = out
        for key in parents:
            node = node[key]
        node[last] = value
    return out


# ------------------------------------------------------------------ the label


def test_the_label_is_the_preset_and_the_fields_that_differ():
    run = changed(GRPO, training__learning_rate=3e-4, algorithm__beta=0.04)
    label = run_label(run, GRPO, "grpo-sort")
    assert label.text == "grpo-sort · lr 3e-4, beta 0.04"  # in the preset's order; lr is learning_rate
    assert label.changes == (("training.learning_rate", 3e-4, 1e-3), ("algorithm.beta", 0.04, 0.0))
    assert "training.learning_rate: 3e-4 (preset: 1e-3)" in label.detail.splitlines()
    assert run_label(GRPO, GRPO, "grpo-sort").text == "grpo-sort"  # nothing differs: the preset's name
    renamed = changed(GRPO, name="my-copy")
    assert run_label(renamed, GRPO, "grpo-sort").text == "grpo-sort"  # a name is not a setting


def test_a_nested_field_and_a_reward_weight_are_named_by_their_parent():
    run = changed(GRPO, model__lora__r=8)
    run["rewards"][1]["weight"] = 2.0
    assert run_label(run, GRPO, "grpo-sort").text == "grpo-sort · lora.r 8, sort_inclusion_order.weight 2"
    swapped = changed(GRPO)
    swapped["rewards"][1] = {"name": "sort_position", "weight": 0.5}
    assert run_label(swapped, GRPO, "grpo-sort").text == "grpo-sort · +sort_position, -sort_inclusion_order"
    many = changed(run, training__learning_rate=3e-4, algorithm__beta=0.1, training__max_steps=100)
    assert run_label(many, GRPO, "grpo-sort").text.endswith(", +2 more")  # three said, all in the tool tip
    assert len(run_label(many, GRPO, "grpo-sort").detail.splitlines()) == 5


def test_a_typed_name_is_the_label_and_keeps_the_differences_for_its_tooltip():
    run = changed(GRPO, training__learning_rate=3e-4)
    label = run_label(run, GRPO, "grpo-sort", typed="  slow lr  ")
    assert (label.text, label.typed) == ("slow lr", True)
    assert label.changes == (("training.learning_rate", 3e-4, 1e-3),)
    assert run_label(run, GRPO, "grpo-sort", typed="   ").text == "grpo-sort · lr 3e-4"  # blank: no name


def test_values_read_short_and_shared_labels_are_told_apart():
    assert [format_value(v) for v in (3e-4, 5e-05, 0.04, 400, 2.0, False)] == ["3e-4", "5e-5", "0.04", "400", "2",
                                                                               "off"]
    assert distinct(["a", "a"], ["a-20261128-101500", "a-20261128-113000"]) == ["a (10:15:00)", "a (11:30:00)"]
    assert distinct(["a", "a", "b"], ["x", "y", "z"]) == ["x", "y", "b"]  # no launch time: the folders


def test_a_run_folder_is_labelled_from_its_record_or_its_bundled_preset(tmp_path):
    grpo_sort = bundled_preset("grpo-sort")
    assert grpo_sort is not None and grpo_sort["training"]["learning_rate"] == 1e-3
    # A run started in a terminal from presets/grpo-sort.yaml with --set training.learning_rate=3e-4.
    headless = tmp_path / "grpo-sort-20261128-100000"
    headless.mkdir()
    run_preset = changed(grpo_sort, training__learning_rate=3e-4)
    assert label_of(headless, run_preset).text == "grpo-sort · lr 3e-4"
    # A hand-written preset.yaml holds a few fields: those it lacks are not differences.
    assert label_of(headless, {"name": "grpo-sort", "algorithm": {"name": "grpo"}}).text == "grpo-sort"
    # The window's record: the preset the form was opened as, and a typed name.
    mine = tmp_path / "mine"
    write_label_record(mine, None, "my-sweep", changed(grpo_sort, training__learning_rate=3e-4), "/p/my-sweep.yaml")
    assert label_of(mine, changed(grpo_sort, training__learning_rate=3e-4, algorithm__beta=0.04)).text == \
        "my-sweep · beta 0.04"
    write_label_record(mine, "baseline", "my-sweep", grpo_sort)
    assert label_of(mine, run_preset).text == "baseline"
    # Nothing to compare with: the preset's name, without the launch stamp.
    assert label_of(tmp_path / "x-20261128-100000", {"name": "x-20261128-100000"}).text == "x"


# ---------------------------------------------------------------- the window


def test_a_failed_runs_banner_runs_it_again_under_the_name_typed(window, qtbot, tmp_path, stand_in):
    # A run killed before its first checkpoint and without its preset.yaml: the banner says
    # so once, and offers Run again rather than a command for a terminal.
    killed = small_run(tmp_path / "runs", "killed-early", status="running")
    (killed / rundir.PRESET_FILE).unlink()
    pid = dead_pid()
    write_process_record(killed, pid, ["python", "-m", "engine", "run", "p.yaml", "--run-dir", str(killed)])
    write_exit_record(killed, pid, -9, killed=True)
    window.open_run(killed)
    banner = window.header.failure
    text = banner.message.text()
    assert banner.title.text() == "The run was killed" and text.count("killed") == 1 and "rl-engine" not in text
    assert "no complete checkpoint" in text and not banner.resume_button.isEnabled()
    assert banner.run_again_button.isEnabled()
    preset = small_preset(max_steps=400)
    run_dir = small_run(tmp_path / "runs", "broken-20261128-100000", status="failed", preset=preset)
    write_label_record(run_dir, "the broken one", "test", preset)
    window.open_run(run_dir)
    assert window.header.name.text() == "the broken one" and "the broken one" in window.windowTitle()
    assert banner.isVisible() and banner.run_again_button.isEnabled()
    assert "rl-engine" not in banner.message.text()  # a button, not a terminal command
    type_text(qtbot, window.run_control.name_field, "second try", finish=False)  # names the next run
    with qtbot.waitSignal(window.run_launched, timeout=STAND_IN_TIMEOUT_MS) as launched:
        qtbot.mouseClick(banner.run_again_button, Qt.LeftButton)
    again = Path(launched.args[0])
    assert again != run_dir and again.parent == run_dir.parent
    assert yaml.safe_load((workbench_dir(again) / LAUNCH_PRESET).read_text()) == preset  # the same settings
    record = json.loads((workbench_dir(again) / LABEL_FILE).read_text())
    assert record["name"] == "second try" and record["preset"] == "test"
    assert window.header.name.text() == "second try" and "second try" in window.windowTitle()
    assert window.run_control.name_field.text() == ""  # one run's name: the next is labelled by its preset


@pytest.fixture(autouse=True)
def _fast_stand_in(monkeypatch):
    monkeypatch.setenv("STAND_IN_SETUP_S", "0.05")
