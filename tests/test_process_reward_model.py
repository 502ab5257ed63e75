"""Process reward models (`name: process_reward_model`): tiny random PRMs built here (a
Qwen2ForTokenClassification and a Qwen2ForCausalLM on the hub fixtures' byte-level BPE,
with a `<step>` tag token) score each step as the models' own logits, read by hand at
the tag tokens of the input written out by hand, say."""

from __future__ import annotations

import dataclasses
import json
import shutil
from functools import lru_cache

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    AutoTokenizer,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2ForTokenClassification,
)

from engine.foundation.errors import PresetError
from engine.preset.schema import preset_from_dict
from engine.rewards import (
    RewardError,
    absolute_reward_paths,
    build_reward_components,
    reward_source_problems,
    score_rewards_with_steps,
)
from engine.rewards.process_model import load_process_reward_model, process_reward_model_reward
from hub_fixtures import make_tiny_chat_model

TAG = "<step>"
PROMPTS = ["Q: 3+4?\n", "Q: 2*5?\n", "Q: 9-1?\n"]
COMPLETIONS = ["3+4=7.\n\nThe answer is 7.", "2*5=10.", "9-1=8.\n\nCheck: 8+1=9.\n\nThe answer is 8."]
# What the PRM reads, written out: the tag after each step's text, before its "\n\n".
TAGGED = ["Q: 3+4?\n3+4=7.<step>\n\nThe answer is 7.<step>",
          "Q: 2*5?\n2*5=10.<step>",
          "Q: 9-1?\n9-1=8.<step>\n\nCheck: 8+1=9.<step>\n\nThe answer is 8.<step>"]
# Each step's end in its completion, "\n\n" included; no delimiter: one step.
ENDS = [[8, 24], [7], [8, 23, 39]]


def save_prm(folder, tokenizer, head: str, num_labels: int = 2, seed: int = 0):
    """A tiny random Qwen2 PRM: a token classifier with `num_labels` classes or a causal LM."""
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=512, num_labels=num_labels,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
        initializer_range=0.3)  # larger than the default: the steps' scores differ clearly
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config) if head == "causal_lm" else Qwen2ForTokenClassification(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def prms(tmp_path_factory):
    root = tmp_path_factory.mktemp("prm")
    tokenizer = AutoTokenizer.from_pretrained(make_tiny_chat_model(root / "chat"))
    tokenizer.add_tokens([TAG], special_tokens=True)
    return {
        "tc2": save_prm(root / "tc2", tokenizer, "token_classification"),
        "tc3": save_prm(root / "tc3", tokenizer, "token_classification", num_labels=3, seed=1),
        "tc1": save_prm(root / "tc1", tokenizer, "token_classification", num_labels=1, seed=2),
        "lm": save_prm(root / "lm", tokenizer, "causal_lm", seed=3),
    }


@lru_cache(maxsize=None)
def _direct(folder: str, causal: bool):
    auto = AutoModelForCausalLM if causal else AutoModelForTokenClassification
    return auto.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def logits_at(folder: str, text: str, positions=None, causal=False) -> torch.Tensor:
    """The model's logits on `text` alone at `positions` (default: the tag tokens)."""
    model, tokenizer = _direct(folder, causal)
    ids = tokenizer(text, return_tensors="pt").input_ids
    if positions is None:
        positions = (ids[0] == tokenizer.convert_tokens_to_ids(TAG)).nonzero().flatten()
    with torch.no_grad():
        return model(ids).logits[0, positions].float()


def class_probability(folder: str, text: str, label: int) -> list[float]:
    return logits_at(folder, text).softmax(-1)[:, label].tolist()


def scores(result) -> list[list[float]]:
    return [[score for _, score in steps] for steps in result]


def test_token_classification_scores_each_step_at_its_tag(prms):
    reward = process_reward_model_reward(model=prms["tc2"], step_tag=TAG, device="cpu")
    result = reward(PROMPTS, COMPLETIONS)
    assert [[end for end, _ in steps] for steps in result] == ENDS
    expected = [class_probability(prms["tc2"], text, 1) for text in TAGGED]
    assert [len(e) for e in expected] == [2, 1, 3]  # one tag per step in the hand-written input
    for got, want in zip(scores(result), expected):
        assert got == pytest.approx(want, abs=1e-5)
    flat = [s for row in expected for s in row]
    assert len({round(s, 4) for s in flat}) == len(flat)  # a real test: every step scores differently
    assert reward.returns_steps is True and reward.step_delimiter == "\n\n"
    assert reward.reward_source == f"process reward model {prms['tc2']}"


@pytest.mark.parametrize("batch_size", [1, 2])
def test_small_batches_give_the_same_scores(prms, batch_size):
    whole = process_reward_model_reward(model=prms["tc2"], step_tag=TAG, device="cpu", batch_size=8)
    split = process_reward_model_reward(model=prms["tc2"], step_tag=TAG, device="cpu", batch_size=batch_size)
    for got, want in zip(scores(split(PROMPTS, COMPLETIONS)), scores(whole(PROMPTS, COMPLETIONS))):
        assert got == pytest.approx(want, abs=1e-5)


def test_without_a_tag_each_step_is_read_at_its_own_last_token(prms):
    result = process_reward_model_reward(model=prms["tc2"], device="cpu")(PROMPTS, COMPLETIONS)
    _, tokenizer = _direct(prms["tc2"], False)
    for prompt, completion, ends, steps in zip(PROMPTS, COMPLETIONS, ENDS, result):
        # the last token of the text up to each step's end ("\n\n" included)
        positions = [len(tokenizer(prompt + completion[:end]).input_ids) - 1 for end in ends]
        want = logits_at(prms["tc2"], prompt + completion, positions).softmax(-1)[:, 1].tolist()
        assert steps == [(end, pytest.approx(w, abs=1e-5)) for end, w in zip(ends, want)]


def test_the_entrys_step_delimiter_splits_the_steps(prms):
    reward = process_reward_model_reward(model=prms["tc2"], step_tag=TAG, step_delimiter="\n", device="cpu")
    ((steps,),) = [reward(["Q:\n"], ["a\nb"])]
    assert [end for end, _ in steps] == [2, 3]
    assert [s for _, s in steps] == pytest.approx(class_probability(prms["tc2"], "Q:\na<step>\nb<step>", 1), abs=1e-5)


def test_the_label_option_picks_the_class(prms):
    for label in (0, 2):
        reward = process_reward_model_reward(model=prms["tc3"], step_tag=TAG, label=label, device="cpu")
        for got, text in zip(scores(reward(PROMPTS, COMPLETIONS)), TAGGED):
            assert got == pytest.approx(class_probability(prms["tc3"], text, label), abs=1e-5)


def test_a_one_label_head_scores_the_sigmoid_of_its_logit(prms):
    reward = process_reward_model_reward(model=prms["tc1"], step_tag=TAG, device="cpu")
    for got, text in zip(scores(reward(PROMPTS, COMPLETIONS)), TAGGED):
        logit = logits_at(prms["tc1"], text)[:, 0]
        assert got == pytest.approx((1 / (1 + torch.exp(-logit))).tolist(), abs=1e-5)


def test_a_causal_lm_scores_good_over_good_plus_bad_after_the_tag(prms):
    reward = process_reward_model_reward(model=prms["lm"], step_tag=TAG, good_token="+", bad_token="-", device="cpu")
    assert load_process_reward_model(prms["lm"], "cpu").head == "causal_lm"  # read off config.architectures
    _, tokenizer = _direct(prms["lm"], True)
    good, bad = tokenizer.convert_tokens_to_ids(["+", "-"])
    for got, text in zip(scores(reward(PROMPTS, COMPLETIONS)), TAGGED):
        p = logits_at(prms["lm"], text, causal=True).softmax(-1)  # the next-token distribution at each tag
        want = (p[:, good] / (p[:, good] + p[:, bad])).tolist()
        assert got == pytest.approx(want, abs=1e-5)
        assert len(set(round(w, 5) for w in want)) == len(want)


class _NoLogitsToKeep(torch.nn.Module):
    """A causal LM whose forward takes no logits_to_keep: the PRM reads its full logits."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids=None, attention_mask=None, use_cache=None):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=use_cache)


def test_a_causal_lm_without_logits_to_keep_gives_the_same_logits(prms):
    from engine.rewards.process_model import tagged_input
    from engine.rewards.steps import split_step_ends

    loaded = load_process_reward_model(prms["lm"], "cpu")
    plain = dataclasses.replace(loaded, model=_NoLogitsToKeep(loaded.model))
    inputs = [tagged_input(p, c, split_step_ends(c, "\n\n"), "\n\n", TAG) for p, c in zip(PROMPTS, COMPLETIONS)]
    for kept, full in zip(loaded.step_logits(inputs, 2, 64), plain.step_logits(inputs, 2, 64)):
        assert torch.allclose(kept, full, atol=1e-5)


def test_long_prompts_are_cut_from_the_left(prms):
    prompt = "Q: " + "1+1=2. " * 20 + "3+4?\n"
    completion = "3+4=7.\n\nSo 7."
    reward = process_reward_model_reward(model=prms["tc2"], step_tag=TAG, max_length=24, device="cpu")
    ((steps,),) = [reward([prompt], [completion])]
    model, tokenizer = _direct(prms["tc2"], False)
    ids = tokenizer(prompt + "3+4=7.<step>\n\nSo 7.<step>").input_ids
    assert len(ids) > 24
    kept = torch.tensor([ids[-24:]])  # the Qwen tokenizer adds no special tokens to keep
    with torch.no_grad():
        logits = model(kept).logits[0, (kept[0] == tokenizer.convert_tokens_to_ids(TAG)).nonzero().flatten()]
    assert [s for _, s in steps] == pytest.approx(logits.softmax(-1)[:, 1].tolist(), abs=1e-5)


def test_a_completion_longer_than_max_length_is_refused(prms):
    reward = process_reward_model_reward(model=prms["tc2"], step_tag=TAG, max_length=6, device="cpu")
    with pytest.raises(RewardError, match=r"completion 1 with its step tags is longer than 6 tokens, the process "
                                          r"reward model's max_length .*raise the option max_length"):
        reward(["Q:", "Q:"], ["1", "3+4=7.\n\nThe answer is 7."])


def test_one_load_per_model_device_and_dtype(prms):
    assert load_process_reward_model(prms["tc2"], "cpu") is load_process_reward_model(prms["tc2"], torch.device("cpu"))


@pytest.mark.parametrize("options, message", [
    ({"model": "lm", "step_tag": TAG}, "is a causal_lm PRM: set the options good_token and bad_token"),
    ({"model": "lm", "good_token": "ки", "bad_token": "-"}, r"option 'good_token' 'ки' encodes to 4 tokens \["),
    ({"model": "lm", "good_token": "+", "bad_token": "-", "label": 1}, "option 'label' is for a token_classification"),
    ({"model": "tc2", "label": 2}, r"option 'label' is 2, but .* has 2 labels \(0 to 1"),
    ({"model": "tc1", "label": 1}, "has one label .*remove label or set it to 0"),
    ({"model": "tc2", "good_token": "+", "bad_token": "-"}, "good_token / bad_token are for a causal_lm head"),
    ({"model": "lm", "head": "token_classification"}, r"has no trained token_classification head \(score.bias, score.weight"),
])
def test_options_that_do_not_fit_the_model_are_refused_naming_them(prms, options, message):
    options = {**options, "model": prms[options["model"]]}
    with pytest.raises(RewardError, match=message):
        process_reward_model_reward(**options, device="cpu", where="rewards[0] (process_reward_model)")


def test_a_head_the_architectures_do_not_name_must_be_given(prms, tmp_path):
    folder = shutil.copytree(prms["tc2"], tmp_path / "custom")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["Qwen2ForProcessRewardModel"]}))
    with pytest.raises(RewardError, match=r"cannot tell the head of .* set the option head to token_classification"):
        process_reward_model_reward(model=str(folder), device="cpu")
    reward = process_reward_model_reward(model=str(folder), head="token_classification", step_tag=TAG, device="cpu")
    assert scores(reward(PROMPTS[:1], COMPLETIONS[:1]))[0] == pytest.approx(
        class_probability(prms["tc2"], TAGGED[0], 1), abs=1e-5)


def test_a_slow_tokenizer_is_refused(prms, monkeypatch):
    import transformers

    class Slow:
        is_fast = False
        pad_token_id = 0

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Slow())
    with pytest.raises(RewardError, match=r"is a slow \(Python\) tokenizer; .*tokenizer.json"):
        load_process_reward_model(prms["tc3"], "cpu", dtype="float16")  # a key not cached yet


def prm_preset(*rewards) -> dict:
    return {"algorithm": {"name": "grpo", "advantage_estimator": "grpo_process"}, "rewards": list(rewards)}


def test_a_preset_entry_builds_a_step_component(prms, tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "prm").symlink_to(prms["tc2"], target_is_directory=True)
    preset = preset_from_dict(prm_preset(
        {"name": "exact_match"},
        {"name": "process_reward_model", "label": "prm", "weight": 0.5, "step_delimiter": "\n\n",
         "options": {"model": "models/prm", "step_tag": TAG, "batch_size": 2}},
    ))
    components = build_reward_components(preset.rewards, device="cpu", base_dir=tmp_path)
    assert [(label, weight) for label, weight, _ in components] == [("exact_match", 1.0), ("prm", 0.5)]
    answers = {"answer": ["7", "10", "9"]}
    totals, parts, steps = score_rewards_with_steps(components, PROMPTS, COMPLETIONS, answers)
    expected = [class_probability(prms["tc2"], text, 1) for text in TAGGED]
    assert [[end for end, _ in row] for row in steps["prm"]] == ENDS
    assert scores(steps["prm"]) == [pytest.approx(e, abs=1e-5) for e in expected]
    assert parts["prm"] == pytest.approx([sum(e) / len(e) for e in expected], abs=1e-5)
    assert totals == pytest.approx([0.5 * sum(e) / len(e) for e in expected], abs=1e-5)  # no exact answer
    # a run's preset.yaml holds the folder's absolute path; nothing is missing
    assert absolute_reward_paths("process_reward_model", {"model": "models/prm"}, tmp_path)[1]["model"] == \
        str((tmp_path / "models" / "prm").resolve())
    assert reward_source_problems(preset.rewards, tmp_path) == []


def test_a_missing_folder_names_the_entry(tmp_path):
    preset = preset_from_dict(prm_preset({"name": "process_reward_model", "options": {"model": "./no-such-prm"}}))
    with pytest.raises(RewardError, match=r"^rewards\[0\] \(process_reward_model\): could not load the config"):
        build_reward_components(preset.rewards, device="cpu", base_dir=tmp_path)
    ((path, message),) = reward_source_problems(preset.rewards, tmp_path)
    assert path == "rewards.0.options.model" and message.startswith("folder ./no-such-prm does not exist")


@pytest.mark.parametrize("options, field, expected", [
    ({}, "options.model", "needs the option 'model'"),
    ({"model": 7}, "options.model", "option 'model' must be str"),
    ({"model": "x", "tag": "<s>"}, "options", "has no option 'tag'; allowed options: model (required), step_tag=''"),
    ({"model": "x", "step_delimiter": "\n"}, "options", "(step_delimiter is a field of the entry, beside options)"),
    ({"model": "x", "head": "classifier"}, "options",
     "option 'head' must be one of auto, token_classification, causal_lm, got 'classifier'"),
    ({"model": "x", "label": -1}, "options", "option 'label' must be an int >= 0"),
    ({"model": "x", "label": True}, "options", "option 'label' must be an int >= 0"),
    ({"model": "x", "step_tag": None}, "options", "option 'step_tag' must be text"),
    ({"model": "x", "good_token": "+"}, "options", "options good_token and bad_token go together"),
    ({"model": "x", "good_token": "+", "bad_token": "+"}, "options", "are both '+'"),
    ({"model": "x", "good_token": "", "bad_token": "-"}, "options", "option 'good_token' must be non-empty text"),
    ({"model": "x", "head": "causal_lm"}, "options", "head causal_lm needs the options good_token and bad_token"),
    ({"model": "x", "head": "causal_lm", "good_token": "+", "bad_token": "-", "label": 0}, "options",
     "option 'label' is for head token_classification"),
    ({"model": "x", "head": "token_classification", "good_token": "+", "bad_token": "-"}, "options",
     "good_token / bad_token are for head causal_lm"),
    ({"model": "x", "batch_size": 0}, "options", "option 'batch_size' must be an int >= 1"),
    ({"model": "x", "max_length": "long"}, "options", "option 'max_length' must be an int >= 1 or null"),
    ({"model": "x", "dtype": "fp8"}, "options", "option 'dtype' must be one of auto, float32, bfloat16, float16"),
])
def test_options_are_checked_by_the_preset(options, field, expected):
    with pytest.raises(PresetError) as info:
        preset_from_dict(prm_preset({"name": "process_reward_model", "options": options}))
    (problem,) = info.value.problems
    assert problem.startswith(f"rewards.0.{field}: ") and expected in problem, problem


def test_good_options_pass_the_preset():
    preset = preset_from_dict(prm_preset({"name": "process_reward_model", "options": {
        "model": "org/prm", "step_tag": " ки", "head": "causal_lm", "good_token": "+", "bad_token": "-",
        "batch_size": 4, "max_length": None, "dtype": "bfloat16"}}))
    assert preset.rewards[0].options["good_token"] == "+"
