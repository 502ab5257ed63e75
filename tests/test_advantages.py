import math

import pytest
import torch

from engine.rl.advantages import group_advantages, group_reward_std


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


# --------------------------------------------- equal rewards give exactly zero advantage
# In float32 the mean of eight 0.7s is not 0.7: the residue (~6e-8) divided by std + eps
# (1e-4) gave advantages of +-6e-4 to a group with no signal, and its std was not 0, so
# frac_reward_zero_std (exact zero std) missed it.

from engine.rl.advantages import reinforce_pp_baseline_advantages, rloo_advantages  # noqa: E402

EQUAL_GROUPS = [0.7, 0.1, 0.3, 1 / 3, 0.9, 2.7, 0.05]  # none has an exact float32 mean of 8 copies


@pytest.mark.parametrize("value", EQUAL_GROUPS)
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_a_group_of_equal_rewards_gets_exactly_zero_advantage(value, scale):
    # group 0 all equal; group 1 [0, 1, 0, 1, ...] has signal (mean 0.5, so batch std > 0)
    rewards = torch.tensor([value] * 8 + [0.0, 1.0] * 4)
    out = group_advantages(rewards, 8, scale)
    assert out.dtype == torch.float32
    assert torch.equal(out[:8], torch.zeros(8))
    # the other group is untouched: centred +-0.5; group std sqrt(8 * 0.25 / 7)
    if scale == "group":
        a = 0.5 / (math.sqrt(2 / 7) + 1e-4)
        close(out[8:], [-a, a] * 4)


@pytest.mark.parametrize("value", EQUAL_GROUPS)
@pytest.mark.parametrize("G", [7, 8, 12])
def test_equal_rewards_have_exactly_zero_std(value, G):
    # float32 gave e.g. 6.4e-8 for seven 0.7s
    assert group_reward_std(torch.tensor([value] * G), G).item() == 0.0
    assert torch.equal(group_advantages(torch.tensor([value] * G), G), torch.zeros(G))
    # frac_reward_zero_std counts exactly those groups: 1 of 2
    std = group_reward_std(torch.tensor([value] * G + [0.0, 1.0] + [0.5] * (G - 2)), G)
    assert (std == 0).float().mean().item() == 0.5


@pytest.mark.parametrize("value", EQUAL_GROUPS)
def test_rloo_equal_rewards_give_exactly_zero(value):
    # baseline = (sum - r) / (G - 1) must be r itself when all are equal
    out = rloo_advantages(torch.tensor([value] * 8 + [1.0, 0.0] * 4), 8)
    assert torch.equal(out[:8], torch.zeros(8))
    # group [1, 0, 1, 0, ...]: baselines 3/7 (for a 1) and 4/7 (for a 0) -> 4/7, -4/7
    close(out[8:], [4 / 7, -4 / 7] * 4)


@pytest.mark.parametrize("value", EQUAL_GROUPS)
def test_reinforce_pp_baseline_equal_rewards_give_exactly_zero(value):
    mask = torch.ones(16, 3)
    # every group equal: nothing to whiten, every advantage exactly 0
    out = reinforce_pp_baseline_advantages(torch.tensor([value] * 8 + [0.2] * 8), mask, 8)
    assert torch.equal(out, torch.zeros(16, 3))
    # one equal group beside a symmetric one (centred +-0.5, batch mean 0): the equal
    # group's centred 0 whitens to exactly 0; the other to +-0.5 / std, with the unbiased
    # std over 48 tokens of which 24 are +-0.5: sqrt(24 * 0.25 / 47)
    out = reinforce_pp_baseline_advantages(torch.tensor([value] * 8 + [1.0, 0.0] * 4), mask, 8)
    assert torch.equal(out[:8], torch.zeros(8, 3))
    a = 0.5 / math.sqrt(24 * 0.25 / 47 + 1e-8)
    close(out[8:, 0], [a, -a] * 4)


# ------------------------- equal float64 rewards: the mean is not the value in its last bit
# Rewards as Python floats (float64): mean(0.7, 0.7, 0.7) = 2.0999999999999996 / 3
# = 0.6999999999999998, so each centred reward was 1.1e-16, the group std 1.4e-16 (not
# counted by frac_reward_zero_std) and the advantage 1.1e-16 / (1.4e-16 + 1e-4) = 1.1e-12.


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_three_equal_float64_rewards_give_exactly_zero(scale):
    rewards = torch.tensor([0.7, 0.7, 0.7, 1.0, 0.0, 2.0], dtype=torch.float64)  # G = 3
    out = group_advantages(rewards, 3, scale)
    assert torch.equal(out[:3], torch.zeros(3))
    # group [1, 0, 2]: mean 1, centred [0, -1, 1], unbiased std sqrt((0 + 1 + 1) / 2) = 1
    if scale == "group":
        a = 1 / (1 + 1e-4)
        close(out[3:], [0.0, -a, a])
    std = group_reward_std(rewards, 3)
    assert std[0].item() == 0.0 and (std == 0).float().mean().item() == 0.5
    close(std, [0.0, 1.0])
    # RLOO: 3 / 2 * centred -> [0, 0, 0, 0, -1.5, 1.5]
    rloo = rloo_advantages(rewards, 3)
    assert torch.equal(rloo[:3], torch.zeros(3))
    close(rloo[3:], [0.0, -1.5, 1.5])
    # REINFORCE++-baseline: the equal group's centred zeros whiten to exact zeros
    out = reinforce_pp_baseline_advantages(rewards, torch.ones(6, 2), 3)
    assert torch.equal(out[:3], torch.zeros(3, 2))
