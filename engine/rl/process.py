"""Process supervision: advantages from step rewards (DeepSeekMath, Shao et al. 2024, §4.1.3).

A step reward scores each step of a completion (engine/rewards/steps.py); the trainer
maps each step to the token that ends it. Here they become per-token tensors:

    step_rewards (B, T): at each token that ends a step, the weighted scores of the steps
                         ending there (summed when several components end a step there),
                         and the outcome rewards' weighted sum as one more step on the
                         completion's last token; 0 elsewhere
    step_ends    (B, T): True where a step ends

GRPO with process supervision normalises every step reward of a group by the group's
mean and std, and gives a token the sum of the normalised rewards of the steps that end
at or after it. With one step a completion (outcome rewards only) that is GRPO's own
group-relative advantage on every token.
"""

from __future__ import annotations

import torch

__all__ = ["step_tensors", "process_advantages", "grpo_process_estimator"]


def step_tensors(step_lists, weights, lengths, num_tokens, outcome=None):
    """Steps of each component, per token: (step_rewards (B, T), step_ends (B, T) bool).

    input:  step_lists {label: B lists of (token_end, score)}; weights {label: weight};
            lengths (B,) completion tokens; num_tokens T; outcome (B,) or None: the outcome
            rewards' weighted sum, placed as a step on each completion's last token
    e.g. {"s": [[(0, 1.0), (2, 0.0)]]}, {"s": 0.5}, lengths [3], T 4, outcome [1.0]
         -> rewards [[0.5, 0, 1.0, 0]], ends [[True, False, True, False]]
         (the step ending on token 2 scored 0 and the outcome 1: 0.5 * 0 + 1)
    """
    B = len(lengths)
    values = torch.zeros(B, num_tokens, dtype=torch.float64)
    ends = torch.zeros(B, num_tokens, dtype=torch.bool)
    for label, rows in step_lists.items():
        for i, steps in enumerate(rows):
            for end, score in steps:
                values[i, end] += weights[label] * score
                ends[i, end] = True
    if outcome is not None:
        last = (torch.as_tensor(lengths).long() - 1).clamp(min=0)
        rows = torch.arange(B)
        values[rows, last] += torch.as_tensor(outcome, dtype=torch.float64)
        ends[rows, last] = True
    return values, ends


def process_advantages(step_rewards, step_ends, mask, num_generations, scale_rewards="group", eps=1e-4):
    """GRPO process supervision: every step reward of a group normalised by the mean and
    std of that group's step rewards (all its completions' steps together), a token's
    advantage the sum of the normalised rewards of the steps ending at or after it.

        r~_j = (r_j - mean(R_g)) / (std(R_g) + eps)     R_g: the step rewards of group g
        A_t  = sum over steps j of the completion with end(j) >= t of r~_j

    `scale_rewards`: "group" (the group's std, unbiased, as GRPO's), "batch" (the std of
    every step reward of the batch) or "none" (centred only). A group whose step rewards
    are all equal gets exactly 0 (a group of one step reward too). Tokens after a
    completion's last step, and masked tokens, get 0. Computed in float64.

    input:  step_rewards (B, T), step_ends (B, T) bool, mask (B, T), num_generations G
    output: (B, T) float32
    e.g. G=2, T=4; completion 0 has steps ending on tokens 1 and 3 scored 1 and 0,
         completion 1 one step ending on token 2 scored 1; mask all ones but [1, 3]:
         R = [1, 0, 1], mean 2/3, std sqrt(1/3) = 0.5774 -> r~ = [0.5773, -1.1546, 0.5773]
         -> [[-0.5773, -0.5773, -1.1546, -1.1546], [0.5773, 0.5773, 0.5773, 0]]
    """
    B, T = step_rewards.shape
    if B % num_generations:
        raise ValueError(f"number of completions ({B}) is not divisible by num_generations ({num_generations})")
    values = step_rewards.double()
    ends = step_ends.bool()
    normalised = torch.zeros_like(values)
    spread = None
    if scale_rewards == "batch":
        every = values[ends]
        spread = every.std() if every.numel() > 1 else torch.zeros((), dtype=torch.float64)
    elif scale_rewards not in ("group", "none"):
        raise ValueError(f"unknown scale_rewards {scale_rewards!r}; allowed: batch, group, none")
    for start in range(0, B, num_generations):
        rows = slice(start, start + num_generations)
        group = values[rows][ends[rows]]  # every step reward of the group
        if group.numel() == 0 or bool((group == group[0]).all()):
            continue  # no signal: exactly 0 (the mean of equal values can miss them in the last bit)
        centred = group - group.mean()
        if scale_rewards == "group":
            centred = centred / (group.std() + eps)
        elif scale_rewards == "batch":
            centred = centred / (spread + eps)
        block = torch.zeros_like(values[rows])
        block[ends[rows]] = centred
        normalised[rows] = block
    to_go = normalised.flip(-1).cumsum(-1).flip(-1)  # sum of the steps ending at or after t
    return (to_go * mask.double()).float()


def grpo_process_estimator(rewards, mask, *, num_generations, scale_rewards, step_rewards, step_ends):
    """The ESTIMATORS entry `grpo_process`: :func:`process_advantages` on the trainer's
    step tensors (`rewards`, one total per completion, is not read: the outcome part is
    a step in `step_rewards`)."""
    if step_rewards is None or step_ends is None:
        raise ValueError("advantage_estimator grpo_process needs step_rewards and step_ends (the GRPO trainer builds "
                         "them when the estimator declares step_rewards)")
    return process_advantages(step_rewards.to(mask.device), step_ends.to(mask.device), mask, num_generations,
                              scale_rewards)

