"""Preference pairs (DPO) for the built-in tasks: the right answer is `chosen`, a
corrupted one `rejected`.

How an answer is corrupted belongs to its task (``corrupt=`` in
:func:`engine.data.tasks.register_task`). Torch-free.
"""

from __future__ import annotations

import random
from pathlib import Path

from engine.data.columns import is_conversation
from engine.data.examples import Example
from engine.data.splits import load_splits
from engine.data.tasks import CORRUPTIONS

__all__ = ["corrupt_answer", "preference_pairs", "pair_problem", "load_preference_splits"]


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


def _answer_problem(value: object) -> str | None:
    """Why a pair's side cannot be an answer (None when it can): text, or assistant messages."""
    if isinstance(value, str):
        return "is empty" if not value.strip() else None
    if is_conversation(value):
        text = "".join(str(m.get("content", "")) for m in value if m.get("role") == "assistant")
        return "has no assistant message with text" if not text.strip() else None
    return "is missing" if value is None else f"is neither text nor messages ({type(value).__name__})"


def pair_problem(e: Example) -> str | None:
    """What keeps an example from being a preference pair (None when nothing does).

    >>> pair_problem(Example("2+2=", {"chosen": " 4", "rejected": "  "}))
    'rejected is empty'
    """
    found = [f"{side} {why}" for side in ("chosen", "rejected") if (why := _answer_problem(e.fields.get(side)))]
    return " and ".join(found) or None


def load_preference_splits(cfg, seed: int, base_dir: Path | None = None,
                           who: str = "DPO") -> tuple[list[Example], list[Example]]:
    """(train, held-out) preference pairs for a preset's data section (`cfg`): a built-in
    task's pairs (its answer chosen, a corrupted one rejected: seeded, so DPO, KTO and a
    reward model see the same pairs), or a file's or data set's rows, each checked for a
    non-empty `chosen` and `rejected` (TRL's preference format: text or assistant messages).
    `who` names the algorithm in the errors."""
    train, held_out = load_splits(cfg, seed, base_dir)
    if cfg.task is not None:
        return preference_pairs(train, seed, cfg.task), preference_pairs(held_out, seed + 1, cfg.task)
    source = "data.dataset" if cfg.dataset is not None else "data.path"
    for where, examples in (("training", train), ("held-out", held_out)):
        for number, e in enumerate(examples):
            problem = pair_problem(e)
            if problem:
                raise ValueError(
                    f"{source}: {who} needs `chosen` and `rejected` answers (text, or assistant messages in "
                    f"TRL's preference format) beside the prompt; {where} example {number} "
                    f"({str(e.prompt)[:40]!r}): {problem} (columns data.chosen_field / data.rejected_field "
                    "name them)")
    return train, held_out
