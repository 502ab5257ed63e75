"""Hardening round three, messages: a model, data set or prompt file named by a bare name
or `org/name` that is a broken symlink on disk (not a hub id); a data section that gives
`path` or `dataset` without mentioning `task` (no built-in task then); and what reaches
stderr from the libraries: transformers' "Loading weights" and "Writing model shards"
bars under --quiet, its tokenizer's "Token indices sequence length" warning and
`datasets`' "Generating train split" bar ever. In-process (engine_runs.cli)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from engine.hub.access import hub_ids_of
from engine.foundation.errors import PresetError
from engine.foundation.io import save_preset
from engine.foundation.paths import local_or_hub_id, model_path_problem
from engine.preset.schema import load_preset, preset_from_dict
from conftest import write_validate_preset
from engine_runs import cli


def _preset(folder: Path, **sections) -> Path:
    return write_validate_preset(folder, "messages", **sections)


def _prompts(path: Path, count: int = 8) -> Path:
    path.write_text("".join(json.dumps({"prompt": f"sort {i} 1 =", "answer": f"1 {i}"}) + "\n"
                            for i in range(2, 2 + count)))
    return path


# ------------------------------------------ N9: broken symlinks named like hub ids


def _links(folder: Path) -> None:
    os.symlink("nowhere", folder / "dangling")
    os.symlink("loop_b", folder / "loop_a")
    os.symlink("loop_a", folder / "loop_b")
    (folder / "org").mkdir()
    os.symlink("../gone", folder / "org" / "model")


LINKS = {"dangling": "a dangling symlink (it points to 'nowhere', which does not exist)",
         "loop_a": "a symlink loop (its links point back at each other)",
         "org/model": "a dangling symlink (it points to '../gone', which does not exist)"}


@pytest.mark.parametrize("name", list(LINKS))
def test_validate_refuses_a_model_name_that_is_a_broken_symlink(name, tmp_path):
    _links(tmp_path)
    result = cli("validate", _preset(tmp_path, model={"name_or_path": name}))
    assert result.code == 2, result.out + result.err
    assert f"model.name_or_path: could not load {name!r}: " in result.err
    assert f"it is {LINKS[name]}; point the link at the model's folder" in result.err
    assert "not in the local Hugging Face cache" not in result.out + result.err  # no hub id


def test_a_broken_symlink_in_the_current_folder_is_found_too(tmp_path, monkeypatch):
    _links(tmp_path)
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "presets"
    elsewhere.mkdir()
    assert "a symlink loop" in model_path_problem("loop_a", elsewhere)
    assert local_or_hub_id("dangling", elsewhere) == tmp_path / "dangling"
    preset = preset_from_dict({"model": {"name_or_path": "org/model"}, "data": {"task": None, "dataset": "dangling"}})
    assert hub_ids_of(preset, elsewhere) == []
    assert model_path_problem("org/name", elsewhere) is None  # nothing of that name here: a hub id


@pytest.mark.parametrize("name", ["dangling", "loop_a"])
def test_validate_refuses_a_data_set_name_that_is_a_broken_symlink(name, tmp_path):
    _links(tmp_path)
    result = cli("validate", _preset(tmp_path, data={"task": None, "dataset": name, "num_eval": 2}))
    assert result.code == 2, result.out + result.err
    assert f"data.dataset: {tmp_path / name} is {LINKS[name]}; point the link at the data set's file" in result.err
    assert "not in the local Hugging Face cache" not in result.out + result.err


def test_validate_refuses_a_prompt_file_that_is_a_dangling_symlink(tmp_path):
    os.symlink("moved.jsonl", tmp_path / "prompts.jsonl")
    result = cli("validate", _preset(tmp_path, data={"task": None, "path": "prompts.jsonl", "num_eval": 2}))
    assert result.code == 2, result.out + result.err
    assert (f"data.path: {tmp_path / 'prompts.jsonl'} is a dangling symlink (it points to 'moved.jsonl', "
            "which does not exist); point the link at the prompt file") in result.err


# ------------------------------------------ N11: a data source given, no default task


@pytest.mark.parametrize("source", [{"path": "prompts.jsonl"}, {"dataset": "openai/gsm8k"}])
def test_a_data_source_without_task_has_no_task(source):
    assert preset_from_dict({"data": source}).data.task is None
    assert preset_from_dict({}).data.task == "sort"  # no source given: the default task


def test_a_preset_file_with_only_a_prompt_file_validates_and_round_trips(tmp_path):
    _prompts(tmp_path / "prompts.jsonl")
    path = _preset(tmp_path, data={"path": "prompts.jsonl", "num_eval": 2})
    result = cli("validate", path)
    assert result.code == 0, result.err
    preset = load_preset(path)
    save_preset(preset, tmp_path / "saved.yaml")
    again = load_preset(tmp_path / "saved.yaml")
    assert again == preset and again.data.task is None and again.data.path == "prompts.jsonl"


@pytest.mark.parametrize("other", ["path", "dataset"])
def test_a_task_set_with_a_file_or_data_set_is_still_refused_clearly(other):
    with pytest.raises(PresetError) as caught:
        preset_from_dict({"data": {"task": "sort", other: "x.jsonl"}})
    assert (f"data: set exactly one data source: `task` ('sort') and `{other}` are both set; "
            f"set task: null to train on `{other}`, or remove `{other}`") in str(caught.value)


# ----------------------------------------------------- library noise on stderr

NOISE = ("Loading weights", "Writing model shards", "Token indices sequence length", "Generating train split")


@pytest.fixture
def progress_bars_restored():
    """transformers' progress bars (process-wide) as they were before the test."""
    from transformers.utils import logging as transformers_logging

    was = transformers_logging.is_progress_bar_enabled()
    yield
    if was:
        transformers_logging.enable_progress_bar()


def test_quiet_run_and_quiet_export_show_no_library_bars(tmp_path, capfd, progress_bars_restored):
    preset = _preset(tmp_path, training={"max_steps": 1, "batch_size": 4, "eval_steps": 0, "save_steps": 0,
                                         "log_completions": 0, "record_rollouts": 0})
    run = tmp_path / "run"
    result = cli("run", preset, "--run-dir", run, "--quiet")
    assert result.code == 0, result.err
    result_export = cli("export", run, "--merged", tmp_path / "merged", "--quiet")
    assert result_export.code == 0, result_export.err
    printed = result.err + result_export.err + capfd.readouterr().err
    assert not [noise for noise in NOISE if noise in printed], printed


def test_a_long_text_tokenizes_without_the_length_warning(capfd):
    from engine.model.loading import load_tokenizer, resolve_model_path

    # transformers' own handler writes to the stderr of when it was made (a test's
    # capture, perhaps): what it is handed is looked at too.
    warned = logging.Handler()
    warned.emit = lambda record: printed.append(record.getMessage())
    printed: list[str] = []
    library = logging.getLogger("transformers")
    library.addHandler(warned)
    try:
        tokenizer = load_tokenizer(resolve_model_path("builtin:tiny"))
        assert len(tokenizer("3 1 2 " * 200)["input_ids"]) > tokenizer.model_max_length
    finally:
        library.removeHandler(warned)
    printed.append(capfd.readouterr().err)
    assert not [line for line in printed if "Token indices sequence length" in line], printed


def test_a_local_data_file_opens_without_datasets_bars(tmp_path, capfd):
    from engine.data.hf_datasets import open_split

    table = open_split(_prompts(tmp_path / f"rows-{os.getpid()}-{tmp_path.name}.jsonl"), None, "train")
    assert len(table) == 8
    assert "Generating train split" not in capfd.readouterr().err


def test_a_reward_model_name_that_is_a_broken_symlink_is_refused(tmp_path, monkeypatch):
    # As for model.name_or_path: a bare name that is a dangling link here was meant
    # local, and was taken for a hub id (validate passed).
    from engine.rewards.paths import reward_source_problems
    from engine.preset.schema import preset_from_dict

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-rm").symlink_to(tmp_path / "gone")
    preset = preset_from_dict({"rewards": [{"name": "reward_model", "options": {"model": "my-rm"}}]})
    problems = reward_source_problems(preset.rewards, tmp_path)
    assert len(problems) == 1 and problems[0][0] == "rewards.0.options.model", problems
    assert "dangling symlink" in problems[0][1] and "gone" in problems[0][1]
