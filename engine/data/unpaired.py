"""Unpaired preference rows (KTO): a prompt, a `completion` and its `label` (true: desirable),
TRL's unpaired preference format, plain text or conversational (prompt and completion
as lists of messages; the chat template applies later, as to DPO's answers).

From a prompt file or a data set the rows are read as any prompts are (engine/data/splits.py)
and checked here; rows that hold preference pairs instead (`chosen` and `rejected`) are
unpaired, as TRL's KTO trainer does with `unpair_preference_dataset`. A built-in task's
rows come from its preference pairs (engine/data/preference.py): the right answer
desirable, the corrupted one undesirable. Torch-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from engine.data.columns import is_conversation
from engine.data.examples import Example
from engine.data.preference import preference_pairs
from engine.data.splits import load_splits

__all__ = ["COMPLETION", "LABEL", "parse_label", "label_value", "unpair", "unpaired_rows", "load_unpaired_splits"]

COMPLETION, LABEL = "completion", "label"  # TRL's column names


def parse_label(value: object) -> bool | None:
    """A label as a bool: a boolean, or the text true / false in any case (a CSV or TSV
    cell is text); None for anything else (1, "yes", null: not a boolean).

    >>> parse_label(True), parse_label(" False "), parse_label(1)
    (True, False, None)
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def label_value(value: object, where: str) -> bool:
    """parse_label, or a ValueError naming the row and the column.

    >>> label_value(1, "row 3")
    Traceback (most recent call last):
    ...
    ValueError: row 3: column 'label' must be true (a desirable completion) or false (an undesirable one), got 1
    """
    parsed = parse_label(value)
    if parsed is not None:
        return parsed
    shown = repr(value[:40]) if isinstance(value, str) else repr(value)
    raise ValueError(f"{where}: column {LABEL!r} must be true (a desirable completion) or false (an undesirable "
                     f"one), got {shown}")


def unpair(pairs: list[Example]) -> list[Example]:
    """Preference pairs as unpaired rows, as TRL's `unpair_preference_dataset`: each pair
    gives (prompt, chosen, true) and (prompt, rejected, false); the pair's other fields
    stay on both rows. (TRL lists a batch's chosen rows before its rejected ones; here a
    pair's two rows are adjacent. The training stream shuffles them either way.)

    >>> unpair([Example("sort 3 1 =", {"chosen": " 1 3", "rejected": " 3 1", "answer": " 1 3"})])
    [Example(prompt='sort 3 1 =', fields={'answer': ' 1 3', 'completion': ' 1 3', 'label': True}), \
Example(prompt='sort 3 1 =', fields={'answer': ' 1 3', 'completion': ' 3 1', 'label': False})]
    """
    rows = []
    for pair in pairs:
        rest = {k: v for k, v in pair.fields.items() if k not in ("chosen", "rejected")}
        for side, label in (("chosen", True), ("rejected", False)):
            rows.append(Example(pair.prompt, {**rest, COMPLETION: pair.fields[side], LABEL: label}))
    return rows


def _is_answer(value: object) -> bool:
    return (isinstance(value, str) and bool(value)) or is_conversation(value)


def unpaired_rows(examples: list[Example], where: Callable[[int, Example], str]) -> list[Example]:
    """The examples as unpaired rows: each row's `completion` (text, or assistant messages)
    and `label` checked; rows with `chosen` and `rejected` instead are unpaired (`unpair`).
    `where(number, example)` says where a row is, for the errors (its file and row).

    >>> unpaired_rows([Example("2+2=", {"completion": " 4", "label": "true"})], lambda n, e: f"row {n + 1}")
    [Example(prompt='2+2=', fields={'completion': ' 4', 'label': True})]
    >>> unpaired_rows([Example("2+2=", {"label": True})], lambda n, e: f"row {n + 1}")
    Traceback (most recent call last):
    ...
    ValueError: row 1: KTO needs a `completion` column (text, or assistant messages) and a `label` column (true or false) beside the prompt, or `chosen` and `rejected` columns (preference pairs, unpaired as TRL does); this row lacks completion
    """
    rows = []
    for number, e in enumerate(examples):
        fields = e.fields
        if COMPLETION not in fields and _is_answer(fields.get("chosen")) and _is_answer(fields.get("rejected")):
            rows += unpair([e])
            continue
        missing = [k for k, ok in ((COMPLETION, _is_answer(fields.get(COMPLETION))), (LABEL, LABEL in fields)) if not ok]
        if missing:
            raise ValueError(f"{where(number, e)}: KTO needs a `completion` column (text, or assistant messages) "
                             "and a `label` column (true or false) beside the prompt, or `chosen` and `rejected` "
                             "columns (preference pairs, unpaired as TRL does); this row lacks "
                             + " and ".join(missing))
        label = parse_label(fields[LABEL])
        if label is None:  # `where` is worked out for a bad row only (it may read the file again)
            label = label_value(fields[LABEL], where(number, e))
        rows.append(Example(e.prompt, {**fields, LABEL: label}))
    return rows


def load_unpaired_splits(cfg, seed: int, base_dir: Path | None = None,
                         where: Callable[[int, Example], str] | None = None) -> tuple[list[Example], list[Example]]:
    """(train, held-out) unpaired rows for a preset's data section (`cfg`, its DataConfig):
    a built-in task's preference pairs unpaired (seeded as DPO's, so the two see the same
    pairs); a file's or data set's rows checked (`unpaired_rows`; `where` names a row's
    place, default its split and number).

    >>> from engine.data.config import DataConfig
    >>> train, held_out = load_unpaired_splits(DataConfig(task="sort", num_train=4, num_eval=2), seed=0)
    >>> len(train), [row.fields["label"] for row in train[:2]]
    (8, [True, False])
    """
    train, held_out = load_splits(cfg, seed, base_dir)
    if cfg.task is not None:
        return (unpair(preference_pairs(train, seed, cfg.task)),
                unpair(preference_pairs(held_out, seed + 1, cfg.task)))
    source = "data.dataset" if cfg.dataset is not None else "data.path"

    def place(split: str):
        if where is not None:
            return where
        return lambda number, e: f"{source}: {split} example {number} ({str(e.prompt)[:40]!r})"

    return unpaired_rows(train, place("training")), unpaired_rows(held_out, place("held-out"))
