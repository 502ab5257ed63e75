"""Building a preset's rewards and combining their values.

:func:`build_reward_components` turns the preset's ``rewards`` list into the
``(label, weight, reward)`` triples that :func:`combine_rewards` sums, checking every
component's output (one finite number per completion) and naming the component, and
for a user's function its file and line, when one fails.

This module does not import torch: the reward model's module (engine/rewards/model.py)
does, and is imported only when a preset uses one.
"""

from __future__ import annotations

import math
import numbers
from typing import Sequence

from engine.rewards.base import MissingFieldError, RewardError, RewardFunc, RewardTimeout
from engine.rewards.builtin import build_reward
from engine.rewards.custom import fault_line, load_custom_reward
from engine.rewards.kinds import component_label, reward_kind

__all__ = ["describe_component", "combine_rewards", "build_reward_components", "FLOAT32_MAX"]

FLOAT32_MAX = 3.4028234663852886e38
"""torch.finfo(torch.float32).max (written out: this module does not import torch). The
trainer holds rewards in float32: a larger finite value would become inf there."""


def describe_component(name: str, reward: object) -> str:
    """How messages name a component: its label, plus where it comes from when that is
    not the registry (a custom function's ``FILE.py:FUNCTION``, a reward model's id).

    Example:
        >>> from engine.rewards.builtin import exact_match
        >>> describe_component("exact", exact_match())
        "reward component 'exact'"
    """
    source = getattr(reward, "reward_source", None)
    return f"reward component {name!r}" + (f" ({source})" if source and source != name else "")


def _as_list(values: object) -> object:
    """numpy arrays and torch tensors (anything with ``tolist``) as plain lists."""
    tolist = getattr(values, "tolist", None)
    if callable(tolist) and not isinstance(values, (str, bytes)):
        values = tolist()
    return values


def _is_finite(value: numbers.Real) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float is finite; the size check refuses it
        return True


def _checked_values(name: str, values: object, size: int) -> list[float]:
    """Validate one component's output: ``size`` finite real numbers. ``name`` is how
    the component is named in messages (see :func:`describe_component`)."""
    values = _as_list(values)
    if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
        raise RewardError(
            f"{name} returned {type(values).__name__}; "
            f"it must return a list of {size} floats, one per completion."
        )
    if len(values) != size:
        raise RewardError(
            f"{name} returned {len(values)} values for {size} "
            f"completions; it must return exactly one float per completion."
        )
    checked = []
    for index, value in enumerate(values):
        if not isinstance(value, numbers.Real) or not _is_finite(value):
            raise RewardError(
                f"{name} returned {value!r} at index {index}; "
                f"every reward must be a finite real number (no None, NaN or inf)."
            )
        if abs(value) > FLOAT32_MAX:
            raise RewardError(
                f"{name} returned {value!r} at index {index}; too large: training holds rewards "
                f"in float32, where it would be inf; keep every reward within +-{FLOAT32_MAX:.4g}."
            )
        checked.append(float(value))
    return checked


def _checked_totals(totals: list[float], per_component: dict[str, list[float]]) -> list[float]:
    """The weighted sums, refused when one does not fit float32 (each value fits, but a
    large weight or several large values together can overflow): naming the values."""
    for index, total in enumerate(totals):
        if not abs(total) <= FLOAT32_MAX:
            parts = ", ".join(f"{name}={values[index]!r}" for name, values in per_component.items())
            raise RewardError(
                f"the weighted sum of the rewards at index {index} is {total!r} ({parts}); too large: "
                f"training holds rewards in float32; keep the weighted sum within +-{FLOAT32_MAX:.4g}."
            )
    return totals


def _fault_location(exc: BaseException, reward: object) -> str:
    """`` at FILE, line N``: the innermost frame of the traceback in a custom reward's
    own file, or "" when the reward has no file or the fault is not in it."""
    source_file = getattr(reward, "source_file", None)
    if not source_file:
        return ""
    line = fault_line(exc, source_file)
    return f" (at {source_file}, line {line})" if line else ""


def combine_rewards(
    components: list[tuple[str, float, RewardFunc]],
    prompts: list[str],
    completions: list[str],
    fields: dict[str, list],
) -> tuple[list[float], dict[str, list[float]]]:
    """Weighted sum of reward components, plus each component's raw values.

    ``components`` are ``(name, weight, reward)`` triples; names must be unique
    because they key the per-component output (used for logging).

    A component that raises is reported as a RewardError naming it (and, for a
    custom function, its ``FILE.py:FUNCTION`` and the file and line of the fault),
    raised ``from`` the original exception so its traceback is kept. A component
    that returns the wrong number of values, a non-number, NaN, inf or a value too
    large for float32 is refused
    with a RewardError naming it (for a custom function, ``user_location`` is the
    file and line of its ``def``). A custom function that does not return within its
    time limit raises RewardTimeout naming it and where it was.

    Example:
        >>> from engine.rewards.builtin import exact_match, length_penalty
        >>> components = [("exact", 1.0, exact_match()), ("length", 0.5, length_penalty(target=2, per_char=1.0))]
        >>> total, parts = combine_rewards(components, ["p", "p"], [" 12", "abcd"], {"answer": ["12", "12"]})
        >>> total
        [0.5, -1.0]
        >>> parts["length"]
        [-1.0, -2.0]
    """
    size = len(prompts)
    if len(completions) != size:
        raise RewardError(
            f"got {len(completions)} completions for {size} prompts; they must be aligned."
        )
    for field_name, column in fields.items():
        if len(column) != size:
            raise RewardError(
                f"field {field_name!r} has {len(column)} values for {size} prompts; "
                f"every field must be aligned with the prompts."
            )
    totals = [0.0] * size
    per_component: dict[str, list[float]] = {}
    for name, weight, reward in components:
        described = describe_component(name, reward)
        if name in per_component:
            raise RewardError(f"reward component name {name!r} is used twice; names must be unique.")
        if not isinstance(weight, numbers.Real) or not math.isfinite(weight):
            raise RewardError(f"{described} has weight {weight!r}; use a finite number.")
        try:
            raw = reward(list(prompts), list(completions), **fields)
        except RewardTimeout as exc:
            error = RewardTimeout(f"{described} {exc}")
            error.user_location = exc.user_location
            raise error from exc
        except Exception as exc:
            # Name the component: with several rewards in a preset, the bare
            # exception would not say which one broke.
            error = MissingFieldError if isinstance(exc, MissingFieldError) else RewardError
            raise error(
                f"{described} failed with {type(exc).__name__}: {exc}{_fault_location(exc, reward)}"
            ) from exc
        try:
            values = _checked_values(described, raw, size)
        except RewardError as exc:
            # A custom function's bad result: point at the function (its `def` line).
            source_file, source_line = getattr(reward, "source_file", None), getattr(reward, "source_line", None)
            if source_file and source_line:
                exc.user_location = (source_file, source_line)
            raise
        per_component[name] = values
        totals = [t + weight * v for t, v in zip(totals, values)]
    return _checked_totals(totals, per_component), per_component


def build_reward_components(rewards_cfg, *, device=None, base_dir=None) -> list[tuple[str, float, RewardFunc]]:
    """The preset's ``rewards`` list as (label, weight, reward) triples for combine_rewards.

    ``device`` is where reward models run (a torch.device or a string like ``"cpu"``;
    None: CUDA if available); ``base_dir`` is the folder relative paths are resolved
    against first (the preset file's folder), then the current folder. Registry rewards
    are built here; a ``reward_model`` is loaded (once per model, device and dtype);
    a custom function's file is imported. Problems name the entry, e.g.
    ``rewards[2] (my_rewards.py:brevity): no function 'brevity' in /abs/my_rewards.py;
    it defines: a, b``.

    Example:
        rewards: [{name: exact_match}, {name: my_rewards.py:brevity, weight: 0.1}]
        -> [("exact_match", 1.0, <exact_match>), ("brevity", 0.1, <brevity, wrapped>)]
    """
    components = []
    for index, cfg in enumerate(rewards_cfg):
        where = f"rewards[{index}] ({cfg.name})"
        kind = reward_kind(cfg.name)
        if kind == "registry":
            reward = build_reward(cfg.name, **cfg.options)
        elif kind == "reward_model":
            from engine.rewards.model import reward_model_reward  # imports torch

            reward = reward_model_reward(**cfg.options, device=device, base_dir=base_dir, where=where)
        else:
            reward = load_custom_reward(cfg.name, cfg.options, base_dir=base_dir, where=where)
        components.append((component_label(cfg.name, getattr(cfg, "label", None)), cfg.weight, reward))
    return components
