"""A preset checked against what it points at: a model path that looks local but is not
a model folder, a reward reading a data column the data lacks, a prompt longer than the
model's context. `rl-engine validate`, `rl-engine run` and the window's checks must each
say what is wrong in one line, naming the field, the file or the row."""

import os
from pathlib import Path

import pytest
import yaml

from engine.run import rundir
from engine.cli import main
from engine.hub.access import hub_ids_of
from engine.foundation.limits import context_problem
from conftest import write_validate_preset
from engine.preset.schema import preset_from_dict
from workbench.setup.checks import prelaunch_checks


def _preset(folder: Path, **sections) -> Path:
    return write_validate_preset(folder, "inputs", **sections)


def _validate(preset: Path, capsys, *overrides: str) -> tuple[int, str]:
    args = ["validate", str(preset)]
    for override in overrides:
        args += ["--set", override]
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out + captured.err


# ----------------------------------------------------------- item 3: local model paths


def _bad_model_paths(folder: Path) -> dict[str, tuple[str, str]]:
    """name -> (model.name_or_path, what the message must say)."""
    os.symlink(folder / "nowhere", folder / "dangling")
    os.symlink(folder / "loop_b", folder / "loop_a")
    os.symlink(folder / "loop_a", folder / "loop_b")
    (folder / "empty").mkdir()
    return {"missing": (str(folder / "no" / "model"), "no such folder"),
            "dangling": ("./dangling", "no such folder"),
            "loop": ("./loop_a", "symlink loop"),
            "empty": ("./empty", "holds no model files")}


@pytest.mark.parametrize("case", ["missing", "dangling", "loop", "empty"])
def test_validate_names_a_local_model_path_that_is_no_model(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, said = _bad_model_paths(tmp_path)[case]
    status, output = _validate(_preset(tmp_path, model={"name_or_path": name}), capsys)
    assert status == 2
    assert f"model.name_or_path: could not load {name!r}: " in output and said in output
    assert f"hf download {name}" not in output  # a path is no hub id to fetch
    assert "sentencepiece" not in output and "Repo id" not in output


def test_a_missing_local_model_path_is_no_hub_id(tmp_path):
    preset = preset_from_dict({"model": {"name_or_path": str(tmp_path / "gone")}})
    assert hub_ids_of(preset, tmp_path) == []


def test_run_refuses_a_dangling_model_symlink(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, _ = _bad_model_paths(tmp_path)["dangling"]
    status = main(["run", str(_preset(tmp_path, model={"name_or_path": name})), "--run-dir", str(tmp_path / "run"),
                   "--quiet"])
    err = capsys.readouterr().err
    assert status == 2
    assert "model.name_or_path: could not load './dangling': no such folder" in err and "Repo id" not in err


@pytest.mark.parametrize("case", ["dangling", "loop", "empty"])
def test_the_windows_checks_name_a_local_model_path_that_is_no_model(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, said = _bad_model_paths(tmp_path)[case]
    preset = preset_from_dict({"model": {"name_or_path": name}})
    problems = dict(prelaunch_checks(preset, tmp_path).problems)
    assert said in problems["model.name_or_path"]


# ------------------------------------------------------- item 4: the columns rewards read


def _csv_preset(folder: Path) -> Path:
    (folder / "data.csv").write_text("prompt,label\nsort 2 1 =,1 2\nsort 3 1 =,1 3\nsort 3 2 =,2 3\n")
    return _preset(folder, data={"task": None, "path": "data.csv", "num_eval": 1})


def test_validate_names_the_column_a_reward_needs(tmp_path, capsys):
    status, output = _validate(_csv_preset(tmp_path), capsys)
    assert status == 2
    assert ("rewards.0: reward 'exact_match' needs the data column 'answer', but data file data.csv has only "
            "'prompt', 'label'; set data.answer_field") in output
    status, output = _validate(_csv_preset(tmp_path), capsys, "data.answer_field=label")
    assert status == 0, output


def test_a_run_refuses_the_missing_column_before_its_first_step(tmp_path, capsys):
    # It used to load the model, start, and fail at step 1 with the reward's KeyError.
    run = tmp_path / "run"
    assert main(["run", str(_csv_preset(tmp_path)), "--run-dir", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "needs the data column 'answer'" in err and "Traceback" not in err
    events = rundir.read_events(run)
    assert [e["type"] for e in events] == ["run_failed"]  # no run_started: refused during set-up


def test_a_reward_option_naming_a_missing_column_points_at_the_option(tmp_path, capsys):
    preset = _csv_preset(tmp_path)
    status, output = _validate(preset, capsys, "data.answer_field=label", "rewards.0.options.answer_field=gold")
    assert status == 2
    assert "needs the data column 'gold'" in output and "rewards.0.options.answer_field" in output


def test_the_windows_checks_name_the_column_a_reward_needs(tmp_path):
    preset = preset_from_dict(yaml.safe_load(_csv_preset(tmp_path).read_text()))
    problems = dict(prelaunch_checks(preset, tmp_path).problems)
    assert "needs the data column 'answer'" in problems["rewards.0"] and "'label'" in problems["rewards.0"]


# ---------------------------------------------------- item 5: a prompt past the context


def _long_prompt_preset(folder: Path) -> Path:
    rows = [f'{{"prompt": "sort {i} 1 =", "answer": "1 {i}"}}' for i in range(5)]
    rows.insert(2, '{"prompt": "' + "x " * 50_000 + '", "answer": "1"}')
    (folder / "data.jsonl").write_text("\n".join(rows) + "\n")
    return _preset(folder, data={"task": None, "path": "data.jsonl", "num_eval": 1})


def test_validate_names_the_row_of_a_prompt_longer_than_the_context(tmp_path, capsys):
    status, output = _validate(_long_prompt_preset(tmp_path), capsys)
    assert status == 2
    assert f"the longest prompt (row 3 of data file {tmp_path / 'data.jsonl'}) has" in output
    assert "more than the model's whole context of 128 tokens" in output and "Shorten or drop that row" in output
    assert "at most -" not in output


def test_the_windows_checks_name_the_row_of_a_prompt_longer_than_the_context(tmp_path):
    preset = preset_from_dict(yaml.safe_load(_long_prompt_preset(tmp_path).read_text()))
    problems = dict(prelaunch_checks(preset, tmp_path).problems)
    assert "row 3 of data file" in problems["data"] and "at most -" not in problems["data"]


def test_a_completion_too_long_for_the_context_still_names_a_length_that_fits():
    message = context_problem([10, 100, 20], 50, 128, where=lambda i: f"row {i + 1}")
    assert message.startswith("algorithm.max_completion_length: the longest prompt (row 2) has 100 tokens")
    assert "Lower max_completion_length to at most 28" in message
    assert context_problem([10, 78], 50, 128) is None
