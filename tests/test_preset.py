"""Presets: strict loading, readable errors, overrides and a lossless round trip."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.preset.schema import Preset, load_preset, preset_from_dict
from engine.foundation.errors import PresetError
from engine.foundation.io import apply_overrides, preset_to_yaml, save_preset
from engine_runs import cli, engine

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
    assert problem.startswith("algorithm.name: unknown algorithm 'sac'") and "grpo, ppo, dpo" in problem


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
    assert problem.startswith("rewards.0.name: unknown reward 'exactmatch'") and "exact_match" in problem
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
    code = "import sys, engine.preset.schema, engine.data, engine.rewards, engine.run.rundir, engine.preset.paths; " \
           "assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_validate_command_reports_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("training:\n  batch_size: 10\nalgorithm:\n  name: grpo\n  num_generations: 4\n")
    before = sorted(tmp_path.rglob("*"))
    result = cli("validate", bad, cwd=tmp_path)
    assert result.returncode == 2
    assert "training.batch_size: 10 must be divisible by algorithm.num_generations (4)" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(tmp_path.rglob("*")) == before


def test_validate_accepts_the_default_preset():
    # validate's real-process check: a `python -m engine validate` process, its output and exit status.
    result = engine("validate", "presets/grpo-sort.yaml", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout


def test_validate_refuses_completion_longer_than_context():
    result = cli("validate", "presets/grpo-sort.yaml", "--set", "algorithm.max_completion_length=4000", cwd=ROOT)
    assert result.returncode == 2
    assert "algorithm.max_completion_length:" in result.stderr and "context" in result.stderr


# ------------------------------------------------- values that cannot be meant (issue 10)

from engine.preset import schema as preset_module  # noqa: E402
from engine.algorithms.dpo.config import DPOConfig  # noqa: E402
from engine.algorithms.grpo.config import GRPOConfig  # noqa: E402
from engine.algorithms.ppo.config import PPOConfig  # noqa: E402
from engine.data.config import DataConfig  # noqa: E402
from engine.model.config import LoraConfig  # noqa: E402
from engine.rewards.config import RewardConfig  # noqa: E402

SECTIONS = {  # section model -> (where it sits in a preset, what else that place needs)
    LoraConfig: (("model", "lora"), {}),
    GRPOConfig: (("algorithm",), {"name": "grpo"}),
    PPOConfig: (("algorithm",), {"name": "ppo"}),
    DPOConfig: (("algorithm",), {"name": "dpo"}),
    DataConfig: (("data",), {}),
    RewardConfig: (("rewards", 0), {"name": "exact_match"}),
    preset_module.TrainingConfig: (("training",), {}),
}


def numeric_fields():
    """(section, field name, int or float, FieldInfo) for every number field of a preset."""
    import typing

    found = []
    for section in SECTIONS:
        for name, info in section.model_fields.items():
            ann = info.annotation
            args = [a for a in typing.get_args(ann) if a is not type(None)] if typing.get_origin(ann) is typing.Union else [ann]
            base = [typing.get_args(a)[0] if typing.get_origin(a) is typing.Annotated else a for a in args]
            if base in ([int], [float]):
                found.append(pytest.param(section, name, base[0], info, id=f"{section.__name__}.{name}"))
    return found


def with_value(section, name, value) -> tuple[dict, str]:
    """A preset dict with `section.name` set to `value`, and the field's dotted path."""
    where, extra = SECTIONS[section]
    leaf = {**extra, name: value}
    data = {"rewards": [leaf]} if where[0] == "rewards" else {}
    if where == ("model", "lora"):
        data = {"model": {"lora": leaf}}
    elif where[0] != "rewards":
        data = {where[0]: leaf}
    return data, ".".join(map(str, where + (name,)))


@pytest.mark.parametrize("section, name, kind, info", [p for p in numeric_fields() if p.values[2] is float])
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), "inf", "nan", "-Infinity"])
def test_every_float_field_refuses_non_finite_numbers(section, name, kind, info, bad):
    data, path = with_value(section, name, bad)
    (problem,) = problems_of(data)
    assert problem.startswith(f"{path}: must be a finite number"), problem


@pytest.mark.parametrize("section, name, kind, info", numeric_fields())
def test_every_number_field_has_an_upper_bound_named_in_the_message(section, name, kind, info):
    bounds = {key: getattr(m, key) for m in info.metadata for key in ("le", "lt") if getattr(m, key, None) is not None}
    assert bounds, f"{section.__name__}.{name} has no upper bound: give it le= (engine/foundation/limits.py)"
    bound = bounds.get("le", bounds.get("lt"))
    past = kind(bound if "lt" in bounds else bound * 10 + 1)
    data, path = with_value(section, name, past)
    (problem,) = problems_of(data)
    assert problem.startswith(f"{path}: ") and "allowed:" in problem and "value <" in problem, problem


@pytest.mark.parametrize("data, expected", [
    ({"data": {"num_train": 100000000000000000000}},
     "data.num_train: Input should be less than or equal to 10000000 (got 100000000000000000000); "
     "allowed: 1 <= value <= 10000000"),
    ({"algorithm": {"name": "grpo", "temperature": 1e30}}, "algorithm.temperature: Input should be less than or "
     "equal to 100 (got 1e+30); allowed: 0 < value <= 100"),
    ({"algorithm": {"name": "ppo", "vf_coef": 1e20}}, "algorithm.vf_coef: Input should be less than or equal to "
     "1000 (got 1e+20); allowed: 0 <= value <= 1000"),
    ({"algorithm": {"name": "dpo", "beta": float("inf")}}, "algorithm.beta: must be a finite number, got inf"),
    ({"rewards": [{"name": "exact_match", "weight": float("nan")}]}, "rewards.0.weight: must be a finite number, got nan"),
])
def test_the_issues_examples_are_refused_with_path_value_and_range(data, expected):
    (problem,) = problems_of(data)
    assert problem.startswith(expected), problem


def test_non_finite_spelled_in_yaml_is_refused(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("model:\n  lora:\n    alpha: .inf\nalgorithm:\n  name: grpo\n  beta: .nan\n"
                    "  temperature: -.inf\ntraining:\n  learning_rate: 'nan'\n")
    with pytest.raises(PresetError) as info:
        load_preset(path)
    assert sorted(p.split(":")[0] for p in info.value.problems) == [
        "algorithm.beta", "algorithm.temperature", "model.lora.alpha", "training.learning_rate"]
    assert all("must be a finite number" in p for p in info.value.problems)


@pytest.mark.parametrize("data, expected", [
    ({"task": "sort", "task_options": {"max_len": 100}},
     "data.task_options: task 'sort': option 'max_len' must be between 1 and 12, got 100."),
    ({"task": "sort", "task_options": {"min_len": 5, "max_len": 4}}, "data.task_options: task 'sort': need min_len <= max_len"),
    ({"task": "arithmetic", "task_options": {"max_operand": 10**20}},
     "data.task_options: task 'arithmetic': option 'max_operand' must be between 1 and 1000, got 100000000000000000000."),
    ({"task": "arithmetic", "task_options": {"max_depth": float("nan")}},
     "data.task_options: task 'arithmetic': option 'max_depth' must be int"),
])
def test_task_options_are_bounded(data, expected):
    (problem,) = problems_of({"data": data})
    assert problem.startswith(expected), problem


@pytest.mark.parametrize("reward, expected", [
    ({"name": "numeric_match", "options": {"tolerance": float("nan")}},
     "rewards.0.options: reward 'numeric_match': option 'tolerance' must be a finite number, got nan."),
    ({"name": "length_penalty", "options": {"per_char": float("inf")}},
     "rewards.0.options: reward 'length_penalty': option 'per_char' must be a finite number, got inf."),
    ({"name": "length_penalty", "options": {"target": 10**12}},
     "rewards.0.options: reward 'length_penalty': option 'target' must be between"),
    ({"name": "exact_match", "options": {1: True}}, "rewards.0.options.1.[key]: Input should be a valid string"),
    ({"name": "my_rewards.py:f", "options": {"scale": float("-inf")}},
     "rewards.0.options: option 'scale' must be a finite number, got -inf."),
    ({"name": "my_rewards.py:f", "options": {"weights": [1.0, float("nan")]}},
     "rewards.0.options: option 'weights' at weights.1 must be a finite number, got nan."),
    ({"name": "my_rewards.py:f", "options": {"when": __import__("datetime").date(2001, 2, 3)}},
     "rewards.0.options: option 'when' date datetime.date(2001, 2, 3) is not plain data"),
    ({"name": "reward_model", "options": {"model": "org/rm", "batch_size": 10**9}},
     "rewards.0.options: reward 'reward_model': option 'batch_size' must be at most 1000000"),
])
def test_reward_options_that_are_numbers_are_finite_and_bounded(reward, expected):
    (problem,) = problems_of({"rewards": [reward]})
    assert problem.startswith(expected), problem


# ------------------------------------------------ files that are not presets (issue 10)

BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"] + [
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]) + "\n"


@pytest.mark.parametrize("content, words", [
    (bytes(range(256)), "not UTF-8 text (byte 0x80 at offset 128)"),
    ("name: x\n".encode("utf-16"), "UTF-16 text; save the preset as UTF-8"),
    (("model: " + "[" * 5000 + "]" * 5000).encode(), "line 1, column 39: nested more than 32 levels deep"),
    (("data:\n  task_options: " + "{a: " * 5000 + "1" + "}" * 5000).encode(), "nested more than 32 levels deep"),
    ((BOMB + "data: {task: sort, task_options: {x: *i}}\n").encode(), "holds more than 100,000 values"),
    ("x: " + ", ".join(["&a1 [1]"] + ["*a1"] * 200), "not valid YAML"),
    ("x: [" + ", ".join(["&a1 [1]"] + ["*a1"] * 200) + "]", "more than 100 YAML aliases"),
    (b"data:\n  task_options: &loop {x: *loop}\n", "data.task_options.x: refers to itself"),
    (b'name: !!python/object/apply:os.system ["echo executed"]\n',
     "line 1, column 7: not plain YAML data: the tag !!python/object/apply:os.system is not allowed"),
    (b"name: !!python/name:os.system\n", "the tag !!python/name:os.system is not allowed"),
    (b"training:\n  seed: 2001-13-45\n", "not valid YAML: a value YAML cannot build: month must be in 1..12"),
    (b"training:\n  seed: 1" + b"0" * 5000 + b"\n", "not valid YAML: a value YAML cannot build: Exceeds the limit"),
    (b"training:\n  seed: !!bool maybe\n", "not valid YAML: a value YAML cannot build: 'maybe'"),
    (b"name: x\x00\n", "not valid YAML: unacceptable character #x0000"),
    (b"name: x\n" + b"#" * (1 << 20), "larger than 1024 KiB"),
])
def test_a_file_that_is_no_preset_is_one_line_naming_it(tmp_path, content, words):
    path = tmp_path / "p.yaml"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(PresetError) as info:
        load_preset(path)
    (problem,) = info.value.problems
    assert str(info.value).startswith(f"{path} is invalid:") and words in problem, problem
    assert "\n" not in problem and len(problem) < 300


def test_thousands_of_flow_brackets_are_refused_before_yaml_reads_them(monkeypatch):
    """PyYAML's scanner reads ahead through every open `[`, checking a possible key per level
    at each token: 5,000 of them cost it about a second before the loader's depth check
    ran. They are counted first (text in quotes, comments and block scalars is not)."""
    import engine.foundation.limits as limits

    def no_yaml(*_args, **_kwargs):
        raise AssertionError("yaml.load was called")

    monkeypatch.setattr(limits.yaml, "load", no_yaml)
    with pytest.raises(limits.LimitError, match="line 2, column 42: nested more than 32 levels deep"):
        limits.parse_yaml("name: x\nmodel: {a: " + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(limits.LimitError, match="yaml.load was called"):  # text, left to YAML
        limits.parse_yaml("a: '" + "[" * 5000 + "'\nb: |\n  " + "{" * 5000 + "\nc: 1 # " + "[" * 5000)


@pytest.mark.parametrize("value, words", [
    ("[" * 5000 + "]" * 5000, "nested more than 32 levels deep"),
    ('!!python/object/apply:os.system ["echo executed"]', "the tag !!python/object/apply:os.system is not allowed"),
    ("&a [*a]", "refers to itself"),
    ("[" + ", ".join(["&a1 [1]"] + ["*a1"] * 200) + "]", "more than 100 YAML aliases"),
])
def test_set_values_get_the_same_protections(tmp_path, value, words):
    path = tmp_path / "p.yaml"
    path.write_text("name: x\n")
    with pytest.raises(PresetError) as info:
        load_preset(path, [f"data.task_options={value}"])
    (problem,) = info.value.problems
    assert words in problem and "\n" not in problem, problem


def test_set_into_a_value_that_is_not_a_section_is_refused():
    with pytest.raises(PresetError) as info:
        apply_overrides({"name": "x"}, ["name.first.second=1"])
    assert info.value.problems == ["--set 'name.first.second=1': name.first.second does not name a field that can be set"]


@pytest.mark.parametrize("command", [["validate"], ["run"], ["try-reward", "--prompt", "p", "--completion", "c"],
                                     ["resume"]])
def test_every_command_reports_a_binary_preset_in_one_line(tmp_path, command):
    from engine.run import rundir

    junk = tmp_path / "run" / rundir.PRESET_FILE  # resume reads RUN_DIR/preset.yaml (with a checkpoint)
    state = tmp_path / "run" / rundir.CHECKPOINTS_DIR / "step_000001" / rundir.CHECKPOINT_STATE
    state.parent.mkdir(parents=True)
    state.write_text('{"step": 1}')
    junk.write_bytes(bytes(range(256)) * 4)
    target = str(junk.parent) if command == ["resume"] else str(junk)
    # try-reward's real-process check: all a `python -m engine try-reward` process prints is the one line.
    call = engine if command[0] == "try-reward" else cli
    result = call(command[0], target, *command[1:], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"error: {junk} is invalid:\n  - not UTF-8 text (byte 0x80 at offset 128); " \
                            "a preset is a YAML text file saved as UTF-8\n"
