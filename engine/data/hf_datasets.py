"""Hugging Face data sets as a run's prompts, through the `datasets` library.

`data.dataset` is a hub id (openai/gsm8k; offline, read from the files of its snapshot in
the hub cache, as `hf download` leaves them), a folder written by ``save_to_disk``, a
folder of data files, or one data file. Arrow tables are memory-mapped, so a big set
costs what its used rows cost: a run samples `num_train` (and `num_eval`) row numbers
with its seed and reads only those rows.
Torch-free (`datasets` is imported when a set is opened).
"""

from __future__ import annotations

import ast
import contextlib
import logging
import random
import re
import time
from pathlib import Path

from engine.data.columns import Columns, missing_columns_message, row_to_example
from engine.data.examples import Example
from engine.hub.access import download_hint, hub_offline
from engine.foundation.paths import link_problem, local_or_hub_id

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


def _pick_split(saved, split: str, field: str, where: str):
    """A split of a loaded DatasetDict, or the one Dataset of a set without splits."""
    import datasets

    if isinstance(saved, datasets.DatasetDict):
        if split not in saved:
            raise ValueError(_not_one_of(field, split, "splits", list(saved), where))
        return saved[split]
    return saved


def _not_one_of(field: str, value, kind: str, names, where: str) -> str:
    """The error for a subset or split the data set lacks, on the field that names it.

    >>> _not_one_of("data.split", "dev", "splits", ["train", "test"], "data.dataset: 'a/b'")
    "data.split: 'dev' is not one of its splits (train, test) (data.dataset: 'a/b'); set data.split to one of them"
    """
    listed = ", ".join(map(str, names)) or "none found"
    if value is None:  # no subset named, and the set has several
        return (f"{field}: not set, and the data set has several {kind} ({listed}) ({where}); "
                f"set {field} to one of them")
    return f"{field}: {value!r} is not one of its {kind} ({listed}) ({where}); set {field} to one of them"


@contextlib.contextmanager
def _without_datasets_bars():
    """`datasets`' own progress bars off while a set is opened: "Generating train
    split", "Loading dataset from disk", "Resolving data files" are noise on the
    engine's stderr (its log says what is opened, and a big set's rows get the engine's
    own bar). A hub download's bars are huggingface_hub's, not these, and still show."""
    import datasets

    if datasets.are_progress_bars_disabled():  # already off (HF_DATASETS_DISABLE_PROGRESS_BARS=1, say)
        yield
        return
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.enable_progress_bars()


def open_split(source: Path | str, subset: str | None, split: str, split_field: str = "data.split"):
    """The `datasets.Dataset` of one split (`split_field` names the preset field that
    chose it, for errors). ValueError naming the field to change on failure."""
    with _without_datasets_bars():
        return _open_split(source, subset, split, split_field)


def _open_split(source: Path | str, subset: str | None, split: str, split_field: str):
    import datasets

    if isinstance(source, Path):
        where = f"data.dataset: {source}"
        link = link_problem(source)
        if link is not None:  # datasets would take the link's name for a builder or a hub id
            raise ValueError(f"{where} is {link}; point the link at the data set's file or folder, or give "
                             "the file's or folder's own path")
        if source.is_dir() and ((source / "dataset_dict.json").exists() or (source / "state.json").exists()):
            return _pick_split(datasets.load_from_disk(str(source)), split, split_field, where)
        if source.is_file():
            builder = _FILE_BUILDERS.get(source.suffix.lower())
            if builder is None:
                raise ValueError(f"{where}: cannot read {source.suffix or 'a file without a suffix'}; use one of "
                                 f"{', '.join(sorted(_FILE_BUILDERS))}, or a folder")
            # One file is one split, whatever data.split says.
            return _load(lambda: _load_files(builder, [source], "train"), where, subset, split, split_field)
        return _load(lambda: datasets.load_dataset(str(source), subset, split=split), where, subset, split, split_field)
    # Imported here: hub_cache loads huggingface_hub, which must not load before the
    # engine has decided on offline mode (engine.hub.access).
    from engine.hub.cache import cached_snapshot

    where = f"data.dataset: {source!r}"
    snapshot = cached_snapshot(source, "dataset")
    from_snapshot = None if snapshot is None else (lambda: _from_snapshot(source, snapshot, subset, split, split_field))
    if from_snapshot is not None and hub_offline():
        return from_snapshot()  # offline, `datasets` would look in its own Arrow cache only
    return _load(lambda: datasets.load_dataset(source, subset, split=split), where, subset, split, split_field,
                 hub_id=source, fallback=from_snapshot)


def _load_files(builder: str, files: list[Path], split: str):
    """One split from data files, by a `datasets` builder (parquet, json, csv, arrow)."""
    import datasets

    extra = {"delimiter": "\t"} if all(p.suffix.lower() == ".tsv" for p in files) else {}
    return datasets.load_dataset(builder, data_files={split: [str(p) for p in files]}, split=split, **extra)


def _from_snapshot(repo_id: str, snapshot: Path, subset: str | None, split: str, split_field: str):
    """One split read from a hub cache snapshot's files (what `hf download` leaves): the
    subset and split files as the repo's README declares them, else by the conventions."""
    where = f"data.dataset: {repo_id!r}, cached in {snapshot}"
    chosen, files = _snapshot_files(repo_id, snapshot, subset, split, split_field, where)
    builders = {_FILE_BUILDERS.get(p.suffix.lower()) for p in files}
    if len(builders) != 1 or None in builders:
        raise ValueError(f"{where}: split {split!r} of subset {chosen!r} mixes file kinds "
                         f"({', '.join(sorted({p.suffix for p in files}))}); cannot read it as one table")
    log.info("reading %s split %s of subset %s from the hub cache (%d files)", repo_id, split, chosen, len(files))
    return _load(lambda: _load_files(builders.pop(), files, split), where, chosen, split, split_field)


def _snapshot_files(repo_id: str, snapshot: Path, subset: str | None, split: str, split_field: str,
                    where: str) -> tuple[str, list[Path]]:
    """(the subset used, the split's files); a wrong subset or split names its field."""
    from engine.hub.cache import snapshot_splits, snapshot_subsets

    def incomplete(name: str | None) -> ValueError:
        return ValueError(f"{where}: no data files (parquet, json, csv, arrow) for subset {name or 'default'!r}; "
                          f"the download looks incomplete: fetch it again with {download_hint(repo_id)}")

    try:
        subsets, default = snapshot_subsets(snapshot)
    except (OSError, ValueError) as exc:  # an unreadable README header, a broken link
        raise ValueError(f"{where}: cannot be read ({exc})") from None
    if not subsets:
        raise incomplete(subset)
    chosen = subset or default
    if chosen not in subsets:
        raise ValueError(_not_one_of("data.subset", subset, "subsets", subsets, where))
    try:
        splits = {name: files for name, files in snapshot_splits(snapshot, chosen).items() if files}
    except OSError as exc:
        raise ValueError(f"{where}: cannot be read ({exc})") from None
    if not splits:
        raise incomplete(chosen)
    if split not in splits:
        raise ValueError(_not_one_of(split_field, split, "splits", list(splits), f"{where}, subset {chosen!r}"))
    return chosen, splits[split]


def _load(load, where: str, subset: str | None, split: str, split_field: str, hub_id: str | None = None,
          fallback=None):
    try:
        return load()
    except ValueError as exc:  # unknown split, missing subset: datasets says which exist
        raise ValueError(_value_error(exc, where, subset, split, split_field)) from None
    except Exception as exc:  # datasets raises many kinds for "cannot load"
        if fallback is not None:  # the hub did not answer, but the set is in its cache
            log.warning("%s: the hub could not be asked (%s); reading the cached snapshot", where, type(exc).__name__)
            return fallback()
        text = f"{where}: could not load it ({type(exc).__name__}: {str(exc)[:400]})"
        if hub_id is not None:
            text += (". It is no local file or folder, so it was looked up on the Hugging Face hub; "
                     f"when offline it must be in the local cache: fetch it with {download_hint(hub_id)}")
        raise ValueError(text) from None


def _value_error(exc: ValueError, where: str, subset: str | None, split: str, split_field: str) -> str:
    """`datasets`' error for a missing split or subset, on the preset field to change."""
    text = str(exc)
    listed = re.search(r"\[[^\]]*\]", text)  # datasets lists the names that exist
    try:
        names = ast.literal_eval(listed.group(0)) if listed else []
    except (ValueError, SyntaxError):
        names = []
    if text.startswith(("Unknown split", "Bad split")):
        return _not_one_of(split_field, split, "splits", names, where)
    if text.startswith(("BuilderConfig", "Config name is missing")):
        return _not_one_of("data.subset", subset, "subsets", names, where)
    return f"{where}: {text}"


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
    # no prompt column: preference pairs may hold it implicitly (TRL's format; row_to_example)
    implicit = columns.chosen in found and columns.rejected in found
    missing = {"prompt_field": columns.prompt} if columns.prompt not in found and not implicit else {}
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
        eval_table = open_split(source, cfg.subset, cfg.eval_split, "data.eval_split")
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
