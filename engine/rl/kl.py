"""Per-token estimators of KL(pi || ref), for tokens sampled from pi (the KL_ESTIMATORS
registry in engine.rl.catalog names them: PPO's `kl_estimator`; GRPO's penalty is k3).

Source: John Schulman, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html .
With r = ref(x) / pi(x):
  k1 = -log r               unbiased, high variance, can be negative
  k3 = (r - 1) - log r      unbiased, lower variance, always >= 0
(In GRPO the samples come from pi_old, not pi, so both are approximations.)

Contract: (logprobs (B, T), ref_logprobs (B, T)) -> (B, T).
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
