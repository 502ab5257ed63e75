"""Running out of GPU memory: say which fields to change, or (micro_batch_size: auto)
halve the micro-batch and take the step again.

A step that runs out of memory is retried from where it began: the data position and
every random state are restored first, so the retried step samples what the failed one
would have, and a run that halved its micro-batch trains on the same batches as one that
had the smaller micro-batch from the start. A step that updates more than once (PPO's
epochs and mini-batches, GRPO's num_iterations) may run out after its first update, so
its trained weights and optimizer state are kept on the CPU as it begins and put back
before the retry.

The parts: `MicroBatchSize` (the setting, and the size `auto` has come down to),
`StepStart` (where a step began), `MemoryFields` (what a message names) and
`step_that_fits`, which takes a step function and retries it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, TypeVar

import torch

from engine.algorithms.optimization import Optimization
from engine.algorithms.random_states import RandomStates, process_state, set_process_state

__all__ = ["MemoryFields", "MicroBatchSize", "OutOfMemory", "StepStart", "is_out_of_memory", "out_of_memory_message",
           "step_that_fits"]

T = TypeVar("T")
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


@dataclass(frozen=True)
class MemoryFields:
    """The preset's values an out-of-memory message of a training step names."""

    batch: int  # training.batch_size
    unit: str  # what training.micro_batch_size counts: "completions", "preference pairs"
    max_tokens: int  # algorithm.max_completion_length
    checkpointing: bool  # whether gradient checkpointing is on

    def message(self, phase: str, micro_batch: int, auto: bool) -> str:
        return out_of_memory_message(phase, batch=self.batch, micro_batch=micro_batch, unit=self.unit,
                                     max_tokens=self.max_tokens, auto=auto, checkpointing=self.checkpointing)


class MicroBatchSize:
    """training.micro_batch_size as a run uses it: a number, None (this process's whole
    share of a batch) or `auto` (the whole batch at first, halved on each out-of-memory).
    `batch_rows`: this process's rows of a whole batch (all `batch_size` in one process).

    Example:
        >>> sizes = MicroBatchSize("auto", batch_size=8)
        >>> sizes.slices(slice(0, 8))
        [slice(0, 8, None)]
        >>> sizes.halve(), sizes.slices(slice(0, 8))
        (4, [slice(0, 4, None), slice(4, 8, None)])
        >>> MicroBatchSize(3, batch_size=8).slices(slice(4, 8))  # a second process's share
        [slice(4, 7, None), slice(7, 8, None)]
    """

    def __init__(self, setting: int | str | None, batch_size: int, batch_rows: int | None = None):
        self.setting = setting
        self.auto = setting == "auto"
        self.batch_rows = batch_size if batch_rows is None else batch_rows
        self.auto_size = batch_size  # what `auto` has come down to

    def for_rows(self, rows: int) -> int:
        """The micro-batch size for a share of `rows` rows."""
        size = self.setting if isinstance(self.setting, int) else rows
        if self.auto:
            size = min(rows, self.auto_size)
        return max(size, 1)

    @property
    def current(self) -> int:
        """The micro-batch size of a whole batch's share (what a message names)."""
        return self.for_rows(self.batch_rows)

    def slices(self, share: slice) -> list[slice]:
        """The micro-batches of the rows `share`."""
        size = self.for_rows(share.stop - share.start)
        return [slice(i, min(i + size, share.stop)) for i in range(share.start, share.stop, size)]

    def halve(self) -> int:
        """Halve the size `auto` uses; returns the new size."""
        self.auto_size = self.current // 2
        return self.auto_size


class StepStart:
    """Where a step began, to take it again: the data position and the random states;
    with `updates` (a step that updates more than once), the trained weights and the
    optimizer, scheduler and loss-scaler states too, copied to the CPU (small: LoRA
    weights and their AdamW moments). `stream`: what holds the data position."""

    def __init__(self, stream, random_states: RandomStates, optimization: Optimization, updates: bool):
        self.stream, self.random_states, self.optimization = stream, random_states, optimization
        self.data_position = stream.position
        self.process_rng = process_state()
        self.generator = random_states.generator.get_state()
        # A rank of several samples with its own generator: the retry must sample again
        # what the first attempt sampled.
        self.sample_generator = random_states.sample_generator.get_state()
        self.weights = [p.detach().to("cpu", copy=True) for p in optimization.parameters] if updates else None
        self.optimizer = optimization.snapshot() if updates else None

    def free(self) -> None:
        """Drop what the failed attempt held: gradients, and the allocator's cached blocks."""
        self.optimization.zero_grad()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def restore(self) -> None:
        self.stream.position = self.data_position
        set_process_state(self.process_rng)
        self.random_states.generator.set_state(self.generator)
        self.random_states.sample_generator.set_state(self.sample_generator)
        if self.weights is not None:
            with torch.no_grad():
                for param, saved in zip(self.optimization.parameters, self.weights):
                    param.copy_(saved)
            self.optimization.restore(self.optimizer)


def step_that_fits(take_step: Callable[[], T], sizes: MicroBatchSize, start: StepStart, fields: MemoryFields, *,
                   phase: Callable[[], str], on_halved: Callable[[int, int], None]) -> T:
    """`take_step()`; on GPU out-of-memory in the update (`phase()` says where it was)
    with micro_batch_size `auto`, the micro-batch is halved and the step taken again from
    `start` (`on_halved(old, new)` tells the run); otherwise OutOfMemory, naming the
    fields that would make it fit. `start`: anything with `free()` and `restore()`.

    Example (a step that fits micro-batches of 2):
        >>> sizes = MicroBatchSize("auto", batch_size=8)
        >>> def step():
        ...     if sizes.current > 2:
        ...         raise torch.OutOfMemoryError("CUDA out of memory")
        ...     return "trained"
        >>> class Start:
        ...     def free(self): pass
        ...     def restore(self): pass
        >>> fields = MemoryFields(batch=8, unit="completions", max_tokens=16, checkpointing=False)
        >>> step_that_fits(step, sizes, Start(), fields, phase=lambda: "update", on_halved=print)
        8 4
        4 2
        'trained'
    """
    while True:
        try:
            return take_step()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            start.free()
            size, failed_in = sizes.current, phase()
            if not sizes.auto or failed_in == "rollout" or size <= 1:
                raise OutOfMemory(fields.message(failed_in, size, sizes.auto)) from exc
            start.restore()
            on_halved(size, sizes.halve())
