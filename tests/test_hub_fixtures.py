"""The hub stand-ins in hub_fixtures.py behave like what they imitate."""

import json
import os
import subprocess
import sys
import textwrap

import datasets  # a dependency (pyproject.toml): a missing one fails, not skips
import pytest

import hub_fixtures as hf


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    return hf.make_tiny_chat_model(tmp_path_factory.mktemp("qwen") / "model")


def test_qwen_chat_template_and_generation_config(qwen_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_dir)
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}],
                                   tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                    "assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    with_system = tok.apply_chat_template([{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Hi"}], tokenize=False)
    assert with_system.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi")
    assert tok.decode(tok(text)["input_ids"]) == text  # specials are single tokens, round trip exact
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.bos_token is None  # Qwen has no bos
    assert 400 <= len(tok) <= 600

    model = AutoModelForCausalLM.from_pretrained(qwen_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.vocab_size == len(tok) and model.config.tie_word_embeddings
    ids = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert model.generation_config.eos_token_id == ids
    assert model.generation_config.pad_token_id == ids[1]
    batch = tok(text, return_tensors="pt")
    assert model(**batch).logits.shape == (1, batch["input_ids"].shape[1], len(tok))


def test_same_seed_same_weights(tmp_path):
    from safetensors.torch import load_file

    a = load_file(hf.make_tiny_chat_model(tmp_path / "a", seed=3) / "model.safetensors")
    b = load_file(hf.make_tiny_chat_model(tmp_path / "b", seed=3) / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_llama_template_writes_bos(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = hf.make_llama_chat_model(tmp_path / "llama")
    tok = AutoTokenizer.from_pretrained(folder)
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}],
                                   tokenize=False, add_generation_prompt=True)
    assert text == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+3?"
                    "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert tok(text)["input_ids"].count(tok.bos_token_id) == 1
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids(["<|eot_id|>", "<|end_of_text|>"])

    doubled = AutoTokenizer.from_pretrained(hf.make_llama_chat_model(tmp_path / "b", tokenizer_adds_bos=True))
    assert doubled(text)["input_ids"][:2] == [doubled.bos_token_id] * 2  # Llama 3's double-bos trap


def test_gsm8k_rows_answers_are_right():
    assert len(hf.GSM8K_ROWS) == 40
    for row in hf.GSM8K_ROWS:
        steps, final = row["answer"].rsplit("\n#### ", 1)
        last = steps.split("<<")[-1].split(">>")[0]  # the last calculator annotation: "a op b=c"
        expr, value = last.split("=")
        assert eval(expr) == float(value) == int(final)  # noqa: S307 (our own arithmetic)


def _load(path, fmt):
    """Load what a make_* function wrote, the way a user would point at it."""
    if fmt == "save_to_disk":
        return datasets.load_from_disk(str(path))
    if fmt == "folder":
        return datasets.load_dataset(str(path))
    builder = "parquet" if fmt == "parquet" else "json"
    return datasets.load_dataset(builder, data_files=str(path), split="train")


@pytest.mark.parametrize("fmt", hf.FORMATS)
def test_gsm8k_formats(tmp_path, fmt):
    ds = _load(hf.make_gsm8k(tmp_path / "d", fmt), fmt)
    if fmt in ("save_to_disk", "folder"):
        assert {k: len(v) for k, v in ds.items()} == {"train": 32, "test": 8}
        ds = ds["train"]
    else:
        assert len(ds) == 40
    assert ds.column_names == ["question", "answer"]
    assert ds[0] == hf.GSM8K_ROWS[0]


@pytest.mark.parametrize("fmt", hf.FORMATS)
@pytest.mark.parametrize("conversational", [True, False])
def test_preference_formats(tmp_path, fmt, conversational):
    ds = _load(hf.make_preference_set(tmp_path / "d", fmt, conversational), fmt)
    ds = ds["train"] if fmt in ("save_to_disk", "folder") else ds
    assert set(ds.column_names) == {"prompt", "chosen", "rejected"}
    row = ds[0]
    if conversational:
        assert row["prompt"][0]["role"] == "user" and row["chosen"][0]["role"] == "assistant"
        assert row["chosen"][0]["content"] != row["rejected"][0]["content"]
    else:
        assert isinstance(row["prompt"], str) and row["chosen"] != row["rejected"]


@pytest.mark.parametrize("fmt", hf.FORMATS)
def test_conversational_prompt_formats(tmp_path, fmt):
    ds = _load(hf.make_conversational_prompts(tmp_path / "d", fmt), fmt)
    ds = ds["train"] if fmt in ("save_to_disk", "folder") else ds
    assert set(ds.column_names) == {"prompt", "answer"}
    assert [m["role"] for m in ds[0]["prompt"]] == ["system", "user"]
    assert [m["role"] for m in ds[1]["prompt"]] == ["user"]


@pytest.mark.parametrize("fmt", hf.FORMATS)
def test_chat_and_ultrafeedback_formats(tmp_path, fmt):
    """trl-lib/Capybara's messages (alternating turns, the assistant's last) and
    HuggingFaceH4/ultrafeedback_binarized's pairs (a text prompt, [user, assistant] sides)."""
    chats = _load(hf.make_chat_set(tmp_path / "c", fmt), fmt)
    chats = chats["train"] if fmt in ("save_to_disk", "folder") else chats
    assert set(chats.column_names) == {"source", "messages", "num_turns"}
    for row in chats:
        roles = [m["role"] for m in row["messages"] if m["role"] != "system"]
        assert roles == ["user", "assistant"] * (len(roles) // 2) and row["num_turns"] == len(roles) // 2
    assert {row["num_turns"] for row in chats} == {1, 2}
    prefs = _load(hf.make_ultrafeedback_set(tmp_path / "p", fmt), fmt)
    if fmt in ("save_to_disk", "folder"):  # load_dataset names a folder's splits by pattern: train_prefs.jsonl is train
        names = ("train", "test") if fmt == "folder" else ("train_prefs", "test_prefs")
        assert {k: len(v) for k, v in prefs.items()} == {names[0]: 20, names[1]: 4}
        prefs = prefs[names[0]]
    row = prefs[0]
    assert isinstance(row["prompt"], str) and row["chosen"][0] == row["rejected"][0] == {"role": "user",
                                                                                         "content": row["prompt"]}
    assert row["chosen"][1]["role"] == "assistant" and row["chosen"][1] != row["rejected"][1]


def _offline(hf_home, code):
    """Run `code` in a fresh interpreter with the hub offline, HF_HOME set before any import."""
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE"):
        env.pop(var, None)  # these would win over HF_HOME
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_offline_hub_cache(tmp_path, qwen_dir):
    home = tmp_path / "hf_home"
    snapshot = hf.cache_model(home, "Qwen/Qwen2.5-0.5B-Instruct", qwen_dir)
    assert (snapshot / "model.safetensors").is_file()
    files = hf.make_gsm8k_parquet_pair(tmp_path / "parquet")
    hf.cache_dataset(home, "openai/gsm8k", files)
    out = _offline(home, """
        import json
        from huggingface_hub import scan_cache_dir, snapshot_download
        from transformers import AutoModelForCausalLM, AutoTokenizer
        import datasets
        tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
        train = datasets.load_dataset("openai/gsm8k", "main", split="train")
        both = datasets.load_dataset("openai/gsm8k", "main")
        local = snapshot_download("openai/gsm8k", repo_type="dataset")
        by_path = datasets.load_dataset(local, "main", split="test")
        repos = {(r.repo_type, r.repo_id) for r in scan_cache_dir().repos}
        print(json.dumps({"eos": model.generation_config.eos_token_id, "vocab": len(tok),
                          "train": train.num_rows, "splits": {k: v.num_rows for k, v in both.items()},
                          "by_path": by_path.num_rows, "columns": train.column_names,
                          "repos": sorted(map(list, repos))}))
    """)
    local_config = json.loads((qwen_dir / "generation_config.json").read_text())
    assert out["eos"] == local_config["eos_token_id"] and len(out["eos"]) == 2
    assert out["train"] == 32 and out["splits"] == {"train": 32, "test": 8} and out["by_path"] == 8
    assert out["columns"] == ["question", "answer"]
    assert ["model", "Qwen/Qwen2.5-0.5B-Instruct"] in out["repos"]
    assert ["dataset", "openai/gsm8k"] in out["repos"]
