"""The inspector's navigation model (workbench/inspector/navigation.py), without Qt:
which step and rollout are shown and where each move goes, checked by hand at the
edges (the first and last step and rollout, a missing step, an empty run)."""

from __future__ import annotations

import sys

import pytest

from inspector_helpers import dpo_record, grpo_record, write_steps
from workbench.inspector.index import TrajectoryIndex
from workbench.inspector.navigation import SCOPE_STEP, Navigation, PromptChoice, Target


@pytest.fixture
def nav(tmp_path):
    """Steps 2 (rollouts 0, 1 in group 0 and 2 in group 1), 5 (rollouts 0, 1) and 9 (rollout 0)."""
    write_steps(tmp_path, {
        2: [grpo_record(2, 0, 0, 1.0, 0.5), grpo_record(2, 1, 0, 0.0, -0.5), grpo_record(2, 2, 1, 1.0, 0.0)],
        5: [grpo_record(5, 0, 0, 1.0, 0.5), grpo_record(5, 1, 0, 0.0, -0.5)],
        9: [grpo_record(9, 0, 0, 1.0, 0.0)],
    })
    index = TrajectoryIndex(tmp_path)
    index.poll()
    assert index.steps == [2, 5, 9]
    return Navigation(index)


def test_nothing_to_show_goes_nowhere(tmp_path):
    for nav in (Navigation(), Navigation(TrajectoryIndex(tmp_path))):
        assert nav.current is None and nav.current_index is None and nav.steps == []
        assert nav.next_position() is None and nav.prev_position() is None
        assert nav.neighbour_step(+1) is None and nav.neighbour_step(-1) is None
        assert nav.typed_step(3) is None and nav.newest_step_to_follow() is None
        assert nav.step_to_show_after_poll(True, True) == (None, False)
        assert nav.moves() == dict.fromkeys(("prev_step", "next_step", "prev_rollout", "next_rollout"), False)
        assert nav.open_step(2) is False and nav.step is None and nav.position == -1
        assert nav.pick(0) is False and nav.rewritten() is False
        assert nav.key == "advantage" and nav.scope == SCOPE_STEP and nav.selected == -1
    assert Navigation().locate(2, 0) == Target(None, None, False)
    assert Navigation(TrajectoryIndex(tmp_path)).locate(2, 0) == Target(None, None, False)


def test_first_poll_opens_the_newest_step(nav):
    assert nav.step_to_show_after_poll(changed=True, following=True) == (9, False)
    assert nav.step_to_show_after_poll(changed=False, following=False) == (9, False)  # nothing shown yet


def test_left_right_stop_at_the_first_and_last_rollout(nav):
    assert nav.open_step(2)
    assert (nav.step, nav.position, nav.current_index) == (2, 0, 0)
    assert nav.prev_position() is None and nav.next_position() == 1  # ← at the first: nowhere
    assert nav.moves() == {"prev_step": False, "next_step": True, "prev_rollout": False, "next_rollout": True}
    assert nav.pick(1) and nav.pick(2)
    assert nav.next_position() is None and nav.prev_position() == 1  # → at the last: nowhere
    assert nav.moves() == {"prev_step": False, "next_step": True, "prev_rollout": True, "next_rollout": False}
    assert nav.pick(2) is False  # already shown
    assert nav.pick(3) is False and nav.pick(-1) is False and nav.position == 2  # out of range
    assert nav.position_of(1) == 1 and nav.position_of(7) is None


def test_up_down_stop_at_the_first_and_last_step(nav):
    nav.open_step(2)
    assert nav.neighbour_step(-1) is None and nav.neighbour_step(+1) == 5  # ↑ at the first step: nowhere
    nav.open_step(5)
    assert nav.neighbour_step(-1) == 2 and nav.neighbour_step(+1) == 9
    assert nav.moves()["prev_step"] and nav.moves()["next_step"]
    nav.open_step(9)
    assert nav.neighbour_step(+1) is None and nav.neighbour_step(-1) == 5  # ↓ at the last: nowhere
    assert nav.moves() == {"prev_step": True, "next_step": False, "prev_rollout": False, "next_rollout": False}


def test_opening_a_step_keeps_the_rollout_where_it_can(nav):
    nav.open_step(2, index=2)
    assert nav.position == 2 and nav.current.index == 2
    assert nav.open_step(5, index=nav.current_index)  # step 5 has no rollout 2: the first
    assert nav.position == 0
    nav.open_step(2, index=2)
    nav.open_step(5, keep_position=True)  # position 2 clipped to step 5's last
    assert nav.position == 1
    assert nav.open_step(4) is False  # no records: nothing changes
    assert (nav.step, nav.position) == (5, 1)
    nav.open_step(9, index=0)
    assert nav.current.key == (9, 0)


def test_typed_steps_go_to_the_nearest_recorded(nav):
    assert nav.typed_step(5) == 5
    assert nav.typed_step(6) == 5 and nav.typed_step(8) == 9
    assert nav.typed_step(7) == 5  # as far from 5 as from 9: the earlier
    assert nav.typed_step(-3) == 2 and nav.typed_step(100) == 9


def test_following_the_newest_step(nav):
    nav.open_step(5)
    assert nav.is_newest(9) and not nav.is_newest(5)
    assert nav.newest_step_to_follow() == 9
    assert nav.step_to_show_after_poll(changed=True, following=True) == (9, True)
    assert nav.step_to_show_after_poll(changed=True, following=False) == (None, False)
    assert nav.step_to_show_after_poll(changed=False, following=True) == (None, False)
    nav.open_step(9)
    assert nav.newest_step_to_follow() is None
    assert nav.step_to_show_after_poll(changed=True, following=True) == (None, False)


def test_a_vanished_or_rewritten_step(nav, tmp_path):
    nav.open_step(5)
    assert nav.rewritten() is False
    write_steps(tmp_path, {5: [grpo_record(5, 0, 0, 1.0, 0.5, n=30)]})  # a resume redid step 5
    assert nav.rewritten() is True
    (tmp_path / "trajectories" / "step_000005.jsonl").unlink()
    nav.index.poll()
    nav.index._polls = 9  # the next poll re-lists (every 10th)
    nav.index.poll()
    assert nav.steps == [2, 9]
    assert nav.step_to_show_after_poll(changed=True, following=False) == (9, False)


def test_locating_a_rollout(nav):
    assert nav.locate(5, 1) == Target(5, 1, True)
    # Not recorded, but its step is: the first recorded rollout of its group, on the Group page.
    target = nav.locate(2, 7, group=1, recorded=3)
    assert (target.step, target.index, target.found, target.group_page) == (2, 2, False, True)
    assert "training.record_rollouts = 3" in target.message and "Group page" in target.message
    target = nav.locate(2, 7)  # group unknown: the step's first
    assert (target.step, target.index, target.group_page) == (2, None, False)
    assert target.message.endswith("Showing the step's recorded rollouts.") and "record_rollouts" not in target.message
    target = nav.locate(7, 0)  # a step without records: the nearest (the earlier on a tie)
    assert (target.step, target.index, target.found) == (5, None, False)
    assert "showing step 5, the nearest that has" in target.message


def test_the_quantity_follows_what_the_record_has(nav):
    assert nav.fit_quantity(["advantage", "logprob"], "grpo") == "advantage"
    assert nav.fit_quantity(["logprob", "kl"], "grpo") == "logprob"
    assert nav.fit_quantity(["logprob", "kl"], "grpo") == "logprob"  # kept while there
    nav.key = "entropy"
    assert nav.fit_quantity(["advantage", "implicit_reward"], "dpo") == "implicit_reward"
    nav.key = "entropy"
    assert nav.fit_quantity(["logprob", "advantage"], "dpo") == "advantage"
    assert nav.fit_quantity([], "grpo") == ""


def test_dpo_pairs_navigate_like_rollouts(tmp_path):
    write_steps(tmp_path, {1: [dpo_record(1, 0), dpo_record(1, 1)]})
    nav = Navigation(TrajectoryIndex(tmp_path))
    nav.index.poll()
    assert nav.open_step(1, index=1) and nav.next_position() is None and nav.prev_position() == 0


def test_the_prompt_history_follows_until_the_user_picks():
    choice = PromptChoice()
    assert choice.following and choice.prompt == ""
    assert choice.options(None) == []
    assert choice.follow("a") is True and choice.prompt == "a"
    assert choice.follow("a") is False  # the same prompt: nothing to redo
    assert choice.pick("a") is False and choice.following  # picking the shown one changes nothing
    assert choice.pick("b") is True and not choice.following
    assert choice.follow("c") is False and choice.prompt == "b"  # no longer following
    choice.following = True  # the box ticked again
    assert choice.follow("c") is True and choice.prompt == "c"
    evals = [(10, [{"prompt": "q"}, {"prompt": "c"}, "junk"]), (20, [{"prompt": "later"}])]
    assert choice.options(evals) == [("c", "c"), ("held out: q", "q")]  # only the first evaluation's
    choice.reset()
    assert choice.prompt == "" and choice.options(evals) == [("held out: q", "q"), ("held out: c", "c")]


def test_the_model_imports_no_qt():
    import subprocess

    code = ("import sys, workbench.inspector.navigation, workbench.inspector.index, workbench.inspector.export; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_doctests():
    import doctest

    import workbench.inspector.navigation as module

    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0
