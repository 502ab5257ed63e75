import math

import pytest
import torch

from engine.rl.catalog import AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES
from engine.rl.losses import grpo_loss
from engine.rl.surrogates import clipped_surrogate
from engine.rl.masking import masked_mean
from engine.rl.kl import kl_k1, kl_k3
from engine.model.tensors import completion_mask, entropy_from_logits, selective_log_softmax


def _aggregator(loss_type):
    """The aggregation a loss type declares, called as (per_token_loss, mask, L)."""
    entry = AGGREGATIONS.entry(POLICY_LOSSES.declares(loss_type).aggregation)
    return lambda per_token_loss, mask, length: entry.call(per_token_loss, mask, max_completion_length=length)


# Each built-in loss type's aggregation (engine.rl.catalog), by loss type.
LOSS_AGGREGATORS = {name: _aggregator(name) for name in ("grpo", "dr_grpo", "dapo")}

LN = math.log


def close(actual, expected, atol=1e-5):
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=0)


# ---------------------------------------------------------------- log-probs / entropy


def test_selective_log_softmax_hand_worked():
    # row [0, ln 3]: softmax [1/4, 3/4], pick 1 -> ln 0.75
    # row [0, 0]:    softmax [1/2, 1/2], pick 0 -> ln 0.5
    logits = torch.tensor([[[0.0, LN(3)], [0.0, 0.0]]])  # (1, 2, 2)
    index = torch.tensor([[1, 0]])
    close(selective_log_softmax(logits, index), [[LN(0.75), LN(0.5)]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_selective_log_softmax_matches_log_softmax(dtype):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 11, generator=g) * 4).to(dtype)
    index = torch.randint(0, 11, (3, 5), generator=g)
    expected = torch.log_softmax(logits, -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(selective_log_softmax(logits, index), expected)


def test_selective_log_softmax_bf16_uses_log_softmax_path():
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(2, 4, 50, generator=g) * 4).bfloat16()
    index = torch.randint(0, 50, (2, 4), generator=g)
    out = selective_log_softmax(logits, index)
    assert out.dtype == torch.bfloat16
    # identical to bf16 log_softmax + gather
    expected = torch.log_softmax(logits, -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def test_selective_log_softmax_gradient_matches():
    logits = torch.randn(2, 3, 7, requires_grad=True)
    index = torch.randint(0, 7, (2, 3))
    selective_log_softmax(logits, index).sum().backward()
    got = logits.grad.clone()
    logits.grad = None
    torch.log_softmax(logits, -1).gather(-1, index.unsqueeze(-1)).sum().backward()
    torch.testing.assert_close(got, logits.grad)


def test_entropy_hand_worked():
    # p = [1/4, 3/4]: H = -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335
    logits = torch.tensor([[[0.0, LN(3)]]])
    close(entropy_from_logits(logits), [[0.562335]])


def test_entropy_uniform_is_log_v():
    # uniform over V: H = -V * (1/V) ln(1/V) = ln V; any constant logit value
    logits = torch.full((2, 3, 17), 2.5)
    close(entropy_from_logits(logits), torch.full((2, 3), LN(17)))


@pytest.mark.parametrize("chunk_size", [1, 4, 128])
def test_entropy_matches_direct_formula_any_chunk(chunk_size):
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 5, 13, generator=g) * 3
    p = torch.softmax(logits, -1)
    expected = -(p * torch.log_softmax(logits, -1)).sum(-1)  # (B, T)
    torch.testing.assert_close(entropy_from_logits(logits, chunk_size=chunk_size), expected)


def test_entropy_minus_inf_logits_are_zero_probability():
    # [0, 0, -inf]: two equally likely tokens -> ln 2, not nan
    logits = torch.tensor([[[0.0, 0.0, -math.inf]]])
    close(entropy_from_logits(logits), [[LN(2)]])


# ---------------------------------------------------------------- masks


def test_completion_mask_hand_worked():
    ids = torch.tensor(
        [
            [5, 2, 7, 2],  # EOS at 1 kept, everything after (incl. 2nd EOS) dropped
            [5, 5, 5, 5],  # no EOS: truncated, all real
            [2, 0, 0, 0],  # EOS first: only the EOS counts
            [5, 5, 5, 2],  # EOS last
        ]
    )
    expected = [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 1]]
    assert completion_mask(ids, 2).tolist() == expected


@pytest.mark.parametrize("eos", [[2, 3], (3, 2), {2, 3}])
def test_completion_mask_several_eos_ids(eos):
    ids = torch.tensor([[5, 3, 2, 0], [2, 3, 0, 0], [5, 5, 5, 5]])
    # first of {2, 3}: row 0 at 1, row 1 at 0, row 2 none
    assert completion_mask(ids, eos).tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]]


def test_masked_mean_hand_worked():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    close(masked_mean(values, mask), 1.5)  # (1 + 2) / 2
    close(masked_mean(values, mask, dim=1), [1.5, 0.0])  # row 1 empty: 0 / clamp(0, 1)
    # garbage (even inf/nan) under the mask changes nothing
    values[0, 2], values[1, 0] = math.inf, math.nan
    close(masked_mean(values, mask), 1.5)
    close(masked_mean(values, mask.bool(), dim=1), [1.5, 0.0])


# ---------------------------------------------------------------- KL


def test_kl_hand_worked():
    lp, ref = torch.tensor([LN(0.5)]), torch.tensor([LN(0.25)])
    close(kl_k1(lp, ref), [LN(2)])  # ln 0.5 - ln 0.25 = ln 2 = 0.693147
    # ref - lp = ln 0.5: k3 = 0.5 - ln 0.5 - 1 = 0.5 + 0.693147 - 1 = 0.193147
    close(kl_k3(lp, ref), [0.193147])
    close(kl_k3(lp, lp), [0.0])
    assert dict(KL_ESTIMATORS) == {"k1": kl_k1, "k3": kl_k3}


def test_k3_non_negative_and_unbiased_over_full_support():
    # pi = [0.5, 0.5], ref = [0.25, 0.75]
    # KL(pi||ref) = 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.346574 - 0.202733 = 0.143841
    # k3 at x0 = 0.193147 (above); x1: ref - lp = ln 1.5 -> 1.5 - 0.405465 - 1 = 0.094535
    # E_pi[k3] = 0.5 * 0.193147 + 0.5 * 0.094535 = 0.143841; E_pi[k1] the same
    lp, ref = torch.tensor([LN(0.5), LN(0.5)]), torch.tensor([LN(0.25), LN(0.75)])
    close((0.5 * kl_k3(lp, ref)).sum(), 0.143841)
    close((0.5 * kl_k1(lp, ref)).sum(), 0.143841)
    g = torch.Generator().manual_seed(3)
    assert (kl_k3(torch.randn(100, generator=g) * 3, torch.randn(100, generator=g) * 3) >= 0).all()


# ---------------------------------------------------------------- clipped surrogate

RATIOS = [1.0, 1.5, 0.5, 1.25]


def _lp_old(ratios_rows):
    """old = 0 so logprobs = ln ratio and ratio = exp(lp - old) exactly the given ratios."""
    lp = torch.log(torch.tensor(ratios_rows))
    return lp, torch.zeros_like(lp)


def test_clipped_surrogate_hand_worked_asymmetric_eps():
    lp, old = _lp_old([RATIOS, RATIOS])
    adv = torch.tensor([1.0, -1.0])  # (B,) per sequence
    loss, ratio, low, high = clipped_surrogate(lp, old, adv, 0.2, 0.28)
    # clip range [0.8, 1.28]
    # A=+1: r 1.0 -> -min(1, 1) = -1
    #       r 1.5 -> -min(1.5, 1.28) = -1.28            (high clipped)
    #       r 0.5 -> -min(0.5, 0.8) = -0.5              (unclipped branch wins)
    #       r 1.25 -> -min(1.25, 1.25) = -1.25          (inside 1.28, not clipped)
    # A=-1: r 1.0 -> -min(-1, -1) = 1
    #       r 1.5 -> -min(-1.5, -1.28) = 1.5            (unclipped branch wins)
    #       r 0.5 -> -min(-0.5, -0.8) = 0.8             (low clipped)
    #       r 1.25 -> -min(-1.25, -1.25) = 1.25
    close(loss, [[-1.0, -1.28, -0.5, -1.25], [1.0, 1.5, 0.8, 1.25]])
    close(ratio, [RATIOS, RATIOS])
    assert high.tolist() == [[False, True, False, False], [False] * 4]
    assert low.tolist() == [[False] * 4, [False, False, True, False]]


def test_clipped_surrogate_symmetric_eps_clips_125():
    lp, old = _lp_old([RATIOS])
    loss, _, low, high = clipped_surrogate(lp, old, torch.tensor([1.0]), 0.2, 0.2)
    # clip range [0.8, 1.2]: r 1.25 now -> -min(1.25, 1.2) = -1.2, high clipped
    close(loss, [[-1.0, -1.2, -0.5, -1.2]])
    assert high.tolist() == [[False, True, False, True]]


def test_clipped_surrogate_gradient_zero_where_clipped():
    lp, old = _lp_old([RATIOS, RATIOS])
    lp.requires_grad_(True)
    loss, _, low, high = clipped_surrogate(lp, old, torch.tensor([1.0, -1.0]), 0.2, 0.28)
    loss.sum().backward()
    # unclipped: d(-r A)/d lp = -A r ; clipped: constant -> 0
    expected = [[-1.0, 0.0, -0.5, -1.25], [1.0, 1.5, 0.0, 1.25]]
    close(lp.grad, expected)
    assert ((lp.grad == 0) == (low | high)).all()


def test_clipped_surrogate_per_token_advantages_broadcast():
    lp, old = _lp_old([RATIOS, RATIOS])
    per_seq = clipped_surrogate(lp, old, torch.tensor([1.0, -1.0]), 0.2, 0.28)
    per_tok = clipped_surrogate(lp, old, torch.tensor([[1.0] * 4, [-1.0] * 4]), 0.2, 0.28)
    for a, b in zip(per_seq, per_tok):
        torch.testing.assert_close(a, b)
    # mixed signs within a row: A [+1, -1] at r 1.5 -> [-1.28 (clipped), 1.5]
    loss, _, _, _ = clipped_surrogate(lp[:1, :2], old[:1, :2], torch.tensor([[1.0, -1.0]]), 0.2, 0.28)
    close(loss, [[-1.0, 1.5]])


# ---------------------------------------------------------------- aggregation

PTL = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
PTL_MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])


@pytest.mark.parametrize(
    "loss_type, expected",
    [
        ("grpo", 4.0),  # row means (1+2)/2 = 1.5, (5+6+7+8)/4 = 6.5 -> mean 4.0
        ("dr_grpo", 3.625),  # (3 + 26) / (B=2 * L=4) = 29 / 8
        ("dapo", 29 / 6),  # (3 + 26) / 6 tokens = 4.8333
    ],
)
def test_aggregators_hand_worked(loss_type, expected):
    close(LOSS_AGGREGATORS[loss_type](PTL, PTL_MASK, 4), expected)
    # padding values don't matter, even inf
    garbage = PTL.clone()
    garbage[0, 2:] = math.inf
    close(LOSS_AGGREGATORS[loss_type](garbage, PTL_MASK, 4), expected)


def test_dr_grpo_uses_max_completion_length_not_padded_width():
    # 29 / (2 * 10) = 1.45
    close(LOSS_AGGREGATORS["dr_grpo"](PTL, PTL_MASK, 10), 1.45)


# ---------------------------------------------------------------- grpo_loss

KW = dict(beta=0.0, epsilon_low=0.2, epsilon_high=0.28, max_completion_length=4)


@pytest.mark.parametrize(
    "loss_type, expected",
    [
        ("grpo", -0.5),  # row means -2, +1 -> -0.5
        ("dapo", -1.0),  # (-2 - 2 + 1) / 3 tokens
        ("dr_grpo", -0.375),  # -3 / (2 * 4)
    ],
)
def test_grpo_loss_on_policy_per_loss_type(loss_type, expected):
    # ratio 1 everywhere -> per-token loss = -A: row 0 A=2 -> -2, row 1 A=-1 -> +1
    lp = torch.full((2, 3), -1.0)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    adv = torch.tensor([2.0, -1.0])
    loss, info, per_token = grpo_loss(lp, lp, None, adv, mask, loss_type=loss_type, **KW)
    close(loss, expected)
    assert info == {
        "kl": 0.0,
        "clip_ratio/low_mean": 0.0,
        "clip_ratio/high_mean": 0.0,
        "clip_ratio/region_mean": 0.0,
    }
    assert per_token["kl"] is None
    close(per_token["ratio"], torch.ones(2, 3))
    # old_logprobs=None means on-policy: same loss, still a gradient
    lp2 = lp.clone().requires_grad_(True)
    loss2, _, _ = grpo_loss(lp2, None, None, adv, mask, loss_type=loss_type, **KW)
    close(loss2, expected)
    loss2.backward()
    assert lp2.grad.abs().sum() > 0


def test_grpo_loss_kl_term_hand_worked():
    # A = 0 so only KL: k3 = 0.193147 per token (lp ln 0.5, ref ln 0.25)
    # beta 0.1 -> per-token loss 0.0193147; every aggregator's mean of a constant
    # over all-ones mask is that constant (dr_grpo: 2*4*c / (2*4))
    lp = torch.full((2, 4), LN(0.5))
    ref = torch.full((2, 4), LN(0.25))
    mask = torch.ones(2, 4)
    for loss_type in LOSS_AGGREGATORS:
        loss, info, per_token = grpo_loss(
            lp, lp, ref, torch.zeros(2), mask, loss_type=loss_type, **{**KW, "beta": 0.1}
        )
        close(loss, 0.0193147)
        assert info["kl"] == pytest.approx(0.193147, abs=1e-6)
        close(per_token["kl"], torch.full((2, 4), 0.193147))


def test_grpo_loss_beta_zero_skips_ref():
    g = torch.Generator().manual_seed(4)
    lp, old, ref = (torch.randn(2, 4, generator=g) for _ in range(3))
    mask, adv = torch.ones(2, 4), torch.tensor([1.0, -1.0])
    no_ref, info_no_ref, pt_no_ref = grpo_loss(lp, old, None, adv, mask, loss_type="grpo", **KW)
    with_ref, info_ref, pt_ref = grpo_loss(lp, old, ref, adv, mask, loss_type="grpo", **KW)
    close(no_ref, with_ref.item())  # beta 0: ref changes nothing in the loss
    assert info_no_ref["kl"] == 0.0 and pt_no_ref["kl"] is None
    assert info_ref["kl"] > 0  # but the KL is still reported when a ref is given
    # ref with nan must not poison the loss when beta == 0
    nan_ref, _, _ = grpo_loss(lp, old, torch.full((2, 4), math.nan), adv, mask, loss_type="grpo", **KW)
    assert torch.isfinite(nan_ref)


def test_grpo_loss_clip_metrics_hand_worked():
    # clip flags (eps 0.2 / 0.28, A [+1, -1], ratios [1, 1.5, 0.5, 1.25]):
    #   row 0 high [F, T, F, F]; row 1 low [F, F, T, F]
    lp, old = _lp_old([RATIOS, RATIOS])
    adv = torch.tensor([1.0, -1.0])
    # mask off row 1's last token: 7 tokens; low 1/7, high 1/7, region 2/7
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    _, info, per_token = grpo_loss(lp, old, None, adv, mask, loss_type="dapo", **KW)
    assert info["clip_ratio/low_mean"] == pytest.approx(1 / 7)
    assert info["clip_ratio/high_mean"] == pytest.approx(1 / 7)
    assert info["clip_ratio/region_mean"] == pytest.approx(2 / 7)
    assert per_token["clipped"].tolist() == [[False, True, False, False], [False, False, True, False]]
    # mask off the high-clipped token instead: high 0/7, low 1/7, region 1/7
    mask = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]])
    _, info, _ = grpo_loss(lp, old, None, adv, mask, loss_type="dapo", **KW)
    assert info["clip_ratio/high_mean"] == 0.0
    assert info["clip_ratio/low_mean"] == pytest.approx(1 / 7)
    assert info["clip_ratio/region_mean"] == pytest.approx(1 / 7)


@pytest.mark.parametrize("loss_type", sorted(LOSS_AGGREGATORS))
def test_grpo_loss_ignores_tokens_after_eos(loss_type):
    g = torch.Generator().manual_seed(5)
    ids = torch.tensor([[4, 4, 2, 9, 9], [4, 2, 9, 9, 9], [4, 4, 4, 4, 4]])  # eos = 2
    mask = completion_mask(ids, 2)  # [[1,1,1,0,0], [1,1,0,0,0], [1,1,1,1,1]]
    lp, old, ref = (torch.randn(3, 5, generator=g) * 0.3 for _ in range(3))
    adv = torch.tensor([1.0, -0.5, 0.25])
    kw = {**KW, "beta": 0.04, "max_completion_length": 5}

    lp1 = lp.clone().requires_grad_(True)
    loss1, info1, _ = grpo_loss(lp1, old, ref, adv, mask, loss_type=loss_type, **kw)
    loss1.backward()

    # scramble everything after EOS: huge ratios (clipped or not), huge KL
    pad = mask == 0
    lp2 = torch.where(pad, 30.0, lp).requires_grad_(True)
    old2 = torch.where(pad, -30.0, old)
    ref2 = torch.where(pad, -50.0, ref)
    loss2, info2, _ = grpo_loss(lp2, old2, ref2, adv, mask, loss_type=loss_type, **kw)
    loss2.backward()

    close(loss2, loss1.item())
    assert info2 == pytest.approx(info1)
    assert (lp1.grad[pad] == 0).all() and (lp2.grad[pad] == 0).all()
    torch.testing.assert_close(lp2.grad[~pad], lp1.grad[~pad])


@pytest.mark.parametrize("loss_type", sorted(LOSS_AGGREGATORS))
def test_grpo_loss_padding_overflow_gives_no_nan_gradient(loss_type):
    # at the padded token lp - old = 99 -> exp overflows to inf in fp32; the masked
    # backward would then be 0 * inf = nan unless padding is neutralised first
    lp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    old = ref = torch.tensor([[-1.0, -100.0]])
    mask = torch.tensor([[1, 0]])
    loss, info, per_token = grpo_loss(
        lp, old, ref, torch.tensor([1.0]), mask, loss_type=loss_type,
        **{**KW, "beta": 0.1, "max_completion_length": 2},
    )
    loss.backward()
    # real token: ratio 1, A 1 -> d(-r)/d lp = -1; kl grad 0 at lp == ref
    # dr_grpo divides by B * L = 1 * 2 -> -0.5
    scale = 0.5 if loss_type == "dr_grpo" else 1.0
    close(lp.grad, [[-1.0 * scale, 0.0]])
    assert info["kl"] == 0.0
    close(per_token["ratio"], [[1.0, 1.0]])


def test_grpo_loss_unknown_loss_type():
    lp = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="'dapo'.*'dr_grpo'.*'grpo'"):
        grpo_loss(lp, lp, None, torch.zeros(1), torch.ones(1, 2), loss_type="ppo", **KW)


# ---------------------------------------------------------------- GSPO, PPO, DPO

from engine.rl.losses import clipped_value_loss, ppo_policy_loss  # noqa: E402
from engine.rl.dpo_losses import dpo_loss, sequence_logps  # noqa: E402
from engine.rl.importance import sequence_log_ratio  # noqa: E402


def test_sequence_log_ratio_is_the_masked_token_mean():
    lp = torch.tensor([[0.2, 0.4, 9.0]])
    close(sequence_log_ratio(lp, torch.zeros(1, 3), torch.tensor([[1, 1, 0]])), [[0.3]])


def test_gspo_gives_every_token_the_sequence_ratio_and_clips_it_whole():
    # log-ratios [0.1, 0.5] -> sequence log-ratio 0.3 -> ratio e^0.3 = 1.3499 on both tokens
    lp = torch.tensor([[LN(0.5) + 0.1, LN(0.5) + 0.5]], requires_grad=True)
    old = torch.full((1, 2), LN(0.5))
    mask = torch.ones(1, 2)
    kwargs = dict(beta=0.0, epsilon_low=0.2, epsilon_high=0.2, loss_type="grpo", max_completion_length=2)
    loss, info, tok = grpo_loss(lp, old, None, torch.tensor([1.0]), mask, importance_sampling_level="sequence", **kwargs)
    close(tok["ratio"], [[math.exp(0.3)] * 2])
    assert tok["clipped"].all()  # 1.35 > 1.2 with A > 0: the whole sequence is clipped
    loss.backward()
    close(lp.grad, [[0.0, 0.0]])
    # Token level: only the second token (ratio e^0.5) is clipped.
    _, _, tok = grpo_loss(lp.detach(), old, None, torch.tensor([1.0]), mask, **kwargs)
    assert tok["clipped"].tolist() == [[False, True]]


def test_gspo_clip_ratios_count_sequences_not_tokens():
    # TRL counts GSPO's clip flags once per sequence: the ratio (and the clip) is one per
    # sequence, so a long clipped sequence must not weigh more than a short unclipped one.
    # Row 0: 3 real tokens, log-ratios [0.1, 0.5, 0.3] -> sequence log-ratio 0.3 -> e^0.3
    #        = 1.35 > 1.2 with A = +1: high-clipped (all 3 tokens flagged).
    # Row 1: 1 real token, log-ratio 0 -> ratio 1, A = -1: not clipped.
    # Per token: 3 of 4 tokens = 0.75; per sequence: 1 of 2 = 0.5.
    lp = torch.tensor([[0.1, 0.5, 0.3, 7.0], [0.0, 9.0, 9.0, 9.0]])
    old = torch.zeros(2, 4)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    adv = torch.tensor([1.0, -1.0])
    kwargs = dict(beta=0.0, epsilon_low=0.2, epsilon_high=0.2, loss_type="dapo", max_completion_length=4)
    _, info, tok = grpo_loss(lp, old, None, adv, mask, importance_sampling_level="sequence", **kwargs)
    assert tok["clipped"][0, :3].all() and not tok["clipped"][1, 0]
    assert info["clip_ratio/high_mean"] == 0.5
    assert info["clip_ratio/region_mean"] == 0.5
    assert info["clip_ratio/low_mean"] == 0.0
    # A row with no real token (a masked-out truncated completion) is not a sequence.
    empty = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    _, info, _ = grpo_loss(torch.cat([lp, torch.zeros(1, 4)]), torch.zeros(3, 4), None,
                           torch.tensor([1.0, -1.0, 1.0]), empty, importance_sampling_level="sequence", **kwargs)
    assert info["clip_ratio/region_mean"] == 0.5
    # token level still counts tokens: row 0's tokens 2 and 3 (e^0.5, e^0.3 > 1.2): 2 of 4
    _, info, _ = grpo_loss(lp, old, None, adv, mask, **kwargs)
    assert info["clip_ratio/high_mean"] == 0.5 and info["clip_ratio/region_mean"] == 0.5
    # ... which differs from the per-sequence count once row 1 has more tokens:
    # row 1 with 3 tokens, none clipped -> token 2/6, sequence still 1/2
    mask3 = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])
    lp3 = torch.tensor([[0.1, 0.5, 0.3, 7.0], [0.0, 0.0, 0.0, 9.0]])
    _, info, _ = grpo_loss(lp3, old, None, adv, mask3, **kwargs)
    assert info["clip_ratio/region_mean"] == pytest.approx(2 / 6)
    _, info, _ = grpo_loss(lp3, old, None, adv, mask3, importance_sampling_level="sequence", **kwargs)
    assert info["clip_ratio/region_mean"] == 0.5


def test_ppo_policy_loss_clips_both_ways():
    mask = torch.ones(1, 2)
    old = torch.zeros(1, 2)
    # A > 0, ratios e^0.5 (clipped at 1.2) and 1 -> per-token -1.2, -1 -> mean -1.1
    lp = torch.tensor([[0.5, 0.0]], requires_grad=True)
    loss, info, tok = ppo_policy_loss(lp, old, torch.ones(1, 2), mask, 0.2)
    assert loss.item() == pytest.approx(-1.1)
    assert info["clipfrac"] == 0.5 and tok["clipped"].tolist() == [[True, False]]
    assert info["approxkl"] == pytest.approx(0.5 * 0.25 / 2)  # 0.5 * mean([0.25, 0])
    loss.backward()
    close(lp.grad, [[0.0, -0.5]])  # clipped token gives no gradient; d(-r/2)/dlp = -1/2
    # A < 0, ratio e^-0.5 = 0.61 < 0.8: clipped from below, loss 0.8
    lp = torch.tensor([[-0.5]], requires_grad=True)
    loss, info, _ = ppo_policy_loss(lp, torch.zeros(1, 1), -torch.ones(1, 1), torch.ones(1, 1), 0.2)
    assert loss.item() == pytest.approx(0.8) and info["clipfrac"] == 1.0
    loss.backward()
    assert lp.grad.item() == 0.0


def test_ppo_policy_loss_ignores_padding():
    lp = torch.tensor([[0.0, 50.0]])
    loss, info, _ = ppo_policy_loss(lp, torch.zeros(1, 2), torch.ones(1, 2), torch.tensor([[1.0, 0.0]]), 0.2)
    assert loss.item() == pytest.approx(-1.0) and info["clipfrac"] == 0.0


def test_clipped_value_loss_hand_worked():
    # V 2.0 moved from V_old 1.0, clip 0.2 -> 1.2; R 3.0: plain (2-3)^2 = 1, clipped (1.2-3)^2 = 3.24
    v = torch.tensor([[2.0]], requires_grad=True)
    loss, info = clipped_value_loss(v, torch.tensor([[1.0]]), torch.tensor([[3.0]]), torch.ones(1, 1), 0.2)
    assert loss.item() == pytest.approx(1.62) and info["clipfrac"] == 1.0
    loss.backward()
    assert v.grad.item() == 0.0  # the clipped branch wins and does not depend on V
    # within the clip range the plain error is used: V 1.1, R 3 -> 0.5 * 1.9^2 = 1.805, grad (1.1-3) = -1.9
    v = torch.tensor([[1.1]], requires_grad=True)
    loss, info = clipped_value_loss(v, torch.tensor([[1.0]]), torch.tensor([[3.0]]), torch.ones(1, 1), 0.2)
    assert loss.item() == pytest.approx(1.805) and info["clipfrac"] == 0.0
    loss.backward()
    assert v.grad.item() == pytest.approx(-1.9)


def test_clipped_value_loss_rounding_noise_is_not_clipping():
    # V -0.1, V_old 0.03, c 0.2: |V - V_old| = 0.13 <= 0.2, inside the range, so nothing is
    # clipped and the plain error is used: R -0.2, 0.5 * (-0.1 + 0.2)^2 = 0.005, gradient
    # V - R = 0.1. V_old + clamp(V - V_old, -c, c) is V + 7.45e-9 in float32 (V - V_old
    # rounds), a hair further from R, so its squared error came out larger and the token
    # was counted as clipped (clipfrac 1).
    v = torch.tensor([[-0.1]], requires_grad=True)
    loss, info = clipped_value_loss(v, torch.tensor([[0.03]]), torch.tensor([[-0.2]]), torch.ones(1, 1), 0.2)
    assert info["clipfrac"] == 0.0
    assert loss.item() == pytest.approx(0.005)
    loss.backward()
    assert v.grad.item() == pytest.approx(0.1)


def test_sequence_logps_sum_and_average():
    lp, mask = torch.tensor([[-1.0, -2.0, -9.0]]), torch.tensor([[1, 1, 0]])
    close(sequence_logps(lp, mask), [-3.0])
    close(sequence_logps(lp, mask, average=True), [-1.5])


def _dpo(h, **kwargs):
    """Policy logps so that the log-ratio difference is h, reference at 0."""
    zero = torch.zeros(1)
    return dpo_loss(torch.tensor([h]), zero, zero, zero, **kwargs)


def test_dpo_losses_closed_forms():
    # sigmoid, h = 2, beta 0.5: -log sigmoid(1) = log(1 + e^-1) = 0.31326
    assert _dpo(2.0, beta=0.5)[0].item() == pytest.approx(math.log1p(math.exp(-1)), abs=1e-6)
    # label smoothing 0.1: 0.9 * 0.31326 + 0.1 * log(1 + e^1) = 0.9 * 0.31326 + 0.1 * 1.31326 = 0.41326
    assert _dpo(2.0, beta=0.5, label_smoothing=0.1)[0].item() == pytest.approx(0.41326, abs=1e-5)
    # hinge: relu(1 - beta * h): h 2 -> 0; h 1 -> 0.5
    assert _dpo(2.0, beta=0.5, loss_type="hinge")[0].item() == 0.0
    assert _dpo(1.0, beta=0.5, loss_type="hinge")[0].item() == pytest.approx(0.5)
    # ipo: (h - 1 / (2 beta))^2: beta 0.5 -> (h - 1)^2; h 3 -> 4; h 1 -> 0
    assert _dpo(3.0, beta=0.5, loss_type="ipo")[0].item() == pytest.approx(4.0)
    assert _dpo(1.0, beta=0.5, loss_type="ipo")[0].item() == pytest.approx(0.0)
    with pytest.raises(ValueError, match="allowed"):
        _dpo(1.0, beta=0.5, loss_type="kto")


def test_dpo_implicit_rewards_and_gradient_direction():
    chosen = torch.tensor([-2.0], requires_grad=True)
    rejected = torch.tensor([-3.0], requires_grad=True)
    losses, r_chosen, r_rejected = dpo_loss(chosen, rejected, torch.tensor([-2.5]), torch.tensor([-2.0]), beta=0.1)
    close(r_chosen, [0.05])    # 0.1 * (-2 - -2.5)
    close(r_rejected, [-0.1])  # 0.1 * (-3 - -2)
    losses.sum().backward()
    # the loss pushes the chosen logp up and the rejected one down, equally
    assert chosen.grad.item() < 0 < rejected.grad.item()
    assert chosen.grad.item() == pytest.approx(-rejected.grad.item())
    # d/dh of -log sigmoid(beta h) = -beta * sigmoid(-beta h); h = 1.5
    assert chosen.grad.item() == pytest.approx(-0.1 / (1 + math.exp(0.15)), abs=1e-6)
