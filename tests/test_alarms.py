"""Alarms (engine/alarms): each detector on histories worked out by hand, the watcher's
fire-once rule and its replay on resume, each alarm provoked by a real run built to
provoke it, and silence on the bundled presets' full runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import small_preset_dict
from engine.run import rundir
from engine.alarms import AlarmsConfig, AlarmWatcher, alarm_line
from engine.alarms.detectors import DETECTORS, KINDS, History
from engine.commands.train import build_trainer
from engine.foundation.errors import PresetError
from engine.preset.schema import load_preset, preset_from_dict

BUNDLED_RUNS = Path(__file__).parent / "data" / "bundled_runs"
CFG = AlarmsConfig(window=4)


def replay(watcher: AlarmWatcher, events: list[dict]) -> list[dict]:
    """The alarms `watcher` raises on a recorded run's metrics and evaluations, in order."""
    fired = []
    for e in events:
        if e["type"] == "metrics":
            fired += watcher.observe_metrics(e["step"], e)
        elif e["type"] == "eval":
            fired += watcher.observe_eval(e["step"], e)
    return fired


def history(**series) -> History:
    """A history whose step i (from 1) has series[key][i-1] for every key."""
    n = len(next(iter(series.values())))
    h = History(steps=list(range(1, n + 1)))
    h.metrics = [{k: v[i] for k, v in series.items()} for i in range(n)]
    return h


# ------------------------------------------------------------------ detectors by hand


def test_no_learning_signal_needs_a_whole_window_of_equal_reward_groups():
    # mean of the last 4: (0.75 + 1 + 1 + 1) / 4 = 0.9375 >= 0.9
    f = DETECTORS["no_learning_signal"](history(frac_reward_zero_std=[0, 0.75, 1, 1, 1]), CFG)
    assert (f.began, f.end, f.metric) == (2, 5, "frac_reward_zero_std") and "94%" in f.saw
    # (0.5 + 1 + 1 + 1) / 4 = 0.875 < 0.9; and 3 steps are not a window
    assert DETECTORS["no_learning_signal"](history(frac_reward_zero_std=[0.5, 1, 1, 1]), CFG) is None
    assert DETECTORS["no_learning_signal"](history(frac_reward_zero_std=[1, 1, 1]), CFG) is None
    f = DETECTORS["no_learning_signal"](history(**{"completions/clipped_ratio": [1, 1, 0.8, 1]}), CFG)
    assert f.metric == "completions/clipped_ratio" and "95%" in f.saw
    assert DETECTORS["no_learning_signal"](history(grad_norm=[0.0] * 4), CFG).metric == "grad_norm"


def test_kl_spike_is_against_the_running_level():
    # level before step 5: (0.1 + 0.1 + 0.1 + 0.1) / 4 = 0.1; 0.45 >= 4 x 0.1 and >= 0.3
    f = DETECTORS["kl_spike"](history(kl=[0.1, 0.1, 0.1, 0.1, 0.45]), CFG)
    assert (f.began, f.metric) == (5, "kl") and "4.5x" in f.saw
    assert DETECTORS["kl_spike"](history(kl=[0.1, 0.1, 0.1, 0.1, 0.35]), CFG) is None  # 3.5x
    assert DETECTORS["kl_spike"](history(kl=[0.01, 0.01, 0.01, 0.01, 0.2]), CFG) is None  # under kl_spike_min
    assert DETECTORS["kl_spike"](history(kl=[0.0, 0.5]), CFG) is not None  # from the first step's 0


def test_entropy_collapse_compares_with_the_first_window():
    # first window mean 1.0, last window mean 0.15 < 0.2 x 1.0
    f = DETECTORS["entropy_collapse"](history(entropy=[1, 1, 1, 1, 0.2, 0.1, 0.2, 0.1]), CFG)
    assert (f.began, f.end) == (5, 8) and "15%" in f.saw
    assert DETECTORS["entropy_collapse"](history(entropy=[1, 1, 1, 1, 0.3, 0.2, 0.2, 0.2]), CFG) is None  # 22%


def test_length_drift_needs_a_held_out_score_that_did_not_move():
    h = history(**{"completions/mean_length": [10, 10, 10, 10, 15, 16, 16, 17]})  # +60%
    h.evals = [(0, {"accuracy": 0.3}), (8, {"accuracy": 0.31})]
    f = DETECTORS["length_drift"](h, CFG)
    assert f.began == 5 and f.metric == "completions/mean_length" and "+60%" in f.saw
    assert f.evidence["eval/accuracy"] == [[0, 0.3], [8, 0.31]]
    h.evals[-1] = (8, {"accuracy": 0.4})  # it moved: the length may be doing the work
    assert DETECTORS["length_drift"](h, CFG) is None


def test_reward_hacking_is_reward_and_length_rising_together():
    lengths = [10, 10, 11, 11, 12, 13, 14, 15]
    f = DETECTORS["reward_hacking"](history(reward=[x / 10 for x in lengths], **{"completions/mean_length": lengths}), CFG)
    assert f.metric == "reward" and "correlated 1.00" in f.saw
    # the same reward rise with a flat length is learning, not the hacking sign
    flat = {"completions/mean_length": [10, 11, 10, 11, 10, 11, 10, 11]}
    assert DETECTORS["reward_hacking"](history(reward=[x / 10 for x in lengths], **flat), CFG) is None


def test_eval_falling_is_the_held_out_score_down_while_the_reward_goes_up():
    h = history(reward=[0.2, 0.2, 0.2, 0.2, 0.5, 0.5, 0.5, 0.5])
    h.evals = [(4, {"accuracy": 0.5, "reward": 0.2}), (8, {"accuracy": 0.35, "reward": 0.5})]
    f = DETECTORS["eval_falling"](h, CFG)
    assert (f.began, f.end, f.metric) == (4, 8, "eval/accuracy")
    h.evals[-1] = (8, {"accuracy": 0.45, "reward": 0.5})  # fell 0.05 < eval_drop
    assert DETECTORS["eval_falling"](h, CFG) is None


def test_every_kind_says_why_and_what_to_try_with_real_preset_fields():
    from workbench.setup import schema

    from engine.preset.schema import Preset

    known = {spec.path.split(".")[0] for spec in schema.section_fields(Preset)}
    for kind in DETECTORS:
        k = KINDS[kind]
        assert k.title and k.why.endswith(".") and k.try_fields
        assert all(field.split(".")[0] in known for field, _ in k.try_fields), kind


# ------------------------------------------------------------------------ the watcher


def test_the_watcher_fires_once_and_again_only_after_a_clear_window():
    watcher = AlarmWatcher(CFG)
    fired = []
    frac = [1] * 6 + [0] * 5 + [1] * 4  # holds at 4-6, clear 7-11 (> window), holds again at 15
    for step, value in enumerate(frac, 1):
        fired += [(a["step"], a["kind"]) for a in watcher.observe_metrics(step, {"frac_reward_zero_std": value})]
    assert fired == [(4, "no_learning_signal"), (15, "no_learning_signal")]
    event = watcher.observe_metrics(16, {"frac_reward_zero_std": 1, "skipped_steps": 1})[0]
    assert event["kind"] == "nonfinite_steps" and event["steps"] == [16, 16]
    assert alarm_line(event).startswith("alarm at step 16: Non-finite steps skipped: step 16 was skipped")


def test_replay_rebuilds_the_watch_without_repeating_alarms():
    events = [{"type": "metrics", "step": s, "frac_reward_zero_std": 1.0} for s in range(1, 7)]
    events.insert(4, {"type": "alarm", "step": 4, "kind": "no_learning_signal"})
    watcher = AlarmWatcher(CFG)
    watcher.replay(events, until_step=6)
    assert len(watcher.history.steps) == 6
    assert watcher.observe_metrics(7, {"frac_reward_zero_std": 1.0}) == []  # still the same alarm
    fresh = AlarmWatcher(CFG)  # the same history, no alarm written yet: fires
    fresh.replay([e for e in events if e["type"] == "metrics"], until_step=6)
    assert [a["kind"] for a in fresh.observe_metrics(7, {"frac_reward_zero_std": 1.0})] == ["no_learning_signal"]


def test_thresholds_are_checked_preset_fields():
    with pytest.raises(PresetError, match="alarms.window"):
        preset_from_dict({**small_preset_dict(), "alarms": {"window": 1}})
    with pytest.raises(PresetError, match="alarms.equal_rewards_fraction"):
        preset_from_dict({**small_preset_dict(), "alarms": {"equal_rewards_fraction": 1.5}})
    assert preset_from_dict({**small_preset_dict(), "alarms": {"enabled": False}}).alarms.enabled is False


# The RLHF pipeline's RL stages train on a learned reward that the policy learns to exploit
# (README, "The RLHF pipeline"): the held-out exact match falls while the learned reward
# rises, and the alarms are right to say so. These are the alarms their recordings raise
# (the exploited reward model's, not the held-out score's: one alarm for one cause).
EXPLOITED = {"ppo-sort-rm": [("reward_model_exploited", 25)],
             "grpo-sort-rm": [("reward_model_exploited", 50), ("update_against_advantage", 161),
                              ("entropy_collapse", 317),
                              ("entropy_collapse", 399)]}


def test_the_bundled_presets_full_runs_raise_no_alarm():
    """The metrics and evaluations of full runs of every bundled preset (recorded from
    their resolved presets: every step, 150-400 of them but grpo-calculator-tools' 30),
    replayed through the watch their presets set (the default, but for the calculator's
    length bounds and dpo-sort's against-advantage bound, which their presets explain);
    the pipeline's RL stages raise the alarms of a reward model exploited (EXPLOITED)."""
    runs = sorted(BUNDLED_RUNS.glob("*.jsonl"))
    assert {r.stem for r in runs} == {p.stem for p in (Path(__file__).parents[1] / "presets").glob("*.yaml")}
    for path in runs:
        events = [json.loads(line) for line in path.read_text().splitlines()]
        preset = events[0]["preset"]  # the recorded run's
        assert events[0]["type"] == "run_started" and preset["training"]["max_steps"] >= 30, path.stem  # calculator: 30
        # the watch as the preset file sets it today (a recording keeps the defaults of its day)
        watcher = AlarmWatcher.for_preset(load_preset(Path(__file__).parents[1] / "presets" / f"{path.stem}.yaml"))
        fired = replay(watcher, events)
        assert len(watcher.history.steps) == preset["training"]["max_steps"] and len(watcher.history.evals) >= 5, \
            path.stem
        expected = EXPLOITED.get(path.stem, [])
        assert [(a["kind"], a["step"]) for a in fired] == expected, f"{path.stem}: {[alarm_line(a) for a in fired]}"


def test_the_calculator_preset_at_its_first_learning_rate_overshoots_and_the_alarm_says_so():
    # grpo-calculator-tools as first shipped (learning rate 0.001, 40 steps; recorded on
    # 2026-11-28 up to step 32): 99.5 % held-out at step 10, 88.5 % at step 20 while the
    # training reward rose. The held-out-falling alarm is right to fire; the preset now
    # learns at 0.0005 (its recording, in the test above, raises nothing).
    events = [json.loads(line) for line in (Path(__file__).parent / "data" / "calculator_overshoot.jsonl").open()]
    assert events[0]["preset"]["training"]["learning_rate"] == 0.001
    watcher = AlarmWatcher(AlarmsConfig(**events[0]["preset"]["alarms"]))
    fired = replay(watcher, events)
    assert [(a["kind"], a["step"]) for a in fired] == [("eval_falling", 20)], [alarm_line(a) for a in fired]
    assert "fell from 0.995 to 0.885" in fired[0]["saw"]


# ------------------------------------------------------------- provoked by real runs

REWARDS_PY = '''
def constant(prompts, completions, **fields):
    return [0.5 for _ in completions]

def length(prompts, completions, **fields):
    return [len(c) / 10.0 for c in completions]

def ones(prompts, completions, **fields):
    return [sum(ch == "1" for ch in c) / max(len(c), 1) for c in completions]
'''


def provoke(tmp_path, training=None, algorithm=None, rewards=None, data=None) -> tuple[list[dict], list[dict]]:
    """Run a tiny preset with alarms.window 4 in this process; the alarms it passed to
    on_alarm and the alarm events in its run directory."""
    (tmp_path / "r.py").write_text(REWARDS_PY)
    d = small_preset_dict(**(training or {}))
    d["algorithm"].update(algorithm or {})
    d["data"].update(data or {})
    d["rewards"] = rewards or d["rewards"]
    d["alarms"] = {"window": 4}
    run_dir = tmp_path / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    trainer = build_trainer(preset_from_dict(d), run_dir, preset_dir=tmp_path)
    seen = []
    trainer.on_alarm = seen.append
    trainer.run()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    written = [e for e in events if e["type"] == "alarm"]
    assert [a["kind"] for a in seen] == [a["kind"] for a in written]
    return written, events


def kinds(alarms: list[dict]) -> set[str]:
    return {a["kind"] for a in alarms}


def test_a_constant_reward_raises_no_learning_signal(tmp_path):
    alarms, events = provoke(tmp_path, dict(max_steps=5), rewards=[{"name": "r.py:constant"}])
    assert kinds(alarms) == {"no_learning_signal"}
    alarm = alarms[0]
    assert alarm["step"] == 4 and alarm["steps"] == [1, 4] and alarm["metric"] == "frac_reward_zero_std"
    assert alarm["evidence"]["frac_reward_zero_std"] == [[s, 1.0] for s in range(1, 5)]
    assert {t["field"] for t in alarm["try"]} >= {"algorithm.num_generations", "rewards"}
    # the evidence steps have their samples and recorded rollouts in the run directory
    assert {e["step"] for e in events if e["type"] == "samples"} >= {1, 2, 3, 4}
    assert all(rundir.trajectory_path(tmp_path / "run", s).exists() for s in range(1, 5))


def test_a_learning_rate_far_too_high_raises_a_kl_spike(tmp_path):
    alarms, _ = provoke(tmp_path, dict(max_steps=3, learning_rate=0.5), algorithm={"beta": 0.04})
    spike = next(a for a in alarms if a["kind"] == "kl_spike")
    assert spike["step"] == 2 and spike["evidence"]["kl"][0] == [1, 0.0] and spike["evidence"]["kl"][1][1] >= 0.3


def test_a_reward_for_one_repeated_digit_collapses_the_entropy(tmp_path):
    alarms, _ = provoke(tmp_path, dict(max_steps=25, learning_rate=0.03), rewards=[{"name": "r.py:ones"}])
    collapse = next(a for a in alarms if a["kind"] == "entropy_collapse")
    first, last = collapse["evidence"]["entropy"][:4], collapse["evidence"]["entropy"][-4:]
    assert sum(v for _, v in last) < 0.2 * sum(v for _, v in first)


def test_a_pure_length_reward_raises_the_length_alarms(tmp_path):
    # lists of 10-12 numbers: the built-in model sorts none of them right, before or after
    alarms, _ = provoke(tmp_path, dict(max_steps=12, eval_steps=4, learning_rate=0.02),
                        algorithm={"max_completion_length": 40},
                        rewards=[{"name": "exact_match", "weight": 0.01}, {"name": "r.py:length"}],
                        data={"num_eval": 8, "task_options": {"min_len": 10, "max_len": 12}})
    assert {"reward_hacking", "length_drift"} <= kinds(alarms)
    drift = next(a for a in alarms if a["kind"] == "length_drift")
    assert "held-out accuracy stayed at 0 -> 0" in drift["saw"]


def test_a_length_reward_that_costs_accuracy_raises_eval_falling(tmp_path):
    alarms, _ = provoke(tmp_path, dict(max_steps=10, eval_steps=5, learning_rate=0.02),
                        algorithm={"max_completion_length": 24},
                        rewards=[{"name": "exact_match", "weight": 0.01}, {"name": "r.py:length"}],
                        data={"num_eval": 16})
    falling = next(a for a in alarms if a["kind"] == "eval_falling")
    scores = falling["evidence"]["eval/accuracy"]
    assert falling["metric"] == "eval/accuracy" and scores[-1][1] <= max(v for _, v in scores) - 0.1


def test_non_finite_steps_raise_an_alarm(tmp_path, nan_grpo_loss):
    alarms, _ = provoke(tmp_path, dict(max_steps=2, max_nonfinite_steps=5))
    assert [(a["kind"], a["step"]) for a in alarms if a["kind"] == "nonfinite_steps"] == [("nonfinite_steps", 1),
                                                                                           ("nonfinite_steps", 2)]
