"""A preset's own policy loss or advantage estimator: ``FILE.py:FUNCTION`` in
``algorithm.loss_type`` or ``algorithm.advantage_estimator``, as a custom reward is
in ``rewards`` (docs/research-in-a-file.md)::

    # my_advantages.py, next to the preset
    def median_baseline(rewards, mask, *, num_generations):
        grouped = rewards.view(-1, num_generations)                  # (P, G)
        return (grouped - grouped.median(dim=1, keepdim=True).values).reshape(-1)   # (B,)

    algorithm:
      advantage_estimator: my_advantages.py:median_baseline

The file is found and imported by the custom rewards' loader
(engine.rewards.custom.load_user_function: the preset's folder first, then the current
one). :func:`load_entry` is the registries' hook (engine.rl.registry.Registry.resolve):
it checks the function's signature against its kind's contract (:data:`CONTRACTS`),
with the preset field in the message, and returns it as a registry ``Entry`` whose
function is guarded: a fault inside it, or an output of the wrong shape, raises
:class:`UserFunctionError` naming the field, the function, and the file and line
(``user_location``, which run_failed reports). A surrogate's flags come back under the
function's name (``clip_cov/cov_clipped``), so its metrics are logged under it. The
function is given copies of the engine's tensors (an estimator that zeroes ``rewards``
in place leaves the logged reward alone), and the first NaN or inf it returns in a step
is noted (:func:`first_nonfinite`): the trainer skips such a step as any non-finite one,
and its warning, alarm and abort message name the function.

:func:`try_user_functions` is ``rl-engine validate``'s check: each such function run
once on a tiny synthetic batch (CPU tensors, no model), its output's shape and
finiteness said in one line.

Torch is imported where a function is run. Which preset fields name a user's function,
and whether their files exist, is engine/rl/user_files.py's (torch-free: the preset's
paths, the run's start-up checks and the window read it).
"""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from engine.rewards.custom import def_line, fault_line, load_user_function
from engine.foundation.registry import Entry, Registry, first_line, split_file_name
from engine.rl.user_files import user_function_fields

__all__ = ["Contract", "CONTRACTS", "NonFinite", "UserFunctionError", "signature_problem", "resolve", "load_entry",
           "try_user_functions", "first_nonfinite", "forget_nonfinite"]


@dataclass(frozen=True)
class Contract:
    """How the engine calls one kind of user function: the preset ``field`` that names it,
    ``what`` it is called in messages, its positional ``tensors`` and what it ``returns``."""

    field: str
    what: str
    tensors: tuple[str, ...]
    returns: str


#: Keyed by the registry's kind (engine/rl/catalog.py): a file ``loss_type`` holds a
#: surrogate (the engine masks and aggregates its per-token loss, and adds the KL term).
CONTRACTS: dict[str, Contract] = {
    "policy surrogate": Contract(
        "algorithm.loss_type", "a policy loss", ("logprobs", "old_logprobs", "advantages", "mask"),
        "the per-token loss (B, T), or (per_token_loss (B, T), ratio (B, T), flags {name: bool (B, T)})"),
    "advantage estimator": Contract(
        "algorithm.advantage_estimator", "an advantage estimator", ("rewards", "mask"),
        "advantages, (B,) one per completion or (B, T) one per token"),
}

_METRIC_NAME = re.compile(r"^[\w.\-/]+$")


class UserFunctionError(ValueError):
    """A user's loss or estimator cannot be loaded, or failed, or returned the wrong
    thing. ``user_location`` is (file, line) in the user's file, or None."""

    user_location: tuple[str, int] | None = None


# ---------------------------------------------------------------------------- signature


def _called_with(contract: Contract, given: tuple[str, ...], section_fields: tuple[str, ...] = ()) -> str:
    options = f", *, {', '.join(given)}" if given else ""
    if section_fields:
        options += f"{',' if given else ', *'} or any field of the {contract.field.partition('.')[0]} section"
    return f"({', '.join(contract.tensors)}{options})"


def signature_problem(fn: Callable, contract: Contract, given: tuple[str, ...],
                      section_fields: tuple[str, ...] = ()) -> str | None:
    """What keeps ``fn`` from being called as ``contract`` says (its tensors
    positionally, then only the keyword-only options it names out of ``given``), or
    None when it fits (or has no readable signature).

    e.g. def clip_cov(x, y): ... against the policy loss contract
         -> "takes (x, y) but a policy loss is called with (logprobs, old_logprobs,
            advantages, mask, *, log_ratio, epsilon_low, epsilon_high, or any field of the
            algorithm section)"
    `section_fields`: the section's fields, options a function may name besides `given`.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin or C function: its call is its own check
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star_args = any(p.kind is p.VAR_POSITIONAL for p in params)
    n = len(contract.tensors)
    called = f"{contract.what} is called with {_called_with(contract, given, section_fields)}"
    gives = ", ".join(given) + (" and the fields of the section" if section_fields else "")
    given = (*given, *section_fields)
    extra_required = [p.name for p in positional[n:] if p.default is p.empty]
    if (len(positional) < n and not star_args) or extra_required:
        return f"takes {signature} but {called}"
    as_positional = [p.name for p in positional[n:] if p.name in given]
    if as_positional:
        return (f"takes {as_positional[0]!r} as a positional parameter, but the engine gives options by keyword "
                f"only: put `*,` before it ({called})")
    unknown = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty and p.name not in given]
    if unknown:
        return (f"asks for option {unknown[0]!r}, which the engine does not give {contract.what}; it gives "
                f"{gives or 'none'}. Give {unknown[0]!r} a default, or drop it")
    return None


# ------------------------------------------------------------------------------ loading


def _location_in(exc: BaseException, path: Path) -> tuple[str, int] | None:
    """(file, line) of the innermost frame of ``exc``'s traceback in ``path``, the user's file."""
    line = fault_line(exc, path)
    return (str(path), line) if line else None


def _def_line(fn: Callable, path: Path) -> tuple[str, int] | None:
    line = def_line(fn, path)
    return (str(path), line) if line else None


def _error(message: str, location: tuple[str, int] | None) -> UserFunctionError:
    at = f" (at {location[0]}, line {location[1]})" if location else ""
    error = UserFunctionError(f"{message}{at}")
    error.user_location = location
    return error


def _shape(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f"shape {tuple(shape)}" if shape is not None else f"a {type(value).__name__}"


def _type_name(value: Any) -> str:
    """``numpy.ndarray``, ``list``: the type of a value, with its module unless a builtin."""
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module.split('.')[0]}.{kind.__qualname__}"


def _not_a_tensor(value: Any) -> str:
    """What a value that should have been a torch tensor is: "a numpy.ndarray of shape (8, 6)"."""
    shape = getattr(value, "shape", None)
    return f"a {_type_name(value)}" + (f" of shape {tuple(shape)}" if shape is not None else "")


def _checked_surrogate(out: Any, tensors: tuple, prefix: str) -> tuple:
    """A surrogate's output as (per_token_loss, ratio, flags), flags under ``prefix``;
    ValueError saying what is wrong. A bare per-token loss gets the token-level ratio
    (what the inspector shows) and no flags."""
    import torch

    logprobs, old_logprobs = tensors[0], tensors[1]
    expected = tuple(logprobs.shape)
    if isinstance(out, torch.Tensor):
        out = (out, torch.exp(logprobs.detach() - old_logprobs), {})
    if not (isinstance(out, tuple) and len(out) == 3):
        if getattr(out, "shape", None) is not None:  # an array, but not torch's (numpy, say)
            raise ValueError(f"returned {_not_a_tensor(out)}, not a torch tensor; it must return the per-token "
                             f"loss as a torch tensor (B, T) = {expected} computed from logprobs (so that it has a "
                             "gradient), or (per_token_loss, ratio, flags)")
        raise ValueError(f"returned {_shape(out)}; it must return the per-token loss (B, T) = {expected}, "
                         "or (per_token_loss, ratio, flags)")
    loss, ratio, flags = out
    for name, value in (("per-token loss", loss), ("ratio", ratio)):
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"returned a {name} that is {_not_a_tensor(value)}, not a torch tensor; it must be a "
                             f"torch tensor of shape {expected} (rows, tokens)"
                             + (" computed from logprobs (so that it has a gradient)" if name != "ratio" else ""))
        if tuple(value.shape) != expected:
            raise ValueError(f"returned a {name} of {_shape(value)}; expected shape {expected} (rows, tokens)")
    if logprobs.requires_grad and not loss.requires_grad:
        raise ValueError("returned a per-token loss with no gradient: compute it from logprobs (not detached)")
    if not isinstance(flags, dict):
        raise ValueError(f"returned flags as a {type(flags).__name__}; flags must be a dict {{name: bool (B, T)}}")
    named = {}
    for key, flag in flags.items():
        if not (isinstance(key, str) and _METRIC_NAME.match(key)):
            raise ValueError(f"returned a flag named {key!r}; a flag name is letters, digits, _ . - or /")
        if not isinstance(flag, torch.Tensor) or tuple(flag.shape) != expected:
            raise ValueError(f"returned flag {key!r} of {_shape(flag)}; expected shape {expected} (rows, tokens)")
        named[key if key.startswith(prefix) else prefix + key] = flag.detach().bool()
    return loss, ratio.detach(), named


def _checked_advantages(out: Any, tensors: tuple) -> Any:
    """An estimator's output as a float tensor of (B,) or (B, T); ValueError otherwise."""
    import torch

    rewards, mask = tensors[0], tensors[1]
    if not isinstance(out, torch.Tensor):
        try:
            out = torch.as_tensor(out, device=rewards.device)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"returned {_shape(out)}; it must return a tensor of advantages") from None
    if tuple(out.shape) not in (tuple(rewards.shape), tuple(mask.shape)):
        raise ValueError(f"returned advantages of shape {tuple(out.shape)}; expected {tuple(rewards.shape)} "
                         f"(one per completion) or {tuple(mask.shape)} (one per token)")
    if not out.is_floating_point():
        out = out.float()
    return out.to(rewards.dtype) if out.dtype != rewards.dtype else out


@dataclass(frozen=True)
class NonFinite:
    """A user's function returned NaN or inf: the preset ``field`` that names it, the
    ``message`` ("algorithm.loss_type: my_losses.py:f returned a per-token loss with 48
    non-finite value(s), the first nan at [0, 0]") and its ``def`` line (``location``)."""

    field: str
    message: str
    location: tuple[str, int] | None


# The first non-finite output of a user's function since forget_nonfinite(): a trainer
# forgets at the start of each step and, when the step is skipped for a NaN or inf loss,
# names the function in the warning, the alarm and the abort message (first_nonfinite).
_NONFINITE: list[NonFinite] = []


def forget_nonfinite() -> None:
    _NONFINITE.clear()


def first_nonfinite() -> NonFinite | None:
    """The first user function that returned NaN or inf since forget_nonfinite(), or None."""
    return _NONFINITE[0] if _NONFINITE else None


def _copied(value: Any) -> Any:
    """A tensor's copy (autograd follows a clone), so that user code editing its inputs in
    place (``rewards.zero_()``) cannot change what the engine logs or trains on."""
    import torch

    return value.clone() if isinstance(value, torch.Tensor) else value


def _guarded(fn: Callable, path: Path, value: str, contract: Contract) -> Callable:
    """``fn`` with its faults and wrong outputs raised as UserFunctionError naming the
    field and the function, with the file and line (the fault's, or the ``def``'s). It is
    given copies of the tensors, and a NaN or inf in what it returns is noted
    (first_nonfinite): the step is then skipped as for any non-finite loss, and said to be
    this function's doing."""
    function = split_file_name(value)[1]
    described = f"{contract.field}: {value}"
    surrogate = contract.tensors[0] == "logprobs"

    @functools.wraps(fn)  # keeps the signature: the registry reads the options from it
    def guarded(*tensors, **options):
        try:
            out = fn(*map(_copied, tensors), **{k: _copied(v) for k, v in options.items()})
        except (Exception, SystemExit) as exc:
            what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else (
                f"failed with {type(exc).__name__}: {exc}")
            raise _error(f"{described} {what}", _location_in(exc, path)) from exc
        try:
            checked = _checked_surrogate(out, tensors, f"{function}/") if surrogate else \
                _checked_advantages(out, tensors)
        except ValueError as exc:
            raise _error(f"{described} {exc}", _def_line(fn, path)) from None
        if not _NONFINITE:
            bad = _nonfinite(checked[0] if surrogate else checked)
            if bad:
                what = "a per-token loss" if surrogate else "advantages"
                _NONFINITE.append(NonFinite(contract.field, f"{described} returned {what} with {bad}",
                                            _def_line(fn, path)))
        return checked

    return guarded


def _declares(registry: Registry, fn: Callable, function: str) -> Any:
    """A user's function's declarations: the kind's defaults, and what its signature says
    (an estimator reading ``num_generations`` works on groups; ``scale_rewards``, reads it;
    ``baseline_rewards``, needs each prompt's greedy completion's reward).
    A surrogate's metrics are whatever flags it returns (None: every one), its
    ``FUNCTION/clipped`` flag, when it returns one, what the inspector marks."""
    from engine.rl.catalog import Estimator, Surrogate

    declares = registry.file_declares
    if isinstance(declares, Surrogate):
        return Surrogate(metrics=None, inspector_flag=f"{function}/clipped")
    if isinstance(declares, Estimator):
        options = inspect.signature(fn).parameters
        # per_token: its output's shape is known only once it runs; the playground, which
        # scores texts without tokens, then leaves its advantages out.
        return Estimator(per_token=True, uses_scale_rewards="scale_rewards" in options,
                         needs_group="num_generations" in options, greedy_baseline="baseline_rewards" in options)
    return declares


def resolve(registry: Registry, value: str, base_dir: str | Path | None = None) -> Entry:
    """The entry a preset's ``value`` names in ``registry``: a registered one, or the user's
    function ``FILE.py:FUNCTION`` (relative to ``base_dir``, the preset's folder) loaded as
    an entry of the registry's ``file_kind`` (the registry itself when unset). The engine's
    one way from a preset value to a function.

    e.g. resolve(ESTIMATORS, "rloo") -> the built-in entry;
         resolve(SURROGATES, "my_losses.py:clip_cov", preset_dir) -> clip_cov, signature checked
    """
    if registry.files and split_file_name(value) and value not in registry:
        return load_entry(registry.file_kind or registry, value, base_dir)
    return registry.resolve(value)


def load_entry(registry: Registry, value: str, base_dir: str | Path | None = None) -> Entry:
    """``FILE.py:FUNCTION`` as an entry of ``registry`` (the registries' hook): the file
    imported, the signature checked against :data:`CONTRACTS`, the function guarded.
    UserFunctionError naming the preset field for a missing file or function, a failed
    import or a signature that does not fit.

    Example (my_losses.py beside the preset: ``def clip_cov(x, y): ...``):
        load_entry(SURROGATES, "my_losses.py:clip_cov", "/work/presets")
        -> UserFunctionError: algorithm.loss_type: my_losses.py:clip_cov takes (x, y) but a
           policy loss is called with (logprobs, old_logprobs, advantages, mask, *, log_ratio, ...)
    """
    key = (registry.kind, value, str(base_dir))
    cached = _ENTRIES.get(key)
    if cached is not None and _stamp(cached[1].origin) == cached[0]:
        return cached[1]  # the trainer resolves its loss every micro-batch
    contract = CONTRACTS.get(registry.kind)
    if contract is None:
        raise UserFunctionError(f"a {registry.kind} cannot be a function in a file; use one of: "
                                f"{', '.join(registry.names())}")
    fn, path = load_user_function(value, base_dir=base_dir, where=contract.field, what=contract.what,
                                  error=UserFunctionError)
    # the options the engine computes, and the fields of the section (catalog.offer_section_fields)
    problem = signature_problem(fn, contract, registry.given, registry.section_fields)
    if problem:
        raise _error(f"{contract.field}: {value} {problem}", _def_line(fn, path))
    function = split_file_name(value)[1]
    entry = Entry(name=value, help=first_line(fn.__doc__), target=_guarded(fn, path, value, contract),
                  declares=_declares(registry, fn, function), origin=str(path))
    _ENTRIES[key] = (_stamp(entry.origin), entry)
    return entry


# (kind, value, base_dir) -> (the file's modification time when loaded, the entry)
_ENTRIES: dict[tuple[str, str, str], tuple[int | None, Entry]] = {}


def _stamp(path: str) -> int | None:
    try:
        return Path(path).stat().st_mtime_ns
    except OSError:
        return None


# --------------------------------------------------------------- validate's synthetic run


def _synthetic_batch(num_generations: int, seed: int = 0) -> dict:
    """Two prompts' groups of ``num_generations`` completions, 6 token positions with
    lengths 6, 4, 2, 6, ... (padding after), rewards in {0, 0.5, 1} with ties; logprobs
    with a gradient, old logprobs a little off them (equal at padding, as the engine
    makes them), advantages centred per group as (B, 1)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    B, T = 2 * num_generations, 6
    lengths = torch.tensor([6 - 2 * (i % 3) for i in range(B)])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()  # (B, T)
    rewards = torch.randint(0, 3, (B,), generator=generator).float() / 2  # (B,)
    logprobs = (-torch.rand(B, T, generator=generator) * 3).requires_grad_()  # (B, T)
    old = logprobs.detach() + 0.2 * torch.randn(B, T, generator=generator) * mask
    grouped = rewards.view(-1, num_generations)
    advantages = (grouped - grouped.mean(dim=1, keepdim=True)).reshape(B, 1)  # (B, 1)
    return {"rewards": rewards, "mask": mask, "logprobs": logprobs, "old_logprobs": old,
            "advantages": advantages}


def _nonfinite(tensor) -> str | None:
    import torch

    bad = ~torch.isfinite(tensor.detach())
    if not bad.any():
        return None
    index = tuple(int(i) for i in bad.nonzero()[0])
    return f"{int(bad.sum())} non-finite value(s), the first {float(tensor.detach()[index])} at {list(index)}"


def _try_surrogate(entry: Entry, batch: dict, algorithm) -> str:
    """Run a surrogate on the batch; a line saying what it returned, or UserFunctionError."""
    from engine.rl.catalog import IMPORTANCE_LEVELS, surrogate_options

    log_ratio = IMPORTANCE_LEVELS[algorithm.importance_sampling_level](batch["logprobs"], batch["old_logprobs"],
                                                                       batch["mask"])
    # the options a run gives it (the algorithm section's fields and the clip range)
    loss, _ratio, flags = entry.call(batch["logprobs"], batch["old_logprobs"], batch["advantages"], batch["mask"],
                                     log_ratio=log_ratio, **surrogate_options(algorithm))
    bad = _nonfinite(loss)
    if bad:
        raise _error(f"returned a per-token loss with {bad}", None)
    (loss * batch["mask"]).sum().backward()
    bad = _nonfinite(batch["logprobs"].grad)
    if bad:
        raise _error(f"gave a gradient with {bad}", None)
    metrics = f"; metrics {', '.join(flags)}" if flags else ""
    return f"per-token loss {tuple(loss.shape)}, finite, with a finite gradient{metrics}"


def _try_estimator(entry: Entry, batch: dict, algorithm) -> str:
    # baseline_rewards: each group's first reward, standing in for its greedy completion's (ReMax)
    baselines = batch["rewards"].view(-1, algorithm.num_generations)[:, :1].expand(-1, algorithm.num_generations)
    # the options a run gives it: the algorithm section's fields
    advantages = entry.call(batch["rewards"], batch["mask"], baseline_rewards=baselines.reshape(-1),
                            **algorithm.model_dump())
    bad = _nonfinite(advantages)
    if bad:
        raise _error(f"returned advantages with {bad}", None)
    per = "one per completion" if advantages.dim() == 1 else "one per token"
    return f"advantages {tuple(advantages.shape)} ({per}), finite"


def try_user_functions(algorithm, base_dir: str | Path | None) -> tuple[list[str], list[tuple[str, str]]]:
    """``rl-engine validate``'s check of a preset's own loss and estimator: each loaded
    (signature checked) and run once on a tiny synthetic batch on the CPU. Returns
    (a line per function that passed, (field, message) per one that did not).

    e.g. advantage_estimator "my_advantages.py:median_baseline", num_generations 4
         -> (["algorithm.advantage_estimator: my_advantages.py:median_baseline ran on a synthetic
              batch of 8 completions x 6 tokens: advantages (8,) (one per completion), finite"], [])
    """
    passed, failed = [], []
    for field, value, registry in user_function_fields(algorithm):
        try:
            entry = resolve(registry, value, base_dir)
        except UserFunctionError as exc:
            failed.append((field, str(exc).removeprefix(f"{field}: ")))
            continue
        batch = _synthetic_batch(algorithm.num_generations)
        kind = CONTRACTS[(registry.file_kind or registry).kind]
        run = _try_surrogate if kind.tensors[0] == "logprobs" else _try_estimator
        try:
            what = run(entry, batch, algorithm)
        except UserFunctionError as exc:
            message = str(exc).removeprefix(f"{field}: ")
            if not message.startswith(value):  # non-finite output: point at the function's def
                fn = entry.function.__wrapped__
                message = str(_error(f"{value} {message}", _def_line(fn, Path(entry.origin))))
            failed.append((field, message))
            continue
        B, T = batch["mask"].shape
        passed.append(f"{field}: {value} ran on a synthetic batch of {B} completions x {T} tokens: {what}")
    return passed, failed
