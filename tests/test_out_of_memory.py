"""Out of GPU memory, simulated (CI has no GPU): with micro_batch_size `auto` the step is
taken again with half the micro-batch, from where it began, and trains exactly as a run
that had the smaller micro-batch from the start; otherwise the run fails naming the
fields that would make it fit."""

from __future__ import annotations

import pytest
import torch

from conftest import small_preset_dict
from engine.run import rundir
from engine.algorithms.base import Trainer
from engine.algorithms.grpo.trainer import GRPOTrainer
from engine.algorithms.memory import OutOfMemory, is_out_of_memory
from engine.preset.schema import preset_from_dict

CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.10 GiB total capacity)"


@pytest.fixture
def tight_memory(monkeypatch):
    """Passes with gradients over more than `limit` rows raise torch's out-of-memory."""
    limit = {"rows": 2}
    original = Trainer.completion_logits

    def completion_logits(self, rollout, rows, group_size=None):
        if torch.is_grad_enabled() and rows.stop - rows.start > limit["rows"]:
            raise torch.OutOfMemoryError(CUDA_OOM)
        return original(self, rollout, rows, group_size)

    monkeypatch.setattr(Trainer, "completion_logits", completion_logits)
    return limit


def run(tmp_path, name, **training):
    trainer = GRPOTrainer(preset_from_dict(small_preset_dict(**training)), tmp_path / name)
    trainer.run()
    return rundir.read_events(tmp_path / name)


def test_is_out_of_memory():
    assert is_out_of_memory(torch.OutOfMemoryError(CUDA_OOM))
    assert is_out_of_memory(RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


def test_auto_halves_the_micro_batch_and_trains_as_the_smaller_one_would(tmp_path, tight_memory):
    events = run(tmp_path, "auto", micro_batch_size="auto", max_steps=2)
    changes = [(e["old"], e["new"]) for e in events if e["type"] == "micro_batch_size"]
    assert changes == [(8, 4), (4, 2)]  # once, in the first step; the second starts at 2
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done"
    tight_memory["rows"] = 100
    fixed = run(tmp_path, "fixed", micro_batch_size=2, max_steps=2)
    metrics = [{k: v for k, v in e.items() if not k.startswith(("timing", "throughput", "step_time", "time"))}
               for e in events if e["type"] == "metrics"]
    expected = [{k: v for k, v in e.items() if not k.startswith(("timing", "throughput", "step_time", "time"))}
                for e in fixed if e["type"] == "metrics"]
    assert metrics == expected  # same prompts, samples, rewards and losses: the retry started clean


def test_out_of_memory_after_a_steps_first_update_retakes_it_from_its_starting_weights(tmp_path, monkeypatch):
    # GRPO with num_iterations 2 updates twice a step. Out of memory in the second
    # iteration, the retry used to start from the weights (and AdamW moments, and
    # learning-rate schedule) the first iteration had already moved.
    original = Trainer.completion_logits

    def completion_logits(self, rollout, rows, group_size=None):
        second_iteration = self.scheduler.last_epoch % 2 == 1
        if torch.is_grad_enabled() and second_iteration and rows.stop - rows.start > 4:
            raise torch.OutOfMemoryError(CUDA_OOM)
        return original(self, rollout, rows, group_size)

    monkeypatch.setattr(Trainer, "completion_logits", completion_logits)

    def metrics(name, micro_batch_size):
        data = small_preset_dict(micro_batch_size=micro_batch_size, max_steps=2)
        data["algorithm"]["num_iterations"] = 2
        trainer = GRPOTrainer(preset_from_dict(data), tmp_path / name)
        trainer.run()
        events = rundir.read_events(tmp_path / name)
        kept = [{k: v for k, v in e.items() if not k.startswith(("timing", "throughput", "step_time", "time"))}
                for e in events if e["type"] == "metrics"]
        return kept, [(e["old"], e["new"]) for e in events if e["type"] == "micro_batch_size"], trainer

    retried, changes, trainer = metrics("auto", "auto")
    assert changes == [(8, 4)]  # in the first step's second iteration
    fixed, no_changes, fixed_trainer = metrics("fixed", 4)
    assert no_changes == [] and retried == fixed
    for a, b in zip(trainer.trainable_parameters(), fixed_trainer.trainable_parameters()):
        assert torch.equal(a, b)


def test_without_auto_the_run_fails_naming_the_fields(tmp_path, tight_memory):
    trainer = GRPOTrainer(preset_from_dict(small_preset_dict(micro_batch_size=4)), tmp_path / "r")
    with pytest.raises(OutOfMemory) as err:
        trainer.run()
    text = str(err.value)
    assert text.startswith("the GPU ran out of memory in the update, with micro-batches of 4 completions of up to 14 tokens")
    for field in ("training.micro_batch_size (now 4), or set it to `auto`", "training.gradient_checkpointing: true",
                  "algorithm.max_completion_length", "model.load_in_4bit"):
        assert field in text


def test_out_of_memory_while_sampling_names_the_batch(tmp_path, monkeypatch):
    def sample(*args, **kwargs):
        raise torch.OutOfMemoryError(CUDA_OOM)

    monkeypatch.setattr("engine.algorithms.policy.sample", sample)
    preset = small_preset_dict(micro_batch_size="auto")
    with pytest.raises(OutOfMemory, match=r"in the held-out evaluation, decoding 32 prompts at once up to 14 "
                                          r"tokens: lower training.batch_size"):
        GRPOTrainer(preset_from_dict(preset), tmp_path / "with-eval").run()
    preset["data"]["num_eval"] = 0  # no evaluation: the first step's sampling runs out
    with pytest.raises(OutOfMemory, match=r"while sampling 8 completions of up to 14 tokens: lower "
                                          r"training.batch_size or algorithm.max_completion_length"):
        GRPOTrainer(preset_from_dict(preset), tmp_path / "no-eval").run()
