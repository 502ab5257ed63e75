"""Prompt files: JSONL (or a JSON array), CSV/TSV and parquet, one :class:`Example` a row.

The prompt column becomes the prompt; every other column goes to the rewards. Errors name
the file, the line and what is wrong. Torch-free.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from engine.data.columns import Columns, row_to_example
from engine.data.examples import Example

__all__ = ["load_prompt_file"]

_SUPPORTED_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".parquet")


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
    import pyarrow as pa

    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        problem = str(exc).strip() or type(exc).__name__
    else:
        return [(f"{path} row {i}", row) for i, row in enumerate(rows, start=1)]
    # Raised outside the except block: pyarrow's error as the context would give the
    # failure a location in pyarrow's compiled code (error.pxi), not in any real file.
    raise ValueError(f"{path}: cannot read it as parquet ({problem}); check the file, or convert it to JSONL or CSV.")


def load_prompt_file(path: str | Path, prompt_field: str = "prompt", columns: Columns | None = None) -> list[Example]:
    """Load prompts from a JSONL, CSV/TSV or parquet file.

    The ``prompt_field`` column becomes :attr:`Example.prompt`; every other
    column goes into :attr:`Example.fields` for the reward functions (``columns``,
    when given, names the prompt, answer and DPO columns and the answer pattern, see
    engine/data/columns.py).  CSV values stay strings.  Errors name the file, the line
    and what is wrong.

    Example:
        >>> import tempfile, os
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     p = os.path.join(tmp, "data.jsonl")
        ...     _ = open(p, "w").write('{"prompt": "2+2=", "answer": "4"}\\n')
        ...     load_prompt_file(p)
        [Example(prompt='2+2=', fields={'answer': '4'})]
    """
    columns = columns or Columns(prompt=prompt_field)
    prompt_field = columns.prompt
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
        examples.append(row_to_example(record, columns, where))
    return examples
