"""The preset being edited: a plain mapping, its file, and whether it has unsaved
changes. No Qt: the set-up panel is a view of this model.

The mapping, not a validated `Preset`, is the state: a half-typed or invalid value has
to live somewhere while the user fixes it, and a preset file with problems must open
(so the problems can be shown next to their fields) rather than be refused.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from engine.preset import Preset, PresetError, preset_from_dict, preset_to_yaml, read_preset_dict
from workbench import schema
from workbench.signals import Signal

_PROBLEM = re.compile(r"^(\S+): (.*)$", re.S)


def split_problem(line: str) -> tuple[str, str]:
    """A PresetError line `field.path: message` -> (path, message); a line that names no
    field -> ("", line).

    >>> split_problem("training.batch_size: must be >= 1")
    ('training.batch_size', 'must be >= 1')
    >>> split_problem("the top level must be a mapping")
    ('', 'the top level must be a mapping')
    """
    match = _PROBLEM.match(line)
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
        self.data: dict = copy.deepcopy(data) if data is not None else schema.default_preset_dict()
        self.path: Path | None = Path(path) if path else None
        self._clean = copy.deepcopy(self.data)
        # Settings of algorithms the user switched away from, so switching back restores them.
        self._algorithm_stash: dict[str, dict] = {}
        self._was_dirty = False

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

    def switch_algorithm(self, name: str) -> None:
        """Choose another algorithm: its hyperparameters come back as the user left them
        in this session, or at their defaults."""
        if name == self.algorithm:
            return
        if self.algorithm:
            self._algorithm_stash[self.algorithm] = copy.deepcopy(self.data.get("algorithm", {}))
        self.data["algorithm"] = self._algorithm_stash.pop(name, None) or schema.algorithm_defaults(name)
        self._announce("algorithm")

    # ------------------------------------------------------------ validation

    def validate(self) -> tuple[Preset | None, list[tuple[str, str]]]:
        """(the preset, []) when valid, else (None, [(field path, message), ...]) with the
        engine's own messages."""
        try:
            return preset_from_dict(copy.deepcopy(self.data), self.title), []
        except PresetError as exc:
            return None, [split_problem(line) for line in exc.problems]

    # -------------------------------------------------------------- files

    def new(self, data: dict | None = None, clean: bool | None = None) -> None:
        """An untitled preset: the defaults, or `data` (a bundled preset opened as a
        template, clean; a run's preset to vary, unsaved)."""
        self._replace(schema.default_preset_dict() if data is None else data, None,
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
        self.path = path
        self._algorithm_stash.clear()
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
        self._was_dirty = False
        self.saved.emit(path)
        self.dirty_changed.emit(False)
        return path


_MISSING = object()


def with_defaults(data: dict) -> dict:
    """A copy of a preset mapping with every missing field at its default, so the form
    and the file show the same thing (the engine would fill the same defaults). Values
    that are present, valid or not, are kept as they are.

    >>> with_defaults({"training": {"max_steps": 5}})["training"]["batch_size"]
    64
    """
    data = copy.deepcopy(data)
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
