"""Hugging Face data sets as prompts (engine/data/hf_datasets.py, engine/data/columns.py):
every on-disk format the `datasets` library writes, the column mapping, GSM8K's answer
extraction, splits, and the errors a user sees. The sets are built by tests/hub_fixtures.py
in the real sets' formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hub_fixtures as hf
from engine.data import load_splits
from engine.data.columns import compile_answer_pattern
from engine.preset.schema import preset_from_dict
from engine.data.config import DataConfig
from engine.foundation.errors import PresetError

GSM8K = {"prompt_field": "question", "answer_pattern": r"####\s*(.+)"}


def data(**fields) -> DataConfig:
    return DataConfig(task=None, **fields)


@pytest.mark.parametrize("fmt", hf.FORMATS)
def test_every_format_loads_with_the_answer_extracted(tmp_path, fmt):
    source = hf.make_gsm8k(tmp_path, fmt)
    eval_split = "test" if fmt in ("save_to_disk", "folder") else None
    train, held_out = load_splits(data(dataset=str(source), num_train=10, num_eval=4, eval_split=eval_split, **GSM8K),
                                  seed=0)
    assert (len(train), len(held_out)) == (10, 4)
    by_question = {r["question"]: r["answer"] for r in hf.GSM8K_ROWS}
    for example in train + held_out:
        full = by_question[example.prompt]
        assert example.fields["answer"] == full.rsplit("#### ", 1)[1].strip()
    if eval_split == "test":  # the held-out rows come from the test split, the rest from train
        test_questions = {r["question"] for r in hf.GSM8K_ROWS[32:]}
        assert all(e.prompt in test_questions for e in held_out)
        assert not any(e.prompt in test_questions for e in train)


def test_held_out_rows_are_never_trained_on_and_the_seed_decides(tmp_path):
    source = hf.make_gsm8k(tmp_path, "parquet")
    cfg = data(dataset=str(source), num_train=1000, num_eval=6, **GSM8K)
    train, held_out = load_splits(cfg, seed=0)
    assert len(train) + len(held_out) == 40 and len(held_out) == 6  # num_train is a ceiling
    assert not {e.prompt for e in train} & {e.prompt for e in held_out}
    again, _ = load_splits(cfg, seed=0)
    other, other_held = load_splits(cfg, seed=1)
    assert [e.prompt for e in again] == [e.prompt for e in train]
    assert {e.prompt for e in other_held} != {e.prompt for e in held_out}


def test_only_num_train_rows_are_read(tmp_path):
    source = hf.make_gsm8k(tmp_path, "save_to_disk")
    train, held_out = load_splits(data(dataset=str(source), num_train=5, num_eval=2, eval_split="test", **GSM8K), 0)
    assert len(train) == 5 and len(held_out) == 2


def test_conversational_prompts_stay_messages(tmp_path):
    source = hf.make_conversational_prompts(tmp_path, "jsonl")
    train, _ = load_splits(data(dataset=str(source), num_train=8, num_eval=2), seed=0)
    assert all(isinstance(e.prompt, list) and e.prompt[-1]["role"] == "user" for e in train)
    assert any(e.prompt[0]["role"] == "system" for e in train)
    assert all(e.fields["answer"].isdigit() for e in train)


@pytest.mark.parametrize("conversational", [True, False])
def test_preference_sets_give_chosen_and_rejected(tmp_path, conversational):
    source = hf.make_preference_set(tmp_path, "save_to_disk", conversational=conversational)
    train, held_out = load_splits(data(dataset=str(source), eval_split="test", num_train=20, num_eval=4), seed=0)
    assert len(train) == 20 and len(held_out) == 4
    for e in train:
        assert {"chosen", "rejected"} <= set(e.fields)


def test_columns_are_renamed_to_what_the_rewards_see(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps({"q": f"q{i}", "sol": f"#### {i}", "better": "a", "worse": "b"}) + "\n"
                            for i in range(6)))
    cfg = data(dataset=str(path), prompt_field="q", answer_field="sol", answer_pattern="#### (.+)",
               chosen_field="better", rejected_field="worse", num_eval=1)
    train, _ = load_splits(cfg, seed=0)
    assert set(train[0].fields) == {"answer", "chosen", "rejected"}
    assert train[0].fields["answer"] == train[0].prompt[1:]


def test_a_missing_column_names_the_field_and_lists_the_columns(tmp_path):
    source = hf.make_gsm8k(tmp_path, "save_to_disk")
    with pytest.raises(ValueError) as err:
        load_splits(data(dataset=str(source), num_eval=2), seed=0)  # prompt_field is "prompt"
    text = str(err.value)
    assert "'prompt' (data.prompt_field)" in text and "'question', 'answer'" in text


def test_an_unknown_split_lists_the_splits(tmp_path):
    source = hf.make_gsm8k(tmp_path, "save_to_disk")
    with pytest.raises(ValueError, match=r"'validation' is not one of its splits \(train, test\)"):
        load_splits(data(dataset=str(source), eval_split="validation", num_eval=2, **GSM8K), seed=0)


def test_eval_split_of_a_single_file_is_refused(tmp_path):
    source = hf.make_gsm8k(tmp_path, "jsonl")
    with pytest.raises(ValueError, match="data.eval_split: .* one table without splits"):
        load_splits(data(dataset=str(source), eval_split="test", num_eval=2, **GSM8K), seed=0)


def test_too_few_rows_for_num_eval(tmp_path):
    source = hf.make_gsm8k(tmp_path, "jsonl")
    with pytest.raises(ValueError, match=r"data.num_eval: 40 held-out rows asked for, but .* has 40 rows"):
        load_splits(data(dataset=str(source), num_eval=40, **GSM8K), seed=0)


def test_answer_pattern_that_does_not_match_names_the_row(tmp_path):
    source = hf.make_gsm8k(tmp_path, "jsonl")
    with pytest.raises(ValueError, match=r"row \d+: data.answer_pattern 'ANSWER: \(\.\+\)' does not match"):
        load_splits(data(dataset=str(source), prompt_field="question", answer_pattern="ANSWER: (.+)", num_eval=2), 0)


def test_answer_pattern_is_checked_when_the_preset_loads():
    with pytest.raises(PresetError, match="answer_pattern: '\\(a\\)\\(b\\)' has 2 groups"):
        preset_from_dict({"data": {"task": None, "dataset": "x/y", "answer_pattern": "(a)(b)"}})
    with pytest.raises(PresetError, match="not a regular expression"):
        preset_from_dict({"data": {"task": None, "dataset": "x/y", "answer_pattern": "(unclosed"}})
    assert compile_answer_pattern("#### (.+)").groups == 1


def test_exactly_one_source():
    # A data set given and `task` left out: no task (the default task is for no source given).
    assert preset_from_dict({"data": {"dataset": "openai/gsm8k"}}).data.task is None
    with pytest.raises(PresetError, match=r"set exactly one data source: `task` \('sort'\) and `dataset` are both set"):
        preset_from_dict({"data": {"task": "sort", "dataset": "openai/gsm8k"}})
    with pytest.raises(PresetError, match=r"set exactly one data source.*\(set: path, dataset\)"):
        preset_from_dict({"data": {"path": "p.jsonl", "dataset": "openai/gsm8k"}})
    with pytest.raises(PresetError, match="`subset` applies to `dataset` only"):
        preset_from_dict({"data": {"subset": "main"}})


def test_a_relative_dataset_folder_is_found_next_to_the_preset(tmp_path, monkeypatch):
    hf.make_gsm8k(tmp_path / "sets", "save_to_disk")
    monkeypatch.chdir(tmp_path.parent)
    train, _ = load_splits(data(dataset="sets", eval_split="test", num_train=3, num_eval=1, **GSM8K), 0, tmp_path)
    assert len(train) == 3


def test_hub_id_from_the_local_cache_offline(tmp_path):
    """A data set already in the user's Hugging Face cache loads by its hub id with no
    network (a subprocess: the hub libraries read the offline switch when imported)."""
    files = hf.make_gsm8k_parquet_pair(tmp_path / "files")
    hf.cache_dataset(tmp_path / "hf_home", "openai/gsm8k", files)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    code = ("from engine.data import load_splits; from engine.data.config import DataConfig\n"
            "train, held = load_splits(DataConfig(task=None, dataset='openai/gsm8k', subset='main', eval_split='test',"
            " prompt_field='question', answer_pattern=r'####\\s*(.+)', num_train=5, num_eval=3), 0)\n"
            "print(len(train), len(held), train[0].fields['answer'])\n"
            "try:\n"
            "    load_splits(DataConfig(task=None, dataset='nobody/missing', num_eval=1), 0)\n"
            "except ValueError as exc:\n"
            "    print('ERROR', exc)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=str(Path(__file__).resolve().parents[1]))
    assert out.returncode == 0, out.stderr[-2000:]
    first, error = out.stdout.strip().splitlines()[0], out.stdout.split("ERROR", 1)[1]
    assert first.startswith("5 3 ") and first.split()[2].isdigit()
    assert "data.dataset: 'nobody/missing'" in error and "hf download --repo-type dataset nobody/missing" in error
