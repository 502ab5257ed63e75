"""Per-token estimators of KL(pi || ref), for tokens sampled from pi (the KL_ESTIMATORS
registry in engine.rl.catalog names them: PPO's `kl_estimator`; GRPO's penalty is k3).

Source: John Schulman, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html .
With r = ref(x) / pi(x):
  k1 = -log r               unbiased, high variance, can be negative
  k3 = (r - 1) - log r      unbiased, lower variance, always >= 0
(In GRPO the samples come from pi_old, not pi, so both are approximations.)

Contract: (logprobs (B, T), ref_logprobs (B, T)) -> (B, T).
(:func:`bias_corrected_k3`, GRPO's `use_bias_correction_kl`, also takes the log ratio to
the sampling policy: not an estimator of the registry, a correction of GRPO's term.)
"""

import torch


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


def bias_corrected_k3(logprobs, ref_logprobs, log_ratio):
    """k3 times the importance ratio pi / pi_old, the ratio kept in the graph (GRPO's
    ``use_bias_correction_kl``, TRL's; DeepSeek-V3.2): the samples come from pi_old, so
    weighting by the ratio makes the term's gradient the unbiased gradient of
    KL(pi || ref), E[(log pi - log ref) grad log pi], instead of k3's own biased one.

    On-policy (log_ratio = logprobs - sg(logprobs): value 1, gradient 1) the value is k3
    but the gradient per token is dk3/dlp + k3 = (1 - ref/pi) + (ref/pi - log(ref/pi) - 1)
    = log pi - log ref: the correction changes the update even where every ratio is 1.

    input:  logprobs (B, T) with grad, ref_logprobs (B, T), log_ratio (B, T) or (B, 1)
            (the importance-sampling level's; (B, 1) broadcasts one weight per sequence)
    output: (B, T)

    e.g. lp [ln 0.5], ref [ln 0.25], on-policy -> value [0.1931] (k3),
         d/d lp = [ln 2] = [0.6931] (plain k3's: 1 - 0.5 = 0.5); log ratio [ln 2] -> [0.3863]
    """
    return kl_k3(logprobs, ref_logprobs) * torch.exp(log_ratio)
