"""GRPO's CISPO and SAPO loss types and the bias-corrected KL (issue 24): the per-token
math against numbers worked out by hand, each loss type's aggregation and default cap,
grpo_loss end to end, the preset's fields, and one in-process training step each."""

import math

import pytest
import torch

from conftest import small_preset_dict
from engine.algorithms.grpo.config import GRPOConfig
from engine.algorithms.grpo.trainer import GRPOTrainer
from engine.foundation.errors import PresetError
from engine.preset.schema import preset_from_dict
from engine.rl import catalog
from engine.rl.catalog import POLICY_LOSSES, SURROGATES, policy_loss_parts, upper_clip
from engine.rl.kl import bias_corrected_k3, kl_k3
from engine.rl.losses import grpo_loss
from engine.rl.surrogates import cispo, sapo
from engine.rl.user_code import _synthetic_batch, _try_surrogate, load_entry

LN = math.log
RATIOS = [0.5, 1.0, 2.0, 6.0]


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def tokens_at(ratios, logprob=-1.0, rows=1):
    """(logprobs with grad, old_logprobs, log ratio), `rows` rows of the same tokens:
    every logprob `logprob`, the old ones set so that pi / pi_old = `ratios`."""
    lp = torch.full((rows, len(ratios)), logprob, requires_grad=True)
    old = lp.detach() - torch.tensor([LN(r) for r in ratios])
    return lp, old, lp - old


# ------------------------------------------------------------------------------ CISPO


def test_cispo_weights_each_token_by_its_capped_ratio_and_never_cuts_the_gradient():
    # cap 5, logprob -1 everywhere, ratio [0.5, 1, 2, 6]:
    #   weight sg(min(r, 5))      = [0.5, 1, 2, 5]
    #   A = +1: loss -w * A * lp  = [0.5, 1, 2, 5];  d loss / d lp = -w * A = [-0.5, -1, -2, -5]
    #   A = -1: loss               = [-0.5, -1, -2, -5]; gradient        = [0.5, 1, 2, 5]
    # (PPO's clip at epsilon_high 0.28 gives ratio 2 and 6 with A = +1 no gradient at all.)
    # flagged: ratio > cap and A > 0 -> only the 6 of the A = +1 row
    lp, old, log_ratio = tokens_at(RATIOS, rows=2)
    advantages = torch.tensor([[1.0], [-1.0]])
    loss, ratio, flags = cispo(lp, old, advantages, torch.ones(2, 4), log_ratio=log_ratio, epsilon_high=5.0)
    close(loss, [[0.5, 1, 2, 5], [-0.5, -1, -2, -5]])
    close(ratio, [RATIOS, RATIOS])
    assert flags["cispo_clip_ratio"].tolist() == [[False, False, False, True], [False, False, False, False]]
    loss.sum().backward()
    close(lp.grad, [[-0.5, -1, -2, -5], [0.5, 1, 2, 5]])


def test_cispo_with_trls_fallback_cap_of_epsilon_shrinks_every_weight():
    # TRL's unset epsilon_high is epsilon, 0.2: min(r, 0.2) = 0.2 for all four ratios, so
    # every gradient is -0.2 * A (a fifth of REINFORCE's even on-policy) and all are flagged
    lp, old, log_ratio = tokens_at(RATIOS)
    loss, _, flags = cispo(lp, old, torch.tensor([[1.0]]), torch.ones(1, 4), log_ratio=log_ratio, epsilon_high=0.2)
    loss.sum().backward()
    close(lp.grad, [[-0.2, -0.2, -0.2, -0.2]])
    assert flags["cispo_clip_ratio"].all()


def test_an_unset_epsilon_high_is_5_for_cispo_and_epsilon_for_the_others():
    assert upper_clip("cispo", 0.2, None) == 5.0
    for loss_type in ("grpo", "dr_grpo", "dapo", "sapo", "my_losses.py:clip_cov"):
        assert upper_clip(loss_type, 0.2, None) == 0.2, loss_type
    assert upper_clip("cispo", 0.2, 3.0) == 3.0 and upper_clip("dapo", 0.2, 0.28) == 0.28
    assert SURROGATES.declares("cispo").default_epsilon_high == 5.0
    assert SURROGATES.declares("clipped").default_epsilon_high is None


def test_cispo_and_sapo_aggregate_as_trl_does():
    assert policy_loss_parts("cispo") == ("cispo", "token_mean")
    assert policy_loss_parts("sapo") == ("sapo", "sequence_mean")
    assert "cispo" in catalog.length_neutral_loss_types() and "sapo" not in catalog.length_neutral_loss_types()


def test_cispo_through_grpo_loss_is_a_token_mean_with_its_clip_ratio():
    # rows: ratios [0.5, 1, 2, 6] with A = +1, and the same with A = -1 but only 2 real tokens
    # per-token loss (lp = -1): [0.5, 1, 2, 5] and [-0.5, -1, (pad), (pad)]
    # token_mean over the 6 real tokens: (8.5 - 1.5) / 6 = 7/6
    # gradient: -w * A / 6 -> [[-0.5, -1, -2, -5], [0.5, 1, 0, 0]] / 6
    # cispo_clip_ratio: 1 flagged token of 6; the inspector marks that token
    lp, old, _ = tokens_at(RATIOS, rows=2)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    loss, info, per_token = grpo_loss(lp, old, None, torch.tensor([1.0, -1.0]), mask, beta=0.0, epsilon_low=0.2,
                                      epsilon_high=upper_clip("cispo", 0.2, None), loss_type="cispo",
                                      max_completion_length=4)
    assert loss.item() == pytest.approx(7 / 6, abs=1e-6)
    loss.backward()
    close(lp.grad, torch.tensor([[-0.5, -1, -2, -5], [0.5, 1, 0, 0]]) / 6)
    assert set(info) == {"kl", "cispo_clip_ratio"}
    assert info["cispo_clip_ratio"] == pytest.approx(1 / 6)
    assert per_token["clipped"].tolist() == [[False, False, False, True], [False, False, False, False]]
    close(per_token["ratio"], [RATIOS, [0.5, 1, 1, 1]])  # padding: ratio 1


def test_cispo_at_sequence_level_caps_the_sequences_ratio_and_counts_sequences():
    # TRL accepts cispo with importance_sampling_level sequence (it only warns that the
    # token mean weighs a sequence by its length), so we do too.
    # row 0: token log ratios [ln 2, ln 18] -> sequence ratio sqrt(36) = 6 > 5: weight 5 on
    # both tokens, flagged; row 1: [0, 0] -> ratio 1. A = +1, lp = -1:
    # per token [[5, 5], [1, 1]], token mean 3; clip ratio over sequences 1/2
    lp = torch.full((2, 2), -1.0, requires_grad=True)
    old = lp.detach() - torch.tensor([[LN(2), LN(18)], [0.0, 0.0]])
    loss, info, per_token = grpo_loss(lp, old, None, torch.tensor([1.0, 1.0]), torch.ones(2, 2), beta=0.0,
                                      epsilon_low=0.2, epsilon_high=5.0, loss_type="cispo",
                                      max_completion_length=2, importance_sampling_level="sequence")
    assert loss.item() == pytest.approx(3.0, abs=1e-5)
    assert info["cispo_clip_ratio"] == pytest.approx(0.5)
    close(per_token["ratio"], [[6, 6], [1, 1]], atol=1e-4)
    assert preset_from_dict({"algorithm": {"name": "grpo", "loss_type": "cispo",
                                           "importance_sampling_level": "sequence"}}).algorithm.loss_type == "cispo"


# ------------------------------------------------------------------------------- SAPO


def test_sapo_positive_advantage_gate_at_temperature_1():
    # tau 1, A = +1: loss = -4 * sigmoid(r - 1); d loss / d lp = -4 * s'(r - 1) * r
    # (s' = s (1 - s); d r / d lp = r)
    #   r 0.5: s(-0.5) = 0.377541 -> -1.510163;  s' 0.235004 -> -4 * 0.235004 * 0.5 = -0.470007
    #   r 1:   s(0) = 0.5        -> -2;          s' 0.25     -> -1 (plain policy gradient)
    #   r 2:   s(1) = 0.731059   -> -2.924234;   s' 0.196612 -> -4 * 0.196612 * 2 = -1.572895
    #   r 6:   s(5) = 0.993307   -> -3.973229;   s' 0.006648 -> -4 * 0.006648 * 6 = -0.159553
    # (the clip would give r 2 and r 6 zero gradient; the gate lets it fade)
    lp, old, log_ratio = tokens_at(RATIOS)
    loss, ratio, flags = sapo(lp, old, torch.tensor([[1.0]]), torch.ones(1, 4), log_ratio=log_ratio,
                              sapo_temperature_pos=1.0, sapo_temperature_neg=1.05)
    close(loss, [[-1.510163, -2.0, -2.924234, -3.973229]])
    assert flags == {}
    loss.sum().backward()
    close(lp.grad, [[-0.470007, -1.0, -1.572895, -0.159553]])


def test_sapo_negative_advantage_uses_the_negative_temperature():
    # tau 1.05, A = -1: loss = (4 / 1.05) * sigmoid(1.05 (r - 1)) = 3.809524 * s(.)
    #   r 0.5: s(-0.525) = 0.371685 -> 1.415938;  gradient 4 * s'(-0.525) * 0.5 = 4 * 0.233535 * 0.5 = 0.467070
    #   r 1:   s(0) = 0.5           -> 1.904762;  gradient 4 * 0.25 * 1 = 1 (whatever tau)
    #   r 2:   s(1.05) = 0.740775   -> 2.822000;  gradient 4 * 0.192028 * 2 = 1.536220
    #   r 6:   s(5.25) = 0.994780   -> 3.789638;  gradient 4 * 0.005193 * 6 = 0.124629
    lp, old, log_ratio = tokens_at(RATIOS)
    loss, _, _ = sapo(lp, old, torch.tensor([[-1.0]]), torch.ones(1, 4), log_ratio=log_ratio,
                      sapo_temperature_pos=1.0, sapo_temperature_neg=1.05)
    close(loss, [[1.415938, 1.904762, 2.822000, 3.789638]])
    loss.sum().backward()
    close(lp.grad, [[0.467070, 1.0, 1.536220, 0.124629]], atol=2e-5)
    # and the positive temperature is not the one used: at tau 1 the r = 2 loss would be 2.924234
    swapped, _, _ = sapo(lp, old, torch.tensor([[-1.0]]), torch.ones(1, 4), log_ratio=log_ratio,
                         sapo_temperature_pos=1.05, sapo_temperature_neg=1.0)
    assert swapped[0, 2].item() == pytest.approx(2.924234, abs=1e-5)


def test_sapo_through_grpo_loss_is_a_sequence_mean_with_the_presets_temperatures():
    # row 0: ratios [1, 2] with A = +1 at tau_pos 2: loss -(4/2) s(2 (r - 1)) = [-1, -2 * s(2)]
    #        = [-1, -1.761594] -> row mean -1.380797
    # row 1: ratio [1] (one real token of two) with A = -1 at tau_neg 0.5: (4/0.5) s(0) = 4
    # sequence_mean: (-1.380797 + 4) / 2 = 1.309601; no flags, nothing marked
    lp = torch.full((2, 2), -1.0, requires_grad=True)
    old = lp.detach() - torch.tensor([[0.0, LN(2)], [0.0, 0.0]])
    loss, info, per_token = grpo_loss(lp, old, None, torch.tensor([1.0, -1.0]), torch.tensor([[1, 1], [1, 0]]),
                                      beta=0.0, epsilon_low=0.2, epsilon_high=0.2, loss_type="sapo",
                                      max_completion_length=2, sapo_temperature_pos=2.0, sapo_temperature_neg=0.5)
    assert loss.item() == pytest.approx(1.309601, abs=1e-5)
    assert set(info) == {"kl"}
    assert not per_token["clipped"].any()


def test_on_policy_cispo_and_sapo_give_the_gradient_of_dapo_and_grpo():
    # at ratio 1 each is plain policy gradient, -A grad lp: cispo's weight min(1, 5) = 1,
    # sapo's 4 s'(0) = 1; so with num_iterations 1 they train exactly as dapo and grpo
    # (which is why their presets reuse each batch twice)
    lp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.5, -2.5]])
    mask, advantages = torch.tensor([[1, 1, 1], [1, 1, 0]]), torch.tensor([0.7, -1.2])
    for family, baseline in (("cispo", "dapo"), ("sapo", "grpo")):
        grads = []
        for loss_type in (family, baseline):
            x = lp.clone().requires_grad_(True)
            loss, _, _ = grpo_loss(x, None, None, advantages, mask, beta=0.0, epsilon_low=0.2,
                                   epsilon_high=upper_clip(loss_type, 0.2, None), loss_type=loss_type,
                                   max_completion_length=3)
            loss.backward()
            grads.append(x.grad)
        torch.testing.assert_close(grads[0], grads[1], rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------- bias-corrected KL


def test_bias_corrected_k3_value_and_gradient_by_hand():
    # lp ln 0.5, ref ln 0.25: k3 = ref/pi - ln(ref/pi) - 1 = 0.5 + ln 2 - 1 = 0.193147
    # gradient of k3 * r: r (dk3/dlp + k3) = r ((1 - ref/pi) + k3) = r (lp - ref) = r ln 2
    #   on-policy (r = 1, log r = lp - sg(lp)): value 0.193147, gradient ln 2 = 0.693147
    #   (plain k3's gradient is 1 - ref/pi = 0.5)
    #   old = ln 0.25 (r = 2): value 2 * 0.193147 = 0.386294, gradient 2 ln 2 = 1.386294
    ref = torch.tensor([[LN(0.25)]])
    lp = torch.tensor([[LN(0.5)]], requires_grad=True)
    corrected = bias_corrected_k3(lp, ref, lp - lp.detach())
    corrected.sum().backward()
    close(corrected, [[0.193147]])
    close(lp.grad, [[LN(2)]])
    plain_lp = torch.tensor([[LN(0.5)]], requires_grad=True)
    kl_k3(plain_lp, ref).sum().backward()
    close(plain_lp.grad, [[0.5]])
    off = torch.tensor([[LN(0.5)]], requires_grad=True)
    value = bias_corrected_k3(off, ref, off - LN(0.25))
    value.sum().backward()
    close(value, [[0.386294]])
    close(off.grad, [[2 * LN(2)]])


def test_grpo_loss_with_the_bias_corrected_kl_reports_the_corrected_term():
    # one token, A = 0, beta 0.1, lp ln 0.5, ref ln 0.25:
    #   on-policy: loss 0.1 * 0.193147 = 0.0193147, gradient 0.1 ln 2 = 0.0693147, kl 0.193147
    #   (uncorrected: same loss and kl, gradient 0.1 * 0.5 = 0.05)
    #   old ln 0.25 (ratio 2): kl 0.386294 (TRL logs the term after the multiplication), loss 0.0386294
    ref, zero, mask = torch.tensor([[LN(0.25)]]), torch.zeros(1), torch.ones(1, 1)
    kw = dict(beta=0.1, epsilon_low=0.2, epsilon_high=0.28, loss_type="dapo", max_completion_length=1)
    for corrected, grad in ((True, 0.1 * LN(2)), (False, 0.05)):
        lp = torch.tensor([[LN(0.5)]], requires_grad=True)
        loss, info, per_token = grpo_loss(lp, None, ref, zero, mask, use_bias_correction_kl=corrected, **kw)
        loss.backward()
        assert loss.item() == pytest.approx(0.0193147, abs=1e-6)
        assert info["kl"] == pytest.approx(0.193147, abs=1e-6)
        assert lp.grad.item() == pytest.approx(grad, abs=1e-6)
    lp = torch.tensor([[LN(0.5)]], requires_grad=True)
    loss, info, per_token = grpo_loss(lp, torch.tensor([[LN(0.25)]]), ref, zero, mask, use_bias_correction_kl=True,
                                      **kw)
    assert loss.item() == pytest.approx(0.0386294, abs=1e-6)
    assert info["kl"] == pytest.approx(0.386294, abs=1e-6)
    close(per_token["kl"], [[0.386294]])


def test_the_bias_corrected_kl_at_sequence_level_weighs_tokens_by_the_sequences_ratio():
    # tokens' log ratios [ln 2, 0] -> sequence ratio sqrt(2) = 1.414214 on both tokens;
    # k3 per token: lp ln 0.5 / ref ln 0.25 -> 0.193147, lp = ref -> 0
    # kl = mean(1.414214 * 0.193147, 0) = 0.136576
    lp = torch.tensor([[LN(0.5), LN(0.5)]])
    old = torch.tensor([[LN(0.25), LN(0.5)]])
    ref = torch.tensor([[LN(0.25), LN(0.5)]])
    _, info, _ = grpo_loss(lp, old, ref, torch.zeros(1), torch.ones(1, 2), beta=0.1, epsilon_low=0.2,
                           epsilon_high=0.2, loss_type="grpo", max_completion_length=2,
                           importance_sampling_level="sequence", use_bias_correction_kl=True)
    assert info["kl"] == pytest.approx(0.136576, abs=1e-6)


# ------------------------------------------------------- the preset, validate, user code


def test_the_presets_fields_their_defaults_and_bounds():
    algo = GRPOConfig()
    assert (algo.sapo_temperature_pos, algo.sapo_temperature_neg, algo.use_bias_correction_kl) == (1.0, 1.05, False)
    assert {"cispo", "sapo"} <= set(POLICY_LOSSES.names())
    for field in ("sapo_temperature_pos", "sapo_temperature_neg"):
        with pytest.raises(PresetError) as caught:
            preset_from_dict({"algorithm": {"name": "grpo", "loss_type": "sapo", field: 0}})
        assert [p.split(":")[0] for p in caught.value.problems] == [f"algorithm.{field}"]
    assert "5.0" in GRPOConfig.model_fields["epsilon_high"].description
    assert "TRL 1.16 defaults to true" in GRPOConfig.model_fields["use_bias_correction_kl"].description


@pytest.mark.parametrize("loss_type, metrics", [("cispo", "; metrics cispo_clip_ratio"), ("sapo", "")])
def test_validates_synthetic_batch_check_passes_for_the_new_built_ins(loss_type, metrics):
    algo = GRPOConfig(loss_type=loss_type, num_generations=4)
    line = _try_surrogate(SURROGATES.entry(loss_type), _synthetic_batch(4), algo)
    assert line == f"per-token loss (8, 6), finite, with a finite gradient{metrics}"


def test_a_user_surrogate_may_read_the_sapo_temperatures(tmp_path):
    # a user's soft gate taking the preset's temperatures (now among the options given)
    (tmp_path / "gates.py").write_text(
        "import torch\n"
        "def half_gate(logprobs, old_logprobs, advantages, mask, *, log_ratio, sapo_temperature_pos):\n"
        "    ratio = torch.exp(log_ratio).expand_as(logprobs)\n"
        "    return -torch.sigmoid(sapo_temperature_pos * (ratio - 1)) * advantages\n")
    entry = load_entry(SURROGATES, "gates.py:half_gate", tmp_path)
    lp, old, log_ratio = tokens_at([2.0])
    loss, _, _ = entry.call(lp, old, torch.tensor([[1.0]]), torch.ones(1, 1), log_ratio=log_ratio,
                            epsilon_low=0.2, epsilon_high=0.2, max_completion_length=1,
                            sapo_temperature_pos=2.0, sapo_temperature_neg=1.05)
    assert loss.item() == pytest.approx(-1 / (1 + math.exp(-2)), abs=1e-6)  # -s(2 * (2 - 1)) = -0.880797


# ------------------------------------------------------------- one GRPO step each


def record_grpo_loss_calls(monkeypatch):
    """Wrap the trainer's grpo_loss: each call's tensors, keywords and returned loss."""
    import engine.algorithms.grpo.trainer as trainer_module

    calls, real = [], trainer_module.grpo_loss

    def recording(logprobs, old_logprobs, ref_logprobs, advantages, mask, **kwargs):
        out = real(logprobs, old_logprobs, ref_logprobs, advantages, mask, **kwargs)
        calls.append({"lp": logprobs.detach().clone(), "old": old_logprobs.detach().clone(),
                      "ref": None if ref_logprobs is None else ref_logprobs.clone(),
                      "advantages": advantages.detach().clone(), "mask": mask.clone(), "kwargs": kwargs,
                      "loss": out[0].item()})
        return out

    monkeypatch.setattr(trainer_module, "grpo_loss", recording)
    return calls


def expected_loss(call):
    """The call's loss recomputed here from its tensors with the families' formulas."""
    kw, mask = call["kwargs"], call["mask"].bool()
    lp, A = call["lp"], call["advantages"][:, None]
    ratio = torch.exp(torch.where(mask, lp - call["old"], 0.0))
    if kw["loss_type"] == "cispo":
        per_token = -ratio.clamp(max=kw["epsilon_high"]) * A * lp
    else:
        tau = torch.where(A > 0, kw["sapo_temperature_pos"], kw["sapo_temperature_neg"])
        per_token = -(4 / tau) * torch.sigmoid(tau * (ratio - 1)) * A
    if kw["beta"]:
        ref = torch.where(mask, call["ref"], lp)
        k3 = torch.exp(ref - lp) - (ref - lp) - 1
        per_token = per_token + kw["beta"] * (k3 * ratio if kw["use_bias_correction_kl"] else k3)
    per_token = torch.where(mask, per_token, 0.0)
    if kw["loss_type"] == "cispo":  # token_mean
        return (per_token.sum() / mask.sum()).item()
    return (per_token.sum(-1) / mask.sum(-1).clamp(min=1)).mean().item()  # sequence_mean


@pytest.mark.parametrize("algorithm", [
    {"loss_type": "cispo", "epsilon_high": None, "beta": 0.04, "use_bias_correction_kl": True},
    {"loss_type": "sapo", "sapo_temperature_pos": 0.8, "sapo_temperature_neg": 1.3},
], ids=["cispo", "sapo"])
def test_one_grpo_step_with_each_new_loss_type(tmp_path, monkeypatch, algorithm):
    calls = record_grpo_loss_calls(monkeypatch)
    data = small_preset_dict(max_steps=1, learning_rate=0.05)
    data["algorithm"].update({"num_iterations": 2, **algorithm})
    result = GRPOTrainer(preset_from_dict(data), tmp_path / "run").train_step()
    first, second = calls  # one micro-batch, two iterations
    kw = second["kwargs"]
    assert kw["loss_type"] == algorithm["loss_type"]
    if algorithm["loss_type"] == "cispo":
        assert kw["epsilon_high"] == 5.0 and kw["use_bias_correction_kl"] is True
        assert 0.0 <= result.metrics["cispo_clip_ratio"] <= 1.0
        assert result.metrics["kl"] is not None and math.isfinite(result.metrics["kl"])
    else:
        assert (kw["sapo_temperature_pos"], kw["sapo_temperature_neg"]) == (0.8, 1.3)
        assert "cispo_clip_ratio" not in result.metrics
    assert result.metrics["clip_ratio/region_mean"] is None  # no PPO clip in either
    # the second pass sees the updated weights: ratios off 1, and the loss is the family's
    mask = second["mask"].bool()
    assert not torch.allclose((second["lp"] - second["old"])[mask], torch.zeros(int(mask.sum())))
    for call in (first, second):
        assert call["loss"] == pytest.approx(expected_loss(call), rel=1e-5, abs=1e-6)
    assert math.isfinite(result.metrics["loss"]) and math.isfinite(result.metrics["grad_norm"])


# ------------------------------------------------------------- two-sided clip (delta)


def test_delta_caps_the_unclipped_ratio_by_hand():
    # eps 0.2 / 0.28, delta 2; tokens at ratios [3, 3, 0.5, 1.5]
    # A = -1, ratio 3: -min(3 * -1, 1.28 * -1) = 3 without delta; with it -min(2 * -1, -1.28) = 2, and no
    #   gradient (the capped branch is constant); A = +1, ratio 3: -min(3, 1.28) = -1.28 either way;
    # A = -1, ratio 0.5: -min(-0.5, -0.8) = 0.8 either way; A = -1, ratio 1.5 (under delta): 1.5 either way
    lp, old, log_ratio = tokens_at([3.0, 3.0, 0.5, 1.5])
    advantages = torch.tensor([[-1.0, 1.0, -1.0, -1.0]])
    mask = torch.ones(1, 4)
    loss, ratio, flags = catalog.SURROGATES.entry("clipped").call(
        lp, old, advantages, mask, log_ratio=log_ratio, epsilon_low=0.2, epsilon_high=0.28, delta=2.0)
    assert loss[0].tolist() == pytest.approx([2.0, -1.28, 0.8, 1.5], abs=1e-6)
    plain, _, _ = catalog.SURROGATES.entry("clipped").call(
        lp, old, advantages, mask, log_ratio=log_ratio, epsilon_low=0.2, epsilon_high=0.28)
    assert plain[0].tolist() == pytest.approx([3.0, -1.28, 0.8, 1.5], abs=1e-6)
    grad = torch.autograd.grad(loss.sum(), lp)[0]
    assert grad[0, 0].item() == 0.0 and grad[0, 1].item() == 0.0  # capped; clipped (A > 0 above 1 + eps)
    assert grad[0, 3].item() == pytest.approx(1.5, abs=1e-6)  # -A * ratio, inside the cap
    assert ratio[0, 0].item() == pytest.approx(3.0)  # the inspector's ratio is the ratio itself
    # flags on the capped ratio, as TRL counts them: only the A > 0 token above 1.28 is clipped high
    assert flags["clip_ratio/high_mean"].tolist() == [[False, True, False, False]]
    assert flags["clip_ratio/low_mean"].tolist() == [[False, False, True, False]]


def test_delta_reaches_the_surrogate_from_the_preset_with_no_call_site_naming_it(tmp_path, monkeypatch):
    calls = record_grpo_loss_calls(monkeypatch)
    data = small_preset_dict(max_steps=1)
    data["algorithm"].update({"loss_type": "grpo", "delta": 1.5})
    GRPOTrainer(preset_from_dict(data), tmp_path / "run").train_step()
    assert calls[0]["kwargs"]["delta"] == 1.5
    assert GRPOConfig(delta=1.5).delta == 1.5 and GRPOConfig().delta is None
    with pytest.raises(PresetError, match="algorithm.delta"):
        preset_from_dict({**small_preset_dict(), "algorithm": {"name": "grpo", "delta": 0.9}})
    # a user's surrogate may name it too, and validate's dry run gives it as the run does
    (tmp_path / "capped.py").write_text(
        "import torch\n"
        "def capped(logprobs, old_logprobs, advantages, mask, *, log_ratio, delta):\n"
        "    return -torch.clamp(torch.exp(log_ratio), max=delta).expand_as(logprobs) * advantages\n")
    assert "delta" in load_entry(SURROGATES, "capped.py:capped", tmp_path).options
    line = _try_surrogate(load_entry(SURROGATES, "capped.py:capped", tmp_path), _synthetic_batch(4),
                          GRPOConfig(loss_type="capped.py:capped", delta=1.5))
    assert line.startswith("per-token loss")
