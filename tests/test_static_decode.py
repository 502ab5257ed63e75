"""The decode step the GPU can replay (issue 42, engine/model/static_decode.py): its
sampling maths by hand, the choice of path, the same tokens and logprobs as the plain
sampler under one seed (the built-in model through peft, a Qwen2-shaped model), and a
step that torch.compile takes whole (fullgraph) and traces once for every step."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from transformers import Qwen2Config, Qwen2ForCausalLM

import engine.model.static_decode as static_decode
from engine.model.config import ModelConfig
from engine.model.loading import load_model
from engine.model.rollout import sample
from engine.model.sampling import inverse_cdf
from engine.model.static_decode import batch_bucket, cache_bucket, decode_path


# ------------------------------------------------------------------ the maths, by hand
def test_inverse_cdf_picks_the_first_token_whose_cumulative_probability_exceeds_u():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2]])
    # cumulative 0.5, 0.5, 0.8, 1.0: u below 0.5 -> 0; 0.5 up to 0.8 -> 2 (never the empty 1); then 3
    picks = [inverse_cdf(probs, torch.tensor([u])).item() for u in (0.0, 0.49, 0.5, 0.79, 0.8, 0.999)]
    assert picks == [0, 0, 2, 2, 3, 3]
    # ten evenly spread numbers (0.05, 0.15, ...) give each token its share exactly: 5, 0, 3, 2
    spread = (torch.arange(10) + 0.5) / 10
    tokens = inverse_cdf(probs.expand(10, 4), spread)
    assert torch.bincount(tokens, minlength=4).tolist() == [5, 0, 3, 2]


def test_inverse_cdf_never_picks_a_token_of_probability_zero():
    # u = 1 (beyond rand's range, as a rounding of u times the total could reach) would
    # run past every sum; the row's most likely token is taken, not the empty tail's last
    probs = torch.tensor([[0.3, 0.7, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    assert inverse_cdf(probs, torch.tensor([1.0, 1.0])).tolist() == [1, 3]
    # rows that need not sum to 1 (unnormalised): u scales by the row's total
    assert inverse_cdf(torch.tensor([[2.0, 0.0, 6.0]]), torch.tensor([0.3])).tolist() == [2]


def test_decode_path_auto_captures_on_cuda_only_and_bad_settings_are_named():
    assert decode_path("auto", "cuda", 256) == "captured"
    assert decode_path("auto", "cuda:1", 8) == "plain"  # too short to repay a capture
    assert decode_path("auto", "cuda", 256, sharded=True) == "plain"
    assert decode_path("auto", "cpu", 256) == "plain"
    assert decode_path("captured", "cpu", 256) == "static"  # CUDA graphs exist on CUDA only
    assert decode_path("static", "cuda", 8) == "static" and decode_path("plain", "cuda", 256) == "plain"
    with pytest.raises(ValueError, match="model.decode: 'fast' is not one of auto, plain, static, captured"):
        decode_path("fast", "cpu", 8)
    with pytest.raises(ValidationError, match="decode"):
        ModelConfig(decode="fast")
    assert ModelConfig().decode == "auto"


def test_buckets():
    assert [batch_bucket(n) for n in (1, 2, 3, 5, 8, 9, 64, 65, 128, 129)] == [1, 2, 4, 8, 8, 16, 64, 128, 128, 192]
    assert [cache_bucket(n) for n in (1, 128, 129, 320)] == [128, 128, 256, 384]


# ------------------------------------------------------------------ the same tokens as the plain path
@pytest.fixture(scope="module")
def builtin():
    loaded = load_model(ModelConfig(name_or_path="builtin:tiny"))
    loaded.model.eval()
    return loaded


@pytest.fixture(scope="module")
def qwen2():
    """A Qwen2-shaped model (grouped-query attention, RoPE, RMSNorm, SwiGLU), tiny and random."""
    config = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).eval()


def both_paths(model, ids, mask, eos, pad, **settings):
    out = {}
    for path in ("plain", "static"):
        generator = torch.Generator().manual_seed(11)
        out[path] = sample(model, ids, mask, eos_token_ids=eos, pad_token_id=pad, generator=generator,
                           decode=path, **settings)
    return out["plain"], out["static"]


def assert_same(plain, static):
    """Tokens, masks and ends equal; logprobs to 1e-5: the static cache's attention sums
    over its fixed width (masked columns add zeros), another floating-point order than the
    plain cache's filled columns, a few float32 roundings apart (seen: up to 2.3e-6)."""
    assert torch.equal(plain.completion_ids, static.completion_ids)
    assert torch.equal(plain.completion_mask, static.completion_mask)
    assert torch.equal(plain.truncated, static.truncated)
    assert torch.allclose(plain.sampling_logprobs, static.sampling_logprobs, atol=1e-5, rtol=0)


SETTINGS = [dict(), dict(temperature=0.7, top_k=5, top_p=0.9), dict(greedy=True)]


@pytest.mark.parametrize("settings", SETTINGS, ids=["t1", "t0.7-k5-p0.9", "greedy"])
def test_builtin_model_samples_the_same_on_both_paths(builtin, settings):
    """Groups of 2 (one prompt pass each), 6 rows padded to a bucket of 8, rows ending at
    different steps (the plain path drops them, the static one masks them)."""
    tok = builtin.tokenizer
    prompts = [p for p in ["sort 3 1 =", "sort 9 8 7 6 =", "sort 2 5 ="] for _ in range(2)]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    plain, static = both_paths(builtin.model, enc["input_ids"], enc["attention_mask"], builtin.eos_token_ids,
                               tok.pad_token_id, max_new_tokens=20, group_size=2, **settings)
    assert len(set(plain.completion_mask.sum(-1).tolist())) >= 2 and not plain.truncated.all()
    assert_same(plain, static)


@pytest.mark.parametrize("settings", SETTINGS, ids=["t1", "t0.7-k5-p0.9", "greedy"])
def test_qwen2_shaped_model_samples_the_same_on_both_paths(qwen2, settings):
    """Left-padded prompts in groups of 3; the end token is one the first row samples at
    step 2, so that row ends early and the others later or not at all."""
    ids = torch.randint(3, 300, (6, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[3:, :3] = 0  # the second prompt is shorter: left padding
    ids[3:, :3] = 0
    free, _ = both_paths(qwen2, ids, mask, [299 + 1], 0, max_new_tokens=12, group_size=3, **settings)
    eos = int(free.completion_ids[0, 2])
    passes = []  # the rows and columns of each pass: the prompts' pass runs each distinct prompt once
    hook = qwen2.model.register_forward_pre_hook(lambda module, args, kwargs: passes.append(
        tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        plain, static = both_paths(qwen2, ids, mask, [eos], 0, max_new_tokens=12, group_size=3, **settings)
    finally:
        hook.remove()
    static_passes = passes[passes.index((2, 7), 1):]  # the second path's: its prompt pass, then steps
    assert static_passes[0] == (2, 7) and set(static_passes[1:]) == {(8, 1)}  # 6 rows in a bucket of 8
    assert plain.completion_mask[0].sum() <= 3 and len(set(plain.completion_mask.sum(-1).tolist())) >= 2
    assert_same(plain, static)


# ------------------------------------------------------------------ compiled whole
def test_the_step_compiles_with_fullgraph_and_is_traced_once(builtin, monkeypatch):
    """torch.compile(fullgraph=True) raises at any graph break; one graph for all the
    steps shows nothing in the step changes shape or a Python number from token to token,
    which a replayed CUDA graph needs. Backend `eager`: dynamo's trace, which decides graph
    breaks, without inductor's code generation (2+ minutes for this model on this CPU)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    step = torch.compile(static_decode.decode_step, fullgraph=True, backend="eager", dynamic=False)
    tok = builtin.tokenizer
    enc = tok(["sort 3 1 =", "sort 9 8 7 6 ="], return_tensors="pt", padding=True, add_special_tokens=False)
    settings = dict(max_new_tokens=10, temperature=0.7, top_k=5, top_p=0.9, group_size=1)
    eager = both_paths(builtin.model, enc["input_ids"], enc["attention_mask"], [10**6], tok.pad_token_id, **settings)
    monkeypatch.setattr(static_decode, "decode_step", step)
    _, compiled = both_paths(builtin.model, enc["input_ids"], enc["attention_mask"], [10**6], tok.pad_token_id,
                             **settings)
    assert counters["stats"]["unique_graphs"] == 1 and counters["stats"]["calls_captured"] > 0
    assert torch.equal(compiled.completion_ids, eager[1].completion_ids) and compiled.completion_ids.shape[1] == 10
    assert torch.allclose(compiled.sampling_logprobs, eager[1].sampling_logprobs, atol=1e-6, rtol=0)
    torch._dynamo.reset()
