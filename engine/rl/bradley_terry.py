"""The reward model's loss on preference pairs: Bradley-Terry, as TRL 1.16's
RewardTrainer takes it (InstructGPT's reward-model loss, with Llama 2's margin).

    loss_i = -log sigmoid(r_chosen_i - r_rejected_i - margin_i)
             + center_rewards_coefficient * (r_chosen_i + r_rejected_i)^2

The batch's loss is the mean over its pairs. The centering term (Eisenstein et al. 2023)
keeps the rewards near zero: Bradley-Terry sees only differences, so without it their
level drifts freely.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["bradley_terry_loss"]


def bradley_terry_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor, margin: torch.Tensor | None = None,
                       center_rewards_coefficient: float | None = None) -> torch.Tensor:
    """Each pair's loss (B,), from each side's reward (B,) and the pair's margin (B,) or None.

    input:  r_chosen [2.0, 0.0], r_rejected [1.0, 0.0], margin [0.0, 1.0]
    output: [-log s(1), -log s(-1)] = [0.3133, 1.3133]

    >>> bradley_terry_loss(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]))
    tensor([0.3133, 1.3133])
    >>> bradley_terry_loss(torch.tensor([1.0]), torch.tensor([1.0]), center_rewards_coefficient=0.01)
    tensor([0.7331])
    """
    difference = r_chosen - r_rejected
    if margin is not None:
        difference = difference - margin
    loss = -F.logsigmoid(difference)
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * (r_chosen + r_rejected) ** 2
    return loss
