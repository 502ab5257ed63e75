"""The shared-prefix forward gives the plain forward's logits and gradients."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from engine.builtin_model.recipe import build_tokenizer
from engine.model.forward import completion_logits, group_index
from engine.model.loading import load_model
from engine.model.config import ModelConfig
from engine.model.rollout import sample


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


def full_logits(model, rollout, rows):
    """The model's own forward over every row: the logits predicting each completion
    token, all of them at once (the reference the chunked paths must equal)."""
    from engine.model.rollout import positions_from_mask

    attention = torch.cat([rollout.prompt_mask[rows], rollout.completion_mask[rows].long()], dim=1)
    ids = torch.cat([rollout.prompt_ids[rows], rollout.completion_ids[rows]], dim=1)
    T = rollout.completion_ids.shape[1]
    out = model(input_ids=ids, attention_mask=attention, position_ids=positions_from_mask(attention))
    return out.logits[:, -T - 1:-1, :].float()


def grouped_rollout(loaded):
    tok = loaded.tokenizer
    prompts = [p for p in ["sort 3 1 =", "sort 9 8 7 6 5 4 ="] for _ in range(3)]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    return sample(loaded.model, enc["input_ids"], enc["attention_mask"], max_new_tokens=10,
                  eos_token_ids=loaded.eos_token_ids, pad_token_id=tok.pad_token_id,
                  generator=torch.Generator().manual_seed(1), group_size=3)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("chunk", [None, 3 * 40])  # one chunk; 3 tokens a chunk (vocabulary 40)
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "checkpointed"])
def test_chunked_shared_prefix_logprobs_match_the_full_forward(kind, chunk, fused, tmp_path, monkeypatch):
    """Logprobs and gradients from hidden states, head applied chunk by chunk (gradient
    worked out in the forward pass, or the chunk checkpointed), and the shared-prefix
    pass, equal those of the model's own full-logits forward."""
    monkeypatch.setattr("engine.model.token_logits.LOGIT_CHUNK_ELEMENTS", chunk or (1 << 26))
    loaded = build(kind, tmp_path / kind)
    model = loaded.model
    rollout = grouped_rollout(loaded)
    assert len({tuple(r.tolist()) for r in rollout.completion_ids}) > 2  # group rows sampled independently
    for rows in (slice(0, 6), slice(1, 5)):  # whole groups, and a slice cutting groups
        ids, mask = rollout.completion_ids[rows], rollout.completion_mask[rows]
        model.zero_grad()
        full = full_logits(model, rollout, rows) / 0.7
        reference = full.log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1)
        (reference * mask).sum().backward()
        expected = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        for shared in (False, True):
            model.zero_grad()
            logits = completion_logits(model, rollout, rows, group_size=3, shared_prefix=shared, temperature=0.7)
            assert logits.shape == full.shape and (logits.head.linear is not None)
            if not fused:
                logits.head.linear = None  # as for a soft-capped or biased head
            logprobs = logits.logprobs(ids)
            (logprobs * mask).sum().backward()
            grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
            assert torch.allclose(logprobs * mask, reference.detach() * mask, atol=1e-5)
            assert torch.allclose(grads, expected, rtol=1e-4, atol=1e-6)
            assert torch.allclose(logits.full() * mask[..., None], full.detach() * mask[..., None], atol=1e-5)
            entropy = -(full.softmax(-1) * full.log_softmax(-1)).sum(-1).detach()
            assert torch.allclose(logits.entropy() * mask, entropy * mask, atol=1e-5)
            probs, top_ids = logits.top(2)
            assert torch.equal(top_ids, full[:2].topk(5, dim=-1).indices)
            # past a row's end the two passes give the padding different positions; nothing reads those
            assert torch.allclose(logits.sums() * mask, full.sum(-1).detach() * mask, atol=1e-3)


def test_a_chunk_of_logits_is_all_that_is_kept_for_backward(tmp_path, monkeypatch):
    """Under autograd the full logits would be saved for the backward pass (b x T x V);
    chunked and checkpointed, the saved tensors hold no logits at all."""
    loaded = build("llama", tmp_path / "llama")
    rollout = grouped_rollout(loaded)
    rows = slice(0, 6)
    b, T = rollout.completion_ids.shape
    V = loaded.model.get_output_embeddings().weight.shape[0]

    def saved_logit_bytes(run) -> int:
        saved = []

        def pack(t):
            if t.dim() >= 2 and t.shape[-1] == V:
                saved.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            run()
        return sum(saved)

    def full():
        logits = full_logits(loaded.model, rollout, rows)
        return logits.log_softmax(-1).gather(-1, rollout.completion_ids[rows][..., None]).sum()

    def chunked():
        return completion_logits(loaded.model, rollout, rows, group_size=3).logprobs(rollout.completion_ids[rows]).sum()

    assert saved_logit_bytes(full) >= b * T * V * 4  # at least the fp32 logits, whole
    assert saved_logit_bytes(chunked) == 0  # recomputed chunk by chunk in the backward pass


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
    completion token; both forward paths must give the same states, and they are the
    states the LM head reads: projecting them gives the model's own logits."""
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
        plain = completion_logits(model, rollout, rows, 2, shared_prefix=False)
        shared = completion_logits(model, rollout, rows, 2, shared_prefix=True)
        full = full_logits(model, rollout, rows)
    assert plain.hidden.shape[:2] == rollout.completion_ids.shape
    assert torch.allclose(plain.hidden * mask, shared.hidden * mask, atol=1e-5)
    head = model.get_output_embeddings()
    assert torch.allclose(head(plain.hidden) * mask, full * mask, atol=1e-4)
