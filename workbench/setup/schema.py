"""What the set-up form is generated from: the preset schema (engine.preset.schema), read
through pydantic's field information into plain `FieldSpec`s.

Nothing here knows about Qt. A new field in the engine's schema shows up in the form
without a change here, and a new algorithm added to the discriminated union
`Preset.algorithm` shows up in the algorithm chooser with its own hyperparameters. A field
that names a registered variant (marked `RegistryChoice`: loss_type, advantage_estimator,
data.task, ...) is a CHOICE whose names and help are read from its registry when the form
is built, so a variant registered at run time is offered with no change here.
"""

from __future__ import annotations

import html
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from engine.preset.schema import Preset
from engine.foundation.registry import RegistryChoice

# Field kinds the form knows how to edit.
INT, FLOAT, BOOL, CHOICE, TEXT, NAMES, MAPPING, SECTION, LIST = (
    "int", "float", "bool", "choice", "text", "names", "mapping", "section", "list",
)


@dataclass(frozen=True)
class FieldSpec:
    """One preset field as the form sees it.

    `path` is the dotted path in the preset (`training.batch_size`); `kind` one of the
    constants above; `choices` the allowed values of a CHOICE (or the literal words a
    NAMES field accepts besides a list, e.g. `auto`); `nullable` whether null is allowed;
    `choice_help` (name, one-line help) of a registry's choices; `free_text`: a CHOICE that
    also takes a typed value (a registry that accepts `FILE.py:FUNCTION`).
    """

    path: str
    name: str
    kind: str
    description: str = ""
    default: Any = None
    nullable: bool = False
    choices: tuple = ()
    bounds: dict = field(default_factory=dict)  # ge / gt / le / lt / min_length
    model: type[BaseModel] | None = None  # for SECTION and LIST: the item model
    choice_help: tuple = ()
    free_text: bool = False

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")

    def range_text(self) -> str:
        """`>= 1`, `> 0 and < 1`, ... for tooltips; empty when unbounded."""
        words = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
        parts = [f"{words[k]} {v}" for k, v in self.bounds.items() if k in words]
        return " and ".join(parts)

    def tooltip(self) -> str:
        lines = [f"<b>{self.path}</b>", self.description or "(no description in the schema)"]
        facts = []
        if self.kind not in (SECTION, LIST, MAPPING):
            facts.append(f"default: {format_value(self.default)}")
        if self.range_text():
            facts.append(f"allowed: {self.range_text()}")
        if self.choices and self.kind == CHOICE:
            facts.append("one of: " + ", ".join(format_value(c) for c in self.choices)
                         + (", or FILE.py:FUNCTION" if self.free_text else ""))
        if self.nullable:
            facts.append("may be left empty (null)")
        lines += [f"<b>{html.escape(name)}</b>: {html.escape(text)}" for name, text in self.choice_help if text]
        if facts:
            lines.append("<i>" + "; ".join(facts) + "</i>")
        return "<br>".join(lines)


def format_value(value: Any) -> str:
    """How a value is written in the form and tooltips (the YAML spelling).

    >>> format_value(None), format_value(True), format_value(0.002), format_value(["a", "b"])
    ('null', 'true', '0.002', 'a, b')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def _strip_annotated(ann: Any) -> tuple[Any, list]:
    metadata: list = []
    while typing.get_origin(ann) is typing.Annotated:
        ann, *extra = typing.get_args(ann)
        metadata.extend(extra)
    return ann, metadata


def _bounds(metadata: list) -> dict:
    found = {}
    for item in metadata:
        for key in ("ge", "gt", "le", "lt", "min_length"):
            value = getattr(item, key, None)
            if value is not None and isinstance(item, (annotated_types.BaseMetadata,)):
                found[key] = value
    return found


def _is_model(ann: Any) -> bool:
    return isinstance(ann, type) and issubclass(ann, BaseModel)


def _default(info) -> Any:
    if info.default_factory is not None:
        value = info.default_factory()
    elif info.default is PydanticUndefined:
        return None
    else:
        value = info.default
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def field_spec(model: type[BaseModel], name: str, prefix: str = "") -> FieldSpec:
    """The FieldSpec of `model.name`, classified by its type annotation."""
    info = model.model_fields[name]
    path = f"{prefix}{name}"
    ann, metadata = _strip_annotated(info.annotation)
    metadata = list(info.metadata) + metadata
    nullable = False
    args = typing.get_args(ann)
    if typing.get_origin(ann) is Union and type(None) in args:
        nullable = True
        rest = [a for a in args if a is not type(None)]
        ann = rest[0] if len(rest) == 1 else Union[tuple(rest)]
        ann, more = _strip_annotated(ann)
        metadata += more
    common = dict(path=path, name=name, description=info.description or "", default=_default(info),
                  nullable=nullable, bounds=_bounds(metadata))
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    marker = next((m for m in metadata if isinstance(m, RegistryChoice)), None)
    if marker is not None:
        return registry_choice_spec(marker.registry, common)
    if ann is bool:
        return FieldSpec(kind=BOOL, **common)
    if ann is int:
        return FieldSpec(kind=INT, **common)
    if ann is float:
        return FieldSpec(kind=FLOAT, **common)
    if ann is str:
        return FieldSpec(kind=TEXT, **common)
    if origin is Literal:
        return FieldSpec(kind=CHOICE, choices=args, **common)
    if origin is dict:
        return FieldSpec(kind=MAPPING, **common)
    if _is_model(ann):
        return FieldSpec(kind=SECTION, model=ann, **common)
    if origin is list:
        item = args[0] if args else Any
        if _is_model(item):
            return FieldSpec(kind=LIST, model=item, **common)
        return FieldSpec(kind=NAMES, **common)
    if origin is Union and all(_is_model(_strip_annotated(a)[0]) for a in args):
        # The algorithm: one of several sections, chosen by its discriminator (see
        # algorithm_models); the first member stands for the default.
        return FieldSpec(kind=SECTION, model=_strip_annotated(args[0])[0], **common)
    if origin is Union:
        # e.g. Literal["auto"] | list[str]: a list of names, or one of a few words.
        words = tuple(w for a in args if typing.get_origin(a) is Literal for w in typing.get_args(a))
        members = [_strip_annotated(a) for a in args if typing.get_origin(a) is not Literal]
        if any(typing.get_origin(a) is list for a in args):
            return FieldSpec(kind=NAMES, choices=words, **common)
        if [m for m, _ in members] == [bool]:  # bool | Literal["auto"]: one of the words, true or false
            return FieldSpec(kind=CHOICE, choices=(*words, True, False), **common)
        if [m for m, _ in members] == [int]:  # int | Literal["auto"]: a number, or one of the words
            common["bounds"] = _bounds(metadata + members[0][1])
            return FieldSpec(kind=INT, choices=words, **common)
    raise TypeError(f"the form cannot edit {path} of type {info.annotation!r}; add a kind to workbench/setup/schema.py")


def registry_choice_spec(registry, common: dict) -> FieldSpec:
    """A CHOICE of a registry's names as registered now, each with its help; free text
    too where the registry takes a user's `FILE.py:FUNCTION`.

    >>> spec = field_spec(Preset, "data")
    >>> task = field_spec(spec.model, "task", "data.")
    >>> task.kind, task.choices[:2], task.choice_help[0][0], task.free_text
    ('choice', ('sort', 'arithmetic'), 'sort', False)
    """
    helps = tuple((entry.name, entry.help) for entry in registry.entries())
    if registry.files:
        helps += (("FILE.py:FUNCTION", registry.file_help),)
    return FieldSpec(kind=CHOICE, choices=registry.names(), choice_help=helps, free_text=registry.files, **common)


def section_fields(model: type[BaseModel], prefix: str = "", skip: tuple[str, ...] = ()) -> list[FieldSpec]:
    """The direct fields of a section, in schema order."""
    return [field_spec(model, name, prefix) for name in model.model_fields if name not in skip]


# ----------------------------------------------------------------------- algorithms


def algorithm_models() -> dict[str, type[BaseModel]]:
    """Algorithm name -> its config model, read from the discriminated union
    `Preset.algorithm` (so a new algorithm in the engine appears here by itself)."""
    info = Preset.model_fields["algorithm"]
    tag = info.discriminator or "name"
    ann, _ = _strip_annotated(info.annotation)
    members = typing.get_args(ann) if typing.get_origin(ann) is Union else (ann,)
    found = {}
    for member in members:
        member, _ = _strip_annotated(member)
        literal = member.model_fields[tag].annotation
        for name in typing.get_args(literal):
            found[name] = member
    return found


def algorithm_tag() -> str:
    return Preset.model_fields["algorithm"].discriminator or "name"


def algorithm_fields(name: str) -> list[FieldSpec]:
    """Hyperparameters of one algorithm (its discriminator field left out: the chooser sets it)."""
    return section_fields(algorithm_models()[name], "algorithm.", skip=(algorithm_tag(),))


def algorithm_defaults(name: str) -> dict:
    return algorithm_models()[name]().model_dump(mode="json")


def algorithm_summary(name: str) -> str:
    """First line of the algorithm's docstring, for the chooser's tooltip."""
    doc = (algorithm_models()[name].__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split())


def item_defaults(model: type[BaseModel]) -> dict:
    """Defaults of the optional fields of a list item (a reward component). A field
    whose default is null is left out, as the engine leaves it out of a saved preset
    (a reward's `label`).

    >>> item_defaults(field_spec(Preset, "rewards").model)
    {'weight': 1.0, 'options': {}}
    """
    defaults = {name: _default(info) for name, info in model.model_fields.items() if not info.is_required()}
    return {name: value for name, value in defaults.items() if value is not None}


def default_preset_dict() -> dict:
    """Every field at its default: what File > New starts from."""
    return Preset().model_dump(mode="json")


def leaf_specs(data: dict) -> list[FieldSpec]:
    """Every scalar field of a preset (the current algorithm's included), depth first.
    The form has one editor for each, besides the rewards list and option mappings."""
    out: list[FieldSpec] = []

    def walk(model, prefix, skip=()):
        for spec in section_fields(model, prefix, skip):
            if spec.kind == SECTION:
                walk(spec.model, spec.path + ".")
            elif spec.kind != LIST:
                out.append(spec)

    for spec in section_fields(Preset):
        if spec.name == "algorithm":
            algo = (data.get("algorithm") or {}).get(algorithm_tag())
            if algo in algorithm_models():
                out.extend(algorithm_fields(algo))
        elif spec.kind == SECTION:
            walk(spec.model, spec.path + ".")
        elif spec.kind != LIST:
            out.append(spec)
    return out
