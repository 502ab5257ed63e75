"""Importance-sampling levels (the IMPORTANCE_LEVELS registry, `importance_sampling_level`):
each gives the log of the probability ratio pi / pi_old the surrogate clips, and declares
what a clip fraction counts (engine.rl.catalog.ImportanceLevel).

Contract: (logprobs (B, T), old_logprobs (B, T), mask (B, T)) -> log ratio (B, T), or
(B, 1) for one ratio per sequence (it broadcasts over T).
"""

import torch

from engine.rl.masking import masked_mean


def token_log_ratio(logprobs, old_logprobs, mask):
    """One ratio per token (GRPO, PPO): log pi_t - log pi_old_t.

    e.g. logprobs [[0.2, 0.4]], old [[0, 0]] -> [[0.2, 0.4]]
    """
    return logprobs - old_logprobs


def sequence_log_ratio(logprobs, old_logprobs, mask):
    """GSPO (Zheng et al. 2025): the log of the sequence-level importance ratio, the
    mean over the sequence's tokens of log(pi / pi_old), so that
    ratio = (prod_t pi_t / pi_old_t) ** (1 / |y|).

    input:  logprobs (B, T), old_logprobs (B, T), mask (B, T)
    output: (B, 1), broadcasts over T

    e.g. log-ratios [[0.2, 0.4, 9]], mask [[1, 1, 0]] -> [[0.3]]
    """
    per_token = torch.where(mask.bool(), logprobs - old_logprobs, 0.0)
    return (per_token.sum(-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1)


def clip_fraction(flags, mask, importance_sampling_level="token"):
    """clip_fraction_tensor read on the host: a python float (the docstring there)."""
    return clip_fraction_tensor(flags, mask, importance_sampling_level).item()


def clip_fraction_tensor(flags, mask, importance_sampling_level="token"):
    """Share of the batch that a flag marks (the clip): of its tokens where the level
    counts tokens; of its sequences where it counts sequences (GSPO, as TRL counts them,
    since there the ratio and so the clip is one per sequence). Sequences with no real
    token are left out.

    A sequence counts by the share of its tokens flagged: 0 or 1 with one advantage per
    sequence; per-token advantages (REINFORCE++) can flag only some of its tokens.

    input:  flags (B, T) bool, mask (B, T), a level's name (engine.rl.catalog.IMPORTANCE_LEVELS)
    output: a 0-dim tensor, on the flags' device (no host sync)

    e.g. flags [[T, T, T, F], [F, F, F, F]], mask [[1, 1, 1, 0], [1, 0, 0, 0]]
         -> token 3/4 = 0.75; sequence mean(1, 0) = 0.5
    """
    from engine.rl.catalog import IMPORTANCE_LEVELS

    if IMPORTANCE_LEVELS.declares(importance_sampling_level).counts != "sequences":
        return masked_mean(flags.float(), mask)
    per_sequence = masked_mean(flags.float(), mask, dim=1)  # (B,)
    present = mask.bool().any(-1)
    # zeros in place of the empty sequences, not a selection of the others: a selection's
    # size is data-dependent, which reads the mask on the host
    return torch.where(present, per_sequence, 0.0).sum() / present.sum().clamp(min=1)
