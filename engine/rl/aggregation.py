"""Loss aggregations (the AGGREGATIONS registry, engine.rl.catalog): a per-token loss to
the scalar the optimizer minimises. They differ only in how tokens weigh against each
other; each entry declares the micro-batch weight that makes gradient accumulation exact
(engine.rl.catalog.Aggregation).

Contract: (per_token_loss (B, T), mask (B, T), *, max_completion_length if declared)
-> scalar. Masked positions are selected out, so whatever they hold cannot leak in.
"""

import torch

from engine.rl.masking import masked_mean


def sequence_mean(per_token_loss, mask):
    """Mean over sequences of each sequence's token mean (original GRPO).

    Each sequence weighs the same, so tokens of long sequences weigh less.
    e.g. loss [[1, 2, 3, 4], [5, 6, 7, 8]], mask [[1, 1, 0, 0], [1, 1, 1, 1]]
         -> mean(1.5, 6.5) = 4.0
    """
    return masked_mean(per_token_loss, mask, dim=1).mean()


def fixed_length(per_token_loss, mask, *, max_completion_length):
    """Masked sum / (B * max_completion_length) (Dr. GRPO).

    A constant denominator removes the length bias of the per-sequence mean.
    e.g. same inputs, L = 4 -> (3 + 26) / (2 * 4) = 3.625
    """
    total = torch.where(mask.bool(), per_token_loss, torch.zeros_like(per_token_loss)).sum()
    return total / (per_token_loss.shape[0] * max_completion_length)


def token_mean(per_token_loss, mask):
    """Masked mean over every token in the batch (DAPO token-level loss).

    Every token weighs the same, whatever sequence it is in.
    e.g. same inputs -> (3 + 26) / 6 = 4.8333
    """
    return masked_mean(per_token_loss, mask)
