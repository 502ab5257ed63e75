"""Tests for the shipped tiny model in assets/tiny-model (loading only, no training)."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from engine.builtin_model.recipe import build_tokenizer, builtin_model_path

MODEL_PATH = builtin_model_path()


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(MODEL_PATH)


@pytest.fixture(scope="module")
def model():
    model = transformers.AutoModelForCausalLM.from_pretrained(MODEL_PATH)
    model.eval()
    return model


def test_builtin_model_path_points_at_assets():
    assert MODEL_PATH.parts[-2:] == ("assets", "tiny-model")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"):
        assert (MODEL_PATH / name).is_file(), f"{name} missing from {MODEL_PATH}; rebuild with python -m engine.builtin_model"


def test_shipped_model_is_small():
    assert (MODEL_PATH / "model.safetensors").stat().st_size < 8 * 1024 * 1024


@pytest.mark.parametrize(
    "text",
    ["sort 3 1 4 1 5 = 1 1 3 4 5", "calc (2+3)*4 = 20", "  two  spaces, tabs\tand\nnewlines  ", ""],
)
def test_tokenizer_round_trip_is_exact(tokenizer, text):
    ids = tokenizer.encode(text)
    assert len(ids) == len(text)  # one token per character, nothing added
    assert tokenizer.decode(ids) == text


def test_tokenizer_special_tokens(tokenizer):
    assert (tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token) == ("<pad>", "<bos>", "<eos>")
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert tokenizer.padding_side == "left"
    assert tokenizer.decode([tokenizer.eos_token_id], skip_special_tokens=True) == ""


def test_shipped_tokenizer_matches_recipe(tokenizer):
    assert tokenizer.get_vocab() == build_tokenizer().get_vocab()


def test_model_config_matches_tokenizer(model, tokenizer):
    config = model.config
    assert config.model_type == "gpt2"
    assert config.vocab_size == len(tokenizer)
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 1, 2)
    assert sum(p.numel() for p in model.parameters()) < 2_000_000


def test_greedy_sort_generation_produces_digits(model, tokenizer):
    inputs = tokenizer(["sort 3 1 2 =", "sort 9 0 7 7 ="], return_tensors="pt", padding=True)
    with torch.no_grad():
        output = model.generate(**inputs, do_sample=False, max_new_tokens=16)
    completions = tokenizer.batch_decode(output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    for completion in completions:
        digits = completion.split()
        assert digits, f"empty completion {completion!r}"
        assert all(d.isdigit() for d in digits), f"non-digit completion {completion!r}"


def test_recipe_file_records_accuracy():
    recipe = json.loads((MODEL_PATH / "recipe.json").read_text())
    greedy = recipe["held_out"]["greedy_accuracy"]
    assert set(greedy) == {"sort", "arithmetic"}
    # Partially competent on purpose: RL needs both signal and headroom.
    for task, accuracy in greedy.items():
        assert 0.1 <= accuracy <= 0.6, f"{task} greedy accuracy {accuracy} is outside the intended band"
