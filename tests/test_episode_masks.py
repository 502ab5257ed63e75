"""Multi-turn episodes: the tokens a tool wrote are attended to but never trained.

The maths below is worked by hand on a row whose middle token is a tool token (mask
[1, 0, 1]): every average counts the model's tokens only, and returns and GAE carry
across the masked span as if the model's tokens were contiguous.
"""

import math

import pytest
import torch

from engine.model.rollout import Rollout
from engine.rl.advantages import discounted_returns, gae, last_model_token, last_token_rewards, ppo_token_rewards
from engine.rl.losses import grpo_loss

# one episode: model token, tool token, model token (then padding)
MASK = torch.tensor([[1.0, 0.0, 1.0, 0.0]])


def test_last_model_token_skips_tool_tokens_and_padding():
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    assert last_model_token(mask).tolist() == [1, 2, 0, 3]


def test_score_goes_on_the_last_model_token():
    # worked: the last 1 of [1, 0, 1, 0] is position 2
    assert last_token_rewards(torch.tensor([2.0]), MASK).tolist() == [[0.0, 0.0, 2.0, 0.0]]


def test_discounted_returns_carry_across_a_tool_span():
    # model tokens at 0 and 2; reward 1 on 2; gamma 0.5: G_2 = 1, G_0 = 0 + 0.5 * 1 (the tool token
    # is not a step of the model's, so it does not discount)
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    assert discounted_returns(rewards, MASK, 0.5).tolist() == [[0.5, 0.0, 1.0, 0.0]]


def test_gae_across_a_masked_span_equals_gae_over_the_model_tokens():
    # By hand, over the model's tokens alone (r = [0, 1], V = [0.5, 0.25], gamma 0.9, lam 0.8):
    #   delta_1 = 1 - 0.25 = 0.75                  A_1 = 0.75
    #   delta_0 = 0 + 0.9 * 0.25 - 0.5 = -0.275   A_0 = -0.275 + 0.9 * 0.8 * 0.75 = 0.265
    # The tool token's value (7, the critic's guess there) and reward must play no part.
    rewards = torch.tensor([[0.0, 5.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 7.0, 0.25, 0.0]])
    adv, ret = gae(rewards, values, MASK, gamma=0.9, lam=0.8)
    assert adv[0].tolist() == pytest.approx([0.265, 0.0, 0.75, 0.0])
    assert ret[0].tolist() == pytest.approx([0.765, 0.0, 1.0, 0.0])
    # and it is exactly GAE on the compressed row
    adv_c, ret_c = gae(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.25]]), torch.ones(1, 2), 0.9, 0.8)
    assert adv[0, [0, 2]].tolist() == pytest.approx(adv_c[0].tolist())


def test_gae_without_holes_is_unchanged():
    # the docstring's single-turn example, worked before episodes existed
    adv, ret = gae(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.5]]), torch.ones(1, 2), 1.0, 1.0)
    assert adv.tolist() == [[0.5, 0.5]] and ret.tolist() == [[1.0, 1.0]]


def test_ppo_token_rewards_ignore_the_tool_token():
    kl = torch.tensor([[0.5, 3.0, 1.0, 0.0]])
    rewards, non_score = ppo_token_rewards(torch.tensor([1.0]), kl, MASK, 0.1)
    # -0.1 * kl on model tokens only; the score on position 2
    assert non_score[0].tolist() == pytest.approx([-0.05, 0.0, -0.1, 0.0])
    assert rewards[0].tolist() == pytest.approx([-0.05, 0.0, 0.9, 0.0])


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_grpo_losses_average_over_model_tokens_only(loss_type):
    """A tool token's logprob, ratio and KL change nothing: the loss on [1, 0, 1] equals the
    loss on the two model tokens alone, and the tool token gets no gradient."""
    logprobs = torch.tensor([[-1.0, -9.0, -2.0, 0.0], [-0.5, -0.5, -0.7, -0.2]], requires_grad=True)
    old = torch.tensor([[-1.2, -0.1, -1.8, 0.0], [-0.6, -0.4, -0.7, -0.3]])
    ref = torch.tensor([[-1.1, -4.0, -2.1, 0.0], [-0.5, -0.6, -0.8, -0.2]])
    adv = torch.tensor([1.0, -0.5])
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    kw = dict(beta=0.04, epsilon_low=0.2, epsilon_high=0.28, loss_type=loss_type, max_completion_length=4)
    loss, info, _ = grpo_loss(logprobs, old, ref, adv, mask, **kw)
    loss.backward()
    assert logprobs.grad[0, 1] == 0.0 and logprobs.grad[0, 3] == 0.0
    # the same row with the tool token's numbers changed: the same loss
    lp2 = logprobs.detach().clone()
    lp2[0, 1] = -0.01
    old2, ref2 = old.clone(), ref.clone()
    old2[0, 1], ref2[0, 1] = -3.0, -0.2
    loss2, info2, _ = grpo_loss(lp2, old2, ref2, adv, mask, **kw)
    assert float(loss2) == pytest.approx(float(loss))
    assert info2["kl"] == pytest.approx(info["kl"])


def test_dapo_denominator_counts_model_tokens():
    """dapo: the sum of per-token losses over the batch's model tokens, divided by their
    count. Worked with ratio 1 (logprobs = old), beta 0: per-token loss = -A.
    Row 0: A = 1 on 2 model tokens; row 1: A = -0.5 on 4 -> (-1 - 1 + 0.5 * 4) / 6 = 0."""
    lp = torch.zeros(2, 4)
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -0.5])
    loss, _, _ = grpo_loss(lp, lp, None, adv, mask, beta=0.0, epsilon_low=0.2, epsilon_high=0.2,
                           loss_type="dapo", max_completion_length=4)
    assert float(loss) == pytest.approx(0.0)
    # grpo (per-sequence means): row 0 mean -1, row 1 mean 0.5 -> (-1 + 0.5) / 2 = -0.25
    loss, _, _ = grpo_loss(lp, lp, None, adv, mask, beta=0.0, epsilon_low=0.2, epsilon_high=0.2,
                           loss_type="grpo", max_completion_length=4)
    assert float(loss) == pytest.approx(-0.25)
    # dr_grpo: the sum over model tokens / (rows x max_completion_length) = (-2 + 2) / 8 = 0; with A = 1
    # on row 0 only: -2 / 8
    loss, _, _ = grpo_loss(lp, lp, None, torch.tensor([1.0, 0.0]), mask, beta=0.0, epsilon_low=0.2,
                           epsilon_high=0.2, loss_type="dr_grpo", max_completion_length=4)
    assert float(loss) == pytest.approx(-0.25)
    assert not math.isnan(float(loss))


def test_rollout_masks_of_an_episode():
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]])
    tool = torch.tensor([[0.0, 0.0, 1.0, 1.0, 0.0, 0.0]])
    r = Rollout(torch.ones(1, 2, dtype=torch.long), torch.ones(1, 2, dtype=torch.long),
                torch.arange(6)[None], mask, torch.zeros(1, 6), torch.tensor([False]),
                tool_mask=tool, turns=torch.tensor([[0, 0, 0, 0, 1, 0]]))
    assert r.present_mask.tolist() == [[1, 1, 1, 1, 1, 0]]
    assert r.lengths.tolist() == [5] and r.model_lengths.tolist() == [3]
    picked = r.select(torch.tensor([0, 0]))
    assert picked.tool_mask.shape == (2, 6) and picked.turns[1].tolist() == [0, 0, 0, 0, 1, 0]
    # a single-turn rollout keeps its None fields
    plain = Rollout(r.prompt_ids, r.prompt_mask, r.completion_ids, mask, r.sampling_logprobs, r.truncated)
    assert plain.select(torch.tensor([0])).tool_mask is None and plain.lengths.tolist() == [3]
