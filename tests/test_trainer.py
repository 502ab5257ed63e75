"""GRPO end to end on the built-in model: weights, events, trajectories, stop/resume."""

import json
import math

import pytest
import torch

from conftest import small_preset_dict
from engine.run import rundir
from engine.preset.schema import preset_from_dict
from engine.algorithms.optimization import RunAborted
from engine.rl.catalog import micro_batch_weight
from engine.algorithms.optimization import lr_factor
from engine.algorithms.grpo.trainer import GRPOTrainer
from engine.foundation.stopping import StopFlag

METRIC_KEYS = {
    "reward", "reward_std", "kl", "entropy", "loss", "clip_ratio/low_mean", "clip_ratio/high_mean",
    "clip_ratio/region_mean", "completions/mean_length", "completions/min_length",
    "completions/max_length", "completions/clipped_ratio", "frac_reward_zero_std", "grad_norm",
    "learning_rate", "step_time", "timing/rollout", "timing/update",
    "throughput/tokens_per_second", "rewards/exact_match/mean", "rewards/sort_position/mean",
}
TOKEN_FIELDS = ("token_ids", "tokens", "logprob", "ref_logprob", "kl", "entropy", "advantage",
                "ratio", "clipped", "top_ids", "top_tokens", "top_probs")


def make_trainer(tmp_path, name="run", stop=None, **training):
    return GRPOTrainer(preset_from_dict(small_preset_dict(**training)), tmp_path / name, stop=stop)


def test_lr_factor_warmup_then_decay():
    assert [lr_factor(s, 2, 6, "linear") for s in range(6)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    assert [lr_factor(s, 0, 4, "constant") for s in range(4)] == [1.0] * 4
    assert [round(lr_factor(s, 0, 4, "cosine"), 4) for s in range(4)] == [1.0, 0.8536, 0.5, 0.1464]


def test_micro_batch_weight():
    batch = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    # tokens per row 3, 2, 4, 1: the batch has 10, the first row 3
    assert micro_batch_weight("dapo", batch[:1], batch) == pytest.approx(0.3)
    assert micro_batch_weight("grpo", batch[:1], batch) == 0.25
    assert micro_batch_weight("dr_grpo", batch[1:], batch) == 0.75


def test_micro_batches_give_the_full_batch_gradient(tmp_path):
    """Gradient accumulation over micro-batches equals one pass over the whole batch."""
    grads = {}
    for micro in (None, 3):
        trainer = make_trainer(tmp_path, f"mb{micro}", micro_batch_size=micro, learning_rate=1e-9)
        # identical rollouts for both: same seed, same weights
        trainer.optimizer.step = lambda: None  # keep weights; we only look at the gradient
        trainer.train_step()
        grads[micro] = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    assert torch.allclose(grads[None], grads[3], rtol=1e-4, atol=1e-7)


def test_a_few_steps_change_the_adapter_only(tmp_path):
    trainer = make_trainer(tmp_path)
    named = dict(trainer.model.named_parameters())
    before = {n: p.detach().clone() for n, p in named.items()}
    assert trainer.run() == "done"
    lora = [n for n, p in named.items() if p.requires_grad]
    base = [n for n, p in named.items() if not p.requires_grad]
    assert lora and all("lora_" in n for n in lora)
    assert any(not torch.equal(before[n], named[n]) for n in lora), "no adapter weight changed"
    assert all(torch.equal(before[n], named[n]) for n in base), "a base weight changed"


def test_a_step_times_its_reference_and_after_update_passes_inside_its_update(tmp_path):
    """timing/reference (beta 0: the recorded rows' reference pass) and timing/after_update
    are parts of timing/update, which the bench's breakdown subtracts them from."""
    trainer = make_trainer(tmp_path, max_steps=1)
    trainer.policy.clock.take()
    metrics = trainer.train_step().metrics
    assert metrics["timing/reference"] > 0 and metrics["timing/after_update"] > 0
    assert metrics["timing/reference"] + metrics["timing/after_update"] < metrics["timing/update"]
    assert trainer.policy.clock.take() == {}  # taken with the step's metrics


def test_event_stream_and_trajectories(tmp_path):
    trainer = make_trainer(tmp_path)
    trainer.run()
    run = tmp_path / "run"
    events = rundir.read_events(run)
    types = [e["type"] for e in events]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert types.count("metrics") == 3 and types.count("samples") == 3
    assert types.count("eval") == 2  # before training and at the end
    started = events[0]
    assert started["model"]["trainable_parameters"] < started["model"]["parameters"]
    assert started["preset"]["algorithm"]["name"] == "grpo" and started["device"] == "cpu"
    for event in events:
        assert {"type", "time"} <= set(event)
    metrics = [e for e in events if e["type"] == "metrics"]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert METRIC_KEYS <= set(metrics[0]), METRIC_KEYS - set(metrics[0])
    assert all(math.isfinite(m["loss"]) for m in metrics)
    samples = next(e for e in events if e["type"] == "samples")["samples"]
    assert len(samples) == 4
    assert set(samples[0]) >= {"prompt", "completion", "reward", "rewards", "advantage"}
    assert set(samples[0]["rewards"]) == {"exact_match", "sort_position"}
    eval_event = next(e for e in events if e["type"] == "eval")
    assert 0.0 <= eval_event["accuracy"] <= 1.0 and eval_event["num_examples"] == 8
    assert events[-1]["status"] == "done"
    assert (run / "preset.yaml").exists()

    assert rundir.trajectory_steps(run) == [1, 2, 3]
    records = rundir.read_trajectories(run, 2)
    assert len(records) == 4  # record_rollouts 2, less than a group of 4: the whole group
    for record in records:
        n = len(record["token_ids"])
        assert n >= 1
        for key in TOKEN_FIELDS:
            assert len(record[key]) == n, key
        assert all(len(row) == 5 for row in record["top_probs"])
        assert trainer.tokenizer.decode(record["token_ids"], skip_special_tokens=True) == record["completion"]
        # with num_iterations 1 the ratio is exactly 1 and nothing is clipped
        assert record["ratio"] == [1.0] * n and record["clipped"] == [0] * n
        # the sampled token's probability is one of (or below) the top-5
        for lp, probs in zip(record["logprob"], record["top_probs"]):
            assert math.exp(lp) <= probs[0] + 1e-3
        assert set(record["rewards"]) == {"exact_match", "sort_position"}


def test_checkpoint_is_a_loadable_peft_adapter(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from engine.builtin_model.recipe import builtin_model_path

    trainer = make_trainer(tmp_path, max_steps=1)
    trainer.run()
    (checkpoint,) = rundir.complete_checkpoints(tmp_path / "run")
    base = AutoModelForCausalLM.from_pretrained(builtin_model_path())
    model = PeftModel.from_pretrained(base, checkpoint)
    trained = dict(trainer.model.named_parameters())
    for name, param in model.named_parameters():
        if "lora_" in name:
            assert torch.equal(param, trained[name].detach())


def test_a_checkpoint_is_on_the_disk_before_it_is_named_complete(tmp_path, monkeypatch):
    # Safe against kill -9 already (written as step_N.tmp, then renamed); a power cut could
    # still keep the rename but not the files' contents unless they are fsynced first.
    import os

    synced, renamed = [], []
    real_fsync, real_rename = os.fsync, type(tmp_path).rename
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd))
    monkeypatch.setattr(type(tmp_path), "rename", lambda self, target: renamed.append((len(synced), str(self)))
                        or real_rename(self, target))
    trainer = make_trainer(tmp_path, max_steps=1)
    trainer.save_checkpoint()
    (final,) = rundir.complete_checkpoints(tmp_path / "run")
    (before_rename, tmp), = [r for r in renamed if r[1].endswith(".tmp")]
    written = {tmp + "/" + str(p.relative_to(final)) for p in final.rglob("*")}
    assert written and written | {tmp} <= set(synced[:before_rename])  # every file and the folder, first
    assert str(final.parent) in synced[before_rename:]  # then the rename itself


def test_stop_then_resume_continues_at_the_right_step_and_data(tmp_path):
    # uninterrupted reference run
    reference = make_trainer(tmp_path, "straight", max_steps=4)
    reference.run()
    ref_samples = {e["step"]: e["samples"] for e in rundir.read_events(tmp_path / "straight") if e["type"] == "samples"}

    stop = StopFlag()
    first = make_trainer(tmp_path, "split", stop=stop, max_steps=4)
    status = first.run(on_step=lambda step, _m: step == 2 and stop.request("test"))
    assert status == "stopped" and first.step == 2
    events = rundir.read_events(tmp_path / "split")
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "stopped"
    (checkpoint,) = rundir.complete_checkpoints(tmp_path / "split")
    assert json.loads((checkpoint / "state.json").read_text())["step"] == 2

    second = make_trainer(tmp_path, "split", max_steps=4)
    assert second.run(resume_from=checkpoint) == "done"
    events = rundir.read_events(tmp_path / "split")
    resumed = next(e for e in events if e["type"] == "run_resumed")
    assert resumed["step"] == 2 and resumed["data_position"] == 4  # 2 prompts a step
    after = {e["step"]: e["samples"] for e in events if e["type"] == "samples" and e["time"] > resumed["time"]}
    assert sorted(after) == [3, 4]
    for step in (3, 4):
        assert [s["prompt"] for s in after[step]] == [s["prompt"] for s in ref_samples[step]]
        # same weights, optimizer and RNG state: the very same completions
        assert [s["completion"] for s in after[step]] == [s["completion"] for s in ref_samples[step]]


def test_nonfinite_loss_skips_steps_then_stops(tmp_path, nan_grpo_loss):
    trainer = make_trainer(tmp_path, max_steps=5, max_nonfinite_steps=2)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    with pytest.raises(RunAborted, match="max_nonfinite_steps"):
        trainer.run()
    assert trainer.nonfinite_steps == 3
    after = dict(trainer.model.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in before), "a skipped step changed weights"
    metrics = [e for e in rundir.read_events(tmp_path / "run") if e["type"] == "metrics"]
    assert [m["skipped_steps"] for m in metrics] == [1, 2]


def test_run_size_stays_bounded(tmp_path):
    """A 1,000-step run with default logging settings stays under 50 MB on disk."""
    preset = small_preset_dict(max_steps=3)
    for key in ("record_rollouts", "log_completions"):
        del preset["training"][key]  # the defaults
    preset["training"]["batch_size"] = 64
    preset["algorithm"]["num_generations"] = 8
    preset["algorithm"]["max_completion_length"] = 16
    trainer = GRPOTrainer(preset_from_dict(preset), tmp_path / "run")
    trainer.run()
    run = tmp_path / "run"
    per_step = sum(p.stat().st_size for p in run.rglob("*") if p.is_file() and "checkpoints" not in p.parts) / 3
    checkpoints = sum(p.stat().st_size for p in (run / "checkpoints").rglob("*") if p.is_file())
    projected = per_step * 1000 + checkpoints * trainer.cfg.save_total_limit
    assert projected < 50e6, f"projected {projected / 1e6:.1f} MB"


def randomise_lora_b(model, seed=0):
    """peft starts lora_B at zero, so the adapter adds nothing and its dropout has no
    effect; a trained adapter (B != 0) is where dropout would move the logprobs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.5)


def test_grpo_ratio_is_exactly_one_at_identical_weights_with_lora_dropout(tmp_path):
    # TRL runs every pass that feeds a ratio dropout-free; with the adapter's dropout on in
    # the update passes the second iteration's ratio was noise, not 1, at the same weights.
    data = small_preset_dict(max_steps=1)
    data["model"]["lora"]["dropout"] = 0.05
    data["algorithm"]["num_iterations"] = 2
    trainer = GRPOTrainer(preset_from_dict(data), tmp_path / "run")
    randomise_lora_b(trainer.model)
    trainer.optimizer.step = lambda: None  # iteration 2 sees the weights of iteration 1
    result = trainer.train_step()
    metrics, last = result.metrics, result.outputs
    mask = last.rollout.completion_mask.bool()
    ratio = last.per_token["ratio"]  # the last iteration's
    assert mask.sum() > 0
    assert torch.equal(ratio[mask], torch.ones(int(mask.sum())))
    assert metrics["clip_ratio/region_mean"] == 0.0


def test_a_group_of_equal_rewards_counts_as_zero_std_and_gets_zero_advantage(tmp_path, monkeypatch):
    # Eight rewards of 0.7: their float32 std was 6.4e-8, not close enough to 0 for
    # isclose, so frac_reward_zero_std said 0 and the advantages were +-6e-4, not 0.
    import engine.algorithms.base as trainer_module  # rewards are scored in Trainer.score

    monkeypatch.setattr(trainer_module, "score_rewards_with_steps",
                        lambda components, prompts, completions, fields: ([0.7] * len(prompts), {"const": [0.7] * len(prompts)}, {}))
    data = small_preset_dict(max_steps=1)
    data["algorithm"]["num_generations"] = 8  # batch 8: one group
    trainer = GRPOTrainer(preset_from_dict(data), tmp_path / "run")
    result = trainer.train_step()
    metrics, last = result.metrics, result.outputs
    assert metrics["frac_reward_zero_std"] == 1.0
    assert torch.equal(last.advantages, torch.zeros(8))
