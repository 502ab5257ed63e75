"""Batched sampling with a KV cache.

Our own decoding loop rather than `model.generate`: it returns each sampled token's
logprob under the sampling policy as it goes (no second pass), encodes each distinct
prompt of a GRPO group once, and drops finished rows from the batch, so a step costs
what its completions need rather than what the longest one needs.

That loop is the `plain` decode path. engine/model/static_decode.py is the other: a
fixed-shape step over a static KV cache that CUDA graphs can capture. Both draw a token
the same way (`draw_tokens`: one uniform number a row and step, drawn for every row of
the batch, finished or not), so under one seed they sample the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from engine.model import static_decode
from engine.model.kv_cache import preallocate
from engine.model.sampling import (
    cache_keyword, draw_tokens, filter_logits, inverse_cdf, positions_from_mask, returned_cache, step_uniforms,
)
from engine.model.tensors import completion_mask

# The shared pieces (engine/model/sampling.py) are still taken from here by older callers.
__all__ = ["Rollout", "cache_keyword", "encode_prompts_once", "filter_logits", "finished_rollout", "inverse_cdf",
           "plain_sample", "positions_from_mask", "returned_cache", "sample"]


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
    # Multi-turn episodes (engine/episodes/) only, else None: `completion_mask` is then the
    # model's tokens (the trained ones); `tool_mask` marks the tokens a tool or the chat
    # template wrote between turns (attended to, never trained); `turns` each token's turn.
    tool_mask: torch.Tensor | None = None  # (B, T) float
    turns: torch.Tensor | None = None  # (B, T) long
    episodes: list | None = None  # each row's engine.episodes.rollout.Episode (what it said and did)

    FIELDS: ClassVar[tuple[str, ...]] = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "sampling_logprobs", "truncated",
              "tool_mask", "turns")

    @property
    def present_mask(self) -> torch.Tensor:
        """The completion's tokens that are there (the model's and, in an episode, the
        tools'): what a pass attends to. (B, T) float"""
        return self.completion_mask if self.tool_mask is None else self.completion_mask + self.tool_mask

    @property
    def lengths(self) -> torch.Tensor:
        """Each row's tokens after the prompt (an episode's tool tokens included)."""
        return self.present_mask.sum(-1)

    @property
    def model_lengths(self) -> torch.Tensor:
        """Each row's tokens written by the model: what is trained."""
        return self.completion_mask.sum(-1)

    def select(self, index: torch.Tensor) -> "Rollout":
        """The rows `index` (a 1-d long tensor), in that order."""
        picked = Rollout(*(None if getattr(self, f) is None else getattr(self, f)[index] for f in self.FIELDS))
        if self.episodes is not None:
            picked.episodes = [self.episodes[i] for i in index.tolist()]
        return picked


def encode_prompts_once(model, prompt_ids, prompt_mask, firsts, inverse, room: int = 0):
    """Run each distinct prompt once and expand the result to every row.

    `firsts` index the rows holding each distinct prompt, `inverse` maps every row to
    its prompt. Returns the logits predicting the first completion token (b, 1, V), the
    KV cache expanded to the b rows with room for `room` more tokens (kv_cache.py), and
    the rows' position ids (b, P).
    """
    mask = prompt_mask[firsts].long()
    positions = positions_from_mask(mask)
    out = model(input_ids=prompt_ids[firsts], attention_mask=mask, position_ids=positions,
                use_cache=True, logits_to_keep=1)
    cache = preallocate(returned_cache(out), room)
    cache.reorder_cache(inverse)  # (u, ...) -> (b, ...)
    return out.logits[inverse], cache, positions[inverse]


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
    group_size: int = 1,
    finished_everywhere=None,
    decode: str = "plain",
) -> Rollout:
    """Sample up to `max_new_tokens` tokens for each (left-padded) prompt.

    With `group_size` > 1 the prompts come in contiguous groups of identical rows (GRPO's
    num_generations): each distinct prompt is encoded once and its cache shared.
    `finished_everywhere(finished_here) -> bool` keeps processes whose model is sharded
    (FSDP2) in step: each pass gathers weights from all of them, so one that has finished
    keeps taking passes (its rows' tokens past their end are masked) until all have.
    `decode` (the preset's model.decode: auto, plain, static or captured) picks the loop:
    this one, or engine/model/static_decode.py's fixed-shape step; both sample the same tokens.
    """
    batch = prompt_ids.shape[0]
    if group_size < 1 or batch % group_size:
        group_size = 1
    settings = dict(max_new_tokens=max_new_tokens, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id,
                    temperature=temperature, top_p=top_p, top_k=top_k, greedy=greedy, generator=generator,
                    group_size=group_size, finished_everywhere=finished_everywhere)
    path = static_decode.decode_path(decode, prompt_ids.device, max_new_tokens, finished_everywhere is not None)
    static = None
    if path != "plain":
        try:
            static = static_decode.static_sample(model, prompt_ids, prompt_mask, captured=path == "captured",
                                                 **settings)
        except Exception as error:  # noqa: BLE001 - the compiler's failures have no common type
            if decode != "auto":
                raise
            static_decode.capture_failed(error)  # auto chose it: warn once, decode plainly from then on
    if static is None:  # plain, or a model whose cache cannot be static, or a failed capture
        return plain_sample(model, prompt_ids, prompt_mask, **settings)
    return finished_rollout(prompt_ids, prompt_mask, *static, eos_token_ids, pad_token_id)


def plain_sample(model, prompt_ids, prompt_mask, *, max_new_tokens, eos_token_ids, pad_token_id, temperature, top_p,
                 top_k, greedy, generator, group_size, finished_everywhere) -> Rollout:
    """The plain decode path: one forward a token on the rows still generating."""
    batch = prompt_ids.shape[0]
    device = prompt_ids.device
    eos = torch.tensor(eos_token_ids, device=device)
    attention = prompt_mask.long()
    rows = torch.arange(batch, device=device)
    cache_kw = cache_keyword(model)
    logits, cache, positions = encode_prompts_once(
        model, prompt_ids, attention, firsts=rows[::group_size], inverse=rows // group_size, room=max_new_tokens - 1)
    next_pos = positions[:, -1:] + 1  # (B, 1)
    logits = logits[:, -1, :]
    # Rows still generating. Finished rows are dropped from the batch (and the cache) as
    # they accumulate, so short completions do not pay for the longest one.
    active = torch.arange(batch, device=device)
    completion_ids = torch.full((batch, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    logprobs = torch.zeros(batch, max_new_tokens, device=device)
    ended = torch.zeros(batch, dtype=torch.bool, device=device)
    steps = 0
    for t in range(max_new_tokens):
        # A uniform number for every row of the batch, dropped ones too: the static path,
        # which keeps them, then draws the same numbers for the same rows.
        uniforms = step_uniforms(batch, greedy, generator, device)
        token, logprob = draw_tokens(logits, uniforms[active], temperature=temperature, top_k=top_k, top_p=top_p,
                                     greedy=greedy)
        completion_ids[active, t] = token
        logprobs[active, t] = logprob
        steps = t + 1
        # Rows that have written an end token; they stay in the batch (their later tokens
        # are masked) until an eighth of it has ended, then leave it together.
        ended |= torch.isin(token, eos)  # (A,)
        count = int(ended.sum())  # the step's one host sync
        finished = count == len(active) or t == max_new_tokens - 1
        if finished_everywhere is None and finished:
            break
        if finished_everywhere is not None and finished_everywhere(finished):
            break
        if not finished and count * 8 >= len(active):
            keep = (~ended).nonzero().squeeze(-1)
            cache.batch_select_indices(keep)
            active, token, attention, next_pos = active[keep], token[keep], attention[keep], next_pos[keep]
            ended = ended[keep]
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=-1)
        out = model(input_ids=token[:, None], attention_mask=attention, position_ids=next_pos,
                    use_cache=True, **{cache_kw: cache})
        cache = returned_cache(out)
        logits = out.logits[:, -1, :]
        next_pos = next_pos + 1
    return finished_rollout(prompt_ids, prompt_mask, completion_ids[:, :steps], logprobs[:, :steps], eos_token_ids,
                            pad_token_id)


def finished_rollout(prompt_ids, prompt_mask, completion_ids, logprobs, eos_token_ids: list[int],
                     pad_token_id: int) -> Rollout:
    """The rollout of sampled (B, T) tokens and logprobs: each row ends at its first end
    token; what a row wrote after it (while it stayed in the batch) becomes padding."""
    eos = torch.tensor(eos_token_ids, device=completion_ids.device)
    mask = completion_mask(completion_ids, eos_token_ids).float()
    truncated = ~torch.isin(completion_ids, eos).any(-1)
    completion_ids = completion_ids.masked_fill(mask == 0, pad_token_id)
    return Rollout(prompt_ids, prompt_mask.long(), completion_ids, mask, logprobs * mask, truncated)
