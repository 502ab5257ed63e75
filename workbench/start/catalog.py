"""The bundled experiments' catalog (presets/catalog.yml): groups in the order shown, and
per preset its group, a paragraph, the measured result, the time on a CPU and what to
look at. No Qt: the start page draws it, tests/test_start_page.py checks it against
README.md and presets/.

A catalog that cannot be read is a `CatalogError` whose lines name the entry and the
field (`presets.grpo-sort.result.end: expected a number, got 'x'`): the start page shows
them instead of its cards.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from workbench.setup.checks import REPO_ROOT

CATALOG_FILE = REPO_ROOT / "presets" / "catalog.yml"
TEXT_FIELDS = ("group", "paragraph", "look_at")


class CatalogError(ValueError):
    """What is wrong with the catalog file, one line per problem."""

    def __init__(self, path: Path, problems: list[str]):
        self.path, self.problems = path, problems
        super().__init__(f"{path}: " + "; ".join(problems))


@dataclass(frozen=True)
class Group:
    key: str
    title: str
    teaches: str


@dataclass(frozen=True)
class Entry:
    """One bundled preset's card."""

    preset: str  # the file's stem: presets/PRESET.yaml
    group: str
    paragraph: str
    measure: str  # what was measured, "held-out exact match"
    start: float  # % at step 0
    end: float  # % at the last step
    cpu_seconds: float
    look_at: str

    @property
    def result_text(self) -> str:
        """The measured line of the card.

        >>> Entry("p", "g", "", "held-out exact match", 34.0, 55.5, 72, "").result_text
        'held-out exact match 34.0% → 55.5% (+21.5 points) in 72 s on a 2-core CPU'
        >>> Entry("p", "g", "", "exact match", 53.5, 0.0, 182, "").result_text
        'exact match 53.5% → 0.0% (-53.5 points) in 182 s on a 2-core CPU'
        """
        return (f"{self.measure} {self.start:.1f}% → {self.end:.1f}% ({self.end - self.start:+.1f} points) "
                f"in {self.cpu_seconds:g} s on a 2-core CPU")


@dataclass(frozen=True)
class Catalog:
    groups: tuple[Group, ...]
    entries: dict[str, Entry]

    def in_group(self, key: str) -> list[Entry]:
        """The group's entries in the catalog's order."""
        return [e for e in self.entries.values() if e.group == key]


def _number(value, where: str, problems: list[str]) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.append(f"{where}: expected a number, got {value!r}")
        return 0.0
    return float(value)


def _text(value, where: str, problems: list[str]) -> str:
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where}: expected text, got {value!r}")
        return ""
    return " ".join(value.split())


def parse_catalog(data, path: Path = CATALOG_FILE) -> Catalog:
    """The catalog from its YAML's data; `CatalogError` listing every problem.

    >>> parse_catalog({"groups": [{"key": "g", "title": "G", "teaches": "t"}], "presets": {"p": {
    ...     "group": "g", "paragraph": "x", "look_at": "y", "cpu_seconds": 3,
    ...     "result": {"measure": "m", "start": 1, "end": 2}}}}).entries["p"].end
    2.0
    >>> parse_catalog({"groups": [], "presets": {"p": {"group": "h"}}}, Path("c.yml"))
    Traceback (most recent call last):
    ...
    workbench.start.catalog.CatalogError: c.yml: presets.p: missing paragraph, look_at, result, cpu_seconds; \
presets.p.group: 'h' is not one of the groups ()
    """
    if not isinstance(data, dict) or not isinstance(data.get("groups"), list) \
            or not isinstance(data.get("presets"), dict):
        raise CatalogError(path, ["expected a mapping with `groups` (a list) and `presets` (a mapping)"])
    problems: list[str] = []
    groups = []
    for i, raw in enumerate(data["groups"]):
        raw = raw if isinstance(raw, dict) else {}
        groups.append(Group(*(_text(raw.get(k), f"groups[{i}].{k}", problems) for k in ("key", "title", "teaches"))))
    keys = tuple(g.key for g in groups)
    entries = {}
    for name, raw in data["presets"].items():
        where = f"presets.{name}"
        if not isinstance(raw, dict):
            problems.append(f"{where}: expected a mapping, got {raw!r}")
            continue
        missing = [k for k in (*TEXT_FIELDS, "result", "cpu_seconds") if k not in raw]
        if missing:
            problems.append(f"{where}: missing {', '.join(missing)}")
        unknown = sorted(set(raw) - {*TEXT_FIELDS, "result", "cpu_seconds"})
        if unknown:
            problems.append(f"{where}: unknown field(s) {', '.join(unknown)}")
        if raw.get("group") not in keys:
            problems.append(f"{where}.group: {raw.get('group')!r} is not one of the groups ({', '.join(keys)})")
            continue
        if missing:
            continue
        result = raw["result"] if isinstance(raw["result"], dict) else {}
        entries[str(name)] = Entry(
            str(name), raw["group"], _text(raw["paragraph"], f"{where}.paragraph", problems),
            _text(result.get("measure"), f"{where}.result.measure", problems),
            _number(result.get("start"), f"{where}.result.start", problems),
            _number(result.get("end"), f"{where}.result.end", problems),
            _number(raw["cpu_seconds"], f"{where}.cpu_seconds", problems),
            _text(raw["look_at"], f"{where}.look_at", problems))
    if problems:
        raise CatalogError(path, problems)
    return Catalog(tuple(groups), entries)


def load_catalog(path: Path = CATALOG_FILE) -> Catalog:
    """presets/catalog.yml, read and checked; `CatalogError` when it cannot be used."""
    try:
        # libyaml's safe loader when there is one: 16 ms for this file where PyYAML's takes 220
        data = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError as exc:
        raise CatalogError(path, [f"cannot be read ({exc.strerror or exc})"]) from None
    except yaml.YAMLError as exc:
        raise CatalogError(path, [f"is not YAML ({str(exc).splitlines()[0]})"]) from None
    return parse_catalog(data, path)


def missing_entries(catalog: Catalog, presets: list[Path]) -> list[str]:
    """The bundled presets the catalog has no card for.

    >>> missing_entries(Catalog((), {}), [Path("presets/a.yaml")])
    ['a']
    """
    return [p.stem for p in presets if p.stem not in catalog.entries]
