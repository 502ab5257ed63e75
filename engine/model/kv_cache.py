"""A KV cache written in place while decoding.

transformers' DynamicCache grows each layer by `torch.cat` at every new token, so step t
copies the whole cache so far: a completion of T tokens moves O(T^2) memory (with 16
tokens, 4 % of the sampling time on the 8M-parameter bench model on a CPU; the share grows
with the length). The sampler knows how many tokens it
may still add, so after the prompt pass each layer's keys and values move into one buffer
with room for them, and each decode step writes its column in place.

Sampling only (no autograd through in-place writes). A cache this module does not know
(an older transformers without `cache.layers`, sliding-window or linear-attention layers)
is left as it is: decoding works the same, with transformers' own growth.

`filled_static_cache` is the other decode path's cache (engine/model/static_decode.py):
transformers' StaticCache, a fixed (rows, heads, length, dim) buffer a layer whose write
position is a tensor, so a captured decode step replays without a shape or a Python
number changing. It is filled from a prompt pass's cache, each distinct prompt's keys
and values copied to the rows that share it.
"""

from __future__ import annotations

import torch

try:  # transformers >= 4.56: a cache is a list of layers
    from transformers.cache_utils import DynamicLayer
except ImportError:  # pragma: no cover - older transformers: caches stay as they are
    DynamicLayer = None
try:
    from transformers.cache_utils import StaticCache, StaticLayer
except ImportError:  # pragma: no cover - older transformers: no static decode path
    StaticCache = StaticLayer = None


def _with_room(states: torch.Tensor, room: int) -> torch.Tensor:
    """A (B, H, n + room, D) buffer whose first n columns are `states` (B, H, n, D)."""
    B, H, n, D = states.shape
    buffer = states.new_empty(B, H, n + room, D)
    buffer[:, :, :n] = states
    return buffer


if DynamicLayer is not None:

    class PreallocatedLayer(DynamicLayer):
        """One attention layer's keys and values in buffers with room for `room` more
        tokens; `keys` and `values` are views of the filled columns, as DynamicLayer's are
        whole tensors, so everything that reads a layer (mask sizes, sequence length)
        reads it unchanged. Past the room, the buffers double. Every method that
        changes a layer is overridden to act on the buffers."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int):
            super().__init__()
            self.device, self.is_initialized = keys.device, True
            self.length = keys.shape[-2]
            self._keys, self._values = _with_room(keys, room), _with_room(values, room)
            self._view()

        def _view(self) -> None:
            self.keys = self._keys[:, :, : self.length]
            self.values = self._values[:, :, : self.length]

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            new = key_states.shape[-2]
            if self.length + new > self._keys.shape[-2]:
                room = max(new, self.length)
                self._keys, self._values = _with_room(self.keys, room), _with_room(self.values, room)
            self._keys[:, :, self.length: self.length + new] = key_states
            self._values[:, :, self.length: self.length + new] = value_states
            self.length += new
            self._view()
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self._view()

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            self.batch_select_indices(beam_idx.to(self._keys.device))

        def reset(self) -> None:
            self.length = 0
            self._view()

        def batch_repeat_interleave(self, repeats: int) -> None:
            self._keys = self._keys.repeat_interleave(repeats, dim=0)
            self._values = self._values.repeat_interleave(repeats, dim=0)
            self._view()

        def offload(self) -> None:
            self._keys, self._values = self._keys.to("cpu", non_blocking=True), self._values.to("cpu", non_blocking=True)
            self._view()

        def prefetch(self) -> None:
            if self._keys.device != self.device:
                self._keys = self._keys.to(self.device, non_blocking=True)
                self._values = self._values.to(self.device, non_blocking=True)
                self._view()

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove < 0:  # DynamicLayer's convention: a negative count
                self.length = max(0, self.length + tokens_to_remove)
                self._view()
            else:
                super().crop(tokens_to_remove)


def preallocate(cache, room: int):
    """`cache` (after a prompt pass) with each plain attention layer moved into a buffer
    with room for `room` more tokens. Returns the cache (changed in place when it could be)."""
    layers = getattr(cache, "layers", None)
    if DynamicLayer is None or not isinstance(layers, list) or room <= 0:
        return cache
    for index, layer in enumerate(layers):
        # exactly DynamicLayer: its subclasses (sliding window, quantized...) keep their own rules
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys is not None and layer.keys.dim() == 4:
            layers[index] = PreallocatedLayer(layer.keys, layer.values, room)
    return cache


def filled_static_cache(config, prompt_cache, rows: torch.Tensor, length: int, reuse=None):
    """A StaticCache of `length` columns a layer holding, for each row, the prompt's keys
    and values of `prompt_cache` row `rows[i]` (a DynamicCache of the distinct prompts;
    `rows` (b,) long maps each row to its prompt). `reuse`: a cache of the same shape from
    an earlier call, refilled in place (its buffers keep their addresses, which a captured
    step was recorded with). None when a layer is not a plain attention layer (sliding
    window, linear attention...) or transformers has no StaticCache: the caller decodes plainly."""
    layers = getattr(prompt_cache, "layers", None)
    if StaticCache is None or not isinstance(layers, list):
        return None
    if not all(type(layer) is DynamicLayer and layer.keys is not None and layer.keys.dim() == 4 for layer in layers):
        return None
    cache = reuse if reuse is not None else StaticCache(config=config, max_cache_len=length)
    if len(cache.layers) != len(layers) or not all(type(layer) is StaticLayer for layer in cache.layers):
        return None
    for static, layer in zip(cache.layers, layers):
        if static.is_initialized:
            static.cumulative_length.zero_()  # columns past the prompt are stale, never attended (causal mask)
        static.update(layer.keys[rows], layer.values[rows])  # the first update allocates the buffers
    return cache
