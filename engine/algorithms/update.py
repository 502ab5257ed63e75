"""The pieces of a step's update, which the base's one loop (Trainer.update) runs for
every algorithm: the batch a step prepares (`StepBatch`), the parts one optimizer step
trains on (`UpdatePart`: the whole batch, or PPO's mini-batches), the micro-batch a loss
is taken on (`MicroBatch`), what an algorithm's loss gives back (`MicroLoss`), and what
the update gives back to the step (`UpdateResult`).

The loop, in words: per epoch, per part, the gradient of the part's loss is accumulated
over its micro-batches (backward(loss * weight)), the processes' shares summed, clipped,
one optimizer step; a non-finite loss or gradient skips the step's remaining updates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from engine.model.rollout import Rollout

__all__ = ["StepBatch", "SampledBatch", "UpdatePart", "MicroBatch", "MicroLoss", "UpdateResult", "recorded_top"]


def recorded_top(logits, rows: slice, num_recorded: int):
    """Top-5 (probs, ids) of the recorded rows among a micro-batch's `rows` (the batch's
    first `num_recorded` are recorded), or None when none of them is in it."""
    recorded = max(0, min(rows.stop, num_recorded) - rows.start)
    return logits.top(recorded) if recorded else None


@dataclass
class StepBatch:
    """What every step's `prepare` gives the base, besides what its algorithm keeps:
    `rows`, the rows the update trains on (a sampled rollout, or DPO's pairs as rows);
    `num_recorded`, how many of the first rows the inspector records; `samples`, what the
    step's throughput counts (prompts, pairs, rows); `generated`, tokens sampled (None:
    an offline step); `unit`, rows kept together on one process and in one micro-batch
    (a group, a pair); `pass_group`, the group size of the rows' passes (None: the
    preset's); `episodes`, a multi-turn step's episodes (their metrics join the step's).
    The base sets `logprob_after` (the update's effect on the recorded rows); the loss
    keeps the recorded rows' top-5 alternatives (and entropy) with `record_top`."""

    rows: Rollout
    num_recorded: int
    samples: int
    generated: int | None = field(default=None, kw_only=True)
    unit: int = field(default=1, kw_only=True)
    pass_group: int | None = field(default=None, kw_only=True)
    episodes: object | None = field(default=None, kw_only=True)
    logprob_after: torch.Tensor | None = field(default=None, kw_only=True)
    tops: list = field(default_factory=list, kw_only=True)
    entropies: list = field(default_factory=list, kw_only=True)

    def record_top(self, logits, rows: slice, entropy: torch.Tensor | bool = False) -> None:
        """Keep the top-5 alternatives of the recorded rows among a micro-batch's `rows`
        (TokenLogits `logits`), and their entropy when asked: `entropy` the micro-batch's
        (b, T) when the step has it, or True to take it from `logits` (only for a
        micro-batch that holds recorded rows)."""
        top = recorded_top(logits, rows, self.num_recorded)
        if top is not None:
            self.tops.append(top)
            if entropy is not False:
                entropy = logits.entropy() if entropy is True else entropy
                self.entropies.append(entropy[: top[0].shape[0]])

    @property
    def recorded_entropy(self) -> torch.Tensor | None:
        """The recorded rows' per-token entropy kept with their top-5, in row order; None when none was."""
        return torch.cat(self.entropies) if self.entropies else None

    @property
    def top(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The recorded rows' top-5 (probs, ids), in row order; None when none was kept."""
        if not self.tops:
            return None
        return torch.cat([t[0] for t in self.tops]), torch.cat([t[1] for t in self.tops])

    @property
    def size(self) -> int:
        return self.rows.completion_ids.shape[0]

    @property
    def tokens(self) -> int:
        """Every token of the rows: the prompts' and what follows them."""
        return int(self.rows.lengths.sum()) + int(self.rows.prompt_mask.sum())


@dataclass
class SampledBatch(StepBatch):
    """A step that sampled its batch (GRPO, PPO, online DPO): the rows' prompts and texts,
    the rewards' totals and components; GRPO's and PPO's the totals as a tensor and the
    step rewards' steps too."""

    prompts: list[str] = field(kw_only=True)
    completions: list[str] = field(kw_only=True)
    totals: list[float] = field(kw_only=True)
    components: dict[str, list[float]] = field(kw_only=True)
    rewards: torch.Tensor | None = field(default=None, kw_only=True)
    steps: object | None = field(default=None, kw_only=True)  # engine.algorithms.step_rewards.StepRewards


@dataclass(frozen=True)
class UpdatePart:
    """What one optimizer step trains on: `size` rows kept `unit` together; `index`, the
    batch's rows in it (PPO's random mini-batches), or None: the whole batch in order."""

    size: int
    unit: int = 1
    index: torch.Tensor | None = None


@dataclass(frozen=True)
class MicroBatch:
    """Micro-batch `number` of `count` of a part: `rows`, its slice of the part's rows;
    `epoch`, the pass over the batch it belongs to."""

    rows: slice
    number: int
    count: int
    epoch: int
    part: UpdatePart


@dataclass
class MicroLoss:
    """An algorithm's loss on one micro-batch: `loss` in the graph; `weight`, its share
    of the part's loss (the gradient is of loss * weight, and the part's logged loss is
    the sum of loss * weight); `metrics`, numbers summed over the part's micro-batches
    (each weighted by the algorithm as its meaning asks)."""

    loss: torch.Tensor
    weight: float = 1.0
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class UpdateResult:
    """Each optimizer step's loss and metrics (the processes' sums), the last gradient
    norm, and whether a non-finite loss or gradient skipped the step. `reduce`: how the
    step's loss and metrics come out of several updates, the last one's (GRPO's
    num_iterations, as TRL logs it) or their mean (PPO's epochs and mini-batches)."""

    reduce: Literal["last", "mean"] = "last"
    losses: list[float] = field(default_factory=list)
    metrics_per_update: list[dict[str, float]] = field(default_factory=list)
    grad_norm: float = float("nan")
    skipped: bool = False

    @property
    def loss(self) -> float | None:
        """The step's loss; None when it was skipped.

        >>> UpdateResult("mean", [1.0, 2.0]).loss, UpdateResult("last", [1.0, 2.0]).loss
        (1.5, 2.0)
        """
        if self.skipped or not self.losses:
            return None
        return self._mean(self.losses) if self.reduce == "mean" else self.losses[-1]

    @property
    def metrics(self) -> dict[str, float]:
        """The step's metrics from the updates that were taken ({} when none was).

        >>> UpdateResult("mean", metrics_per_update=[{"a": 1.0}, {"a": 2.0}]).metrics
        {'a': 1.5}
        """
        if not self.metrics_per_update:
            return {}
        if self.reduce == "last":
            return self.metrics_per_update[-1]
        sums: dict[str, float] = {}
        for metrics in self.metrics_per_update:
            for key, value in metrics.items():
                sums[key] = sums.get(key, 0.0) + value
        return {key: value / len(self.metrics_per_update) for key, value in sums.items()}

    @staticmethod
    def _mean(values: list[float]) -> float:
        # added in order from 0.0, as the trainers summed their updates before (sum() of
        # Python 3.12+ compensates, which would change the logged loss in its last digits)
        total = 0.0
        for value in values:
            total += value
        return total / len(values)
