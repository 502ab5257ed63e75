"""Advantage estimators: group-relative (GRPO), leave-one-out (RLOO), REINFORCE++, ReMax's
greedy baseline, GDPO's per-reward normalisation, GAE (PPO).

Rewards come as a flat (B,) tensor with B = num_prompts * num_generations and
the generations of one prompt contiguous:
    [p0_g0, p0_g1, ..., p0_g{G-1}, p1_g0, ...]

Std is the unbiased (n - 1) estimate, as TRL uses (torch.std default).

Group statistics are taken in float64 and the results returned in float32. A group whose
rewards are all equal must give exactly zero advantage and zero std (frac_reward_zero_std
counts std == 0): the mean of equal values is not always the value itself (in float32
eight 0.7s gave a residue of ~6e-8, an advantage of +-6e-4 after dividing by std + eps
1e-4; in float64 three float64 0.7s still leave 1.1e-16), so such a group is detected
and centred to exact zeros (:func:`_centred`), and every estimator works from that.
"""

import torch


def _grouped(rewards, num_generations):
    """(B,) -> (num_prompts, G) float64 view, after checking B splits into groups.

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
    return rewards.double().view(-1, num_generations)


def _centred(grouped):
    """Each reward minus its group's mean, exactly 0 in a group of equal rewards (where
    the computed mean can differ from the value in its last bit).

    e.g. [[0.7, 0.7, 0.7], [1, 0, 2]] (float64) -> [[0, 0, 0], [0, -1, 1]]
         (0.7 - mean(0.7, 0.7, 0.7) would be 1.1e-16)
    """
    equal = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)  # (P, 1)
    return torch.where(equal, 0.0, grouped - grouped.mean(dim=1, keepdim=True))  # (P, G)


def _group_std(centred):
    """Unbiased std of each group from its centred rewards: (P, G) -> (P, 1), exactly 0
    for a group of equal rewards."""
    return ((centred**2).sum(dim=1, keepdim=True) / (centred.shape[1] - 1)).sqrt()


# Reward scalings (the REWARD_SCALINGS registry, `scale_rewards`): how centred rewards are
# scaled. Contract: (centred (P, G), grouped rewards (P, G), *, eps) -> (P, G), float64.


def scale_by_group_std(centred, grouped, *, eps):
    """Original GRPO: each group's own spread.  e.g. centred [[0.5, -0.5]] -> std 0.7071
    -> [[0.7070, -0.7070]] (eps 1e-4)"""
    return centred / (_group_std(centred) + eps)


def scale_by_batch_std(centred, grouped, *, eps):
    """One spread for the whole batch: keeps the relative size of groups' signals.
    e.g. grouped [[1, 0], [1, 1]] -> std 0.5 -> centred / 0.5001"""
    return centred / (grouped.std() + eps)


def no_scaling(centred, grouped):
    """Dr. GRPO drops the std: dividing by it up-weights near-unanimous groups."""
    return centred


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
    from engine.rl.catalog import REWARD_SCALINGS

    if scale_rewards not in REWARD_SCALINGS:
        raise ValueError(
            f"unknown scale_rewards {scale_rewards!r}; allowed: {sorted(REWARD_SCALINGS.names())}"
        )
    grouped = _grouped(rewards, num_generations)  # (P, G)
    centred = _centred(grouped)  # (P, G)
    return REWARD_SCALINGS.entry(scale_rewards).call(centred, grouped, eps=eps).reshape(-1).float()  # (B,)


def group_reward_std(rewards, num_generations):
    """Std of the rewards within each prompt's group.

    A zero std means every generation got the same reward, so that prompt
    gives no learning signal (the frac_reward_zero_std metric).

    input:  rewards (B,), num_generations G
    output: (num_prompts,) float32, exactly 0 for a group of equal rewards

    e.g. rewards [1, 0, 1, 1], G=2 -> [sqrt(0.5), 0] = [0.7071, 0]
    """
    return _group_std(_centred(_grouped(rewards, num_generations))).reshape(-1).float()


# ------------------------------------------------------------------ RLOO, REINFORCE++
# Other estimators for online runs, chosen by `algorithm.advantage_estimator`.


def rloo_advantages(rewards, num_generations):
    """REINFORCE Leave-One-Out (Ahmadian et al. 2024): each completion's baseline is the
    mean reward of the *other* completions of its prompt.

    A_i = r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean of the group)

    input:  rewards (B,), num_generations G
    output: (B,) float

    e.g. rewards [1, 0, 0, 1, 1, 1], G=3 -> baselines [0, 0.5, 0.5, 1, 1, 1]
         -> [1, -0.5, -0.5, 0, 0, 0]
    """
    # r_i - mean of the others = G / (G - 1) * (r_i - group mean): from the exact centred
    # rewards, a group of equal rewards gets exactly 0.
    centred = _centred(_grouped(rewards, num_generations))  # (P, G)
    return (centred * num_generations / (num_generations - 1)).reshape(-1).float()


def masked_whiten(values, mask, shift_mean=True, eps=1e-8):
    """Normalise `values` to mean 0, variance 1 over the positions where `mask` is 1
    (unbiased variance, as TRL's masked_whiten). shift_mean=False keeps the mean:
    only the scale changes. Masked positions come out as 0.

    input:  values (B, T), mask (B, T)
    output: (B, T)

    e.g. values [[1, 2, 3, 9]], mask [[1, 1, 1, 0]] -> mean 2, var 1 -> [[-1, 0, 1, 0]]
         shift_mean=False -> [[1, 2, 3, 0]]
    """
    keep = mask.bool()
    count = keep.sum().clamp(min=2)
    mean = torch.where(keep, values, 0.0).sum() / keep.sum().clamp(min=1)
    var = torch.where(keep, (values - mean) ** 2, 0.0).sum() / (count - 1)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(keep, whitened, 0.0)


def discounted_returns(token_rewards, mask, gamma):
    """Reward-to-go at each token: G_t = r_t + gamma * G_{t+1}, over masked tokens.

    input:  token_rewards (B, T), mask (B, T), gamma
    output: (B, T), 0 where masked

    e.g. rewards [[0, 0, 1]], gamma 0.5 -> [[0.25, 0.5, 1]]

    A masked span inside a row (an episode's tool tokens) is skipped, not a reset: the
    return carries across it undiscounted, as if the model's tokens were contiguous.
    e.g. rewards [[0, 0, 1]], mask [[1, 0, 1]], gamma 0.5 -> [[0.5, 0, 1]]
    """
    returns = torch.zeros_like(token_rewards)
    running = torch.zeros_like(token_rewards[:, 0])
    rewards = token_rewards * mask
    for t in reversed(range(token_rewards.shape[1])):
        m = mask[:, t]
        running = m * (rewards[:, t] + gamma * running) + (1 - m) * running
        returns[:, t] = running
    return returns * mask


def last_model_token(mask):
    """Each row's last position where `mask` is 1 (0 for a row with none). (B, T) -> (B,)

    e.g. [[1, 1, 0], [1, 0, 1], [0, 0, 0]] -> [1, 2, 0]
    """
    positions = torch.arange(mask.shape[1], device=mask.device)
    return (mask.bool() * positions).amax(-1)


def last_token_rewards(scores, mask):
    """Place each sequence's score on its last real token. (B,), (B, T) -> (B, T)

    e.g. scores [2, 3], mask [[1, 1, 0], [1, 1, 1]] -> [[0, 2, 0], [0, 0, 3]]
         (an episode's: the last token the model wrote, mask [[1, 0, 1, 0]] -> [[0, 0, 2, 0]])
    """
    last = last_model_token(mask)  # (B,)
    out = torch.zeros_like(mask, dtype=scores.dtype)
    out[torch.arange(len(scores)), last] = scores
    return out * mask


def reinforce_pp_advantages(token_rewards, mask, gamma=1.0):
    """REINFORCE++ (Hu 2025): discounted returns, whitened over every token of the batch
    (a global baseline, no critic, no group).

    input:  token_rewards (B, T) (the score on the last token, plus any per-token terms)
    output: (B, T) advantages, 0 where masked

    e.g. token_rewards [[0, 1], [0, 0]], mask all 1, gamma 1 -> returns [[1, 1], [0, 0]]
         -> mean 0.5, std 0.5774 -> [[0.866, 0.866], [-0.866, -0.866]]
    """
    return masked_whiten(discounted_returns(token_rewards, mask, gamma), mask)


def reinforce_pp_baseline_advantages(rewards, mask, num_generations):
    """REINFORCE++-baseline: subtract the group's mean reward (a per-prompt baseline),
    then whiten over every token of the batch.

    input:  rewards (B,), mask (B, T), num_generations G
    output: (B, T)

    e.g. rewards [1, 0, 1, 1], G=2, mask all ones (T=1) -> centred [0.5, -0.5, 0, 0]
         -> std 0.4082 -> [[1.2247], [-1.2247], [0], [0]]
    """
    centred = _centred(_grouped(rewards, num_generations)).reshape(-1)  # (B,) float64
    return masked_whiten(centred[:, None] * torch.ones_like(mask, dtype=torch.float64), mask).float()


# GRPO's advantage estimators (the ESTIMATORS registry, `advantage_estimator`).
# Contract: (rewards (B,), mask (B, T), *, num_generations, scale_rewards, baseline_rewards if declared)
# -> advantages, (B,) per completion or (B, T) per token (as the entry declares).


def grpo_estimator(rewards, mask, *, num_generations, scale_rewards):
    """Group-relative: :func:`group_advantages`."""
    return group_advantages(rewards, num_generations, scale_rewards)


def rloo_estimator(rewards, mask, *, num_generations):
    """Leave-one-out baseline: :func:`rloo_advantages`."""
    return rloo_advantages(rewards, num_generations)


def reinforce_pp_estimator(rewards, mask):
    """REINFORCE++: the score on the last token, returns whitened over the batch."""
    return reinforce_pp_advantages(last_token_rewards(rewards, mask), mask)


def reinforce_pp_baseline_estimator(rewards, mask, *, num_generations):
    """REINFORCE++-baseline: :func:`reinforce_pp_baseline_advantages`."""
    return reinforce_pp_baseline_advantages(rewards, mask, num_generations)


def remax_estimator(rewards, mask, *, baseline_rewards):
    """ReMax (Li et al. 2024; verl's ``adv_estimator=remax``): each completion's baseline is
    the reward of the greedy completion of its prompt, scored by the same rewards.

    A_i = r_i - r(greedy completion of prompt i)

    input:  rewards (B,), baseline_rewards (B,) (each row's prompt's greedy reward, repeated
            over its group)
    output: (B,) float32, exactly 0 where a sample scored what the greedy completion did

    e.g. rewards [1, 0.5, 0, 1], baselines [0.5, 0.5, 1, 1] -> [0.5, 0, -1, 0]
    """
    if baseline_rewards is None:
        raise ValueError("advantage_estimator remax needs baseline_rewards: the reward of each prompt's greedy "
                         "completion (the GRPO trainer generates them when the estimator declares greedy_baseline)")
    if baseline_rewards.shape != rewards.shape:
        raise ValueError(f"baseline_rewards has shape {tuple(baseline_rewards.shape)}; it must match the rewards' "
                         f"{tuple(rewards.shape)} (one greedy reward per completion, repeated over its group)")
    return (rewards.double() - baseline_rewards.to(rewards.device).double()).float()


def repeat_per_group(values, group_size):
    """One value per prompt -> one per row, each repeated over its group: (P,) -> (P * G,).

    e.g. [0.5, 1], G=2 -> [0.5, 0.5, 1, 1]
    """
    return values.repeat_interleave(group_size)


# ------------------------------------------------------------- several rewards (GDPO)
# The REWARD_AGGREGATIONS registry (`multi_objective_aggregation`): how several reward
# components become advantages. "sum_then_normalize" hands their weighted sum to the
# estimator (no function); "normalize_then_sum" computes the advantages itself.


def normalize_then_sum(components, weights, num_generations, eps=1e-4):
    """GDPO (group reward-decoupled normalisation; TRL's multi_objective_aggregation
    "normalize_then_sum"): each reward component normalised within its group, the
    weighted sum of those, normalised over the batch.

    z_k = (r_k - group mean of r_k) / (group std of r_k + eps)    (unbiased std)
    s   = sum_k w_k * z_k
    A   = (s - batch mean of s) / (batch std of s + eps)

    Every group's z_k sum to 0 over the group, so s does and the batch mean of s is 0
    in exact arithmetic: it is not subtracted (its float residue, ~1e-17, would leave a
    group of equal rewards a tiny non-zero advantage). A component equal over a group has
    z_k exactly 0 there (:func:`_centred`); a group equal in every component, advantages
    exactly 0. Computed in float64.

    input:  components (B, K) (each reward's raw values, in the preset's order), weights (K,),
            num_generations G (B divisible by G)
    output: (advantages (B,) float32, component_advantages (B, K) float32: the z_k, before weights)

    e.g. components [[1, 0], [0, 1], [1, 1], [1, 0]], weights [1, 0.5], G=2
         -> z [[0.7070, -0.7070], [-0.7070, 0.7070], [0, 0.7070], [0, -0.7070]]
         -> s [0.3535, -0.3535, 0.3535, -0.3535] -> std 0.4082 -> A [0.8658, -0.8658, 0.8658, -0.8658]
    """
    if components.dim() != 2:
        raise ValueError(f"components must be (B, K), one column per reward; got shape {tuple(components.shape)}")
    B, K = components.shape
    weights = torch.as_tensor(weights, dtype=torch.float64, device=components.device)
    if weights.shape != (K,):
        raise ValueError(f"weights has shape {tuple(weights.shape)}; it must be ({K},), one per reward component")
    _grouped(components[:, 0], num_generations)  # B splits into groups (else the message says why)
    per_group = components.double().T.reshape(-1, num_generations)  # (K * P, G): component k's groups, then k+1's
    centred = _centred(per_group)
    z = (centred / (_group_std(centred) + eps)).reshape(K, B).T  # (B, K)
    summed = (z * weights).sum(dim=1)  # (B,), centred within each group
    advantages = summed / (summed.std() + eps)
    return advantages.float(), z.float()


# ---------------------------------------------------------------------------- PPO


def ppo_token_rewards(scores, kl, mask, kl_coef, step_rewards=None):
    """PPO's per-token reward: a KL penalty on every token, the score on the last, and
    each step reward on the token that ends its step (`step_rewards` (B, T), or None).

    r_t = -kl_coef * kl_t  (+ score on the last real token) (+ step rewards ending at t)

    input:  scores (B,), kl (B, T) per-token KL estimate, mask (B, T), kl_coef
    output: (rewards (B, T), non_score_rewards (B, T)), 0 where masked

    e.g. scores [1], kl [[0.5, 1.0]], mask [[1, 1]], kl_coef 0.1
         -> non_score [[-0.05, -0.1]], rewards [[-0.05, 0.9]]
         with step_rewards [[0.5, 0]] -> rewards [[0.45, 0.9]]
    """
    non_score = -kl_coef * kl * mask
    rewards = non_score + last_token_rewards(scores, mask)
    if step_rewards is not None:
        rewards = rewards + step_rewards.to(rewards.dtype) * mask
    return rewards, non_score


def gae(rewards, values, mask, gamma, lam):
    """Generalised advantage estimation (Schulman et al. 2016), per token.

    delta_t = r_t + gamma * V_{t+1} - V_t          (V after the last token is 0)
    A_t     = delta_t + gamma * lam * A_{t+1}
    returns = A + V

    input:  rewards (B, T), values (B, T), mask (B, T) (1 up to the last token)
    output: (advantages (B, T), returns (B, T)), 0 where masked

    e.g. rewards [[0, 1]], values [[0.5, 0.5]], gamma 1, lam 1
         -> delta [[0, 0.5]] -> A [[0.5, 0.5]], returns [[1, 1]]

    Masked tokens inside a row (an episode's tool tokens: attended, not the model's)
    are skipped, not a reset: V_{t+1} is the next model token's value and A_{t+1} its
    advantage, as over the model's tokens alone (verl's multi-turn GAE).
    e.g. rewards [[0, 0, 1]], values [[0.5, 9, 0.5]], mask [[1, 0, 1]], gamma 1, lam 1
         -> as rewards [[0, 1]], values [[0.5, 0.5]]: A [[0.5, 0, 0.5]], returns [[1, 0, 1]]
    """
    values = values * mask
    rewards = rewards * mask
    T = rewards.shape[1]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])  # A of the next model token (0 past the end)
    next_value = torch.zeros_like(running)  # V of the next model token (0 past the end)
    for t in reversed(range(T)):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = m * (delta + gamma * lam * running) + (1 - m) * running
        next_value = m * values[:, t] + (1 - m) * next_value
        advantages[:, t] = running
    advantages = advantages * mask
    return advantages, (advantages + values) * mask


def explained_variance(values, returns, mask):
    """1 - Var(returns - values) / Var(returns) over masked tokens: 1 is a perfect
    critic, 0 no better than a constant, negative worse.

    e.g. values [[1, 2]], returns [[1, 3]] -> var(ret) 2, var([0, 1]) 0.5 -> 0.75
    """
    keep = mask.bool()
    ret, err = returns[keep], (returns - values)[keep]
    if ret.numel() < 2:
        return float("nan")
    var = ret.var()
    return float(1 - err.var() / var) if var > 0 else float("nan")


def estimate_advantages(estimator, rewards, mask, *, baseline_rewards=None, step_rewards=None, step_ends=None,
                        base_dir=None, **options):
    """Advantages by the estimator a preset names (registered, or a user's `FILE.py:FUNCTION`
    relative to `base_dir`), given the options it names: `options` (num_generations,
    scale_rewards; in a run, every field of the algorithm's section), and the engine's
    tensors: `baseline_rewards` (B,), each row's prompt's greedy completion's reward, for
    an estimator that declares `greedy_baseline` (None for the others); `step_rewards` and
    `step_ends` (B, T), the step tensors (engine/rl/process.py) for one that declares
    `step_rewards`.

    e.g. "rloo", rewards [1, 0, 0, 1, 1, 1], G 3 -> [1, -0.5, -0.5, 0, 0, 0]
    """
    from engine.rl.catalog import ESTIMATORS
    from engine.rl.user_code import resolve

    entry = resolve(ESTIMATORS, estimator, base_dir)
    return entry.call(rewards, mask, baseline_rewards=baseline_rewards, step_rewards=step_rewards,
                      step_ends=step_ends, **options)
