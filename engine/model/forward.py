"""Teacher-forced forward passes over (prompt, completion) rows, with a shared prefix.

In GRPO every prompt appears `num_generations` times in a row. The prompt part of those
rows is the same computation repeated, so it is run once per distinct prompt and its
key/value cache is expanded to the rows (an index_select, so gradients from every copy
add up in the one prompt pass). The result is the same logits and the same gradients
as the plain pass over every row, for roughly half the tokens on short-answer tasks.

The passes return last hidden states, not logits: engine/model/token_logits.py turns them into
logprobs chunk by chunk, so no (B, T, V) logit tensor is ever whole.
"""

from __future__ import annotations

import torch

from engine.model.rollout import cache_keyword, positions_from_mask, returned_cache
from engine.model import token_logits
from engine.model.token_logits import TokenLogits, output_head


def group_index(rows: slice, group_size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """For batch rows `rows` whose prompts repeat in contiguous groups of `group_size`:
    the first row of each group present, and each row's position among those groups.

    input:  rows 2..7, group_size 4 (rows 2,3 in group 0; 4..7 in group 1)
    output: firsts [2, 4], inverse [0, 0, 1, 1, 1, 1]
    """
    row_ids = torch.arange(rows.start, rows.stop, device=device)
    groups = row_ids // group_size
    unique, inverse = torch.unique_consecutive(groups, return_inverse=True)
    firsts = torch.maximum(unique * group_size, torch.tensor(rows.start, device=device))
    return firsts, inverse


def backbone(model):
    """The decoder under the output head (a causal LM's `model` or `transformer`), with
    the LoRA layers in it: calling it gives hidden states without computing logits."""
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(lm, lm.base_model_prefix)


def plain_completion_hidden(model, prompt_ids, prompt_mask, completion_ids, completion_mask):
    """Last hidden states at the positions that predict each completion token, from one
    pass over every row. (b, T, H)"""
    attention = torch.cat([prompt_mask, completion_mask.long()], dim=1)
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    T = completion_ids.shape[1]
    out = backbone(model)(input_ids=input_ids, attention_mask=attention,
                          position_ids=positions_from_mask(attention), use_cache=False)
    return out.last_hidden_state[:, -T - 1:-1, :]


def shared_prefix_completion_hidden(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                    firsts, inverse):
    """As plain_completion_hidden, running each distinct prompt once. `firsts` index the
    rows (of the given tensors) that hold each distinct prompt, `inverse` maps every row
    to its prompt. (b, T, H)"""
    body = backbone(model)
    mask = prompt_mask[firsts].long()
    positions = positions_from_mask(mask)
    out = body(input_ids=prompt_ids[firsts], attention_mask=mask, position_ids=positions, use_cache=True)
    cache = returned_cache(out)
    cache.reorder_cache(inverse)  # (u, ...) -> (b, ...): an index_select, gradients add up
    first = out.last_hidden_state[:, -1:][inverse]  # (b, 1, H): predicts completion token 0
    T = completion_ids.shape[1]
    if T == 1:
        return first
    # The last completion token predicts nothing we score, so it is not fed in.
    inputs = completion_ids[:, :-1]
    attention = torch.cat([prompt_mask, completion_mask[:, :-1].long()], dim=1)
    start = positions[inverse][:, -1:] + 1  # (b, 1)
    steps = torch.arange(T - 1, device=inputs.device)[None, :]
    out = body(input_ids=inputs, attention_mask=attention, position_ids=start + steps,
               use_cache=True, **{cache_keyword(body): cache})
    return torch.cat([first, out.last_hidden_state], dim=1)


def host_group_index(rows: slice, group_size: int, device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """group_index with its sizes worked out on the host from the slice alone, so the
    lean update's passes wait for no device (no torch.unique): also the number of
    distinct prompts.

    input:  rows 2..7, group_size 4   output: firsts [2, 4], inverse [0, 0, 1, 1, 1, 1], 2
    """
    first_group, last_group = rows.start // group_size, (rows.stop - 1) // group_size
    groups = torch.arange(first_group, last_group + 1, device=device)
    firsts = (groups * group_size).clamp(min=rows.start)
    inverse = torch.arange(rows.start, rows.stop, device=device) // group_size - first_group
    return firsts, inverse, last_group - first_group + 1


def completion_logits(model, rollout, rows: slice, group_size: int, shared_prefix: bool = True,
                      temperature: float = 1.0, top_rows: int = 0) -> TokenLogits:
    """The temperature-scaled logits predicting the completion tokens of `rollout`'s
    rows, as a TokenLogits (b, T, V): computed in chunks as quantities are asked for;
    its `hidden` (b, T, H) is what a value head reads. `shared_prefix=False` runs every
    row in full (needed under gradient checkpointing, which keeps no KV cache).
    `top_rows`: the first rows whose top-5 a lean pass keeps (the recorded ones)."""
    # Attention sees every token there, an episode's tool tokens too (present_mask).
    args = (rollout.prompt_ids[rows], rollout.prompt_mask[rows],
            rollout.completion_ids[rows], rollout.present_mask[rows])
    hidden = None
    if shared_prefix and group_size > 1:
        if token_logits.LEAN_UPDATE:
            firsts, inverse, distinct = host_group_index(rows, group_size, rollout.prompt_ids.device)
        else:
            firsts, inverse = group_index(rows, group_size, rollout.prompt_ids.device)
            distinct = len(firsts)
        if distinct < rows.stop - rows.start:
            hidden = shared_prefix_completion_hidden(model, *args, firsts - rows.start, inverse)
    if hidden is None:
        hidden = plain_completion_hidden(model, *args)
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return TokenLogits(hidden, output_head(lm), lm.get_output_embeddings().weight.shape[0], temperature,
                       top_rows=top_rows)
