"""Reading, overriding and writing preset files, short of validating them: the file's
YAML under the size, depth and tag guards, `--set dotted.key=value` overrides, and
atomic YAML writing. Validation is engine.preset.schema's (`preset_from_dict`, `load_preset`).

Torch-free, and imports nothing of the schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from engine.foundation.errors import PresetError
from engine.foundation.limits import MAX_FILE_BYTES, LimitError, decode_preset_bytes, one_line, parse_yaml, short_repr

if TYPE_CHECKING:
    from engine.preset.schema import Preset


def read_preset_dict(path: str | Path) -> Any:
    """The YAML data of a preset file, unvalidated ({} for an empty file). Anything that
    is not a readable, plain-YAML file of sane size and depth is a one-line PresetError
    naming the file: no traceback for binary junk, a YAML bomb or a Python tag."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)  # no more: a huge file (or /dev/zero) is refused unread
    except (OSError, ValueError) as exc:
        raise PresetError([f"cannot read file: {one_line(getattr(exc, 'strerror', None) or exc)}"], str(path)) from None
    try:
        data = parse_yaml(decode_preset_bytes(raw))
    except LimitError as exc:
        raise PresetError([str(exc)], str(path)) from None
    return {} if data is None else data


def apply_overrides(data: dict, overrides, source: str = "--set") -> dict:
    """Return a copy of `data` with each `a.b.c=value` applied; values parse as YAML.

    input:  {"training": {"seed": 0}}, ["training.seed=3", "rewards.0.weight=0.5"]
    output: {"training": {"seed": 3}, "rewards": [{"weight": 0.5}]}  (list items must exist)
    """
    import copy

    data = copy.deepcopy(data)
    problems = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            problems.append(f"--set {item!r}: expected dotted.key=value")
            continue
        try:
            value = parse_yaml(raw) if raw.strip() else ""
        except LimitError as exc:
            if "not valid YAML" not in str(exc):
                # Too deep, an alias bomb, a Python tag: refused as in a file.
                problems.append(f"--set {short_repr(item, 80)}: {exc}")
                continue
            value = raw  # not YAML syntax (`a: b`): the text as written
        parts = key.strip().split(".")
        node = data
        try:
            for part in parts[:-1]:
                if isinstance(node, list):
                    node = node[int(part)]
                elif isinstance(node, dict):
                    node = node.setdefault(part, {})
                else:  # inside a number or a text: `name.x.y=1`
                    raise TypeError
            last = parts[-1]
            if isinstance(node, list):
                node[int(last)] = value
            elif isinstance(node, dict):
                node[last] = value
            else:
                raise TypeError
        except (ValueError, IndexError, TypeError):
            problems.append(f"--set {item!r}: {key} does not name a field that can be set")
    if problems:
        raise PresetError(problems, source)
    return data


def preset_to_dict(preset: Preset) -> dict:
    return preset.model_dump(mode="json")


def preset_to_yaml(preset: Preset, leave_out: tuple[str, ...] = ()) -> str:
    """The preset as YAML, without the fields `leave_out` names (dotted: "training.max_steps")."""
    data = preset_to_dict(preset)
    for dotted in leave_out:
        section, _, field = dotted.rpartition(".")
        node = data.get(section) if section else data
        if isinstance(node, dict):
            node.pop(field, None)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def save_preset(preset: Preset, path: str | Path, leave_out: tuple[str, ...] = ()) -> None:
    """Write the preset as YAML, atomically (write a temp file, then rename); `leave_out`:
    fields not written, so that the file read back leaves them unset (a run's preset saved
    before its set-up fits a default: engine/algorithms/context_fit.py)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(preset_to_yaml(preset, leave_out), encoding="utf-8")
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
        raise
