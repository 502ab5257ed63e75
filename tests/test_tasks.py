"""Tests for engine.data: built-in task generation and prompt-file loading."""

from __future__ import annotations

import ast
import json
import operator
import random
import subprocess
import sys

import pytest

from engine.data import (
    TASKS,
    Example,
    is_eval_prompt,
    load_prompt_file,
    make_task,
    task_options,
)

_SAFE_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def safe_eval(expression: str) -> int:
    """Evaluate + - * on integers (with parentheses) without ``eval``."""

    def visit(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return visit(node.body)
        if isinstance(node, ast.BinOp) and type(node.op) in _SAFE_OPERATORS:
            return _SAFE_OPERATORS[type(node.op)](visit(node.left), visit(node.right))
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        raise ValueError(f"unexpected syntax in {expression!r}: {ast.dump(node)}")

    return visit(ast.parse(expression, mode="eval"))


# ---------------------------------------------------------------------------
# Built-in tasks
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TASKS))
def test_same_seed_gives_same_examples(name):
    first = make_task(name, seed=7, num_train=200, num_eval=50)
    second = make_task(name, seed=7, num_train=200, num_eval=50)
    assert first == second


@pytest.mark.parametrize("name", sorted(TASKS))
def test_different_seeds_give_different_examples(name):
    train_a, _ = make_task(name, seed=1, num_train=100, num_eval=10)
    train_b, _ = make_task(name, seed=2, num_train=100, num_eval=10)
    assert [e.prompt for e in train_a] != [e.prompt for e in train_b]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_splits_are_disjoint_and_deduplicated(name):
    train, evaluation = make_task(name, seed=0, num_train=2000, num_eval=200)
    train_prompts = [e.prompt for e in train]
    eval_prompts = [e.prompt for e in evaluation]
    assert len(train) == 2000 and len(evaluation) == 200
    assert len(set(train_prompts)) == len(train_prompts)
    assert len(set(eval_prompts)) == len(eval_prompts)
    assert not set(train_prompts) & set(eval_prompts)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_eval_prompts_never_appear_in_any_seeds_train_split(name):
    _, evaluation = make_task(name, seed=0, num_train=0, num_eval=200)
    eval_prompts = {e.prompt for e in evaluation}
    for seed in range(1, 4):
        train, _ = make_task(name, seed=seed, num_train=1000, num_eval=0)
        assert not eval_prompts & {e.prompt for e in train}
    assert all(is_eval_prompt(p) for p in eval_prompts)


def test_eval_split_does_not_depend_on_train_size():
    _, small = make_task("sort", seed=3, num_train=10, num_eval=50)
    _, large = make_task("sort", seed=3, num_train=1000, num_eval=50)
    # Eval takes the first eval-bucket prompts of the seed's stream, however
    # many train examples are drawn alongside.
    assert small == large


def test_sort_answers_are_sorted_digits():
    train, evaluation = make_task("sort", seed=0, num_train=500, num_eval=100, min_len=2, max_len=8)
    for example in train + evaluation:
        assert example.prompt.startswith("sort ") and example.prompt.endswith(" =")
        digits = example.prompt[len("sort ") : -len(" =")].split(" ")
        assert 2 <= len(digits) <= 8
        assert all(len(d) == 1 and d.isdigit() for d in digits)
        assert example.fields["answer"] == "".join(" " + d for d in sorted(digits))


def test_sort_default_example_is_short():
    train, evaluation = make_task("sort", seed=0, num_train=500, num_eval=100)
    assert max(len(e.prompt + e.fields["answer"]) for e in train + evaluation) < 40


def test_arithmetic_answers_are_correct():
    train, evaluation = make_task("arithmetic", seed=0, num_train=1000, num_eval=100)
    for example in train + evaluation:
        assert example.prompt.startswith("calc ") and example.prompt.endswith(" =")
        expression = example.prompt[len("calc ") : -len(" =")]
        answer = example.fields["answer"]
        assert answer.startswith(" ")
        assert safe_eval(expression) == int(answer)
        assert abs(int(answer)) <= 99
        assert len(example.prompt + answer) < 40


def test_arithmetic_options_are_respected():
    train, _ = make_task(
        "arithmetic", seed=0, num_train=20, num_eval=2, max_depth=1, operators="+", max_operand=5
    )
    for example in train:
        expression = example.prompt[len("calc ") : -len(" =")]
        left, right = expression.split("+")
        assert 0 <= int(left) <= 5 and 0 <= int(right) <= 5


def test_tiny_option_space_fails_clearly():
    # max_depth=1 with operands 0..1 and '+' has only 4 distinct prompts: refused before
    # drawing any.
    with pytest.raises(ValueError, match="at most 4 distinct prompts"):
        make_task("arithmetic", seed=0, num_train=50, num_eval=5, max_depth=1, max_operand=1, operators="+")
    # 16 prompts, all asked for as training prompts, but the held-out split keeps some.
    with pytest.raises(ValueError, match="could only find"):
        make_task("arithmetic", seed=0, num_train=16, num_eval=0, max_depth=1, max_operand=3, operators="+")


def test_unknown_task_names_allowed_tasks():
    with pytest.raises(ValueError, match="unknown task 'reverse'.*arithmetic, sort"):
        make_task("reverse", seed=0, num_train=1, num_eval=1)


def test_unknown_option_names_allowed_options():
    with pytest.raises(ValueError, match="no option 'length'.*min_len=3, max_len=6"):
        make_task("sort", seed=0, num_train=1, num_eval=1, length=4)


def test_option_of_wrong_type_is_rejected():
    with pytest.raises(ValueError, match="'max_len' must be int"):
        make_task("sort", seed=0, num_train=1, num_eval=1, max_len="6")
    with pytest.raises(ValueError, match="'max_len' must be int"):
        make_task("sort", seed=0, num_train=1, num_eval=1, max_len=True)


def test_bad_option_values_are_rejected():
    with pytest.raises(ValueError, match="min_len <= max_len"):
        make_task("sort", seed=0, num_train=1, num_eval=1, min_len=5, max_len=3)
    with pytest.raises(ValueError, match="operators"):
        make_task("arithmetic", seed=0, num_train=1, num_eval=1, operators="/")


def test_task_options_lists_defaults():
    assert task_options("sort") == {"min_len": 3, "max_len": 6}
    assert task_options("arithmetic") == {
        "max_depth": 2,
        "max_operand": 9,
        "operators": "+-*",
        "max_abs_answer": 99,
    }
    with pytest.raises(ValueError, match="unknown task"):
        task_options("nope")


def test_tasks_module_does_not_import_torch():
    code = "import sys, engine.data; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# ---------------------------------------------------------------------------
# Prompt files
# ---------------------------------------------------------------------------


def test_load_jsonl(tmp_path):
    path = tmp_path / "prompts.jsonl"
    rows = [{"prompt": "2+2=", "answer": "4", "level": 1}, {"prompt": "3*3=", "answer": "9", "level": 2}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert load_prompt_file(path) == [
        Example("2+2=", {"answer": "4", "level": 1}),
        Example("3*3=", {"answer": "9", "level": 2}),
    ]


def test_load_jsonl_with_custom_prompt_field(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"question": "q1", "answer": "a1"}\n')
    assert load_prompt_file(path, prompt_field="question") == [Example("q1", {"answer": "a1"})]


def test_load_json_array(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text('[{"prompt": "a", "answer": "b"}]')
    assert load_prompt_file(path) == [Example("a", {"answer": "b"})]


def test_load_csv(tmp_path):
    path = tmp_path / "prompts.csv"
    path.write_text('prompt,answer\n"sort 2, 1 =",1 2\nsecond,x\n')
    assert load_prompt_file(path) == [
        Example("sort 2, 1 =", {"answer": "1 2"}),
        Example("second", {"answer": "x"}),
    ]


def test_load_tsv(tmp_path):
    path = tmp_path / "prompts.tsv"
    path.write_text("prompt\tanswer\nhello\tworld\n")
    assert load_prompt_file(path) == [Example("hello", {"answer": "world"})]


def test_jsonl_bad_json_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n{"prompt": oops}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl line 2: invalid JSON"):
        load_prompt_file(path)


def test_jsonl_missing_prompt_names_file_line_and_columns(tmp_path):
    path = tmp_path / "missing.jsonl"
    path.write_text('{"prompt": "ok"}\n\n{"question": "q", "answer": "a"}\n')
    with pytest.raises(ValueError, match=r"missing\.jsonl line 3 has no column 'prompt' \(data\.prompt_field\); its columns are: 'question', 'answer'"):
        load_prompt_file(path)


def test_jsonl_non_object_line(tmp_path):
    path = tmp_path / "list.jsonl"
    path.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match=r"list\.jsonl line 1: expected a JSON object"):
        load_prompt_file(path)


def test_empty_prompt_is_rejected(tmp_path):
    path = tmp_path / "empty_prompt.jsonl"
    path.write_text('{"prompt": ""}\n')
    with pytest.raises(ValueError, match=r"line 1: prompt column 'prompt' must be non-empty text or a list of \{role, content\} messages"):
        load_prompt_file(path)


def test_csv_missing_prompt_column_names_header(tmp_path):
    path = tmp_path / "missing.csv"
    path.write_text("question,answer\nq,a\n")
    with pytest.raises(ValueError, match=r"missing\.csv line 1 \(header\): missing prompt field 'prompt'"):
        load_prompt_file(path)


def test_csv_extra_values_name_the_line(tmp_path):
    path = tmp_path / "ragged.csv"
    path.write_text("prompt,answer\na,b\nc,d,e\n")
    with pytest.raises(ValueError, match=r"ragged\.csv line 3: more values than header columns"):
        load_prompt_file(path)


@pytest.mark.parametrize("name, content", [("empty.jsonl", ""), ("blank.jsonl", "\n\n"), ("empty.csv", ""), ("header.csv", "prompt,answer\n")])
def test_empty_file_is_rejected(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"{name.replace('.', r'[.]')}: the file is empty"):
        load_prompt_file(path)


def test_unsupported_extension(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("hello\n")
    with pytest.raises(ValueError, match=r"unsupported file type '\.txt'.*\.jsonl"):
        load_prompt_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match="file not found"):
        load_prompt_file(tmp_path / "nope.jsonl")


def test_load_parquet(tmp_path):
    import pyarrow as pa  # a test dependency; optional for users
    import pyarrow.parquet as pq

    path = tmp_path / "prompts.parquet"
    pq.write_table(pa.table({"prompt": ["p1", "p2"], "answer": ["a1", "a2"]}), path)
    assert load_prompt_file(path) == [Example("p1", {"answer": "a1"}), Example("p2", {"answer": "a2"})]


def test_parquet_without_pyarrow_says_to_install_it(tmp_path, monkeypatch):
    path = tmp_path / "prompts.parquet"
    path.write_bytes(b"PAR1")
    # A None entry in sys.modules makes ``import pyarrow.parquet`` raise ImportError.
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ValueError, match="needs pyarrow; install it with 'pip install pyarrow'"):
        load_prompt_file(path)


def test_more_prompts_than_a_task_can_make_is_refused_at_load_naming_num_train():
    from engine.foundation.errors import PresetError
    from engine.preset.schema import preset_from_dict

    data = {"algorithm": {"name": "grpo", "max_completion_length": 16},
            "data": {"task": "sort", "num_train": 5_000_000}}
    with pytest.raises(PresetError) as err:
        preset_from_dict(data)
    assert "data.num_train: task 'sort' with these options makes at most 1,111,000 distinct prompts" in str(err.value)
    with pytest.raises(ValueError, match="at most 300 distinct"):
        make_task("arithmetic", seed=0, num_train=400, num_eval=0, max_depth=1)


def test_an_exhausted_prompt_space_stops_drawing_soon():
    # Ten distinct prompts, a million asked for: the old fixed budget drew 50 million
    # times before giving up (minutes); a long run of repeats now ends it.
    from engine.data.examples import _split_unique

    rng = random.Random(0)
    draws = 0

    def draw():
        nonlocal draws
        draws += 1
        return Example(f"p{rng.randint(0, 9)}", {})

    with pytest.raises(ValueError, match="could only find"):
        _split_unique(draw, num_train=1_000_000, num_eval=0, task_name="demo")
    assert draws < 20_000
