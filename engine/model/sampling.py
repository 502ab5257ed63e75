"""The pieces of decoding both decode paths share (engine/model/rollout.py's plain loop and
engine/model/static_decode.py's fixed-shape step): how a token is drawn from the logits,
position ids that ignore left padding, and how a model takes and returns its KV cache.

A token is drawn from one uniform number a row and step (`draw_tokens`, by inverse CDF),
and every decode step draws one for every row of the batch, finished or not
(`step_uniforms`): so both paths use the same numbers for the same rows, and under one
seed sample the same tokens.
"""

from __future__ import annotations

import inspect

import torch


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Set logits outside the top-k / nucleus (top-p) set to -inf. (B, V) -> (B, V).

    input:  logits log([0.5, 0.3, 0.2]), top_p=0.7
    output: [log 0.5, log 0.3, -inf]   (0.5 < 0.7, 0.5 + 0.3 >= 0.7: the smallest set kept)
    """
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token when the tokens before it already reach top_p
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token a row from `probs` (B, V), each from its row's uniform number in [0, 1)
    (B,): the first token whose cumulative probability exceeds u times the row's total.

    input:  probs [[0.5, 0.0, 0.3, 0.2]], uniforms [0.6]
    output: [2]   (cumulative 0.5, 0.5, 0.8, 1.0: the first above 0.6)

    One random number a row, where torch.multinomial draws one a row and vocabulary
    entry (152k of them at Qwen's vocabulary: 0.6 s a step for 64 rows on a CPU thread,
    more than the LM head); no validation of `probs`, hence no host sync. A token of
    probability 0 is never picked: its cumulative sum equals its left neighbour's (a
    rounding that pushes u times the total past the last sum falls back to the argmax).
    """
    cum = probs.cumsum(-1)
    target = (uniforms.to(cum.dtype) * cum[:, -1])[:, None]
    index = torch.searchsorted(cum, target, right=True).clamp(max=probs.shape[-1] - 1)
    picked = probs.gather(-1, index) > 0
    return torch.where(picked, index, probs.argmax(-1, keepdim=True)).squeeze(-1)


def draw_tokens(logits: torch.Tensor, uniforms: torch.Tensor, *, temperature: float, top_k: int, top_p: float,
                greedy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The next token of each row and its logprob under the sampling policy (the
    temperature-scaled distribution, before top-k/top-p): ((B,) long, (B,) float32).
    `uniforms` (B,) in [0, 1) choose the tokens (unused when greedy). Both decode paths
    call this, eagerly or inside a captured step: no host sync."""
    scaled = logits.float() / (1.0 if greedy else temperature)  # (B, V)
    logp = torch.log_softmax(scaled, dim=-1)
    if greedy:
        token = scaled.argmax(-1)
    elif (top_k and top_k < scaled.shape[-1]) or top_p < 1.0:
        token = inverse_cdf(filter_logits(scaled, top_k, top_p).softmax(-1), uniforms)
    else:  # nothing filtered: the probabilities are the logprobs' exp (a pass over the vocabulary fewer)
        token = inverse_cdf(logp.exp(), uniforms)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)


def positions_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids that ignore left padding. (B, L) -> (B, L)

    input:  [[0, 0, 1, 1], [1, 1, 1, 1]]
    output: [[0, 0, 0, 1], [0, 1, 2, 3]]
    """
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def cache_keyword(model) -> str:
    """The keyword a model's forward takes its KV cache by: `cache` in transformers 5.2x
    (where `past_key_values` warns and goes in 5.40), `past_key_values` in older versions
    and in remote code written for them. Read from the signature, not a version number."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def returned_cache(out):
    """The KV cache a forward pass returned: `out.cache` where the output has that field,
    else `out.past_key_values` (older transformers; reading it on newer ones logs a warning)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def step_uniforms(batch: int, greedy: bool, generator: torch.Generator | None, device) -> torch.Tensor:
    """A decode step's random numbers: one a row in [0, 1) (none drawn when greedy)."""
    if greedy:
        return torch.zeros(batch, device=device)
    return torch.rand(batch, generator=generator, device=device)
