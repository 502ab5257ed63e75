"""The bundled presets for real work (presets/hub/: Hub models and data sets, meant for a
GPU). No machine here can download them, so: each validates offline (static checks, and a
note naming what to fetch); each validates in full against a Hugging Face cache that holds
stand-ins under the real ids; and each runs 2 steps through the CLI with the tiny
chat-templated model and a local set of the same format in place of the Hub ones.

A test with a Hugging Face cache of its own (HF_HOME) runs the engine as a process: the hub
libraries read HF_HOME when imported. The runs with local stand-ins call the CLI in this
process (engine_runs.cli)."""

from __future__ import annotations

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


def _sets(items) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def _stand_ins(preset_path, tmp_path, hf_home=None) -> list[str]:
    """The tiny model and a local data set of the preset's format, as --set overrides, or
    (with hf_home) cached under the preset's own hub ids."""
    preset = yaml.safe_load(preset_path.read_text())
    # an episode preset's prompts carry the tools' schemas: a longer context
    model = hf.make_tiny_chat_model(tmp_path / "model", context=2048 if preset["data"].get("environment") else 512)
    if preset["algorithm"]["name"] == "dpo":
        data = hf.make_preference_set(tmp_path / "data", "parquet")
        files = {f"data/{split}-00000-of-00001.parquet": path for split, path in
                 (("train_prefs", data), ("test_prefs", data))}
    else:
        files = hf.make_gsm8k_parquet_pair(tmp_path / "data")
    if hf_home is not None:
        hf.cache_model(hf_home, preset["model"]["name_or_path"], model)
        hf.cache_dataset(hf_home, preset["data"]["dataset"], files, config_name=preset["data"].get("subset") or "default")
        return []
    if preset["algorithm"]["name"] == "dpo":
        local = hf.make_preference_set(tmp_path / "prefs", "save_to_disk")
        return [f"model.name_or_path={model}", f"data.dataset={local}", "data.split=train", "data.eval_split=test"]
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
