"""Registries: the one place a name (a loss type, an estimator, a task, a reward, an
environment, a tool-call format) is known, and what the rest of the engine may know
about it. The engine's one Registry class.

A :class:`Registry` maps a name to an :class:`Entry`: a one-line help, the function
(a callable, or a lazy ``"module:attr"`` string imported on first use, so registering
loads no torch) and the kind's declarations (a small frozen dataclass, e.g. an
aggregation's micro-batch weight rule). The preset validates its fields against the
registries at validation time and the set-up window lists their names, so a variant
registered at run time (a test, ``register_task``, a plug-in) is accepted and shown.

Calling convention of every registered function: tensors positionally, options by
keyword. The function's keyword-only parameters ARE its options: :meth:`Entry.call`
passes, out of what the caller has at hand, only those the function names. A required
keyword the caller cannot give is an error naming the function, the option and what
is available.

A preset value ``FILE.py:FUNCTION`` (where the registry accepts files) names a user's
function, which ``engine.rl.user_code.resolve`` loads (never this module).

Options of a factory: the registry rewards and the built-in tasks are named factories
whose parameters, with their defaults, are the options a preset may set.
:meth:`Registry.options` lists them and :meth:`Registry.check_options` checks a
preset's options against them: each option's name, its type (read from the default)
and, when asked, that a number is finite and in range.

Torch-free: the preset schema and the workbench import it.

Example:
    >>> def double(x, *, factor=2):
    ...     return x * factor
    >>> scalers = Registry("scaler", field="algorithm.scaler")
    >>> _ = scalers.register("double", double, "x times factor")
    >>> scalers.entry("double").call(3, factor=5, unused=1)
    15
    >>> scalers.problem("doubel")
    "unknown scaler 'doubel' (did you mean `double`?); one of: double"
    >>> def greet(*, name: str = "you", times: int = 1):
    ...     return (name + " ") * times
    >>> greetings = Registry("greeting")
    >>> _ = greetings.register("greet", greet)
    >>> greetings.options("greet")
    {'name': 'you', 'times': 1}
    >>> greetings.check_options("greet", {"times": "2"})
    Traceback (most recent call last):
    ...
    ValueError: greeting 'greet': option 'times' must be int (default 1), got str '2'.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from dataclasses import dataclass
from functools import cached_property
from collections.abc import Mapping
from typing import Annotated, Any, Callable, Generic, Iterator, TypeVar

from engine.foundation.limits import MAX_OPTION_MAGNITUDE, number_problem, short_repr

__all__ = ["Entry", "Registry", "RegistryChoice", "choice_of", "split_file_name", "FILE_FORM", "type_ok"]

D = TypeVar("D")

#: How a user's function is named in a preset: a Python file and a function in it.
FILE_FORM = "FILE.py:FUNCTION"
_FILE_NAME = re.compile(r"^(?P<file>.+\.py):(?P<function>[A-Za-z_]\w*)$", re.S)


def split_file_name(value: str) -> tuple[str, str] | None:
    """``FILE.py:FUNCTION`` -> (file, function); None for any other value.

    >>> split_file_name("lib/my_losses.py:clip_cov"), split_file_name("dapo")
    (('lib/my_losses.py', 'clip_cov'), None)
    """
    match = _FILE_NAME.match(value) if isinstance(value, str) else None
    return (match.group("file"), match.group("function")) if match else None


@dataclass(frozen=True)
class Entry(Generic[D]):
    """One registered variant.

    ``target`` is the function or ``"module:attr"``; ``declares`` the kind's
    declarations (None where the kind has none); ``origin`` where it came from
    (``built-in``, a test module, a user's file).
    """

    name: str
    help: str
    target: Callable | str | None
    declares: D | None = None
    origin: str = "built-in"

    @cached_property
    def function(self) -> Callable:
        """The callable, importing ``"module:attr"`` on first use."""
        if not isinstance(self.target, str):
            if self.target is None:
                raise TypeError(f"{self.name!r} has no function of its own (its declarations say what it is)")
            return self.target
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    @cached_property
    def options(self) -> dict[str, Any]:
        """The function's keyword-only parameters, name -> default (``inspect.Parameter.empty``
        when required): what it takes from the caller besides its tensors.

        >>> Entry("f", "", lambda x, *, eps, beta=1.0: x).options
        {'eps': <class 'inspect._empty'>, 'beta': 1.0}
        """
        parameters = inspect.signature(self.function).parameters.values()
        return {p.name: p.default for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}

    def missing_options(self, available) -> list[str]:
        """The required options of the function that ``available`` (names) lacks."""
        return [name for name, default in self.options.items()
                if default is inspect.Parameter.empty and name not in available]

    def call(self, *tensors, **available):
        """The function on ``tensors``, given the options it declares out of ``available``.

        >>> Entry("f", "", lambda x, *, eps: x + eps).call(1, eps=2, beta=3)
        3
        """
        missing = self.missing_options(available)
        if missing:
            raise TypeError(
                f"{self.name!r} asks for option {', '.join(map(repr, missing))}, which the engine does not "
                f"give here; available: {', '.join(sorted(available)) or 'none'}"
            )
        return self.function(*tensors, **{k: v for k, v in available.items() if k in self.options})


class Registry(Mapping, Generic[D]):
    """Name -> :class:`Entry`, in registration order. As a mapping (``registry[name]``,
    ``in``, iteration) it is name -> function, as the plain dicts it replaced.

    ``kind`` names an entry in messages (``policy loss``); ``field`` the preset field
    that picks one (for the form and docs); ``files``: whether a ``FILE.py:FUNCTION``
    value is accepted (and ``file_kind``, the registry whose kind of function such a
    file holds, when not this one: a file loss_type holds a surrogate); ``given``: the
    options the engine computes for this kind's functions (a function's keyword-only
    parameters must be among them or ``section_fields``, the preset section's fields a
    section offers its registries); ``file_declares``: the declarations of a user's
    function that declares nothing itself; ``skip``: the parameters of a factory that
    are not options a preset sets (a task's ``seed``, say).
    """

    def __init__(self, kind: str, *, field: str = "", files: bool = False, file_kind: Registry | None = None,
                 file_help: str = "", given: tuple[str, ...] = (), file_declares: D | None = None,
                 skip: tuple[str, ...] = ()):
        self.kind = kind
        self.field = field
        self.files = files
        self.file_kind = file_kind
        self.file_help = file_help
        self.given = given
        # the fields of a preset section offered as options too (engine.rl.catalog.offer_section_fields)
        self.section_fields: tuple[str, ...] = ()
        self.file_declares = file_declares
        self.skip = frozenset(skip)
        self._entries: dict[str, Entry[D]] = {}

    # ---------------------------------------------------------------- registering

    def register(self, name: str, target: Callable | str | None, help: str = "", declares: D | None = None,
                 *, origin: str = "built-in", replace: bool = False) -> Entry[D]:
        """Add ``name``; refuses a name already there unless ``replace`` (a second
        registration under a taken name is a mistake worth a message)."""
        if not isinstance(name, str) or not re.match(r"^[A-Za-z_][\w.\-]*$", name):
            raise ValueError(f"{self.kind} name {name!r}: use letters, digits, _ . - (it is written in presets)")
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} {name!r} is already registered ({self._entries[name].origin}); "
                             "pass replace=True to replace it")
        if not help and callable(target):
            help = first_line(target.__doc__)
        entry = Entry(name, help, target, declares, origin)
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's registration, after the test)."""
        self._entries.pop(name, None)

    # -------------------------------------------------------------------- reading

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    # Identity, not Mapping's item-by-item comparison (which would import every lazy function).
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._entries)})"

    def __getitem__(self, name: str) -> Callable:
        try:
            entry = self._entries[name]
        except TypeError:
            raise KeyError(name) from None
        return entry.function

    def entries(self) -> tuple[Entry[D], ...]:
        return tuple(self._entries.values())

    def entry(self, name: str) -> Entry[D]:
        """The entry ``name``; ValueError with the allowed names and a near one."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise ValueError(self.problem(name) or f"{self.kind} {name!r} cannot be looked up here") from None

    def function(self, name: str) -> Callable:
        return self.entry(name).function

    def declares(self, name: str) -> D | None:
        return self.entry(name).declares

    def allowed_text(self) -> str:
        """``grpo, dr_grpo, dapo`` (plus the file form where accepted)."""
        names = ", ".join(self._entries)
        return f"{names}, or {FILE_FORM} ({self.file_help})" if self.files and self.file_help else (
            f"{names}, or {FILE_FORM}" if self.files else names)

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` as a preset's choice of this kind, None when fine.
        A ``FILE.py:FUNCTION`` value is checked for form only (loading it is the run's
        and ``validate``'s business).

        >>> losses = Registry("loss", files=True)
        >>> _ = losses.register("dapo", None, "token mean")
        >>> losses.problem("dapo"), losses.problem("mine.py:clip_cov")
        (None, None)
        >>> losses.problem("mine.py")
        "'mine.py' is not FILE.py:FUNCTION: name a Python file and a function in it, e.g. my_loss.py:my_function"
        """
        if value in self:
            return None
        if self.files and isinstance(value, str):
            if split_file_name(value):
                return None
            if ":" in value or value.strip().endswith(".py"):
                return (f"{value!r} is not {FILE_FORM}: name a Python file and a function in it, "
                        "e.g. my_loss.py:my_function")
        near = difflib.get_close_matches(str(value), list(self._entries), n=1)
        hint = f" (did you mean `{near[0]}`?)" if near else ""
        return f"unknown {self.kind} {value!r}{hint}; one of: {self.allowed_text()}"

    def check(self, value: str) -> str:
        """``value`` unchanged, or ValueError with :meth:`problem` (pydantic's validator)."""
        problem = self.problem(value)
        if problem:
            raise ValueError(problem)
        return value

    def describe(self) -> str:
        """One line per entry, ``name: help``: the field's help text in the window.

        >>> r = Registry("kl estimator"); _ = r.register("k1", None, "log pi - log ref")
        >>> r.describe()
        'k1: log pi - log ref'
        """
        lines = [f"{e.name}: {e.help}" if e.help else e.name for e in self._entries.values()]
        if self.files:
            lines.append(f"{FILE_FORM}: {self.file_help or 'your own function, in a file next to the preset'}")
        return "\n".join(lines)

    # ------------------------------------------------------- a factory's options

    def factory(self, name: str) -> Callable:
        """The factory ``name``; ValueError naming the allowed ones when unknown."""
        try:
            return self[name]
        except KeyError:
            raise ValueError(
                f"unknown {self.kind} {name!r}; allowed {self.kind}s: {', '.join(sorted(self))}."
            ) from None

    def options(self, name: str) -> dict[str, object]:
        """The options of the factory ``name`` with their defaults, in the signature's
        order (every parameter but ``skip``'s)."""
        signature = inspect.signature(self.factory(name))
        return {p.name: p.default for p in signature.parameters.values() if p.name not in self.skip}

    def check_options(self, name: str, options: Mapping,
                      ranges: Mapping[str, tuple[float, float]] | None = None) -> None:
        """ValueError naming the first option of ``name`` that is unknown or of the wrong type.

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

    # ------------------------------------------------------------------ resolving

    def resolve(self, value: str) -> Entry:
        """The registered entry a preset's ``value`` names; an unknown name raises with the
        allowed ones. A user's ``FILE.py:FUNCTION`` is loaded by engine.rl.user_code.resolve
        (torch-side: this module, which the window reads, never imports the user's code)."""
        if value in self:
            return self._entries[value]
        if self.files and split_file_name(value):
            raise ValueError(f"{value} is a user's function: resolve it with engine.rl.user_code.resolve")
        return self.entry(value)  # raises with the allowed names


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


def first_line(doc: str | None) -> str:
    """The first sentence-line of a docstring, for a help text.

    >>> first_line('''Mean over sequences.
    ...
    ...     More.''')
    'Mean over sequences.'
    """
    text = (doc or "").strip()
    return " ".join(text.split("\n\n")[0].split())


@dataclass(frozen=True, eq=False)  # identity: two markers of different registries never compare equal
class RegistryChoice:
    """A preset field's marker: its value is a name in ``registry`` (the Registry, or
    ``"module:ATTR"`` naming it, imported at the first validation: engine.preset.schema
    cannot import engine.data.tasks at import time).

    ``Annotated[str, RegistryChoice(POLICY_LOSSES)]`` validates the value against the
    registry at validation time (so a registration made at run time is accepted) and
    tells the set-up form (workbench/setup/schema.py) to offer the registry's names,
    read when the form is built, with their help as the tooltip.
    """

    source: Registry | str

    @property
    def registry(self) -> Registry:
        if isinstance(self.source, str):
            module, _, attr = self.source.partition(":")
            return getattr(importlib.import_module(module), attr)
        return self.source

    def __get_pydantic_core_schema__(self, source, handler):
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(lambda value: self.registry.check(value), handler(source))


def choice_of(registry: Registry | str) -> Any:
    """The annotation of a preset field that names an entry of ``registry``.

    >>> r = Registry("colour"); _ = r.register("red", None, "warm")
    >>> from pydantic import BaseModel
    >>> class Paint(BaseModel):
    ...     colour: choice_of(r) = "red"
    >>> Paint(colour="red").colour
    'red'
    >>> try:
    ...     Paint(colour="rde")
    ... except ValueError as error:
    ...     print(error.errors()[0]["msg"])
    Value error, unknown colour 'rde' (did you mean `red`?); one of: red
    """
    return Annotated[str, RegistryChoice(registry)]
