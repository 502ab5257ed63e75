"""The update's effect on tokens as numbers (engine/rl/update_effect.py), on tensors worked
out by hand and against a plain Python loop; and its alarm, update_against_advantage
(engine/alarms/detectors.py), on hand-worked histories: fires / stays quiet, its fire-once
rule in the watcher, silence in runs without the metric, advice naming real preset fields."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest
import torch

from conftest import small_preset_dict
from engine.alarms import AlarmsConfig, AlarmWatcher, alarm_line
from engine.alarms.detectors import DETECTORS, KINDS, History
from engine.foundation.errors import PresetError
from engine.preset.schema import preset_from_dict
from engine.rl.update_effect import UPDATE_EFFECT_METRICS, top_share, update_effect_metrics

BUNDLED_RUNS = Path(__file__).parent / "data" / "bundled_runs"
AGAINST = "update/against_advantage_ratio"


def metrics(change, advantage, mask=None) -> dict:
    change = torch.tensor(change, dtype=torch.float32)
    mask = torch.ones_like(change) if mask is None else torch.tensor(mask)
    return update_effect_metrics(change, torch.tensor(advantage, dtype=torch.float32), mask)


def short(result: dict) -> dict:
    """The metrics under their short names (without `update/`)."""
    return {k.removeprefix("update/"): v for k, v in result.items()}


# ------------------------------------------------------------------------ the metrics


def test_five_tokens_worked_by_hand():
    m = short(metrics([[0.4, -0.1, 0.0, 0.2, -0.3]], [[1, 1, -1, -1, 0]]))
    assert m == pytest.approx({
        "change_abs_mean": (0.4 + 0.1 + 0.0 + 0.2 + 0.3) / 5,  # 0.2
        "change_top10_share": 0.4 / 1.0,  # ceil(0.1 * 5) = 1 token, the 0.4
        "change_pos_adv_mean": (0.4 - 0.1) / 2,  # 0.15
        "change_neg_adv_mean": (0.0 + 0.2) / 2,  # 0.1: the tokens told to fall rose on average
        # A != 0 on 4 tokens; -0.1 with A +1 and +0.2 with A -1 went against; 0.0 did not move
        "against_advantage_ratio": 2 / 4,
    })
    assert list(metrics([[0.4]], [[1]])) == list(UPDATE_EFFECT_METRICS)


def test_masked_tokens_are_not_counted_whatever_they_hold():
    # two rows of 3; the masked positions hold padding values that would change every metric
    change = [[0.5, -0.5, float("nan")], [0.25, float("-inf"), 9.0]]
    advantage = [[2.0, 2.0, 2.0], [-1.0, -1.0, -1.0]]
    m = short(metrics(change, advantage, mask=[[1, 1, 0], [1, 0, 0]]))
    # kept: 0.5 (A 2), -0.5 (A 2, against), 0.25 (A -1, against)
    assert m == pytest.approx({"change_abs_mean": 1.25 / 3, "change_top10_share": 0.5 / 1.25,
                               "change_pos_adv_mean": 0.0, "change_neg_adv_mean": 0.25,
                               "against_advantage_ratio": 2 / 3})
    # a float mask of 0/1 counts the same tokens
    as_float = update_effect_metrics(torch.tensor(change), torch.tensor(advantage),
                                     torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))
    assert short(as_float) == pytest.approx(m)


def test_one_advantage_a_row_is_spread_over_its_tokens():
    change = torch.tensor([[0.1, -0.2], [0.3, 0.4]])
    mask = torch.ones(2, 2)
    per_row = update_effect_metrics(change, torch.tensor([1.0, -1.0]), mask)
    per_token = update_effect_metrics(change, torch.tensor([[1.0, 1.0], [-1.0, -1.0]]), mask)
    assert per_row == per_token
    # row 1 (A +1): -0.2 against; row 2 (A -1): 0.3 and 0.4 both against: 3 of 4
    assert per_row[AGAINST] == 0.75 and per_row["update/change_neg_adv_mean"] == pytest.approx(0.35)


def test_advantage_per_token_with_mixed_signs_in_a_row():
    # a process reward: one completion's tokens get different advantages
    m = short(metrics([[0.2, 0.2, -0.1]], [[0.5, -0.5, -2.0]]))
    assert m["change_pos_adv_mean"] == pytest.approx(0.2)
    assert m["change_neg_adv_mean"] == pytest.approx(0.05)  # (0.2 - 0.1) / 2
    assert m["against_advantage_ratio"] == pytest.approx(1 / 3)  # only the 0.2 with A -0.5


def test_top_share_counts_the_top_tenth_in_integers_and_ties_do_not_matter():
    # 30 equal values: the top 10 % is 3 of them, 0.1
    assert top_share(torch.full((30,), 0.5, dtype=torch.float64)) == pytest.approx(0.1)
    # the count in integers: the top 7 % of 100 equal values is 7 of them, where a float
    # ceil(7 / 100 * 100) would take 8
    assert math.ceil(7 / 100 * 100) == 8
    assert top_share(torch.ones(100, dtype=torch.float64), percent=7) == pytest.approx(0.07)
    # 5 equal values: the top 10 % is ceil(0.5) = 1 value, 1/5 of the total
    assert top_share(torch.full((5,), 0.3, dtype=torch.float64)) == pytest.approx(0.2)
    # ties at the top: 4 values, 1 taken; whichever 0.3 is taken, 0.3 / 1.0
    assert top_share(torch.tensor([0.3, 0.1, 0.3, 0.3], dtype=torch.float64)) == pytest.approx(0.3)
    # 20 values, 2 taken: 0.5 + 0.5 of 3 x 0.5 + 17 x 0.1 = 3.2
    values = torch.tensor([0.5, 0.1, 0.5] + [0.1] * 16 + [0.5], dtype=torch.float64)
    assert top_share(values) == pytest.approx(1.0 / 3.2)
    # 11 values: ceil(1.1) = 2 taken
    assert top_share(torch.tensor([5.0] + [1.0] * 10, dtype=torch.float64)) == pytest.approx(6.0 / 15.0)
    # one token carries it all
    assert top_share(torch.tensor([0.0] * 19 + [0.7], dtype=torch.float64)) == pytest.approx(1.0)


def test_an_update_that_moved_nothing():
    m = short(metrics([[0.0, 0.0, 0.0, 0.0]], [[1, -1, 1, 0]]))
    # no change to share: None; the per-sign means are 0; a token that did not move is not against
    assert m == {"change_abs_mean": 0.0, "change_top10_share": None, "change_pos_adv_mean": 0.0,
                 "change_neg_adv_mean": 0.0, "against_advantage_ratio": 0.0}


def test_no_token_to_average_gives_none():
    empty = metrics([[0.3, -0.2]], [[1, -1]], mask=[[0, 0]])
    assert empty == {name: None for name in UPDATE_EFFECT_METRICS}
    assert update_effect_metrics(torch.zeros(0, 4), torch.zeros(0, 4), torch.zeros(0, 4)) == empty
    # zero advantages everywhere (a group whose completions were rewarded alike): the changes
    # are measured, but no token was asked for a direction
    flat = short(metrics([[0.3, -0.1]], [[0, 0]]))
    assert flat == pytest.approx({"change_abs_mean": 0.2, "change_top10_share": 0.75, "change_pos_adv_mean": None,
                                  "change_neg_adv_mean": None, "against_advantage_ratio": None})
    # only positive advantages: the negative mean alone is None
    assert short(metrics([[0.3, -0.1]], [[1, 2]]))["change_neg_adv_mean"] is None


def test_shapes_that_do_not_match_are_refused_with_the_shapes():
    with pytest.raises(ValueError, match=r"change \(2, 3\), advantage \(2, 2\) and mask \(2, 3\)"):
        update_effect_metrics(torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3))


def test_against_a_plain_python_loop_on_random_tokens():
    """The reference: every metric written as a loop over the kept tokens."""
    rng = random.Random(0)
    for trial in range(20):
        n, t = rng.randint(1, 5), rng.randint(1, 9)
        change = [[rng.choice([0.0, rng.uniform(-1, 1)]) for _ in range(t)] for _ in range(n)]
        advantage = [[rng.choice([-1.5, -0.2, 0.0, 0.3, 1.0]) for _ in range(t)] for _ in range(n)]
        mask = [[rng.random() < 0.7 for _ in range(t)] for _ in range(n)]
        kept = [(c, a) for cr, ar, mr in zip(change, advantage, mask) for c, a, m in zip(cr, ar, mr) if m]

        def mean(xs):
            return sum(xs) / len(xs) if xs else None

        sizes = sorted((abs(c) for c, _ in kept), reverse=True)
        top = sum(sizes[: -(-len(sizes) // 10)]) / sum(sizes) if sizes and sum(sizes) > 0 else None
        signed = [(c, a) for c, a in kept if a != 0]
        expected = {
            "update/change_abs_mean": mean([abs(c) for c, _ in kept]),
            "update/change_top10_share": top,
            "update/change_pos_adv_mean": mean([c for c, a in kept if a > 0]),
            "update/change_neg_adv_mean": mean([c for c, a in kept if a < 0]),
            AGAINST: mean([1.0 if c * a < 0 else 0.0 for c, a in signed]),
        }
        got = update_effect_metrics(torch.tensor(change), torch.tensor(advantage), torch.tensor(mask))
        for name, value in expected.items():
            assert (got[name] is None) == (value is None), (trial, name)
            if value is not None:
                assert got[name] == pytest.approx(value, abs=1e-6), (trial, name)


def test_a_preference_pair_counts_chosen_as_plus_one_and_rejected_as_minus_one():
    # DPO's rows: chosen, rejected, one advantage a row (+1, -1); chosen [0.2, -0.1],
    # rejected [-0.3, 0.1] and a padding position holding 9.0
    m = short(update_effect_metrics(torch.tensor([[0.2, -0.1, 0.0], [-0.3, 0.1, 9.0]]), torch.tensor([1.0, -1.0]),
                                    torch.tensor([[1, 1, 0], [1, 1, 0]])))
    assert m == pytest.approx({
        "change_abs_mean": (0.2 + 0.1 + 0.3 + 0.1) / 4,  # 0.175
        "change_top10_share": 0.3 / 0.7,  # ceil(0.4) = 1 token: the rejected -0.3
        "change_pos_adv_mean": (0.2 - 0.1) / 2,  # the chosen side
        "change_neg_adv_mean": (-0.3 + 0.1) / 2,  # the rejected side
        "against_advantage_ratio": 2 / 4,  # chosen -0.1 fell, rejected 0.1 rose
    })


# ------------------------------------------------------------------------ the alarm

CFG = AlarmsConfig(window=4, against_advantage_fraction=0.4)  # the hand-worked windows below use 0.4


def history(**series) -> History:
    """A history whose step i (from 1) has series[key][i-1] for every key (None: not logged)."""
    n = len(next(iter(series.values())))
    return History(steps=list(range(1, n + 1)),
                   metrics=[{k: v[i] for k, v in series.items() if v[i] is not None} for i in range(n)])


def against(ratios, cfg=CFG, **more):
    return DETECTORS["update_against_advantage"](history(**{AGAINST: ratios}, **more), cfg)


def test_the_alarm_fires_on_a_window_mean_at_or_above_the_threshold():
    # the last 4: (0.25 + 0.5 + 0.375 + 0.5) / 4 = 0.40625 >= 0.4
    f = against([0.0, 0.25, 0.5, 0.375, 0.5])
    assert (f.began, f.end, f.metric) == (2, 5, AGAINST)
    assert f.saw == ("update/against_advantage_ratio (raw, mean over steps 2-5) was 41%: the update moved that "
                     "share of the recorded tokens with a nonzero advantage against it, lowering a token its "
                     "advantage asked to raise or raising one it asked to lower (alarm at 40%)")
    assert f.evidence == {AGAINST: [[2, 0.25], [3, 0.5], [4, 0.375], [5, 0.5]]}
    # exactly at the threshold fires: (0.25 + 0.5 + 0.25 + 0.5) / 4 = 0.375, alarm at 0.375
    assert against([0.25, 0.5, 0.25, 0.5], AlarmsConfig(window=4, against_advantage_fraction=0.375)) is not None


@pytest.mark.parametrize("ratios, why", [
    ([0.25, 0.5, 0.375, 0.375], "mean 0.375 < 0.4"),
    ([0.5, 0.5, 0.5], "3 steps are not a window"),
    ([None, 0.5, None, 0.5, 0.5], "3 steps with a value are not a window"),
    ([0.9, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1], "high earlier, low in the last window"),
])
def test_the_alarm_stays_quiet(ratios, why):
    assert against(ratios) is None, why


def test_the_window_counts_the_steps_that_have_a_ratio():
    # steps 3 and 5 had no recorded token with a nonzero advantage (no ratio): the last 4
    # values are those of steps 1, 2, 4 and 6, (0.25 + 0.5 + 0.5 + 0.5) / 4 = 0.4375
    f = against([0.25, 0.5, None, 0.5, None, 0.5])
    assert (f.began, f.end) == (1, 6) and f.saw.startswith(f"{AGAINST} (raw, mean over steps 1-6) was 44%")
    assert f.evidence[AGAINST] == [[1, 0.25], [2, 0.5], [4, 0.5], [6, 0.5]]
    # an older value outside the last 4 does not count: (0.5 + 0.25 + 0.25 + 0.5) / 4 = 0.375
    assert against([0.9, 0.5, None, 0.25, 0.25, None, 0.5]) is None


def test_the_alarm_quotes_the_means_by_advantage_sign():
    f = against([0.5] * 4, **{"update/change_pos_adv_mean": [-0.01, -0.02, -0.03, -0.02],
                              "update/change_neg_adv_mean": [-0.1, -0.2, None, -0.3]})
    assert f.saw.endswith("(alarm at 40%); update/change_pos_adv_mean (raw, mean over steps 1-4) was -0.02: the mean "
                          "Δ log p of the tokens with a positive advantage; update/change_neg_adv_mean (raw, mean "
                          "over steps 1-4) was -0.2: the mean Δ log p of the tokens with a negative advantage")
    assert f.evidence["update/change_neg_adv_mean"] == [[1, -0.1], [2, -0.2], [4, -0.3]]
    assert set(f.evidence) == {AGAINST, "update/change_pos_adv_mean", "update/change_neg_adv_mean"}


def test_against_advantage_fraction_is_a_checked_preset_field():
    assert AlarmsConfig().against_advantage_fraction == 0.6  # above 0.5, tokens moved at random
    for bad in (0.0, 1.2):
        with pytest.raises(PresetError, match="alarms.against_advantage_fraction"):
            preset_from_dict({**small_preset_dict(), "alarms": {"against_advantage_fraction": bad}})
    assert preset_from_dict({**small_preset_dict(), "alarms": {"against_advantage_fraction": 1.0}}).alarms \
        .against_advantage_fraction == 1.0
    # the stricter threshold keeps 0.40625 quiet
    assert against([0.25, 0.5, 0.375, 0.5], AlarmsConfig(window=4, against_advantage_fraction=0.5)) is None


def test_the_watcher_fires_it_once_and_writes_its_advice():
    watcher = AlarmWatcher(CFG)
    ratios = [0.1] * 3 + [0.6] * 6  # the window mean reaches 0.4 at step 6: (0.1 + 3 x 0.6) / 4 = 0.475
    fired = [a for step, r in enumerate(ratios, 1) for a in watcher.observe_metrics(step, {AGAINST: r})]
    assert [(a["step"], a["kind"], a["steps"]) for a in fired] == [(6, "update_against_advantage", [3, 6])]
    alarm = fired[0]
    assert alarm["title"] == "Tokens moved against their advantage" and alarm["metric"] == AGAINST
    assert [t["field"] for t in alarm["try"]] == ["training.learning_rate", "algorithm.num_iterations",
                                                  "algorithm.epsilon", "algorithm.beta"]
    assert alarm_line(alarm).startswith("alarm at step 6: Tokens moved against their advantage: "
                                        "update/against_advantage_ratio (raw, mean over steps 3-6) was 48%")
    for cause in ("clipping", "KL term", "learning rate too high", "share weights"):
        assert cause in alarm["why"], cause


def test_the_advice_names_real_preset_fields_and_the_window_knows_the_kind():
    from workbench.alarms.model import KIND_COLOURS, OTHER_COLOUR
    from workbench.setup.schema import algorithm_models

    from engine.preset.schema import Preset

    def exists(path: str) -> bool:
        section, name = path.split(".")
        if section == "algorithm":
            return any(name in model.model_fields for model in algorithm_models().values())
        return name in Preset.model_fields[section].annotation.model_fields

    k = KINDS["update_against_advantage"]
    assert k.why.endswith(".") and all(exists(f) for f, _ in k.try_fields)
    # the fields the advice names for other algorithms (PPO's) are real too
    named = {m for _, advice in k.try_fields for m in re.findall(r"(?:algorithm|training)\.\w+", advice)}
    assert named == {"algorithm.num_ppo_epochs", "algorithm.cliprange", "algorithm.kl_coef"}
    assert all(exists(f) for f in named), named
    assert KIND_COLOURS["update_against_advantage"] != OTHER_COLOUR
    assert len(set(KIND_COLOURS.values())) == len(KIND_COLOURS)


def test_the_alarm_advises_only_fields_of_the_runs_algorithm():
    """A KTO run moving tokens against their sign (its update's effect, recorded since the
    base took over the step) is told to try the learning rate and beta, not GRPO's
    num_iterations or epsilon, which its section does not have."""
    from engine.algorithms.grpo.config import GRPOConfig
    from engine.algorithms.kto.config import KTOConfig

    against = history(**{AGAINST: [0.9] * 6, "update/change_pos_adv_mean": [-0.1] * 6,
                         "update/change_neg_adv_mean": [0.1] * 6})
    advised = {}
    for name, config in (("kto", KTOConfig), ("grpo", GRPOConfig)):
        watcher = AlarmWatcher(CFG, algorithm_fields=config.model_fields)
        fired = [a for step, m in zip(against.steps, against.metrics) for a in watcher.observe_metrics(step, m)]
        advised[name] = [t["field"] for t in fired[0]["try"]]
    assert advised["kto"] == ["training.learning_rate", "algorithm.beta"]
    assert advised["grpo"] == ["training.learning_rate", "algorithm.num_iterations", "algorithm.epsilon",
                               "algorithm.beta"]


def test_runs_without_the_metric_never_raise_it():
    """Histories without update/against_advantage_ratio, however the other metrics look;
    and every bundled full run records it (KTO and online DPO since the base took over the
    step, re-taken 2026-11-28), but the reward model's."""
    flat = history(frac_reward_zero_std=[1] * 12, kl=[5.0] * 12, **{"update/change_abs_mean": [0.3] * 12})
    assert DETECTORS["update_against_advantage"](flat, CFG) is None
    looked_at = []
    for path in sorted(BUNDLED_RUNS.glob("*.jsonl")):
        metrics_events = [e for e in map(json.loads, path.read_text().splitlines()) if e["type"] == "metrics"]
        if any(AGAINST in e for e in metrics_events):
            continue  # a run recorded with the metric: test_alarms.py checks it raises no alarm at all
        watcher = AlarmWatcher(AlarmsConfig(window=4, against_advantage_fraction=0.4))
        fired = [a for e in metrics_events for a in watcher.observe_metrics(e["step"], e)]
        assert "update_against_advantage" not in {a["kind"] for a in fired}, path.stem
        looked_at.append(path.stem)
    # every recording has the metric (test_alarms.py replays them all) but the reward
    # model's: a score head has no tokens' log-probabilities for an update to move
    assert looked_at == ["rm-sort"]


def test_a_change_within_rounding_is_not_a_movement_against():
    # log p near 0 changes by ~1.2e-7 between two fp32 passes when nothing moved: no direction
    from engine.rl.update_effect import NO_MOVEMENT

    change = torch.tensor([[-1.192e-7, 0.3, -0.2, 2 * NO_MOVEMENT]])
    advantage = torch.tensor([[1.0, 1.0, 1.0, -1.0]])
    metrics = update_effect_metrics(change, advantage, torch.ones(1, 4))
    assert metrics["update/against_advantage_ratio"] == pytest.approx(2 / 4)  # -0.2 and 2e-6, not -1.2e-7


def test_a_sure_token_pushed_up_is_not_counted_against():
    """A token already above p 0.99 with a positive advantage has no room to rise; its drift
    down is left out of the against share. Worked: four tokens, advantages +1, +1, -1, +1;
    log p before -0.001 (sure), -0.5, -0.001 (sure, but pushed down: counts), -0.2;
    changes -0.0005, -0.1, +0.0004, +0.05.
    Counted: tokens 2, 3, 4; against: token 2 (-0.1 at A +1) and token 3 (+0.0004 at A -1): 2 / 3.
    Without `before` token 1 counts too: 3 / 4."""
    change = torch.tensor([[-0.0005, -0.1, 0.0004, 0.05]])
    advantage = torch.tensor([[1.0, 1.0, -1.0, 1.0]])
    before = torch.tensor([[-0.001, -0.5, -0.001, -0.2]])
    mask = torch.ones(1, 4)
    with_before = update_effect_metrics(change, advantage, mask, before)
    assert with_before["update/against_advantage_ratio"] == pytest.approx(2 / 3)
    assert update_effect_metrics(change, advantage, mask)["update/against_advantage_ratio"] == pytest.approx(3 / 4)
    # the other metrics count every token
    assert with_before["update/change_pos_adv_mean"] == pytest.approx((-0.0005 - 0.1 + 0.05) / 3)
