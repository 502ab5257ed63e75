"""A preset's environment (``data.environment``): the class whose methods are the model's
tools, checked when the preset is loaded and wrapped for each episode.

``data.environment`` names a built-in (:data:`ENVIRONMENTS`, e.g. ``calculator``) or a
class in a Python file, ``my_env.py:Game`` (a relative file is looked up in the preset's
folder first, then the current one). The class is TRL's ``environment_factory`` contract::

    class Game:
        def reset(self, **row) -> str | None:      # a new episode from a data row
            self.secret = int(row["answer"])
        def guess(self, number: int) -> str:       # a tool: type hints + docstring
            \"\"\"Guess the secret number.

            Args:
                number: The guess.
            \"\"\"
            return "higher" if number < self.secret else "lower" if number > self.secret else "yes"
        def get_reward(self) -> float:             # optional: the episode's own reward
            ...

:func:`load_environment` checks it without making an instance (each fault an
:class:`EnvironmentProblem` naming ``data.environment``, the method and the parameter)
and returns an :class:`EnvironmentSpec`: the tools' JSON schemas, as
``transformers.utils.get_json_schema`` writes them (it is imported when needed, and
loads torch). Each episode gets its own instance (:meth:`EnvironmentSpec.new`), an
:class:`EpisodeEnvironment` that resets it from the row, runs its tools under a time
limit and asks it for the reward. Nothing here imports torch itself.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.episodes.builtin import Calculator
from engine.episodes.tool_threads import MAX_UNSTOPPED, ToolThreads, run_in_thread
from engine.rewards.custom import fault_line, import_user_file
from engine.rewards.time_limit import stuck_at
from engine.foundation.registry import Registry, split_file_name
from engine.foundation.stopping import own_exit, own_exits_as

__all__ = ["ENVIRONMENTS", "EnvironmentProblem", "EnvironmentError", "EnvironmentSpec", "EpisodeEnvironment",
           "ToolResult", "load_environment", "environment_problem", "check_environment"]

FIELD = "data.environment"
RESET, REWARD = "reset", "get_reward"
# The built-in environments (name -> class, as a mapping) that `data.environment` may name.
ENVIRONMENTS: Registry = Registry("environment", field="data.environment")
ENVIRONMENTS.register("calculator", Calculator)

_TOOL_HELP = ("transformers builds each tool's description for the model from the method: a type hint on every "
              "parameter (str, int, float, bool, list[...], dict[...]) and a docstring with a description and an "
              "`Args:` section with one line per parameter (`name: what it is`); a method that is not a tool "
              "starts with `_`")


class EnvironmentProblem(ValueError):
    """``data.environment`` cannot be used: the message starts with the field and says
    what is wrong and how to fix it."""


# The agreed name; inside this module it shadows the builtin alias of OSError (unused here).
class EnvironmentError(RuntimeError):
    """The environment misbehaved during an episode (its constructor, ``reset`` or
    ``get_reward`` raised, called ``sys.exit()`` or returned the wrong thing); the
    message names the method and the line. A tool's own faults are never this: they are
    answered to the model (:meth:`EpisodeEnvironment.call`), unless its calls keep
    running past their time limit and cannot be stopped (tool_threads.py)."""


@dataclass
class ToolResult:
    """One tool call's outcome: ``content`` is what the tool message holds (the result
    as text, or ``{'error': ...}`` as TRL writes a failure), ``seconds`` its wall time."""

    name: str
    content: str
    error: bool
    seconds: float


@dataclass
class EnvironmentSpec:
    """A checked environment class. ``schemas[i]`` is ``get_json_schema`` of the tool
    ``tool_names[i]`` ({"type": "function", "function": {"name", "description",
    "parameters"}}); ``reward_label`` the class name, as TRL names the reward it logs;
    ``path`` the file it came from (None for a built-in)."""

    label: str
    cls: type
    tool_names: list[str]
    schemas: list[dict]
    has_reward: bool
    reward_label: str
    path: Path | None = None
    reset_keywords: list[str] | None = field(default=None, repr=False)  # None: reset takes **kwargs
    reset_required: list[str] = field(default_factory=list, repr=False)
    # tool calls that ran past data.tool_timeout and could not be stopped (tool_threads.py)
    tool_threads: ToolThreads = field(default_factory=ToolThreads, repr=False, compare=False)

    def new(self) -> EpisodeEnvironment:
        """A fresh instance for one episode (``cls()``), wrapped."""
        instance = _user_call(lambda: self.cls(), lambda exc: self._constructor_fault(exc))
        return EpisodeEnvironment(self, instance)

    def _constructor_fault(self, exc: BaseException) -> EnvironmentError:
        what = _misbehaved(exc) or f"failed with {type(exc).__name__}: {exc}"
        return EnvironmentError(f"{FIELD}: {self.reward_label}() {what}{_at(exc, self.path)}; {self.reward_label}() "
                                "must make an instance (one is made per episode)")

    def missing_columns(self, columns: list[str]) -> list[str]:
        """The parameters ``reset`` requires that a data set's ``columns`` lack.

        e.g. reset(self, answer, level=1), columns ["prompt", "question"] -> ["answer"]
        """
        return [name for name in self.reset_required if name not in columns]


def _at(exc: BaseException, path: Path | None) -> str:
    """" (at FILE, line N)" for a fault inside the environment's file."""
    line = fault_line(exc, path) if path is not None else None
    return f" (at {path}, line {line})" if line else ""


def _misbehaved(exc: BaseException) -> str | None:
    """What a sys.exit() or a KeyboardInterrupt of the environment's own did, in words;
    None for an ordinary exception."""
    return own_exit(exc) if isinstance(exc, (SystemExit, KeyboardInterrupt)) else None


def _user_call(call, fault):
    """``call()`` (the environment's own code, in the engine's thread), its failures
    raised as ``fault(exc)``: an exception, a ``sys.exit()`` and a KeyboardInterrupt it
    raised itself (engine/foundation/stopping.own_exits_as). A real Ctrl-C is kept: the run is
    aborted."""
    def guarded():
        try:
            return call()
        except Exception as exc:
            raise fault(exc) from exc

    return own_exits_as(guarded, fault)


# ---------------------------------------------------------------------------
# Loading and checking the class
# ---------------------------------------------------------------------------


def _find_class(value: str, base_dir: Path | None) -> tuple[type, Path | None]:
    """The class ``value`` names: a built-in, or ``FILE.py:CLASS`` imported."""
    if value in ENVIRONMENTS:
        return ENVIRONMENTS[value], None
    parts = split_file_name(value)
    if parts is None:
        raise EnvironmentProblem(f"{FIELD}: {value!r} is neither a built-in environment ("
                                 f"{', '.join(ENVIRONMENTS)}) nor FILE.py:CLASS (a class in a Python file)")
    file, name = parts
    module, path = import_user_file(file, base_dir, FIELD, EnvironmentProblem)
    if not hasattr(module, name):
        classes = [n for n, v in vars(module).items()
                   if inspect.isclass(v) and not n.startswith("_") and v.__module__ == module.__name__]
        listing = f"the classes {', '.join(classes)}" if classes else "no classes"
        raise EnvironmentProblem(f"{FIELD}: no class {name!r} in {path}; it defines {listing}")
    cls = getattr(module, name)
    if not inspect.isclass(cls):
        raise EnvironmentProblem(f"{FIELD}: {name!r} in {path} is a {type(cls).__name__}, not a class; name a class "
                                 "whose methods are the tools (one instance is made per episode)")
    return cls, path


def _parameters(cls: type, name: str) -> list[inspect.Parameter]:
    """The parameters of the method ``name`` as called on an instance (no ``self``)."""
    parameters = list(inspect.signature(getattr(cls, name)).parameters.values())
    if isinstance(inspect.getattr_static(cls, name), staticmethod):
        return parameters
    return parameters[1:]


def _check_constructor(cls: type) -> None:
    try:
        inspect.signature(cls).bind()
    except TypeError:
        raise EnvironmentProblem(f"{FIELD}: {cls.__name__}() must work without arguments (one instance is made per "
                                 f"episode, as TRL's environment_factory does); give {cls.__name__}.__init__'s "
                                 "parameters defaults, or set them up in reset") from None
    except ValueError:
        pass  # no signature to read (a class implemented in C): tried when the first episode starts


def _reset_keywords(cls: type, methods: dict) -> tuple[list[str] | None, list[str]]:
    """(the keywords reset takes, None when it takes ``**kwargs``; those it requires)."""
    if RESET not in methods:
        raise EnvironmentProblem(f"{FIELD}: {cls.__name__} has no reset method; add `def reset(self, **row) -> str | "
                                 "None` (it starts an episode from a data row and may return a first observation)")
    if inspect.iscoroutinefunction(methods[RESET]):
        raise EnvironmentProblem(f"{FIELD}: {cls.__name__}.reset is `async def`; reset must be a plain method")
    parameters = _parameters(cls, RESET)
    stuck = [p.name for p in parameters if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
    if stuck:
        raise EnvironmentProblem(
            f"{FIELD}: {cls.__name__}.reset takes {stuck[0]!r} by position only, but it is called with the data "
            f"row's columns as keywords (reset(prompt=..., answer=...)); take `**row`, or name the columns "
            "as ordinary parameters")
    named = [p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    required = [p.name for p in named if p.default is p.empty]
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None, required
    return [p.name for p in named], required


def _tool_problem(cls: type, name: str, function) -> str | None:
    """What keeps the method ``name`` from being a tool transformers can describe."""
    where = f"{FIELD}: the tool {cls.__name__}.{name}"
    doc = inspect.getdoc(function)
    for parameter in _parameters(cls, name):
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            star = "*" if parameter.kind is parameter.VAR_POSITIONAL else "**"
            return (f"{where} takes {star}{parameter.name}; a tool is called with the keyword arguments the model "
                    "writes, so name each parameter")
        if parameter.annotation is parameter.empty:
            return f"{where}: parameter {parameter.name!r} has no type hint; {_TOOL_HELP}"
    if not doc or not doc.strip():
        return f"{where} has no docstring; {_TOOL_HELP}"
    from transformers.utils.chat_template_utils import parse_google_format_docstring

    _description, described, _returns = parse_google_format_docstring(doc.strip())
    for parameter in _parameters(cls, name):
        if parameter.name not in (described or {}):
            return (f"{where}: its docstring does not describe parameter {parameter.name!r} (an `Args:` line "
                    f"`{parameter.name}: what it is`); {_TOOL_HELP}")
    return None


def _schema(cls: type, name: str, function) -> dict:
    """transformers' JSON schema of the tool, its refusals named by the method."""
    from transformers.utils import get_json_schema

    try:
        return get_json_schema(function)
    except Exception as exc:  # TypeHintParsingException, DocstringParsingException, a bad (choices: ...)
        raise EnvironmentProblem(f"{FIELD}: the tool {cls.__name__}.{name}: transformers cannot describe it: "
                                 f"{exc}; {_TOOL_HELP}") from None


def _check_reward(cls: type, methods: dict) -> bool:
    """Whether the class scores its episodes; refuses a get_reward that takes arguments."""
    if REWARD not in methods:
        return False
    required = [p.name for p in _parameters(cls, REWARD)
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if required:
        raise EnvironmentProblem(
            f"{FIELD}: {cls.__name__}.get_reward takes {required[0]!r}, but it is called with no arguments after "
            "the episode; keep what it needs on self (in reset and the tools) and write `def get_reward(self) -> "
            "float`")
    return True


def check_environment(cls: type, label: str, path: Path | None = None) -> EnvironmentSpec:
    """``cls`` checked as an environment (each fault an :class:`EnvironmentProblem`).
    Tools are its public functions besides reset and get_reward, listed on the class as
    TRL lists them (``inspect.getmembers(cls, inspect.isfunction)``, sorted by name).

    e.g. check_environment(Calculator, "calculator")
         -> EnvironmentSpec(label="calculator", tool_names=["calculate"], has_reward=False, ...)
    """
    _check_constructor(cls)
    methods = dict(inspect.getmembers(cls, predicate=inspect.isfunction))
    reset_keywords, reset_required = _reset_keywords(cls, methods)
    tools = [name for name in methods if name not in (RESET, REWARD) and not name.startswith("_")]
    for name in tools:
        problem = _tool_problem(cls, name, methods[name])
        if problem:
            raise EnvironmentProblem(problem)
    schemas = [_schema(cls, name, methods[name]) for name in tools]
    has_reward = _check_reward(cls, methods)
    if not tools and not has_reward:
        raise EnvironmentProblem(
            f"{FIELD}: {cls.__name__} has no tools (public methods besides reset and get_reward) and no get_reward; "
            "an environment gives the model tools to call, scores the episode with get_reward, or both")
    return EnvironmentSpec(label, cls, tools, schemas, has_reward, cls.__name__, path, reset_keywords, reset_required)


def load_environment(value: str, base_dir: Path | None) -> EnvironmentSpec:
    """The environment ``data.environment`` names, loaded and checked: a built-in name
    or ``FILE.py:CLASS`` (``base_dir``: the preset's folder). Importing the file runs it.

    e.g. load_environment("calculator", None).tool_names -> ["calculate"]
         load_environment("my_env.py:Gam", Path("presets"))
         -> EnvironmentProblem("data.environment: no class 'Gam' in presets/my_env.py; it defines the classes Game")
    """
    cls, path = _find_class(value, base_dir)
    return check_environment(cls, value, path)


def environment_problem(value: str, base_dir: Path | None) -> str | None:
    """:func:`load_environment`'s checks as a message, None when it loads (for
    ``rl-engine validate``). It imports the user's file and transformers (which loads
    torch): the window asks through ``rl-engine validate``, never in its own process."""
    try:
        load_environment(value, base_dir)
    except EnvironmentProblem as exc:
        return str(exc)
    return None


# ---------------------------------------------------------------------------
# One episode's instance
# ---------------------------------------------------------------------------


def _error_text(message: str) -> str:
    """A failure as the tool message holds it, as TRL writes one: ``str({"error": ...})``."""
    return str({"error": message})


def _text(value: Any, what: str) -> tuple[str, bool]:
    """(``str(value)``, False), or, when its ``__str__`` raises, (a line saying so, True):
    the model gets an error message, never the run a crash. ``what``: the value, in words.

    e.g. a Foo whose __str__ raises ValueError("no")
         -> ("tool calculate returned a Foo whose str() raised ValueError: no", True)
    """
    try:
        return (str.__str__(value) if isinstance(value, str) else str(value)), False
    except Exception as exc:  # noqa: BLE001 - any __str__ of the user's
        try:
            why = str(exc)
        except Exception:  # noqa: BLE001 - its own __str__ fails too
            why = "(its message cannot be shown either)"
        return f"{what} whose str() raised {type(exc).__name__}: {why}", True


def _tool_work(function, arguments: dict, name: str):
    """The call as the tool's thread runs it, giving (text, error). The result is made
    text there too, so a slow or failing ``__str__`` is bounded by the time limit and
    answered to the model like the tool's own fault."""

    def work() -> tuple[str, bool]:
        try:
            value = function(**arguments)
            if inspect.iscoroutine(value):
                value = asyncio.run(value)
        except Exception as exc:  # noqa: BLE001 - the tool's fault, answered to the model
            return _text(exc, f"tool {name} raised {type(exc).__name__}")[0], True
        except (SystemExit, KeyboardInterrupt) as exc:  # the tool's fault too, not the engine's exit or a Ctrl-C
            return f"tool {name} {_misbehaved(exc)}", True
        return _text(value, f"tool {name} returned a {type(value).__name__}")

    return work


class EpisodeEnvironment:
    """One episode's instance of the environment (``instance``: the user's object, which
    the rewards receive as their ``environment`` field)."""

    def __init__(self, spec: EnvironmentSpec, instance: Any):
        self.spec = spec
        self.instance = instance

    def _fault(self, method: str, exc: BaseException) -> EnvironmentError:
        what = _misbehaved(exc) or f"raised {type(exc).__name__}: {exc}"
        must = "return None or the first observation" if method == RESET else "return the episode's reward"
        return EnvironmentError(f"{FIELD}: {self.spec.reward_label}.{method} {what}{_at(exc, self.spec.path)}; "
                                f"{method} must {must}")

    def reset(self, row: dict) -> str | None:
        """``instance.reset(**row)`` with the columns reset takes (all of them when it
        takes ``**kwargs``); its first observation, None or text (TRL appends it to the
        prompt's last message).

        e.g. reset(self, answer) and row {"prompt": "2+3?", "answer": "5"} -> reset(answer="5")
        """
        keywords = self.spec.reset_keywords
        given = dict(row) if keywords is None else {k: v for k, v in row.items() if k in keywords}
        missing = [name for name in self.spec.reset_required if name not in row]
        if missing:
            raise EnvironmentError(f"{FIELD}: {self.spec.reward_label}.reset needs {', '.join(map(repr, missing))}, "
                                   f"which the data row lacks (its columns: {', '.join(row) or 'none'}); give reset "
                                   "a default for it or use a data set with that column")
        observation = _user_call(lambda: self.instance.reset(**given), lambda exc: self._fault(RESET, exc))
        if observation is not None and not isinstance(observation, str):
            raise EnvironmentError(f"{FIELD}: {self.spec.reward_label}.reset returned {type(observation).__name__} "
                                   f"{observation!r:.40}; it must return None or the first observation as text")
        return observation

    def call(self, name: str, arguments: dict, timeout: float) -> ToolResult:
        """The tool ``name`` run with ``arguments``, waited on for ``timeout`` seconds
        (a call that runs late is stopped: tool_threads.py). Never raises for the
        tool's faults: an unknown tool, wrong arguments, an exception, a result whose
        ``str()`` fails or a time-out come back as an error result the model reads.
        The one exception: calls that could not be stopped piling up past
        MAX_UNSTOPPED (EnvironmentError naming the tool and data.tool_timeout).

        e.g. call("calculate", {"expression": "3+4"}, 10.0) -> ToolResult("calculate", "7", False, 0.0001)
             call("calculate", {"expression": "x"}, 10.0)
             -> ToolResult("calculate", "{'error': \\"only numbers, ...; found the name 'x'\\"}", True, ...)
        """
        start = time.monotonic()

        def result(content: str, error: bool) -> ToolResult:
            return ToolResult(name, content, error, time.monotonic() - start)

        if name not in self.spec.tool_names:
            tools = ", ".join(self.spec.tool_names) or "none"
            return result(_error_text(f"unknown tool {name!r}; the tools are: {tools}"), True)
        if not isinstance(arguments, dict):
            return result(_error_text(f"the arguments of {name} must be an object, got {type(arguments).__name__}"),
                          True)
        outcome = run_in_thread(_tool_work(getattr(self.instance, name), arguments, name), timeout, name)
        if outcome.finished:
            text, error = outcome.result
            return result(_error_text(text) if error else text, error)
        late = f"tool {name} did not return within {timeout:g} s"
        if outcome.stopped:
            return result(_error_text(f"{late}; it was stopped"), True)
        self._left_running(name, outcome.thread, timeout)
        return result(_error_text(f"{late} and could not be stopped (it is still running)"), True)

    def _left_running(self, name: str, thread, timeout: float) -> None:
        """A call of ``name`` that could not be stopped: counted (and warned about once);
        past MAX_UNSTOPPED such threads alive at once, the run ends naming the tool."""
        label = f"{self.spec.reward_label}.{name}"
        where = stuck_at(thread, self.spec.path)
        threads = self.spec.tool_threads
        threads.left(name, label, thread, where, timeout)
        alive = threads.unstopped()
        if len(alive) <= MAX_UNSTOPPED:
            return
        tools = sorted({tool for tool, _ in alive})
        calls = (f"{len(alive)} calls of the tool {label} are" if tools == [name] else
                 f"{len(alive)} tool calls ({', '.join(f'{self.spec.reward_label}.{t}' for t in tools)}) are")
        at = f" (at {where[0]}, line {where[1]})" if where else ""
        error = EnvironmentError(
            f"{FIELD}: {calls} still running past data.tool_timeout ({timeout:g} s) and could not be stopped{at}: "
            "blocked outside Python (a wait, a C library call), each holds a thread, so the run stops here rather "
            f"than slow down. Make {label} return within data.tool_timeout (give what it waits for a timeout of its "
            "own), or raise data.tool_timeout if it is slow rather than stuck")
        error.user_location = where  # run_failed's file and line (engine/run/failures.py)
        raise error

    def reward(self) -> float | None:
        """``get_reward()`` as a finite float; None when the class has none."""
        if not self.spec.has_reward:
            return None
        def get_reward():
            value = self.instance.get_reward()
            return asyncio.run(value) if inspect.iscoroutine(value) else value

        value = _user_call(get_reward, lambda exc: self._fault(REWARD, exc))
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise EnvironmentError(f"{FIELD}: {self.spec.reward_label}.get_reward returned "
                                   f"{type(value).__name__} {value!r:.40}; it must return a number")
        if not math.isfinite(float(value)):
            raise EnvironmentError(f"{FIELD}: {self.spec.reward_label}.get_reward returned {float(value)}; "
                                   "it must return a finite number")
        return float(value)
