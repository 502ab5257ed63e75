"""Group-relative advantages for GRPO.

Rewards come as a flat (B,) tensor with B = num_prompts * num_generations and
the generations of one prompt contiguous:
    [p0_g0, p0_g1, ..., p0_g{G-1}, p1_g0, ...]

Std is the unbiased (n - 1) estimate, as TRL uses (torch.std default).
"""

import torch


def _grouped(rewards, num_generations):
    """(B,) -> (num_prompts, G) float view, after checking B splits into groups.

    e.g. [1, 0, 1, 1], G=2 -> [[1, 0], [1, 1]]
    """
    if num_generations < 2:
        # Unbiased std of one sample is nan, and every advantage would be 0 anyway.
        raise ValueError(f"num_generations must be >= 2, got {num_generations}")
    if rewards.shape[0] % num_generations != 0:
        raise ValueError(
            f"number of rewards ({rewards.shape[0]}) is not divisible by "
            f"num_generations ({num_generations})"
        )
    return rewards.float().view(-1, num_generations)


# How centred rewards are scaled: (centred (P, G), grouped rewards (P, G), eps) -> (P, G).
_SCALERS = {
    # Dr. GRPO drops the std: dividing by it up-weights near-unanimous groups.
    "none": lambda centred, grouped, eps: centred,
    # Original GRPO: each group's own spread.
    "group": lambda centred, grouped, eps: centred / (grouped.std(dim=1, keepdim=True) + eps),
    # One spread for the whole batch: keeps the relative size of groups' signals.
    "batch": lambda centred, grouped, eps: centred / (grouped.std() + eps),
}


def group_advantages(rewards, num_generations, scale_rewards="group", eps=1e-4):
    """Advantage of each completion relative to the other completions of its prompt.

    A = (r - mean of its group) / (std + eps), std chosen by scale_rewards:
    "group" (its group's std), "batch" (std of all B rewards) or "none" (no division).

    input:  rewards (B,), num_generations G (B divisible by G)
    output: (B,) float

    e.g. rewards [1, 0, 1, 1], G=2 -> group means [0.5, 1] -> centred [0.5, -0.5, 0, 0]
         "none"  -> [0.5, -0.5, 0, 0]
         "group" -> stds [0.7071, 0] -> [0.7070, -0.7070, 0, 0]
         "batch" -> std 0.5 -> [0.9998, -0.9998, 0, 0]
    """
    if scale_rewards not in _SCALERS:
        raise ValueError(
            f"unknown scale_rewards {scale_rewards!r}; allowed: {sorted(_SCALERS)}"
        )
    grouped = _grouped(rewards, num_generations)  # (P, G)
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # (P, G)
    return _SCALERS[scale_rewards](centred, grouped, eps).reshape(-1)  # (B,)


def group_reward_std(rewards, num_generations):
    """Std of the rewards within each prompt's group.

    A zero std means every generation got the same reward, so that prompt
    gives no learning signal (the frac_reward_zero_std metric).

    input:  rewards (B,), num_generations G
    output: (num_prompts,)

    e.g. rewards [1, 0, 1, 1], G=2 -> [sqrt(0.5), 0] = [0.7071, 0]
    """
    return _grouped(rewards, num_generations).std(dim=1)
