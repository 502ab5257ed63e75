"""The bundled presets for real work (presets/hub/: Hub models and data sets, meant for a
GPU). No machine here can download them, so: each validates offline (static checks, and a
note naming what to fetch); each validates in full against a Hugging Face cache that holds
stand-ins under the real ids; and each runs 2 steps through the CLI with the tiny
chat-templated model and a local set of the same format in place of the Hub ones.

A test with a Hugging Face cache of its own (HF_HOME) runs the engine as a process: the hub
libraries read HF_HOME when imported. The runs with local stand-ins call the CLI in this
process (engine_runs.cli)."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
import yaml

import hub_fixtures as hf
from conftest import ROOT
from engine.run import rundir
from engine_runs import cli, rl_engine

HUB_PRESETS = sorted((ROOT / "presets" / "hub").glob("*.yaml"))
QUICK = ["training.max_steps=2", "training.batch_size=8", "training.micro_batch_size=null",
         "training.eval_steps=0", "training.save_steps=0", "data.num_train=16", "data.num_eval=4",
         "algorithm.max_completion_length=12"]


# Local stand-ins of the presets' data sets, by algorithm, saved to disk under the real sets'
# split names where they differ from the fixture's: --set overrides pointing at them.
LOCAL_DATA = {
    "dpo": lambda tmp: [f"data.dataset={hf.make_preference_set(tmp / 'prefs', 'save_to_disk')}",
                        "data.split=train", "data.eval_split=test"],
    "sft": lambda tmp: [f"data.dataset={hf.make_chat_set(tmp / 'chats', 'save_to_disk')}"],  # train / test
    "reward_model": lambda tmp: [  # train_prefs / test_prefs, as HuggingFaceH4/ultrafeedback_binarized
        f"data.dataset={hf.make_ultrafeedback_set(tmp / 'prefs', 'save_to_disk')}"],
}
# What each algorithm promises in its metrics events (TRL's names), beside the loss.
PROMISED = {"sft": ("loss", "mean_token_accuracy", "entropy", "num_tokens"),
            "reward_model": ("loss", "accuracy", "margin", "num_tokens")}


def _sets(items) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def _stand_ins(preset_path, tmp_path, hf_home=None) -> list[str]:
    """The tiny model and a local data set of the preset's format, as --set overrides, or
    (with hf_home) cached under the preset's own hub ids."""
    preset = yaml.safe_load(preset_path.read_text())
    algorithm = preset["algorithm"]["name"]
    # an episode preset's prompts carry the tools' schemas, SFT's and the reward model's the
    # preset's 1024-token answers: a longer context (positions cost the tiny model nothing)
    long = preset["data"].get("environment") or algorithm in ("sft", "reward_model")
    model = hf.make_tiny_chat_model(tmp_path / "model", context=2048 if long else 512)
    if hf_home is not None:
        if algorithm == "dpo":
            data = hf.make_preference_set(tmp_path / "data", "parquet")
            files = {f"data/{split}-00000-of-00001.parquet": path for split, path in
                     (("train_prefs", data), ("test_prefs", data))}
        else:
            files = hf.make_gsm8k_parquet_pair(tmp_path / "data")
        hf.cache_model(hf_home, preset["model"]["name_or_path"], model)
        hf.cache_dataset(hf_home, preset["data"]["dataset"], files, config_name=preset["data"].get("subset") or "default")
        return []
    if algorithm in LOCAL_DATA:
        return [f"model.name_or_path={model}", *LOCAL_DATA[algorithm](tmp_path)]
    local = hf.make_gsm8k(tmp_path / "gsm8k", "save_to_disk")
    return [f"model.name_or_path={model}", f"data.dataset={local}", "data.subset=null"]


def test_hub_presets_are_found():
    assert len(HUB_PRESETS) >= 2, HUB_PRESETS


@pytest.mark.parametrize("preset", HUB_PRESETS, ids=lambda p: p.stem)
def test_validates_offline_naming_what_to_fetch(preset, tmp_path, engine_env):
    env = {**engine_env, "HF_HOME": str(tmp_path / "empty"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([*rl_engine(), "validate", str(preset)], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "valid as a preset" in result.stdout
    assert "note: model.name_or_path:" in result.stdout and "hf download Qwen/Qwen2.5-0.5B-Instruct" in result.stdout
    assert "note: data.dataset:" in result.stdout and "hf download --repo-type dataset" in result.stdout


@pytest.mark.parametrize("preset", HUB_PRESETS, ids=lambda p: p.stem)
def test_runs_two_steps_with_local_stand_ins(preset, tmp_path):
    run = tmp_path / "run"
    result = cli("run", preset, "--run-dir", run, *_sets(QUICK + _stand_ins(preset, tmp_path)), cwd=tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "2/2" in result.stderr
    events = rundir.read_events(run)
    assert events[0]["model"]["chat_template"] == "tokenizer"
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done"
    algorithm = yaml.safe_load(preset.read_text())["algorithm"]["name"]
    steps = [e for e in events if e["type"] == "metrics"]
    assert [e["step"] for e in steps] == [1, 2]
    for name in PROMISED.get(algorithm, ()):
        assert all(math.isfinite(e[name]) for e in steps), (name, [e.get(name) for e in steps])
    if "num_tokens" in PROMISED.get(algorithm, ()):  # TRL's: every token trained on so far
        assert 0 < steps[0]["num_tokens"] < steps[1]["num_tokens"], [e["num_tokens"] for e in steps]
    if algorithm == "reward_model":  # the score head is saved whole beside the adapter
        config = json.loads((run / events[-1]["checkpoint"] / "adapter_config.json").read_text())
        assert "score" in config["modules_to_save"], config["modules_to_save"]


@pytest.mark.parametrize("stem, user", [("sft-chat-qwen2.5-0.5b", "<|im_start|>system\nYou are a careful math tutor."),
                                         ("rm-preferences-qwen2.5-0.5b", "<|im_start|>system\nYou are Qwen")],
                         ids=["sft", "reward_model"])
def test_rlhf_presets_validate_in_full_with_local_stand_ins(stem, user, tmp_path):
    """As written but for the stand-ins (and the 4 held-out rows they have): the data read as
    the algorithm reads it. The first prompt is what the model answers after: SFT's is the
    conversation before its last (assistant) message, never that answer itself."""
    preset = ROOT / "presets" / "hub" / f"{stem}.yaml"
    result = cli("validate", preset, *_sets(["data.num_eval=4", *_stand_ins(preset, tmp_path)]))
    assert result.code == 0, result.err[-3000:]
    first = result.out.split("first prompt as the model sees it:\n", 1)[1].split("\nmemory:", 1)[0]
    assert first.startswith(user) and first.endswith("<|im_end|>\n<|im_start|>assistant\n"), first
    assert "The answer is" not in first and first.count("<|im_start|>assistant") == first.count("<|im_start|>user")
    assert "chat template: tokenizer" in result.out and "20 train / 4 held-out prompts" in result.out


def test_gsm8k_preset_validates_in_full_from_the_cache(tmp_path, engine_env):
    preset = ROOT / "presets" / "hub" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
    _stand_ins(preset, tmp_path, hf_home=tmp_path / "hf_home")
    env = {**engine_env, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([*rl_engine(), "validate", str(preset), *_sets(["data.num_eval=4", "algorithm.max_completion_length=64"])],
                            capture_output=True, text=True, env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "first prompt as the model sees it:\n<|im_start|>system\nSolve the problem." in result.stdout
    assert "chat template: tokenizer" in result.stdout and "32 train / 4 held-out prompts" in result.stdout


def test_gsm8k_preset_runs_from_the_cache_by_its_hub_ids(tmp_path, engine_env):
    """Model and data set already in the user's Hugging Face cache, no network: the preset
    runs as written (only sizes changed), by its hub ids."""
    preset = ROOT / "presets" / "hub" / "grpo-gsm8k-qwen2.5-0.5b.yaml"
    _stand_ins(preset, tmp_path, hf_home=tmp_path / "hf_home")
    env = {**engine_env, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"}
    run = tmp_path / "run"
    result = subprocess.run([*rl_engine(), "run", str(preset), "--run-dir", str(run), *_sets(QUICK)],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    events = rundir.read_events(run)
    assert events[0]["preset"]["model"]["name_or_path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert events[0]["preset"]["data"]["dataset"] == "openai/gsm8k"
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done"
