"""A run folder the engine cannot write (no permission, a full disk), and preset errors
that `run` finds: one line naming the folder and what was being written, nothing
half-written left behind, and the exit status `validate` gives for the same preset.

We run as root, so `chmod` cannot make a folder unwritable here: the refusals are
simulated (a path through a regular file, a patched writer raising the OSError the
system would)."""

from __future__ import annotations

import errno
import io
import json
import logging
import os
from pathlib import Path

import pytest
import yaml

from conftest import small_preset_dict
from engine.run import rundir
from engine.cli import main

NO_SPACE = os.strerror(errno.ENOSPC)


def write_preset(folder: Path, **training) -> Path:
    path = folder / "preset.yaml"
    path.write_text(yaml.safe_dump(small_preset_dict(**training)))
    return path


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error")]


def leftovers(run: Path) -> list[str]:
    """Half-written files and folders the failure left in the run folder."""
    return sorted(str(p.relative_to(run)) for p in run.rglob("*.tmp"))


# ----------------------------------------------------------------- no permission


def test_a_run_folder_under_a_file_is_one_line_and_exit_2(tmp_path, capsys):
    preset = write_preset(tmp_path)
    (tmp_path / "taken").write_text("a file where a folder should be")
    run = tmp_path / "taken" / "run"
    assert main(["run", str(preset), "--run-dir", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = error_lines(err)
    assert str(run) in line and "not a folder" in line and "(.)" not in line


def test_fork_and_several_processes_into_a_folder_under_a_file_are_one_line_and_exit_2(tmp_path, capsys):
    # Both made the folder with a bare mkdir: a NotADirectoryError traceback.
    (tmp_path / "taken").write_text("a file where a folder should be")
    parent = tmp_path / "parent"
    checkpoint = rundir.checkpoint_dir(parent, 1)
    checkpoint.mkdir(parents=True)
    (checkpoint / rundir.CHECKPOINT_STATE).write_text(json.dumps({"step": 1, "world_size": 1}))
    (parent / rundir.PRESET_FILE).write_text(yaml.safe_dump(small_preset_dict()))
    preset = write_preset(tmp_path)
    for argv, run in ((["fork", str(parent)], tmp_path / "taken" / "fork"),
                      (["run", str(preset), "--nproc-per-node", "2"], tmp_path / "taken" / "two")):
        assert main([*argv, "--run-dir", str(run), "--quiet"]) == 2, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err
        (line,) = error_lines(err)
        assert str(run) in line and "not a folder" in line and "--run-dir" in line


@pytest.fixture
def log_refused(monkeypatch):
    """engine.log cannot be created: what a `chmod 500` folder does to a user who is not root."""
    def refuse(self):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), self.baseFilename)

    monkeypatch.setattr(logging.FileHandler, "_open", refuse)


def test_run_into_a_folder_without_write_permission_is_one_line_and_exit_2(tmp_path, capsys, log_refused):
    preset = write_preset(tmp_path)
    run = tmp_path / "run"
    assert main(["run", str(preset), "--run-dir", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = error_lines(err)
    assert str(run) in line and "permission denied" in line


def test_resume_in_a_folder_without_write_permission_is_one_line_and_exit_2(tmp_path, capsys, log_refused):
    run = tmp_path / "run"
    checkpoint = rundir.checkpoint_dir(run, 1)
    checkpoint.mkdir(parents=True)
    (checkpoint / rundir.CHECKPOINT_STATE).write_text(json.dumps({"step": 1, "world_size": 1}))
    (run / rundir.PRESET_FILE).write_text(yaml.safe_dump(small_preset_dict()))
    assert main(["resume", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = error_lines(err)
    assert str(run) in line and "permission denied" in line and "resume" in line


# ------------------------------------------------------------------- full disk


class _FullFile:
    """A file on a full disk: opened (created), but every write refused."""

    def __init__(self, real):
        self._real = real

    def write(self, data):
        raise OSError(errno.ENOSPC, NO_SPACE)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._real.close()


@pytest.fixture
def full_disk(monkeypatch):
    """Every file opened for writing under the folder given refuses its writes (ENOSPC)."""
    def fill(folder: Path):
        real_open = io.open

        def open_on_full_disk(file, mode="r", *args, **kwargs):
            handle = real_open(file, mode, *args, **kwargs)
            writing = any(c in mode for c in "wax+")
            if writing and isinstance(file, (str, os.PathLike)) and Path(file).resolve().is_relative_to(folder):
                return _FullFile(handle)
            return handle

        monkeypatch.setattr(io, "open", open_on_full_disk)  # pathlib's write_text
        monkeypatch.setattr("builtins.open", open_on_full_disk)
    return fill


def test_a_disk_full_from_the_start_is_one_line_and_leaves_nothing(tmp_path, capsys, full_disk):
    preset = write_preset(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    full_disk(run.resolve())
    assert main(["run", str(preset), "--run-dir", str(run), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Logging error" not in err
    (line,) = error_lines(err)
    assert str(run) in line and rundir.PRESET_FILE in line and "no space" in line
    assert leftovers(run) == []
    # No empty events.jsonl: the folder would look like a run, and `run` would refuse it.
    assert not (run / rundir.EVENTS_FILE).exists()


def refuse_torch_save(monkeypatch):
    """torch.save writes part of the trainer state, then the disk is full."""
    from engine.algorithms import checkpoints

    def save(obj, path, *args, **kwargs):
        Path(path).write_bytes(b"\0" * 4096)
        raise OSError(errno.ENOSPC, NO_SPACE)

    monkeypatch.setattr(checkpoints.torch, "save", save)


def refuse_safetensors(monkeypatch):
    """The adapter's safetensors file is half written: safetensors' Rust error, no OSError."""
    from peft import PeftModel
    from safetensors import SafetensorError

    def save_pretrained(self, folder, *args, **kwargs):
        (Path(folder) / "adapter_model.safetensors").write_bytes(b"\0" * 4096)
        raise SafetensorError(f"Error while serializing: I/O error: {NO_SPACE} (os error 28)")

    monkeypatch.setattr(PeftModel, "save_pretrained", save_pretrained)


@pytest.mark.parametrize("refuse", [refuse_torch_save, refuse_safetensors], ids=["torch.save", "safetensors"])
def test_a_disk_full_at_a_checkpoint_names_it_and_frees_its_space(tmp_path, capsys, monkeypatch, refuse):
    preset = write_preset(tmp_path, max_steps=2, save_steps=1)
    run = tmp_path / "run"
    refuse(monkeypatch)
    assert main(["run", str(preset), "--run-dir", str(run), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Errno" not in err and "SafetensorError" not in err
    (line,) = error_lines(err)
    assert str(run) in line and "checkpoints/step_000001" in line and "no space" in line
    assert leftovers(run) == []  # the half-written step_000001.tmp gave its space back
    assert rundir.complete_checkpoints(run) == []
    failed = rundir.read_events(run)[-1]
    assert failed["type"] == "run_failed" and "checkpoints/step_000001" in failed["message"]


class _TornFile:
    """Half of a line reaches the file, then the disk is full."""

    def __init__(self, real):
        self._real = real

    def write(self, data):
        self._real.write(data[: len(data) // 2])
        self._real.flush()
        raise OSError(errno.ENOSPC, NO_SPACE)

    def __getattr__(self, name):
        return getattr(self._real, name)


def test_an_event_the_disk_refuses_names_events_jsonl_and_leaves_whole_lines(tmp_path):
    events = rundir.EventWriter(tmp_path)
    events.emit("run_started", step=0)
    events._file = _TornFile(events._file)
    with pytest.raises(OSError) as refused:
        events.emit("metrics", step=1, loss=0.5)
    events.close()
    assert refused.value.errno == errno.ENOSPC and refused.value.filename == str(tmp_path / rundir.EVENTS_FILE)
    assert (tmp_path / rundir.EVENTS_FILE).read_bytes().endswith(b"}\n")  # no torn line
    assert [e["type"] for e in rundir.read_events(tmp_path)] == ["run_started"]


# -------------------------------------------------------------- preset errors


def test_run_refuses_what_validate_refuses_with_exit_2_and_no_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the preset's folder is the current one: "looked in" it once
    preset = write_preset(tmp_path)
    for change in ("rewards.0.name=no_such_file.py:score", "training.report_to=wandb"):
        if change.endswith("wandb"):
            from engine.run.reporting import missing_reporter

            if missing_reporter("wandb") is None:
                continue  # installed here: nothing to refuse
        run = tmp_path / "run"
        args = [str(preset), "--set", change]
        assert main(["validate", *args]) == 2
        assert main(["run", *args, "--run-dir", str(run), "--quiet"]) == 2, change
        err = capsys.readouterr().err
        assert not run.exists()
        field = change.partition("=")[0]
        assert f"  - {field}:" in err
        assert f"looked in {tmp_path} and {tmp_path}" not in err


def test_resume_refuses_a_changed_preset_validate_would_refuse(tmp_path, capsys):
    run = tmp_path / "run"
    checkpoint = rundir.checkpoint_dir(run, 1)
    checkpoint.mkdir(parents=True)
    (checkpoint / rundir.CHECKPOINT_STATE).write_text(json.dumps({"step": 1, "world_size": 1}))
    (run / rundir.PRESET_FILE).write_text(yaml.safe_dump(small_preset_dict()))
    assert main(["resume", str(run), "--quiet", "--set", "rewards.0.name=no_such_file.py:score"]) == 2
    assert "rewards.0.name: file no_such_file.py not found" in capsys.readouterr().err
    assert not (run / rundir.EVENTS_FILE).exists()


def test_a_fault_in_a_rewards_file_names_its_place_once(tmp_path, capsys):
    rewards = tmp_path / "faulty.py"
    rewards.write_text("def score(prompts, completions, **fields):\n    return [1.0 for _ in completions]\n\n"
                       "1 / 0\n")
    data = small_preset_dict()
    data["rewards"] = [{"name": "faulty.py:score"}]
    preset = tmp_path / "preset.yaml"
    preset.write_text(yaml.safe_dump(data))
    assert main(["run", str(preset), "--run-dir", str(tmp_path / "run"), "--quiet"]) != 0
    (line,) = error_lines(capsys.readouterr().err)
    assert f"(at {rewards}, line 4)" in line
    assert f"({rewards}:4)" not in line  # the place, said once
