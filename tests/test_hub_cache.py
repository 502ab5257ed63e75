"""engine.hub.cache on a fake Hugging Face cache laid out as huggingface_hub lays it out
(`models--org--name/{blobs, snapshots/<commit>, refs/main}`, snapshot files symlinked
into blobs): the models and data sets listed, parameter counts read from safetensors
headers, chat templates, context lengths, and broken downloads listed with the reason.

`make_fake_cache` is shared with tests/test_model_picker.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save as safetensors_bytes

from engine.hub.cache import (
    cached_datasets,
    cached_models,
    human_count,
    human_size,
    hub_cache_dir,
    safetensors_parameters,
)

CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def weights(*shapes: tuple[int, ...]) -> bytes:
    return safetensors_bytes({f"w{i}": np.zeros(shape, np.float32) for i, shape in enumerate(shapes)})


def write_repo(hub: Path, folder: str, files: dict[str, bytes | str | dict], commit: str = "a" * 40,
               main: bool = True) -> Path:
    """A repo in the cache as a download leaves it: each file a blob named by its hash,
    linked from the snapshot; refs/main naming the commit. Returns the snapshot."""
    repo = hub / folder
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for name, content in files.items():
        if isinstance(content, dict):
            content = json.dumps(content)
        data = content.encode() if isinstance(content, str) else content
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * (len(Path(name).parts) + 1)) / "blobs" / blob.name)
    if main:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
    return snapshot


def qwen_config(**extra) -> dict:
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
            "max_position_embeddings": 2048, **extra}


# Parameters by hand: 100*32 + 32*32 + 32 = 4256; 10*20 + 5 + 3*4 = 217; 8*8 = 64.
CHAT_PARAMETERS, BASE_PARAMETERS, GPT2_PARAMETERS = 4256, 217, 64


def make_fake_cache(home: Path) -> Path:
    """An HF_HOME whose hub cache holds: a chat model (two revisions, refs/main the newer),
    a sharded base model without a chat template, a GPT-2 with chat_template.jinja, a BERT
    classifier, a snapshot without config.json, a repo without snapshots, and gsm8k."""
    hub = home / "hub"
    hub.mkdir(parents=True)
    write_repo(hub, "models--test-org--tiny-chat", {"config.json": qwen_config(max_position_embeddings=1024)},
               commit="0" * 40, main=False)  # an older revision, without tokenizer or weights
    write_repo(hub, "models--test-org--tiny-chat", {
        "config.json": qwen_config(),
        "tokenizer_config.json": {"chat_template": CHAT_TEMPLATE},
        "model.safetensors": weights((100, 32), (32, 32), (32,)),
    }, commit="1" * 40)
    write_repo(hub, "models--test-org--tiny-base", {
        "config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 512},
        "tokenizer_config.json": {"bos_token": "<s>"},
        "model.safetensors.index.json": {"metadata": {}, "weight_map": {
            "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}},
        "model-00001-of-00002.safetensors": weights((10, 20)),
        "model-00002-of-00002.safetensors": weights((5,), (3, 4)),
        "consolidated.safetensors": weights((10, 20), (5,), (3, 4)),  # the same weights again: not counted
    })
    write_repo(hub, "models--test-org--gpt2-chat", {
        "config.json": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_positions": 1024},
        "chat_template.jinja": CHAT_TEMPLATE,
        "model.safetensors": weights((8, 8)),
    })
    write_repo(hub, "models--test-org--tiny-bert", {
        "config.json": {"architectures": ["BertForSequenceClassification"], "model_type": "bert",
                        "max_position_embeddings": 512},
        "model.safetensors": weights((4, 4)),
    })
    write_repo(hub, "models--test-org--half-downloaded", {"tokenizer_config.json": {"chat_template": CHAT_TEMPLATE}})
    (hub / "models--test-org--no-snapshots" / "blobs").mkdir(parents=True)
    write_repo(hub, "datasets--openai--gsm8k", {
        "README.md": "# gsm8k",
        "main/train-00000-of-00001.parquet": b"PAR1 main train",
        "main/test-00000-of-00001.parquet": b"PAR1 main test",
        "socratic/train-00000-of-00001.parquet": b"PAR1 socratic train",
    })
    write_repo(hub, "datasets--test-org--readme-only", {"README.md": "# nothing yet"})
    return hub


@pytest.fixture
def hf_home(tmp_path, monkeypatch) -> Path:
    """HF_HOME pointing at a fresh fake cache (other cache variables unset)."""
    home = tmp_path / "hf-home"
    make_fake_cache(home)
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    return home


def by_id(items) -> dict:
    return {item.repo_id: item for item in items}


# ------------------------------------------------------------------------ models


def test_models_are_listed_from_hf_home_read_at_call_time(hf_home):
    assert hub_cache_dir() == hf_home / "hub"
    models = cached_models()
    assert [m.repo_id for m in models] == sorted(m.repo_id for m in models)
    assert set(by_id(models)) == {"test-org/tiny-chat", "test-org/tiny-base", "test-org/gpt2-chat",
                                  "test-org/tiny-bert", "test-org/half-downloaded", "test-org/no-snapshots"}
    assert "openai/gsm8k" not in by_id(models)  # data sets are not models


def test_a_complete_chat_model_is_described_from_its_newest_snapshot(hf_home):
    chat = by_id(cached_models())["test-org/tiny-chat"]
    assert chat.snapshot_path.name == "1" * 40  # refs/main, not the older revision
    assert chat.architecture == "Qwen2ForCausalLM" and chat.model_type == "qwen2"
    assert chat.parameters == CHAT_PARAMETERS
    assert chat.has_chat_template and chat.context_length == 2048
    assert chat.is_causal_lm and chat.problem is None and chat.usable
    assert chat.size_on_disk > CHAT_PARAMETERS * 4  # both revisions' blobs, float32 weights included


def test_sharded_weights_are_counted_once_from_their_index(hf_home):
    base = by_id(cached_models())["test-org/tiny-base"]
    assert base.parameters == BASE_PARAMETERS
    assert base.usable and base.context_length == 512


def test_chat_template_is_found_in_tokenizer_config_or_a_template_file(hf_home):
    models = by_id(cached_models())
    assert models["test-org/tiny-chat"].has_chat_template  # tokenizer_config.json's chat_template
    assert models["test-org/gpt2-chat"].has_chat_template  # chat_template.jinja
    assert not models["test-org/tiny-base"].has_chat_template
    gpt2 = models["test-org/gpt2-chat"]
    assert gpt2.is_causal_lm and gpt2.parameters == GPT2_PARAMETERS and gpt2.context_length == 1024


def test_a_classifier_is_listed_but_not_a_causal_lm(hf_home):
    bert = by_id(cached_models())["test-org/tiny-bert"]
    assert bert.architecture == "BertForSequenceClassification" and bert.parameters == 16
    assert not bert.is_causal_lm and bert.problem is None and not bert.usable


def test_broken_downloads_are_listed_with_the_reason(hf_home):
    models = by_id(cached_models())
    half = models["test-org/half-downloaded"]
    assert "no config.json" in half.problem and not half.usable
    assert "damaged" in models["test-org/no-snapshots"].problem


def test_a_missing_shard_or_a_corrupt_weight_file_is_a_problem_not_an_exception(tmp_path):
    hub = tmp_path / "hub"
    write_repo(hub, "models--x--missing-shard", {
        "config.json": qwen_config(),
        "model.safetensors.index.json": {"weight_map": {"a": "model-00001-of-00002.safetensors",
                                                        "b": "model-00002-of-00002.safetensors"}},
        "model-00001-of-00002.safetensors": weights((2, 2)),
    })
    write_repo(hub, "models--x--garbage", {"config.json": qwen_config(), "model.safetensors": b"\xff" * 20})
    write_repo(hub, "models--x--bad-config", {"config.json": "{not json", "model.safetensors": weights((2,))})
    write_repo(hub, "models--x--no-weights", {"config.json": qwen_config()})
    models = by_id(cached_models(hub))
    assert "1 of 2 weight shards missing" in models["x/missing-shard"].problem
    assert "implausible header" in models["x/garbage"].problem
    assert "config.json cannot be read" in models["x/bad-config"].problem
    assert "no weight files" in models["x/no-weights"].problem


def test_safetensors_parameters_reads_only_the_header(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes(weights((3, 5, 7), (11,)))
    assert safetensors_parameters(path) == 3 * 5 * 7 + 11
    (tmp_path / "short.safetensors").write_bytes(b"\x01")
    with pytest.raises(ValueError, match="too short"):
        safetensors_parameters(tmp_path / "short.safetensors")


# ---------------------------------------------------------------------- data sets


def test_datasets_with_their_subsets(hf_home):
    datasets = by_id(cached_datasets())
    assert set(datasets) == {"openai/gsm8k", "test-org/readme-only"}
    gsm8k = datasets["openai/gsm8k"]
    assert gsm8k.subsets == ("main", "socratic") and gsm8k.files == 4 and gsm8k.problem is None
    assert gsm8k.size_on_disk > 0 and gsm8k.snapshot_path.is_dir()
    assert "no data files" in datasets["test-org/readme-only"].problem


# ------------------------------------------------------------------ empty caches


def test_a_missing_or_empty_cache_lists_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "nowhere"))
    assert cached_models() == [] and cached_datasets() == []
    (tmp_path / "empty").mkdir()
    assert cached_models(tmp_path / "empty") == [] and cached_datasets(tmp_path / "empty") == []


def test_hf_hub_cache_wins_over_hf_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert hub_cache_dir() == tmp_path / "elsewhere"


# ------------------------------------------------------------------------ helpers


@pytest.mark.parametrize("n_bytes, text", [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (1_234_567, "1.2 MB"),
                                           (988_097_824, "988.1 MB"), (1_200_000_000, "1.2 GB")])
def test_human_size(n_bytes, text):
    assert human_size(n_bytes) == text


@pytest.mark.parametrize("n, text", [(494_032_768, "494M"), (1_543_714_304, "1.5B"), (800_000, "0.8M"),
                                     (7_615_616_512, "7.6B"), (12_345, "12,345"), (999_999_999, "1.0B")])
def test_human_count(n, text):
    assert human_count(n) == text
