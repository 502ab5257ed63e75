"""The inspector's Qt-free model: records of each algorithm, the quantities offered,
the on-disk index of step files (lazy, live, rewritten files), GRPO groups and their
no-signal flag, the prompt history, how tokens are drawn, tooltips and export."""

from __future__ import annotations

import html
import json
import re
import time

import numpy as np
import pytest

from engine.run import rundir
from inspector_helpers import dpo_record, grpo_record, ppo_record, write_steps
from workbench.inspector.colors import text_hex
from workbench.inspector.export import export_html, export_json, tooltip_html
from workbench.inspector.index import TrajectoryIndex, build_group, prompt_history
from workbench.inspector.quantities import step_scale, trajectory_scale
from workbench.run_declaration import DPO, GRPO, PPO
from workbench.inspector.records import Trajectory, token_display, token_segments
from workbench.runs.rundata import RunData
from workbench_helpers import write_run


# ------------------------------------------------------------------ records


def test_a_grpo_record_without_algorithm_is_grpo_with_its_quantities():
    record = grpo_record(3, 1, 0, 0.5, 0.7)
    t = Trajectory.from_record(record)
    assert (t.algorithm, t.step, t.index, t.group) == (GRPO, 3, 1, 0)
    assert t.quantities() == ["advantage", "logprob", "probability", "ref_logprob", "kl", "entropy", "ratio"]
    side = t.sides[0]
    assert len(side) == len(record["tokens"]) and side.numbers["logprob"][2] == record["logprob"][2]
    assert t.advantage == pytest.approx(0.7)
    assert "adv +0.7" in t.label() and "reward 0.5" in t.label()


def test_null_floats_become_nan_and_unknown_per_token_keys_are_kept():
    record = grpo_record(1, 0, 0, 1.0, 0.5, n=4)
    record["entropy"][1] = None
    record["new_signal"] = [0.1, -0.2, 0.3, None]
    record["note"] = "text is not a quantity"
    t = Trajectory.from_record(record)
    assert np.isnan(t.sides[0].numbers["entropy"][1])
    assert "new_signal" in t.quantities() and "note" not in t.quantities()
    assert t.quantities()[-1] == "new_signal"  # unknown ones after the known ones


def test_ppo_records_offer_value_return_and_per_token_rewards():
    t = Trajectory.from_record(ppo_record(2, 0))
    assert t.algorithm == PPO
    assert {"value", "return", "kl_reward", "reward_per_token", "advantage"} <= set(t.quantities())
    adv = t.sides[0].numbers["advantage"]
    assert adv.std() > 0  # per-token GAE advantages, not one per sequence
    assert "score 1" in t.label() and "mean adv" in t.label()


def test_dpo_records_have_two_sides_and_only_their_quantities():
    record = dpo_record(1, 4)
    t = Trajectory.from_record(record)
    assert t.algorithm == DPO and [s.name for s in t.sides] == ["chosen", "rejected"]
    assert t.quantities() == ["logprob", "probability", "ref_logprob", "entropy", "implicit_reward"]
    assert len(t.sides[0]) == 10 and len(t.sides[1]) == 14
    assert t.advantage == record["margin"] and t.label().startswith("pair 4 · margin")
    # One scale for both sides, so chosen and rejected compare.
    scale = trajectory_scale(t, "implicit_reward")
    both = np.concatenate([s.numbers["implicit_reward"] for s in t.sides])
    assert scale.scale == pytest.approx(np.abs(both).max())


def test_step_scale_spans_every_recorded_rollout_of_the_step():
    records = [Trajectory.from_record(grpo_record(5, i, 0, 0.1 * i, a)) for i, a in enumerate([-0.4, 1.5, 0.2])]
    scale = step_scale(records, "advantage", 5)
    assert scale.scale == pytest.approx(1.5) and "3 recorded rollouts of step 5" in scale.how
    assert trajectory_scale(records[0], "advantage").scale == pytest.approx(0.4)


# ------------------------------------------------------------------ how tokens look


def test_whitespace_newlines_and_special_tokens_are_visible():
    assert token_segments(" the") == [("·", "mark"), ("the", "text")]
    assert token_segments("\n\n") == [("↵", "mark"), ("\n", "break"), ("↵", "mark"), ("\n", "break")]
    assert token_segments("\tx") == [("→", "mark"), ("x", "text")]
    assert token_segments("a\x00") == [("a", "text"), ("␀", "mark")]
    for special in ("<eos>", "<pad>", "</s>", "<|endoftext|>", "<|im_end|>", "[SEP]", "<0x0A>"):
        assert token_segments(special) == [(special, "special")], special
    assert token_segments("<3") == [("<3", "text")]  # not a tag
    assert token_segments("") == [("∅", "mark")]
    assert token_display(" a\nb") == "·a↵b"


# ------------------------------------------------------------------ tooltip, export


def test_tooltip_holds_every_number_of_the_token_and_the_top_5():
    record = ppo_record(1, 0, n=6)
    t = Trajectory.from_record(record)
    text = html.unescape(re.sub("<[^>]+>", " ", tooltip_html(t, 0, 3)))
    for key in ("advantage", "logprob", "ref_logprob", "kl", "entropy", "ratio", "clipped", "value", "return",
                "kl_reward", "reward_per_token", "probability"):
        assert key in text, key
    for key in ("logprob", "value", "return", "kl_reward", "advantage"):
        assert f"{record[key][3]:.4g}" in text, key
    assert "top 5" in text
    for token, prob in zip(record["top_tokens"][3], record["top_probs"][3]):
        assert token_display(token) in text and f"{prob:.4g}" in text
    assert f"id {record['token_ids'][3]}" in text
    assert "◀" in text  # the sampled token marked among the alternatives


def test_exported_html_holds_every_token_with_its_colour(tmp_path):
    record = grpo_record(2, 1, 0, 0.25, -0.8, n=30)
    record["tokens"][3] = "\n"
    t = Trajectory.from_record(record)
    scale = step_scale([t], "logprob", 2)
    page = export_html(t, "logprob", scale, "my-run")
    assert "<script" not in page and "http" not in page  # self-contained
    assert "<style>" in page
    spans = re.findall(r"<span class='k[^']*' data-i='(\d+)' style='background:(#[0-9a-f]{6});"
                       r"color:(#[0-9a-f]{6})' title='([^']*)'>", page)
    assert [int(s[0]) for s in spans] == list(range(30))
    for i, (_, bg, fg, title) in enumerate(spans):
        assert bg == scale.hex(record["logprob"][i])
        assert fg == text_hex(bg)
        assert f"logprob {record['logprob'][i]:.4g}" in html.unescape(title)
    assert html.escape(record["prompt"]) in page
    assert scale.how in html.unescape(page)
    dpo = Trajectory.from_record(dpo_record(1, 0))
    page = export_html(dpo, "implicit_reward", trajectory_scale(dpo, "implicit_reward"))
    assert page.count("data-i=") == 24 and "chosen" in page and "rejected" in page
    assert json.loads(export_json(t)) == record


# ------------------------------------------------------------------ on disk


def test_index_lists_steps_loads_lazily_and_follows_a_live_run(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    index = TrajectoryIndex(run_dir)
    assert index.poll() is False and index.steps == []  # no trajectories/ yet
    write_steps(run_dir, {1: [grpo_record(1, 0, 0, 1.0, 0.5)], 2: [grpo_record(2, 0, 0, 1.0, 0.5)]})
    assert index.poll() is True and index.steps == [1, 2]
    assert index._cache == {}  # nothing read until asked
    first = index.records(1)
    assert index.records(1) is first  # cached
    assert index.poll() is False
    write_steps(run_dir, {3: [grpo_record(3, 0, 0, 1.0, 0.5), grpo_record(3, 1, 0, 0.0, -0.5)]})
    assert index.poll() is True and index.steps == [1, 2, 3]
    assert index.find(3, 1).reward == 0.0 and index.find(3, 7) is None
    assert index.neighbour_step(2, +1) == 3 and index.neighbour_step(1, -1) is None
    assert index.nearest_step(10) == 3
    # A resumed run rewrites a step: the new file is read.
    time.sleep(0.01)
    write_steps(run_dir, {1: [grpo_record(1, 0, 0, 0.25, 0.5), grpo_record(1, 1, 0, 0.0, 0.5)]})
    assert len(index.records(1)) == 2 and index.records(1)[0].reward == 0.25
    # A torn or foreign file does not break the index.
    (run_dir / "trajectories" / "step_000004.jsonl").write_text('{"step": 4, "index": 0, "tokens": ["a"]}\n{"tr')
    (run_dir / "trajectories" / "notes.txt").write_text("x")
    index.poll()
    assert index.steps == [1, 2, 3, 4] and len(index.records(4)) == 1


def test_index_keeps_a_bounded_cache(tmp_path):
    write_steps(tmp_path, {s: [grpo_record(s, 0, 0, 1.0, 0.0, n=3)] for s in range(1, 11)})
    index = TrajectoryIndex(tmp_path, cache_size=4)
    index.poll()
    for s in index.steps:
        index.records(s)
    assert list(index._cache) == [7, 8, 9, 10]


# ------------------------------------------------------------------ groups


def test_a_group_with_equal_rewards_is_flagged():
    records = [Trajectory.from_record(grpo_record(4, i, 0, 0.5, 0.0)) for i in range(4)]
    group = build_group(records, [], 4, 0, size=4)
    assert group.complete and group.rewards_equal and group.no_signal
    assert "No learning signal" in group.flag() and "0.5" in group.flag()
    varied = [Trajectory.from_record(grpo_record(4, i, 0, 0.1 * i, i - 1.5)) for i in range(4)]
    assert not build_group(varied, [], 4, 0, size=4).no_signal
    assert build_group(varied, [], 4, 0, size=4).flag() == ""


def test_a_partly_recorded_group_is_completed_from_the_samples_event():
    records = [Trajectory.from_record(grpo_record(4, i, 0, 1.0, 0.5)) for i in range(2)]
    samples = [{"index": i, "group": i // 4, "prompt": "sort 3 1 2 =", "completion": f" {i}",
                "reward": 1.0 if i < 2 else 0.0, "rewards": {}, "advantage": 0.5 if i < 2 else -0.5}
               for i in range(8)]
    group = build_group(records, samples, 4, 0, size=4)
    assert [r.index for r in group.rows] == [0, 1, 2, 3]
    assert [r.trajectory is not None for r in group.rows] == [True, True, False, False]
    assert not group.no_signal
    # Recorded rewards equal, but the group is bigger and the advantages are not 0.
    group = build_group(records, [], 4, 0, size=4)
    assert group.rewards_equal and not group.no_signal and "the others differ" in group.flag()


# ------------------------------------------------------------------ prompt history


def test_prompt_history_gathers_rollouts_samples_and_evaluations(tmp_path):
    run_dir = write_run(tmp_path, "history", steps=6, samples_per_step=2)
    write_steps(run_dir, {2: [grpo_record(2, 0, 0, 0.5, 0.1, prompt="sort 2 0 =")],
                          5: [grpo_record(5, 1, 0, 1.0, 0.1, prompt="sort 2 0 ="),
                              grpo_record(5, 0, 0, 1.0, 0.1, prompt="other")]})
    events = rundir.read_events(run_dir)
    events[1]["samples"] = [{"prompt": "sort 2 0 =", "completion": " 0 2", "reward": 1.0}]  # the eval at step 0
    with open(run_dir / rundir.EVENTS_FILE, "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in events)
    run = RunData(run_dir)
    run.poll()
    assert run.eval_samples and run.eval_samples[0][0] == 0
    index = TrajectoryIndex(run_dir)
    index.poll()
    while not index.scan_prompts(0.0):  # a file at a time
        pass
    assert index.steps_with_prompt("sort 2 0 =") == [(2, 0), (5, 1)]
    rows = prompt_history("sort 2 0 =", index, run.samples, run.eval_samples)
    # write_run's samples: prompt "sort {step} {i} =": step 2, index 0 has this prompt,
    # and is the recorded rollout, listed once.
    assert [(r.step, r.source, r.index) for r in rows] == [(0, "eval", None), (2, "rollout", 0), (5, "rollout", 1)]
    assert rows[1].has_tokens and not rows[0].has_tokens


def test_rundata_drops_eval_samples_of_redone_steps(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    writer = rundir.EventWriter(run_dir)
    writer.emit("run_started", step=0)
    for step in (0, 10, 20):
        writer.emit("eval", step=step, samples=[{"prompt": "p", "completion": "c", "reward": 0.0}])
    writer.emit("run_resumed", step=10)
    writer.close()
    run = RunData(run_dir)
    run.poll()
    assert [s for s, _ in run.eval_samples] == [0, 10]


def test_prompt_scan_of_a_thousand_steps_finds_every_record(tmp_path):
    # 1,000 step files of 4 records, prompts p0..p49 in turn (and one with quotes, a
    # backslash and non-ASCII text, to check the scan's JSON unescaping). How fast the
    # scan is: bench/inspector_bench.py --scan-only.
    odd = 'say "hi" \\ über ✓'
    write_steps(tmp_path, {s: [grpo_record(s, i, 0, 1.0, 0.0, n=4, prompt=odd if s == 500 else f"p{s % 50}")
                               for i in range(4)] for s in range(1, 1001)})
    index = TrajectoryIndex(tmp_path)
    index.poll()
    calls = 0
    while not index.scan_prompts(0.0):  # no time budget: one file a call, then it yields
        calls += 1
        assert calls <= 1000
    assert calls == 999  # one file per call: the budget is honoured
    expected = [(s, i) for s in range(7, 1001, 50) for i in range(4)]
    assert index.steps_with_prompt("p7") == expected and len(expected) == 20 * 4
    assert index.steps_with_prompt("p0") == [(s, i) for s in range(50, 1001, 50) if s != 500 for i in range(4)]
    assert index.steps_with_prompt(odd) == [(500, i) for i in range(4)]
    assert index.steps_with_prompt("p50") == []
    assert index.scan_prompts(0.0) is True  # nothing left to read


@pytest.mark.parametrize("name", ["workbench.inspector.colors", "workbench.inspector.records"])
def test_doctests(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0
