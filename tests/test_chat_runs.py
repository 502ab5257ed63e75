"""Instruct models with chat templates, end to end and offline: a tiny Qwen2-architecture
model with Qwen2.5's real chat template and a BPE tokenizer (tests/hub_fixtures.py), a
GSM8K-shaped data set with the math verifier (GRPO) and a TRL-format preference set
(DPO), run through the CLI as a user would: in this process (engine_runs.cli), or, for a
test with a Hugging Face cache of its own (HF_HOME, read when the hub libraries are
imported), as a process of its own."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
import yaml

import hub_fixtures as hf
from engine.run import rundir
from engine.model.chat import chat_format, conversation
from engine.model.rollout import sample
from engine_runs import cli, rl_engine

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have?"


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return hf.make_tiny_chat_model(tmp_path_factory.mktemp("qwen") / "model")


@pytest.fixture(scope="module")
def tokenizer(chat_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(chat_model)


# ------------------------------------------------------------------- templating


@pytest.mark.parametrize("system", [None, "Answer with a number."])
def test_templated_prompt_is_what_apply_chat_template_gives(tokenizer, system):
    fmt = chat_format("auto", tokenizer.chat_template, system)
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": QUESTION}]
    expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    text = fmt.render(tokenizer, QUESTION)
    assert text == expected
    assert text.endswith("<|im_start|>assistant\n")
    if system is None:  # Qwen's template puts its own default system prompt in
        assert text.startswith("<|im_start|>system\nYou are Qwen")
    # The engine tokenizes the templated text without adding special tokens: the same ids.
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids == list(tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                                     return_dict=True)["input_ids"])


def test_a_conversation_keeps_its_own_system_message(tokenizer):
    messages = [{"role": "system", "content": "Think first."}, {"role": "user", "content": QUESTION}]
    fmt = chat_format("auto", tokenizer.chat_template, "ignored: the conversation has one")
    assert conversation(messages, "ignored") == messages
    assert fmt.render(tokenizer, messages) == tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)


def test_template_off_a_file_and_a_model_without_one(tokenizer, tmp_path):
    assert chat_format("none", tokenizer.chat_template, None).render(tokenizer, QUESTION) == QUESTION
    assert chat_format("auto", None, "Be brief.").render(tokenizer, QUESTION) == f"Be brief.\n\n{QUESTION}"
    (tmp_path / "plain.jinja").write_text(
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}")
    fmt = chat_format("plain.jinja", tokenizer.chat_template, None, tmp_path)
    assert fmt.render(tokenizer, QUESTION) == f"user: {QUESTION}\nassistant:"
    with pytest.raises(ValueError, match="model.chat_template: 'nope.jinja' is neither `auto`, `none` nor a template file"):
        chat_format("nope.jinja", None, None, tmp_path)
    with pytest.raises(ValueError, match="conversations .* but the model has no chat template"):
        chat_format("none", None, None).render(tokenizer, [{"role": "user", "content": "hi"}])


def test_a_dpo_answer_is_what_the_template_puts_after_the_prompt(tokenizer):
    fmt = chat_format("auto", tokenizer.chat_template, None)
    answer = fmt.answer(tokenizer, QUESTION, [{"role": "assistant", "content": "7"}])
    assert answer == "7<|im_end|>\n"
    assert fmt.answer(tokenizer, QUESTION, "7") == answer  # a text answer is the assistant's turn too


# --------------------------------------------------------------- end tokens


def test_generation_stops_at_each_of_several_end_tokens(chat_model, tokenizer):
    """Two rows sampled freely, then again with the same seeds and two of the tokens they
    drew declared end tokens (as Qwen's [<|im_end|>, <|endoftext|>]): one row stops at the
    first, the other at the second, each masked after it and not truncated."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(chat_model).eval()
    fmt = chat_format("auto", tokenizer.chat_template, None)
    enc = tokenizer([fmt.render(tokenizer, "2+2")], return_tensors="pt", add_special_tokens=False)

    def draw(seed, eos):
        return sample(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=16, eos_token_ids=eos,
                      pad_token_id=tokenizer.pad_token_id, generator=torch.Generator().manual_seed(seed))

    free = [draw(seed, [-1]).completion_ids[0].tolist() for seed in (0, 1)]
    a = free[0][2]
    b = next(t for j, t in enumerate(free[1]) if j >= 1 and t != a and a not in free[1][:j + 1]
             and t not in free[0][:3])
    for seed, end in ((0, a), (1, b)):
        stopped = draw(seed, [a, b])
        n = int(stopped.lengths[0])
        assert stopped.completion_ids[0, n - 1].item() == end
        assert stopped.completion_ids[0, :n].tolist() == free[seed][:n]
        assert n == min(i for i, t in enumerate(free[seed]) if t in (a, b)) + 1
        assert not bool(stopped.truncated[0]) and stopped.completion_mask[0, n:].sum() == 0


# ------------------------------------------------------------------ real runs


def _run(preset: dict, tmp_path, env: dict | None = None) -> tuple:
    """`rl-engine run` on the preset: (the result, the run's events). In this process; with
    `env`, the console script in a process of its own with that environment."""
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump(preset))
    run = tmp_path / "run"
    if env is None:
        result = cli("run", path, "--run-dir", run, cwd=tmp_path)
    else:
        result = subprocess.run([*rl_engine(), "run", str(path), "--run-dir", str(run)], capture_output=True,
                                text=True, env=env, cwd=tmp_path, timeout=300)
    return result, rundir.read_events(run) if (run / rundir.EVENTS_FILE).exists() else []


def test_grpo_on_a_gsm8k_shaped_set_with_the_math_verifier(chat_model, tmp_path):
    gsm8k = hf.make_gsm8k(tmp_path / "data", "save_to_disk")
    preset = {
        "name": "gsm8k-tiny",
        "model": {"name_or_path": str(chat_model), "lora": {"r": 4, "alpha": 8.0}},
        "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 12},
        "data": {"task": None, "dataset": str(gsm8k), "eval_split": "test", "prompt_field": "question",
                 "answer_pattern": r"####\s*(.+)", "system_prompt": "Put the answer in \\boxed{}.",
                 "num_train": 16, "num_eval": 4},
        "rewards": [{"name": "math_answer"}, {"name": "think_answer_format", "weight": 0.1}],
        "training": {"max_steps": 2, "batch_size": 8, "eval_steps": 0, "save_steps": 0, "record_rollouts": 2},
    }
    result, events = _run(preset, tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    started = events[0]
    assert started["model"]["chat_template"] == "tokenizer"
    assert len(started["model"]["eos_token_ids"]) == 2  # <|im_end|> and <|endoftext|>
    samples = [s for e in events if e["type"] == "samples" for s in e["samples"]]
    assert samples and all(s["prompt"].startswith("<|im_start|>system\nPut the answer in \\boxed{}.<|im_end|>")
                           and s["prompt"].endswith("<|im_start|>assistant\n") for s in samples)
    assert not any("<|im_end|>" in s["completion"] for s in samples)  # end tokens stripped for the rewards
    evals = [e for e in events if e["type"] == "eval"]
    assert evals and evals[-1]["num_examples"] == 4 and evals[-1]["accuracy"] is not None  # judged by math_answer
    record = json.loads(next((tmp_path / "run" / "trajectories").glob("*.jsonl")).read_text().splitlines()[0])
    assert "<|im_start|>user" in record["prompt"]  # the inspector shows the templated prompt, specials visible
    assert events[-1]["type"] == "run_finished"


def test_dpo_on_a_trl_preference_set(chat_model, tmp_path):
    prefs = hf.make_preference_set(tmp_path / "data", "save_to_disk", conversational=True)
    preset = {
        "name": "dpo-tiny",
        "model": {"name_or_path": str(chat_model), "lora": {"r": 4, "alpha": 8.0}},
        "algorithm": {"name": "dpo", "max_completion_length": 16},
        "data": {"task": None, "dataset": str(prefs), "eval_split": "test", "num_train": 20, "num_eval": 4},
        "rewards": [{"name": "math_answer"}],
        "training": {"max_steps": 2, "batch_size": 4, "eval_steps": 0, "save_steps": 0, "record_rollouts": 1},
    }
    result, events = _run(preset, tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    metrics = [e for e in events if e["type"] == "metrics"]
    assert len(metrics) == 2 and all(abs(m["loss"]) < 10 for m in metrics)
    record = json.loads(next((tmp_path / "run" / "trajectories").glob("*.jsonl")).read_text().splitlines()[0])
    chosen = record["chosen"]["tokens"]
    assert chosen[-1] == "<|im_end|>"  # the answer ends with the template's end of turn


def test_remote_code_is_refused_unless_the_preset_allows_it(chat_model, tmp_path):
    import shutil

    folder = tmp_path / "custom"
    shutil.copytree(chat_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update({"model_type": "my-custom-arch", "auto_map": {"AutoConfig": "configuration_x.XConfig",
                                                                "AutoModelForCausalLM": "modeling_x.XForCausalLM"}})
    (folder / "config.json").write_text(json.dumps(config))
    preset = {"model": {"name_or_path": str(folder)}, "training": {"max_steps": 1, "batch_size": 8},
              "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 4},
              "data": {"task": "sort", "num_train": 8, "num_eval": 0}}
    result, events = _run(preset, tmp_path)
    assert result.returncode == 2  # refused during set-up on what the preset says: as validate
    failed = events[-1]
    assert failed["type"] == "run_failed" and "model.trust_remote_code" in failed["message"]
    assert "would run with your rights" in failed["message"]


def test_an_uncached_hub_model_fails_fast_offline_naming_the_field(tmp_path, engine_env):
    env = {**engine_env, "HF_HOME": str(tmp_path / "empty_home"), "HF_HUB_OFFLINE": "1"}
    preset = {"model": {"name_or_path": "nobody/not-cached-model"}, "training": {"max_steps": 1, "batch_size": 8},
              "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 4},
              "data": {"task": "sort", "num_train": 8, "num_eval": 0}}
    # How long this takes is printed by bench/offline_hub_bench.py, not asserted here.
    result, events = _run(preset, tmp_path, env)
    assert result.returncode == 2 and events[-1]["type"] == "run_failed"
    message = events[-1]["message"]
    assert message.startswith("model.name_or_path: could not load the tokenizer 'nobody/not-cached-model'")
    assert "offline" in message and "hf download nobody/not-cached-model" in message


def test_a_cached_hub_model_loads_by_its_id_offline(chat_model, tmp_path, engine_env):
    hf.cache_model(tmp_path / "hf_home", "Qwen/Qwen2.5-0.5B-Instruct", chat_model)
    env = {**engine_env, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"}
    preset = {"model": {"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "lora": {"r": 2, "alpha": 4.0}},
              "training": {"max_steps": 1, "batch_size": 4, "eval_steps": 0, "save_steps": 0},
              "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 4},
              "data": {"task": "arithmetic", "num_train": 8, "num_eval": 0}}
    result, events = _run(preset, tmp_path, env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert events[0]["model"]["architecture"] == "Qwen2ForCausalLM"


@pytest.mark.parametrize("make", [hf.make_tiny_chat_model, hf.make_llama_chat_model], ids=["qwen", "llama"])
def test_the_preview_renders_templates_as_transformers_does(make, tmp_path):
    """The set-up form's preview (FolderTemplater, no transformers) gives the engine's
    templated text (the tokenizer's apply_chat_template) for text prompts, conversations
    and a system prompt."""
    from transformers import AutoTokenizer

    from engine.model.chat import FolderTemplater

    folder = make(tmp_path / "model")
    tokenizer, preview = AutoTokenizer.from_pretrained(folder), FolderTemplater(folder)
    conversation_ = [{"role": "system", "content": "Think."}, {"role": "user", "content": QUESTION},
                     {"role": "assistant", "content": "7"}, {"role": "user", "content": "And twice that?"}]
    for system in (None, "Be brief."):
        fmt = chat_format("auto", preview.chat_template, system)
        for prompt in (QUESTION, conversation_):
            assert fmt.render(preview, prompt) == fmt.render(tokenizer, prompt)
