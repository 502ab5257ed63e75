"""Why a preset was refused, in words: `PresetError` and the formatting of pydantic's
validation errors into lines that name the field path, the bad value and what is allowed.

Torch-free and schema-agnostic: the schema (engine.preset.schema) passes its root model and its
algorithm configs in, so this module imports nothing of it.
"""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from engine.foundation.limits import path_text, range_text, short_repr

class PresetError(ValueError):
    """A preset that cannot be used; `str()` is a readable list of problems."""

    def __init__(self, problems: list[str], source: str = "preset"):
        self.problems = problems
        self.source = source
        super().__init__(f"{source} is invalid:\n" + "\n".join(f"  - {p}" for p in problems))


def _field_at(raw_loc: tuple, root: type[BaseModel], models: dict) -> tuple[type[BaseModel] | None, Any]:
    """The section holding the field at pydantic's `raw_loc` (with the algorithm's tag,
    so a DPO preset's fields are DPO's), and the field's FieldInfo (None if unknown)."""
    cls, info = root, None
    for i, part in enumerate(raw_loc):
        if isinstance(part, int):
            continue
        if i == 1 and raw_loc[0] == "algorithm" and part in models:
            cls = models[part]
            continue
        if i == len(raw_loc) - 1 or cls is None:
            return cls, cls.model_fields.get(part) if cls is not None else None
        info = cls.model_fields.get(part)
        cls = _first_model(info.annotation) if info is not None else None
    return cls, None


def _allowed_keys(raw_loc: tuple, root: type[BaseModel], models: dict) -> list[str]:
    cls, _ = _field_at(raw_loc, root, models)
    return list(cls.model_fields) if cls is not None else []


def _first_model(ann) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in typing.get_args(ann):
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def _allowed_range(raw_loc: tuple, root: type[BaseModel], models: dict) -> str:
    """The bounds of the number field at `raw_loc`, as `0 < value <= 100`; "" when the
    field has none or is not found."""
    _, info = _field_at(raw_loc, root, models)
    return range_text(info.metadata) if info is not None else ""


_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"}


def format_errors(exc: ValidationError, root: type[BaseModel], algorithms: dict[str, type[BaseModel]]) -> list[str]:
    """One readable line per problem in `exc`, raised validating `root` (the preset),
    whose `algorithm` section is the tagged union of `algorithms` (name -> config class)."""
    algorithm_names = tuple(algorithms)
    problems = []
    for err in exc.errors():
        # The algorithm's discriminator tag (algorithm.grpo.beta) is noise to a reader.
        loc = tuple(p for i, p in enumerate(err["loc"]) if not (i == 1 and err["loc"][0] == "algorithm"
                                                                and p in algorithm_names))
        path = path_text(loc)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(err["loc"], root, algorithms)
            near = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            hint = f" (did you mean `{near[0]}`?)" if near else ""
            problems.append(f"{path}: unknown field{hint}; allowed: {', '.join(allowed)}")
            continue
        if err["type"] == "missing":
            problems.append(f"{path}: required field is missing")
            continue
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            # The algorithm's `name` is missing or unknown: nothing else in the section
            # is checked, so name that field, and any key no algorithm has (a typo of
            # `name` itself is the usual cause of a missing name).
            given = err["input"].get("name") if isinstance(err["input"], dict) else None
            what = "required field is missing" if given is None else f"unknown algorithm {short_repr(given)}"
            problems.append(f"{path}.name: {what}; one of: {', '.join(algorithm_names)}")
            known = {key for cls in algorithms.values() for key in cls.model_fields}
            for key in err["input"] if isinstance(err["input"], dict) else ():
                if key not in known:
                    near = difflib.get_close_matches(str(key), sorted(known), n=1)
                    hint = f" (did you mean `{near[0]}`?)" if near else ""
                    problems.append(f"{path_text(loc + (key,))}: unknown field{hint}")
            continue
        got = err.get("input")
        shown = "" if isinstance(got, (dict, list)) else f" (got {short_repr(got)})"
        if err["type"] in _RANGE_ERRORS:
            # Name what is allowed, not only the bound that was crossed.
            allowed = _allowed_range(err["loc"], root, algorithms)
            if err["type"] == "finite_number":
                msg, shown = f"must be a finite number, got {short_repr(got)} (.inf and .nan are never allowed)", ""
            problems.append(f"{path}: {msg}{shown}" + (f"; allowed: {allowed}" if allowed else ""))
            continue
        relative = re.match(r"^([\w.]+): ", msg)
        if relative and err["type"] == "value_error":
            # A section validator names a field relative to its section.
            problems.append(f"{'.'.join([*map(str, loc), relative.group(1)])}: {msg[relative.end():]}")
        elif loc:
            problems.append(f"{path}: {msg}{shown}")
        else:
            problems.append(msg)
    return problems

