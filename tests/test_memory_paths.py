"""Memory switches change memory, not results: gradient checkpointing gives the same
gradients while keeping fewer activations; a bf16 model trains a fp32 adapter whose
gradients match the fp32 model's within bf16's precision."""

from __future__ import annotations

import pytest
import torch

from engine.algorithms.policy import set_update_mode
from engine.model.forward import completion_logits
from engine.model.loading import load_model
from engine.model.memory_estimate import wants_checkpointing
from engine.model.config import ModelConfig
from test_forward import build, grouped_rollout


def test_checkpointing_threshold():
    assert not wants_checkpointing("auto", 494_000_000)
    assert wants_checkpointing("auto", 1_540_000_000)
    assert wants_checkpointing(True, 10) and not wants_checkpointing(False, 10**10)


def _gradients_and_saved_bytes(model, rollout, checkpointing: bool):
    """One update pass: the LoRA gradients, and the bytes autograd keeps for backward."""
    set_update_mode(model, True)
    model.zero_grad()
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = completion_logits(model, rollout, slice(0, 6), group_size=3, shared_prefix=not checkpointing)
        loss = (logits.logprobs(rollout.completion_ids) * rollout.completion_mask).sum()
    loss.backward()
    set_update_mode(model, False)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return grads, sum(saved)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_gradient_checkpointing_changes_memory_not_results(kind, tmp_path):
    plain = build(kind, tmp_path / kind)
    rollout = grouped_rollout(plain)
    checkpointed = load_model(ModelConfig(name_or_path=str(tmp_path / kind)), gradient_checkpointing=True)
    assert checkpointed.gradient_checkpointing
    checkpointed.model.load_state_dict(plain.model.state_dict())  # the same (trained-looking) adapter
    expected, plain_bytes = _gradients_and_saved_bytes(plain.model, rollout, False)
    got, checkpointed_bytes = _gradients_and_saved_bytes(checkpointed.model, rollout, True)
    assert expected.keys() == got.keys() and expected
    for name in expected:
        assert torch.allclose(got[name], expected[name], rtol=1e-4, atol=1e-6), name
    assert checkpointed_bytes < 0.6 * plain_bytes, (checkpointed_bytes, plain_bytes)
    # Sampling afterwards still uses the KV cache (layers back out of training mode).
    assert not any(m.training for m in checkpointed.model.modules())


def _one_update(dtype: str, folder) -> tuple[dict, torch.nn.Module]:
    loaded = load_model(ModelConfig(name_or_path=str(folder), dtype=dtype))
    torch.manual_seed(3)
    with torch.no_grad():
        for name, param in loaded.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    return loaded


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_trains_a_fp32_adapter_with_matching_gradients(dtype, tmp_path):
    """bf16 (or fp16) base weights, the LoRA adapter in fp32, logprobs in fp32: the
    adapter's gradients are the fp32 model's within half precision's error."""
    build("llama", tmp_path / "m")
    full, half = _one_update("float32", tmp_path / "m"), _one_update(dtype, tmp_path / "m")
    half.model.load_state_dict(full.model.state_dict())  # the same adapter (cast where the base is half)
    assert half.dtype == getattr(torch, dtype)
    adapters = {n: p for n, p in half.model.named_parameters() if p.requires_grad}
    assert adapters and all(p.dtype == torch.float32 for p in adapters.values())
    assert any(p.dtype == getattr(torch, dtype) for p in half.model.parameters() if not p.requires_grad)
    rollout = grouped_rollout(full)
    grads = {}
    for loaded in (full, half):
        set_update_mode(loaded.model, True)
        loaded.model.zero_grad()
        logprobs = completion_logits(loaded.model, rollout, slice(0, 6), group_size=3).logprobs(rollout.completion_ids)
        assert logprobs.dtype == torch.float32
        (logprobs * rollout.completion_mask).sum().backward()
        grads[loaded.dtype] = torch.cat([p.grad.flatten() for p in loaded.model.parameters() if p.grad is not None])
    a, b = grads[torch.float32], grads[getattr(torch, dtype)]
    assert b.dtype == torch.float32
    relative = float((a - b).norm() / a.norm())
    assert relative < 0.05, relative  # bf16 keeps ~3 significant digits, fp16 ~4


def test_four_bit_is_refused_on_a_cpu_with_the_reason(tmp_path):
    from engine.model.loading import ModelLoadError

    build("llama", tmp_path / "m")
    with pytest.raises(ModelLoadError, match="model.load_in_4bit: 4-bit weights .* need a CUDA GPU; this run is on cpu"):
        load_model(ModelConfig(name_or_path=str(tmp_path / "m"), load_in_4bit=True, device="cpu"))


def test_four_bit_without_bitsandbytes_says_how_to_install_it(monkeypatch):
    import importlib.util

    from engine.model.loading import ModelLoadError, four_bit_config

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    with pytest.raises(ModelLoadError, match="pip install bitsandbytes"):
        four_bit_config(ModelConfig(load_in_4bit=True), torch.device("cuda", 0), torch.bfloat16)
    assert four_bit_config(ModelConfig(), torch.device("cpu"), torch.float32) == {}
