"""KTO's losses (the KTO_LOSSES registry, KTO's `loss_type`, engine.rl.catalog), pure.

KTO (Ethayarajh et al. 2024) trains on unpaired rows: a completion and whether it is
desirable. Each row's log ratio is z = log pi(y|x) - log ref(y|x) (summed over its tokens)
and its implicit reward beta * z. The "kto" loss compares z with a reference point, the
KL estimate `kl` (`kl_reference_point`: policy minus reference logps of mismatched
prompt-completion pairs, as TRL 1.16 builds them, `mismatched_order`).

Contract of a registered loss: (logratios (B,), desirable (B,) bool, kl 0-dim, *, beta)
-> per-row losses (B,), unweighted (`kto_loss` applies desirable_weight and
undesirable_weight). Its declaration (catalog.KTOLoss) says whether it reads `kl`.
"""

import torch


def kto_row_losses(logratios, desirable, kl, *, beta):
    """KTO (Eq. 7 of the paper, TRL's "kto"): 1 - sigmoid(beta * (z - kl)) for a desirable
    row, 1 - sigmoid(beta * (kl - z)) for an undesirable one.

    e.g. beta 0.1, z [2, -1] desirable [True, False], kl 0.5:
         1 - sigmoid(0.15) = 0.46257, 1 - sigmoid(0.15) = 0.46257
    """
    return torch.where(desirable, 1 - torch.sigmoid(beta * (logratios - kl)), 1 - torch.sigmoid(beta * (kl - logratios)))


def apo_zero_unpaired_row_losses(logratios, desirable, kl, *, beta):
    """APO-zero, unpaired (D'Oosterlinck et al. 2024, TRL's "apo_zero_unpaired"): no
    reference point; 1 - sigmoid(beta * z) desirable (push the likelihood up), sigmoid(beta * z)
    undesirable (push it down). `kl` is not read.

    e.g. beta 0.1, z [2, -1] desirable [True, False]:
         1 - sigmoid(0.2) = 0.45017, sigmoid(-0.1) = 0.47502
    """
    return torch.where(desirable, 1 - torch.sigmoid(beta * logratios), torch.sigmoid(beta * logratios))


def kto_loss(policy_logps, ref_logps, desirable, kl, *, beta, desirable_weight=1.0, undesirable_weight=1.0,
             loss_type="kto", **options):
    """KTO's per-row losses by the registered `loss_type`, weighted, and the rows'
    implicit rewards.

    input:  policy_logps, ref_logps (B,) sequence logps (sums over the completion's
            tokens); desirable (B,) bool (the rows' labels); kl: the reference point, a
            0-dim tensor (kl_reference_point; read by "kto" only)
    output: (losses (B,): desirable_weight x the row's loss where desirable, else
            undesirable_weight x it; rewards (B,) = beta * (policy - ref), detached)

    The batch's loss is losses.mean() (TRL: nanmean over the concatenated rows).
    `options`: what the loss type may ask for by name besides beta (in a run, every field
    of the algorithm's section).

    e.g. beta 0.1, z = policy - ref = [2, -1], desirable [True, False], kl 0.5,
         desirable_weight 1, undesirable_weight 2 ("kto"): [0.46257, 0.92513], rewards [0.2, -0.1]
    """
    from engine.rl.catalog import KTO_LOSSES

    if loss_type not in KTO_LOSSES:
        raise ValueError(f"unknown KTO loss_type {loss_type!r}; allowed: {', '.join(KTO_LOSSES.names())}")
    logratios = policy_logps - ref_logps
    row_losses = KTO_LOSSES.entry(loss_type).call(logratios, desirable, kl, beta=beta, **options)
    weights = torch.where(desirable, torch.as_tensor(desirable_weight, dtype=row_losses.dtype, device=row_losses.device),
                          torch.as_tensor(undesirable_weight, dtype=row_losses.dtype, device=row_losses.device))
    return weights * row_losses, beta * logratios.detach()


def mismatched_order(rows: int) -> list[int]:
    """Which row's completion each row's KL pair takes: the batch's completions rotated
    by one, as TRL 1.16 builds its KL completions (`add_kl_completion_ids`):
    (x_1, y_1), ..., (x_n, y_n) -> (x_1, y_n), (x_2, y_1), ..., (x_n, y_{n-1}); row i pairs
    prompt i with the completion of row i - 1 (row 0 with the last row's). The mismatched
    completions are the batch's own, paired with other prompts.

    e.g. 4 rows -> [3, 0, 1, 2]; 1 row -> [0] (no mismatched pair: KTO needs 2 rows a step)
    """
    return [(i - 1) % rows for i in range(rows)]


def kl_reference_point(policy_kl_logps, ref_kl_logps):
    """KTO's reference point: the mean over the batch's mismatched pairs of policy minus
    reference sequence logps, detached (no gradient flows through it, as TRL) and clamped
    at 0 (a KL cannot be negative; the estimate can). With several processes the logps
    are every process's rows (combined before), so the mean is over all of them, as TRL's
    gather of the processes' means.

    e.g. policy [-3, -5], reference [-4, -4] -> mean(1, -1) = 0 -> 0;
         policy [-3, -6], reference [-4, -4] -> mean(1, -2) = -0.5 -> clamped to 0;
         policy [-3, -3], reference [-4, -4] -> 1
    """
    return (policy_kl_logps - ref_kl_logps).mean().detach().clamp(min=0)
