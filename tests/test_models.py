"""Model loading: any HF causal LM through one path, LoRA targets by architecture."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from engine.builtin_model.recipe import build_tokenizer
from engine.model.loading import ModelLoadError, find_lora_targets, load_model, reference_mode, resolve_model_path
from engine.preset.schema import preset_from_dict
from engine.model.config import ModelConfig
from engine.model.rollout import filter_logits, positions_from_mask, sample


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A tiny Llama-style model saved like any checkpoint on disk."""
    folder = tmp_path_factory.mktemp("llama")
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_llama_style_model_loads_with_auto_lora_targets(llama_dir):
    loaded = load_model(ModelConfig(name_or_path=str(llama_dir)))
    assert sorted(loaded.target_modules) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    assert loaded.context_length == 64
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in loaded.model.named_parameters() if "lora_A" in n}
    assert adapted == set(loaded.target_modules)
    trainable = [n for n, p in loaded.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_llama_style_model_trains_a_grpo_step(llama_dir, tmp_path, monkeypatch):
    import engine.algorithms.base as trainer_module  # rewards are scored in Trainer.score
    from conftest import small_preset_dict
    from engine.algorithms.grpo.trainer import GRPOTrainer

    # The random model's completions all score 0 on the task, so every advantage would be
    # 0 and (policy = reference at the start) the step would have no gradient: give the
    # completions of each group different rewards so the step has something to learn.
    monkeypatch.setattr(trainer_module, "score_rewards_with_steps", lambda components, prompts, completions, fields: (
        [float(i % 4) for i in range(len(prompts))], {"index": [float(i % 4) for i in range(len(prompts))]}, {}))
    data = small_preset_dict(max_steps=1)
    data["model"]["name_or_path"] = str(llama_dir)
    data["algorithm"]["beta"] = 0.04  # exercise the reference pass too
    trainer = GRPOTrainer(preset_from_dict(data), tmp_path / "run")
    named = dict(trainer.model.named_parameters())
    before = {n: p.detach().clone() for n, p in named.items()}
    metrics = trainer.train_step().metrics
    assert metrics["kl"] is not None and metrics["kl"] >= 0
    assert torch.isfinite(torch.tensor(metrics["loss"]))
    # a finite loss is not training: the step moved the adapter, and only the adapter
    lora = {n for n, p in named.items() if p.requires_grad}
    assert lora and all("lora_" in n for n in lora)
    assert any(not torch.equal(before[n], named[n]) for n in lora), "no adapter weight changed"
    assert all(torch.equal(before[n], named[n]) for n in named if n not in lora), "a base weight changed"


def test_builtin_model_resolves_to_the_shipped_folder():
    path = resolve_model_path("builtin:tiny")
    assert path.endswith("assets/tiny-model")
    with pytest.raises(ModelLoadError, match="unknown built-in model"):
        resolve_model_path("builtin:huge")


def test_gpt2_targets_are_its_projections():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=20, n_positions=16))
    assert find_lora_targets(model) == ["c_attn", "c_proj", "c_fc"]


def test_unknown_architecture_falls_back_to_linear_layers():
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = type("C", (), {"model_type": "mystery"})()
            self.embed_tokens = torch.nn.Embedding(10, 4)
            self.mixer = torch.nn.Linear(4, 4)
            self.lm_head = torch.nn.Linear(4, 10)

    assert find_lora_targets(Tiny()) == ["mixer"]


def test_missing_model_names_the_field(tmp_path):
    with pytest.raises(ModelLoadError, match="model.name_or_path") as info:
        load_model(ModelConfig(name_or_path=str(tmp_path / "nowhere" / "model")))
    assert "not a local folder" in str(info.value) or "could not load" in str(info.value)


def test_reference_mode_disables_the_adapter(llama_dir):
    loaded = load_model(ModelConfig(name_or_path=str(llama_dir)))
    model = loaded.model
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.5)  # make the adapter matter
        adapted = model(input_ids=ids).logits
        with reference_mode(model):
            reference = model(input_ids=ids).logits
        base = model.get_base_model()
        with model.disable_adapter():
            plain = base(input_ids=ids).logits
    assert not torch.allclose(adapted, reference)
    assert torch.allclose(reference, plain)


def test_positions_ignore_left_padding():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert positions_from_mask(mask).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]


def test_filter_logits_top_p_and_top_k():
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log()
    kept = filter_logits(logits, top_p=0.7)
    assert torch.isfinite(kept).tolist() == [[True, True, False]]
    kept = filter_logits(logits, top_k=1)
    assert torch.isfinite(kept).tolist() == [[True, False, False]]


def test_sampling_matches_full_forward_and_stops_at_eos(llama_dir):
    """The cached decoding loop's logprobs equal a full forward pass over the same tokens,
    for left-padded prompts of different lengths, and nothing after EOS counts."""
    loaded = load_model(ModelConfig(name_or_path=str(llama_dir)))
    model, tok = loaded.model, loaded.tokenizer
    enc = tok(["sort 3 1 2 =", "sort 9 8 7 6 5 ="], return_tensors="pt", padding=True, add_special_tokens=False)
    gen = torch.Generator().manual_seed(0)
    rollout = sample(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=12,
                     eos_token_ids=loaded.eos_token_ids, pad_token_id=tok.pad_token_id, generator=gen)
    full_ids = torch.cat([rollout.prompt_ids, rollout.completion_ids], 1)
    attention = torch.cat([rollout.prompt_mask, rollout.completion_mask.long()], 1)
    with torch.no_grad():
        logits = model(input_ids=full_ids, attention_mask=attention,
                       position_ids=positions_from_mask(attention)).logits
    T = rollout.completion_ids.shape[1]
    logp = torch.log_softmax(logits[:, -T - 1:-1].float(), -1).gather(-1, rollout.completion_ids[..., None])[..., 0]
    mask = rollout.completion_mask.bool()
    assert torch.allclose(logp[mask], rollout.sampling_logprobs[mask], atol=1e-4)
    for row, n in zip(rollout.completion_ids, rollout.lengths.long()):
        if n < T:
            assert int(row[n - 1]) in loaded.eos_token_ids


def test_greedy_sampling_is_deterministic(llama_dir):
    loaded = load_model(ModelConfig(name_or_path=str(llama_dir)))
    enc = loaded.tokenizer(["sort 1 2 ="] * 2, return_tensors="pt", add_special_tokens=False)
    runs = [sample(loaded.model, enc["input_ids"], enc["attention_mask"], max_new_tokens=6, greedy=True,
                   eos_token_ids=loaded.eos_token_ids, pad_token_id=loaded.tokenizer.pad_token_id).completion_ids
            for _ in range(2)]
    assert torch.equal(runs[0], runs[1])


def test_rows_that_finish_early_leave_the_batch_without_changing_the_rest(llama_dir):
    """With many tokens counting as EOS, rows end at different steps and are dropped from
    the batch; the logprobs of the rows still generating must match a full forward."""
    loaded = load_model(ModelConfig(name_or_path=str(llama_dir)))
    model, tok = loaded.model, loaded.tokenizer
    eos = list(range(3, 60))  # most of the vocabulary ends a completion
    enc = tok(["sort 3 1 2 ="] * 16, return_tensors="pt", add_special_tokens=False)
    rollout = sample(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=12, eos_token_ids=eos,
                     pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(3), group_size=4)
    lengths = rollout.lengths.long()
    assert len(set(lengths.tolist())) > 2, "rows should end at different steps"
    full_ids = torch.cat([rollout.prompt_ids, rollout.completion_ids], 1)
    attention = torch.cat([rollout.prompt_mask, rollout.completion_mask.long()], 1)
    with torch.no_grad():
        logits = model(input_ids=full_ids, attention_mask=attention, position_ids=positions_from_mask(attention)).logits
    T = rollout.completion_ids.shape[1]
    logp = torch.log_softmax(logits[:, -T - 1:-1].float(), -1).gather(-1, rollout.completion_ids[..., None])[..., 0]
    mask = rollout.completion_mask.bool()
    assert torch.allclose(logp[mask], rollout.sampling_logprobs[mask], atol=1e-4)
    assert (rollout.completion_ids[~mask] == tok.pad_token_id).all()
