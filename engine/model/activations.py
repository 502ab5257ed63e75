"""Fused equivalents of activations that transformers writes as chains of small ops.

GPT-2's `gelu_new` (the built-in model's and the bench models' activation) is written in
Python as eight elementwise ops over the MLP's widest tensor, each a pass over memory,
forward and backward; transformers ships the same formula as one fused kernel,
`gelu_pytorch_tanh`, and documents the two as equivalent up to rounding. Swapping one for
the other at load time is what Liger-style kernel patching does in TRL, for one op.
tests/test_fast_paths.py checks that a GPT-2's logits agree to 1e-5 after the swap.
"""

from __future__ import annotations

from torch import nn

# transformers' activation names: the slow module's name -> the fused one's
FUSED = {"gelu_new": "gelu_pytorch_tanh"}


def fuse_activations(model: nn.Module) -> int:
    """Replace, in place, every activation module that has a fused equivalent. Returns
    how many were replaced."""
    from transformers.activations import ACT2CLS

    swaps = {ACT2CLS[slow]: ACT2CLS[fast] for slow, fast in FUSED.items()
             if isinstance(ACT2CLS.get(slow), type) and isinstance(ACT2CLS.get(fast), type)}
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            fast = swaps.get(type(child))  # exactly that class: a subclass may compute something else
            if fast is not None:
                setattr(parent, name, fast())
                replaced += 1
    return replaced
