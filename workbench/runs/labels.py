"""A run's label: the preset it was started from plus the fields that differ from it
(`grpo-sort · lr 3e-4, beta 0.04`), or the name the user typed at Run. The Runs list,
the run header, Compare's legends and the window title show it. No Qt.

Which preset a run differs from: the one the window's Set-up held when Run was pressed
(a bundled preset, a saved file, a copy of a run's preset), as the window recorded it in
`RUN_DIR/workbench/label.json` (docs/run-directory.md); for a run without that record
(started in a terminal, forked), the bundled preset of the same `name`, if there is one.
Both presets are compared resolved: every field, defaults filled in, files absolute.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from workbench.runs.lineage import RUN_STAMP, strip_stamp
from workbench.runs.process import workbench_dir

LABEL_FILE = "label.json"
SEPARATOR = " · "
# Fields that name or describe a preset rather than change what it trains.
IGNORED = ("name", "description")
# Short names for fields with long ones (a dotted path, or the last part of one).
ALIASES = {"training.learning_rate": "lr", "algorithm.name": "algorithm", "model.name_or_path": "model",
           "training.max_steps": "steps"}
SHOWN = 3  # differences in a label; the rest are "+N more" (all of them in its tool tip)


# ------------------------------------------------------------------- comparing


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaf values. Lists of mappings with a unique `name` (reward
    components) are keyed by name, so runs with components in another order compare
    field by field.

    >>> flatten({"a": {"b": 1}, "rewards": [{"name": "x", "weight": 2}]})
    {'a.b': 1, 'rewards.x.weight': 2}
    """
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        if not value and prefix:
            out[prefix] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value) \
            and len({v["name"] for v in value}) == len(value):
        for item in value:
            rest = {k: v for k, v in item.items() if k != "name"}
            key = f"{prefix}.{item['name']}"
            out.update(flatten(rest, key) if rest else {key: "(on)"})
    else:
        out[prefix] = value
    return out


MISSING = "—"


def differing_fields(presets: list[dict]) -> list[tuple[str, list[Any]]]:
    """(field path, value in each preset) for every field that is not the same in all of
    them; a field one preset lacks shows as "—" there.

    >>> differing_fields([{"a": 1, "b": 2}, {"a": 1, "b": 3}])
    [('b', [2, 3])]
    """
    flat = [flatten(p or {}) for p in presets]
    keys: list[str] = []
    seen: set[str] = set()
    for f in flat:
        for k in f:
            if k not in seen:
                seen.add(k)
                keys.append(k)
    rows = []
    for key in keys:
        values = [f.get(key, MISSING) for f in flat]
        if any(v != values[0] or type(v) is not type(values[0]) and not _same_number(v, values[0])
               for v in values[1:]):
            rows.append((key, values))
    return rows


def _same_number(a: Any, b: Any) -> bool:
    """1 and 1.0 are one value (YAML writes a float field's whole value either way)."""
    numbers = (int, float)
    return isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) \
        and not isinstance(b, bool) and a == b


# ------------------------------------------------------------------- the label


def format_value(value: Any) -> str:
    """A value as a label shows it: short numbers (3e-4, 0.04, 400), on/off, names.

    >>> [format_value(v) for v in (0.0003, 0.04, 400, 1.0, 1e-6, True, None, "builtin:tiny", "/a/b/my.py", [1, 2])]
    ['3e-4', '0.04', '400', '1', '1e-6', 'on', 'none', 'builtin:tiny', 'my.py', '[1, 2]']
    """
    if value is MISSING:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == int(value) and abs(value) < 1e6:
            return str(int(value))
        if abs(value) < 1e-2 or abs(value) >= 1e6:
            mantissa, exponent = f"{value:.2e}".split("e")
            mantissa = mantissa.rstrip("0").rstrip(".")
            return f"{mantissa}e{int(exponent)}"
        return f"{value:.4g}"
    if value == "(on)":
        return "on"
    text = str(value) if not isinstance(value, (list, dict)) else json.dumps(value)
    if "/" in text and not text.startswith(("[", "{")) and ":" not in text.split("/")[0]:
        text = Path(text).name or text  # a file: its name says which
    return text if len(text) <= 28 else text[:27] + "…"


ADDED, DROPPED = "(added)", "(dropped)"


def collapse_rewards(changes: list) -> list:
    """A reward the run added or dropped as one change (`+brevity`, `-sort_position`),
    not one per field of it.

    >>> collapse_rewards([("rewards.b.weight", 1.0, MISSING), ("rewards.b.options", {}, MISSING), ("seed", 1, 0)])
    [('rewards.+b', '(added)', '—'), ('seed', 1, 0)]
    """
    out, seen = [], set()
    for path, value, was in changes:
        parts = path.split(".")
        if parts[0] == "rewards" and len(parts) > 2 and MISSING in (value, was):
            name = parts[1]
            rows = [c for c in changes if c[0].split(".")[:2] == ["rewards", name]]
            if all(c[1] is MISSING for c in rows) or all(c[2] is MISSING for c in rows):
                if name not in seen:
                    seen.add(name)
                    added = value is not MISSING
                    out.append((f"rewards.{'+' if added else '-'}{name}", ADDED if added else DROPPED, MISSING))
                continue
        out.append((path, value, was))
    return out


def short_names(paths: list[str]) -> list[str]:
    """Each field path as a label names it: its last part (`beta`), an alias (`lr`), or,
    where the last part is short or names two fields, with its parent (`lora.r`,
    `exact_match.weight`).

    >>> short_names(["training.learning_rate", "algorithm.beta", "model.lora.r"])
    ['lr', 'beta', 'lora.r']
    >>> short_names(["rewards.exact_match.weight", "algorithm.epsilon", "training.epsilon"])
    ['exact_match.weight', 'algorithm.epsilon', 'training.epsilon']
    """
    last = [ALIASES.get(p, ALIASES.get(p.rsplit(".", 1)[-1], p.rsplit(".", 1)[-1])) for p in paths]
    out = []
    for path, name in zip(paths, last):
        parts = path.split(".")
        if parts[0] == "rewards" and len(parts) > 1:  # a reward's field: which reward says as much
            out.append(".".join(parts[1:]))
            continue
        if (len(name) <= 2 and name not in ALIASES.values() or last.count(name) > 1) and len(parts) > 1:
            name = ".".join(parts[-2:])
        out.append(name)
    return out


def differences(preset: dict, origin: dict) -> list[tuple[str, Any, Any]]:
    """(field path, the run's value, the preset's value) for each field of `preset` that
    differs from `origin`'s, in the preset's order; its name and description left out.

    >>> differences({"name": "b", "training": {"learning_rate": 3e-4}},
    ...             {"name": "a", "training": {"learning_rate": 1e-3, "seed": 0}})
    [('training.learning_rate', 0.0003, 0.001)]
    """
    rows = differing_fields([preset, origin])
    # A field the run's preset does not hold is not known to differ (an old or hand-written
    # preset.yaml holds a few fields, the preset it is compared with all of them); a reward
    # the run lacks is one it dropped.
    return [(path, run, was) for path, (run, was) in rows if path.split(".")[0] not in IGNORED
            and (run is not MISSING or path.startswith("rewards.") and "rewards" in preset)]


@dataclass(frozen=True)
class RunLabel:
    """`text`: what the run is called wherever it is shown; `base`: the preset it was
    started from (or the typed name); `changes`: (field path, value, preset's value)."""

    text: str
    base: str
    changes: tuple[tuple[str, Any, Any], ...] = ()
    typed: bool = False

    @property
    def detail(self) -> str:
        """Every difference, one a line (the label's tool tip)."""
        if not self.changes:
            return ""
        return "\n".join(f"{path}: {format_value(value)} (preset: {format_value(was)})"
                         for path, value, was in self.changes)


def run_label(preset: dict | None, origin: dict | None, base: str, typed: str | None = None,
              shown: int = SHOWN) -> RunLabel:
    """The label of a run that trains `preset`, started from `origin` (the preset named
    `base`), or called `typed` by the user.

    >>> run_label({"training": {"learning_rate": 3e-4}, "algorithm": {"beta": 0.04}},
    ...           {"training": {"learning_rate": 1e-3}, "algorithm": {"beta": 0.0}}, "grpo-sort").text
    'grpo-sort · lr 3e-4, beta 0.04'
    >>> run_label({"a": 1}, {"a": 1}, "grpo-sort").text, run_label({"a": 2}, {"a": 1}, "x", typed="lr sweep").text
    ('grpo-sort', 'lr sweep')
    """
    changes = tuple(differences(preset or {}, origin)) if origin is not None and preset else ()
    if typed and typed.strip():
        return RunLabel(typed.strip(), typed.strip(), changes, typed=True)
    if not changes:
        return RunLabel(base, base)
    said = list(changes)
    if any(path == "algorithm.name" for path, _, _ in said):
        # Another algorithm: its name says it; its own settings would only crowd the label.
        said = [c for c in said if c[0] == "algorithm.name"] + [c for c in said if not c[0].startswith("algorithm.")]
    said = collapse_rewards(said)
    names = short_names([path for path, _, _ in said])
    parts = [name if value in (ADDED, DROPPED) else f"{name} {format_value(value)}"
             for name, (_, value, _) in zip(names, said)]
    more = len(parts) - shown
    text = ", ".join(parts[:shown]) + (f", +{more} more" if more > 0 else "")
    return RunLabel(f"{base}{SEPARATOR}{text}", base, changes)


def distinct(labels: list[str], folders: list[str]) -> list[str]:
    """Labels made distinct for one list or legend: a label two runs share gets its
    run's launch time (from the folder name), or the folder name itself.

    >>> distinct(["grpo-sort", "grpo-sort", "x"], ["grpo-sort-20261121-014143", "grpo-sort-20261121-020013", "x-1"])
    ['grpo-sort (01:41:43)', 'grpo-sort (02:00:13)', 'x']
    """
    out = list(labels)
    for i, label in enumerate(labels):
        if labels.count(label) > 1:
            stamp = RUN_STAMP.search(folders[i])
            when = stamp.group(0).split("-")[2] if stamp else ""
            out[i] = f"{label} ({when[:2]}:{when[2:4]}:{when[4:6]})" if len(when) == 6 else folders[i]
    if len(set(out)) < len(out):
        return [f"{label} ({folder})" if out.count(label) > 1 else label for label, folder in zip(out, folders)]
    return out


# ------------------------------------------------------------- the run folder


def write_label_record(run_dir: Path, name: str | None, base: str, origin: dict | None,
                       origin_path: str | None = None) -> None:
    """What the window knows of a run it launches: the name the user typed (None: none),
    the preset it was started from (its name, file, resolved contents)."""
    record = {"name": name or None, "preset": base, "preset_file": origin_path, "preset_fields": origin}
    path = workbench_dir(run_dir) / LABEL_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1), encoding="utf-8")


def read_label_record(run_dir: Path) -> dict:
    try:
        record = json.loads((workbench_dir(run_dir) / LABEL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def label_of(run_dir: Path, preset: dict | None) -> RunLabel:
    """The label of the run in `run_dir` training `preset` (its resolved preset)."""
    record = read_label_record(run_dir)
    name = record.get("name") if isinstance(record.get("name"), str) else None
    origin = record.get("preset_fields") if isinstance(record.get("preset_fields"), dict) else None
    base = record.get("preset") if isinstance(record.get("preset"), str) and record.get("preset") else ""
    preset_name = str((preset or {}).get("name") or "")
    if origin is None and preset_name:
        origin = bundled_preset(preset_name)
        base = base or (preset_name if origin is not None else "")
    base = base or (strip_stamp(preset_name) if preset_name else strip_stamp(Path(run_dir).name))
    return run_label(preset, origin, base, name)


def resolved(data: dict, base_dir: Path | None) -> dict | None:
    """A preset's fields as a run records them (defaults filled in, files absolute, as
    the window's launch preset); None when the preset is not valid."""
    from engine.foundation.errors import PresetError
    from engine.foundation.io import preset_to_dict
    from engine.preset.paths import absolute_preset_paths
    from engine.preset.schema import preset_from_dict

    try:
        return preset_to_dict(absolute_preset_paths(preset_from_dict(data), base_dir))
    except (PresetError, ValueError, TypeError):
        return None


def bundled_preset(name: str) -> dict | None:
    """The resolved fields of the bundled preset called `name` (presets/, presets/hub/),
    or None: what a run started from it in a terminal is compared with."""
    from workbench.settings import REPO_ROOT

    folder = REPO_ROOT / "presets"
    candidates = [folder / f"{name}.yaml", folder / "hub" / f"{name}.yaml"]
    for path in candidates:
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            continue
        found = _bundled(str(path), stamp)
        if found is not None and found.get("name") == name:
            return found
    return None


@lru_cache(maxsize=64)
def _bundled(path: str, _stamp: int) -> dict | None:
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return resolved(data, Path(path).parent) if isinstance(data, dict) else None


def folder_time(folder: str) -> str:
    """The launch time in a run folder's name, as `2026-11-21 01:41`; "" without one.

    >>> folder_time("grpo-sort-20261121-014143"), folder_time("mine")
    ('2026-11-21 01:41', '')
    """
    stamp = RUN_STAMP.search(folder)
    if not stamp:
        return ""
    day, clock = stamp.group(0).split("-")[1:3]
    return f"{day[:4]}-{day[4:6]}-{day[6:]} {clock[:2]}:{clock[2:4]}"


def shown_labels(runs: list) -> list[str]:
    """The labels of runs shown together (a comparison's legend), made distinct; each run
    is a RunData (its `label` and folder `name`)."""
    return distinct([run.label.text for run in runs], [run.name for run in runs])
