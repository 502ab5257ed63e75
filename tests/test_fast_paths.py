"""The rollout fast paths (issue 27) change speed, not results: the KV cache written in
place, the LoRA adapter merged into copies of its base weights while sampling, gelu_new
swapped for its fused kernel, the lean reference mode, set_update_mode's one walk, and
the shared-prefix pass taken only where it saves enough positions."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.activations import GELUTanh, NewGELUActivation
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

import engine.model.forward as forward
import engine.model.rollout as rollout_module
from engine.algorithms.policy import set_update_mode
from engine.model.activations import fuse_activations
from engine.model.forward import completion_logits
from engine.model.kv_cache import PreallocatedLayer, preallocate
from engine.model.loading import load_model, peft_reading_deprecated_alias, reference_mode
from engine.model.merged_lora import merged_lora
from engine.model.rollout import Rollout, sample
from engine.model.config import ModelConfig
from test_forward import build, full_logits


# ------------------------------------------------------------------ shared tiny models
@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny GPT-2 (Conv1D layers, fan_in_fan_out LoRA) and a tiny Llama (Linear layers),
    saved once (test_forward.build)."""
    root = tmp_path_factory.mktemp("fast_paths")
    for kind in ("gpt2", "llama"):
        build(kind, root / kind)
    return root


def adapted(folders, kind, checkpointing=False, **model_fields):
    """A fresh load of `kind` with a trained-looking adapter (lora_B random, not 0)."""
    loaded = load_model(ModelConfig(name_or_path=str(folders / kind), **model_fields),
                        gradient_checkpointing=checkpointing)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in loaded.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    loaded.model.eval()
    return loaded


def lora_layers(model) -> dict[str, nn.Module]:
    """Every peft LoRA layer, by its name in `model`."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


def token_ids(loaded, rows=2, length=9, seed=0):
    V = loaded.model.get_output_embeddings().weight.shape[0]
    return torch.randint(3, V, (rows, length), generator=torch.Generator().manual_seed(seed))


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


# ------------------------------------------------------------------ 1. kv_cache
def test_preallocated_layer_matches_a_dynamic_layer_step_by_step():
    """Fed the same states, PreallocatedLayer shows DynamicLayer's keys and values after
    every operation; within its room it writes in place, past it the buffer grows."""
    g = torch.Generator().manual_seed(0)

    def states(n, batch=3):
        return torch.randn(batch, 2, n, 5, generator=g), torch.randn(batch, 2, n, 5, generator=g)

    keys, values = states(4)
    fast, plain = PreallocatedLayer(keys.clone(), values.clone(), room=2), DynamicLayer()
    plain.update(keys, values)

    def same(n):
        assert fast.get_seq_length() == plain.get_seq_length() == n
        assert torch.equal(fast.keys, plain.keys) and torch.equal(fast.values, plain.values)
        assert fast.get_mask_sizes(1) == plain.get_mask_sizes(1) == (n + 1, 0)

    same(4)
    assert fast._keys.shape[-2] == 6  # 4 columns + room for 2
    buffer = fast._keys.data_ptr()
    for _ in range(2):  # within the room: written in place, no new buffer
        k, v = states(1)
        got = fast.update(k, v)
        plain.update(k, v)
        assert torch.equal(got[0], plain.keys) and torch.equal(got[1], plain.values)
        assert fast._keys.data_ptr() == buffer
    same(6)
    k, v = states(3)  # past the room: 6 + 3 > 6, the buffer regrows to 6 + max(3, 6) = 12
    fast.update(k, v)
    plain.update(k, v)
    assert fast._keys.shape[-2] == 12 and fast._keys.data_ptr() != buffer
    same(9)  # the earlier columns kept

    index = torch.tensor([2, 0])
    fast.batch_select_indices(index)
    plain.batch_select_indices(index)
    assert fast.keys.shape[0] == 2
    same(9)
    k, v = states(1, batch=2)  # and writes still land in the selected rows' buffer
    fast.update(k, v)
    plain.update(k, v)
    same(10)

    fast.crop(-3)
    plain.crop(-3)
    same(7)
    k, v = states(2, batch=2)  # the cropped columns are overwritten, not appended after
    fast.update(k, v)
    plain.update(k, v)
    same(9)

    beams = torch.tensor([1, 1, 0])
    fast.reorder_cache(beams)
    plain.reorder_cache(beams)
    same(9)
    assert fast.keys.shape[0] == 3


def test_preallocate_moves_only_plain_dynamic_layers():
    g = torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 2, 3, 4, generator=g), torch.randn(2, 2, 3, 4, generator=g)
    sliding, dynamic, empty = DynamicSlidingWindowLayer(sliding_window=8), DynamicLayer(), DynamicLayer()
    sliding.update(k, v)
    dynamic.update(k, v)

    class Stranger:  # a layer kind preallocate does not know (linear attention, say)
        keys = k

    stranger = Stranger()
    cache = DynamicCache()
    cache.layers = [sliding, dynamic, empty, stranger]
    assert preallocate(cache, 0) is cache and cache.layers[1] is dynamic  # no room asked: unchanged
    assert preallocate(cache, 5) is cache
    assert cache.layers[0] is sliding and cache.layers[2] is empty and cache.layers[3] is stranger
    moved = cache.layers[1]
    assert type(moved) is PreallocatedLayer
    assert torch.equal(moved.keys, k) and torch.equal(moved.values, v) and moved._keys.shape[-2] == 3 + 5
    assert cache.get_seq_length(1) == 3

    legacy = ((k, v), (k, v))  # a cache with no `layers`: returned as it is
    assert preallocate(legacy, 5) is legacy
    assert preallocate(plain := object(), 5) is plain


def _finishing_at_different_steps(loaded, ids, mask, group_size, max_new_tokens):
    """A token that, taken as EOS, ends the greedy rows' groups at different steps, and
    at least one before the last step (so finished rows are dropped from the cache).
    Read off a first greedy pass with no EOS at all."""
    V = loaded.model.get_output_embeddings().weight.shape[0]
    free = sample(loaded.model, ids, mask, max_new_tokens=max_new_tokens, greedy=True,
                  eos_token_ids=[V], pad_token_id=loaded.tokenizer.pad_token_id, group_size=group_size)
    firsts = free.completion_ids[::group_size]
    for token in range(V):
        ends = [(row == token).nonzero()[0, 0].item() if (row == token).any() else max_new_tokens for row in firsts]
        if len(set(ends)) >= 2 and min(ends) < max_new_tokens - 2:
            return token
    raise AssertionError("no token ends the groups at different steps")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_greedy_sampling_is_the_same_with_and_without_the_preallocated_cache(kind, folders, monkeypatch):
    """Greedy sampling, groups of 2 (the cache reordered to the rows), groups ending at
    different steps (the cache compacted): the same tokens and logprobs with the cache
    written in place as with transformers' own growing one, and those logprobs are the
    model's own teacher-forced ones."""
    loaded = adapted(folders, kind)
    tok = loaded.tokenizer
    prompts = [p for p in ["sort 3 1 =", "sort 9 8 7 6 =", "sort 2 ="] for _ in range(2)]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    eos = _finishing_at_different_steps(loaded, ids, mask, group_size=2, max_new_tokens=12)

    calls = {"batch_select_indices": 0, "reorder_cache": 0}
    for method in calls:
        real = getattr(PreallocatedLayer, method)

        def counted(self, index, real=real, method=method):
            calls[method] += 1
            return real(self, index)

        monkeypatch.setattr(PreallocatedLayer, method, counted)

    def run():
        return sample(loaded.model, ids, mask, max_new_tokens=12, greedy=True, eos_token_ids=[eos],
                      pad_token_id=tok.pad_token_id, group_size=2)

    fast = run()
    layers = loaded.model.get_base_model().config.num_hidden_layers
    assert calls["reorder_cache"] == layers  # prompts encoded once, expanded to their rows
    compactions, rest = divmod(calls["batch_select_indices"], layers)
    assert compactions >= 1 and rest == 0  # finished rows dropped from every layer
    assert len(set(fast.completion_mask.sum(-1).tolist())) >= 2 and not fast.truncated.all()

    monkeypatch.setattr(rollout_module, "preallocate", lambda cache, room: cache)
    plain = run()
    assert calls == {"batch_select_indices": compactions * layers, "reorder_cache": layers}  # the patched run used none
    assert torch.equal(fast.completion_ids, plain.completion_ids)
    assert torch.equal(fast.completion_mask, plain.completion_mask)
    assert torch.allclose(fast.sampling_logprobs, plain.sampling_logprobs, atol=1e-5)

    with torch.no_grad():
        full = full_logits(loaded.model, fast, slice(0, 6)).log_softmax(-1)
    teacher = full.gather(-1, fast.completion_ids[..., None]).squeeze(-1) * fast.completion_mask
    assert torch.allclose(fast.sampling_logprobs, teacher, atol=1e-5)


# ------------------------------------------------------------------ 2. merged_lora
@pytest.mark.parametrize("kind,base_type", [("gpt2", "Conv1D"), ("llama", "Linear")])
def test_merged_lora_samples_the_adapter_and_puts_everything_back(kind, base_type, folders):
    loaded = adapted(folders, kind)
    model = loaded.model
    ids = token_ids(loaded)
    layers = lora_layers(model)
    weights = {n: t.detach().clone() for n, t in model.state_dict().items()}
    with_adapter = logits_of(model, ids)
    with reference_mode(model):
        without = logits_of(model, ids)
    assert not torch.allclose(with_adapter, without, atol=1e-3)  # the adapter matters

    with merged_lora(model) as merged:
        assert merged == len(layers) > 0
        for name in layers:
            stand_in = model.get_submodule(name)
            assert type(stand_in).__name__ == base_type and not stand_in.weight.requires_grad
        inside = logits_of(model, ids)
    assert torch.allclose(inside, with_adapter, atol=1e-5)
    assert not torch.allclose(inside, without, atol=1e-3)

    assert all(model.get_submodule(name) is layer for name, layer in layers.items())
    after = model.state_dict()
    assert after.keys() == weights.keys()
    assert all(torch.equal(after[n], weights[n]) for n in weights)  # no base (or adapter) weight written
    assert torch.equal(logits_of(model, ids), with_adapter)
    assert all(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)


def test_merged_lora_keeps_within_its_byte_limit_and_restores_after_an_error(folders):
    loaded = adapted(folders, "llama")
    model = loaded.model
    layers = lora_layers(model)
    ids = token_ids(loaded)
    with_adapter = logits_of(model, ids)
    with merged_lora(model, limit_bytes=0) as merged:
        assert merged == 0
        assert all(model.get_submodule(name) is layer for name, layer in layers.items())
    # Layer 0's q_proj (32 x 32 fp32, 4096 bytes) and k_proj (16 x 32: 2 key heads of 8,
    # 2048 bytes) fill 6144 bytes exactly; nothing after them fits.
    first = "base_model.model.model.layers.0.self_attn."
    with merged_lora(model, limit_bytes=4096 + 2048) as merged:
        assert merged == 2
        swapped = {name for name, layer in layers.items() if model.get_submodule(name) is not layer}
        assert swapped == {first + "q_proj", first + "k_proj"}
        assert torch.allclose(logits_of(model, ids), with_adapter, atol=1e-5)

    with pytest.raises(RuntimeError, match="decoding failed"):
        with merged_lora(model) as merged:
            assert merged == len(layers)
            raise RuntimeError("decoding failed")
    assert all(model.get_submodule(name) is layer for name, layer in layers.items())
    assert torch.equal(logits_of(model, ids), with_adapter)

    with reference_mode(model), merged_lora(model) as merged:  # disabled layers are not merged in
        assert merged == 0


def test_merged_lora_leaves_dora_and_tensor_subclass_weights_to_peft(folders):
    from peft import LoraConfig, get_peft_model

    class Marked(torch.Tensor):
        """A weight of a tensor subclass, as a quantised or sharded weight is."""

    loaded = adapted(folders, "llama")
    model = loaded.model
    layers = lora_layers(model)
    ids = token_ids(loaded)
    odd = "base_model.model.model.layers.1.mlp.up_proj"
    base = layers[odd].base_layer
    base.weight = nn.Parameter(base.weight.detach().clone().as_subclass(Marked), requires_grad=False)
    assert type(base.weight.data) is Marked
    with_adapter = logits_of(model, ids)
    with merged_lora(model) as merged:
        assert merged == len(layers) - 1
        assert model.get_submodule(odd) is layers[odd]
        assert torch.allclose(logits_of(model, ids), with_adapter, atol=1e-5)

    torch.manual_seed(0)
    tok = loaded.tokenizer
    plain = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    with peft_reading_deprecated_alias():
        dora = get_peft_model(plain, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], use_dora=True))
    dora.eval()
    with torch.no_grad():
        for name, param in dora.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    dora_layers = lora_layers(dora)
    assert len(dora_layers) == 4 and all(m.lora_variant for m in dora_layers.values())
    expected = logits_of(dora, ids)
    with merged_lora(dora) as merged:
        assert merged == 0
        assert torch.equal(logits_of(dora, ids), expected)


class _Tiny(nn.Module):
    """One linear layer with a bias: its merged weight is worked out by hand below."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.proj = nn.Linear(4, 3)

    def forward(self, x):
        return self.proj(x)


def test_merged_lora_keeps_its_weights_in_place_and_follows_the_lora_weights():
    # issue: a captured decode step replays the same storage, so the merged weight must
    # stay where it is from one rollout to the next while its values follow an update
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    import engine.model.merged_lora as merged_module

    with peft_reading_deprecated_alias():
        model = get_peft_model(_Tiny(), LoraConfig(r=2, lora_alpha=6, target_modules=["proj"]))
    (name,) = [n for n, m in model.named_modules() if isinstance(m, LoraLayer)]
    layer = model.get_submodule(name)
    with torch.no_grad():
        layer.lora_B["default"].weight.normal_(0, 0.5)
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    keys = set(model.state_dict())

    def by_hand():  # W + (alpha / r) B A, from the tensors themselves
        a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
        return (layer.base_layer.weight + 3.0 * b @ a).detach()

    def inside(x=x):
        with merged_lora(model, keep=True) as merged:
            assert merged == 1
            stand_in = model.get_submodule(name)
            assert type(stand_in) is nn.Linear and not stand_in.weight.requires_grad
            return stand_in, stand_in.weight.data_ptr(), stand_in.weight.detach().clone(), model(x).detach()

    first, ptr, weight, out = inside()
    assert torch.allclose(weight, by_hand(), atol=1e-6)
    assert torch.allclose(out, model(x).detach(), atol=1e-6)  # the adapter's own path, outside
    again, same_ptr, _, _ = inside()
    assert again is first and same_ptr == ptr

    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model(x).pow(2).sum().backward()
    optimizer.step()
    moved, moved_ptr, moved_weight, moved_out = inside()
    assert moved is first and moved_ptr == ptr  # the same storage ...
    assert not torch.allclose(moved_weight, weight, atol=1e-3)  # ... holding the updated merge
    assert torch.allclose(moved_weight, by_hand(), atol=1e-6)
    assert torch.allclose(moved_out, model(x).detach(), atol=1e-6)

    # nothing left in the model: its LoRA layer back, its state as before, gradients on the adapter
    assert model.get_submodule(name) is layer and set(model.state_dict()) == keys
    assert all(p.data_ptr() != ptr for p in model.parameters())
    assert all(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)
    assert merged_module._KEPT[layer].stand_in is first  # kept outside the model, for the next rollout

    model.double()  # another dtype: a new merged weight of that dtype, the right values
    stand_in, new_ptr, new_weight, new_out = inside(x.double())
    assert new_weight.dtype == torch.float64 and stand_in is not first
    assert torch.allclose(new_weight, by_hand(), atol=1e-12)
    assert torch.allclose(new_out, model(x.double()).detach(), atol=1e-12)
    with merged_lora(model, limit_bytes=0, keep=True) as merged:  # a layer left out lets its kept copy go
        assert merged == 0
    assert layer not in merged_module._KEPT
    inside(x.double())
    assert layer in merged_module._KEPT
    with merged_lora(model) as merged:  # not kept (no captured decode): let go on exit, memory back for the update
        assert merged == 1 and model.get_submodule(name) is not layer
    assert layer not in merged_module._KEPT


def test_merged_lora_storage_is_stable_across_rollouts_of_a_model(folders):
    loaded = adapted(folders, "llama")
    model = loaded.model
    ids = token_ids(loaded)
    layers = lora_layers(model)

    held = []  # every merged weight seen, held so that no storage is freed and handed out again

    def pointers_and_logits():
        with merged_lora(model, keep=True) as merged:
            assert merged == len(layers)
            held.extend(model.get_submodule(name).weight for name in layers)
            ptrs = {name: model.get_submodule(name).weight.data_ptr() for name in layers}
            return ptrs, logits_of(model, ids)

    before, inside = pointers_and_logits()
    assert torch.allclose(inside, logits_of(model, ids), atol=1e-5)
    with torch.no_grad():  # an update of every LoRA weight
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.add_(0.05 * torch.randn_like(p))
    after, inside = pointers_and_logits()
    assert after == before
    assert torch.allclose(inside, logits_of(model, ids), atol=1e-5)
    assert all(model.get_submodule(name) is layer for name, layer in layers.items())


# ------------------------------------------------------------------ 3. fuse_activations
def test_fuse_activations_swaps_gelu_new_for_its_fused_kernel():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=32, n_head=4, n_positions=32, vocab_size=50,
                                       bos_token_id=1, eos_token_id=2, activation_function="gelu_new")).eval()
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(0))
    before = logits_of(model, ids)
    assert [type(block.mlp.act) for block in model.transformer.h] == [NewGELUActivation] * 3
    assert fuse_activations(model) == 3
    assert [type(block.mlp.act) for block in model.transformer.h] == [GELUTanh] * 3
    assert not any(isinstance(m, NewGELUActivation) for m in model.modules())
    assert torch.allclose(logits_of(model, ids), before, atol=1e-5)
    assert fuse_activations(model) == 0  # nothing left to swap

    x = torch.linspace(-6, 6, 101)  # the two formulas, side by side
    assert torch.allclose(GELUTanh()(x), NewGELUActivation()(x), atol=1e-6)


def test_fuse_activations_leaves_other_activations_and_subclasses():
    relu = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, n_positions=16, vocab_size=20,
                                      bos_token_id=1, eos_token_id=2, activation_function="relu"))
    assert fuse_activations(relu) == 0
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, max_position_embeddings=16))  # silu
    assert fuse_activations(llama) == 0

    class Scaled(NewGELUActivation):  # computes something else: not swapped
        def forward(self, x):
            return 2 * super().forward(x)

    holder = nn.Sequential(nn.Linear(4, 4), Scaled(), nn.Sequential(NewGELUActivation()))
    assert fuse_activations(holder) == 1
    assert type(holder[1]) is Scaled and type(holder[2][0]) is GELUTanh


def test_the_builtin_model_loads_with_the_fused_activation():
    loaded = load_model(ModelConfig(name_or_path="builtin:tiny"))
    acts = [type(m) for m in loaded.model.modules() if isinstance(m, (NewGELUActivation, GELUTanh))]
    assert acts == [GELUTanh] * 4  # n_layer 4 (assets/tiny-model/config.json)


# ------------------------------------------------------------------ 4. reference_mode
def test_reference_mode_is_peft_disable_adapter_and_restores_what_was_on(folders):
    loaded = adapted(folders, "llama")
    model = loaded.model
    ids = token_ids(loaded)
    layers = lora_layers(model)
    lora_params = {n: p for n, p in model.named_parameters() if "lora_" in n}
    with_adapter = logits_of(model, ids)
    with model.disable_adapter():
        peft_reference = logits_of(model, ids)
    with reference_mode(model):
        assert all(layer.disable_adapters for layer in layers.values())
        assert not any(p.requires_grad for p in lora_params.values())
        ours = logits_of(model, ids)
    assert torch.equal(ours, peft_reference)
    assert not torch.allclose(ours, with_adapter, atol=1e-3)
    assert torch.equal(logits_of(model, ids), with_adapter)
    assert not any(layer.disable_adapters for layer in layers.values())
    assert all(p.requires_grad for p in lora_params.values())

    with pytest.raises(ValueError, match="reward failed"):
        with reference_mode(model):
            raise ValueError("reward failed")
    assert torch.equal(logits_of(model, ids), with_adapter)

    # A layer switched off before stays off after (peft's disable_adapter turns it back on).
    off = "base_model.model.model.layers.0.self_attn.v_proj"
    layers[off].enable_adapters(False)
    partial = logits_of(model, ids)
    with reference_mode(model):
        assert torch.equal(logits_of(model, ids), peft_reference)
    assert layers[off].disable_adapters
    assert not any(p.requires_grad for n, p in lora_params.items() if n.startswith(off + "."))
    assert all(p.requires_grad for n, p in lora_params.items() if not n.startswith(off + "."))
    assert all(not layer.disable_adapters for name, layer in layers.items() if name != off)
    assert torch.equal(logits_of(model, ids), partial)


def test_reference_mode_with_modules_to_save_takes_peft_own_way(folders):
    """A wrapper that is no LoRA layer (modules_to_save: a trained copy of lm_head) must be
    switched off too: the reference is peft's."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    plain = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    ids = torch.randint(3, 40, (2, 7), generator=torch.Generator().manual_seed(0))
    base_logits = logits_of(plain.eval(), ids)
    with peft_reading_deprecated_alias():
        model = get_peft_model(plain, LoraConfig(r=4, target_modules=["q_proj"], modules_to_save=["lm_head"])).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                param.add_(torch.randn_like(param) * 0.1)
    assert not torch.allclose(logits_of(model, ids), base_logits, atol=1e-3)
    with reference_mode(model):
        assert torch.allclose(logits_of(model, ids), base_logits, atol=1e-6)


# ------------------------------------------------------------------ 5. set_update_mode
def _training(model) -> set[str]:
    return {name for name, m in model.named_modules() if m.training}


def test_set_update_mode_flags_by_hand(folders):
    loaded = adapted(folders, "llama", lora={"dropout": 0.1})
    model = loaded.model
    layers = lora_layers(model)
    assert len(layers) == 14  # 7 projections x 2 layers
    dropout = {name + suffix for name in layers for suffix in (".lora_dropout", ".lora_dropout.default")}
    assert all(type(model.get_submodule(n)) is (nn.Dropout if n.endswith("default") else nn.ModuleDict)
               for n in dropout)
    for start in (model.train, model.eval):  # the outcome does not depend on the flags before
        start()
        set_update_mode(model, False)
        assert _training(model) == set()
        start()
        set_update_mode(model, True)  # GRPO and PPO updates: dropout-free, no checkpointing here
        assert _training(model) == set()
        start()
        set_update_mode(model, True, lora_dropout=True)  # DPO with disable_dropout false
        assert _training(model) == dropout
        set_update_mode(model, False, lora_dropout=True)  # sampling never trains anything
        assert _training(model) == set()

    checkpointed = adapted(folders, "llama", lora={"dropout": 0.1}, checkpointing=True)
    assert checkpointed.gradient_checkpointing
    model = checkpointed.model
    body = "base_model.model.model"  # LlamaModel and its decoder layers hold the checkpointing flag
    decoder = {body, body + ".layers.0", body + ".layers.1"}
    set_update_mode(model, True)
    assert _training(model) == decoder
    set_update_mode(model, True, lora_dropout=True)
    assert _training(model) == decoder | dropout
    set_update_mode(model, False)
    assert _training(model) == set()


# ------------------------------------------------------------------ 6. completion_logits
def made_rollout(V, prompts, group, P, T, seed=0) -> Rollout:
    """`prompts` distinct left-padded prompts of width P, each repeated `group` times, with
    random completions of random lengths (1..T)."""
    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(3, V, (prompts, P), generator=g)
    prompt_mask = torch.ones(prompts, P, dtype=torch.long)
    for i in range(prompts):
        prompt_mask[i, : i % 3] = 0
        prompt_ids[i, : i % 3] = 0
    prompt_ids, prompt_mask = prompt_ids.repeat_interleave(group, 0), prompt_mask.repeat_interleave(group, 0)
    B = prompts * group
    lengths = torch.randint(1, T + 1, (B, 1), generator=g)
    mask = (torch.arange(T)[None, :] < lengths).float()
    completion_ids = torch.randint(3, V, (B, T), generator=g).masked_fill(mask == 0, 0)
    return Rollout(prompt_ids, prompt_mask, completion_ids, mask, torch.zeros(B, T), lengths[:, 0] == T)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("prompts,group,P,rows,shared", [
    # Every pass that has rows sharing a prompt takes the shared prefix, the recorded rows'
    # small passes too: the after-update look is compared with the update's own pass, and a
    # plain pass there rounds differently (a 1.5e-5 change in update/change_top10_share
    # between 1 and 2 processes, tests/test_distributed.py, when small passes went plain).
    (1, 4, 10, slice(0, 4), True),
    (8, 8, 10, slice(0, 64), True),
    (8, 8, 10, slice(4, 60), True),  # groups cut at both ends
    (4, 1, 10, slice(0, 4), False),  # no two rows share a prompt: one plain pass
])
def test_shared_prefix_pass_wherever_rows_share_a_prompt(kind, prompts, group, P, rows, shared, folders, monkeypatch):
    loaded = adapted(folders, kind)
    model = loaded.model
    V = model.get_output_embeddings().weight.shape[0]
    rollout = made_rollout(V, prompts, group, P, T=6)
    calls = []
    real = forward.shared_prefix_completion_hidden

    def recorded(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(forward, "shared_prefix_completion_hidden", recorded)
    ids, mask = rollout.completion_ids[rows], rollout.completion_mask[rows]
    with torch.no_grad():
        got = completion_logits(model, rollout, rows, group_size=group).logprobs(ids)
        assert len(calls) == int(shared)
        expected = completion_logits(model, rollout, rows, group_size=group, shared_prefix=False).logprobs(ids)
        assert len(calls) == int(shared)  # shared_prefix=False never takes it
        full = full_logits(model, rollout, rows).log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1)
    assert torch.allclose(got * mask, expected * mask, atol=1e-5)
    assert torch.allclose(got * mask, full * mask, atol=1e-5)


def test_preallocated_layer_reset_and_repeat_act_on_its_buffers():
    """reset, batch_repeat_interleave, offload and prefetch change the buffers, not only
    the views: the next update is what DynamicLayer's would be (the inherited ones left
    stale columns after reset and broke the next update after a repeat)."""
    torch.manual_seed(0)
    k, v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4)
    new = torch.randn(2, 2, 1, 4)
    ours, theirs = PreallocatedLayer(k, v, 4), DynamicLayer()
    theirs.update(k, v)
    ours.reset(), theirs.reset()
    assert torch.equal(ours.update(new, new)[0], theirs.update(new, new)[0])
    ours, theirs = PreallocatedLayer(k, v, 4), DynamicLayer()
    theirs.update(k, v)
    ours.batch_repeat_interleave(2), theirs.batch_repeat_interleave(2)
    more = torch.randn(4, 2, 1, 4)
    assert torch.equal(ours.update(more, more)[1], theirs.update(more, more)[1])
    ours.offload(), ours.prefetch()
    assert ours.get_seq_length() == 4 and torch.equal(ours.keys, theirs.keys)


def test_the_policy_keeps_merged_weights_only_for_a_captured_decode(folders, monkeypatch):
    """Kept merged weights stay allocated through the update, so a rollout keeps them only
    when its decode is captured (a CUDA graph replays their storage); on this CPU `auto`
    decodes plainly and they are let go when sampling ends. The path the policy asks for is
    the one the sampler takes (decode_path with the same arguments)."""
    import engine.algorithms.policy as policy_module
    import engine.model.merged_lora as merged_module
    from engine.algorithms.policy import Policy, Sampling

    loaded = adapted(folders, "llama")
    policy = Policy(loaded, Sampling(max_tokens=4), group_size=1)
    asked = []
    real = policy_module.merged_lora

    def recording(model, **options):
        asked.append(options.get("keep"))
        return real(model, **options)

    monkeypatch.setattr(policy_module, "merged_lora", recording)
    policy.generate(["ab", "cd"], torch.Generator().manual_seed(0))
    assert asked == [False] and not any(m in merged_module._KEPT for m in lora_layers(loaded.model).values())
    monkeypatch.setattr(policy_module, "decode_path", lambda setting, device, tokens, sharded: "captured")
    kept = merged_module._KEPT.get
    with monkeypatch.context() as m:  # the capture itself needs CUDA: here only what the policy keeps
        m.setattr(policy_module, "sample", lambda *a, **k: None)
        policy.generate(["ab"], torch.Generator().manual_seed(0))
    assert asked == [False, True] and all(kept(layer) for layer in lora_layers(loaded.model).values())
