"""Built-in tasks and prompt-file loading for the RL engine.

A *task* is a list of :class:`Example` objects: a prompt for the policy to
complete plus ``fields`` (the reference ``answer`` and any other columns) that
are handed to the reward functions.

Two small tasks are generated offline from a seed so that a run needs no
download:

* ``sort``       -- prompt ``"sort 3 1 4 1 5 ="``, answer ``" 1 1 3 4 5"``
* ``arithmetic`` -- prompt ``"calc (2+3)*4 ="``,  answer ``" 20"``

The answer is the exact text the model should write after the prompt (before
its end-of-sequence token), so ``prompt + answer`` is a complete training
sequence.  Both formats stay well under 40 characters because the built-in
model is character-level.

Every task has a held-out eval split.  Which split a prompt belongs to is
decided by a stable hash of the prompt text, not by the seed, so an eval prompt
never shows up in the train split of *any* seed (the built-in model was
fine-tuned on a train split; evaluating it on an eval split is always fair).

This module deliberately does not import torch: the desktop app and preset
validators import it without paying for the deep-learning stack.

Example:
    >>> train, evaluation = make_task("sort", seed=0, num_train=3, num_eval=2)
    >>> len(train), len(evaluation)
    (3, 2)
    >>> sorted(train[0].fields)
    ['answer']
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.options import Registry

__all__ = [
    "Example",
    "TASKS",
    "make_task",
    "task_options",
    "task_capacity",
    "check_task_size",
    "make_sort_examples",
    "make_arithmetic_examples",
    "is_eval_prompt",
    "load_prompt_file",
    "corrupt_answer",
    "preference_pairs",
]

# One prompt in EVAL_BUCKETS lands in the eval split.  Keeping a tenth of the
# prompt space for evaluation leaves plenty for training while giving even the
# smallest configurations (single-operation arithmetic: 300 prompts) a usable
# eval split.
EVAL_BUCKETS = 10

# Arguments every task factory takes; everything else is a task option.
_COMMON_ARGS = ("seed", "num_train", "num_eval")


@dataclass(frozen=True)
class Example:
    """One prompt plus the columns reward functions may need.

    Example:
        >>> ex = Example("sort 2 1 =", {"answer": " 1 2"})
        >>> ex.prompt + ex.fields["answer"]
        'sort 2 1 = 1 2'
    """

    prompt: str
    fields: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------
# Train / eval split
# ---------------------------------------------------------------------------


def is_eval_prompt(prompt: str) -> bool:
    """Return True when ``prompt`` belongs to the held-out eval split.

    The decision is a stable hash of the text (SHA-256, not Python's salted
    ``hash``), so it is the same on every machine, run and seed.

    Example:
        >>> is_eval_prompt("sort 3 1 2 =") == is_eval_prompt("sort 3 1 2 =")
        True
    """
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % EVAL_BUCKETS == 0


def _split_unique(
    draw: Callable[[], Example],
    *,
    num_train: int,
    num_eval: int,
    task_name: str,
) -> tuple[list[Example], list[Example]]:
    """Draw examples until both splits are full, skipping repeated prompts.

    ``draw`` returns one random example; the split it goes to is decided by
    :func:`is_eval_prompt`.  Raises ValueError when the option space is too
    small to yield that many distinct prompts.

    Example:
        >>> rng = random.Random(0)
        >>> draw = lambda: Example(f"n{rng.randint(0, 999)}", {"answer": ""})
        >>> train, ev = _split_unique(draw, num_train=5, num_eval=2, task_name="demo")
        >>> {e.prompt for e in train} & {e.prompt for e in ev}
        set()
    """
    train: list[Example] = []
    evaluation: list[Example] = []
    seen: set[str] = set()
    # Generous budget: collisions only get frequent when the space is nearly
    # exhausted, and then we would rather fail loudly than loop forever.
    budget = 50 * (num_train + num_eval) + 10_000
    since_new = 0
    for _ in range(budget):
        if len(train) >= num_train and len(evaluation) >= num_eval:
            break
        example = draw()
        if example.prompt in seen:
            since_new += 1
            # An exhausted space shows as a long run of repeats. Waiting 10,000 + twice
            # the prompts found bounds the wasted work by the work already done, while a
            # space with even one unseen prompt in 2 x len(seen) rarely stalls that long.
            if since_new > 10_000 + 2 * len(seen):
                break
            continue
        since_new = 0
        seen.add(example.prompt)
        target, wanted = (
            (evaluation, num_eval) if is_eval_prompt(example.prompt) else (train, num_train)
        )
        if len(target) < wanted:
            target.append(example)
    if len(train) < num_train or len(evaluation) < num_eval:
        raise ValueError(
            f"task '{task_name}': could only find {len(train)} train and "
            f"{len(evaluation)} eval distinct prompts (asked for {num_train} and "
            f"{num_eval}); lower num_train/num_eval or widen the task options "
            f"(e.g. longer sequences or deeper expressions)."
        )
    return train, evaluation


# ---------------------------------------------------------------------------
# sort
# ---------------------------------------------------------------------------


def format_sort_prompt(digits: list[int]) -> str:
    """Build the sort prompt for a list of digits.

    Example:
        >>> format_sort_prompt([3, 1, 4])
        'sort 3 1 4 ='
    """
    return "sort " + " ".join(str(d) for d in digits) + " ="


def format_sort_answer(digits: list[int]) -> str:
    """Build the reference completion: the sorted digits, each after a space.

    Example:
        >>> format_sort_answer([3, 1, 4])
        ' 1 3 4'
    """
    return "".join(f" {d}" for d in sorted(digits))


def make_sort_examples(
    *,
    seed: int,
    num_train: int,
    num_eval: int,
    min_len: int = 3,
    max_len: int = 6,
) -> tuple[list[Example], list[Example]]:
    """Generate the ``sort`` task: sort a list of ``min_len``..``max_len`` digits.

    Example:
        >>> train, ev = make_sort_examples(seed=1, num_train=2, num_eval=1)
        >>> ex = train[0]
        >>> ex.prompt.startswith("sort ") and ex.prompt.endswith(" =")
        True
        >>> digits = ex.prompt.split()[1:-1]
        >>> ex.fields["answer"] == "".join(" " + d for d in sorted(digits))
        True
    """
    if not 1 <= min_len <= max_len:
        raise ValueError(
            f"task 'sort': need 1 <= min_len <= max_len, got min_len={min_len}, "
            f"max_len={max_len}; fix the task options."
        )
    if max_len > 12:
        # 12 digits already makes prompt + answer ~50 characters, past what the
        # built-in character-level model was trained on.
        raise ValueError(f"task 'sort': max_len={max_len} is too long; use at most 12.")
    rng = random.Random(f"sort:{seed}")

    def draw() -> Example:
        digits = [rng.randint(0, 9) for _ in range(rng.randint(min_len, max_len))]
        return Example(format_sort_prompt(digits), {"answer": format_sort_answer(digits)})

    return _split_unique(draw, num_train=num_train, num_eval=num_eval, task_name="sort")


# ---------------------------------------------------------------------------
# arithmetic
# ---------------------------------------------------------------------------

_OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def _random_expression(
    rng: random.Random, depth: int, max_operand: int, operators: str
) -> tuple[str, int]:
    """Return ``(text, value)`` for a random expression tree of exactly ``depth``.

    Non-leaf children are parenthesised so the text never relies on operator
    precedence, and the value is computed from the tree (no ``eval``).

    Example:
        >>> text, value = _random_expression(random.Random(3), 1, 9, "+")
        >>> a, b = text.split("+")
        >>> int(a) + int(b) == value
        True
    """
    if depth == 0:
        value = rng.randint(0, max_operand)
        return str(value), value
    # One child carries the full remaining depth so the tree is exactly
    # ``depth`` deep; the other may be shallower.
    deep = depth - 1
    shallow = rng.randint(0, depth - 1)
    left_depth, right_depth = (deep, shallow) if rng.random() < 0.5 else (shallow, deep)
    left_text, left_value = _random_expression(rng, left_depth, max_operand, operators)
    right_text, right_value = _random_expression(rng, right_depth, max_operand, operators)
    op = rng.choice(operators)
    if left_depth:
        left_text = f"({left_text})"
    if right_depth:
        right_text = f"({right_text})"
    return f"{left_text}{op}{right_text}", _OPERATIONS[op](left_value, right_value)


def make_arithmetic_examples(
    *,
    seed: int,
    num_train: int,
    num_eval: int,
    max_depth: int = 2,
    max_operand: int = 9,
    operators: str = "+-*",
    max_abs_answer: int = 99,
) -> tuple[list[Example], list[Example]]:
    """Generate the ``arithmetic`` task: evaluate a small integer expression.

    Each expression has 1..``max_depth`` nested operations on integers
    0..``max_operand``; expressions whose value exceeds ``max_abs_answer`` in
    absolute value are redrawn so answers stay short.

    Example:
        >>> train, ev = make_arithmetic_examples(seed=0, num_train=2, num_eval=1)
        >>> ex = train[0]
        >>> ex.prompt.startswith("calc ") and ex.prompt.endswith(" =")
        True
        >>> int(ex.fields["answer"]) <= 99
        True
    """
    if max_depth < 1 or max_depth > 3:
        raise ValueError(
            f"task 'arithmetic': max_depth must be 1, 2 or 3, got {max_depth}."
        )
    if max_operand < 1:
        raise ValueError(f"task 'arithmetic': max_operand must be >= 1, got {max_operand}.")
    unknown = sorted(set(operators) - set(_OPERATIONS))
    if not operators or unknown:
        raise ValueError(
            f"task 'arithmetic': operators={operators!r} is not allowed; use a "
            f"non-empty combination of '+', '-' and '*' (e.g. '+-*')."
        )
    if max_abs_answer < 1:
        raise ValueError(
            f"task 'arithmetic': max_abs_answer must be >= 1, got {max_abs_answer}."
        )
    rng = random.Random(f"arithmetic:{seed}")
    ops = "".join(sorted(set(operators)))  # order-independent, so seeds agree

    def draw() -> Example:
        while True:
            depth = rng.randint(1, max_depth)
            text, value = _random_expression(rng, depth, max_operand, ops)
            if abs(value) <= max_abs_answer:
                return Example(f"calc {text} =", {"answer": f" {value}"})

    return _split_unique(draw, num_train=num_train, num_eval=num_eval, task_name="arithmetic")


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------

TASKS: dict[str, Callable[..., tuple[list[Example], list[Example]]]] = {
    "sort": make_sort_examples,
    "arithmetic": make_arithmetic_examples,
}


_REGISTRY = Registry("task", TASKS, skip=_COMMON_ARGS)


def _task_factory(name: str) -> Callable[..., tuple[list[Example], list[Example]]]:
    """Look a task up by name, naming the allowed ones when it is unknown."""
    return _REGISTRY.factory(name)


def task_options(name: str) -> dict[str, object]:
    """Return the options a task accepts, with their defaults.

    Example:
        >>> task_options("sort")
        {'min_len': 3, 'max_len': 6}
    """
    return _REGISTRY.options(name)


def check_task_options(name: str, options: dict) -> None:
    """Raise ValueError naming the option when one is unknown, of the wrong type, or a
    number out of its range (checked here, at load, rather than when the run builds
    its prompts).

    Example:
        >>> check_task_options("arithmetic", {"max_operand": 10**9})
        Traceback (most recent call last):
        ...
        ValueError: task 'arithmetic': option 'max_operand' must be between 1 and 1000, got 1000000000.
    """
    # Ranges of the built-in tasks' number options. sort: the generator's own limit (12
    # digits is already longer than the built-in model was trained on). arithmetic:
    # answers beyond max_abs_answer are redrawn, so operands much larger than 1000
    # would make almost every draw a redraw and generation would stall; a million is
    # a 7-digit answer, beyond what a character-level model learns here.
    ranges = {
        ("sort", "min_len"): (1, 12), ("sort", "max_len"): (1, 12),
        ("arithmetic", "max_depth"): (1, 3), ("arithmetic", "max_operand"): (1, 1000),
        ("arithmetic", "max_abs_answer"): (1, 1_000_000),
    }
    allowed = task_options(name)
    _REGISTRY.check(name, options, ranges={option: span for (task, option), span in ranges.items() if task == name})
    lengths = {**allowed, **options}
    if name == "sort" and lengths["min_len"] > lengths["max_len"]:
        raise ValueError(
            f"task 'sort': need min_len <= max_len, got min_len={lengths['min_len']}, "
            f"max_len={lengths['max_len']}."
        )


def task_capacity(name: str, options: dict) -> int | None:
    """An upper bound on the distinct prompts a built-in task can make with these
    options, where one is cheap to count; None when it is too large to matter.

    sort: every list of min_len..max_len digits. arithmetic with max_depth 1: every
    `a op b` (before answers over max_abs_answer are redrawn, so a bound).

    Example:
        >>> task_capacity("sort", {})  # 10**3 + 10**4 + 10**5 + 10**6
        1111000
        >>> task_capacity("arithmetic", {"max_depth": 1, "max_operand": 9, "operators": "+-"})
        200
        >>> task_capacity("arithmetic", {}) is None
        True
    """
    opts = {**task_options(name), **options}
    if name == "sort":
        return sum(10**length for length in range(opts["min_len"], opts["max_len"] + 1))
    if name == "arithmetic" and opts["max_depth"] == 1:
        return (opts["max_operand"] + 1) ** 2 * len(set(opts["operators"]))
    return None


def check_task_size(name: str, options: dict, num_train: int, num_eval: int) -> None:
    """Refuse at once (ValueError naming num_train) a request for more distinct prompts
    than the task can make, rather than drawing for minutes and failing then.

    Example:
        >>> check_task_size("sort", {"min_len": 2, "max_len": 2}, num_train=500, num_eval=10)
        Traceback (most recent call last):
        ...
        ValueError: num_train: task 'sort' with these options makes at most 100 distinct prompts (num_train 500 + num_eval 10 asked for); lower data.num_train or widen data.task_options
    """
    capacity = task_capacity(name, options)
    if capacity is not None and num_train + num_eval > capacity:
        raise ValueError(
            f"num_train: task {name!r} with these options makes at most {capacity:,} distinct prompts "
            f"(num_train {num_train:,} + num_eval {num_eval:,} asked for); lower data.num_train "
            "or widen data.task_options"
        )


def make_task(
    name: str, *, seed: int, num_train: int, num_eval: int, **options: object
) -> tuple[list[Example], list[Example]]:
    """Generate ``(train, eval)`` examples for a built-in task.

    The same name, seed, sizes and options always give the same examples, and
    no prompt appears in both splits.

    Example:
        >>> train, ev = make_task("arithmetic", seed=0, num_train=4, num_eval=2, max_depth=1)
        >>> len(train), len(ev)
        (4, 2)
        >>> make_task("sort", seed=0, num_train=1, num_eval=1, length=3)
        Traceback (most recent call last):
        ...
        ValueError: task 'sort' has no option 'length'; allowed options: min_len=3, max_len=6.
    """
    factory = _task_factory(name)
    check_task_options(name, options)
    for count_name, count in (("num_train", num_train), ("num_eval", num_eval)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(
                f"task {name!r}: {count_name} must be a non-negative integer, got {count!r}."
            )
    check_task_size(name, options, num_train, num_eval)
    return factory(seed=seed, num_train=num_train, num_eval=num_eval, **options)


# ---------------------------------------------------------------------------
# Preference pairs (DPO) for the built-in tasks
# ---------------------------------------------------------------------------


def corrupt_answer(answer: str, rng: random.Random) -> str:
    """A plausible wrong answer of the same shape, for a rejected completion.

    A list of digits (sort) gets the kind of mistake a small model makes: most often one
    digit moved up or down by 1 (content wrong), else two adjacent unequal digits
    swapped (order wrong) or one digit dropped; a single integer (arithmetic) is moved
    by 1, 2 or 10.

    Example:
        >>> rng = random.Random(0)
        >>> wrong = corrupt_answer(" 1 3 4", rng)
        >>> wrong != " 1 3 4" and wrong.startswith(" ")
        True
        >>> corrupt_answer(" 20", random.Random(0)) in {" 10", " 18", " 19", " 21", " 22", " 30"}
        True
    """
    parts = answer.split()
    if len(parts) == 1 and re.fullmatch(r"-?\d+", parts[0]):
        return f" {int(parts[0]) + rng.choice([-10, -2, -1, 1, 2, 10])}"
    if parts and all(p.isdigit() for p in parts):
        swaps = [i for i in range(len(parts) - 1) if parts[i] != parts[i + 1]]
        kinds = ["replace"] * 2 + (["swap"] if swaps else []) + (["drop"] if len(parts) > 1 else [])
        kind = rng.choice(kinds)
        wrong = list(parts)
        if kind == "swap":
            i = rng.choice(swaps)
            wrong[i], wrong[i + 1] = wrong[i + 1], wrong[i]
        elif kind == "drop":
            del wrong[rng.randrange(len(wrong))]
        else:
            i = rng.randrange(len(wrong))
            wrong[i] = str(rng.choice([d for d in (int(wrong[i]) - 1, int(wrong[i]) + 1) if 0 <= d <= 9]))
        return "".join(f" {p}" for p in wrong)
    raise ValueError(f"cannot make a wrong answer for {answer!r}: only built-in task answers are supported")


def preference_pairs(examples: list[Example], seed: int) -> list[Example]:
    """The examples with `chosen` (their answer) and `rejected` (a corrupted answer)
    fields added, seeded so the same examples always get the same pairs.

    Example:
        >>> pair = preference_pairs([Example("sort 3 1 =", {"answer": " 1 3"})], seed=0)[0]
        >>> pair.fields["chosen"], pair.fields["rejected"] != " 1 3"
        (' 1 3', True)
    """
    rng = random.Random(f"pairs:{seed}")
    return [Example(e.prompt, {**e.fields, "chosen": e.fields["answer"],
                               "rejected": corrupt_answer(e.fields["answer"], rng)}) for e in examples]


# ---------------------------------------------------------------------------
# Prompt files
# ---------------------------------------------------------------------------

_SUPPORTED_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".parquet")


def _row_to_example(row: dict, prompt_field: str, where: str) -> Example:
    """Turn one parsed record into an Example; ``where`` is 'file line N'."""
    if prompt_field not in row:
        found = ", ".join(repr(k) for k in row) or "no columns"
        raise ValueError(
            f"{where}: missing prompt field {prompt_field!r} (found {found}); "
            f"add it or pass prompt_field= naming the column that holds the prompt."
        )
    prompt = row[prompt_field]
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(
            f"{where}: prompt field {prompt_field!r} must be a non-empty string, "
            f"got {prompt!r}."
        )
    fields = {key: value for key, value in row.items() if key != prompt_field}
    return Example(prompt, fields)


def _load_json_records(path: Path, text: str) -> list[tuple[str, object]]:
    """Parse JSON Lines (or a JSON array in a ``.json`` file) into (where, record)."""
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} line {exc.lineno}: invalid JSON: {exc.msg}.") from None
        return [(f"{path} item {i}", record) for i, record in enumerate(records, start=1)]
    parsed = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue  # blank lines (often a trailing newline) carry no record
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path} line {line_number}: invalid JSON: {exc.msg} (column {exc.colno}); "
                f"each line must be one JSON object."
            ) from None
        parsed.append((f"{path} line {line_number}", record))
    return parsed


def _load_csv_records(
    path: Path, text: str, delimiter: str, prompt_field: str
) -> list[tuple[str, object]]:
    """Parse CSV/TSV text with a header row into (where, record) pairs."""
    reader = csv.DictReader(text.splitlines(), delimiter=delimiter)
    if reader.fieldnames is None:
        return []
    if prompt_field not in reader.fieldnames:
        # Report it once, at the header, instead of on every data row.
        found = ", ".join(repr(name) for name in reader.fieldnames)
        raise ValueError(
            f"{path} line 1 (header): missing prompt field {prompt_field!r} (found {found}); "
            f"add that column or pass prompt_field= naming the column that holds the prompt."
        )
    parsed = []
    for row in reader:
        where = f"{path} line {reader.line_num}"
        if None in row:
            raise ValueError(
                f"{where}: more values than header columns ({len(reader.fieldnames)}); "
                f"quote values that contain '{delimiter}'."
            )
        parsed.append((where, row))
    return parsed


def _load_parquet_records(path: Path) -> list[tuple[str, object]]:
    """Read a parquet file with pyarrow (optional dependency)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(
            f"{path}: reading parquet files needs pyarrow; install it with "
            f"'pip install pyarrow' or convert the file to JSONL or CSV."
        ) from None
    rows = pq.read_table(path).to_pylist()
    return [(f"{path} row {i}", row) for i, row in enumerate(rows, start=1)]


def load_prompt_file(path: str | Path, prompt_field: str = "prompt") -> list[Example]:
    """Load prompts from a JSONL, CSV/TSV or parquet file.

    The ``prompt_field`` column becomes :attr:`Example.prompt`; every other
    column goes into :attr:`Example.fields` for the reward functions.  CSV
    values stay strings.  Errors name the file, the line and what is wrong.

    Example:
        >>> import tempfile, os
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     p = os.path.join(tmp, "data.jsonl")
        ...     _ = open(p, "w").write('{"prompt": "2+2=", "answer": "4"}\\n')
        ...     load_prompt_file(p)
        [Example(prompt='2+2=', fields={'answer': '4'})]
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in _SUPPORTED_SUFFIXES:
        raise ValueError(
            f"{path}: unsupported file type {suffix or '(no extension)'!r}; "
            f"use one of {', '.join(_SUPPORTED_SUFFIXES)}."
        )
    if not path.is_file():
        raise ValueError(f"{path}: file not found; check the path.")
    if suffix == ".parquet":
        records = _load_parquet_records(path)
    else:
        try:
            # utf-8-sig drops a byte-order mark that spreadsheet exports add.
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{path}: not UTF-8 text ({exc.reason}); re-save it as UTF-8."
            ) from None
        if suffix in (".csv", ".tsv"):
            delimiter = "\t" if suffix == ".tsv" else ","
            records = _load_csv_records(path, text, delimiter, prompt_field)
        else:
            records = _load_json_records(path, text)
    if not records:
        raise ValueError(
            f"{path}: the file is empty (no records); it needs at least one record "
            f"with a {prompt_field!r} field."
        )
    examples = []
    for where, record in records:
        if not isinstance(record, dict):
            raise ValueError(
                f"{where}: expected a JSON object like {{\"{prompt_field}\": \"...\"}}, "
                f"got {type(record).__name__}."
            )
        examples.append(_row_to_example(record, prompt_field, where))
    return examples
