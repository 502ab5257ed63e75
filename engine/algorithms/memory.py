"""Running out of GPU memory: say which fields to change, or (micro_batch_size: auto)
halve the micro-batch and take the step again.

A step that runs out of memory is retried from where it began: the data position and
every random state are restored first, so the retried step samples what the failed one
would have, and a run that halved its micro-batch trains on the same batches as one that
had the smaller micro-batch from the start. A step that updates more than once (PPO's
epochs and mini-batches, GRPO's num_iterations) may run out after its first update, so
its trained weights and optimizer state are kept on the CPU as it begins and put back
before the retry.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

import torch

__all__ = ["OutOfMemory", "StepSnapshot", "UpdateSnapshot", "is_out_of_memory", "out_of_memory_message", "train_step_that_fits"]

log = logging.getLogger(__name__)


class OutOfMemory(RuntimeError):
    """The GPU ran out of memory and the run cannot go on; the message names the fields."""


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA's (and MPS's) out-of-memory errors, which torch raises under a few types."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def out_of_memory_message(phase: str, *, batch: int, micro_batch: int, unit: str, max_tokens: int,
                          auto: bool, checkpointing: bool) -> str:
    """What ran out and the preset fields that would make it fit.

    Example:
        >>> out_of_memory_message("update", batch=64, micro_batch=1, unit="completions", max_tokens=512,
        ...                       auto=True, checkpointing=True).split(": ")[0]
        'the GPU ran out of memory in the update, with micro-batches of 1 completions of up to 512 tokens'
    """
    if phase == "rollout":
        where = f"while sampling {batch} completions of up to {max_tokens} tokens"
        fixes = ["lower training.batch_size or algorithm.max_completion_length (the sampling's KV cache "
                 "grows with both)"]
    elif phase == "evaluation":
        where = f"in the held-out evaluation, decoding {batch} prompts at once up to {max_tokens} tokens"
        fixes = ["lower training.batch_size (the evaluation decodes max(batch_size, 32) prompts at once) or "
                 "algorithm.max_completion_length"]
    else:
        where = f"in the update, with micro-batches of {micro_batch} {unit} of up to {max_tokens} tokens"
        fixes = []
        if micro_batch > 1:
            fixes.append(f"lower training.micro_batch_size (now {micro_batch})"
                         + ("" if auto else ", or set it to `auto` to halve it on out-of-memory"))
        if not checkpointing:
            fixes.append("set training.gradient_checkpointing: true")
        fixes.append("lower algorithm.max_completion_length")
    fixes.append("load the base model in 4 bit (model.load_in_4bit: true)")
    return f"the GPU ran out of memory {where}: " + "; ".join(fixes)


@dataclass
class StepSnapshot:
    """What a step changes before its update: the data position and the random states."""

    data_position: int
    torch_rng: torch.Tensor
    cuda_rng: list | None
    python_rng: tuple
    generator: torch.Tensor

    @classmethod
    def take(cls, trainer) -> "StepSnapshot":
        return cls(trainer.stream.position, torch.get_rng_state(),
                   torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                   random.getstate(), trainer.generator.get_state())

    def restore(self, trainer) -> None:
        trainer.stream.position = self.data_position
        torch.set_rng_state(self.torch_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        random.setstate(self.python_rng)
        trainer.generator.set_state(self.generator)


def _on_cpu(value):
    """A copy of an optimizer state_dict with every tensor on the CPU (the live one's
    tensors are the optimizer's own, updated in place)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value


@dataclass
class UpdateSnapshot:
    """What an update changes: the trained weights (adapter, PPO's value head) and the
    optimizer, scheduler and loss-scaler states, copied to the CPU. Small: LoRA weights
    and their AdamW moments."""

    weights: list[torch.Tensor]
    optimizer: dict
    scheduler: dict
    scaler: dict

    @classmethod
    def take(cls, trainer) -> "UpdateSnapshot":
        return cls([p.detach().to("cpu", copy=True) for p in trainer.trainable_parameters()],
                   _on_cpu(trainer.optimizer.state_dict()), trainer.scheduler.state_dict(),
                   trainer.scaler.state_dict())

    def restore(self, trainer) -> None:
        with torch.no_grad():
            for param, saved in zip(trainer.trainable_parameters(), self.weights):
                param.copy_(saved)
        trainer.optimizer.load_state_dict(self.optimizer)  # moves the state to the weights' device
        trainer.scheduler.load_state_dict(self.scheduler)
        trainer.scaler.load_state_dict(self.scaler)


def free_memory(trainer) -> None:
    """Drop what the failed step held: gradients, and the allocator's cached blocks."""
    trainer.optimizer.zero_grad(set_to_none=True)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def train_step_that_fits(self) -> dict:  # self: the Trainer
    """train_step; on GPU out-of-memory, with micro_batch_size `auto`, the micro-batch
    is halved and the step taken again from where it began (a `micro_batch_size`
    event says so); otherwise the run fails naming the fields that would make it fit."""
    auto = self.cfg.micro_batch_size == "auto"
    snapshot = StepSnapshot.take(self)  # restored before each retry, so taken once
    updates = UpdateSnapshot.take(self) if auto and self.updates_per_step() > 1 else None
    while True:
        self.phase = "rollout"
        try:
            return self.train_step()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            free_memory(self)
            size = self.micro_batches(self.cfg.batch_size)[0].stop
            if not auto or self.phase == "rollout" or size <= 1:
                raise OutOfMemory(out_of_memory_message(
                    self.phase, batch=self.cfg.batch_size, micro_batch=size, unit=self.MICRO_BATCH_UNIT,
                    max_tokens=self.algo.max_completion_length, auto=auto,
                    checkpointing=self.checkpointing)) from exc
            snapshot.restore(self)
            if updates is not None:
                updates.restore(self)
            self.auto_micro_batch = size // 2
            log.warning("step %d: out of GPU memory with micro-batches of %d; trying %d", self.step + 1,
                        size, self.auto_micro_batch)
            self.events.emit("micro_batch_size", step=self.step, old=size, new=self.auto_micro_batch,
                             reason="out of GPU memory")
