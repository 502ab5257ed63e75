"""Process supervision (issue 25): step rewards on tokens (engine/rl/process.py,
engine/algorithms/step_rewards.py), GRPO's `grpo_process` estimator and PPO's per-token
step rewards, each against numbers worked out by hand, and one GRPO and one PPO step of
the built-in model with the built-in step reward `sort_steps`."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import small_preset_dict
from engine.commands.train import build_trainer
from engine.algorithms.step_rewards import StepRewards
from engine.foundation.errors import PresetError
from engine.preset.schema import preset_from_dict
from engine.rl.advantages import estimate_advantages, group_advantages, ppo_token_rewards
from engine.rl.catalog import ESTIMATORS
from engine.rl.process import process_advantages, step_tensors
from engine.run import rundir


def test_step_tensors_put_each_weighted_step_and_the_outcome_on_their_tokens():
    values, ends = step_tensors({"s": [[(0, 1.0), (2, 0.0)], [(1, 1.0)]], "t": [[(2, 2.0)], []]},
                                {"s": 0.5, "t": 1.0}, torch.tensor([3, 2]), 4, outcome=torch.tensor([1.0, -1.0]))
    # row 0: s's 0.5 * 1 on token 0; on token 2 s's 0.5 * 0, t's 2 and the outcome 1 (its last token)
    assert values.tolist() == [[0.5, 0.0, 3.0, 0.0], [0.0, 0.5 - 1.0, 0.0, 0.0]]
    assert ends.tolist() == [[True, False, True, False], [False, True, False, False]]


def test_process_advantages_by_hand():
    # G=2, T=4. Completion 0: steps ending on tokens 1 and 3 scored 1 and 0; completion 1
    # (3 tokens): one step ending on token 2 scored 1. R = [1, 0, 1]: mean 2/3, unbiased std
    # sqrt(((1/3)^2 + (2/3)^2 + (1/3)^2) / 2) = sqrt(1/3) = 0.57735.
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    ends = torch.tensor([[False, True, False, True], [False, False, True, False]])
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 1, 1, 0]])
    std = math.sqrt(1 / 3) + 1e-4
    up, down = (1 / 3) / std, (-2 / 3) / std
    got = process_advantages(rewards, ends, mask, 2)
    expected = [[up + down, up + down, down, down], [up, up, up, 0.0]]
    assert torch.allclose(got, torch.tensor(expected), atol=1e-6)
    # scale_rewards none: centred only
    assert torch.allclose(process_advantages(rewards, ends, mask, 2, "none"),
                          torch.tensor([[-1 / 3, -1 / 3, -2 / 3, -2 / 3], [1 / 3, 1 / 3, 1 / 3, 0.0]]), atol=1e-6)


def test_batch_scaling_uses_every_step_reward_of_the_batch():
    # two groups of 2, one step each: group 0 scores [1, 0], group 1 [0, 0] (no signal)
    rewards = torch.tensor([[1.0], [0.0], [0.0], [0.0]])
    ends = torch.ones(4, 1, dtype=torch.bool)
    batch_std = torch.tensor([1.0, 0.0, 0.0, 0.0]).std().item()  # 0.5
    got = process_advantages(rewards, ends, torch.ones(4, 1), 2, "batch")
    assert got[:, 0].tolist() == pytest.approx([0.5 / (batch_std + 1e-4), -0.5 / (batch_std + 1e-4), 0.0, 0.0])


def test_a_group_of_alike_steps_gets_exactly_zero():
    rewards = torch.tensor([[0.7, 0.0, 0.7], [0.0, 0.7, 0.0]])
    ends = torch.tensor([[True, False, True], [False, True, False]])
    assert process_advantages(rewards, ends, torch.ones(2, 3), 2).abs().sum().item() == 0.0


def test_one_step_a_completion_is_grpo():
    # outcome rewards only: each completion one step on its last token -> GRPO's advantage on
    # every token up to it (the group's steps are its G rewards, the same mean and std)
    totals = torch.tensor([1.0, 0.0, 0.5, 0.5, 1.0, 0.25])
    lengths = torch.tensor([2, 3, 1, 3, 3, 2])
    values, ends = step_tensors({}, {}, lengths, 3, outcome=totals)
    mask = (torch.arange(3)[None, :] < lengths[:, None]).float()
    got = estimate_advantages("grpo_process", totals, mask, num_generations=3, scale_rewards="group",
                              step_rewards=values, step_ends=ends)
    expected = group_advantages(totals, 3)[:, None] * mask
    assert torch.allclose(got, expected, atol=1e-6)


def test_grpo_process_is_registered_and_declares_what_it_reads():
    declared = ESTIMATORS.declares("grpo_process")
    assert declared.step_rewards and declared.per_token and declared.uses_scale_rewards
    assert [name for name in ESTIMATORS.names() if ESTIMATORS.declares(name).step_rewards] == ["grpo_process"]
    with pytest.raises(ValueError, match="needs step_rewards"):
        estimate_advantages("grpo_process", torch.zeros(2), torch.ones(2, 1), num_generations=2, scale_rewards="group")


def test_ppo_puts_each_step_reward_on_the_token_ending_it():
    # PPO's step rewards: the step tensors without an outcome step (it goes on the last token apart)
    steps = StepRewards({"s": [[(0, 1.0), (2, 0.0)]]}, {"s": 0.5}).tensors(torch.tensor([3]), 3, None, "cpu")[0]
    assert steps.tolist() == [[0.5, 0.0, 0.0]]
    rewards, non_score = ppo_token_rewards(torch.tensor([1.0]), torch.tensor([[0.5, 1.0, 0.0]]),
                                           torch.tensor([[1.0, 1.0, 1.0]]), 0.1, steps)
    assert rewards[0].tolist() == pytest.approx([-0.05 + 0.5, -0.1, 1.0])
    assert non_score[0].tolist() == pytest.approx([-0.05, -0.1, 0.0])


def test_step_rewards_outcome_metrics_and_row_extras():
    steps = StepRewards({"s": [[(0, 1.0), (2, 1.0)], [(1, 1.0)], [(0, 0.0)], [(1, 1.0)]]},
                        {"s": 0.5, "exact": 1.0})
    assert steps.outcome_totals({"exact": [1.0, 0.0, 1.0, 1.0], "s": [1.0, 1.0, 0.0, 1.0]}) == [1.0, 0.0, 1.0, 1.0]
    # group 0 (rows 0, 1): every step scored 1 -> alike; group 1: 0 and 1
    assert steps.metrics(2) == {"steps/count_mean": 1.25, "steps/single_step_ratio": 0.75,
                                "frac_step_reward_zero_std": 0.5}
    extras = steps.row_extras()
    assert extras["steps"][0] == {"s": {"ends": [0, 2], "scores": [1.0, 1.0]}}
    assert extras["step_weights"] == [{"s": 0.5}] * 4
    assert not StepRewards({}, {"exact": 1.0}) and StepRewards({}, {}).row_extras() == {}


# --------------------------------------------------------------------- preset checks

STEPPED = [{"name": "exact_match"}, {"name": "sort_steps", "weight": 0.5}]


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "remax"])
def test_a_step_reward_with_a_one_number_estimator_is_refused(estimator):
    with pytest.raises(PresetError, match=r"rewards.1: sort_steps scores each step.*grpo_process"):
        preset_from_dict({"algorithm": {"name": "grpo", "advantage_estimator": estimator}, "rewards": STEPPED})


def test_online_dpo_refuses_step_rewards_and_ppo_and_dpo_take_them():
    with pytest.raises(PresetError, match=r"online DPO \(algorithm.name: online_dpo\) ranks"):
        preset_from_dict({"algorithm": {"name": "online_dpo"}, "rewards": STEPPED})
    preset_from_dict({"algorithm": {"name": "ppo"}, "rewards": STEPPED})
    preset_from_dict({"algorithm": {"name": "grpo", "advantage_estimator": "grpo_process"}, "rewards": STEPPED})


# ----------------------------------------------------------- one step of the engine


def run_one_step(tmp_path, monkeypatch, algorithm: dict):
    """One step of a tiny preset with exact_match and sort_steps (weight 0.5): the trainer,
    its StepResult and the advantages each grpo_loss call got (GRPO)."""
    import engine.algorithms.grpo.trainer as grpo_module
    data = small_preset_dict(max_steps=1, log_completions=8, record_rollouts=8)
    data["data"]["num_eval"] = 0
    data["rewards"] = STEPPED
    data["algorithm"].update(algorithm)
    preset = preset_from_dict(data)
    trainer = build_trainer(preset, tmp_path / "run")
    losses, results = [], []
    real_step, real_loss = trainer.train_step, grpo_module.grpo_loss

    def loss(logprobs, old_logprobs, ref_logprobs, advantages, mask, **kwargs):
        losses.append(advantages.detach().clone())
        return real_loss(logprobs, old_logprobs, ref_logprobs, advantages, mask, **kwargs)

    monkeypatch.setattr(trainer, "train_step", lambda: results.append(real_step()) or results[-1])
    monkeypatch.setattr(grpo_module, "grpo_loss", loss)
    assert trainer.run() == "done"
    return trainer, results[0], losses


def test_a_grpo_process_step_gives_tokens_of_different_steps_different_advantages(tmp_path, monkeypatch):
    trainer, result, losses = run_one_step(tmp_path, monkeypatch,
                                           {"advantage_estimator": "grpo_process", "temperature": 1.5})
    last = result.outputs
    records = rundir.read_trajectories(tmp_path / "run", 1)
    assert len(records) == 8 and all("steps" in r for r in records)
    # recompute the advantages by hand from what the records say: each step's weighted score on
    # its end token, the outcome (exact_match) on the last token, process_advantages over each group
    T = last.rollout.completion_mask.shape[1]
    values = torch.zeros(8, T, dtype=torch.float64)
    ends = torch.zeros(8, T, dtype=torch.bool)
    for i, record in enumerate(records):
        steps = record["steps"]["sort_steps"]
        assert steps["ends"] == sorted(steps["ends"]) and all(0 <= e < len(record["tokens"]) for e in steps["ends"])
        for end, score in zip(steps["ends"], steps["scores"]):
            values[i, end] += 0.5 * score
            ends[i, end] = True
        values[i, len(record["tokens"]) - 1] += record["rewards"]["exact_match"]
        ends[i, len(record["tokens"]) - 1] = True
        # the step reward's value is the mean of its step scores
        assert record["rewards"]["sort_steps"] == pytest.approx(
            sum(steps["scores"]) / len(steps["scores"]) if steps["scores"] else 0.0)
    (passed,) = losses
    expected = process_advantages(values, ends, last.rollout.completion_mask, 4)
    assert torch.allclose(passed, expected, atol=1e-6)
    # within some completion the advantage changes from one step to the next
    varied = [i for i in range(8) if len(set(records[i]["advantage"])) > 1]
    assert varied, [r["completion"] for r in records]
    events = rundir.read_events(tmp_path / "run")
    metrics = next(e for e in events if e["type"] == "metrics")
    assert {"steps/count_mean", "steps/single_step_ratio", "frac_step_reward_zero_std"} <= set(metrics)
    samples = next(e for e in events if e["type"] == "samples")["samples"]
    assert [s["steps"]["sort_steps"] for s in samples] == [r["steps"]["sort_steps"]["scores"] for r in records]


def test_a_ppo_step_puts_step_rewards_on_their_tokens(tmp_path, monkeypatch):
    data = small_preset_dict(max_steps=1, log_completions=8, record_rollouts=8)
    data["data"]["num_eval"] = 0
    data["rewards"] = STEPPED
    data["algorithm"] = {"name": "ppo", "num_generations": 1, "max_completion_length": 14, "kl_coef": 0.0,
                         "temperature": 1.5}
    preset = preset_from_dict(data)
    trainer = build_trainer(preset, tmp_path / "run")
    assert trainer.run() == "done"
    for record in rundir.read_trajectories(tmp_path / "run", 1):
        expected = [0.0] * len(record["tokens"])
        for end, score in zip(record["steps"]["sort_steps"]["ends"], record["steps"]["sort_steps"]["scores"]):
            expected[end] += 0.5 * score
        # the score on the last token is the outcome reward alone (exact_match; no missing-EOS penalty set)
        assert record["score"] == record["rewards"]["exact_match"]
        expected[-1] += record["score"]  # kl_coef 0: nothing else
        assert record["reward_per_token"] == pytest.approx(expected, abs=1e-3)


def test_a_custom_file_and_a_process_reward_model_train_a_grpo_process_step(tmp_path, monkeypatch):
    """The issue's three sources of steps in one run: the built-in sort_steps, a function in
    a file next to the preset (one score a space-separated piece, `step_delimiter: " "`) and
    a tiny process reward model (a token classifier scoring each piece)."""
    from transformers import AutoTokenizer

    from hub_fixtures import make_tiny_chat_model
    from test_process_reward_model import save_prm

    tokenizer = AutoTokenizer.from_pretrained(make_tiny_chat_model(tmp_path / "chat"))
    prm = save_prm(tmp_path / "prm", tokenizer, "token_classification")
    (tmp_path / "pieces.py").write_text(
        "def digit_pieces(prompts, completions, **fields):\n"
        "    # one score a piece of the completion split at ' ': 1 for a single digit\n"
        "    return [[1.0 if p.strip().isdigit() else 0.0 for p in _pieces(c)] for c in completions]\n\n\n"
        "def _pieces(text):\n"
        "    parts = text.split(' ')\n"
        "    pieces = [p + ' ' for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])\n"
        "    return pieces or ['']\n")
    monkeypatch.chdir(tmp_path)
    rewards = [*STEPPED,
               {"name": "pieces.py:digit_pieces", "weight": 0.25, "step_delimiter": " "},
               {"name": "process_reward_model", "weight": 0.25, "step_delimiter": " ", "options": {"model": prm}}]
    data = small_preset_dict(max_steps=1, log_completions=8, record_rollouts=8)
    data["data"]["num_eval"] = 0
    data["rewards"] = rewards
    data["algorithm"].update(advantage_estimator="grpo_process", temperature=1.5)
    trainer = build_trainer(preset_from_dict(data), tmp_path / "run", preset_dir=tmp_path)
    assert trainer.run() == "done"
    records = rundir.read_trajectories(tmp_path / "run", 1)
    for record in records:
        assert set(record["steps"]) == {"sort_steps", "digit_pieces", "process_reward_model"}
        pieces = record["steps"]["digit_pieces"]
        # the file's steps and the PRM's are the same pieces, ending on the same tokens
        assert pieces["ends"] == record["steps"]["process_reward_model"]["ends"]
        assert all(0.0 < s < 1.0 for s in record["steps"]["process_reward_model"]["scores"])
        assert record["step_weights"] == {"sort_steps": 0.5, "digit_pieces": 0.25, "process_reward_model": 0.25}
    assert any(len(set(r["advantage"])) > 1 for r in records)


def test_the_controls_outcome_reward_is_the_step_rewards_mean():
    """presets/examples/grpo-sort-steps-outcome.yaml (README's control): its file reward gives
    sort_steps' mean as one number a completion, which plain grpo takes."""
    from pathlib import Path

    from engine.preset.schema import load_preset
    from engine.rewards import build_reward_components, score_rewards_with_steps

    folder = Path(__file__).resolve().parent.parent / "presets" / "examples"
    preset = load_preset(folder / "grpo-sort-steps-outcome.yaml")
    assert preset.algorithm.advantage_estimator == "grpo"
    components = build_reward_components(preset.rewards, base_dir=folder)
    totals, values, steps = score_rewards_with_steps(components, ["p"] * 3, [" 1 3 2", " 1 2 3", "x"],
                                                     {"answer": [" 1 2 3"] * 3})
    assert values["sort_steps_mean"] == [pytest.approx(1 / 3), 1.0, 0.0] and steps == {}
    assert totals == [pytest.approx(0.5 / 3), 1.5, 0.0]
