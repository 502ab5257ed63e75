"""Presets: strict loading, readable errors, overrides and a lossless round trip."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.preset import (
    Preset, PresetError, apply_overrides, load_preset, preset_from_dict, preset_to_yaml, save_preset,
)

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = sorted((ROOT / "presets").glob("*.yaml"))


def problems_of(data: dict) -> list[str]:
    with pytest.raises(PresetError) as info:
        preset_from_dict(data)
    return info.value.problems


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.name)
def test_bundled_presets_load_and_round_trip(path, tmp_path):
    preset = load_preset(path)
    save_preset(preset, tmp_path / "again.yaml")
    assert load_preset(tmp_path / "again.yaml") == preset
    # the saved file holds every field, so nothing depends on defaults that may change
    assert yaml.safe_load((tmp_path / "again.yaml").read_text()) == preset.model_dump(mode="json")


def test_default_preset_round_trips(tmp_path):
    preset = Preset()
    save_preset(preset, tmp_path / "p.yaml")
    assert load_preset(tmp_path / "p.yaml") == preset


def test_unknown_key_names_path_and_suggests():
    problems = problems_of({"training": {"max_stpes": 10}})
    assert len(problems) == 1
    assert problems[0].startswith("training.max_stpes: unknown field (did you mean `max_steps`?)")
    assert "allowed:" in problems[0]


def test_wrong_type_names_field_and_value():
    (problem,) = problems_of({"training": {"max_steps": "ten"}})
    assert problem.startswith("training.max_steps:") and "'ten'" in problem


def test_int_is_not_silently_accepted_as_bool():
    (problem,) = problems_of({"algorithm": {"name": "grpo", "mask_truncated_completions": 1}})
    assert problem.startswith("algorithm.mask_truncated_completions:")


def test_out_of_range_value():
    (problem,) = problems_of({"algorithm": {"name": "grpo", "epsilon": 1.5}})
    assert problem.startswith("algorithm.epsilon:") and "1.5" in problem and "less than 1" in problem


def test_unknown_algorithm_lists_the_known_ones():
    (problem,) = problems_of({"algorithm": {"name": "sac"}})
    assert problem.startswith("algorithm:") and "'grpo'" in problem


def test_batch_must_divide_by_num_generations():
    (problem,) = problems_of({"algorithm": {"name": "grpo", "num_generations": 6}, "training": {"batch_size": 64}})
    assert problem.startswith("training.batch_size: 64 must be divisible by algorithm.num_generations (6)")
    assert "try batch_size 60" in problem


def test_data_needs_exactly_one_source():
    (problem,) = problems_of({"data": {"task": None}})
    assert problem.startswith("data:") and "exactly one" in problem


def test_unknown_task_option_and_wrong_option_type():
    (problem,) = problems_of({"data": {"task": "sort", "task_options": {"max_digits": 3}}})
    assert problem.startswith("data.task_options: task 'sort' has no option 'max_digits'")
    assert "max_len=6" in problem
    (problem,) = problems_of({"data": {"task": "sort", "task_options": {"max_len": "six"}}})
    assert problem.startswith("data.task_options: task 'sort': option 'max_len' must be int")


def test_unknown_reward_and_reward_option():
    (problem,) = problems_of({"rewards": [{"name": "exactmatch"}]})
    assert problem.startswith("rewards.0: unknown reward 'exactmatch'") and "exact_match" in problem
    (problem,) = problems_of({"rewards": [{"name": "exact_match", "options": {"foo": 1}}]})
    assert problem.startswith("rewards.0.options: reward 'exact_match' has no option 'foo'")
    (problem,) = problems_of({"rewards": [{"name": "numeric_match", "options": {"tolerance": "big"}}]})
    assert problem.startswith("rewards.0.options: reward 'numeric_match': option 'tolerance' must be float")


def test_several_problems_are_reported_together():
    problems = problems_of({"training": {"max_steps": 0, "seed": "x"}, "model": {"device": "gpu"}})
    fields = sorted(p.split(":")[0] for p in problems)
    assert fields == ["model.device", "training.max_steps", "training.seed"]


def test_float_written_without_dot_is_accepted(tmp_path):
    # YAML 1.1 reads 1e-3 as a string; a learning rate written that way must still load
    (tmp_path / "p.yaml").write_text("training:\n  learning_rate: 1e-3\n")
    assert load_preset(tmp_path / "p.yaml").training.learning_rate == pytest.approx(1e-3)


def test_overrides_set_nested_fields_and_list_items(tmp_path):
    data = {"training": {"seed": 0}, "rewards": [{"name": "exact_match"}]}
    out = apply_overrides(data, ["training.seed=3", "rewards.0.weight=0.5", "algorithm.beta=0.04"])
    assert out == {"training": {"seed": 3}, "rewards": [{"name": "exact_match", "weight": 0.5}],
                   "algorithm": {"beta": 0.04}}
    assert data["training"]["seed"] == 0  # the input is not changed
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    preset = load_preset(tmp_path / "p.yaml", ["training.max_steps=7", "model.lora.target_modules=[q_proj, v_proj]"])
    assert preset.training.max_steps == 7 and preset.model.lora.target_modules == ["q_proj", "v_proj"]


def test_bad_override_is_refused():
    with pytest.raises(PresetError) as info:
        apply_overrides({"rewards": []}, ["no_equals_sign", "rewards.3.weight=1"])
    assert len(info.value.problems) == 2


def test_invalid_yaml_says_where(tmp_path):
    (tmp_path / "p.yaml").write_text("training:\n  max_steps: [1\n")
    with pytest.raises(PresetError) as info:
        load_preset(tmp_path / "p.yaml")
    assert "line 3" in info.value.problems[0] or "line 2" in info.value.problems[0]


def test_yaml_of_a_preset_is_plain_data():
    text = preset_to_yaml(Preset())
    assert "!!python" not in text and yaml.safe_load(text)["algorithm"]["name"] == "grpo"


def test_preset_module_imports_without_torch():
    code = "import sys, engine.preset, engine.tasks, engine.rewards, engine.rundir, engine.data; " \
           "assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_validate_command_reports_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("training:\n  batch_size: 10\nalgorithm:\n  name: grpo\n  num_generations: 4\n")
    before = sorted(tmp_path.rglob("*"))
    result = subprocess.run([sys.executable, "-m", "engine", "validate", str(bad)],
                            capture_output=True, text=True, cwd=tmp_path, env=_env())
    assert result.returncode == 2
    assert "training.batch_size: 10 must be divisible by algorithm.num_generations (4)" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(tmp_path.rglob("*")) == before


def test_validate_accepts_the_default_preset():
    result = subprocess.run([sys.executable, "-m", "engine", "validate", "presets/grpo-sort.yaml"],
                            capture_output=True, text=True, cwd=ROOT, env=_env())
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout


def test_validate_refuses_completion_longer_than_context():
    result = subprocess.run(
        [sys.executable, "-m", "engine", "validate", "presets/grpo-sort.yaml",
         "--set", "algorithm.max_completion_length=4000"],
        capture_output=True, text=True, cwd=ROOT, env=_env())
    assert result.returncode == 2
    assert "algorithm.max_completion_length:" in result.stderr and "context" in result.stderr


def _env():
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env
