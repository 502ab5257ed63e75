"""Custom reward functions: ``FILE.py:FUNCTION`` in a preset's ``rewards``.

The function is called like a registry reward, with the entry's ``options`` as
keyword arguments::

    # my_rewards.py, next to the preset
    def brevity(prompts, completions, target=10, **fields):
        return [-abs(len(c) - target) / target for c in completions]

    rewards:
      - name: my_rewards.py:brevity      # logged as rewards/brevity/mean
        weight: 0.1
        options: {target: 12}            # brevity(prompts, completions, target=12, answer=[...])

A function with ``**fields`` gets every data column (``answer``, ...); one without
gets only the columns it names as parameters. It returns one number per completion
(a list, a tuple, a numpy array or a tensor); the engine refuses the wrong count, a
non-number, NaN, inf or a value beyond float32, with a message naming the function.

Each call has a time limit, 300 s by default: a function that does not return in
time ends the run with a message naming it and the line it was at. The reserved
option ``reward_timeout`` sets it (seconds; ``null`` for no limit) and is not passed
to the function::

        options: {target: 12, reward_timeout: 30}

With a limit the function runs in a worker thread so that the engine can stop waiting
for it (a function stuck in a loop is abandoned; the run fails cleanly); with
``reward_timeout: null`` it runs in the engine's own thread (for code tied to one
thread, such as a sqlite connection opened at import).

A relative file is looked up in the preset's folder first, then in the current
folder. A file is imported once per process (two components from one file share the
module); its folder is appended to ``sys.path`` so it can import its neighbours.

Nothing here imports torch. :func:`static_problems` and :func:`function_options`
read a file without running it: the workbench uses them, so the window never runs
user code.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import logging
import math
import numbers
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from engine.rewards.base import RewardError, RewardFunc, RewardTimeout
from engine.rewards.kinds import split_custom_name
from engine.rewards.time_limit import TIMEOUT_OPTION, call_with_timeout

log = logging.getLogger(__name__)

# TIMEOUT_OPTION (engine/rewards/time_limit.py) is the reserved option that sets a custom
# function's time limit; it is never passed to the function.
DEFAULT_TIMEOUT_S = 300.0

__all__ = [
    "TIMEOUT_OPTION",
    "DEFAULT_TIMEOUT_S",
    "find_reward_file",
    "load_custom_reward",
    "load_user_function",
    "read_function",
    "static_problems",
    "function_options",
    "inspect_reward_file",
    "FileInfo",
]


# ---------------------------------------------------------------------------
# Finding the file
# ---------------------------------------------------------------------------


def _candidates(file: str, base_dir) -> list[Path]:
    path = Path(file).expanduser()
    if path.is_absolute():
        return [path]
    roots = [Path(base_dir)] if base_dir is not None else []
    roots.append(Path.cwd())
    return [root / path for root in roots]


def find_reward_file(file: str, base_dir=None) -> Path | None:
    """The absolute path of a custom reward's file: ``file`` itself when absolute,
    else looked up in ``base_dir`` (the preset's folder), then in the current folder.
    None when it is in neither.

    Example:
        >>> find_reward_file("no_such_rewards.py", "/nowhere") is None
        True
    """
    for candidate in _candidates(file, base_dir):
        if candidate.is_file():
            return candidate.resolve()
    return None


def _not_found(file: str, base_dir) -> str:
    places = " and ".join(dict.fromkeys(str(c.parent) for c in _candidates(file, base_dir)))  # once each
    return f"file {file} not found (looked in {places})"


# ---------------------------------------------------------------------------
# Reading a file without running it (the workbench's checks)
# ---------------------------------------------------------------------------


@dataclass
class FileInfo:
    """What a reward file defines at module level, read from its syntax tree.

    ``functions`` maps each ``def`` to its node; ``names`` holds every other name
    bound at module level (classes, assignments, imports); ``star_import`` is True
    when ``from x import *`` makes the names unknowable.
    """

    path: Path
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    star_import: bool = False

    def defined(self) -> list[str]:
        """Public functions, for "it defines: a, b" (helpers starting with _ left out)."""
        return [n for n in self.functions if not n.startswith("_")]


def _collect(body: list[ast.stmt], info: FileInfo) -> None:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            info.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            info.names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                info.names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    info.star_import = True
                else:
                    info.names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            # Conditional definitions (if/try at module level) count too.
            for part in ("body", "orelse", "finalbody"):
                _collect(getattr(node, part, []) or [], info)
            for handler in getattr(node, "handlers", []) or []:
                _collect(handler.body, info)


def inspect_reward_file(path: Path) -> FileInfo:
    """Parse ``path`` (without running it). ValueError with the line for a syntax error.

    Example (my_rewards.py holds ``def brevity(prompts, completions, target=10): ...``):
        inspect_reward_file(Path("my_rewards.py")).defined() -> ["brevity"]
    """
    try:
        stat = Path(path).stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        cached = _PARSED.get(str(path))
        if cached is not None and cached[0] == stamp:
            return cached[1]
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ValueError(f"{path}, line {exc.lineno}: SyntaxError: {exc.msg}") from None
    info = FileInfo(Path(path))
    _collect(tree.body, info)
    if len(_PARSED) > 32:
        _PARSED.clear()
    _PARSED[str(path)] = (stamp, info)
    return info


# The workbench reads a file after every edit of the form: parse it once per version.
_PARSED: dict[str, tuple[tuple[int, int], FileInfo]] = {}


def _no_function(function: str, path: Path, defined: list[str]) -> str:
    listing = ", ".join(defined) if defined else "no public functions"
    return f"no function {function!r} in {path}; it defines: {listing}"


def _positional_count(args: ast.arguments) -> int:
    return len(args.posonlyargs) + len(args.args)


def _signature_problems(node: ast.FunctionDef | ast.AsyncFunctionDef, options: dict) -> list[tuple[str, str]]:
    args = node.args
    if isinstance(node, ast.AsyncFunctionDef):
        return [("name", f"{node.name} is `async def`; a reward function must be a plain function")]
    if _positional_count(args) < 2 and args.vararg is None:
        return [("name", f"{node.name} must take (prompts, completions, **fields): it takes "
                         f"{_positional_count(args)} positional parameter(s)")]
    if args.kwarg is not None:
        return []
    positional = args.posonlyargs + args.args
    params = [a.arg for a in positional[2:] if a not in args.posonlyargs] + [a.arg for a in args.kwonlyargs]
    unknown = [o for o in options if o not in params]
    if unknown:
        takes = ", ".join(params) if params else "no options"
        return [("options", f"{node.name} has no parameter {unknown[0]!r} (it takes {takes}, and no **fields); "
                            "remove the option or add the parameter")]
    return []


def timeout_problem(value: Any) -> str | None:
    """What is wrong with a ``reward_timeout`` value, or None when it is fine.

    Example:
        >>> timeout_problem(30), timeout_problem(None)
        (None, None)
        >>> timeout_problem(0)
        'reward_timeout must be a number of seconds > 0, or null for no limit; got 0'
    """
    if value is None:
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return None
    return f"{TIMEOUT_OPTION} must be a number of seconds > 0, or null for no limit; got {value!r}"


def _split_timeout(options: dict) -> tuple[dict, float | None, str | None]:
    """(the options passed to the function, the time limit, a problem with it)."""
    options = dict(options)
    value = options.pop(TIMEOUT_OPTION, DEFAULT_TIMEOUT_S)
    problem = timeout_problem(value)
    return options, (None if value is None or problem else float(value)), problem


def static_problems(name: str, options: dict, base_dir=None) -> list[tuple[str, str]]:
    """Problems with a custom reward found by reading its file, not running it:
    (field, message) pairs where field is ``name`` or ``options``.

    Example:
        static_problems("my_rewards.py:brevty", {}, "/work")
        -> [("name", "no function 'brevty' in /work/my_rewards.py; it defines: brevity")]
    """
    parts = split_custom_name(name)
    if parts is None:
        return []
    options, _timeout, problem = _split_timeout(options)
    if problem:
        return [("options", problem)]
    node, missing = read_function(name, base_dir)
    if missing:
        return [("name", missing)]
    return _signature_problems(node, options) if node is not None else []


def read_function(name: str, base_dir=None) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, str | None]:
    """``FILE.py:FUNCTION`` read without running it: (the function's ``def``, None), or
    (None, what is missing: the file, a syntax error, the function), or (None, None)
    when the name is bound some other way (an import, an assignment: checked when
    loaded). Shared by custom rewards and engine/rl/user_code.py.

    Example:
        read_function("my_rewards.py:brevty", "/work")
        -> (None, "no function 'brevty' in /work/my_rewards.py; it defines: brevity")
    """
    file, function = split_custom_name(name)
    path = find_reward_file(file, base_dir)
    if path is None:
        return None, _not_found(file, base_dir)
    try:
        info = inspect_reward_file(path)
    except ValueError as exc:
        return None, str(exc)
    node = info.functions.get(function)
    if node is None and not (function in info.names or info.star_import):
        return None, _no_function(function, path, info.defined())
    return node, None


def _literal(node: ast.expr | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def function_options(name: str, base_dir=None) -> dict[str, Any]:
    """The options a custom function takes, with their defaults: its parameters after
    ``prompts, completions`` that have a default (a default that is not a literal is
    shown as None). Empty when the file or function cannot be read.

    Example (``def brevity(prompts, completions, target=10, *, scale=1.0, **fields)``):
        function_options("my_rewards.py:brevity") -> {"target": 10, "scale": 1.0}
    """
    parts = split_custom_name(name)
    path = find_reward_file(parts[0], base_dir) if parts else None
    if path is None:
        return {}
    try:
        node = inspect_reward_file(path).functions.get(parts[1])
    except ValueError:
        return {}
    if node is None:
        return {}
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    found = {a.arg: _literal(d) for a, d in list(zip(positional, defaults))[2:] if d is not None}
    found.update({a.arg: _literal(d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return found


# ---------------------------------------------------------------------------
# Loading and calling (the engine)
# ---------------------------------------------------------------------------

_MODULES: dict[str, tuple[int, ModuleType]] = {}


def import_user_file(file: str, base_dir: str | Path | None, where: str,
                     error: type[Exception] = RewardError) -> tuple[ModuleType, Path]:
    """The user's Python file ``file`` (found as find_reward_file finds it) imported, and
    its path; ``error`` prefixed with ``where`` when it is missing or fails to import.
    What a ``FILE.py:NAME`` field loads before it looks up NAME (a function, an
    environment's class)."""
    path = find_reward_file(file, base_dir)
    if path is None:
        raise error(f"{where}: {_not_found(file, base_dir)}")
    return _import(path, where, error), path


def _import(path: Path, where: str, error: type[Exception] = RewardError) -> ModuleType:
    """Import the file at ``path`` (cached while the file is unchanged); ``error`` for a
    file that cannot be imported or fails while importing."""
    key = str(path)
    stamp = path.stat().st_mtime_ns
    cached = _MODULES.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    digest = hashlib.sha1(key.encode()).hexdigest()[:8]
    module_name = f"rl_user_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, key)
    if spec is None or spec.loader is None:
        raise error(f"{where}: {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))  # so the file can import its neighbours
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(module_name, None)
        raise error(f"{where}: {exc.filename}, line {exc.lineno}: SyntaxError: {exc.msg}") from exc
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module_name, None)
        line = fault_line(exc, path)
        at = f" (at {path}, line {line})" if line else ""
        raise error(f"{where}: importing {path} failed with {type(exc).__name__}: {exc}{at}") from exc
    _MODULES[key] = (stamp, module)
    return module


def fault_line(exc: BaseException, path: str | Path) -> int | None:
    """The line of the innermost frame of ``exc``'s traceback in the file ``path`` (a
    user's reward, loss or estimator file), None when the fault is not in it."""
    lines = [line for frame, line in traceback.walk_tb(exc.__traceback__) if frame.f_code.co_filename == str(path)]
    return lines[-1] if lines else None


def def_line(fn: Any, path: str | Path) -> int | None:
    """The line ``fn`` is defined at, when it is defined in the file ``path``."""
    code = getattr(fn, "__code__", None)
    return code.co_firstlineno if code is not None and code.co_filename == str(path) else None


def _defined_in(module: ModuleType) -> list[str]:
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and inspect.isfunction(value) and value.__module__ == module.__name__]


def load_user_function(name: str, *, base_dir=None, where: str | None = None, what: str = "a reward function",
                       error: type[Exception] = RewardError) -> tuple[Any, Path]:
    """Import ``FILE.py:FUNCTION`` and return (the function, its file's absolute path):
    the loader shared by custom rewards and a preset's own policy loss or advantage
    estimator (engine/rl/user_code.py). The file is found as :func:`find_reward_file`
    finds it and imported once while unchanged. A missing file or function, a failed
    import, something not callable or an ``async def`` raise ``error`` prefixed with
    ``where``; ``what`` names the thing in the async message.

    Example (my_losses.py next to the preset holds ``def clip_cov(...)``):
        load_user_function("my_losses.py:clip_cov", base_dir="/work/presets",
                           where="algorithm.loss_type", what="a policy loss", error=ValueError)
        -> (<function clip_cov>, PosixPath('/work/presets/my_losses.py'))
    """
    where = where or name
    parts = split_custom_name(name)
    if parts is None:
        raise error(f"{where}: {name!r} is not FILE.py:FUNCTION")
    file, function = parts
    module, path = import_user_file(file, base_dir, where, error)
    if not hasattr(module, function):
        raise error(f"{where}: {_no_function(function, path, _defined_in(module))}")
    fn = getattr(module, function)
    if not callable(fn):
        raise error(f"{where}: {function!r} in {path} is a {type(fn).__name__}, not a function")
    if inspect.iscoroutinefunction(fn):
        raise error(f"{where}: {function} is `async def`; {what} must be a plain function")
    return fn, path


def load_custom_reward(name: str, options: dict, *, base_dir=None, where: str | None = None) -> RewardFunc:
    """Import ``FILE.py:FUNCTION`` and return it as a reward component.

    The returned callable passes the data fields the function takes and ``options``
    as keyword arguments, and converts an array result to a list; it carries
    ``reward_source`` (the name as written) and ``source_file`` (the absolute path),
    which combine_rewards uses to name the function and the line of a fault.
    Problems raise RewardError prefixed with ``where`` (``rewards[2] (my_rewards.py:brevity)``).

    Example (my_rewards.py: ``def brevity(prompts, completions, target=10, **fields):
    return [-abs(len(c) - target) for c in completions]``):
        reward = load_custom_reward("my_rewards.py:brevity", {"target": 2})
        reward(["p"], ["abc"], answer=["x"]) -> [-1]
    """
    where = where or name
    parts = split_custom_name(name)
    if parts is None:
        raise RewardError(f"{where}: {name!r} is not FILE.py:FUNCTION")
    options, timeout, problem = _split_timeout(options)
    if problem:
        raise RewardError(f"{where}: options.{problem}")
    fn, path = load_user_function(name, base_dir=base_dir, where=where)
    function = parts[1]
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None  # a builtin or C function: called as is
    takes_all, names = True, set()
    if signature is not None:
        try:
            signature.bind_partial([], [], **options)
        except TypeError as exc:
            shown = ", ".join(["prompts", "completions", *(f"{k}={v!r}" for k, v in options.items())])
            raise RewardError(
                f"{where}: {function}{signature} cannot be called as {function}({shown}): {exc}; "
                "a reward function takes (prompts, completions, **fields) plus its options"
            ) from None
        params = signature.parameters.values()
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        names = {p.name for p in params}
        for option in options:
            if option not in names:  # a typo would vanish into **fields: say so in the log
                log.warning("%s: option %r is not a parameter of %s; it is passed in its **kwargs",
                            where, option, function)
    options = dict(options)

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        clash = sorted(set(fields) & set(options))
        if clash:
            raise RewardError(
                f"option {clash[0]!r} has the name of a data field; rename the option "
                "(options and data fields are both passed as keyword arguments)"
            )
        passed = fields if takes_all else {k: v for k, v in fields.items() if k in names}
        values = call_with_timeout(fn, (prompts, completions), {**passed, **options}, timeout, path, function)
        tolist = getattr(values, "tolist", None)
        return tolist() if callable(tolist) and not isinstance(values, (str, bytes)) else values

    reward.reward_source = name
    reward.source_file = str(path)
    reward.source_line = def_line(fn, path)
    reward.timeout = timeout
    reward.__name__ = function
    reward.__qualname__ = function
    return reward
