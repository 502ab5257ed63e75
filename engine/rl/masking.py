"""Masked reductions every loss module shares (pure, torch)."""

import torch


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
