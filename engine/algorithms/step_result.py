"""What a training step gives back to the run loop: a `StepResult`, the step's metrics
(the `metrics` event's fields) and its outputs, what `write_step_outputs` turns into
`samples` events and trajectory records. Each algorithm types its outputs (a dataclass:
`GRPOStepOutputs`, `PPOStepOutputs`, `DPOStepOutputs`); the sampling algorithms' share
`RolloutStepOutputs`. Nothing of a step is kept on the trainer for a later method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

import torch

from engine.model.rollout import Rollout

__all__ = ["RolloutStepOutputs", "StepResult"]

Outputs = TypeVar("Outputs")


@dataclass
class StepResult(Generic[Outputs]):
    """One step's metrics (name -> number or None) and its outputs for the records."""

    metrics: dict
    outputs: Outputs


@dataclass
class RolloutStepOutputs:
    """What an online step (GRPO, PPO) keeps for `write_step_outputs`: the sampled batch,
    its rewards and advantages, (B,) per completion or (B, T) per token, and the rows
    the inspector records. ``row_extras``: keys a variant adds to each row's sample and
    trajectory record, a list over the batch each (GRPO's ``component_advantages`` under
    GDPO, ``baseline`` under ReMax, ``steps`` with step rewards)."""

    prompts: list[str]
    completions: list[str]
    totals: list[float]
    components: dict[str, list[float]]
    rollout: Rollout
    advantages: torch.Tensor
    record_rows: list[int]
    row_extras: dict[str, list] = field(default_factory=dict, kw_only=True)
    # the recorded rows' log-probabilities after the step's update (engine/algorithms/update_effect.py)
    logprob_after: torch.Tensor | None = field(default=None, kw_only=True)

    def samples(self, advantages: torch.Tensor, group_size: int, count: int) -> list[dict]:
        """The first `count` completions as a samples event lists them. `advantages` is
        (B,) per completion or (B, T) per token; a per-token one is shown by its first
        token's (for GAE and REINFORCE++ that token carries the whole return)."""
        per_sample = advantages if advantages.dim() == 1 else advantages[:, 0]
        return [{"index": i, "group": i // group_size,
                 "prompt": self.prompts[i], "completion": self.completions[i],
                 "reward": self.totals[i],
                 "rewards": {k: v[i] for k, v in self.components.items()},
                 "advantage": float(per_sample[i]),
                 **{key: sample_value(key, values[i]) for key, values in self.row_extras.items()}}
                for i in range(min(count, len(self.prompts)))]


def sample_value(key: str, value):
    """A row extra as a samples event carries it: a step reward's steps as their scores
    alone (the records keep where each step ends).

    e.g. "steps", {"s": {"ends": [1, 4], "scores": [1.0, 0.0]}} -> {"s": [1.0, 0.0]}
    """
    if key == "steps":
        return {label: steps["scores"] for label, steps in value.items()}
    return value
