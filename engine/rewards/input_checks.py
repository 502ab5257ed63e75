"""The rewards checked against the data, before a run would find out at step 1: the
data columns the registry rewards read (`reward_field_problems`). Shared by
`rl-engine validate`, the run's own set-up (engine/algorithms/base.py) and the window's
checks (workbench/setup/checks.py), so all three say the same thing. Torch-free.
"""

from __future__ import annotations

from engine.data.examples import Example
from engine.data.location import source_name
from engine.rewards.builtin import REWARDS
from engine.rewards.kinds import reward_options

__all__ = ["data_columns", "reward_field_problems"]

# The data fields the rewards see under a fixed name, and the preset field naming the column.
_RENAMED = {"answer": "answer_field", "chosen": "chosen_field", "rejected": "rejected_field"}


def data_columns(cfg, examples: list[Example]) -> list[str]:
    """The columns of the data as named in it: the prompt column, then every field the
    rows carry (the answer column under its own name, not the `answer` the rewards see).

    Example:
        >>> from engine.data.config import DataConfig
        >>> cfg = DataConfig(task=None, path="d.csv", answer_field="label")
        >>> data_columns(cfg, [Example("2+2", {"answer": "4", "id": 1})])
        ['prompt', 'label', 'id']
    """
    fields = list(dict.fromkeys(name for e in examples for name in e.fields))
    return [cfg.prompt_field] + [getattr(cfg, _RENAMED[f]) if f in _RENAMED else f for f in fields]


def _needed_field(name: str, options: dict) -> str | None:
    """The data field a registry reward reads (its answer_field option), or None."""
    if name not in REWARDS:
        return None  # custom functions and reward models take what they are given
    default = reward_options(name).get("answer_field")
    return options.get("answer_field", default) if default is not None else None


def reward_field_problems(preset, examples: list[Example]) -> list[tuple[str, str]]:
    """(rewards.N, message) for each registry reward that reads a data field the rows
    lack (the run would stop at its first step). An algorithm that trains on pairs
    (`trains_on_pairs`: DPO) or labelled completions (`trains_on_unpaired`: KTO) is left
    alone: it scores no completions with the rewards."""
    algorithm = preset.algorithm
    if algorithm.trains_on_pairs or algorithm.trains_on_unpaired or not examples:
        return []
    cfg = preset.data
    present = {name for e in examples for name in e.fields}
    columns = ", ".join(repr(c) for c in data_columns(cfg, examples))
    problems = []
    for index, reward in enumerate(preset.rewards):
        needed = _needed_field(reward.name, reward.options)
        if needed is None or needed in present:
            continue
        if needed == "answer":  # the data's answer column, named by data.answer_field
            column = cfg.answer_field
            fix = (f"set data.answer_field to the column that holds the reference answer (now {column!r}), "
                   f"or add a {column!r} column to the data")
        else:
            column = needed
            fix = (f"set rewards.{index}.options.answer_field to the column that holds the reference answer, "
                   f"or add a {column!r} column to the data")
        problems.append((f"rewards.{index}", f"reward {reward.name!r} needs the data column {column!r}, but "
                                             f"{source_name(cfg)} has only {columns}; {fix}"))
    return problems
