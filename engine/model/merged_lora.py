"""Sampling with the LoRA adapter merged into its base weights.

With peft, every adapted linear layer runs four more small ops per call (x A^T, B, the
scaling, the sum); while decoding, one token at a time, that is a large share of the pass
(16 % of sampling on the built-in model, 13 % on the 8M-parameter bench model, CPU).
Sampling needs no gradients, so for its duration each adapted layer is swapped for a copy
of its base layer whose weight is W + scaling * B A (what vLLM serves and peft's merge
computes), and swapped back after.

The base weights are never written: the merged weights live in tensors of their own, so
nothing drifts (an in-place merge and unmerge would round differently each step). With
`keep=True` those tensors, and the copies of the base layers holding them, are kept between
rollouts (one per LoRA layer, for its adapter, weight shape, dtype and device: `_KEPT`,
which lets them go with the layer) and written in place each time, W then + s·BA, with the
current LoRA weights: a decode step recorded as a CUDA graph (engine/model/static_decode.py,
`model.decode: captured`) reads the same storage every rollout, so it is replayed, not
recorded again. Kept copies stay allocated through the update, so only a captured decode
keeps them (the policy asks for it then); otherwise they go when sampling ends, as the
update's peak memory wants. What the copies cost is bounded: layers are merged only while
their copies total at most MERGE_LIMIT_BYTES (a layer left out drops its kept copy); the
others sample through peft as before. Layers that cannot be merged this way (quantised or sharded
weights, DoRA and other variants, a LoRA bias, several adapters) always sample through peft.
"""

from __future__ import annotations

import copy
import weakref
from contextlib import contextmanager
from dataclasses import dataclass

import torch

__all__ = ["MERGE_LIMIT_BYTES", "merged_lora"]

MERGE_LIMIT_BYTES = 1 << 30  # 1 GiB of merged copies at most, kept between rollouts


@dataclass
class _Kept:
    """A LoRA layer's merged copy, kept between rollouts: the copy of its base layer and
    what it was made for (adapter, weight shape, dtype, device)."""

    key: tuple
    stand_in: torch.nn.Module


# LoRA layer -> its kept merged copy; an entry goes with its layer (the copy does not refer to it).
_KEPT: "weakref.WeakKeyDictionary[torch.nn.Module, _Kept]" = weakref.WeakKeyDictionary()


def _mergeable(module) -> str | None:
    """The adapter of a peft LoRA layer that can be merged into a plain copy of its base
    layer, else None."""
    base = getattr(module, "base_layer", None)
    lora_a = getattr(module, "lora_A", None)
    adapters = getattr(module, "active_adapters", None)
    if base is None or lora_a is None or not adapters or len(adapters) != 1 or not hasattr(module, "get_delta_weight"):
        return None
    adapter = adapters[0]
    if adapter not in lora_a or getattr(module, "disable_adapters", False) or getattr(module, "merged", False):
        return None
    if adapter in getattr(module, "lora_variant", {}) or getattr(module, "lora_bias", {}).get(adapter, False):
        return None
    weight = getattr(base, "weight", None)
    # exactly a Tensor: a quantised (Params4bit, Int8Params) or sharded (DTensor) weight is a subclass
    if weight is None or type(weight.data) is not torch.Tensor or not weight.dtype.is_floating_point:
        return None
    if type(base).__name__ not in ("Linear", "Conv1D"):  # layers whose forward is x W^T + b (Conv1D: x W + b)
        return None
    return adapter


def _current(kept: _Kept | None, key: tuple, base) -> bool:
    """Whether a kept copy still stands for `base` as it is: made for `key`, and sharing
    every other parameter of the base layer (none replaced since; its buffers are shared
    as they are, the copy holding the base's own dict of them)."""
    if kept is None or kept.key != key:
        return False
    own, theirs = kept.stand_in._parameters, base._parameters
    return own.keys() == theirs.keys() and all(own[n] is p for n, p in theirs.items() if n != "weight")


def _merged_copy(module, adapter: str):
    """A copy of `module`'s base layer whose weight is the merged one, W + s·BA with the
    LoRA weights as they are now (its other parameters and buffers shared). Kept between
    calls (`_KEPT`): the same copy and weight tensor each time, written in place."""
    base = module.base_layer
    weight = base.weight
    key = (adapter, tuple(weight.shape), weight.dtype, weight.device)
    kept = _KEPT.get(module)
    if not _current(kept, key, base):
        stand_in = copy.copy(base)
        stand_in._parameters = dict(base._parameters)
        stand_in._parameters["weight"] = torch.nn.Parameter(torch.empty_like(weight.detach()), requires_grad=False)
        kept = _KEPT[module] = _Kept(key, stand_in)
    merged = kept.stand_in.weight
    merged.copy_(weight.detach())
    merged.add_(module.get_delta_weight(adapter).detach().to(merged.dtype))  # added in the weight's dtype, as W + ΔW
    return kept.stand_in


@contextmanager
def merged_lora(model, limit_bytes: int = MERGE_LIMIT_BYTES, keep: bool = False):
    """Inside, `model`'s mergeable LoRA layers are plain layers with merged weights (no
    gradients flow); on exit the adapter's layers are back, untouched. With `keep`, the
    merged copies are kept for the next call (the same tensors, their values then those of
    the LoRA weights of that call); without, they are let go on exit. A layer not merged
    this time lets its kept copy go."""
    swapped = []
    budget = limit_bytes
    try:
        with torch.no_grad():
            for name, module in list(model.named_modules()):
                adapter = _mergeable(module)
                if adapter is None:
                    _KEPT.pop(module, None)
                    continue
                size = module.base_layer.weight.numel() * module.base_layer.weight.element_size()
                if size > budget:
                    _KEPT.pop(module, None)
                    continue
                budget -= size
                parent_name, _, child = name.rpartition(".")
                parent = model.get_submodule(parent_name)
                setattr(parent, child, _merged_copy(module, adapter))
                swapped.append((parent, child, module))
        yield len(swapped)
    finally:
        for parent, child, module in reversed(swapped):
            setattr(parent, child, module)
            if not keep:
                _KEPT.pop(module, None)
