"""The policy-gradient losses (GRPO, GSPO, PPO) as pure tensor maths: `grpo_loss`, which
composes the registered variants a preset names (engine.rl.catalog): an importance-sampling
level's log ratio, a surrogate, the k3 KL to the reference, an aggregation; PPO's clipped
policy and value losses. The variants live in their own modules (surrogates, aggregation,
importance, kl); the logprob, entropy and mask helpers in engine/model/tensors.py.

Shapes used throughout:
    B = number of completions in the batch
    T = completion length (padded)
    V = vocabulary size

Every function here is pure: no module state, no optimiser, no model.
"""

import torch

from engine.rl.catalog import AGGREGATIONS, IMPORTANCE_LEVELS, POLICY_LOSSES, SURROGATES, policy_loss_parts
from engine.rl.user_code import resolve
from engine.model import token_logits
from engine.rl.importance import clip_fraction_tensor
from engine.rl.kl import bias_corrected_k3, kl_k3
from engine.rl.masking import masked_mean
from engine.rl.surrogates import clipped_surrogate


def info_number(value: torch.Tensor):
    """A loss metric as the update reads it: a python float, or, under the lean update on
    an accelerator, the 0-dim tensor itself, so that the micro-batch loop waits for no
    device (engine/algorithms/step.py reads a part's numbers in one go). On the CPU a read
    costs nothing and the float is kept."""
    if token_logits.LEAN_UPDATE and value.device.type != "cpu":
        return value.detach()
    return value.item()


def grpo_loss(
    logprobs,
    old_logprobs,
    ref_logprobs,
    advantages,
    mask,
    *,
    beta,
    loss_type,
    importance_sampling_level="token",
    loss_aggregation=None,
    base_dir=None,
    use_bias_correction_kl=False,
    **options,
):
    """GRPO loss: the loss type's surrogate + beta * k3 KL to the reference, aggregated.

    `loss_type` names a surrogate and an aggregation (POLICY_LOSSES: grpo, dr_grpo, dapo,
    cispo, sapo) or is a user's surrogate `FILE.py:FUNCTION` (relative to `base_dir`); a
    `loss_aggregation` replaces the loss type's own. The importance-sampling level gives
    the log ratio ("sequence" is GSPO: one ratio per sequence, the geometric mean of its
    tokens' ratios, clipped as a whole) and how the surrogate's flags are counted.
    The KL term is skipped entirely when beta == 0 or ref_logprobs is None;
    `use_bias_correction_kl` multiplies it by the importance ratio, kept in the graph
    (engine.rl.kl.bias_corrected_k3), and info["kl"] is then the corrected term's mean, as
    TRL reports it. `options`: what the surrogate and the aggregation may ask for by
    name, each taking those it names (engine.rl.registry.Entry.call): epsilon_low and
    epsilon_high, max_completion_length, and in a run every field of GRPO's preset section
    (engine.rl.catalog.surrogate_options), so a surrogate's new option is a keyword of its
    own and a field of the section, and nothing between them lists it.
    old_logprobs=None means on-policy (one step per batch): it is taken as
    logprobs.detach(), so ratio == 1 but the gradient is still A * grad log pi.

    input:  logprobs (B, T) with grad, old_logprobs (B, T) or None,
            ref_logprobs (B, T) or None, advantages (B,) or (B, T), mask (B, T)
    output: (loss scalar tensor,
             info {"kl", and each metric the surrogate declares: for the clipped one
                   "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"}
                   python floats over masked tokens (the clip ratios over sequences at
                   sequence level, see clip_fraction; under the lean update on an
                   accelerator, 0-dim tensors: info_number),
             per_token {"ratio": (B, T), "kl": (B, T) or None, "clipped": (B, T) bool},
             all detached; at masked positions ratio is 1, kl 0, clipped False)

    e.g. lp = old = [[ln 0.5]], ref = [[ln 0.25]], A = [0], beta 0.1
         -> loss 0.1 * 0.1931 = 0.01931, info["kl"] = 0.1931
    """
    if loss_type not in POLICY_LOSSES and POLICY_LOSSES.problem(loss_type):
        raise ValueError(f"unknown loss_type {loss_type!r}; allowed: {sorted(POLICY_LOSSES.names())}")
    surrogate_name, aggregation_name = policy_loss_parts(loss_type, loss_aggregation)
    surrogate = resolve(SURROGATES, surrogate_name, base_dir)
    # Padding must be inert in the backward pass too: exp(lp - old) there can
    # overflow to inf, and 0 * inf = nan would reach every weight through the
    # masked-out token. Setting old = ref = lp at padding makes ratio 1, kl 0.
    pad = ~mask.bool()
    detached = logprobs.detach()
    old_logprobs = detached if old_logprobs is None else torch.where(pad, detached, old_logprobs)
    if ref_logprobs is not None:
        ref_logprobs = torch.where(pad, detached, ref_logprobs)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # (B, 1), broadcasts over T
    log_ratio = IMPORTANCE_LEVELS.entry(importance_sampling_level).call(logprobs, old_logprobs, mask)
    per_token_loss, ratio, flags = surrogate.call(logprobs, old_logprobs, advantages, mask, log_ratio=log_ratio,
                                                  **options)
    # The KL is still reported when beta == 0 but a reference is given: it is free.
    kl = None
    if ref_logprobs is not None:  # (B, T)
        kl = (bias_corrected_k3(logprobs, ref_logprobs, log_ratio) if use_bias_correction_kl
              else kl_k3(logprobs, ref_logprobs))
    if kl is not None and beta != 0:
        per_token_loss = per_token_loss + beta * kl
    loss = AGGREGATIONS.entry(aggregation_name).call(per_token_loss, mask, **options)

    declared = surrogate.declares or SURROGATES.file_declares
    reported = tuple(flags) if declared.metrics is None else declared.metrics  # None: every flag (a user's)
    missing = [name for name in reported if name not in flags]
    if missing:
        raise ValueError(f"surrogate {surrogate.name!r} declares metric {', '.join(missing)} but returned no such "
                         f"flag; it returned: {', '.join(flags) or 'none'}")
    info = {"kl": 0.0 if kl is None else info_number(masked_mean(kl.detach(), mask))}
    for name in reported:
        info[name] = info_number(clip_fraction_tensor(flags[name], mask, importance_sampling_level))
    marked = flags.get(declared.inspector_flag) if declared.inspector_flag else None
    marked = torch.zeros_like(mask, dtype=torch.bool) if marked is None else marked
    per_token = {
        "ratio": ratio.detach(),
        "kl": None if kl is None else kl.detach(),
        "clipped": marked.detach(),
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
