"""A JSON file the engine writes beside a run (a report card, an evaluation), read
leniently: whatever is wrong with it (missing, too large, unreadable, cut off while being
written, not an object) is one message in the reader's own error, never a traceback. No Qt."""

from __future__ import annotations

import json
import math
from pathlib import Path


def read_json_object(path: Path, what: str, error: type[Exception], max_bytes: int, name: str | None = None) -> dict:
    """The JSON object in `path`, or `error` saying what is wrong with it. `what`: what the
    file holds ("report card"); `name`: how a message names the file (default its name).

    >>> read_json_object(Path("/nowhere/eval.json"), "evaluation", ValueError, 1024)
    Traceback (most recent call last):
    ...
    ValueError: there is no evaluation at /nowhere/eval.json
    """
    where = name or path.name
    a_what = f"{'an' if what[:1] in 'aeiou' else 'a'} {what}"
    try:
        if path.stat().st_size > max_bytes:
            raise error(f"{where} is over {max_bytes // 2**20} MB: not {a_what} this window reads")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"there is no {what} at {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{where} cannot be read: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        cut = " (cut off while it was being written?)" if text.strip() and not text.rstrip().endswith("}") else ""
        raise error(f"{where} is not valid JSON{cut}: {exc}") from None
    if not isinstance(data, dict):
        raise error(f"{where} does not hold {a_what} (a JSON object)")
    return data


def read_part(data: dict, name: str, read, problems: list[str], whose: str, expected: bool = True):
    """`read(data[name])`; None, and a line in `problems`, when it is of the wrong shape
    (or missing where it was `expected`). `whose`: the file's noun in those lines.

    >>> problems = []
    >>> read_part({"ks": "x"}, "ks", lambda v: [int(k) for k in v], problems, "evaluation"), problems
    (None, ["the evaluation's ks could not be read"])
    """
    if data.get(name) is None:
        if expected:
            problems.append(f"the {whose} has no {name}")
        return None
    try:
        return read(data[name])
    except (TypeError, ValueError, KeyError, AttributeError):
        problems.append(f"the {whose}'s {name} could not be read")
        return None


# A field read leniently: of the wrong type (a hand-edited or newer file), it is absent.

def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def int_or_none(value) -> int | None:
    return value if is_int(value) else None


def number(value) -> float | None:
    """A finite number, else None (JSON has no NaN, but Python's json writes one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def text(value) -> str:
    return value if isinstance(value, str) else ""
