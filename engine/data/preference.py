"""Preference pairs (DPO) for the built-in tasks: the right answer is `chosen`, a
corrupted one `rejected`.

How an answer is corrupted belongs to its task (``corrupt=`` in
:func:`engine.data.tasks.register_task`). Torch-free.
"""

from __future__ import annotations

import random

from engine.data.examples import Example
from engine.data.tasks import CORRUPTIONS

__all__ = ["corrupt_answer", "preference_pairs"]


def corrupt_answer(answer: str, rng: random.Random, task: str) -> str:
    """A plausible wrong answer of the same shape, for a rejected completion.

    Example:
        >>> wrong = corrupt_answer(" 1 3 4", random.Random(0), "sort")
        >>> wrong != " 1 3 4" and wrong.startswith(" ")
        True
        >>> corrupt_answer(" 20", random.Random(0), "arithmetic") in {" 10", " 18", " 19", " 21", " 22", " 30"}
        True
    """
    if task not in CORRUPTIONS:
        raise ValueError(f"cannot make a wrong answer for task {task!r}: only built-in tasks "
                         f"({', '.join(CORRUPTIONS)}) have one; give a prompt file with chosen/rejected columns")
    return CORRUPTIONS[task](answer, rng)


def preference_pairs(examples: list[Example], seed: int, task: str) -> list[Example]:
    """The examples of built-in ``task`` with `chosen` (their answer) and `rejected` (a
    corrupted answer) fields added, seeded so the same examples always get the same pairs.

    Example:
        >>> pair = preference_pairs([Example("sort 3 1 =", {"answer": " 1 3"})], seed=0, task="sort")[0]
        >>> pair.fields["chosen"], pair.fields["rejected"] != " 1 3"
        (' 1 3', True)
    """
    rng = random.Random(f"pairs:{seed}")
    return [Example(e.prompt, {**e.fields, "chosen": e.fields["answer"],
                               "rejected": corrupt_answer(e.fields["answer"], rng, task)}) for e in examples]
