"""Option registries: a factory's keyword-only signature is its option list.

The registry rewards (engine/rewards/builtin.py) and the built-in tasks
(engine/data/tasks.py) are both named factories whose keyword-only parameters, with
their defaults, are the options a preset may set. :class:`Registry` holds one such
table and checks a preset's options against it: the name, each option's name, its
type (read from the default) and, when asked, that a number is finite and in range.

Torch-free: the preset's validators and the workbench use it.

Example:
    >>> def greet(*, name: str = "you", times: int = 1):
    ...     return (name + " ") * times
    >>> registry = Registry("greeting", {"greet": greet})
    >>> registry.options("greet")
    {'name': 'you', 'times': 1}
    >>> registry.check("greet", {"times": "2"})
    Traceback (most recent call last):
    ...
    ValueError: greeting 'greet': option 'times' must be int (default 1), got str '2'.
"""

from __future__ import annotations

import inspect
from typing import Callable, Generic, Mapping, TypeVar

from engine.preset.limits import MAX_OPTION_MAGNITUDE, number_problem, short_repr

__all__ = ["Registry", "type_ok"]

F = TypeVar("F", bound=Callable)


def type_ok(value: object, default: object) -> bool:
    """Whether ``value`` fits an option whose default is ``default``: the default's
    type, where an int is a fine float (``tolerance: 0``) and a bool is never a number
    (``min_len: true`` is certainly a mistake).

    Example:
        >>> type_ok(0, 0.5), type_ok(True, 3), type_ok(False, True), type_ok("6", 6)
        (True, False, True, False)
    """
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, type(default))


class Registry(Generic[F]):
    """Named factories whose keyword parameters are their options.

    ``kind`` names an entry in messages (``reward``, ``task``); ``factories`` is the
    table itself (kept by reference: adding to it adds to the registry); ``skip``
    lists parameters that are not options (a task's ``seed``, say).
    """

    def __init__(self, kind: str, factories: Mapping[str, F], skip: tuple[str, ...] = ()):
        self.kind = kind
        self.factories = factories
        self.skip = frozenset(skip)

    def factory(self, name: str) -> F:
        """The factory ``name``; ValueError naming the allowed ones when unknown."""
        try:
            return self.factories[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown {self.kind} {name!r}; allowed {self.kind}s: {', '.join(sorted(self.factories))}."
            ) from None

    def options(self, name: str) -> dict[str, object]:
        """The options of ``name`` with their defaults, in the signature's order."""
        signature = inspect.signature(self.factory(name))
        return {p.name: p.default for p in signature.parameters.values() if p.name not in self.skip}

    def check(self, name: str, options: Mapping, ranges: Mapping[str, tuple[float, float]] | None = None) -> None:
        """ValueError naming the first option that is unknown or of the wrong type.

        With ``ranges`` (option -> (low, high); others within +-MAX_OPTION_MAGNITUDE)
        a number option must also be finite and in its range; with None, numbers are
        not checked.
        """
        allowed = self.options(name)
        listing = ", ".join(f"{k}={v!r}" for k, v in allowed.items())
        for option, value in options.items():
            if not isinstance(option, str) or option not in allowed:
                raise ValueError(
                    f"{self.kind} {name!r} has no option {short_repr(option)}; allowed options: {listing}."
                )
            default = allowed[option]
            if not type_ok(value, default):
                # A list or mapping is never an option's type: keep the message short.
                got = short_repr(value) if isinstance(value, (list, dict)) else f"{type(value).__name__} {value!r}"
                raise ValueError(
                    f"{self.kind} {name!r}: option {option!r} must be {type(default).__name__} "
                    f"(default {default!r}), got {got}."
                )
            if ranges is not None:
                low, high = ranges.get(option, (-MAX_OPTION_MAGNITUDE, MAX_OPTION_MAGNITUDE))
                problem = number_problem(value, low, high)
                if problem:
                    raise ValueError(f"{self.kind} {name!r}: option {option!r} {problem}.")
