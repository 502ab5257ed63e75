"""Batched sampling with a KV cache.

Our own decoding loop rather than `model.generate`: it returns each sampled token's
logprob under the sampling policy as it goes (no second pass), stops as soon as every
row has emitted EOS, and has far less per-token overhead on small models.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.losses import completion_mask


@dataclass
class Rollout:
    """A batch of prompts and their sampled completions.

    Prompts are left-padded and completions right-padded, so completion column t of
    every row is generation step t.
    """

    prompt_ids: torch.Tensor  # (B, P) long, left-padded
    prompt_mask: torch.Tensor  # (B, P) long
    completion_ids: torch.Tensor  # (B, T) long, pad after EOS
    completion_mask: torch.Tensor  # (B, T) float: 1 up to and including the first EOS
    sampling_logprobs: torch.Tensor  # (B, T) float32: log p(token) under the sampling policy
    truncated: torch.Tensor  # (B,) bool: no EOS within max_new_tokens

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(-1)


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


def positions_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids that ignore left padding. (B, L) -> (B, L)

    input:  [[0, 0, 1, 1], [1, 1, 1, 1]]
    output: [[0, 0, 0, 1], [0, 1, 2, 3]]
    """
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


@torch.no_grad()
def sample(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_token_ids: list[int],
    pad_token_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> Rollout:
    """Sample up to `max_new_tokens` tokens for each (left-padded) prompt."""
    batch = prompt_ids.shape[0]
    device = prompt_ids.device
    eos = torch.tensor(eos_token_ids, device=device)
    attention = prompt_mask.long()
    positions = positions_from_mask(attention)
    out = model(input_ids=prompt_ids, attention_mask=attention, position_ids=positions,
                use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    next_pos = positions[:, -1:] + 1  # (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    tokens, logprobs = [], []
    for _ in range(max_new_tokens):
        logits = out.logits[:, -1, :].float() / (1.0 if greedy else temperature)  # (B, V)
        logp = torch.log_softmax(logits, dim=-1)
        if greedy:
            token = logits.argmax(-1)
        else:
            probs = filter_logits(logits, top_k, top_p).softmax(-1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        token = token.masked_fill(finished, pad_token_id)
        tokens.append(token)
        logprobs.append(logp.gather(-1, token[:, None]).squeeze(-1))
        finished |= torch.isin(token, eos)
        if finished.all():
            break
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=-1)
        out = model(input_ids=token[:, None], attention_mask=attention, position_ids=next_pos,
                    past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        next_pos = next_pos + 1
    completion_ids = torch.stack(tokens, dim=1)  # (B, T)
    mask = completion_mask(completion_ids, eos_token_ids).float()
    truncated = ~torch.isin(completion_ids, eos).any(-1)
    return Rollout(prompt_ids, attention[:, : prompt_ids.shape[1]], completion_ids, mask,
                   torch.stack(logprobs, dim=1) * mask, truncated)
