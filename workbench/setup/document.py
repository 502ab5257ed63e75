"""The preset being edited: a plain mapping, its file, and whether it has unsaved
changes. No Qt: the set-up panel is a view of this model.

The mapping, not a validated `Preset`, is the state: a half-typed or invalid value has
to live somewhere while the user fixes it, and a preset file with problems must open
(so the problems can be shown next to their fields) rather than be refused.
"""

from __future__ import annotations

import copy
import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from engine.preset.schema import Preset, preset_from_dict
from engine.data.config import without_default_task
from engine.foundation.errors import PresetError
from engine.foundation.io import preset_to_yaml, read_preset_dict
from workbench.setup import schema
from workbench.setup.switching import COMPLETION, fitted_default, same_value, switched_section
from workbench.signals import Signal

_PROBLEM = re.compile(r"^(\S+): (.*)$", re.S)
# A preset-wide check's message that opens with the entry it is about and its name:
# "rewards.2 (sort_steps) scores each step ..." (engine/preset/schema.py Preset._combinations).
_ABOUT_ENTRY = re.compile(r"^([a-z_]+(?:\.\w+)+) \(")


def split_problem(line: str) -> tuple[str, str]:
    """A PresetError line `field.path: message` -> (path, message); a line that opens
    with a field path and a parenthesis is about that field, and keeps its words; a line
    that names no field -> ("", line).

    >>> split_problem("training.batch_size: must be >= 1")
    ('training.batch_size', 'must be >= 1')
    >>> split_problem("rewards.2 (sort_steps) scores each step")
    ('rewards.2', 'rewards.2 (sort_steps) scores each step')
    >>> split_problem("the top level must be a mapping")
    ('', 'the top level must be a mapping')
    """
    match = _PROBLEM.match(line)
    about = _ABOUT_ENTRY.match(line)
    if about and not match:
        return about.group(1), line
    if not match:
        return "", line
    path = match.group(1)
    # The engine names the discriminator tag in some locations (algorithm.ppo.beta);
    # the form knows the field as algorithm.beta.
    parts = path.split(".")
    if len(parts) > 2 and parts[0] == "algorithm" and parts[1] in schema.algorithm_models():
        path = ".".join([parts[0], *parts[2:]])
    return path, match.group(2)


def get_path(data: Any, path: str, default: Any = None) -> Any:
    """`get_path({"a": {"b": [5]}}, "a.b.0")` -> 5; `default` when absent."""
    node = data
    for part in path.split(".") if path else []:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return default
    return node


def set_path(data: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        else:
            if not isinstance(node.get(part), (dict, list)):
                node[part] = {}
            node = node[part]
    if isinstance(node, list):
        node[int(parts[-1])] = value
    else:
        node[parts[-1]] = value


class PresetDocument:
    """The preset in the set-up panel.

    Signals: `changed(path)` after one field is set (path "" when several changed),
    `replaced()` after New / Open, `saved(path)`, `dirty_changed(bool)`.
    """

    def __init__(self, data: dict | None = None, path: str | Path | None = None):
        self.changed = Signal()
        self.replaced = Signal()
        self.saved = Signal()
        self.dirty_changed = Signal()
        self.data: dict = copy.deepcopy(data) if data is not None else new_preset_dict()
        self.path: Path | None = Path(path) if path else None
        self._clean = copy.deepcopy(self.data)
        # Settings of algorithms the user switched away from, so switching back restores them.
        self._algorithm_stash: dict[str, dict] = {}
        # What Reset and the changed marker compare with: the preset as opened or saved, and
        # the defaults a switch gave each algorithm the preset did not choose.
        self._baseline = copy.deepcopy(self.data)
        self._switch_defaults: dict[str, dict] = {}
        self._was_dirty = False
        # Fields the file did not set, with the default they were filled with (see was_set).
        self._filled: dict[str, Any] = {} if data is not None else dict(_leaves(self.data))

    # ------------------------------------------------------------------ state

    @property
    def dirty(self) -> bool:
        return self.data != self._clean

    @property
    def title(self) -> str:
        return self.path.name if self.path else "untitled preset"

    @property
    def base_dir(self) -> Path | None:
        """Folder that relative paths in the preset (data.path) are relative to."""
        return self.path.resolve().parent if self.path else None

    def get(self, path: str, default: Any = None) -> Any:
        return get_path(self.data, path, default)

    def set(self, path: str, value: Any) -> None:
        if get_path(self.data, path, _MISSING) == value and type(get_path(self.data, path)) is type(value):
            return
        set_path(self.data, path, value)
        self._announce(path)

    def update(self, changes: dict[str, Any]) -> None:
        """Set several fields at once (one `changed("")`)."""
        for path, value in changes.items():
            set_path(self.data, path, value)
        self._announce("")

    def _announce(self, path: str) -> None:
        self.changed.emit(path)
        if self.dirty != self._was_dirty:
            self._was_dirty = self.dirty
            self.dirty_changed.emit(self._was_dirty)

    # ------------------------------------------------------------- algorithm

    @property
    def algorithm(self) -> str:
        return str(self.get(f"algorithm.{schema.algorithm_tag()}", ""))

    def switch_algorithm(self, name: str, room: int | None = None) -> None:
        """Choose another algorithm: its hyperparameters come back as the user left them
        in this session; else its defaults, with the values of the algorithm left that it
        also has and accepts (switched_section), a default completion length cut to the
        `room` the prompts leave in the model's context."""
        if name == self.algorithm:
            return
        current = copy.deepcopy(self.data.get("algorithm", {}))
        if self.algorithm:
            self._algorithm_stash[self.algorithm] = current
        if name in schema.algorithm_models():
            self._switch_defaults[name] = switched_section(name, {}, room)
        self.data["algorithm"] = self._algorithm_stash.pop(name, None) or switched_section(name, current, room)
        self._announce("algorithm")

    def fit_completion(self, room: int | None) -> None:
        """The algorithm's default completion length cut to `room` (switching.fitted_default)."""
        fitted = fitted_default(self.algorithm, self.get(f"algorithm.{COMPLETION}"), room)
        if fitted is not None:
            self._switch_defaults.get(self.algorithm, {})[COMPLETION] = fitted  # Reset's value too
            self.set(f"algorithm.{COMPLETION}", fitted)

    # ------------------------------------------------------- the preset's values

    def preset_value(self, path: str, default: Any = None) -> Any:
        """What the preset as opened (or last saved) holds at `path`, for the changed marker and
        Reset; for an algorithm it did not choose, the defaults the switch to it gave."""
        chosen = get_path(self._baseline, f"algorithm.{schema.algorithm_tag()}")
        if path.startswith("algorithm.") and self.algorithm != chosen:
            fitted = self._switch_defaults.get(self.algorithm)
            if fitted is None and self.algorithm in schema.algorithm_models():
                fitted = schema.algorithm_defaults(self.algorithm)
            return get_path({"algorithm": fitted or {}}, path, default)
        return get_path(self._baseline, path, default)

    def changed_from_preset(self, path: str) -> bool:
        """Whether the field at `path` holds another value than the preset's (1 and 1.0 are one value)."""
        return not same_value(self.get(path, _MISSING), self.preset_value(path, _MISSING))

    def reset(self, path: str) -> None:
        """Put the preset's value back at `path`."""
        value = self.preset_value(path, _MISSING)
        if value is not _MISSING:
            self.set(path, copy.deepcopy(value))

    # ------------------------------------------------------------ validation

    def validate(self) -> tuple[Preset | None, list[tuple[str, str]]]:
        """(the preset, []) when valid, else (None, [(field path, message), ...]) with the
        engine's own messages, cross-field ones included (see cross_field_problems)."""
        try:
            return preset_from_dict(copy.deepcopy(self.data), self.title), []
        except PresetError as exc:
            problems = [split_problem(line) for line in exc.problems]
        return None, problems + cross_field_problems(self.data, problems)

    # ------------------------------------------------------------ unknown keys

    def unknown_keys(self) -> list["UnknownKey"]:
        return unknown_keys(self.data)

    def was_set(self, path: str) -> bool:
        """Whether a field holds a value of its own: set in the file that was opened, or
        changed since (a field the file left out holds the default it was filled with)."""
        value = get_path(self.data, path, _MISSING)
        if isinstance(value, dict) and value:  # a section: whether any of its fields is
            return any(self.was_set(f"{path}.{inner}") for inner, _ in _leaves(value))
        if path not in self._filled:
            return value is not _MISSING
        return value != self._filled[path]

    def remove_key(self, path: str) -> None:
        """Drop a key (an unknown one, say) from the preset."""
        parent, _, key = path.rpartition(".")
        node = get_path(self.data, parent) if parent else self.data
        if isinstance(node, dict) and key in node:
            del node[key]
            self._announce(parent)

    def rename_key(self, path: str, new_name: str) -> None:
        """Move a key's value to `new_name` in the same section (replacing what is there;
        ask first when `was_set` says the field holds a value of its own). Missing
        fields of a moved section are filled with their defaults."""
        parent, _, key = path.rpartition(".")
        node = get_path(self.data, parent) if parent else self.data
        if not isinstance(node, dict) or key not in node:
            return
        target = f"{parent}.{new_name}" if parent else new_name
        node[new_name] = node.pop(key)
        self._filled = {p: v for p, v in self._filled.items() if not (p == target or p.startswith(target + "."))}
        self.data = with_defaults(self.data)
        self._announce(parent)

    # -------------------------------------------------------------- files

    def new(self, data: dict | None = None, clean: bool | None = None) -> None:
        """An untitled preset: the defaults, or `data` (a bundled preset opened as a
        template, clean; a run's preset to vary, unsaved)."""
        self._replace(new_preset_dict() if data is None else data, None,
                      clean=data is None if clean is None else clean)

    def open(self, path: str | Path) -> None:
        """Load a preset file as it is, problems and all (raises PresetError only when the
        file cannot be read or is not YAML)."""
        data = read_preset_dict(path)
        if not isinstance(data, dict):
            raise PresetError([f"the top level must be a mapping of sections, got {type(data).__name__}"], str(path))
        self._replace(data, Path(path), clean=True)

    def _replace(self, data: dict, path: Path | None, clean: bool) -> None:
        self.data = with_defaults(data)
        given = {p for p, _ in _leaves(data)}
        self._filled = {p: v for p, v in _leaves(self.data) if p not in given}
        self.path = path
        self._algorithm_stash.clear()
        self._baseline, self._switch_defaults = copy.deepcopy(self.data), {}
        self._clean = copy.deepcopy(self.data) if clean else {}
        self._was_dirty = self.dirty
        self.replaced.emit()
        self.dirty_changed.emit(self._was_dirty)

    def to_yaml(self) -> str:
        """Valid presets are written resolved (every field, in schema order, like the
        bundled presets); an invalid one is written as it stands so nothing typed is lost."""
        preset, _ = self.validate()
        if preset is not None:
            return preset_to_yaml(preset)
        return yaml.safe_dump(self.data, sort_keys=False, allow_unicode=True)

    def save(self, path: str | Path | None = None) -> Path:
        path = Path(path) if path else self.path
        if path is None:
            raise ValueError("no file to save to; use Save As")
        text = self.to_yaml()
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        self.path = path
        preset, _ = self.validate()
        if preset is not None:
            # What was written, exactly (numeric text such as "1e-4" is now a number), so
            # the window and the file agree.
            self.data = preset.model_dump(mode="json")
        self._clean = copy.deepcopy(self.data)
        self._baseline, self._switch_defaults = copy.deepcopy(self.data), {}
        self._was_dirty = False
        self.saved.emit(path)
        self.dirty_changed.emit(False)
        return path


_MISSING = object()


# The schema's defaults suit a hub model (256 tokens of completion), but the default model
# is the built-in one, whose context is 128 positions: a new preset at the schema's
# defaults would be refused at once. What New changes so that it runs as it is: the
# default task's answers are a dozen characters; 32 leaves room and keeps CPU steps short.
NEW_PRESET_CHANGES = {"algorithm.max_completion_length": 32}


def new_preset_dict() -> dict:
    """What File > New (and a window's first document) starts from: every field at its
    schema default but those of NEW_PRESET_CHANGES, so the preset is runnable as it is.

    >>> new_preset_dict()["algorithm"]["max_completion_length"]
    32
    """
    data = schema.default_preset_dict()
    for path, value in NEW_PRESET_CHANGES.items():
        set_path(data, path, value)
    return data


def with_defaults(data: dict) -> dict:
    """A copy of a preset mapping with every missing field at its default, so the form
    and the file show the same thing (the engine would fill the same defaults). Values
    that are present, valid or not, are kept as they are.

    >>> with_defaults({"training": {"max_steps": 5}})["training"]["batch_size"]
    64
    """
    data = copy.deepcopy(data)
    if "data" in data:  # a prompt file or data set given means no built-in task, as the engine reads it
        data["data"] = without_default_task(data["data"])
    defaults = schema.default_preset_dict()
    algo = data.get("algorithm")
    if isinstance(algo, dict) and algo.get(schema.algorithm_tag()) in schema.algorithm_models():
        defaults["algorithm"] = schema.algorithm_defaults(algo[schema.algorithm_tag()])
    for spec in schema.section_fields(Preset):
        if spec.kind == schema.LIST and isinstance(data.get(spec.name), list):
            item_defaults = schema.item_defaults(spec.model)
            data[spec.name] = [{**item_defaults, **item} if isinstance(item, dict) else item
                               for item in data[spec.name]]

    def fill(target: dict, source: dict) -> None:
        for key, value in source.items():
            if key not in target:
                target[key] = copy.deepcopy(value)
            elif isinstance(target[key], dict) and isinstance(value, dict) and value:
                fill(target[key], value)

    fill(data, defaults)
    return data


def _leaves(data: Any, prefix: str = ""):
    """(dotted path, value) of every value in nested mappings (lists are values)."""
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and value:
                yield from _leaves(value, path + ".")
            elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
                for index, item in enumerate(value):  # reward components
                    yield from _leaves(item, f"{path}.{index}.")
            else:
                yield path, value


# ----------------------------------------------------------------- unknown keys


@dataclass(frozen=True)
class UnknownKey:
    """A key the schema does not have, in `section` ("" for the top level, `model.lora`).
    `suggestion` is the known key difflib finds closest (None when none is close)."""

    section: str
    key: str
    value: Any
    suggestion: str | None

    @property
    def path(self) -> str:
        return f"{self.section}.{self.key}" if self.section else self.key


def unknown_keys(data: Any) -> list[UnknownKey]:
    """Keys of a preset mapping that its sections do not have, at every level the form
    shows as a section (the top level, model, model.lora, algorithm, data, training, and
    each reward component: rewards.1).

    >>> [(k.path, k.suggestion) for k in unknown_keys({"training": {"learnin_rate": 1}, "notes": "x"})]
    [('training.learnin_rate', 'learning_rate'), ('notes', None)]
    """
    found: list[UnknownKey] = []

    def walk(model, node: Any, section: str) -> None:
        if not isinstance(node, dict):
            return
        known = list(model.model_fields)
        for key, value in node.items():
            if key not in model.model_fields:
                near = difflib.get_close_matches(str(key), known, n=1)
                found.append(UnknownKey(section, str(key), value, near[0] if near else None))
                continue
            path = f"{section}.{key}" if section else key
            if key == "algorithm" and not section:
                algorithm = value.get(schema.algorithm_tag()) if isinstance(value, dict) else None
                if algorithm in schema.algorithm_models():
                    walk(schema.algorithm_models()[algorithm], value, path)
                continue
            kind, inner = _section_model(model, key)
            if kind == schema.SECTION:
                walk(inner, value, path)
            elif kind == schema.LIST and isinstance(value, list):
                for index, item in enumerate(value):  # rewards.1
                    walk(inner, item, f"{path}.{index}")

    walk(Preset, data, "")
    return found


@lru_cache(maxsize=None)
def _section_model(model, key: str) -> tuple[str | None, Any]:
    """(SECTION, its model) for a section (model.lora), (LIST, the item model) for a
    list of sections (rewards), else (None, None)."""
    try:
        spec = schema.field_spec(model, key)
    except TypeError:
        return None, None
    return (spec.kind, spec.model) if spec.kind in (schema.SECTION, schema.LIST) and spec.model else (None, None)


# ---------------------------------------------------------- cross-field problems

_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.\w+)+")


def _delete_path(data: dict, path: str) -> bool:
    """Remove what `path` names, or the deepest mapping key along it that exists
    (model.lora.target_modules.literal['auto'] removes target_modules), so that the
    schema's default applies there. False when nothing could be removed (a list item
    cannot be left out without renumbering the rest)."""
    node, holder, key = data, None, None
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node, holder, key = node[part], node, part
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node, holder, key = node[int(part)], node, int(part)
        else:
            break
    if isinstance(holder, dict):
        del holder[key]
        return True
    return False


def _involves(problem: tuple[str, str], replaced: set[str]) -> bool:
    """Whether a problem is about (or names) a field that was replaced by its default."""
    names = {problem[0], *_DOTTED.findall(problem[1])}
    return any(n == r or n.startswith(r + ".") or r.startswith(n + ".") for n in names if n for r in replaced)


def cross_field_problems(data: dict, problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Problems between fields (training.batch_size not divisible by
    algorithm.num_generations, a section's own checks) that the schema reports only once
    every field is valid: found by validating again with each invalid field left at its
    default, keeping only problems that do not involve a field so replaced (so a default
    standing in for a bad value never produces a problem of its own).

    >>> data = {"algorithm": {"name": "grpo", "temperature": -1, "num_generations": 4}, "training": {"batch_size": 10}}
    >>> cross_field_problems(data, [("algorithm.temperature", "Input should be greater than 0")])[0][0]
    'training.batch_size'
    >>> cross_field_problems({"training": {"batch_size": "abc"}, "algorithm": {"name": "grpo", "num_generations": 5}},
    ...                      [("training.batch_size", "Input should be a valid integer")])
    []
    """
    trial, replaced, seen, found = copy.deepcopy(data), set(), set(problems), []
    current = problems
    for _ in range(6):
        paths = [path for path, _ in current if path and path not in replaced]
        if not paths or not isinstance(trial, dict):
            break
        for path in paths:
            replaced.add(path)
            _delete_path(trial, path)
        try:
            preset_from_dict(trial)
            break
        except PresetError as exc:
            current = [split_problem(line) for line in exc.problems]
        for problem in current:
            if problem not in seen and not _involves(problem, replaced):
                seen.add(problem)
                found.append(problem)
    return found
