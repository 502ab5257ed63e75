"""Pure tensor math for the policy-gradient losses (GRPO, GSPO, PPO) and DPO.

Shapes used throughout:
    B = number of completions in the batch
    T = completion length (padded)
    V = vocabulary size

Every function here is pure: no module state, no optimiser, no model.
"""

import torch
import torch.nn.functional as F


def selective_log_softmax(logits, index):
    """Log-probability of the chosen token at every position.

    Same result as ``log_softmax(logits).gather(-1, index)`` but never holds a
    second (B, T, V) tensor, which for a 150k vocabulary is gigabytes.

    input:  logits (B, T, V) float, index (B, T) long
    output: (B, T) log p(index)

    e.g. logits [[[0, ln 3]]], index [[1]] -> softmax [1/4, 3/4] -> [[ln 0.75]]
    """
    if logits.dtype in (torch.float32, torch.float64):
        chosen = torch.gather(logits, -1, index.unsqueeze(-1)).squeeze(-1)  # (B, T)
        # A few rows at a time so logsumexp's temporaries stay near 2**24 elements,
        # not (B, T, V): one chunk for a small vocabulary, a row for a 150k one.
        rows = max(1, (1 << 24) // max(1, logits.shape[1] * logits.shape[2]))
        log_norm = torch.cat([torch.logsumexp(chunk, dim=-1) for chunk in logits.split(rows)])  # (B, T)
        return chosen - log_norm
    # In bf16/fp16, "logit - logsumexp" loses the small differences that matter
    # (both terms are large and only ~3 significant digits survive), so let
    # log_softmax do the subtraction internally, still one row at a time.
    rows = [
        F.log_softmax(row, dim=-1).gather(-1, idx.unsqueeze(-1)).squeeze(-1)  # (T,)
        for row, idx in zip(logits, index)
    ]
    return torch.stack(rows)  # (B, T)


def entropy_from_logits(logits, chunk_size=128):
    """Entropy of softmax(logits) in nats, per position.

    Works on ``chunk_size`` token positions at a time (flattened over B and T),
    so peak extra memory is (chunk_size, V) in fp32 whatever the batch size.

    input:  logits (B, T, V)
    output: (B, T) float32, H = -sum_v p_v log p_v

    e.g. logits [[[0, ln 3]]] -> p [1/4, 3/4] -> [[0.5623]]; uniform over V -> ln V
    """
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)  # (B*T, V)
    parts = []
    for chunk in flat.split(chunk_size, dim=0):
        logp = F.log_softmax(chunk.float(), dim=-1)  # (chunk, V); fp32 for accuracy
        p = logp.exp()
        # A -inf logit (masked-out vocab entry) gives 0 * -inf = nan; its true
        # contribution to the entropy is 0.
        parts.append(-torch.where(p > 0, p * logp, 0.0).sum(-1))
    return torch.cat(parts).reshape(logits.shape[:-1])  # (B, T)


def completion_mask(completion_ids, eos_token_id):
    """1 for real completion tokens, 0 for everything after the first EOS.

    The EOS token itself is kept: the policy chose to stop there, and that
    choice must get credit like any other token. Rows with no EOS (truncated
    at max length) are all ones.

    input:  completion_ids (B, T) long, eos_token_id int or iterable of ints
    output: (B, T) int32

    e.g. ids [[5, 2, 7, 2], [5, 5, 5, 5]], eos 2 -> [[1, 1, 0, 0], [1, 1, 1, 1]]
    """
    eos_ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    eos_ids = torch.tensor(eos_ids, dtype=completion_ids.dtype, device=completion_ids.device)
    is_eos = torch.isin(completion_ids, eos_ids).int()  # (B, T)
    # Number of EOS strictly before each position; > 0 means we are past the first one.
    eos_before = is_eos.cumsum(dim=1) - is_eos  # (B, T)
    return (eos_before == 0).int()


def masked_mean(values, mask, dim=None):
    """Mean of ``values`` over positions where ``mask`` is 1.

    Masked positions are selected out (not multiplied by 0), so inf/nan there
    cannot leak in. An all-masked row gives 0, not nan (denominator clamped at 1).

    input:  values (B, T), mask (B, T) of 0/1 (bool, int or float)
    output: scalar if dim is None, else per-row (B,) for dim=1

    e.g. values [[1, 2, 3], [4, 5, 6]], mask [[1, 1, 0], [0, 0, 0]]
         -> dim=None: 1.5 ; dim=1: [1.5, 0.0]
    """
    keep = mask.bool()
    total = torch.where(keep, values, torch.zeros_like(values)).sum(dim=dim)
    return total / keep.sum(dim=dim).clamp(min=1)


# Per-token estimators of KL(pi || ref), for tokens sampled from pi.
# Source: John Schulman, "Approximating KL Divergence",
# http://joschu.net/blog/kl-approx.html . With r = ref(x) / pi(x):
#   k1 = -log r               unbiased, high variance, can be negative
#   k3 = (r - 1) - log r      unbiased, lower variance, always >= 0
# (In GRPO the samples come from pi_old, not pi, so both are approximations.)


def kl_k1(logprobs, ref_logprobs):
    """k1 = log pi - log ref, elementwise.

    input:  logprobs (B, T), ref_logprobs (B, T)
    output: (B, T)

    e.g. lp [ln 0.5], ref [ln 0.25] -> [ln 2] = [0.6931]
    """
    return logprobs - ref_logprobs


def kl_k3(logprobs, ref_logprobs):
    """k3 = exp(ref - lp) - (ref - lp) - 1, elementwise, always >= 0.

    input:  logprobs (B, T), ref_logprobs (B, T)
    output: (B, T)

    e.g. lp [ln 0.5], ref [ln 0.25] -> 0.5 - ln 0.5 - 1 = [0.1931]
    """
    log_r = ref_logprobs - logprobs
    return torch.exp(log_r) - log_r - 1


KL_ESTIMATORS = {"k1": kl_k1, "k3": kl_k3}


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
    sequence-level ratio, see sequence_log_ratio).
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


def clip_fraction(flags, mask, importance_sampling_level="token"):
    """Share of the batch that the clip cut off: of its tokens at token level; of its
    sequences at sequence level (GSPO), as TRL counts them, since there the ratio and so
    the clip is one per sequence. Sequences with no real token are left out.

    A sequence counts by the share of its tokens flagged: 0 or 1 with one advantage per
    sequence; per-token advantages (REINFORCE++) can flag only some of its tokens.

    input:  flags (B, T) bool, mask (B, T)
    output: python float

    e.g. flags [[T, T, T, F], [F, F, F, F]], mask [[1, 1, 1, 0], [1, 0, 0, 0]]
         -> token 3/4 = 0.75; sequence mean(1, 0) = 0.5
    """
    if importance_sampling_level != "sequence":
        return masked_mean(flags.float(), mask).item()
    per_sequence = masked_mean(flags.float(), mask, dim=1)  # (B,)
    present = mask.bool().any(-1)
    return (per_sequence[present].sum() / present.sum().clamp(min=1)).item()


# Loss aggregation: (per_token_loss (B, T), mask (B, T), max_completion_length) -> scalar.
# They differ only in how tokens are weighted against each other.


def _aggregate_grpo(per_token_loss, mask, max_completion_length):
    """Mean over sequences of each sequence's token mean (original GRPO).

    Each sequence weighs the same, so tokens of long sequences weigh less.
    e.g. loss [[1, 2, 3, 4], [5, 6, 7, 8]], mask [[1, 1, 0, 0], [1, 1, 1, 1]]
         -> mean(1.5, 6.5) = 4.0
    """
    return masked_mean(per_token_loss, mask, dim=1).mean()


def _aggregate_dr_grpo(per_token_loss, mask, max_completion_length):
    """Masked sum / (B * max_completion_length) (Dr. GRPO).

    A constant denominator removes the length bias of the per-sequence mean.
    e.g. same inputs, L = 4 -> (3 + 26) / (2 * 4) = 3.625
    """
    total = torch.where(mask.bool(), per_token_loss, torch.zeros_like(per_token_loss)).sum()
    return total / (per_token_loss.shape[0] * max_completion_length)


def _aggregate_dapo(per_token_loss, mask, max_completion_length):
    """Masked mean over every token in the batch (DAPO token-level loss).

    Every token weighs the same, whatever sequence it is in.
    e.g. same inputs -> (3 + 26) / 6 = 4.8333
    """
    return masked_mean(per_token_loss, mask)


LOSS_AGGREGATORS = {
    "grpo": _aggregate_grpo,
    "dr_grpo": _aggregate_dr_grpo,
    "dapo": _aggregate_dapo,
}


def grpo_loss(
    logprobs,
    old_logprobs,
    ref_logprobs,
    advantages,
    mask,
    *,
    beta,
    epsilon_low,
    epsilon_high,
    loss_type,
    max_completion_length,
    importance_sampling_level="token",
):
    """GRPO loss: clipped surrogate + beta * k3 KL to the reference, aggregated.

    The KL term is skipped entirely when beta == 0 or ref_logprobs is None.
    importance_sampling_level "sequence" is GSPO: one ratio per sequence (the geometric
    mean of its tokens' ratios), clipped as a whole.
    old_logprobs=None means on-policy (one step per batch): it is taken as
    logprobs.detach(), so ratio == 1 but the gradient is still A * grad log pi.

    input:  logprobs (B, T) with grad, old_logprobs (B, T) or None,
            ref_logprobs (B, T) or None, advantages (B,) or (B, T), mask (B, T)
    output: (loss scalar tensor,
             info {"kl", "clip_ratio/low_mean", "clip_ratio/high_mean",
                   "clip_ratio/region_mean"} python floats over masked tokens (the
                   clip ratios over sequences at sequence level, see clip_fraction),
             per_token {"ratio": (B, T), "kl": (B, T) or None, "clipped": (B, T) bool},
             all detached; at masked positions ratio is 1, kl 0, clipped False)

    e.g. lp = old = [[ln 0.5]], ref = [[ln 0.25]], A = [0], beta 0.1
         -> loss 0.1 * 0.1931 = 0.01931, info["kl"] = 0.1931
    """
    if loss_type not in LOSS_AGGREGATORS:
        raise ValueError(
            f"unknown loss_type {loss_type!r}; allowed: {sorted(LOSS_AGGREGATORS)}"
        )
    # Padding must be inert in the backward pass too: exp(lp - old) there can
    # overflow to inf, and 0 * inf = nan would reach every weight through the
    # masked-out token. Setting old = ref = lp at padding makes ratio 1, kl 0.
    pad = ~mask.bool()
    detached = logprobs.detach()
    old_logprobs = detached if old_logprobs is None else torch.where(pad, detached, old_logprobs)
    if ref_logprobs is not None:
        ref_logprobs = torch.where(pad, detached, ref_logprobs)
    log_ratio = None
    if importance_sampling_level == "sequence":
        log_ratio = sequence_log_ratio(logprobs, old_logprobs, mask)
    per_token_loss, ratio, low, high = clipped_surrogate(
        logprobs, old_logprobs, advantages, epsilon_low, epsilon_high, log_ratio=log_ratio
    )
    # The KL is still reported when beta == 0 but a reference is given: it is free.
    kl = None if ref_logprobs is None else kl_k3(logprobs, ref_logprobs)  # (B, T)
    if kl is not None and beta != 0:
        per_token_loss = per_token_loss + beta * kl
    loss = LOSS_AGGREGATORS[loss_type](per_token_loss, mask, max_completion_length)

    region = low | high
    info = {
        "kl": 0.0 if kl is None else masked_mean(kl.detach(), mask).item(),
        "clip_ratio/low_mean": clip_fraction(low, mask, importance_sampling_level),
        "clip_ratio/high_mean": clip_fraction(high, mask, importance_sampling_level),
        "clip_ratio/region_mean": clip_fraction(region, mask, importance_sampling_level),
    }
    per_token = {
        "ratio": ratio.detach(),
        "kl": None if kl is None else kl.detach(),
        "clipped": region.detach(),
    }
    return loss, info, per_token


# ----------------------------------------------------------------------------- PPO


def ppo_policy_loss(logprobs, old_logprobs, advantages, mask, cliprange):
    """PPO's clipped policy loss with per-token advantages, a masked mean over tokens
    (as TRL's PPO trainer).

    input:  logprobs (B, T) with grad, old_logprobs (B, T), advantages (B, T), mask (B, T)
    output: (loss scalar, info {"approxkl", "clipfrac", "ratio"} floats over masked
             tokens, per_token {"ratio", "clipped"} detached)

    approxkl = 0.5 * mean((logp - old)^2), the low-variance KL(old || new) estimate.
    e.g. ratio [e^0.5] at A = +1, cliprange 0.2 -> loss -1.2, clipfrac 1, approxkl 0.125
    """
    pad = ~mask.bool()
    old_logprobs = torch.where(pad, logprobs.detach(), old_logprobs)  # ratio 1 at padding
    per_token_loss, ratio, low, high = clipped_surrogate(logprobs, old_logprobs, advantages, cliprange, cliprange)
    loss = masked_mean(per_token_loss, mask)
    clipped = low | high
    diff = (logprobs - old_logprobs).detach()
    info = {
        "approxkl": masked_mean(0.5 * diff**2, mask).item(),
        "clipfrac": masked_mean(clipped.float(), mask).item(),
        "ratio": masked_mean(ratio.detach(), mask).item(),
    }
    return loss, info, {"ratio": ratio.detach(), "clipped": clipped}


def clipped_value_loss(values, old_values, returns, mask, cliprange_value):
    """PPO's value loss: the worse of the plain and the clipped squared error, so the
    critic cannot move its prediction more than cliprange_value from the value it had
    when the batch was collected.

    loss = 0.5 * mean(max((V - R)^2, (clamp(V, V_old +- c) - R)^2))

    input:  values (B, T) with grad, old_values (B, T), returns (B, T), mask (B, T)
    output: (loss scalar, info {"clipfrac"}: fraction of tokens where the clipped error won)

    e.g. V 2.0, V_old 1.0, R 3.0, c 0.2 -> clipped V 1.2 -> max(1, 3.24) -> 0.5 * 3.24 = 1.62
    """
    # clamp(V, V_old - c, V_old + c) as TRL, not V_old + clamp(V - V_old, -c, c): inside
    # the range the latter is V plus rounding noise (V = -0.1, V_old = 0.03 gives V + 7e-9),
    # whose squared error can come out larger, so the token counted as clipped. clamp
    # returns V itself inside the range.
    clipped_values = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    plain = (values - returns) ** 2
    clipped = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(plain, clipped), mask)
    return loss, {"clipfrac": masked_mean((clipped > plain).float(), mask).item()}


# ----------------------------------------------------------------------------- DPO


def sequence_logps(logprobs, mask, average=False):
    """Sum (or mean, for IPO) of a sequence's token logprobs. (B, T) -> (B,)

    e.g. [[-1, -2, -9]], mask [[1, 1, 0]] -> sum [-3], mean [-1.5]
    """
    total = torch.where(mask.bool(), logprobs, 0.0).sum(-1)
    return total / mask.sum(-1).clamp(min=1) if average else total


# DPO's loss_type, name -> (h (B,), beta, label_smoothing) -> per-pair losses (B,); see dpo_loss.
DPO_LOSSES = {
    "sigmoid": lambda h, beta, eps: -(1 - eps) * F.logsigmoid(beta * h) - eps * F.logsigmoid(-beta * h),
    "hinge": lambda h, beta, eps: torch.relu(1 - beta * h),
    "ipo": lambda h, beta, eps: (h - 1 / (2 * beta)) ** 2,
}


def dpo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, *,
             beta, loss_type="sigmoid", label_smoothing=0.0):
    """Direct Preference Optimization losses, per pair.

    With h = (log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l)):
      sigmoid (Rafailov et al. 2023; conservative DPO with label smoothing eps):
              -(1 - eps) * log sigmoid(beta * h) - eps * log sigmoid(-beta * h)
      hinge   (SLiC): relu(1 - beta * h)
      ipo     (Azar et al. 2023): (h - 1 / (2 * beta))^2, on length-averaged logps
    Implicit rewards: beta * (log pi - log ref) of each side, detached.

    input:  four (B,) sequence logps
    output: (losses (B,), chosen_rewards (B,), rejected_rewards (B,))

    e.g. h = 0 (policy = reference), beta 0.1: sigmoid ln 2 = 0.6931, hinge 1, ipo 25
    """
    if loss_type not in DPO_LOSSES:
        raise ValueError(f"unknown DPO loss_type {loss_type!r}; allowed: {', '.join(sorted(DPO_LOSSES))}")
    h = (chosen_logps - ref_chosen_logps) - (rejected_logps - ref_rejected_logps)
    losses = DPO_LOSSES[loss_type](h, beta, label_smoothing)
    chosen_rewards = beta * (chosen_logps - ref_chosen_logps).detach()
    rejected_rewards = beta * (rejected_logps - ref_rejected_logps).detach()
    return losses, chosen_rewards, rejected_rewards
