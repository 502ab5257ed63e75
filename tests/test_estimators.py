"""RLOO, REINFORCE++, whitening, GAE and the PPO per-token rewards, against numbers
worked out by hand and (GAE) against a plain Python loop."""

import math
import random

import pytest
import torch

from engine.rl.advantages import (
    discounted_returns,
    explained_variance,
    gae,
    last_token_rewards,
    masked_whiten,
    ppo_token_rewards,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
)


def close(actual, expected, atol=1e-4):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def test_rloo_baseline_is_the_mean_of_the_others():
    # group 0 [1, 0, 0]: baselines (0+0)/2, (1+0)/2, (1+0)/2 = 0, 0.5, 0.5
    # group 1 [1, 1, 1]: every baseline 1 -> no signal
    close(rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), 3), [1.0, -0.5, -0.5, 0.0, 0.0, 0.0])


def test_rloo_is_g_over_g_minus_1_times_the_centred_reward():
    rewards = torch.tensor([0.3, 2.0, -1.0, 0.5])
    centred = rewards - rewards.mean()
    close(rloo_advantages(rewards, 4), (4 / 3 * centred).tolist())


def test_masked_whiten_hand_worked():
    values = torch.tensor([[1.0, 2.0, 3.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    # over [1, 2, 3]: mean 2, unbiased variance (1 + 0 + 1) / 2 = 1
    close(masked_whiten(values, mask), [[-1.0, 0.0, 1.0, 0.0]])
    close(masked_whiten(values, mask, shift_mean=False), [[1.0, 2.0, 3.0, 0.0]])


def test_discounted_returns_and_last_token_rewards():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    rewards = last_token_rewards(torch.tensor([2.0, 3.0]), mask)
    close(rewards, [[0.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
    # gamma 0.5: row 1 [0.75, 1.5, 3]
    close(discounted_returns(rewards, mask, 0.5), [[1.0, 2.0, 0.0], [0.75, 1.5, 3.0]])


def test_reinforce_pp_whitens_returns_over_the_batch():
    # returns [[1, 1], [0, 0]]: mean 0.5, unbiased var (4 * 0.25) / 3 = 1/3, std 0.57735
    out = reinforce_pp_advantages(torch.tensor([[0.0, 1.0], [0.0, 0.0]]), torch.ones(2, 2))
    a = 0.5 / math.sqrt(1 / 3)
    close(out, [[a, a], [-a, -a]])


def test_reinforce_pp_baseline_subtracts_the_group_mean_then_whitens():
    # rewards [1, 0 | 1, 1] -> centred [0.5, -0.5, 0, 0]; one token each;
    # mean 0, unbiased var 0.5 / 3, std 0.40825 -> [1.2247, -1.2247, 0, 0]
    out = reinforce_pp_baseline_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.ones(4, 1), 2)
    close(out, [[1.2247], [-1.2247], [0.0], [0.0]])
    # padding stays 0 and does not count in the statistics
    padded = reinforce_pp_baseline_advantages(torch.tensor([1.0, 0.0]), torch.tensor([[1, 1], [1, 0]]), 2)
    assert padded[1, 1] == 0
    # centred [0.5, 0.5, -0.5]: mean 1/6, var ((1/3)^2 * 2 + (2/3)^2) / 2 = 1/3
    close(padded[0], [(0.5 - 1 / 6) / math.sqrt(1 / 3)] * 2)


def test_ppo_token_rewards_put_the_score_on_the_last_token():
    rewards, non_score = ppo_token_rewards(torch.tensor([1.0, 2.0]), torch.tensor([[0.5, 1.0, 7.0], [1.0, 1.0, 1.0]]),
                                           torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]), 0.1)
    close(non_score, [[-0.05, -0.1, 0.0], [-0.1, -0.1, -0.1]])
    close(rewards, [[-0.05, 0.9, 0.0], [-0.1, -0.1, 1.9]])


def test_gae_hand_worked():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    # gamma 0.9, lam 0.8 (gamma * lam = 0.72):
    # t=2: delta = 1 + 0 - 0.7 = 0.3                    A2 = 0.3
    # t=1: delta = 0 + 0.9 * 0.7 - 0.6 = 0.03            A1 = 0.03 + 0.72 * 0.3 = 0.246
    # t=0: delta = 0 + 0.9 * 0.6 - 0.5 = 0.04            A0 = 0.04 + 0.72 * 0.246 = 0.21712
    adv, ret = gae(rewards, values, torch.ones(1, 3), 0.9, 0.8)
    close(adv, [[0.21712, 0.246, 0.3]])
    close(ret, [[0.71712, 0.846, 1.0]])
    # The same row ending one token earlier: the value past the end counts as 0.
    # t=1: delta = 0 + 0 - 0.6 = -0.6                    A1 = -0.6
    # t=0: delta = 0.04                                  A0 = 0.04 + 0.72 * -0.6 = -0.392
    adv, ret = gae(rewards, values, torch.tensor([[1.0, 1.0, 0.0]]), 0.9, 0.8)
    close(adv, [[-0.392, -0.6, 0.0]])
    close(ret, [[0.108, 0.0, 0.0]])


def gae_plain_loop(rewards, values, lengths, gamma, lam):
    """The textbook loop, one row and one token at a time: the reference."""
    advantages = [[0.0] * len(r) for r in rewards]
    for b, length in enumerate(lengths):
        last = 0.0
        for t in reversed(range(length)):
            next_value = values[b][t + 1] if t + 1 < length else 0.0
            delta = rewards[b][t] + gamma * next_value - values[b][t]
            last = delta + gamma * lam * last
            advantages[b][t] = last
    returns = [[a + (values[b][t] if t < lengths[b] else 0.0) if t < lengths[b] else 0.0
                for t, a in enumerate(row)] for b, row in enumerate(advantages)]
    return advantages, returns


@pytest.mark.parametrize("gamma, lam", [(1.0, 0.95), (0.9, 0.5), (1.0, 1.0), (0.99, 0.0)])
def test_gae_matches_a_plain_python_loop(gamma, lam):
    rng = random.Random(0)
    B, T = 6, 9
    lengths = [rng.randint(1, T) for _ in range(B)]
    rewards = [[rng.uniform(-1, 1) for _ in range(T)] for _ in range(B)]
    values = [[rng.uniform(-1, 1) for _ in range(T)] for _ in range(B)]
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(T)] for n in lengths])
    adv, ret = gae(torch.tensor(rewards), torch.tensor(values), mask, gamma, lam)
    expected_adv, expected_ret = gae_plain_loop(rewards, values, lengths, gamma, lam)
    torch.testing.assert_close(adv, torch.tensor(expected_adv), atol=1e-5, rtol=0)
    torch.testing.assert_close(ret, torch.tensor(expected_ret), atol=1e-5, rtol=0)


def test_gae_with_lambda_1_and_zero_values_gives_monte_carlo_returns():
    rewards = torch.tensor([[0.5, -0.1, 2.0]])
    adv, ret = gae(rewards, torch.zeros(1, 3), torch.ones(1, 3), 0.9, 1.0)
    close(ret, discounted_returns(rewards, torch.ones(1, 3), 0.9).tolist())


def test_explained_variance():
    # var(returns [1, 3]) = 2; errors [0, 1]: var 0.5 -> 1 - 0.25 = 0.75
    assert explained_variance(torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, 3.0]]), torch.ones(1, 2)) == pytest.approx(0.75)
    perfect = torch.tensor([[1.0, 2.0, 5.0]])
    assert explained_variance(perfect, perfect, torch.ones(1, 3)) == pytest.approx(1.0)
