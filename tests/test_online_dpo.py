"""Online DPO (engine/algorithms/online_dpo/): the ranking of a prompt's two sampled
completions, DPO's loss on the pair against hand-worked numbers, the preset section's
rules, and steps on the built-in model (TRL's metrics, pair records, samples rows,
exact gradient accumulation)."""

import json
import math

import pytest
import torch

from conftest import small_preset_dict
from engine.commands.train import build_trainer
from engine.algorithms.online_dpo.ranking import penalised_scores, rank_pairs
from engine.algorithms.online_dpo.trainer import OnlineDPOTrainer, chosen_and_rejected, pair_losses
from engine.foundation.errors import PresetError
from engine.preset.schema import preset_from_dict
from engine.rl.dpo_losses import dpo_loss
from engine.run import rundir

# Every metric TRL 1.16's experimental OnlineDPOTrainer logs with reward functions, and
# the ones our progress bar, dashboard and alarms read.
TRL_METRICS = {
    "objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward",
    "objective/scores", "objective/scores_margin", "rewards/chosen", "rewards/rejected", "rewards/accuracies",
    "rewards/margins", "logps/chosen", "logps/rejected", "val/contain_eos_token", "beta", "loss", "grad_norm",
    "learning_rate",
}
OUR_METRICS = {
    "reward", "reward_std", "rewards/exact_match/mean", "rewards/sort_position/mean", "completions/mean_length",
    "completions/clipped_ratio", "frac_reward_zero_std", "kl", "entropy", "step_time", "timing/rollout",
    "timing/update", "throughput/tokens_per_second",
}
SAMPLE_KEYS = {"index", "group", "prompt", "completion", "rejected", "reward", "rewards", "advantage", "tie"}
RECORD_KEYS = {"step", "index", "group", "prompt", "beta", "margin", "score_margin", "tie", "chosen", "rejected",
               "algorithm"}
SIDE_KEYS = {"completion", "token_ids", "tokens", "logprob", "ref_logprob", "implicit_reward", "entropy", "kl",
             "top_ids", "top_tokens", "top_probs", "reward", "rewards", "logprob_after", "logprob_change"}


def online_preset(training=None, **algorithm) -> dict:
    data = small_preset_dict(**(training or {}))
    data["algorithm"] = {"name": "online_dpo", "max_completion_length": 14, **algorithm}
    return data


def problems_of(data: dict) -> list[str]:
    with pytest.raises(PresetError) as caught:
        preset_from_dict(data)
    return caught.value.problems


# --------------------------------------------------------------------- the ranking


def test_the_higher_score_is_chosen_and_a_tie_goes_to_the_first_sampled():
    ranking = rank_pairs([1.0, 0.0, 0.5, 0.5, 0.0, 2.0])
    assert ranking.chosen == [0, 2, 5] and ranking.rejected == [1, 3, 4]
    assert ranking.ties == [False, True, False]
    assert ranking.first_wins() == [True, True, False]
    with pytest.raises(ValueError, match="not a whole number of pairs"):
        rank_pairs([1.0, 0.0, 0.5])


def test_missing_eos_penalty_is_taken_off_before_ranking():
    totals, truncated = [1.0, 0.8, 1.0, 0.5], [True, False, True, False]
    # no penalty: the first of each pair has the higher total
    assert rank_pairs(penalised_scores(totals, truncated, None)).chosen == [0, 2]
    # 0.5 off the completions without EOS: 0.5 < 0.8 flips the first pair; 0.5 = 0.5 ties the second
    scores = penalised_scores(totals, truncated, 0.5)
    assert scores == [0.5, 0.8, 0.5, 0.5]
    ranking = rank_pairs(scores)
    assert ranking.chosen == [1, 2] and ranking.ties == [False, True]


# ------------------------------------------------------------------------ the loss


def test_pair_loss_on_hand_worked_numbers():
    # row 0: tokens -1, -2 (sum -3, mean -1.5), reference -2, -2 (sum -4, mean -2)
    # row 1: tokens -1, -1, -3 (sum -5, mean -5/3), reference -1, -1, -2 (sum -4, mean -4/3)
    logps = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, -1.0, -3.0]], requires_grad=True)
    ref = torch.tensor([[-2.0, -2.0, 0.0], [-1.0, -1.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    first, second = torch.tensor([True]), torch.tensor([False])
    # sigmoid, beta 0.5: h = (-3 + 4) - (-5 + 4) = 2, loss -log sigmoid(1) = log(1 + e^-1) = 0.31326
    loss = pair_losses(logps, ref, mask, first, beta=0.5, loss_type="sigmoid")
    assert loss.tolist() == pytest.approx([0.31326], abs=1e-5)
    assert loss.tolist() == pytest.approx(dpo_loss(torch.tensor([-3.0]), torch.tensor([-5.0]), torch.tensor([-4.0]),
                                                   torch.tensor([-4.0]), beta=0.5)[0].tolist())
    # the second sampled chosen: h = -2, loss log(1 + e) = 1.31326
    assert pair_losses(logps, ref, mask, second, beta=0.5, loss_type="sigmoid").tolist() == pytest.approx(
        [1.31326], abs=1e-5)
    # ipo, beta 0.5, on token means: h = (-1.5 + 2) - (-5/3 + 4/3) = 5/6, (5/6 - 1)^2 = 1/36
    # (on sums it would be (2 - 1)^2 = 1)
    ipo = pair_losses(logps, ref, mask, first, beta=0.5, loss_type="ipo")
    assert ipo.tolist() == pytest.approx([1 / 36], abs=1e-6)
    # the gradient reaches the policy's token logprobs, none the padding
    loss.sum().backward()
    assert logps.grad[0, 2] == 0 and logps.grad[0, 0] < 0 < logps.grad[1, 0]


def test_chosen_and_rejected_pick_each_pairs_rows():
    chosen, rejected = chosen_and_rejected(torch.tensor([-3.0, -5.0, -2.0, -1.0]), torch.tensor([True, False]))
    assert chosen.tolist() == [-3.0, -1.0] and rejected.tolist() == [-5.0, -2.0]


# ------------------------------------------------------------------ the preset section


def test_the_section_has_trls_defaults_and_a_pair_per_prompt():
    algo = preset_from_dict({"algorithm": {"name": "online_dpo"}}).algorithm
    assert (algo.num_generations, algo.beta, algo.loss_type, algo.temperature, algo.max_completion_length,
            algo.missing_eos_penalty) == (2, 0.1, "sigmoid", 0.9, 64, None)
    assert preset_from_dict({"algorithm": {"name": "online_dpo", "loss_type": "ipo"}}).algorithm.loss_type == "ipo"


def test_the_section_refuses_another_group_size_hinge_and_split_pairs():
    (problem,) = problems_of({"algorithm": {"name": "online_dpo", "num_generations": 4}})
    assert problem.startswith("algorithm.num_generations: online DPO samples exactly 2 completions per prompt")
    assert problem.endswith("(got 4)")
    (problem,) = problems_of({"algorithm": {"name": "online_dpo", "loss_type": "hinge"}})
    assert problem.startswith("algorithm.loss_type: online DPO takes loss_type sigmoid or ipo")
    (problem,) = problems_of({"algorithm": {"name": "online_dpo"}, "training": {"batch_size": 8, "micro_batch_size": 3}})
    assert problem.startswith("training.micro_batch_size: 3 would split a pair") and "e.g. 2" in problem
    (problem,) = problems_of({"algorithm": {"name": "online_dpo"}, "training": {"batch_size": 7}})
    assert problem.startswith("training.batch_size: 7 must be divisible by algorithm.num_generations (2)")


def test_the_section_declares_pairs():
    preset = preset_from_dict({"algorithm": {"name": "online_dpo"}, "training": {"batch_size": 8}})
    algo = preset.algorithm
    assert preset.prompts_per_step == 4
    assert tuple(algo.update_batch(preset.training)) == (4, 2, 1)  # 4 pairs of 2 rows; micro_batch_size counts rows
    assert algo.step_shares(preset.training)[0] == 4
    assert "implicit rewards" in algo.playground_reason()


# ------------------------------------------------------------------- steps in-process


def test_a_run_logs_trls_metrics_pair_records_and_samples(tmp_path):
    run = tmp_path / "run"
    # 8 tokens cut the longer sorted lists (up to 12 characters and EOS): some sides lack EOS
    trainer = build_trainer(preset_from_dict(online_preset(missing_eos_penalty=0.25, max_completion_length=8)), run)
    assert isinstance(trainer, OnlineDPOTrainer)
    assert trainer.run() == "done"
    events = rundir.read_events(run)
    started = next(e for e in events if e["type"] == "run_started")
    assert started["records"]["layout"] == "pair" and started["records"]["sides"] == ["chosen", "rejected"]
    assert started["records"]["preferred"] == ["implicit_reward", "advantage"]
    declared = {p["key"] for p in started["plots"]}
    assert {"reward", "eval", "dpo_margins", "dpo_accuracy", "ppo_objective", "zero_std"} <= declared

    metrics = [e for e in events if e["type"] == "metrics"]
    assert len(metrics) == 3
    for m in metrics:
        missing = (TRL_METRICS | OUR_METRICS) - set(m)
        assert not missing, missing
        assert m["beta"] == 0.1
        assert m["objective/rlhf_reward"] == pytest.approx(m["objective/scores"] + m["objective/non_score_reward"],
                                                          abs=1e-6)  # float32 sums
        assert m["objective/non_score_reward"] == pytest.approx(-0.1 * m["objective/kl"], abs=1e-6)
        assert m["rewards/margins"] == pytest.approx(m["rewards/chosen"] - m["rewards/rejected"], abs=1e-6)
        assert m["objective/scores_margin"] >= 0  # the chosen side never scores lower
        # scores: the rewards' mean less 0.25 for each completion without EOS
        assert m["objective/scores"] == pytest.approx(m["reward"] - 0.25 * (1 - m["val/contain_eos_token"]), abs=1e-6)
    assert min(m["val/contain_eos_token"] for m in metrics) < 1
    # step 1: the adapter starts at zero, so policy = reference: KL 0, margins 0, loss ln 2
    assert metrics[0]["objective/kl"] == pytest.approx(0.0, abs=1e-6)
    assert metrics[0]["rewards/margins"] == pytest.approx(0.0, abs=1e-6)
    assert metrics[0]["loss"] == pytest.approx(math.log(2), rel=1e-5)
    assert metrics[-1]["objective/kl"] != 0  # and the policy moved
    evals = [e for e in events if e["type"] == "eval"]
    assert evals and all(e["accuracy"] is not None for e in evals)  # greedy held-out accuracy

    samples = [s for e in events if e["type"] == "samples" for s in e["samples"]]
    assert len(samples) == 3 * 4  # batch 8: 4 pairs a step
    for s in samples:
        assert set(s) == SAMPLE_KEYS
        assert s["reward"] == s["rewards"]["chosen"] >= s["rewards"]["rejected"]
        assert s["rewards"]["margin"] == pytest.approx(s["rewards"]["chosen"] - s["rewards"]["rejected"])
        assert s["tie"] == (s["rewards"]["margin"] == 0)

    beta, penalty = 0.1, 0.25
    records = [json.loads(line) for step in (1, 2, 3)
               for line in (run / "trajectories" / f"step_{step:06d}.jsonl").read_text().splitlines()]
    assert len(records) == 3 * 2  # record_rollouts 2: two pairs a step
    cut = 0
    for record in records:
        assert set(record) == RECORD_KEYS and record["algorithm"] == "online_dpo"
        chosen, rejected = record["chosen"], record["rejected"]
        for side in (chosen, rejected):
            assert set(side) == SIDE_KEYS
            assert side["implicit_reward"] == pytest.approx(
                [beta * (lp - ref) for lp, ref in zip(side["logprob"], side["ref_logprob"])], rel=1e-2, abs=2e-5)
            # the update's effect on the side's tokens (engine/algorithms/update_effect.py)
            assert side["logprob_change"] == pytest.approx(
                [after - before for after, before in zip(side["logprob_after"], side["logprob"])], rel=1e-2, abs=2e-3)
            total = side["rewards"]["exact_match"] + 0.5 * side["rewards"]["sort_position"]
            without_eos = side["tokens"][-1] != "<eos>"
            assert side["reward"] == pytest.approx(total - (penalty if without_eos else 0.0))
            cut += without_eos
        assert record["score_margin"] == pytest.approx(chosen["reward"] - rejected["reward"])
        assert record["score_margin"] >= 0 and record["tie"] == (record["score_margin"] == 0)
        assert record["margin"] == pytest.approx(sum(chosen["implicit_reward"]) - sum(rejected["implicit_reward"]),
                                                 abs=2e-3)  # per-token values rounded to 4 digits
    assert cut  # the penalty was exercised


def test_the_loss_sees_the_rankings_order(tmp_path, monkeypatch):
    import engine.algorithms.online_dpo.trainer as trainer_module

    seen = []

    def recording(token_logps, ref, mask, first_wins, **kwargs):
        seen.append(first_wins.tolist())
        return pair_losses(token_logps, ref, mask, first_wins, **kwargs)

    monkeypatch.setattr(trainer_module, "pair_losses", recording)
    trainer = OnlineDPOTrainer(preset_from_dict(online_preset(training={"batch_size": 16})), tmp_path / "run")
    outputs = trainer.train_step().outputs
    scores = outputs.scores
    assert seen == [[scores[2 * p] >= scores[2 * p + 1] for p in range(8)]]
    assert outputs.ranking.ties == [scores[2 * p] == scores[2 * p + 1] for p in range(8)]


def test_the_loss_is_taken_at_temperature_one(tmp_path):
    trainer = OnlineDPOTrainer(preset_from_dict(online_preset(temperature=0.5)), tmp_path / "run")
    rollout = trainer.generate(["sort 3 1 2 ="] * 2, group_size=2)  # a group: the prompt twice
    rows, ids = slice(0, 2), rollout.completion_ids
    with torch.no_grad():
        at_one = trainer.completion_logits(rollout, rows)
        trainer.policy.pass_temperature = trainer.policy.sampling.temperature  # as GRPO's passes
        at_half = trainer.completion_logits(rollout, rows)
        trainer.policy.pass_temperature = 1.0
    assert (at_one.temperature, at_half.temperature, trainer.policy.sampling.temperature) == (1.0, 0.5, 0.5)
    # the reference at temperature 1 too: equal to the policy's while the adapter adds nothing
    assert torch.allclose(trainer.reference_logprobs(rollout, rows), at_one.logprobs(ids), atol=1e-6)
    assert not torch.allclose(at_one.logprobs(ids), at_half.logprobs(ids), atol=1e-3)


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_micro_batches_of_one_pair_give_the_whole_batch_gradient(tmp_path, loss_type):
    from test_trainer import randomise_lora_b

    grads, metrics = {}, {}
    for micro in (None, 2):
        trainer = OnlineDPOTrainer(preset_from_dict(online_preset(training={"micro_batch_size": micro},
                                                                  loss_type=loss_type)), tmp_path / f"m{micro}")
        randomise_lora_b(trainer.model)  # off the reference: the pairs have margins
        trainer.optimizer.step = lambda: None
        metrics[micro] = trainer.train_step().metrics
        grads[micro] = torch.cat([p.grad.flatten() for p in trainer.trainable_parameters() if p.grad is not None])
    assert len(trainer.pair_micro_batches(8)) == 4  # 4 pairs, one a micro-batch
    assert metrics[None]["rewards/margins"] != 0 and grads[None].abs().sum() > 0
    assert torch.allclose(grads[None], grads[2], rtol=1e-4, atol=1e-7)
    assert metrics[None]["loss"] == pytest.approx(metrics[2]["loss"], rel=1e-5)
