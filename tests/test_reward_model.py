"""Reward models (`name: reward_model`): a tiny random GPT2ForSequenceClassification built
here scores like a direct forward pass, in batches or one by one, and trains a run."""

from __future__ import annotations

import pytest
import torch
import yaml
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    GPT2Config,
    GPT2ForSequenceClassification,
    GPT2LMHeadModel,
)

from conftest import small_preset_dict
from engine.run import rundir
from engine.builtin_model.recipe import build_tokenizer
from engine.preset.schema import preset_from_dict
from engine.rewards.model import load_reward_model, reward_model_reward
from engine.rewards import RewardError, build_reward_components, combine_rewards, reward_source_problems
from engine_runs import cli

PROMPTS = ["sort 3 1 =", "sort 2 =", "sort 9 8 7 6 =", "sort 5 5 ="]
COMPLETIONS = [" 1 3", " 2 and then a longer tail", "", " 5 5"]


def save_model(folder, num_labels=1, head=True, pad=True, seed=0):
    """A tiny random GPT-2 with the built-in character tokenizer, saved like any checkpoint."""
    tokenizer = build_tokenizer()
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=len(tokenizer), n_positions=64,
                        num_labels=num_labels, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id if pad else None)
    torch.manual_seed(seed)
    model = GPT2ForSequenceClassification(config) if head else GPT2LMHeadModel(config)
    model.save_pretrained(folder)
    if not pad:
        tokenizer.pad_token = None
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    return save_model(tmp_path_factory.mktemp("rm"))


def direct_scores(folder, texts):
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        return [model(**tokenizer(text, return_tensors="pt")).logits[0, 0].item() for text in texts]


def test_scores_are_the_models_logit_on_prompt_plus_completion(rm_dir):
    reward = reward_model_reward(model=str(rm_dir), device="cpu", batch_size=3)
    expected = direct_scores(rm_dir, [p + c for p, c in zip(PROMPTS, COMPLETIONS)])
    assert reward(PROMPTS, COMPLETIONS) == pytest.approx(expected, abs=1e-5)
    assert len(set(round(v, 6) for v in expected)) == len(expected)  # a real test: the texts score differently


@pytest.mark.parametrize("pad", [True, False], ids=["pad-token", "no-pad-token"])
def test_batches_give_the_same_scores_as_one_by_one(tmp_path, pad):
    folder = save_model(tmp_path / "rm", pad=pad)
    one = reward_model_reward(model=str(folder), device="cpu", batch_size=1)(PROMPTS, COMPLETIONS)
    batched = reward_model_reward(model=str(folder), device="cpu", batch_size=4)(PROMPTS, COMPLETIONS)
    assert batched == pytest.approx(one, abs=1e-5)
    loaded = load_reward_model(str(folder), "cpu")
    assert loaded.model.config.pad_token_id == loaded.tokenizer.pad_token_id is not None
    if not pad:
        assert loaded.tokenizer.pad_token_id == loaded.tokenizer.eos_token_id


def test_max_length_keeps_the_end_of_the_text(rm_dir):
    texts = [p + c for p, c in zip(PROMPTS, COMPLETIONS)]
    loaded = load_reward_model(str(rm_dir), "cpu")
    cut = loaded.score(texts, batch_size=4, max_length=6)
    assert cut == pytest.approx(direct_scores(rm_dir, [t[-6:] for t in texts]), abs=1e-5)


def test_a_model_is_loaded_once_per_device(rm_dir, tmp_path):
    preset = preset_from_dict({"rewards": [
        {"name": "reward_model", "options": {"model": str(rm_dir)}},
        {"name": "reward_model", "label": "rm_small_batches", "weight": 0.5,
         "options": {"model": str(rm_dir), "batch_size": 1}},
    ]})
    components = build_reward_components(preset.rewards, device="cpu", base_dir=tmp_path)
    assert [(label, weight) for label, weight, _ in components] == [("reward_model", 1.0), ("rm_small_batches", 0.5)]
    assert load_reward_model(str(rm_dir), "cpu") is load_reward_model(str(rm_dir), torch.device("cpu"))
    totals, parts = combine_rewards(components, PROMPTS, COMPLETIONS, {})
    assert parts["reward_model"] == pytest.approx(parts["rm_small_batches"], abs=1e-5)
    assert totals == pytest.approx([1.5 * v for v in parts["reward_model"]], abs=1e-5)


def test_a_relative_folder_is_found_next_to_the_preset(rm_dir, tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "rm").symlink_to(rm_dir, target_is_directory=True)
    preset = preset_from_dict({"rewards": [{"name": "reward_model", "options": {"model": "models/rm"}}]})
    ((label, _, reward),) = build_reward_components(preset.rewards, device="cpu", base_dir=tmp_path)
    assert reward(PROMPTS[:1], COMPLETIONS[:1]) == pytest.approx(direct_scores(rm_dir, [PROMPTS[0] + COMPLETIONS[0]]),
                                                                 abs=1e-5)


def test_wrong_number_of_labels_is_refused_naming_it(tmp_path):
    folder = save_model(tmp_path / "three", num_labels=3)
    preset = preset_from_dict({"rewards": [{"name": "exact_match"},
                                           {"name": "reward_model", "options": {"model": str(folder)}}]})
    with pytest.raises(RewardError) as info:
        build_reward_components(preset.rewards, device="cpu")
    assert str(info.value).startswith("rewards[1] (reward_model): ")
    assert "num_labels 3" in str(info.value)
    # the workbench's check (no torch) says the same before a run
    ((path, message),) = reward_source_problems(preset.rewards)
    assert path == "rewards.1.options.model" and "num_labels 3" in message


def test_a_causal_lm_is_not_a_reward_model(tmp_path):
    folder = save_model(tmp_path / "lm", head=False)
    with pytest.raises(RewardError, match=r"has no trained reward head \(score.weight"):
        reward_model_reward(model=str(folder), device="cpu")


def test_a_missing_folder_names_the_entry(tmp_path):
    preset = preset_from_dict({"rewards": [{"name": "reward_model", "options": {"model": "./no-such-rm"}}]})
    with pytest.raises(RewardError, match=r"^rewards\[0\] \(reward_model\): could not load the config"):
        build_reward_components(preset.rewards, device="cpu", base_dir=tmp_path)
    ((path, message),) = reward_source_problems(preset.rewards, tmp_path)
    assert path == "rewards.0.options.model" and message.startswith("folder ./no-such-rm does not exist")


def test_options_are_checked_by_the_preset():
    from engine.foundation.errors import PresetError

    for options, field, expected in [
        ({}, "options.model", "needs the option 'model'"),
        ({"model": 7}, "options.model", "option 'model' must be str"),
        ({"model": "x", "batch": 2}, "options", "has no option 'batch'; allowed options: model (required), batch_size=32"),
        ({"model": "x", "batch_size": 0}, "options", "option 'batch_size' must be an int >= 1"),
        ({"model": "x", "max_length": "long"}, "options", "option 'max_length' must be an int >= 1 or null"),
        ({"model": "x", "dtype": "fp8"}, "options", "option 'dtype' must be one of auto, float32, bfloat16, float16"),
    ]:
        with pytest.raises(PresetError) as info:
            preset_from_dict({"rewards": [{"name": "reward_model", "options": options}]})
        (problem,) = info.value.problems
        assert problem.startswith(f"rewards.0.{field}: ") and expected in problem, problem


def test_a_short_run_logs_the_reward_models_component(rm_dir, tmp_path):
    data = small_preset_dict(max_steps=2, eval_steps=0)
    data["rewards"] = [{"name": "exact_match"},
                       {"name": "reward_model", "weight": 0.5, "options": {"model": str(rm_dir), "batch_size": 3}}]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    run = tmp_path / "run"
    result = cli("run", tmp_path / "p.yaml", "--run-dir", run, "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    events = rundir.read_events(run)
    metrics = [e for e in events if e["type"] == "metrics"]
    assert len(metrics) == 2
    assert all(isinstance(m["rewards/reward_model/mean"], float) for m in metrics)
    samples = next(e for e in events if e["type"] == "samples")["samples"]
    assert set(samples[0]["rewards"]) == {"exact_match", "reward_model"}
    # the total is the weighted sum of the logged components
    s = samples[0]
    assert s["reward"] == pytest.approx(s["rewards"]["exact_match"] + 0.5 * s["rewards"]["reward_model"], abs=1e-5)
    evals = [e for e in events if e["type"] == "eval"]
    assert evals and "rewards/reward_model/mean" in evals[-1]
