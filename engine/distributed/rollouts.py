"""Putting the ranks' rollouts together, so that every rank holds the step's whole batch.

Each rank samples the completions of its share of the step's prompts. Prompts are
left-padded and completions right-padded to lengths that differ between ranks, so the
parts are padded to the longest before they are joined in rank order. Padding changes
no result: padded prompt positions are masked out and positions come from the mask
(engine.model.rollout.positions_from_mask), padded completion positions have mask 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.distributed.world import World
from engine.model.rollout import Rollout

__all__ = ["join_rollouts", "gather_rollout"]


def join_rollouts(parts: list[Rollout], pad_token_id: int) -> Rollout:
    """The rows of `parts`, in order, padded to common prompt and completion lengths.

    input:  prompts [[5, 6]] and [[7]]  ->  prompt_ids [[5, 6], [pad, 7]], prompt_mask [[1, 1], [0, 1]]
    """
    P = max(p.prompt_ids.shape[1] for p in parts)
    T = max(p.completion_ids.shape[1] for p in parts)

    def left(t, value):  # pad the sequence dimension on the left, to P
        return F.pad(t, (P - t.shape[1], 0), value=value)

    def right(t, value):
        return F.pad(t, (0, T - t.shape[1]), value=value)

    return Rollout(
        prompt_ids=torch.cat([left(p.prompt_ids, pad_token_id) for p in parts]),
        prompt_mask=torch.cat([left(p.prompt_mask, 0) for p in parts]),
        completion_ids=torch.cat([right(p.completion_ids, pad_token_id) for p in parts]),
        completion_mask=torch.cat([right(p.completion_mask, 0.0) for p in parts]),
        sampling_logprobs=torch.cat([right(p.sampling_logprobs, 0.0) for p in parts]),
        truncated=torch.cat([p.truncated for p in parts]),
        # an episode's tool tokens and turns (pad: not a tool token, turn 0)
        tool_mask=None if parts[0].tool_mask is None else torch.cat([right(p.tool_mask, 0.0) for p in parts]),
        turns=None if parts[0].turns is None else torch.cat([right(p.turns, 0) for p in parts]),
    )


def gather_rollout(world: World, rollout: Rollout, pad_token_id: int) -> Rollout:
    """Every rank's rollout joined in rank order, on this rank's device (one process:
    `rollout` itself)."""
    if not world.distributed:
        return rollout
    mine = {f: None if getattr(rollout, f) is None else getattr(rollout, f).cpu() for f in Rollout.FIELDS}
    parts = [Rollout(**{f: None if v is None else v.to(rollout.prompt_ids.device) for f, v in part.items()})
             for part in world.gather_objects(mine)]
    return join_rollouts(parts, pad_token_id)
