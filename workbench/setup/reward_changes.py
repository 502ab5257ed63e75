"""The rewards against the preset's (as opened or last saved): which entry of the form is
which of the preset's, what differs in each, which were added and which removed. No Qt:
the rewards editor marks its rows from this, as the set-up form marks a changed field.

Entries are paired by their label (two components may not share one, so it names one),
then a leftover by its reward's name (its label was edited); a reward swapped for another
reads as one removed and one added. A field a preset leaves out reads as its
default (`weight` 1.0, no options), and an option left out as the reward's own default,
so writing out a default is no change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from engine.preset.schema import Preset
from engine.rewards import component_label
from workbench.setup.schema import field_spec, format_value, item_defaults
from workbench.setup.switching import same_value

ITEM_DEFAULTS = item_defaults(field_spec(Preset, "rewards").model)  # a reward component's: weight 1.0, no options
FIELDS = ("name", "label", "weight", "step_delimiter")  # compared one by one; then each option


@dataclass
class RewardChanges:
    """`pairs[i]`: the preset's index of the form's entry i (None: added); `removed`: the
    preset's entries no entry of the form stands for; `differences[i]`: what differs in
    entry i from its preset entry ("weight", "options.tolerance", ...)."""

    pairs: list[int | None] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    differences: dict[int, list[str]] = field(default_factory=dict)

    @property
    def any(self) -> bool:
        return bool(self.removed) or any(p is None for p in self.pairs) or any(self.differences.values()) \
            or [p for p in self.pairs if p is not None] != sorted(p for p in self.pairs if p is not None)

    def changed(self, index: int) -> bool:
        """Whether the form's entry `index` is not the preset's as it was (added, or changed)."""
        return self.pairs[index] is None or bool(self.differences.get(index))


def _label(item: Any) -> str | None:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return None
    try:
        return component_label(item["name"], item.get("label"))
    except Exception:  # a half-typed name
        return item.get("label") or item["name"]


def pair_entries(current: list, preset: list) -> list[int | None]:
    """For each of `current`'s entries, the index of the preset entry it stands for.

    >>> pair_entries([{"name": "b"}, {"name": "a", "label": "x"}, {"name": "c"}], [{"name": "a"}, {"name": "b"}])
    [1, 0, None]
    """
    pairs: list[int | None] = [None] * len(current)
    free = set(range(len(preset)))

    def match(same: Callable[[int, int], bool]) -> None:
        for i in range(len(current)):
            if pairs[i] is None:
                j = next((j for j in sorted(free) if same(i, j)), None)
                if j is not None:
                    pairs[i] = j
                    free.discard(j)

    match(lambda i, j: _label(current[i]) is not None and _label(current[i]) == _label(preset[j]))
    match(lambda i, j: isinstance(current[i], dict) and isinstance(preset[j], dict)
          and current[i].get("name") == preset[j].get("name"))
    return pairs


def differences(item: Any, was: Any, option_defaults: dict | None = None) -> list[str]:
    """The fields of `item` that differ from `was` (its preset entry).

    >>> differences({"name": "m", "weight": 1, "options": {"tol": 0.1}}, {"name": "m"}, {"tol": 0.0})
    ['options.tol']
    >>> differences({"name": "m", "weight": 0.5, "options": {"tol": 0.0}}, {"name": "m", "weight": 1.0}, {"tol": 0.0})
    ['weight']
    """
    item = {**ITEM_DEFAULTS, **item} if isinstance(item, dict) else {}
    was = {**ITEM_DEFAULTS, **was} if isinstance(was, dict) else {}
    found = [key for key in FIELDS if not same_value(item.get(key), was.get(key))]
    if "name" in found:
        return found + ["options"] * (item.get("options") != was.get("options"))
    ours, theirs = item.get("options"), was.get("options")
    if not isinstance(ours, dict) or not isinstance(theirs, dict):
        return found + ["options"] * (ours != theirs)
    defaults = option_defaults or {}
    missing = object()
    for key in list(theirs) + [k for k in ours if k not in theirs]:
        a, b = ours.get(key, defaults.get(key, missing)), theirs.get(key, defaults.get(key, missing))
        if not same_value(a, b):
            found.append(f"options.{key}")
    return found


def compare(current: list, preset: list, option_defaults: Callable[[Any], dict] = lambda name: {}) -> RewardChanges:
    """The form's rewards (`current`) against the preset's; `option_defaults(name)`: a
    reward's options' defaults.

    >>> c = compare([{"name": "a", "weight": 0.5}, {"name": "c"}], [{"name": "a"}, {"name": "b"}])
    >>> c.pairs, c.removed, c.differences, c.any
    ([0, None], [1], {0: ['weight']}, True)
    """
    current = current if isinstance(current, list) else []
    preset = preset if isinstance(preset, list) else []
    pairs = pair_entries(current, preset)
    changes = RewardChanges(pairs, [j for j in range(len(preset)) if j not in pairs])
    for i, j in enumerate(pairs):
        if j is not None:
            name = current[i].get("name") if isinstance(current[i], dict) else None
            changes.differences[i] = differences(current[i], preset[j], option_defaults(name))
    return changes


def summary(changes: RewardChanges, current: list, preset: list) -> str:
    """The line over the rewards' rows: what changed ('' when nothing did).

    >>> summary(compare([{"name": "a", "weight": 2}, {"name": "c"}], [{"name": "a"}, {"name": "b"}]),
    ...         [{"name": "a", "weight": 2}, {"name": "c"}], [{"name": "a"}, {"name": "b"}])
    'Changed from the preset: added c; removed b; a: weight'
    """
    words = [f"added {entry_name(current[i])}" for i, j in enumerate(changes.pairs) if j is None]
    words += [f"removed {entry_name(preset[j])}" for j in changes.removed]
    words += [f"{entry_name(current[i])}: {', '.join(fields)}" for i, fields in changes.differences.items() if fields]
    if changes.any and not words:
        words = ["the order"]
    return "Changed from the preset: " + "; ".join(words) if words else ""


def describe(item: Any, was: Any, fields: list[str]) -> str:
    """What differs, in words, for the Reset's tooltip.

    >>> describe({"name": "a", "weight": 0.5}, {"name": "a", "weight": 1.0}, ["weight"])
    'weight: 1.0 in the preset, 0.5 now'
    """
    item, was = (x if isinstance(x, dict) else {} for x in (item, was))
    lines = []
    for path in fields:
        key, _, option = path.partition(".")
        if option:
            ours, theirs = ((x.get(key) or {}).get(option, _DEFAULT) for x in (item, was))
        else:
            ours, theirs = (x.get(key, ITEM_DEFAULTS.get(key)) for x in (item, was))
        lines.append(f"{path}: {_shown(theirs)} in the preset, {_shown(ours)} now")
    return "\n".join(lines)


_DEFAULT = object()  # an option an entry leaves out


def _shown(value: Any) -> str:
    """
    >>> _shown(None), _shown(_DEFAULT), _shown({"a": 1})
    ('unset', 'the default', '{a: 1}')
    """
    if value is _DEFAULT:
        return "the default"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    return "unset" if value is None else format_value(value)


def entry_name(item: Any) -> str:
    """An entry as the marks name it: its label (its reward's name when that is the label).

    >>> entry_name({"name": "reward_model", "label": "rm"}), entry_name({"name": "exact_match"})
    ('rm (reward_model)', 'exact_match')
    """
    label = _label(item) or "?"
    name = item.get("name") if isinstance(item, dict) else None
    return label if not isinstance(name, str) or name == label else f"{label} ({name})"
