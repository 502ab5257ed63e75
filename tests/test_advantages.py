import math

import pytest
import torch

from engine.advantages import group_advantages, group_reward_std


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


REWARDS = torch.tensor([1.0, 0.0, 1.0, 1.0])  # two prompts, G = 2


def test_group_scaling_hand_worked():
    # groups [[1, 0], [1, 1]] -> means [0.5, 1] -> centred [0.5, -0.5, 0, 0]
    # unbiased std group 0: sqrt(((0.5)^2 + (-0.5)^2) / (2 - 1)) = sqrt(0.5); group 1: 0
    # A = [0.5 / (sqrt(0.5) + 1e-4), -0.5 / (sqrt(0.5) + 1e-4), 0 / 1e-4, 0 / 1e-4]
    a = 0.5 / (math.sqrt(0.5) + 1e-4)  # = 0.70700
    close(group_advantages(REWARDS, 2), [a, -a, 0.0, 0.0])


def test_batch_scaling_hand_worked():
    # centred per group as above: [0.5, -0.5, 0, 0]
    # batch std of [1, 0, 1, 1]: mean 0.75, squared deviations
    # [0.0625, 0.5625, 0.0625, 0.0625] sum 0.75, / (4 - 1) = 0.25 -> std 0.5
    # A = centred / (0.5 + 1e-4)
    a = 0.5 / 0.5001  # = 0.99980
    close(group_advantages(REWARDS, 2, scale_rewards="batch"), [a, -a, 0.0, 0.0])


def test_no_scaling_is_just_centred():
    # [1 - 0.5, 0 - 0.5, 1 - 1, 1 - 1]
    close(group_advantages(REWARDS, 2, scale_rewards="none"), [0.5, -0.5, 0.0, 0.0])


def test_group_of_three():
    # group [3, 0, 0]: mean 1, centred [2, -1, -1], var (4 + 1 + 1) / 2 = 3, std sqrt(3)
    # group [2, 2, 2]: centred [0, 0, 0]
    rewards = torch.tensor([3.0, 0.0, 0.0, 2.0, 2.0, 2.0])
    s = math.sqrt(3) + 1e-4
    close(group_advantages(rewards, 3), [2 / s, -1 / s, -1 / s, 0.0, 0.0, 0.0])
    # eps is what is added to the std: eps=1 -> divide by sqrt(3) + 1
    s1 = math.sqrt(3) + 1
    close(group_advantages(rewards, 3, eps=1.0), [2 / s1, -1 / s1, -1 / s1, 0.0, 0.0, 0.0])


def test_generations_must_be_contiguous_per_prompt():
    # Same multiset of rewards, different grouping -> different advantages.
    # [1, 1, 0, 1] with G=2: groups [1, 1] and [0, 1] -> centred [0, 0, -0.5, 0.5]
    close(group_advantages(torch.tensor([1.0, 1.0, 0.0, 1.0]), 2, "none"), [0.0, 0.0, -0.5, 0.5])


def test_integer_rewards_accepted():
    # int [2, 0] -> mean 1 -> centred [1, -1]
    close(group_advantages(torch.tensor([2, 0]), 2, "none"), [1.0, -1.0])


def test_group_reward_std_hand_worked():
    # groups [[1, 0], [1, 1]] -> [sqrt(0.5 / 1), 0]
    close(group_reward_std(REWARDS, 2), [math.sqrt(0.5), 0.0])
    # frac_reward_zero_std: 1 of 2 groups has zero std
    assert (group_reward_std(REWARDS, 2) == 0).float().mean().item() == 0.5


def test_errors():
    with pytest.raises(ValueError, match="divisible"):
        group_advantages(torch.zeros(5), 2)
    with pytest.raises(ValueError, match="divisible"):
        group_reward_std(torch.zeros(5), 2)
    with pytest.raises(ValueError, match="'batch'.*'group'.*'none'"):
        group_advantages(REWARDS, 2, scale_rewards="global")
    with pytest.raises(ValueError, match="num_generations"):
        group_advantages(REWARDS, 1)
