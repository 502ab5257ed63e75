"""Hub data sets read offline from the hub cache as `hf download` leaves it (blobs,
symlinked snapshots, refs/main; no `datasets` Arrow cache), and wrong subsets and splits
reported on the field to change (engine/data/hf_datasets.py, engine/hub/cache.py).

The tests run offline (conftest sets HF_HUB_OFFLINE) with HF_HOME pointing at a fake cache
built by tests/hub_fixtures.py with `arrow_cache=False`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import hub_fixtures as hf
from conftest import small_preset_dict
from engine.run import rundir
from engine.cli import main
from engine.data import load_splits
from engine.data.config import DataConfig

GSM8K = {"prompt_field": "question", "answer_pattern": r"####\s*(.+)"}
DEFAULT_README = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
  - split: test
    path: data/test-*
---
"""


@pytest.fixture
def hf_home(tmp_path, monkeypatch) -> Path:
    """HF_HOME for this test (the other cache variables would win over it)."""
    home = tmp_path / "hf_home"
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    return home


def gsm8k_files(folder: Path, prefix: str = "main") -> dict[str, Path]:
    """openai/gsm8k's parquet pair, under `prefix/` in the repo."""
    return {f"{prefix}/{Path(name).name}": path for name, path in hf.make_gsm8k_parquet_pair(folder).items()}


def jsonl(path: Path, rows: list[dict]) -> Path:
    from datasets import Dataset

    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_list(rows).to_json(str(path))
    return path


def data(**fields) -> DataConfig:
    return DataConfig(task=None, **{**GSM8K, "num_train": 5, "num_eval": 3, **fields})


# ---------------------------------------------------------------- whole runs, offline


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> Path:
    """The tiny Qwen-shaped model (512 positions: GSM8K prompts outgrow builtin:tiny's 128)."""
    return hf.make_tiny_chat_model(tmp_path_factory.mktemp("model"))


LAYOUTS = {  # repo id: (files' folder in the repo, README, data.subset)
    "openai/gsm8k": ("main", True, "main"),
    "test-org/gsm8k-default": ("data", DEFAULT_README, None),
}


@pytest.mark.parametrize("repo_id", LAYOUTS)
def test_validate_and_run_read_the_hub_cache_offline(repo_id, hf_home, tmp_path, capsys, chat_model):
    folder, readme, subset = LAYOUTS[repo_id]
    hf.cache_dataset(hf_home, repo_id, gsm8k_files(tmp_path / "files", folder), arrow_cache=False, readme=readme)
    assert not (hf_home / "datasets").exists()  # only what huggingface_hub lays out
    preset = small_preset_dict(max_steps=2)
    preset["model"]["name_or_path"] = str(chat_model)
    preset["data"] = {"task": None, "dataset": repo_id, "subset": subset, "eval_split": "test",
                      "num_train": 16, "num_eval": 4, **GSM8K}
    preset["rewards"] = [{"name": "numeric_match"}]
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump(preset))

    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    assert "16 train / 4 held-out prompts" in capsys.readouterr().out
    run = tmp_path / "run"
    assert main(["run", str(path), "--run-dir", str(run)]) == 0, capsys.readouterr().err
    events = rundir.read_events(run)
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done"


# ---------------------------------------------------------------- finding the files


def test_without_a_readme_the_file_names_give_the_splits(hf_home, tmp_path):
    rows = hf.GSM8K_ROWS
    files = {"train.jsonl": jsonl(tmp_path / "a.jsonl", rows[:30]), "test.jsonl": jsonl(tmp_path / "b.jsonl", rows[30:])}
    hf.cache_dataset(hf_home, "test-org/plain", files, arrow_cache=False, readme=False)
    train, held_out = load_splits(data(dataset="test-org/plain", eval_split="test", num_eval=10, num_train=100), 0)
    assert (len(train), len(held_out)) == (30, 10)
    assert {e.prompt for e in held_out} == {r["question"] for r in rows[30:]}


def test_without_a_readme_a_folder_is_a_subset(hf_home, tmp_path):
    files = {**gsm8k_files(tmp_path / "main"), **gsm8k_files(tmp_path / "socratic", "socratic")}
    hf.cache_dataset(hf_home, "openai/gsm8k", files, arrow_cache=False, readme=False)
    train, held_out = load_splits(data(dataset="openai/gsm8k", subset="socratic", eval_split="test"), 0)
    assert (len(train), len(held_out)) == (5, 3)
    with pytest.raises(ValueError, match=r"^data.subset: not set, and the data set has several subsets "
                                         r"\(main, socratic\) .*; set data.subset to one of them"):
        load_splits(data(dataset="openai/gsm8k", eval_split="test"), 0)


def test_declared_globs_pick_the_files(hf_home, tmp_path):
    """The README's globs decide, whatever the names: here csv files in nested folders."""
    import csv

    def write_csv(path: Path, rows: list[dict]) -> Path:
        with open(path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=["question", "answer"])
            writer.writeheader()
            writer.writerows(rows)
        return path

    readme = ("---\nconfigs:\n- config_name: easy\n  default: true\n  data_files:\n"
              "  - split: fit\n    path: [\"parts/**/one-*.csv\", \"parts/**/two-*.csv\"]\n"
              "- config_name: hard\n  data_files: other/*.csv\n---\n")
    rows = hf.GSM8K_ROWS
    files = {"parts/x/one-0.csv": write_csv(tmp_path / "1.csv", rows[:10]),
             "parts/y/z/two-0.csv": write_csv(tmp_path / "2.csv", rows[10:20]),
             "parts/three-0.csv": write_csv(tmp_path / "3.csv", rows[20:]),
             "other/all.csv": write_csv(tmp_path / "4.csv", rows)}
    hf.cache_dataset(hf_home, "test-org/globs", files, arrow_cache=False, readme=readme)
    train, held_out = load_splits(data(dataset="test-org/globs", split="fit", num_train=100, num_eval=2), 0)
    assert len(train) + len(held_out) == 20  # the default subset's two files only
    train, _ = load_splits(data(dataset="test-org/globs", subset="hard", num_train=100, num_eval=2), 0)
    assert len(train) == 38  # one glob, no split named: train


def test_the_snapshot_is_read_when_the_hub_does_not_answer(hf_home, tmp_path, monkeypatch):
    """Offline mode not set, but the hub cannot be reached: the cached files are read."""
    from engine.data import hf_datasets

    monkeypatch.setattr(hf_datasets, "hub_offline", lambda: False)
    hf.cache_dataset(hf_home, "openai/gsm8k", gsm8k_files(tmp_path / "files"), arrow_cache=False)
    train, held_out = load_splits(data(dataset="openai/gsm8k", subset="main", eval_split="test"), 0)
    assert (len(train), len(held_out)) == (5, 3)


def test_an_incomplete_snapshot_says_to_fetch_it_again(hf_home, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no data yet\n")
    hf.cache_dataset(hf_home, "test-org/empty", {"notes.md": readme}, arrow_cache=False, readme=False)
    with pytest.raises(ValueError, match=r"no data files .* fetch it again with `hf download --repo-type dataset "
                                         r"test-org/empty`"):
        load_splits(data(dataset="test-org/empty"), 0)


# ---------------------------------------------------------------- item 9: the field to change


@pytest.fixture
def cached_gsm8k(hf_home, tmp_path) -> str:
    hf.cache_dataset(hf_home, "openai/gsm8k", gsm8k_files(tmp_path / "files"), arrow_cache=False)
    return "openai/gsm8k"


@pytest.mark.parametrize("fields, message", [
    ({"subset": "socratic"}, r"^data.subset: 'socratic' is not one of its subsets \(main\)"),
    ({"subset": "main", "split": "training"}, r"^data.split: 'training' is not one of its splits \(train, test\)"),
    ({"subset": "main", "eval_split": "validation"},
     r"^data.eval_split: 'validation' is not one of its splits \(train, test\)"),
])
def test_a_wrong_subset_or_split_of_a_hub_set_names_its_field(cached_gsm8k, fields, message):
    with pytest.raises(ValueError, match=message):
        load_splits(data(dataset=cached_gsm8k, **fields), 0)


def test_the_cli_reports_a_wrong_split_on_its_field(cached_gsm8k, tmp_path, capsys):
    preset = small_preset_dict()
    preset["data"] = {"task": None, "dataset": cached_gsm8k, "subset": "main", "split": "training",
                      "num_eval": 4, **GSM8K}
    preset["rewards"] = [{"name": "numeric_match"}]
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump(preset))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "data.split: 'training' is not one of its splits (train, test)" in err and "Traceback" not in err


@pytest.mark.parametrize("fields, message", [
    ({"subset": "nope"}, r"^data.subset: 'nope' is not one of its subsets \(default\)"),
    ({"split": "dev"}, r"^data.split: 'dev' is not one of its splits \(train, test\)"),
    ({"eval_split": "dev"}, r"^data.eval_split: 'dev' is not one of its splits \(train, test\)"),
])
def test_a_wrong_subset_or_split_of_a_local_folder_names_its_field(tmp_path, fields, message):
    folder = hf.make_gsm8k(tmp_path / "set", "folder")  # train.jsonl, test.jsonl: read by `datasets`
    with pytest.raises(ValueError, match=message):
        load_splits(data(dataset=str(folder), **fields), 0)


def test_a_wrong_eval_split_of_a_saved_set_names_its_field(tmp_path):
    folder = hf.make_gsm8k(tmp_path / "set", "save_to_disk")
    with pytest.raises(ValueError, match=r"^data.eval_split: 'dev' is not one of its splits \(train, test\)"):
        load_splits(data(dataset=str(folder), eval_split="dev"), 0)
