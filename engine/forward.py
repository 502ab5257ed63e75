"""Teacher-forced forward passes over (prompt, completion) rows, with a shared prefix.

In GRPO every prompt appears `num_generations` times in a row. The prompt part of those
rows is the same computation repeated, so it is run once per distinct prompt and its
key/value cache is expanded to the rows (an index_select, so gradients from every copy
add up in the one prompt pass). The result is the same logits and the same gradients
as the plain pass over every row, for roughly half the tokens on short-answer tasks.
"""

from __future__ import annotations

import torch

from engine.rollout import encode_prompts_once, positions_from_mask


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


def plain_completion_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask, with_hidden=False):
    """Logits that predict each completion token, from one pass over every row. (b, T, V)
    With `with_hidden`, also the last layer's hidden states at those positions (b, T, H)."""
    attention = torch.cat([prompt_mask, completion_mask.long()], dim=1)
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    T = completion_ids.shape[1]
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions_from_mask(attention),
                logits_to_keep=T + 1, use_cache=False, output_hidden_states=with_hidden)
    if with_hidden:
        return out.logits[:, :-1, :], out.hidden_states[-1][:, -T - 1:-1, :]
    return out.logits[:, :-1, :]


def shared_prefix_completion_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                    firsts, inverse, with_hidden=False):
    """As plain_completion_logits, running each distinct prompt once. `firsts` index the
    rows (of the given tensors) that hold each distinct prompt, `inverse` maps every row
    to its prompt. (b, T, V)"""
    first = encode_prompts_once(model, prompt_ids, prompt_mask, firsts, inverse, with_hidden=with_hidden)
    first_logits, cache, positions = first[:3]
    T = completion_ids.shape[1]
    if T == 1:
        # (b, 1, V): predicts completion token 0
        return (first_logits, first[3]) if with_hidden else first_logits
    # The last completion token predicts nothing we score, so it is not fed in.
    inputs = completion_ids[:, :-1]
    attention = torch.cat([prompt_mask, completion_mask[:, :-1].long()], dim=1)
    start = positions[:, -1:] + 1  # (b, 1)
    steps = torch.arange(T - 1, device=inputs.device)[None, :]
    out = model(input_ids=inputs, attention_mask=attention, position_ids=start + steps,
                past_key_values=cache, use_cache=True, output_hidden_states=with_hidden)
    logits = torch.cat([first_logits, out.logits], dim=1)
    if with_hidden:
        return logits, torch.cat([first[3], out.hidden_states[-1]], dim=1)
    return logits


def completion_logits(model, rollout, rows: slice, group_size: int, shared_prefix: bool = True,
                      with_hidden: bool = False):
    """Logits (float32) predicting the completion tokens of `rollout`'s rows. (b, T, V)
    With `with_hidden`, a pair: the logits and the last layer's hidden states at the
    same positions (b, T, H), which a value head reads."""
    args = (rollout.prompt_ids[rows], rollout.prompt_mask[rows],
            rollout.completion_ids[rows], rollout.completion_mask[rows])
    out = None
    if shared_prefix and group_size > 1:
        firsts, inverse = group_index(rows, group_size, rollout.prompt_ids.device)
        if len(firsts) < rows.stop - rows.start:
            out = shared_prefix_completion_logits(model, *args, firsts - rows.start, inverse, with_hidden=with_hidden)
    if out is None:
        out = plain_completion_logits(model, *args, with_hidden=with_hidden)
    if with_hidden:
        return out[0].float(), out[1]
    return out.float()
