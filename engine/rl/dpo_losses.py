"""DPO's losses (the DPO_LOSSES registry, DPO's `loss_type`, engine.rl.catalog), pure.

Contract: (h (B,), *, beta, label_smoothing if declared) -> per-pair losses (B,), where
h = (log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l)) on each side's summed
logprobs, or token-mean ones where the entry declares `length_averaged` (IPO).
"""

import torch
import torch.nn.functional as F


def sigmoid_loss(h, *, beta, label_smoothing=0.0):
    """DPO (Rafailov et al. 2023); conservative DPO with label smoothing eps:
    -(1 - eps) * log sigmoid(beta * h) - eps * log sigmoid(-beta * h).

    e.g. h 0 -> ln 2 = 0.6931; h 2, beta 0.5, eps 0 -> log(1 + e^-1) = 0.31326
    """
    return -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)


def hinge_loss(h, *, beta):
    """SLiC: relu(1 - beta * h).  e.g. h 1, beta 0.5 -> 0.5; h 2 -> 0"""
    return torch.relu(1 - beta * h)


def ipo_loss(h, *, beta):
    """IPO (Azar et al. 2023): (h - 1 / (2 * beta))^2.  e.g. beta 0.5, h 3 -> 4"""
    return (h - 1 / (2 * beta)) ** 2


def sequence_logps(logprobs, mask, average=False):
    """Sum (or mean, for a length-averaged loss such as IPO) of a sequence's token
    logprobs. (B, T) -> (B,)

    e.g. [[-1, -2, -9]], mask [[1, 1, 0]] -> sum [-3], mean [-1.5]
    """
    total = torch.where(mask.bool(), logprobs, 0.0).sum(-1)
    return total / mask.sum(-1).clamp(min=1) if average else total


def dpo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, *,
             beta, loss_type="sigmoid", **options):
    """Direct Preference Optimization losses, per pair, by the registered `loss_type`.

    With h = (log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l)):
      sigmoid: -(1 - eps) * log sigmoid(beta * h) - eps * log sigmoid(-beta * h)
      hinge:   relu(1 - beta * h)
      ipo:     (h - 1 / (2 * beta))^2, on length-averaged logps
    Implicit rewards: beta * (log pi - log ref) of each side, detached. `options`: what
    the loss type may ask for by name besides beta (label_smoothing; in a run, every field
    of the algorithm's section).

    input:  four (B,) sequence logps
    output: (losses (B,), chosen_rewards (B,), rejected_rewards (B,))

    e.g. h = 0 (policy = reference), beta 0.1: sigmoid ln 2 = 0.6931, hinge 1, ipo 25
    """
    from engine.rl.catalog import DPO_LOSSES

    if loss_type not in DPO_LOSSES:
        raise ValueError(f"unknown DPO loss_type {loss_type!r}; allowed: {', '.join(DPO_LOSSES.names())}")
    h = (chosen_logps - ref_chosen_logps) - (rejected_logps - ref_rejected_logps)
    losses = DPO_LOSSES.entry(loss_type).call(h, beta=beta, **options)
    chosen_rewards = beta * (chosen_logps - ref_chosen_logps).detach()
    rejected_rewards = beta * (rejected_logps - ref_rejected_logps).detach()
    return losses, chosen_rewards, rejected_rewards


def length_averaged(loss_type):
    """Whether a DPO loss type works on length-averaged logprobs (its declaration).

    e.g. "ipo" -> True, "sigmoid" -> False
    """
    from engine.rl.catalog import DPO_LOSSES

    return DPO_LOSSES.declares(loss_type).length_averaged
