"""Policy surrogates (the SURROGATES registry; a GRPO `loss_type` names one and an
aggregation, engine.rl.catalog): the per-token loss of a policy-gradient update.

Contract: (logprobs (B, T) with grad, old_logprobs (B, T), advantages (B, 1) or (B, T),
mask (B, T), *, options it declares out of log_ratio, epsilon_low, epsilon_high,
max_completion_length) -> (per_token_loss (B, T), ratio (B, T), flags {metric: (B, T) bool}).
The caller has made padding inert (old_logprobs == logprobs there, so the ratio is 1)
and masks and aggregates the per-token loss; each flag named in the entry's
`Surrogate.metrics` is reported as the share of the batch it marks.
"""

import torch

CLIP_LOW, CLIP_HIGH, CLIP_REGION = "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"


def clipped_surrogate(logprobs, old_logprobs, advantages, epsilon_low, epsilon_high, log_ratio=None):
    """PPO clipped surrogate, per token, as a loss (negated objective).

    loss = -min(ratio * A, clamp(ratio, 1 - eps_low, 1 + eps_high) * A)

    The clip flags mark tokens where the clamped branch wins the min, i.e.
    where the gradient is cut off (same counting as TRL).

    input:  logprobs (B, T), old_logprobs (B, T),
            advantages (B,) per sequence or (B, T) per token,
            epsilon_low, epsilon_high floats
    output: (per_token_loss (B, T), ratio (B, T),
             is_low_clipped (B, T) bool, is_high_clipped (B, T) bool)

    e.g. eps 0.2 / 0.28, A = +1, ratio [1.0, 1.5, 0.5] -> loss [-1, -1.28, -0.5],
         high clipped [F, T, F]; A = -1, same ratios -> loss [1, 1.5, 0.8],
         low clipped [F, F, T]

    `log_ratio` (B, T) or (B, 1), when given, replaces logprobs - old_logprobs (GSPO's
    sequence-level ratio, see engine.rl.importance.sequence_log_ratio).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # (B, 1), broadcasts over T
    if log_ratio is None:
        log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio).expand_as(logprobs)  # (B, T)
    clipped_ratio = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    per_token_loss = -torch.min(ratio * advantages, clipped_ratio * advantages)
    is_low_clipped = (ratio < 1 - epsilon_low) & (advantages < 0)
    is_high_clipped = (ratio > 1 + epsilon_high) & (advantages > 0)
    return per_token_loss, ratio, is_low_clipped, is_high_clipped


def clipped(logprobs, old_logprobs, advantages, mask, *, log_ratio, epsilon_low, epsilon_high):
    """The registry's `clipped`: :func:`clipped_surrogate` with its clip flags under TRL's
    metric names (low, high, and either: the region the inspector marks).

    e.g. eps 0.2 / 0.28, A = [[1]], log ratio [[0, ln 1.5]]
         -> loss [[-1, -1.28]], flags high [[F, T]], low [[F, F]], region [[F, T]]
    """
    loss, ratio, low, high = clipped_surrogate(logprobs, old_logprobs, advantages, epsilon_low, epsilon_high,
                                               log_ratio=log_ratio)
    return loss, ratio, {CLIP_LOW: low, CLIP_HIGH: high, CLIP_REGION: low | high}
