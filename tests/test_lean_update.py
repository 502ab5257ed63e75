"""The lean update (issue 42) changes speed, not results: the LM head's chunk pass gives
the logprobs with their exact gradient and, on the way, each token's entropy, the logits'
sums and the recorded rows' top-5; the micro-batch loop reads its numbers once a part.
Checked against the full (tokens x vocab) logits in float64, and a GRPO update against
the earlier path (engine.model.token_logits.LEAN_UPDATE off)."""

from __future__ import annotations

import copy

import pytest
import torch

from conftest import small_preset_dict
from engine.algorithms.grpo.trainer import GRPOTrainer
from engine.algorithms.step import host_numbers
from engine.model import token_logits
from engine.model.token_logits import TokenLogits
from engine.preset.schema import preset_from_dict

V, H, B, T = 50, 8, 3, 4
SCALE, TEMPERATURE = 1.7, 0.7


class LinearHead:
    """A frozen bias-free head with a logit scale, as OutputHead describes one."""

    def __init__(self, weight):
        self.linear = (weight, SCALE)
        self.weight = weight

    def __call__(self, hidden):
        return hidden @ self.weight.T * SCALE


@pytest.fixture
def case():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(V, H, generator=g, dtype=torch.float64)
    hidden = torch.randn(B, T, H, generator=g, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, V, (B, T), generator=g)
    upstream = torch.randn(B, T, generator=g, dtype=torch.float64)  # d loss / d logprob, as a loss gives it
    return weight, hidden, ids, upstream


def full_reference(weight, hidden, ids):
    """The plain computation: every logit at once, float64."""
    logits = hidden @ weight.T * SCALE / TEMPERATURE
    logp = logits.log_softmax(-1)
    return logits, logp.gather(-1, ids[..., None])[..., 0], -(logp.exp() * logp).sum(-1)


def test_chunked_fused_logprobs_gradients_entropy_sums_and_top_equal_the_full_logits(case, monkeypatch):
    """5 tokens a chunk (3 chunks for 12 tokens, the last cut short): logprobs, their
    gradient, entropy, logit sums and the first 2 rows' top-5, against the full logits
    (float64 kept as such: the earlier path computes in float32)."""
    monkeypatch.setattr(token_logits, "LEAN_UPDATE", True)
    weight, hidden, ids, upstream = case
    logits, expected, entropy = full_reference(weight, hidden, ids)
    (expected_grad,) = torch.autograd.grad((expected * upstream).sum(), hidden)

    chunked = TokenLogits(hidden, LinearHead(weight), V, TEMPERATURE, chunk_elements=5 * V, top_rows=2)
    logprobs = chunked.logprobs(ids)
    (grad,) = torch.autograd.grad((logprobs * upstream).sum(), hidden)
    assert torch.allclose(logprobs, expected, rtol=0, atol=1e-12)
    assert torch.allclose(grad, expected_grad, rtol=0, atol=1e-12)
    assert torch.allclose(chunked.entropy(), entropy, rtol=0, atol=1e-12)
    assert torch.allclose(chunked.sums(), logits.sum(-1), rtol=0, atol=1e-12)
    probs, top_ids = chunked.top(2)
    expected_probs, expected_ids = logits[:2].softmax(-1).topk(5, dim=-1)
    assert torch.equal(top_ids, expected_ids) and torch.allclose(probs, expected_probs, rtol=0, atol=1e-12)
    assert set(chunked.kept) == {"entropy", "sums", "top"}  # taken in the logprobs' pass, no second one


def test_the_lean_pass_without_gradients_gives_bit_equal_logprobs(case, monkeypatch):
    """PPO's first ratio is exactly 1: the no-grad pass (old logprobs) and the pass with
    gradients give the same bits at the same weights."""
    monkeypatch.setattr(token_logits, "LEAN_UPDATE", True)
    weight, hidden, ids, _ = case
    head = LinearHead(weight.float())
    hidden = hidden.detach().float().requires_grad_()
    with_grad = TokenLogits(hidden, head, V, TEMPERATURE, chunk_elements=5 * V).logprobs(ids)
    with torch.no_grad():
        without = TokenLogits(hidden, head, V, TEMPERATURE, chunk_elements=5 * V).logprobs(ids)
    assert torch.equal(with_grad.detach(), without)


def test_a_part_reads_its_device_numbers_in_one_go():
    total, metrics = host_numbers(torch.tensor(0.5, dtype=torch.float64) * 0.25 + 1.0,
                                  {"kl": 0.0, "clip": torch.tensor(0.125)})
    assert (total, metrics) == (1.125, {"clip": 0.125, "kl": 0.0})
    assert host_numbers(2.0, {}) == (2.0, {})


def test_a_grpo_update_is_unchanged_against_the_earlier_path(tmp_path, monkeypatch):
    """The same batch, the same weights: the lean update and the earlier one give the same
    loss, metrics, gradients and per-token records (the recorded rows' top-5 and entropy
    too), micro-batches of 3 rows cutting the 4 recorded rows."""
    preset = small_preset_dict(micro_batch_size=3)
    preset["algorithm"]["max_completion_length"] = 6
    trainer = GRPOTrainer(preset_from_dict(preset), tmp_path / "run")
    trainer.optimizer.step = lambda: None  # keep the weights: both updates start from them
    trainer._times = [0.0, None, None, None]
    batch = trainer.prepare()
    assert batch.num_recorded == 4 and batch.size == 8
    seen = {}
    for lean in (True, False):
        monkeypatch.setattr(token_logits, "LEAN_UPDATE", lean)
        taken = copy.deepcopy(batch)
        update = trainer.update(taken)
        grads = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
        seen[lean] = update, grads, taken
    (lean, lean_grads, lean_batch), (plain, plain_grads, plain_batch) = seen[True], seen[False]
    assert lean.losses == pytest.approx(plain.losses, rel=1e-6, abs=1e-9)
    assert lean.metrics == pytest.approx(plain.metrics, rel=1e-5, abs=1e-7)
    assert lean.grad_norm == pytest.approx(plain.grad_norm, rel=1e-5)
    assert torch.allclose(lean_grads, plain_grads, rtol=1e-4, atol=1e-8)
    for key in ("logprob", "entropy", "ratio", "clipped"):
        assert torch.allclose(lean_batch.per_token[key], plain_batch.per_token[key], atol=1e-5), key
    (lean_probs, lean_ids), (plain_probs, plain_ids) = lean_batch.top, plain_batch.top
    assert lean_probs.shape == (4, batch.rows.completion_ids.shape[1], 5)
    assert torch.equal(lean_ids, plain_ids) and torch.allclose(lean_probs, plain_probs, atol=1e-6)
    assert trainer.policy.recorded_rows == 0  # the hint is the update's alone


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_the_grpo_loss_reads_nothing_on_the_host_off_the_cpu(level, monkeypatch):
    """On the meta device (tensors with no values: any read on the host fails) the loss
    and its metrics come out as tensors, which the update reads once a part; on the CPU
    its metrics stay floats."""
    from engine.rl.losses import grpo_loss

    monkeypatch.setattr(token_logits, "LEAN_UPDATE", True)
    options = dict(beta=0.1, loss_type="dapo", epsilon_low=0.2, epsilon_high=0.28, importance_sampling_level=level)
    for device in ("meta", "cpu"):
        lp = torch.zeros(2, 3, device=device, requires_grad=True)
        zeros, mask = torch.zeros(2, 3, device=device), torch.ones(2, 3, device=device)
        loss, info, _ = grpo_loss(lp, zeros, zeros, torch.zeros(2, device=device), mask, **options)
        kinds = {type(value) for value in info.values()}
        assert kinds == ({torch.Tensor} if device == "meta" else {float}) and len(info) == 4
