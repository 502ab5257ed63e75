"""Where a run's prompts come from, for messages: the data source's name
(`source_name`) and the file and row of one prompt (`prompt_location`). The run's
set-up, `validate` and the window's checks say the same thing. Torch-free.
"""

from __future__ import annotations

from pathlib import Path

from engine.data.columns import Columns
from engine.data.examples import Example
from engine.data.files import load_prompt_file
from engine.foundation.paths import resolve_data_path

__all__ = ["source_name", "prompt_location"]


def source_name(cfg) -> str:
    if cfg.task is not None:
        return f"task {cfg.task!r}"
    return f"data set {cfg.dataset!r}" if cfg.dataset is not None else f"data file {cfg.path}"


def prompt_location(cfg, base_dir: Path | str | None, example: Example) -> str:
    """Where an example's row is, for a message: 'row 7 of data file /d.jsonl' (row 1 is
    the first record); for a data set or a task, its name and the prompt's first words."""
    if cfg.path is not None:
        path = resolve_data_path(cfg.path, base_dir)
        try:
            rows = load_prompt_file(path, columns=Columns.from_config(cfg))
            return f"row {rows.index(example) + 1} of data file {path}"
        except (ValueError, OSError):  # changed since it was read: its start is still a clue
            pass
    start = example.prompt if isinstance(example.prompt, str) else str(example.prompt)
    return f"{source_name(cfg)}, the prompt starting {start[:40]!r}"
