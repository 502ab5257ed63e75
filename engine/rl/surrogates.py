"""Policy surrogates (the SURROGATES registry; a GRPO `loss_type` names one and an
aggregation, engine.rl.catalog): the per-token loss of a policy-gradient update.

Contract: (logprobs (B, T) with grad, old_logprobs (B, T), advantages (B, 1) or (B, T),
mask (B, T), *, the options it names: log_ratio, epsilon_low and epsilon_high (the
engine's, engine.rl.catalog.surrogate_options) and any field of GRPO's preset section
(sapo_temperature_pos, delta, max_completion_length, ...), which it receives by naming
it: a new option is a field in engine/algorithms/grpo/config.py and a keyword here)
-> (per_token_loss (B, T), ratio (B, T), flags {metric: (B, T) bool}).
The caller has made padding inert (old_logprobs == logprobs there, so the ratio is 1)
and masks and aggregates the per-token loss; each flag named in the entry's
`Surrogate.metrics` is reported as the share of the batch it marks.
"""

import torch

CLIP_LOW, CLIP_HIGH, CLIP_REGION = "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"
CISPO_CLIPPED = "cispo_clip_ratio"  # TRL's metric: the share of tokens whose weight the cap cut


def clipped_surrogate(logprobs, old_logprobs, advantages, epsilon_low, epsilon_high, log_ratio=None, delta=None):
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

    `delta` (two-sided clipping, INTELLECT-2; TRL's `delta`): the unclipped branch's ratio
    is capped at delta too, so a token with a negative advantage whose ratio ran far above
    1 + epsilon_high no longer has an unbounded loss (and gets no gradient past delta).
    The flags are counted on the capped ratio, as TRL counts them; `ratio` is returned as
    it is. e.g. delta 2, A = -1, ratio 3 -> loss 2 (without delta: 3)
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # (B, 1), broadcasts over T
    if log_ratio is None:
        log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio).expand_as(logprobs)  # (B, T)
    clipped_ratio = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    capped = ratio if delta is None else torch.clamp(ratio, max=delta)
    per_token_loss = -torch.min(capped * advantages, clipped_ratio * advantages)
    is_low_clipped = (capped < 1 - epsilon_low) & (advantages < 0)
    is_high_clipped = (capped > 1 + epsilon_high) & (advantages > 0)
    return per_token_loss, ratio, is_low_clipped, is_high_clipped


def clipped(logprobs, old_logprobs, advantages, mask, *, log_ratio, epsilon_low, epsilon_high, delta=None):
    """The registry's `clipped`: :func:`clipped_surrogate` with its clip flags under TRL's
    metric names (low, high, and either: the region the inspector marks).

    e.g. eps 0.2 / 0.28, A = [[1]], log ratio [[0, ln 1.5]]
         -> loss [[-1, -1.28]], flags high [[F, T]], low [[F, F]], region [[F, T]]
    """
    loss, ratio, low, high = clipped_surrogate(logprobs, old_logprobs, advantages, epsilon_low, epsilon_high,
                                               log_ratio=log_ratio, delta=delta)
    return loss, ratio, {CLIP_LOW: low, CLIP_HIGH: high, CLIP_REGION: low | high}


def cispo(logprobs, old_logprobs, advantages, mask, *, log_ratio, epsilon_high):
    """CISPO (MiniMax-M1, Chen et al. 2025): REINFORCE on the logprobs, each token weighted
    by its importance ratio capped at ``epsilon_high`` and detached, so that no token's
    gradient is ever cut off (PPO's clip drops it), only scaled down.

    loss = -sg(min(ratio, epsilon_high)) * A * logprob

    The cap is ``epsilon_high`` itself, not 1 + epsilon_high (as TRL); the trainer gives
    5.0 when the preset leaves it unset (engine.rl.catalog.upper_clip). The flag marks the
    tokens whose weight the cap lowered and that the gradient pushes up (A > 0), as TRL's
    ``cispo_clip_ratio`` counts them; there is no lower cap, so nothing is flagged low.

    e.g. cap 5, A = +1, ratio [0.5, 1, 2, 6], logprob [-1, -1, -1, -1]
         -> weight [0.5, 1, 2, 5], loss [0.5, 1, 2, 5], d loss / d logprob [-0.5, -1, -2, -5],
            flagged [F, F, F, T]
    """
    ratio = torch.exp(log_ratio).expand_as(logprobs)  # (B, T); (B, 1) at sequence level
    weight = torch.clamp(ratio, max=epsilon_high).detach()
    per_token_loss = -weight * advantages * logprobs
    capped = (ratio > epsilon_high) & (advantages > 0)
    return per_token_loss, ratio, {CISPO_CLIPPED: capped.expand_as(logprobs)}


def sapo(logprobs, old_logprobs, advantages, mask, *, log_ratio, sapo_temperature_pos=1.0,
         sapo_temperature_neg=1.05):
    """SAPO (Soft Adaptive Policy Optimization, Gao et al. 2025): PPO's hard clip replaced
    by a sigmoid gate on the ratio, so a token's gradient fades smoothly as its ratio
    leaves 1 instead of dropping to 0 at 1 +- epsilon.

    loss = -(4 / tau) * sigmoid(tau * (ratio - 1)) * A,  tau = sapo_temperature_pos where
    A > 0, sapo_temperature_neg elsewhere (TRL's rule: A = 0 takes the negative one).

    d loss / d logprob = -4 * sigmoid'(tau * (ratio - 1)) * ratio * A, which at ratio 1 is
    -A whatever tau (sigmoid'(0) = 1/4): on-policy it is plain policy gradient; a larger
    tau makes the gate fall off faster. No flags: nothing is clipped.

    e.g. tau 1 (A = +1), ratio [1, 2] -> loss [-2, -4 * sigmoid(1)] = [-2, -2.9242],
         gradient wrt logprob [-1, -4 * 0.19661 * 2] = [-1, -1.5729]
    """
    ratio = torch.exp(log_ratio).expand_as(logprobs)  # (B, T); (B, 1) at sequence level
    positive = advantages > 0
    tau = torch.where(positive, advantages.new_tensor(sapo_temperature_pos),
                      advantages.new_tensor(sapo_temperature_neg))  # shaped like advantages
    gate = torch.sigmoid(tau * (ratio - 1)) * (4 / tau)
    return -gate * advantages, ratio, {}
