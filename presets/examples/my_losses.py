"""A policy loss of your own, named in a preset as `algorithm.loss_type: my_losses.py:clip_cov`
(docs/research-in-a-file.md has the contract).

The engine calls it with the batch's tensors positionally and, by keyword, the options it
names out of: log_ratio, epsilon_low, epsilon_high, max_completion_length. It returns the
per-token loss (B, T) (the engine masks padding, averages the tokens as
`algorithm.loss_aggregation` says, and adds beta * KL), or (loss, ratio, flags): each flag,
a bool (B, T), is logged as the share of the batch it marks, under the function's name
(`clip_cov/cov_clipped`); a flag named `clipped` is what the inspector marks.
"""

import torch


def clip_cov(logprobs, old_logprobs, advantages, mask, *, log_ratio, epsilon_low, epsilon_high,
             top_fraction=0.02):
    """PPO's clipped surrogate, and Clip-Cov (Cui et al. 2025, simplified): the tokens whose
    logprob and advantage covary most lose their gradient, which slows entropy collapse."""
    advantages = advantages.expand_as(logprobs)                       # (B, T)
    ratio = torch.exp(log_ratio).expand_as(logprobs)                  # (B, T)
    clipped_ratio = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    loss = -torch.min(ratio * advantages, clipped_ratio * advantages)  # (B, T)
    clipped = ((ratio < 1 - epsilon_low) & (advantages < 0)) | ((ratio > 1 + epsilon_high) & (advantages > 0))
    real = mask.bool()
    high_cov = torch.zeros_like(real)
    if real.any():
        lp = logprobs.detach()
        cov = (lp - lp[real].mean()) * (advantages - advantages[real].mean())  # (B, T)
        k = max(1, int(top_fraction * real.sum()))
        high_cov = real & (cov >= cov[real].topk(k).values[-1])
    loss = torch.where(high_cov, loss.detach(), loss)                 # no gradient through those tokens
    return loss, ratio, {"cov_clipped": high_cov, "clipped": clipped | high_cov}
