"""A preset's relative files (prompt file, custom reward, reward model) resolve by one
rule, engine/preset/paths.py: the preset's folder first, then the current folder. The
CLI's `run` and the window's launch preset both use it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine import cli
from engine.preset.schema import preset_from_dict
from engine.preset.paths import absolute_preset_paths
from engine.foundation.paths import resolve_data_path
from workbench.window import run_control
from workbench_helpers import small_preset
from window_fixtures import make_window, window  # noqa: F401 (fixtures)

REWARDS = "def brevity(prompts, completions, **fields):\n    return [0.0 for _ in completions]\n"


@pytest.fixture
def preset_folder(tmp_path, monkeypatch):
    """presets/p.yaml naming data/p.jsonl and my_rewards.py:brevity relative to itself; the
    current folder holds a decoy data/p.jsonl that must not be picked."""
    rows = "".join(json.dumps({"prompt": f"sort {a} {b} =", "answer": f" {min(a, b)} {max(a, b)}"}) + "\n"
                   for a in range(5) for b in range(4))
    folder = tmp_path / "presets"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "p.jsonl").write_text(rows)
    (folder / "my_rewards.py").write_text(REWARDS)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "data").mkdir(parents=True)
    (elsewhere / "data" / "p.jsonl").write_text(rows)
    monkeypatch.chdir(elsewhere)
    data = small_preset(max_steps=1)
    data["data"] = {"task": None, "path": "data/p.jsonl", "num_eval": 4}
    data["rewards"].append({"name": "my_rewards.py:brevity", "weight": 0.5})
    (folder / "p.yaml").write_text(yaml.safe_dump(data))
    return folder


def expected(folder: Path) -> tuple[str, str]:
    return str((folder / "data" / "p.jsonl").resolve()), f"{(folder / 'my_rewards.py').resolve()}:brevity"


def test_resolve_data_path_looks_in_the_preset_folder_then_the_current_one(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "only-here.jsonl").write_text("{}\n")
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "both.jsonl").write_text("{}\n")
    (tmp_path / "here" / "both.jsonl").write_text("{}\n")
    monkeypatch.chdir(tmp_path / "here")
    presets = tmp_path / "presets"
    assert resolve_data_path("both.jsonl", presets) == (presets / "both.jsonl").resolve()
    assert resolve_data_path("only-here.jsonl", presets) == (tmp_path / "here" / "only-here.jsonl").resolve()
    assert resolve_data_path("missing.jsonl", presets) == presets / "missing.jsonl"
    assert resolve_data_path("missing.jsonl", None) == Path("missing.jsonl")
    assert resolve_data_path(str(presets / "both.jsonl"), tmp_path / "here") == presets / "both.jsonl"


def test_absolute_preset_paths_fixes_the_data_file_and_the_rewards(preset_folder):
    preset = preset_from_dict(yaml.safe_load((preset_folder / "p.yaml").read_text()))
    fixed = absolute_preset_paths(preset, preset_folder)
    data_path, reward_name = expected(preset_folder)
    assert fixed.data.path == data_path
    assert [r.name for r in fixed.rewards][-1] == reward_name
    assert preset.data.path == "data/p.jsonl"  # a copy: the preset itself is unchanged
    assert absolute_preset_paths(fixed, Path("/nowhere")) == fixed  # absolute stays as is


def test_the_cli_and_the_window_resolve_a_preset_the_same_way(preset_folder, window, monkeypatch, tmp_path):
    data_path, reward_name = expected(preset_folder)
    # The CLI: what `rl-engine run` hands to training (and so to the run's preset.yaml).
    trained = []
    from engine.commands import train as run_command

    monkeypatch.setattr(run_command, "train", lambda preset, *args: trained.append(preset) or 0)
    monkeypatch.setattr(run_command, "setup_logging", lambda run_dir: None)
    args = cli.build_parser().parse_args(["run", str(preset_folder / "p.yaml"), "--run-dir", str(tmp_path / "run")])
    assert cli.cmd_run(args) == 0
    by_cli = trained[0]
    assert by_cli.data.path == data_path and by_cli.rewards[-1].name == reward_name

    # The window: the launch preset it writes for the engine.
    launched = []

    class NoEngine:
        def __init__(self, run_dir, launch, **kwargs):
            self.launch = launch

        def start(self):
            launched.append(yaml.safe_load(Path(self.launch).read_text()))
            raise OSError("not started in this test")

    monkeypatch.setattr(run_control, "EngineProcess", NoEngine)
    assert window.presets.open_preset(preset_folder / "p.yaml")
    assert window.run_control.run() is None
    by_window = launched[0]
    assert by_window["data"]["path"] == data_path and by_window["rewards"][-1]["name"] == reward_name
    assert preset_from_dict(by_window) == by_cli
