"""PPO, DPO and the GRPO estimator variants end to end on the built-in model."""

import json
import math

import pytest
import torch

from conftest import small_preset_dict
from engine.run import rundir
from engine.rl.advantages import (
    group_advantages,
    last_token_rewards,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
)
from engine.commands.train import build_trainer
from engine.algorithms.dpo.trainer import DPOTrainer
from engine.algorithms.grpo.trainer import GRPOTrainer
from engine.algorithms.ppo.trainer import PPOTrainer
from engine.preset.schema import preset_from_dict
from engine.foundation.stopping import StopFlag

PPO_METRICS = {
    "objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward",
    "objective/scores", "policy/approxkl_avg", "policy/clipfrac_avg", "loss/policy_avg", "loss/value_avg",
    "val/clipfrac_avg", "val/ratio", "val/explained_variance", "reward", "kl", "entropy", "loss",
}
DPO_METRICS = {
    "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen",
    "logps/rejected", "logits/chosen", "logits/rejected", "loss", "grad_norm",
}


def ppo_preset(**algorithm):
    data = small_preset_dict()
    data["algorithm"] = {"name": "ppo", "max_completion_length": 10, "num_ppo_epochs": 2, **algorithm}
    return preset_from_dict(data)


def dpo_preset(training=None, **algorithm):
    data = small_preset_dict(**(training or {}))
    data["algorithm"] = {"name": "dpo", "max_completion_length": 16, **algorithm}
    return preset_from_dict(data)


def metrics_events(run):
    return [e for e in rundir.read_events(run) if e["type"] == "metrics"]


def plot_keys(run, algorithm):
    from workbench.dashboard.plotspec import EVAL, METRICS, choose_plots

    events = rundir.read_events(run)
    names = {METRICS: {k for e in events if e["type"] == "metrics" for k, v in e.items() if isinstance(v, (int, float))},
             EVAL: {k for e in events if e["type"] == "eval" for k, v in e.items() if isinstance(v, (int, float))}}
    return {spec.key for spec, _ in choose_plots(names, algorithm).plots}


def first_trajectory(run, step=1):
    return json.loads((run / "trajectories" / f"step_{step:06d}.jsonl").read_text().splitlines()[0])


# ------------------------------------------------------------------------- PPO


def test_build_trainer_picks_the_algorithm(tmp_path):
    assert isinstance(build_trainer(ppo_preset(), tmp_path / "p"), PPOTrainer)
    assert isinstance(build_trainer(dpo_preset(), tmp_path / "d"), DPOTrainer)
    assert type(build_trainer(preset_from_dict(small_preset_dict()), tmp_path / "g")) is GRPOTrainer


def test_ppo_run_logs_trl_metrics_and_token_level_records(tmp_path):
    trainer = PPOTrainer(ppo_preset(missing_eos_penalty=1.0), tmp_path / "run")
    value_before = trainer.value_head.weight.detach().clone()
    assert trainer.run() == "done"
    events = metrics_events(tmp_path / "run")
    assert len(events) == 3
    for event in events:
        missing = PPO_METRICS - set(event)
        assert not missing, missing
        assert event["loss"] is not None
    # the critic learns (it starts at zero)
    assert not torch.equal(value_before, trainer.value_head.weight)
    record = first_trajectory(tmp_path / "run")
    assert record["algorithm"] == "ppo"
    n = len(record["tokens"])
    for key in ("value", "return", "advantage", "kl_reward", "reward_per_token", "kl", "ratio", "logprob"):
        assert len(record[key]) == n, key
    coef = trainer.algo.kl_coef
    # the KL part of each token's reward is -kl_coef * kl (k1 here), rounded to 4 digits
    assert record["kl_reward"] == pytest.approx([-coef * k for k in record["kl"]], rel=1e-3, abs=1e-6)
    # the score sits on the last token, on top of its KL part
    assert record["reward_per_token"][-1] == pytest.approx(record["kl_reward"][-1] + record["score"], rel=1e-3, abs=1e-4)
    assert record["reward_per_token"][:-1] == pytest.approx(record["kl_reward"][:-1], rel=1e-3, abs=1e-6)
    # a missing EOS costs the penalty
    assert record["score"] == pytest.approx(record["reward"] - (1.0 if record["truncated"] else 0.0))
    # GAE gives per-token advantages: they vary along the completion
    assert len({round(a, 3) for a in record["advantage"]}) > 1
    # the window's dashboard has a plot for each of PPO's own metrics
    plots = plot_keys(tmp_path / "run", "ppo")
    assert {"reward", "kl", "value_loss", "explained_variance", "ppo_objective", "ppo_clip", "ppo_approxkl"} <= plots


def test_ppo_micro_batches_give_the_full_batch_gradient(tmp_path):
    grads = {}
    for micro in (None, 3):
        data = small_preset_dict(micro_batch_size=micro, learning_rate=1e-9)
        data["algorithm"] = {"name": "ppo", "max_completion_length": 10, "num_ppo_epochs": 1}
        trainer = PPOTrainer(preset_from_dict(data), tmp_path / f"mb{micro}")
        trainer.optimizer.step = lambda: None
        trainer.train_step()
        grads[micro] = torch.cat([p.grad.flatten() for p in trainer.trainable_parameters() if p.grad is not None])
    assert torch.allclose(grads[None], grads[3], rtol=1e-4, atol=1e-7)


def test_ppo_mini_batches_and_groups(tmp_path):
    trainer = PPOTrainer(ppo_preset(num_mini_batches=2, num_generations=2, kl_estimator="k3",
                                    whiten_rewards=True), tmp_path / "run")
    assert trainer.updates_per_step() == 4
    trainer.train_step()
    assert trainer.scheduler.last_epoch == 4  # one optimizer step per mini-batch per epoch


def test_ppo_checkpoint_restores_the_value_head(tmp_path):
    stop = StopFlag()
    first = PPOTrainer(ppo_preset(), tmp_path / "run", stop=stop)
    first.run(on_step=lambda step, _m: step == 2 and stop.request("test"))
    (checkpoint,) = rundir.complete_checkpoints(tmp_path / "run")
    second = PPOTrainer(ppo_preset(), tmp_path / "run")
    second.load_checkpoint(checkpoint)
    assert torch.equal(first.value_head.weight, second.value_head.weight)
    assert second.step == 2


# ------------------------------------------------------------------------- DPO


def test_dpo_run_logs_trl_metrics_pairs_and_implicit_rewards(tmp_path):
    trainer = DPOTrainer(dpo_preset(), tmp_path / "run")
    assert trainer.run() == "done"
    events = rundir.read_events(tmp_path / "run")
    metrics = [e for e in events if e["type"] == "metrics"]
    for event in metrics:
        assert not DPO_METRICS - set(event)
    # margins grow from 0 (policy = reference at the start) as the pairs are learnt
    assert metrics[0]["rewards/margins"] == pytest.approx(0.0, abs=1e-6)
    assert metrics[-1]["rewards/margins"] > 0
    evals = [e for e in events if e["type"] == "eval"]
    assert {"preference_accuracy", "accuracy", "rewards/margins"} <= set(evals[-1])
    assert evals[0]["preference_accuracy"] == 0.0  # margins exactly 0 at the start
    samples = next(e for e in events if e["type"] == "samples")["samples"]
    assert {"prompt", "completion", "rejected", "rewards"} <= set(samples[0])
    record = first_trajectory(tmp_path / "run", step=2)
    assert record["algorithm"] == "dpo"
    beta = trainer.algo.beta
    for side in ("chosen", "rejected"):
        s = record[side]
        assert s["tokens"][-1] == "<eos>"
        assert s["implicit_reward"] == pytest.approx(
            [beta * (lp - ref) for lp, ref in zip(s["logprob"], s["ref_logprob"])], rel=1e-2, abs=2e-4)  # both rounded to 4 digits
        assert sum(s["implicit_reward"]) == pytest.approx(s["reward"], abs=1e-3)
    assert record["margin"] == pytest.approx(record["chosen"]["reward"] - record["rejected"]["reward"])
    assert {"dpo_margins", "dpo_accuracy", "dpo_logps", "dpo_eval", "eval", "loss"} <= plot_keys(tmp_path / "run", "dpo")


def test_dpo_precomputed_reference_gives_the_same_step(tmp_path):
    losses = {}
    for precompute in (False, True):
        trainer = DPOTrainer(dpo_preset(precompute_ref_log_probs=precompute, loss_type="ipo"),
                             tmp_path / f"p{precompute}")
        trainer.optimizer.step = lambda: None
        trainer.scheduler.step = lambda: None
        losses[precompute] = [trainer.train_step().metrics["loss"] for _ in range(2)]
    assert losses[True] == pytest.approx(losses[False], rel=1e-5)
    assert len(trainer.reference_cache) == len(trainer.train_examples)


@pytest.mark.parametrize("algorithm", [{"loss_type": "hinge"}, {"rpo_alpha": 1.0}])
def test_dpo_micro_batches_give_the_full_batch_gradient(tmp_path, algorithm):
    grads, metrics = {}, {}
    for micro in (None, 3):
        trainer = DPOTrainer(dpo_preset(training={"micro_batch_size": micro}, **algorithm), tmp_path / f"m{micro}")
        trainer.optimizer.step = lambda: None
        metrics[micro] = trainer.train_step().metrics
        grads[micro] = torch.cat([p.grad.flatten() for p in trainer.trainable_parameters() if p.grad is not None])
    assert torch.allclose(grads[None], grads[3], rtol=1e-4, atol=1e-7)
    assert metrics[None]["loss"] == pytest.approx(metrics[3]["loss"], rel=1e-5)
    if "rpo_alpha" in algorithm:
        # at the start the DPO part is ln 2 and the NLL is -logps/chosen per token
        assert metrics[None]["nll_loss"] > 0
        assert metrics[None]["loss"] == pytest.approx(math.log(2) + metrics[None]["nll_loss"], rel=1e-5)


def test_dpo_reads_preference_pairs_from_a_file(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"sort {a} {b} =", "chosen": f" {min(a, b)} {max(a, b)}",
                                         "rejected": f" {max(a, b)} {min(a, b)}"}) + "\n"
                             for a in range(4) for b in range(5, 9)))
    data = small_preset_dict(max_steps=2)
    data["algorithm"] = {"name": "dpo", "max_completion_length": 8}
    data["data"] = {"task": None, "path": str(pairs), "num_eval": 4}
    trainer = DPOTrainer(preset_from_dict(data), tmp_path / "run")
    assert trainer.run() == "done"
    evals = [e for e in rundir.read_events(tmp_path / "run") if e["type"] == "eval"]
    assert evals[-1]["num_pairs"] == 4 and evals[-1]["accuracy"] is None  # no answers: no generation eval


def test_dpo_file_without_rejected_column_names_it(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"p{i}", "chosen": " a"}) + "\n" for i in range(6)))
    data = small_preset_dict()
    data["algorithm"] = {"name": "dpo"}
    data["data"] = {"task": None, "path": str(pairs), "num_eval": 2}
    with pytest.raises(ValueError, match="data.path: DPO needs .*rejected is missing"):
        DPOTrainer(preset_from_dict(data), tmp_path / "run")


# --------------------------------------------------------- GRPO estimator variants


def record_grpo_loss_calls(monkeypatch):
    """Wrap engine.algorithms.grpo.grpo_loss: each call's advantages, importance_sampling_level,
    logprobs, old logprobs and mask, and the per-token ratio it returned."""
    import engine.algorithms.grpo.trainer as trainer_module

    calls, real = [], trainer_module.grpo_loss

    def recording(logprobs, old_logprobs, ref_logprobs, advantages, mask, **kwargs):
        out = real(logprobs, old_logprobs, ref_logprobs, advantages, mask, **kwargs)
        calls.append({"advantages": advantages.detach().clone(), "level": kwargs.get("importance_sampling_level"),
                      "logprobs": logprobs.detach().clone(), "old": old_logprobs.detach().clone(),
                      "mask": mask.clone(), "ratio": out[2]["ratio"].clone()})
        return out

    monkeypatch.setattr(trainer_module, "grpo_loss", recording)
    return calls


# Each estimator's pure function, on a step's rewards (B,) and completion mask (B, T).
ESTIMATORS = {
    "grpo": lambda r, m, G: group_advantages(r, G),
    "rloo": lambda r, m, G: rloo_advantages(r, G),
    "reinforce_pp": lambda r, m, G: reinforce_pp_advantages(last_token_rewards(r, m), m),
    "reinforce_pp_baseline": lambda r, m, G: reinforce_pp_baseline_advantages(r, m, G),
}


def test_each_estimators_advantages_reach_the_loss(tmp_path, monkeypatch):
    # The trainer could ignore advantage_estimator and still produce a loss: check that the
    # advantages grpo_loss receives are the chosen estimator's, on the step's own rewards.
    calls = record_grpo_loss_calls(monkeypatch)
    passed, rewards = {}, {}
    for estimator, function in ESTIMATORS.items():
        calls.clear()
        data = small_preset_dict(max_steps=1)
        data["algorithm"]["advantage_estimator"] = estimator
        trainer = GRPOTrainer(preset_from_dict(data), tmp_path / estimator)
        result = trainer.train_step()
        assert result.metrics["loss"] is not None
        last = result.outputs
        step_rewards = torch.tensor(last.totals, dtype=torch.float32)
        expected = function(step_rewards, last.rollout.completion_mask, 4)
        (call,) = calls  # one micro-batch, one iteration
        assert call["level"] == "token"
        torch.testing.assert_close(call["advantages"], expected, rtol=0, atol=0)
        passed[estimator], rewards[estimator] = call["advantages"], step_rewards
    # same seed, same weights: the same rollout and rewards for every estimator ...
    assert all(torch.equal(r, rewards["grpo"]) for r in rewards.values())
    assert len(set(rewards["grpo"].tolist())) > 1  # (a step with some signal)
    # ... so switching the estimator is what changed the advantages
    names = sorted(passed)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            same_shape = passed[a].shape == passed[b].shape
            assert not (same_shape and torch.allclose(passed[a], passed[b])), (a, b)


def test_gspo_passes_sequence_level_and_uses_the_sequence_ratio(tmp_path, monkeypatch):
    calls = record_grpo_loss_calls(monkeypatch)
    data = small_preset_dict(max_steps=1, learning_rate=0.05)
    data["algorithm"].update({"importance_sampling_level": "sequence", "num_iterations": 2,
                              "epsilon": 3e-4, "epsilon_high": 4e-4})
    trainer = GRPOTrainer(preset_from_dict(data), tmp_path / "run")
    last = trainer.train_step().outputs
    assert [c["level"] for c in calls] == ["sequence", "sequence"]
    second = calls[1]  # after one optimizer step: the ratio has moved from 1
    mask = second["mask"].bool()
    # every real token of a completion carries its sequence's ratio:
    # exp(mean over its tokens of (logprob - old logprob))
    log_ratio = torch.where(mask, second["logprobs"] - second["old"], 0.0).sum(-1) / mask.sum(-1).clamp(min=1)
    expected = torch.exp(log_ratio)[:, None].expand_as(second["ratio"])
    torch.testing.assert_close(second["ratio"][mask], expected[mask])
    assert not torch.allclose(second["ratio"][mask], torch.ones(int(mask.sum())))
    # not the per-token ratio: that one varies along a completion
    token_ratio = torch.exp(second["logprobs"] - second["old"])
    assert not torch.allclose(token_ratio[mask], second["ratio"][mask])
    # and the inspector records the same per-sequence ratio
    torch.testing.assert_close(last.per_token["ratio"][mask], second["ratio"][mask])


def test_rloo_advantages_reach_the_samples(tmp_path):
    data = small_preset_dict(max_steps=1, log_completions=8)
    data["algorithm"]["advantage_estimator"] = "rloo"
    trainer = GRPOTrainer(preset_from_dict(data), tmp_path / "run")
    trainer.run()
    samples = next(e for e in rundir.read_events(tmp_path / "run") if e["type"] == "samples")["samples"]
    expected = rloo_advantages(torch.tensor([s["reward"] for s in samples]), 4)
    assert [s["advantage"] for s in samples] == pytest.approx(expected.tolist(), abs=1e-5)


def test_ppo_first_epoch_ratio_is_exactly_one_with_lora_dropout(tmp_path):
    # The old pass and the first update pass see the same weights: with every dropout off
    # (TRL's disable_dropout) their logprobs are the same, so the ratio is exactly 1.
    # With the adapter's dropout on in the update it was noise and got clipped.
    from test_trainer import randomise_lora_b

    data = small_preset_dict(max_steps=1)
    data["model"]["lora"]["dropout"] = 0.05
    data["algorithm"] = {"name": "ppo", "max_completion_length": 10, "num_ppo_epochs": 1}
    trainer = PPOTrainer(preset_from_dict(data), tmp_path / "run")
    randomise_lora_b(trainer.model)
    result = trainer.train_step()
    metrics, last = result.metrics, result.outputs
    mask = last.rollout.completion_mask.bool()
    assert mask.sum() > 0
    assert torch.equal(last.ratio[mask], torch.ones(int(mask.sum())))
    assert metrics["policy/clipfrac_avg"] == 0.0 and metrics["policy/approxkl_avg"] == 0.0


@pytest.mark.parametrize("disable_dropout", [True, False])
def test_dpo_updates_are_dropout_free_unless_asked(tmp_path, disable_dropout):
    # TRL's DPOConfig turns every dropout off by default, the adapter's included: the same
    # step under two different random states gives the same loss. With disable_dropout
    # false, lora.dropout acts in the update and the two losses differ.
    from test_trainer import randomise_lora_b

    losses = []
    for seed in (1, 2):
        data = small_preset_dict(max_steps=1)
        data["model"]["lora"]["dropout"] = 0.5
        data["algorithm"] = {"name": "dpo", "max_completion_length": 16, "disable_dropout": disable_dropout}
        trainer = DPOTrainer(preset_from_dict(data), tmp_path / f"run{seed}")
        randomise_lora_b(trainer.model)
        torch.manual_seed(seed)
        losses.append(trainer.train_step().metrics["loss"])
    assert (losses[0] == losses[1]) is disable_dropout


@pytest.mark.parametrize("make", [ppo_preset, dpo_preset], ids=["ppo", "dpo"])
def test_one_step_changes_the_adapter_and_value_head_only(tmp_path, make):
    # A finite loss does not show that anything trained: the step must move the LoRA
    # weights (and PPO's value head) and leave the base model's weights as they were.
    trainer = build_trainer(make(), tmp_path / "run")
    named = dict(trainer.model.named_parameters())
    before = {n: p.detach().clone() for n, p in named.items()}
    head_before = [p.detach().clone() for p in getattr(trainer, "value_head", torch.nn.Linear(1, 1)).parameters()]
    trainer.train_step()
    lora = [n for n, p in named.items() if p.requires_grad]
    assert lora and all("lora_" in n for n in lora)
    assert any(not torch.equal(before[n], named[n]) for n in lora), "no adapter weight changed"
    assert all(torch.equal(before[n], named[n]) for n in named if n not in lora), "a base weight changed"
    if isinstance(trainer, PPOTrainer):
        assert any(not torch.equal(a, b) for a, b in zip(head_before, trainer.value_head.parameters())), \
            "the value head did not change"
