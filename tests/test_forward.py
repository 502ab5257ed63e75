"""The shared-prefix forward gives the plain forward's logits and gradients."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from engine.builtin_model import build_tokenizer
from engine.forward import completion_logits, group_index
from engine.models import load_model
from engine.preset import ModelConfig
from engine.rollout import sample


def test_group_index():
    firsts, inverse = group_index(slice(2, 8), 4, "cpu")
    assert firsts.tolist() == [2, 4] and inverse.tolist() == [0, 0, 1, 1, 1, 1]
    firsts, inverse = group_index(slice(0, 4), 2, "cpu")
    assert firsts.tolist() == [0, 2] and inverse.tolist() == [0, 0, 1, 1]


def build(kind, folder):
    tok = build_tokenizer()
    ids = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    if kind == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64, **ids))
    else:
        model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=64, **ids))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    loaded = load_model(ModelConfig(name_or_path=str(folder)))
    with torch.no_grad():  # a trained-looking adapter, so LoRA paths matter
        for name, param in loaded.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    loaded.model.eval()
    return loaded


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_shared_prefix_matches_plain(kind, tmp_path):
    loaded = build(kind, tmp_path / kind)
    model, tok = loaded.model, loaded.tokenizer
    prompts = [p for p in ["sort 3 1 =", "sort 9 8 7 6 5 4 ="] for _ in range(3)]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    rollout = sample(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=10,
                     eos_token_ids=loaded.eos_token_ids, pad_token_id=tok.pad_token_id,
                     generator=torch.Generator().manual_seed(1), group_size=3)
    # group rows are sampled independently
    assert len({tuple(r.tolist()) for r in rollout.completion_ids}) > 2
    results = {}
    for shared in (False, True):
        for rows in (slice(0, 6), slice(1, 5)):  # whole groups, and a slice cutting groups
            model.zero_grad()
            logits = completion_logits(model, rollout, rows, group_size=3, shared_prefix=shared)
            mask = rollout.completion_mask[rows]
            (logits.log_softmax(-1).amax(-1) * mask).sum().backward()
            grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
            results[shared, rows.start] = (logits.detach() * mask[..., None], grads)
    for start in (0, 1):
        plain, shared = results[False, start], results[True, start]
        assert torch.allclose(plain[0], shared[0], atol=1e-5)
        assert torch.allclose(plain[1], shared[1], rtol=1e-4, atol=1e-6)


def test_grouped_sampling_logprobs_match_ungrouped_prefill(tmp_path):
    loaded = build("gpt2", tmp_path / "g")
    tok = loaded.tokenizer
    enc = tok(["sort 1 2 =", "sort 1 2 ="], return_tensors="pt", add_special_tokens=False)
    outs = [sample(loaded.model, enc["input_ids"], enc["attention_mask"], max_new_tokens=8, greedy=True,
                   eos_token_ids=loaded.eos_token_ids, pad_token_id=tok.pad_token_id, group_size=g)
            for g in (1, 2)]
    assert torch.equal(outs[0].completion_ids, outs[1].completion_ids)
    assert torch.allclose(outs[0].sampling_logprobs, outs[1].sampling_logprobs, atol=1e-5)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_hidden_states_for_the_value_head_match_between_paths(kind, tmp_path):
    """PPO's value head reads the hidden state at each position that predicts a
    completion token; both forward paths must give the same states, and the logits
    must still be the plain ones."""
    loaded = build(kind, tmp_path / kind)
    model, tok = loaded.model, loaded.tokenizer
    prompts = [p for p in ["sort 3 1 =", "sort 9 8 7 ="] for _ in range(2)]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    rollout = sample(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=6,
                     eos_token_ids=loaded.eos_token_ids, pad_token_id=tok.pad_token_id,
                     generator=torch.Generator().manual_seed(1), group_size=2)
    rows = slice(0, 4)
    mask = rollout.completion_mask[..., None]
    with torch.no_grad():
        plain_logits, plain_hidden = completion_logits(model, rollout, rows, 2, shared_prefix=False, with_hidden=True)
        shared_logits, shared_hidden = completion_logits(model, rollout, rows, 2, shared_prefix=True, with_hidden=True)
        logits_only = completion_logits(model, rollout, rows, 2, shared_prefix=False)
    assert plain_hidden.shape[:2] == rollout.completion_ids.shape
    assert torch.allclose(plain_hidden * mask, shared_hidden * mask, atol=1e-5)
    assert torch.allclose(plain_logits * mask, shared_logits * mask, atol=1e-5)
    assert torch.equal(plain_logits, logits_only)
    # The hidden state is the one the LM head reads (after the final norm for GPT-2):
    # projecting it gives the logits.
    if kind == "gpt2":
        head = model.get_output_embeddings()
        assert torch.allclose(head(plain_hidden) * mask, plain_logits * mask, atol=1e-4)
