"""Several rewards normalised one by one (GDPO, multi_objective_aggregation
normalize_then_sum) and ReMax's greedy baseline (advantage_estimator remax): the pure
functions against numbers worked out by hand and against TRL's lines, the preset's
refusal of GDPO with another estimator, one GRPO step of each on the built-in model (what
reaches the loss, the samples and the trajectory records), and the reward playground."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import small_preset_dict
from engine.algorithms.grpo.trainer import GRPOTrainer
from engine.commands.score_rewards import BadRequest, score
from engine.foundation.errors import PresetError
from engine.preset.schema import preset_from_dict
from engine.rewards import combine_rewards
from engine.rl.advantages import estimate_advantages, group_advantages, normalize_then_sum, remax_estimator
from engine.rl.catalog import ESTIMATORS, REWARD_AGGREGATIONS
from engine.run import rundir

EPS = 1e-4  # TRL's: (r - mean) / (std + 1e-4), in the group and over the batch


def same_rows(got: list[dict], expected: list[dict], abs=1e-6) -> bool:
    """Lists of {name: number} equal key for key, numbers within `abs`."""
    return len(got) == len(expected) and all(
        a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], abs=abs) for k in a) for a, b in zip(got, expected))


# ------------------------------------------------------------ normalize_then_sum by hand


def test_normalize_then_sum_two_groups_of_two_by_hand():
    # 2 prompts x 2 completions, 2 rewards, weights [1, 0.5]
    components = torch.tensor([[1.0, 0.0],    # group 0
                               [0.0, 1.0],
                               [1.0, 1.0],    # group 1
                               [1.0, 0.0]])
    advantages, per_component = normalize_then_sum(components, [1.0, 0.5], 2)
    # reward 0, group 0: [1, 0] -> mean 0.5, centred [0.5, -0.5], unbiased std sqrt(0.25 + 0.25) = 0.707107
    #   -> z = 0.5 / (0.707107 + 1e-4) = 0.707007, [+0.707007, -0.707007]
    # reward 0, group 1: [1, 1] -> equal: [0, 0] exactly
    # reward 1, group 0: [0, 1] -> [-0.707007, +0.707007]; group 1: [1, 0] -> [+0.707007, -0.707007]
    z = 0.5 / (math.sqrt(0.5) + EPS)
    assert z == pytest.approx(0.707007, abs=1e-6)
    expected_z = [[z, -z], [-z, z], [0.0, z], [0.0, -z]]
    torch.testing.assert_close(per_component.double(), torch.tensor(expected_z, dtype=torch.float64), atol=1e-6, rtol=0)
    assert per_component[2, 0].item() == 0.0 and per_component[3, 0].item() == 0.0  # exactly
    # weighted sums s = z_0 + 0.5 z_1: [z - z/2, -z + z/2, 0 + z/2, 0 - z/2]
    #   = [0.353504, -0.353504, 0.353504, -0.353504]
    s = z / 2
    # over the batch: mean 0, unbiased std sqrt(4 s^2 / 3) = 0.408191 -> A = s / (0.408191 + 1e-4) = 0.865813
    std = math.sqrt(4 * s * s / 3)
    assert std == pytest.approx(0.408191, abs=1e-6)
    a = s / (std + EPS)
    assert a == pytest.approx(0.865813, abs=1e-6)
    assert advantages.tolist() == pytest.approx([a, -a, a, -a], abs=1e-6)
    # GRPO on the weighted totals [1, 0.5, 1.5, 1] gives +-0.707 in both groups instead: GDPO
    # weighs group 1, where only the half-weighted reward varies, the same as group 0 after the batch step
    grpo = group_advantages(torch.tensor([1.0, 0.5, 1.5, 1.0]), 2)
    assert grpo.tolist() == pytest.approx([0.25 / (math.sqrt(0.125) + EPS), -0.25 / (math.sqrt(0.125) + EPS)] * 2,
                                          abs=1e-6)


def test_a_group_of_equal_values_gets_exactly_zero():
    # 0.7 three times: its float64 mean differs from 0.7 in the last bit (1.1e-16), which over
    # std + eps would be a non-zero advantage; the group must give none at all.
    components = torch.tensor([[0.7, 0.3], [0.7, 0.3], [0.7, 0.3],
                               [1.0, 0.0], [0.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    advantages, per_component = normalize_then_sum(components, [1.0, 2.0], 3)
    assert advantages[:3].tolist() == [0.0, 0.0, 0.0]
    assert per_component[:3].tolist() == [[0.0, 0.0]] * 3
    assert (advantages[3:] != 0).all()
    # every group equal: no signal anywhere, 0 / (0 + eps) = 0
    flat, _ = normalize_then_sum(torch.full((4, 2), 0.7), [1.0, 1.0], 2)
    assert flat.tolist() == [0.0] * 4


def test_trls_eps_is_added_to_each_groups_std():
    # one reward, group 0 [0, 2e-4]: centred +-1e-4, std sqrt(2e-8) = 1.41421e-4
    #   -> z = 1e-4 / (1.41421e-4 + 1e-4) = 0.414214 (without eps it would be 0.707107)
    # group 1 [0, 1]: z = 0.5 / (0.707107 + 1e-4) = 0.707007
    components = torch.tensor([[0.0], [2e-4], [0.0], [1.0]], dtype=torch.float64)
    advantages, per_component = normalize_then_sum(components, [1.0], 2)
    small, large = 1e-4 / (math.sqrt(2e-8) + EPS), 0.5 / (math.sqrt(0.5) + EPS)
    assert small == pytest.approx(0.414214, abs=1e-6)
    assert per_component[:, 0].tolist() == pytest.approx([-small, small, -large, large], abs=1e-6)
    # batch: mean 0, std sqrt((2 * 0.414214^2 + 2 * 0.707007^2) / 3) = sqrt((0.343146 + 0.999718) / 3)
    #   = sqrt(0.447621) = 0.669045, A = z / (0.669045 + 1e-4)
    std = math.sqrt((2 * small**2 + 2 * large**2) / 3)
    assert std == pytest.approx(0.669045, abs=1e-6)
    assert advantages.tolist() == pytest.approx([v / (std + EPS) for v in (-small, small, -large, large)], abs=1e-6)


def trl_normalize_then_sum(components, weights, G):
    """TRL 1.16 GRPOTrainer._generate_and_score_completions, its "normalize_then_sum" branch
    (no unscorable rows, so nanmean/nanstd are mean/std)."""
    K = components.shape[1]
    grouped = components.view(-1, G, K)
    mean_k = grouped.mean(dim=1, keepdim=True)
    std_k = grouped.std(dim=1, keepdim=True)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, K)
    rewards = (reward_k * weights.unsqueeze(0)).sum(dim=1)
    return (rewards - rewards.mean()) / (rewards.std() + 1e-4), reward_k


def test_normalize_then_sum_matches_trls_lines():
    generator = torch.Generator().manual_seed(3)
    components = torch.randint(0, 4, (24, 3), generator=generator).double() / 3  # ties within groups
    weights = torch.tensor([1.0, 0.5, -0.25], dtype=torch.float64)
    ours, ours_k = normalize_then_sum(components, weights, 4)
    theirs, theirs_k = trl_normalize_then_sum(components, weights, 4)
    torch.testing.assert_close(ours.double(), theirs, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours_k.double(), theirs_k, atol=1e-6, rtol=0)
    assert ours.dtype == torch.float32 and ours.shape == (24,) and ours_k.shape == (24, 3)


def test_normalize_then_sum_refuses_shapes_that_do_not_fit():
    with pytest.raises(ValueError, match=r"weights has shape \(3,\); it must be \(2,\)"):
        normalize_then_sum(torch.zeros(4, 2), [1.0, 1.0, 1.0], 2)
    with pytest.raises(ValueError, match="not divisible by num_generations"):
        normalize_then_sum(torch.zeros(5, 2), [1.0, 1.0], 2)
    with pytest.raises(ValueError, match=r"must be \(B, K\)"):
        normalize_then_sum(torch.zeros(4), [1.0], 2)


# ------------------------------------------------------------------------------ ReMax


def test_remax_is_reward_minus_the_greedy_reward():
    rewards = torch.tensor([1.0, 0.5, 0.0, 1.0])
    # prompt 0's greedy completion scored 0.5, prompt 1's 1.0 (each repeated over its group of 2)
    baselines = torch.tensor([0.5, 0.5, 1.0, 1.0])
    # 1 - 0.5, 0.5 - 0.5, 0 - 1, 1 - 1
    assert remax_estimator(rewards, None, baseline_rewards=baselines).tolist() == [0.5, 0.0, -1.0, 0.0]
    through_registry = estimate_advantages("remax", rewards, torch.ones(4, 3), num_generations=2,
                                           scale_rewards="group", baseline_rewards=baselines)
    assert through_registry.tolist() == [0.5, 0.0, -1.0, 0.0]
    with pytest.raises(ValueError, match="remax needs baseline_rewards"):
        estimate_advantages("remax", rewards, torch.ones(4, 3), num_generations=2, scale_rewards="group")
    with pytest.raises(ValueError, match="must match the rewards"):
        remax_estimator(rewards, None, baseline_rewards=torch.zeros(2))


def test_the_registries_declare_them():
    remax = ESTIMATORS.declares("remax")
    assert remax.greedy_baseline and not remax.needs_group and not remax.per_token
    assert not any(ESTIMATORS.declares(name).greedy_baseline for name in ESTIMATORS.names() if name != "remax")
    assert REWARD_AGGREGATIONS.names() == ("sum_then_normalize", "normalize_then_sum")
    assert REWARD_AGGREGATIONS.declares("normalize_then_sum").own_advantages
    assert not REWARD_AGGREGATIONS.declares("sum_then_normalize").own_advantages
    assert preset_from_dict({}).algorithm.multi_objective_aggregation == "sum_then_normalize"


@pytest.mark.parametrize("estimator", ["rloo", "remax", "reinforce_pp"])
def test_gdpo_with_another_estimator_is_refused_naming_both_fields(estimator):
    with pytest.raises(PresetError) as caught:
        preset_from_dict({"algorithm": {"name": "grpo", "multi_objective_aggregation": "normalize_then_sum",
                                        "advantage_estimator": estimator}})
    (problem,) = caught.value.problems
    assert problem.startswith("algorithm.multi_objective_aggregation: normalize_then_sum computes the advantages "
                              "itself")
    assert f"advantage_estimator must be grpo (got {estimator})" in problem
    assert "set advantage_estimator: grpo, or multi_objective_aggregation: sum_then_normalize" in problem
    # the same estimator with the default aggregation is fine, and GDPO with grpo
    preset_from_dict({"algorithm": {"name": "grpo", "advantage_estimator": estimator}})
    preset_from_dict({"algorithm": {"name": "grpo", "multi_objective_aggregation": "normalize_then_sum"}})


# ------------------------------------------------------------------ one GRPO step of each


def run_one_step(tmp_path, monkeypatch, **algorithm):
    """One training step of a tiny GRPO preset (2 prompts x 4 completions, rewards exact_match
    and sort_position weighted 0.5, no held-out set): the trainer, its StepResult, the
    generate calls {prompts, greedy, group_size} and the advantages each grpo_loss call got."""
    import engine.algorithms.grpo.trainer as trainer_module

    data = small_preset_dict(max_steps=1, log_completions=8, record_rollouts=8)
    data["data"]["num_eval"] = 0  # no held-out evaluation: its greedy decoding is not the baseline's
    data["algorithm"].update(algorithm)
    trainer = GRPOTrainer(preset_from_dict(data), tmp_path / "run")
    generated, losses, results = [], [], []
    real_generate, real_step, real_loss = trainer.generate, trainer.train_step, trainer_module.grpo_loss

    def generate(prompts, greedy=False, group_size=1):
        generated.append({"prompts": list(prompts), "greedy": greedy, "group_size": group_size})
        return real_generate(prompts, greedy=greedy, group_size=group_size)

    def loss(logprobs, old_logprobs, ref_logprobs, advantages, mask, **kwargs):
        losses.append(advantages.detach().clone())
        return real_loss(logprobs, old_logprobs, ref_logprobs, advantages, mask, **kwargs)

    monkeypatch.setattr(trainer, "generate", generate)
    monkeypatch.setattr(trainer, "train_step", lambda: results.append(real_step()) or results[-1])
    monkeypatch.setattr(trainer_module, "grpo_loss", loss)
    assert trainer.run() == "done"
    (result,) = results
    return trainer, result, generated, losses


def written(run_dir):
    events = rundir.read_events(run_dir)
    samples = next(e for e in events if e["type"] == "samples")["samples"]
    metrics = next(e for e in events if e["type"] == "metrics")
    started = next(e for e in events if e["type"] == "run_started")
    return samples, rundir.read_trajectories(run_dir, 1), metrics, started


def test_a_gdpo_step_normalises_each_reward_and_records_them(tmp_path, monkeypatch):
    trainer, result, _, losses = run_one_step(tmp_path, monkeypatch, multi_objective_aggregation="normalize_then_sum")
    last = result.outputs
    assert list(last.components) == ["exact_match", "sort_position"]
    values = torch.tensor([last.components[name] for name in last.components], dtype=torch.float64).T  # (8, 2)
    expected, per_component = normalize_then_sum(values, [1.0, 0.5], 4)
    (passed,) = losses  # one micro-batch, one iteration
    assert torch.equal(passed, expected)  # what the loss got is GDPO's, from the step's own rewards
    assert len(set(last.components["sort_position"])) > 1  # (a step with some signal)
    # not what GRPO would have given the weighted totals
    assert not torch.allclose(expected, group_advantages(torch.tensor(last.totals), 4))
    # groups with no signal: those whose advantages are all 0
    zero = [bool((expected[g * 4:(g + 1) * 4] == 0).all()) for g in range(2)]
    samples, records, metrics, _ = written(tmp_path / "run")
    assert metrics["frac_reward_zero_std"] == sum(zero) / 2
    assert "baseline/reward_mean" not in metrics
    rows = [dict(zip(last.components, row)) for row in per_component.tolist()]
    assert same_rows([s["component_advantages"] for s in samples], rows)
    assert [s["advantage"] for s in samples] == pytest.approx(expected.tolist())
    assert len(records) == 8
    assert same_rows([r["component_advantages"] for r in records], rows)
    assert all("baseline" not in s for s in samples + records)


def test_a_remax_step_generates_one_greedy_completion_a_prompt(tmp_path, monkeypatch):
    trainer, result, generated, losses = run_one_step(tmp_path, monkeypatch, advantage_estimator="remax")
    last = result.outputs
    # the sampled batch, then one greedy completion of each of its 2 prompts, once
    sampled, greedy = generated
    assert not sampled["greedy"] and sampled["group_size"] == 4 and len(sampled["prompts"]) == 8
    assert greedy == {"prompts": sampled["prompts"][::4], "greedy": True, "group_size": 1}
    assert len(set(greedy["prompts"])) == 2
    samples, records, metrics, started = written(tmp_path / "run")
    # each row carries its prompt's greedy completion, scored by the same rewards and data fields
    fields_of = {e.prompt: e.fields for e in trainer.train_examples}
    baselines = []
    for prompt in greedy["prompts"]:
        row = next(s for s in samples if s["prompt"] == prompt)["baseline"]
        totals, parts = combine_rewards(trainer.reward_components, [prompt], [row["completion"]],
                                        {k: [v] for k, v in fields_of[prompt].items()})
        assert row["reward"] == pytest.approx(totals[0])
        assert same_rows([row["rewards"]], [{k: v[0] for k, v in parts.items()}])
        baselines.append(row)
    assert [s["baseline"] for s in samples] == [baselines[0]] * 4 + [baselines[1]] * 4
    assert [r["baseline"] for r in records] == [baselines[0]] * 4 + [baselines[1]] * 4
    # advantage = reward - the greedy completion's reward, in the loss and in the samples
    expected = [s["reward"] - s["baseline"]["reward"] for s in samples]
    (passed,) = losses
    assert passed.tolist() == pytest.approx(expected, abs=1e-6)
    assert [s["advantage"] for s in samples] == pytest.approx(expected, abs=1e-6)
    assert torch.equal(passed, last.advantages)
    # no learning signal: a group whose every sample scored what its greedy completion did
    zero = [bool((passed[g * 4:(g + 1) * 4] == 0).all()) for g in range(2)]
    assert metrics["frac_reward_zero_std"] == sum(zero) / 2
    assert metrics["baseline/reward_mean"] == pytest.approx((baselines[0]["reward"] + baselines[1]["reward"]) / 2)
    reward_plot = next(p for p in started["plots"] if p["key"] == "reward")
    assert reward_plot["metrics"] == ["reward", "reward_std", "baseline/reward_mean"]
    assert all("component_advantages" not in s for s in samples)


def test_the_reward_plot_is_plain_without_a_greedy_baseline(tmp_path):
    trainer = GRPOTrainer(preset_from_dict(small_preset_dict(max_steps=1)), tmp_path / "run")
    assert not trainer.greedy_baseline
    reward_plot = next(p for p in trainer.declaration()["plots"] if p["key"] == "reward")
    assert reward_plot["metrics"] == ["reward", "reward_std"]
    assert GRPOTrainer.PLOTS[0]["metrics"] == ["reward", "reward_std"]  # the class's own left as it was


# -------------------------------------------------------------------------- the playground

REWARDS = [{"name": "exact_match"}, {"name": "sort_position", "weight": 0.5}]


def playground_items(completions, answer=" 1 2 3"):
    return [{"prompt": "sort 3 1 2 =", "completion": c, "fields": {"answer": answer}} for c in completions]


def test_the_playground_recomputes_gdpo_from_the_components():
    completions = [" 1 2 3", " 3 1 2", " 1 2", " 2 1 3", " 1 2 3", " 1 2 3", " 9"]  # the last group partial
    answer = score({"preset": {"rewards": REWARDS, "algorithm": {
        "name": "grpo", "num_generations": 3, "multi_objective_aggregation": "normalize_then_sum"}},
        "items": playground_items(completions)})
    about, items = answer["advantages"], answer["items"]
    assert about["computed"] and about["multi_objective_aggregation"] == "normalize_then_sum"
    values = torch.tensor([[i["components"]["exact_match"], i["components"]["sort_position"]] for i in items[:6]],
                          dtype=torch.float64)
    expected, per_component = normalize_then_sum(values, [1.0, 0.5], 3)
    assert [i["advantage"] for i in items[:6]] == pytest.approx(expected.tolist(), abs=1e-6)
    assert same_rows([i["component_advantages"] for i in items[:6]],
                     [{"exact_match": a, "sort_position": b} for a, b in per_component.tolist()])
    assert items[6]["advantage"] is None and items[6]["component_advantages"] is None
    # group 1 ( 2 1 3, 1 2 3, 1 2 3): exact_match [0, 1, 1] -> centred [-2/3, 1/3, 1/3], std 0.57735
    #   -> z [-1.15450, 0.57725, 0.57725]
    z = 1 / 3 / (math.sqrt(1 / 3) + EPS)
    assert [i["component_advantages"]["exact_match"] for i in items[3:6]] == pytest.approx([-2 * z, z, z], abs=1e-6)
    assert any("over these 6 completions" in note for note in answer["notes"])


def test_the_playground_says_what_remax_needs_then_uses_the_baselines_given():
    preset = {"rewards": REWARDS, "algorithm": {"name": "grpo", "num_generations": 2, "advantage_estimator": "remax"}}
    items = playground_items([" 1 2 3", " 3 1 2", " 1 2", " 2 1 3"])
    answer = score({"preset": preset, "items": items})
    about = answer["advantages"]
    assert not about["computed"] and about["greedy_baseline"]
    assert "greedy completion" in about["reason"] and "`baseline`" in about["reason"]
    assert [i["advantage"] for i in answer["items"]] == [None] * 4
    # the first group carries its greedy completion: as a run's samples row has it, and as text
    items[0]["baseline"] = {"completion": " 1 3 2", "reward": 123.0, "rewards": {}}  # the run's numbers are not used
    items[1]["baseline"] = " 1 3 2"
    answer = score({"preset": preset, "items": items})
    assert answer["advantages"]["computed"]
    alone = score({"preset": {"rewards": REWARDS}, "items": playground_items([" 1 3 2"])})["items"][0]
    for item in answer["items"][:2]:
        assert item["baseline"] == {"completion": " 1 3 2", "total": alone["total"],
                                    "components": alone["components"]}
        assert item["advantage"] == pytest.approx(item["total"] - alone["total"], abs=1e-6)
    # " 1 2 3": 1 + 0.5 * 1 = 1.5; " 1 3 2": 0 + 0.5 * 1/3 -> 1.5 - 1/6 = 1.3333
    assert answer["items"][0]["advantage"] == pytest.approx(1.5 - 1 / 6, abs=1e-6)
    assert [i["advantage"] for i in answer["items"][2:]] == [None, None]
    assert [i["baseline"] for i in answer["items"][2:]] == [None, None]
    assert any("2 items without a baseline" in note for note in answer["notes"])
    items[2]["baseline"] = {"reward": 1.0}
    with pytest.raises(BadRequest, match=r"items\[2\].baseline must be the prompt's greedy completion"):
        score({"preset": preset, "items": items})


def test_a_users_estimator_asking_for_baseline_rewards_gets_the_greedy_baseline(tmp_path):
    from engine.algorithms.grpo.config import GRPOConfig
    from engine.rl.catalog import wants_greedy_baseline
    from engine.rl.user_code import resolve, try_user_functions

    (tmp_path / "mine.py").write_text(
        "def halved_remax(rewards, mask, *, baseline_rewards):\n"
        "    return (rewards - baseline_rewards) / 2\n")
    entry = resolve(ESTIMATORS, "mine.py:halved_remax", tmp_path)
    assert entry.declares.greedy_baseline and wants_greedy_baseline(entry)
    out = estimate_advantages("mine.py:halved_remax", torch.tensor([1.0, 0.0]), torch.ones(2, 1), num_generations=2,
                              scale_rewards="group", baseline_rewards=torch.tensor([0.5, 0.5]), base_dir=tmp_path)
    assert out.tolist() == [0.25, -0.25]
    # `rl-engine validate` runs it once on a synthetic batch, with a baseline
    passed, failed = try_user_functions(GRPOConfig(advantage_estimator="mine.py:halved_remax"), tmp_path)
    assert failed == [] and "advantages (16,)" in passed[0]
    assert not wants_greedy_baseline(ESTIMATORS.entry("grpo"))
