"""A step's step rewards, on tokens: what GRPO's process supervision and PPO train on, and
what the records, samples and metrics show of them.

A step reward (engine/rewards/steps.py) gives each completion a list of (end character,
score) steps; here each step is moved to the token that ends it (`token_step_ends`), and
the result feeds engine/rl/process.py's tensors. With no step component in the preset,
`StepRewards.of` gives an empty one and every use is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.rewards.steps import token_step_ends
from engine.rl.process import step_tensors

__all__ = ["StepRewards"]


@dataclass
class StepRewards:
    """For each step component (label), each completion's steps as (token_end, score);
    `weights`: every component's weight, by label."""

    per_component: dict[str, list[list[tuple[int, float]]]]
    weights: dict[str, float]

    @classmethod
    def of(cls, steps: dict, completions: list[str], rollout, tokenizer, reward_components) -> "StepRewards":
        """Each step's end character moved to the token that ends it in its completion;
        the weights are the (label, weight, reward) components' (Trainer.reward_components).

        e.g. steps {"s": [[(2, 1.0), (4, 0.0)]]} for " 1 3" of tokens [" ", "1", " ", "3", "<eos>"]
             -> {"s": [[(1, 1.0), (4, 0.0)]]} (the last step ends the text: its end token too)
        """
        weights = {label: weight for label, weight, _ in reward_components}
        if not steps:  # no step component: nothing to move (every step of a plain preset)
            return cls({}, weights)
        if rollout.episodes is not None:
            from engine.rewards.base import RewardError

            raise RewardError(f"reward component {next(iter(steps))!r} returned steps, and steps are scored on "
                              "single completions; with data.environment make it return one number per episode")

        def decode(ids: list[int]) -> str:
            return tokenizer.decode(ids, skip_special_tokens=True)

        rows = [rollout.completion_ids[i, : int(n)].tolist() for i, n in enumerate(rollout.lengths)]
        per_component = {}
        for label, per_row in steps.items():
            per_component[label] = []
            for ids, text, row_steps in zip(rows, completions, per_row):
                ends = token_step_ends(decode, ids, [end for end, _ in row_steps], len(text)) if ids else []
                per_component[label].append([(end, float(score)) for end, (_, score) in zip(ends, row_steps)])
        return cls(per_component, weights)

    def __bool__(self) -> bool:
        return bool(self.per_component)

    def outcome_totals(self, components: dict[str, list[float]]) -> list[float]:
        """Each completion's weighted sum of the outcome (not step) components.

        e.g. components {"exact": [1, 0], "s": [0.5, 1]}, weights {"exact": 1, "s": 0.5}, "s" a
             step component -> [1.0, 0.0]
        """
        size = len(next(iter(components.values()))) if components else 0
        totals = [0.0] * size
        for label, values in components.items():
            if label not in self.per_component:
                totals = [t + self.weights[label] * v for t, v in zip(totals, values)]
        return totals

    def tensors(self, lengths: torch.Tensor, num_tokens: int, outcome: list[float] | None, device):
        """(step_rewards, step_ends), (B, T) each, on `device` (engine.rl.process.step_tensors)."""
        values, ends = step_tensors(self.per_component, self.weights, lengths.cpu(), num_tokens,
                                    None if outcome is None else torch.tensor(outcome, dtype=torch.float64))
        return values.to(device), ends.to(device)

    def row_extras(self) -> dict[str, list]:
        """What each row's sample and trajectory record keep (RolloutStepOutputs.row_extras):
        `steps` {label: {"ends": [token, ...], "scores": [...]}} and the step components'
        `step_weights`; nothing without step components.

        e.g. {"s": [[(1, 1.0), (4, 0.0)]]}, weights {"s": 0.5, "exact": 1}
             -> {"steps": [{"s": {"ends": [1, 4], "scores": [1.0, 0.0]}}], "step_weights": [{"s": 0.5}]}
        """
        if not self:
            return {}
        size = len(next(iter(self.per_component.values())))
        weights = {label: self.weights[label] for label in self.per_component}
        return {"steps": [{label: {"ends": [end for end, _ in rows[i]], "scores": [score for _, score in rows[i]]}
                           for label, rows in self.per_component.items()} for i in range(size)],
                "step_weights": [weights] * size}

    def metrics(self, group_size: int) -> dict:
        """steps/count_mean (steps a completion, over step components), steps/single_step_ratio
        (the share of (completion, component) pairs with at most one step: the text no longer
        splits) and frac_step_reward_zero_std (groups whose every step score is alike).

        e.g. one component, G 2, rows [[(0, 1.0), (2, 1.0)], [(1, 1.0)]]
             -> count_mean 1.5, single_step_ratio 0.5, frac_step_reward_zero_std 1.0
        """
        counts = [len(steps) for rows in self.per_component.values() for steps in rows]
        size = len(next(iter(self.per_component.values())))
        alike = 0
        for start in range(0, size, group_size):
            scores = [score for rows in self.per_component.values() for steps in rows[start:start + group_size]
                      for _, score in steps]
            alike += len(set(scores)) <= 1
        groups = max(1, size // group_size)
        return {"steps/count_mean": sum(counts) / max(1, len(counts)),
                "steps/single_step_ratio": sum(c <= 1 for c in counts) / max(1, len(counts)),
                "frac_step_reward_zero_std": alike / groups}
