"""Built-in tasks: generators, their registry and how many prompts each can make.

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

Every task has a held-out eval split (engine/data/examples.py). A task is
registered with :func:`register_task`: its generator (whose keyword-only
parameters are its options), the reward that judges held-out accuracy, and how to
corrupt one of its answers into a plausible wrong one (the rejected side of a DPO
pair, engine/data/preference.py).

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

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable

from engine.data.examples import Example, _split_unique, is_eval_prompt
from engine.foundation.registry import Registry

__all__ = [
    "Example",
    "Task",
    "TASKS",
    "CORRUPTIONS",
    "ACCURACY_REWARD",
    "register_task",
    "make_task",
    "task_options",
    "task_capacity",
    "check_task_size",
    "make_sort_examples",
    "make_arithmetic_examples",
    "corrupt_sort_answer",
    "corrupt_integer_answer",
    "is_eval_prompt",
]

# Arguments every task factory takes; everything else is a task option.
_COMMON_ARGS = ("seed", "num_train", "num_eval")


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
# Wrong answers (the rejected side of a DPO pair)
# ---------------------------------------------------------------------------


def corrupt_integer_answer(answer: str, rng: random.Random) -> str:
    """A single integer (arithmetic) moved by 1, 2 or 10.

    Example:
        >>> corrupt_integer_answer(" 20", random.Random(0)) in {" 10", " 18", " 19", " 21", " 22", " 30"}
        True
    """
    parts = answer.split()
    if len(parts) == 1 and re.fullmatch(r"-?\d+", parts[0]):
        return f" {int(parts[0]) + rng.choice([-10, -2, -1, 1, 2, 10])}"
    raise ValueError(f"cannot make a wrong answer for {answer!r}: expected a single integer")


def corrupt_sort_answer(answer: str, rng: random.Random) -> str:
    """A list of digits with the kind of mistake a small model makes: most often one
    digit moved up or down by 1 (content wrong), else two adjacent unequal digits
    swapped (order wrong) or one digit dropped. A one-digit list is moved like an
    integer (:func:`corrupt_integer_answer`), as it always has been.

    Example:
        >>> wrong = corrupt_sort_answer(" 1 3 4", random.Random(0))
        >>> wrong != " 1 3 4" and wrong.startswith(" ")
        True
    """
    parts = answer.split()
    if len(parts) == 1:
        return corrupt_integer_answer(answer, rng)
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"cannot make a wrong answer for {answer!r}: expected a list of digits")
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


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Task:
    """What a task declares besides its generator: ``corrupt`` makes a plausible wrong
    answer of the same shape as a right one, from a seeded rng (the rejected side of a
    DPO pair); ``accuracy_reward`` is the reward that is 1.0 exactly when a completion is
    correct (held-out accuracy)."""

    corrupt: Callable[[str, random.Random], str]
    accuracy_reward: str


# The tasks (name -> generator, as a mapping), what `data.task` may name: the preset
# validates against it and the set-up window lists it when its form is built.
TASKS: Registry[Task] = Registry("task", field="data.task", skip=_COMMON_ARGS)


class _Declared(Mapping):
    """A read-only view of one declaration of every task: name -> value."""

    def __init__(self, attribute: str):
        self.attribute = attribute

    def __getitem__(self, name: str):
        if name not in TASKS:
            raise KeyError(name)
        return getattr(TASKS.declares(name), self.attribute)

    def __iter__(self):
        return iter(TASKS)

    def __len__(self) -> int:
        return len(TASKS)


CORRUPTIONS: Mapping[str, Callable[[str, random.Random], str]] = _Declared("corrupt")
ACCURACY_REWARD: Mapping[str, str] = _Declared("accuracy_reward")


def register_task(name: str, factory: Callable[..., tuple[list[Example], list[Example]]], *,
                  corrupt: Callable[[str, random.Random], str], accuracy_reward: str, help: str = "") -> None:
    """Add a built-in task: its generator, how to corrupt one of its answers, and the
    reward that judges its held-out accuracy (``help``: one line for the set-up form; the
    generator's first docstring line by default). A second registration of a name
    replaces the first."""
    TASKS.register(name, factory, help, Task(corrupt, accuracy_reward), origin=factory.__module__, replace=True)


register_task("sort", make_sort_examples, corrupt=corrupt_sort_answer, accuracy_reward="exact_match",
              help="sort a list of digits: `sort 3 1 4 =` -> ` 1 3 4`")
register_task("arithmetic", make_arithmetic_examples, corrupt=corrupt_integer_answer,
              accuracy_reward="numeric_match", help="evaluate a small integer expression: `calc (2+3)*4 =` -> ` 20`")


def _task_factory(name: str) -> Callable[..., tuple[list[Example], list[Example]]]:
    """Look a task up by name, naming the allowed ones when it is unknown."""
    return TASKS.factory(name)


def task_options(name: str) -> dict[str, object]:
    """Return the options a task accepts, with their defaults.

    Example:
        >>> task_options("sort")
        {'min_len': 3, 'max_len': 6}
    """
    return TASKS.options(name)


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
    TASKS.check_options(name, options, ranges={option: span for (task, option), span in ranges.items() if task == name})
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
