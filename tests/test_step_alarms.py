"""The step-reward alarms (engine/alarms/detectors.py): a step reward with no signal
(frac_step_reward_zero_std, read as no_learning_signal reads frac_reward_zero_std) and
steps that stop being split (steps/single_step_ratio rising after it was low), on
histories worked out by hand; their fire-once rule in the watcher; silence in runs
without step metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import small_preset_dict
from engine.alarms import AlarmsConfig, AlarmWatcher, alarm_line
from engine.alarms.detectors import DETECTORS, KINDS, SPLIT_BEFORE, History
from engine.foundation.errors import PresetError
from engine.preset.schema import preset_from_dict

CFG = AlarmsConfig(window=4)
BUNDLED_RUNS = Path(__file__).parent / "data" / "bundled_runs"


def history(**series) -> History:
    """A history whose step i (from 1) has series[key][i-1] for every key."""
    n = len(next(iter(series.values())))
    return History(steps=list(range(1, n + 1)), metrics=[{k: v[i] for k, v in series.items()} for i in range(n)])


def detect(kind: str, **series):
    return DETECTORS[kind](history(**series), CFG)


# ------------------------------------------------------- a step reward with no signal


def test_equal_steps_need_a_whole_window_at_the_equal_rewards_threshold():
    # mean of the last 4: (0.75 + 1 + 1 + 1) / 4 = 0.9375 >= 0.9
    f = detect("step_reward_no_signal", frac_step_reward_zero_std=[0, 0.75, 1, 1, 1])
    assert (f.began, f.end, f.metric) == (2, 5, "frac_step_reward_zero_std")
    assert f.saw.startswith("frac_step_reward_zero_std (raw, mean over steps 2-5) was 94%: in that share of the "
                            "prompt groups every step of every completion was scored alike (alarm at 90%), so the "
                            "step reward cannot tell the completions apart")
    assert f.evidence == {"frac_step_reward_zero_std": [[2, 0.75], [3, 1.0], [4, 1.0], [5, 1.0]]}
    # (0.5 + 1 + 1 + 1) / 4 = 0.875 < 0.9; and 3 steps are not a window
    assert detect("step_reward_no_signal", frac_step_reward_zero_std=[0.5, 1, 1, 1]) is None
    assert detect("step_reward_no_signal", frac_step_reward_zero_std=[1, 1, 1]) is None
    # the threshold is alarms.equal_rewards_fraction: at 0.8, 0.875 fires
    loose = AlarmsConfig(window=4, equal_rewards_fraction=0.8)
    assert DETECTORS["step_reward_no_signal"](history(frac_step_reward_zero_std=[0.5, 1, 1, 1]), loose) is not None


def test_equal_steps_beside_a_varying_outcome_reward_are_the_step_alarm_alone():
    # the outcome component still separates the completions (frac_reward_zero_std 0.25):
    # no_learning_signal stays quiet, the step alarm says the process reward adds nothing
    series = dict(frac_step_reward_zero_std=[1, 1, 1, 1], frac_reward_zero_std=[0.25] * 4)
    assert detect("no_learning_signal", **series) is None
    f = detect("step_reward_no_signal", **series)
    assert "too" not in f.saw and set(f.evidence) == {"frac_step_reward_zero_std"}


def test_equal_steps_and_equal_totals_are_one_alarm_that_names_the_steps():
    series = dict(frac_step_reward_zero_std=[1, 1, 1, 1], frac_reward_zero_std=[1, 1, 0.8, 1])
    # no_learning_signal would fire on frac_reward_zero_std (0.95) alone; with equal steps it
    # leaves the alarm to the step detector, whose text quotes both
    assert detect("no_learning_signal", frac_reward_zero_std=[1, 1, 0.8, 1]).metric == "frac_reward_zero_std"
    assert detect("no_learning_signal", **series) is None
    f = detect("step_reward_no_signal", **series)
    assert f.saw.endswith("; frac_reward_zero_std (raw, mean over steps 1-4) was 95% too: their total rewards were "
                          "equal as well, so their advantages are zero")
    assert f.evidence["frac_reward_zero_std"] == [[1, 1.0], [2, 1.0], [3, 0.8], [4, 1.0]]
    # nor for their consequence, a zero gradient
    assert detect("no_learning_signal", **series, grad_norm=[0.0] * 4) is None
    # with the totals apart (an outcome reward separates them), the other checks stand
    cut = dict(frac_step_reward_zero_std=[1] * 4, frac_reward_zero_std=[0.5] * 4,
               **{"completions/clipped_ratio": [1, 1, 1, 1]})
    assert detect("no_learning_signal", **cut).metric == "completions/clipped_ratio"


# ------------------------------------------------------------ steps no longer split


def test_steps_not_split_is_the_single_step_ratio_rising_after_it_was_low():
    # first window (0.25 + 0.25 + 0.5 + 0.5) / 4 = 0.375 <= 0.5; last (1 + 1 + 0.75 + 1) / 4 = 0.9375 >= 0.9
    f = detect("steps_not_split", **{"steps/single_step_ratio": [0.25, 0.25, 0.5, 0.5, 1, 1, 0.75, 1]})
    assert (f.began, f.end, f.metric) == (5, 8, "steps/single_step_ratio")
    assert f.saw == ("steps/single_step_ratio (raw, mean over steps 5-8) was 94%: that share of the completions held "
                     "at most one step for a step reward (alarm at 90%), after steps/single_step_ratio (raw, mean "
                     "over steps 1-4) was 38% (at or below 50%): the completions no longer contain the step delimiter")
    assert [s for s, _ in f.evidence["steps/single_step_ratio"]] == list(range(1, 9))


@pytest.mark.parametrize("ratios, why", [
    ([1] * 8, "never split: the format was never there"),
    ([0.5, 0.5, 0.75, 0.5, 1, 1, 1, 1], "earlier window 0.5625 > 0.5"),
    ([0.25, 0.25, 0.5, 0.5, 1, 0.75, 0.75, 1], "last window 0.875 < 0.9"),
    ([0, 0, 0, 1, 1, 1, 1], "3 earlier steps are not a window"),
    ([0, 0, 0, 0, 0.2, 0.1, 0.3, 0.2], "still split"),
])
def test_steps_not_split_stays_quiet(ratios, why):
    assert detect("steps_not_split", **{"steps/single_step_ratio": ratios}) is None, why


def test_steps_not_split_finds_the_split_stretch_anywhere_earlier():
    # unsplit at first (the model had not learned the layout), split at steps 5-8, lost again:
    # the lowest earlier window is steps 5-8 (mean 0), the last 9-12 (mean 1)
    ratios = [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]
    f = detect("steps_not_split", **{"steps/single_step_ratio": ratios})
    assert (f.began, f.end) == (9, 12) and "over steps 5-8) was 0%" in f.saw
    assert f.evidence["steps/single_step_ratio"] == [[s, 0.0] for s in range(5, 9)] + [[s, 1.0] for s in range(9, 13)]
    # the threshold is alarms.single_step_fraction: at 0.95, a last window of 0.9375 is quiet
    strict = AlarmsConfig(window=4, single_step_fraction=0.95)
    assert DETECTORS["steps_not_split"](history(**{"steps/single_step_ratio": [0, 0, 0, 0, 1, 1, 0.75, 1]}),
                                        strict) is None


def test_single_step_fraction_is_a_checked_preset_field_above_the_split_level():
    assert SPLIT_BEFORE == 0.5
    with pytest.raises(PresetError, match="alarms.single_step_fraction"):
        preset_from_dict({**small_preset_dict(), "alarms": {"single_step_fraction": 0.5}})
    with pytest.raises(PresetError, match="alarms.single_step_fraction"):
        preset_from_dict({**small_preset_dict(), "alarms": {"single_step_fraction": 1.2}})
    assert preset_from_dict({**small_preset_dict(), "alarms": {"single_step_fraction": 0.8}}).alarms \
        .single_step_fraction == 0.8


# ------------------------------------------------------------------------ the watcher


def test_the_watcher_fires_each_step_alarm_once_and_writes_its_advice():
    watcher = AlarmWatcher(CFG)
    fired = []
    ratio = [0.2] * 4 + [1.0] * 6  # split at 1-4, one step each from 5 on
    equal = [0.0] * 6 + [1.0] * 4  # every step alike from 7 on
    for step, (r, e) in enumerate(zip(ratio, equal), 1):
        fired += watcher.observe_metrics(step, {"steps/single_step_ratio": r, "frac_step_reward_zero_std": e,
                                                "frac_reward_zero_std": e})
    assert [(a["step"], a["kind"]) for a in fired] == [(8, "steps_not_split"), (10, "step_reward_no_signal")]
    split, equal_steps = fired
    assert split["title"] == "Steps no longer split" and split["steps"] == [5, 8]
    assert {t["field"] for t in split["try"]} >= {"rewards"}
    assert "step_delimiter" in split["try"][0]["advice"]
    assert equal_steps["title"] == "No step-reward signal" and equal_steps["metric"] == "frac_step_reward_zero_std"
    assert alarm_line(equal_steps).startswith("alarm at step 10: No step-reward signal: frac_step_reward_zero_std "
                                              "(raw, mean over steps 7-10) was 100%")


def test_every_step_kind_says_why_and_what_to_try_with_real_preset_fields():
    from workbench.alarms.model import KIND_COLOURS, OTHER_COLOUR
    from workbench.setup import schema

    from engine.preset.schema import Preset

    known = {spec.path.split(".")[0] for spec in schema.section_fields(Preset)}
    for kind in ("step_reward_no_signal", "steps_not_split"):
        k = KINDS[kind]
        assert k.why.endswith(".") and all(f.split(".")[0] in known for f, _ in k.try_fields), kind
        assert KIND_COLOURS[kind] != OTHER_COLOUR  # the window knows it: its own colour
    assert len(set(KIND_COLOURS.values())) == len(KIND_COLOURS)


def test_runs_without_step_metrics_never_raise_the_step_alarms():
    """Histories without the step metrics, however flat, and the bundled presets' full runs
    (none has a step reward): neither step alarm fires."""
    flat = history(frac_reward_zero_std=[1] * 12, reward=[0.0] * 12, **{"completions/clipped_ratio": [1] * 12})
    assert DETECTORS["step_reward_no_signal"](flat, CFG) is None and DETECTORS["steps_not_split"](flat, CFG) is None
    assert DETECTORS["no_learning_signal"](flat, CFG).metric == "frac_reward_zero_std"  # as before
    step_metrics = {"steps/single_step_ratio", "frac_step_reward_zero_std"}
    looked_at = 0
    for path in sorted(BUNDLED_RUNS.glob("*.jsonl")):
        metrics = [e for e in map(json.loads, path.read_text().splitlines()) if e["type"] == "metrics"]
        if any(step_metrics & set(e) for e in metrics):
            continue  # a preset with a step reward: test_alarms.py checks its run raises no alarm at all
        watcher = AlarmWatcher(AlarmsConfig(window=4))  # a short window: every stretch is looked at
        fired = [a for e in metrics for a in watcher.observe_metrics(e["step"], e)]
        assert not {a["kind"] for a in fired} & {"step_reward_no_signal", "steps_not_split"}, path.stem
        looked_at += 1
    assert looked_at >= 5


# ------------------------------------------------------------- provoked by a real run

CONSTANT_STEPS_PY = '''
def same_steps(prompts, completions, **fields):
    """Every line of every completion scored 0.5: a process reward that tells nothing apart."""
    return [[0.5] * (c.count("\\\\n") + (not c.endswith("\\\\n"))) for c in completions]
'''


def test_a_constant_step_reward_raises_the_step_alarm_not_no_learning_signal(tmp_path):
    """Four steps of the built-in model with one step reward that scores every line 0.5:
    frac_step_reward_zero_std is 1 each step (and so is frac_reward_zero_std, the totals
    being 0.5 each); one alarm, the step one, at step 4 over steps 1-4."""
    from engine.commands.train import build_trainer

    (tmp_path / "r.py").write_text(CONSTANT_STEPS_PY)
    d = small_preset_dict(max_steps=4)
    d["algorithm"]["advantage_estimator"] = "grpo_process"
    d["rewards"] = [{"name": "r.py:same_steps", "step_delimiter": "\n"}]
    d["alarms"] = {"window": 4}
    trainer = build_trainer(preset_from_dict(d), tmp_path / "run", preset_dir=tmp_path)
    trainer.run()
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    metrics = [e for e in events if e["type"] == "metrics"]
    assert [e["frac_step_reward_zero_std"] for e in metrics] == [1.0] * 4
    alarms = [e for e in events if e["type"] == "alarm"]
    assert [(a["kind"], a["step"], a["steps"]) for a in alarms] == [("step_reward_no_signal", 4, [1, 4])]
    assert "frac_reward_zero_std (raw, mean over steps 1-4) was 100% too" in alarms[0]["saw"]
