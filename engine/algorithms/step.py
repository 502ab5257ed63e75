"""The one training step of every algorithm, which the base `Trainer` runs
(`train_step`): the algorithm's `prepare`, the update (per epoch, per part, the
algorithm's `loss` per micro-batch; gradients accumulated, the processes' shares summed,
clipped, one optimizer step; a non-finite loss or gradient skips the rest), the
after-update look at the recorded rows, then the algorithm's `finish` and the metrics
every step has (loss, gradient norm, timing, the update's effect, the episodes'). The
phase of a step and the step counter are set here alone.

`TrainingStep` is also the contract of an algorithm: the methods below that raise
NotImplementedError are what it implements; the others are its schedule, which it
overrides where it is not one update of the whole batch. The pieces it passes around are
engine/algorithms/update.py's.
"""

from __future__ import annotations

import time

import torch

from engine.algorithms.policy import set_update_mode
from engine.algorithms.step_result import StepResult
from engine.algorithms.update import MicroBatch, MicroLoss, StepBatch, UpdatePart, UpdateResult
from engine.algorithms.update_effect import effect_metrics, logprobs_after_update
from engine.model import token_logits

__all__ = ["TrainingStep", "host_numbers", "recorded_rows"]


def recorded_rows(batch: StepBatch, rows: slice, epoch: int, part: UpdatePart) -> int:
    """How many of a micro-batch's first rows the inspector records (their top-5 is kept
    in the first epoch's pass over the batch in order; PPO's shuffled mini-batches keep none).

    >>> batch = type("B", (), {"num_recorded": 8})()
    >>> recorded_rows(batch, slice(0, 16), 0, UpdatePart(16)), recorded_rows(batch, slice(4, 12), 0, UpdatePart(16))
    (8, 4)
    >>> recorded_rows(batch, slice(8, 16), 0, UpdatePart(16)), recorded_rows(batch, slice(0, 16), 1, UpdatePart(16))
    (0, 0)
    """
    if epoch or part.index is not None:
        return 0
    return max(0, min(rows.stop, batch.num_recorded) - rows.start)


def host_numbers(total, metrics: dict) -> tuple[float, dict[str, float]]:
    """A part's loss total and metrics as Python floats, the device's tensors among them
    read in one transfer (one host sync a part, not one a micro-batch).

    >>> host_numbers(torch.tensor(1.5, dtype=torch.float64), {"a": 2.0, "b": torch.tensor(0.25)})
    (1.5, {'a': 2.0, 'b': 0.25})
    """
    keys = sorted(metrics)
    values = [total, *(metrics[key] for key in keys)]
    tensors = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    if tensors:
        read = torch.stack([values[i].detach().double().reshape(()) for i in tensors]).tolist()
        for i, value in zip(tensors, read):
            values[i] = value
    return float(values[0]), {key: float(value) for key, value in zip(keys, values[1:])}


class TrainingStep:
    """The step's loop and an algorithm's hooks into it. The Trainer holds the parts it
    uses (model, optimizer part, world, micro-batch size, events)."""

    SAMPLES = True  # a step samples its batch (its first phase is the rollout); DPO and KTO read theirs
    UPDATE_REDUCE = "last"  # the step's loss and metrics of several updates: the last one's, or their "mean"

    # What an algorithm is: its prepare, its loss, its finish, its records (and, where it
    # trains in several updates a step, its schedule). The loop that runs them is train_step.

    def prepare(self) -> StepBatch:
        """The step's batch: sampled, scored and given advantages (an online algorithm), or
        read (pairs, rows), with the passes the loss needs before the update (reference,
        old policy). It calls `rollout_done` and `rewards_done` where those phases end."""
        raise NotImplementedError

    def update_epochs(self) -> int:
        """Passes of the update over the batch (GRPO's num_iterations, PPO's num_ppo_epochs)."""
        return 1

    def update_parts(self, batch: StepBatch, epoch: int) -> list[UpdatePart]:
        """The parts of one epoch, an optimizer step each: the whole batch, in order."""
        return [UpdatePart(batch.size, batch.unit)]

    def part_micro_batches(self, part: UpdatePart) -> list[slice]:
        """This process's micro-batches of a part (rows of the part)."""
        return self.micro_batches(part.size, part.unit)

    def before_update(self, batch: StepBatch) -> None:
        """Passes the loss needs in the update's mode, before its first micro-batch
        (GRPO's and online DPO's reference)."""

    def loss(self, batch: StepBatch, micro: MicroBatch) -> MicroLoss:
        """The algorithm's loss on one micro-batch, and what it records of the pass."""
        raise NotImplementedError

    def update_effect_inputs(self, batch: StepBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logprobs before the update (B, T), each row's or token's advantage, mask (B, T)):
        what the update's effect is measured against (RECORDS_UPDATE_EFFECT)."""
        raise NotImplementedError

    def finish(self, batch: StepBatch, update: UpdateResult) -> StepResult:
        """The step's own metrics and outputs, once updated (self.step is the new step)."""
        raise NotImplementedError

    def write_step_outputs(self, outputs) -> None:
        """Samples events and trajectory records of the step just taken, from the outputs
        its StepResult carried (rank 0 alone)."""
        raise NotImplementedError

    # ------------------------------------------------------------------- step

    def start_clock(self) -> None:
        """The step's time starts here, not before (after a one-off precomputation)."""
        self._times[0] = time.perf_counter()

    def rollout_done(self) -> None:
        """The rollout phase of the step ends here (its timing/rollout)."""
        self._times[1] = time.perf_counter()

    def rewards_done(self) -> None:
        """The rewards (and advantages) phase ends here."""
        self._times[2] = time.perf_counter()

    def train_step(self) -> StepResult:
        """One step of every algorithm: prepare, update, the after-update look, then the
        algorithm's metrics and outputs with the ones every step has (loss, gradient norm,
        timing, the update's effect, the episodes'). The phase and the step counter are
        the base's alone."""
        self._times = [time.perf_counter(), None, None, None]
        self.phase = "rollout" if self.SAMPLES else "update"  # an offline step's passes are all in micro-batches
        batch = self.prepare()
        self._times[2] = self._times[2] or time.perf_counter()
        self._times[1] = self._times[1] or self._times[2]
        update = self.update(batch)
        if self.RECORDS_UPDATE_EFFECT:  # the recorded rows under the updated policy
            batch.logprob_after = logprobs_after_update(self, batch.rows, batch.num_recorded, batch.pass_group)
        self._times[3] = time.perf_counter()
        if update.skipped:
            self.count_skipped_step()
        self.step += 1
        result = self.finish(batch, update)
        metrics = result.metrics
        metrics["loss"] = update.loss
        timing = self.timing_metrics(self._times, batch.samples, batch.tokens, batch.generated)
        # an algorithm's own count is kept: SFT's and the reward model's num_tokens is TRL's
        # (every token trained on so far), the step's tokens only where it gives none
        metrics.update({k: v for k, v in timing.items() if k not in metrics})
        metrics["grad_norm"] = update.grad_norm
        if batch.logprob_after is not None:
            before, advantage, mask = self.update_effect_inputs(batch)
            metrics.update(effect_metrics(before, batch.logprob_after, advantage, mask))
        if batch.episodes is not None:
            metrics.update(batch.episodes.metrics())
        return result

    def update(self, batch: StepBatch) -> UpdateResult:
        """The update of a step: per epoch, per part, the loss's gradient accumulated over
        the part's micro-batches, the processes' shares summed (each holds its rows' shares
        of the part's loss, so every process takes the same skip decision), clipped, one
        optimizer step; a non-finite loss or gradient skips the rest."""
        self.phase = "update"
        set_update_mode(self.model, True, lora_dropout=self.lora_dropout_in_updates)
        self.before_update(batch)
        result = UpdateResult(self.UPDATE_REDUCE)
        for epoch in range(self.update_epochs()):
            for part in self.update_parts(batch, epoch):
                micro_batches = self.part_micro_batches(part)
                self.optimizer.zero_grad(set_to_none=True)
                loss_total, metrics = 0.0, {}
                lean = token_logits.LEAN_UPDATE
                for number, rows in enumerate(micro_batches):
                    # the recorded rows of this micro-batch, whose top-5 a lean pass keeps on the way
                    self.policy.recorded_rows = recorded_rows(batch, rows, epoch, part) if lean else 0
                    with self.synced(number, len(micro_batches)):
                        out = self.loss(batch, MicroBatch(rows, number, len(micro_batches), epoch, part))
                        self.backward(out.loss * out.weight)
                        # lean: summed on the device in float64 (as Python sums floats), read once below
                        loss = out.loss.detach().double() if lean else out.loss.detach().item()
                        loss_total += loss * out.weight
                        for key, value in out.metrics.items():
                            metrics[key] = metrics.get(key, 0.0) + value
                    self.policy.recorded_rows = 0
                loss_total, metrics = host_numbers(loss_total, metrics)
                loss_total = self.world.sum_floats([loss_total])[0]
                metrics = self.world.sum_dict(metrics)
                result.grad_norm, ok = self.clip_and_step(loss_total)
                if not ok:
                    result.skipped = True
                    return result
                result.losses.append(loss_total)
                result.metrics_per_update.append(metrics)
        return result

    @property
    def lora_dropout_in_updates(self) -> bool:
        """The adapter's dropout on in updates: an algorithm with no ratio whose preset
        turns disable_dropout off (see set_update_mode)."""
        return getattr(self.algo, "disable_dropout", True) is False
