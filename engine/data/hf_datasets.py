"""Hugging Face data sets as a run's prompts, through the `datasets` library.

`data.dataset` is a hub id (openai/gsm8k; taken from the local cache when offline), a
folder written by ``save_to_disk``, a folder of data files, or one data file. Arrow
tables are memory-mapped, so a big set costs what its used rows cost: a run samples
`num_train` (and `num_eval`) row numbers with its seed and reads only those rows.
Torch-free (`datasets` is imported when a set is opened).
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path

from engine.data.columns import Columns, missing_columns_message, row_to_example
from engine.data.examples import Example
from engine.preset_paths import local_or_hub_id

__all__ = ["load_dataset_splits", "open_split", "sample_rows"]

log = logging.getLogger(__name__)

# One data file read by a `datasets` builder, by its suffix.
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".ndjson": "json", ".csv": "csv", ".tsv": "csv",
                  ".parquet": "parquet", ".arrow": "arrow", ".txt": "text"}


def _without_splits(source: Path | str) -> bool:
    """One data file, or one Dataset saved with save_to_disk (not a DatasetDict)."""
    if not isinstance(source, Path):
        return False
    return source.is_file() or ((source / "state.json").exists() and not (source / "dataset_dict.json").exists())


def _pick_split(saved, split: str, where: str):
    """A split of a loaded DatasetDict, or the one Dataset of a set without splits."""
    import datasets

    if isinstance(saved, datasets.DatasetDict):
        if split not in saved:
            raise ValueError(f"{where}: {split!r} is not one of its splits ({', '.join(saved)}); "
                             "set data.split / data.eval_split to one of them")
        return saved[split]
    return saved


def open_split(source: Path | str, subset: str | None, split: str):
    """The `datasets.Dataset` of one split. ValueError naming the field on failure."""
    import datasets

    if isinstance(source, Path):
        where = f"data.dataset: {source}"
        if source.is_dir() and ((source / "dataset_dict.json").exists() or (source / "state.json").exists()):
            return _pick_split(datasets.load_from_disk(str(source)), split, where)
        if source.is_file():
            builder = _FILE_BUILDERS.get(source.suffix.lower())
            if builder is None:
                raise ValueError(f"{where}: cannot read {source.suffix or 'a file without a suffix'}; use one of "
                                 f"{', '.join(sorted(_FILE_BUILDERS))}, or a folder")
            extra = {"delimiter": "\t"} if source.suffix.lower() == ".tsv" else {}
            # One file is one split, whatever data.split says.
            return _load(lambda: datasets.load_dataset(builder, data_files=str(source), split="train", **extra), where)
        return _load(lambda: datasets.load_dataset(str(source), subset, split=split), where)
    where = f"data.dataset: {source!r}"
    return _load(lambda: datasets.load_dataset(source, subset, split=split), where, hub_id=source)


def _load(load, where: str, hub_id: str | None = None):
    try:
        return load()
    except ValueError as exc:  # unknown split, missing subset: datasets says which exist
        raise ValueError(f"{where}: {exc}") from None
    except Exception as exc:  # datasets raises many kinds for "cannot load"
        text = f"{where}: could not load it ({type(exc).__name__}: {str(exc)[:400]})"
        if hub_id is not None:
            from engine.hub_access import download_hint

            text += (". It is no local file or folder, so it was looked up on the Hugging Face hub; "
                     f"when offline it must be in the local cache: fetch it with {download_hint(hub_id)}")
        raise ValueError(text) from None


def sample_rows(size: int, count: int, rng: random.Random) -> list[int]:
    """`count` distinct row numbers of `size` rows in seeded order, without building a
    list of every row number (a set may have millions).

    Example:
        >>> sample_rows(10, 3, random.Random(0)) == sample_rows(10, 3, random.Random(0))
        True
        >>> sorted(sample_rows(4, 9, random.Random(0)))
        [0, 1, 2, 3]
    """
    return rng.sample(range(size), min(count, size))


def _examples(table, rows: list[int], columns: Columns, name: str, split: str) -> list[Example]:
    """The rows (read in file order, which memory mapping favours) as Examples."""
    from tqdm import tqdm

    rows = sorted(rows)
    selected = table.select(rows)
    out = []
    # A bar for sets that take a moment, in a terminal and in the window's engine output
    # alike (it cleans the carriage returns); small sets are ready before a bar would show.
    for number, row in zip(rows, tqdm(selected, total=len(rows), desc=f"preparing {split}",
                                      disable=len(rows) < 2000, unit="row", leave=False, mininterval=0.5)):
        out.append(row_to_example(row, columns, f"data.dataset {name} split {split!r} row {number}"))
    return out


def _check_columns(table, columns: Columns, name: str, split: str) -> None:
    found = list(table.column_names)
    missing = {"prompt_field": columns.prompt} if columns.prompt not in found else {}
    if columns.answer_pattern is not None and columns.answer not in found:
        missing["answer_field"] = columns.answer  # the pattern says an answer column is expected
    if missing:
        raise ValueError(missing_columns_message(f"data.dataset: {name} split {split!r}", missing, found))


def load_dataset_splits(cfg, seed: int, base_dir: Path | None = None) -> tuple[list[Example], list[Example]]:
    """(train, eval) examples of a preset's data section with `dataset` set.

    With `eval_split`, `num_eval` rows of that split are held out; without, `num_eval`
    rows of `split` are, and never trained on. At most `num_train` rows train.
    """
    started = time.perf_counter()
    source = local_or_hub_id(cfg.dataset, base_dir)
    name = str(source) if isinstance(source, Path) else repr(source)
    columns = Columns.from_config(cfg)
    log.info("opening data set %s (subset %s, split %s)", name, cfg.subset, cfg.split)
    if cfg.eval_split is not None and _without_splits(source):
        raise ValueError(f"data.eval_split: {name} is one table without splits; remove eval_split "
                         "(num_eval of its rows are then held out) or give a set with splits")
    train_table = open_split(source, cfg.subset, cfg.split)
    _check_columns(train_table, columns, name, cfg.split)
    rng = random.Random(f"dataset:{seed}")
    if cfg.eval_split is not None:
        eval_table = open_split(source, cfg.subset, cfg.eval_split)
        _check_columns(eval_table, columns, name, cfg.eval_split)
        if len(eval_table) < cfg.num_eval:
            raise ValueError(f"data.num_eval: {cfg.num_eval} held-out rows asked for, but split "
                             f"{cfg.eval_split!r} of {name} has {len(eval_table)}; lower num_eval")
        train_rows = sample_rows(len(train_table), cfg.num_train, rng)
        eval_rows = sample_rows(len(eval_table), cfg.num_eval, rng)
    else:
        eval_table = train_table
        if len(train_table) <= cfg.num_eval:
            raise ValueError(f"data.num_eval: {cfg.num_eval} held-out rows asked for, but split {cfg.split!r} of "
                             f"{name} has {len(train_table)} rows; lower num_eval to leave some for training, "
                             "or set data.eval_split")
        picked = sample_rows(len(train_table), cfg.num_eval + cfg.num_train, rng)
        eval_rows, train_rows = picked[:cfg.num_eval], picked[cfg.num_eval:]
    train = _examples(train_table, train_rows, columns, name, cfg.split)
    held_out = _examples(eval_table, eval_rows, columns, name, cfg.eval_split or cfg.split)
    log.info("data set %s: %d training and %d held-out rows (of %d) ready in %.1f s", name, len(train),
             len(held_out), len(train_table), time.perf_counter() - started)
    return train, held_out
