"""Building a preset's rewards and combining their values.

:func:`build_reward_components` turns the preset's ``rewards`` list into the
``(label, weight, reward)`` triples that :func:`combine_rewards` sums, checking every
component's output (one finite number per completion) and naming the component, and
for a user's function its file and line, when one fails. A *step component* (one that
scores each step of a completion, engine/rewards/steps.py) counts with the mean of its
step scores; :func:`score_rewards_with_steps` also returns the steps themselves.

This module does not import torch: the reward models' modules (engine/rewards/model.py,
process_model.py) do, and are imported only when a preset uses one.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Sequence

from engine.rewards.base import MissingFieldError, RewardError, RewardFunc, RewardTimeout
from engine.rewards.builtin import build_reward
from engine.rewards.custom import fault_line, load_custom_reward
from engine.rewards.kinds import component_label, reward_kind
from engine.rewards.steps import (
    FLOAT32_MAX,
    StepScore,
    checked_step_scores,
    outcome_as_step,
    returns_steps,
    step_mean,
)

__all__ = [
    "describe_component",
    "combine_rewards",
    "score_rewards_with_steps",
    "build_reward_components",
    "FLOAT32_MAX",
]


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


def _checked_list(name: str, values: object, size: int) -> Sequence:
    """One component's output as a sequence of ``size`` items (not yet checked)."""
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
    return values


def _checked_values(name: str, values: object, size: int) -> list[float]:
    """Validate one component's output: ``size`` finite real numbers. ``name`` is how
    the component is named in messages (see :func:`describe_component`)."""
    values = _checked_list(name, values, size)
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


def _checked_steps(name: str, reward: object, values: object, completions: list[str]) -> list[list[StepScore]] | None:
    """A step component's output as checked steps, one list per completion; None for an
    outcome component (it declares no ``returns_steps`` and returns no list). In a step
    component a plain number is one step ending at the end of its completion.

    e.g. values [[1.0, 0.0], 0.5] for completions ["a\\nb", "xy"] ->
    [[(2, 1.0), (3, 0.0)], [(2, 0.5)]]
    """
    items = [_as_list(item) for item in _checked_list(name, values, len(completions))]
    if not returns_steps(reward) and not any(isinstance(item, (list, tuple)) for item in items):
        return None
    delimiter = getattr(reward, "step_delimiter", None)
    steps = []
    for index, (item, text) in enumerate(zip(items, completions)):
        checked = checked_step_scores(name, item, text, delimiter, index)
        steps.append(outcome_as_step(name, item, text, index) if checked is None else checked)
    return steps


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

    A step component counts with the mean of its step scores (see
    :func:`score_rewards_with_steps`, which also returns the steps).
    """
    totals, per_component, _steps = score_rewards_with_steps(components, prompts, completions, fields)
    return totals, per_component


def score_rewards_with_steps(
    components: list[tuple[str, float, RewardFunc]],
    prompts: list[str],
    completions: list[str],
    fields: dict[str, list],
) -> tuple[list[float], dict[str, list[float]], dict[str, list[list[StepScore]]]]:
    """:func:`combine_rewards`, plus the steps of each step component.

    Returns (totals, per-component values, steps). A *step component* declares
    ``returns_steps`` or returns a list of steps for some completion (see
    engine/rewards/steps.py); its value for a completion is the mean of its step
    scores (0.0 for no steps), weighted into the total like any other component's, and
    ``steps[label]`` holds one list of ``(end, score)`` per completion (a plain number
    it returned is one step ending at the end of the text). Outcome components have no
    entry in ``steps``. Errors as :func:`combine_rewards`; a step list that does not fit
    its completion names the component, the completion and what to change.

    Example:
        >>> from engine.rewards.builtin import exact_match, sort_steps
        >>> components = [("exact", 1.0, exact_match()), ("steps", 0.5, sort_steps())]
        >>> totals, parts, steps = score_rewards_with_steps(
        ...     components, ["p", "p"], [" 1 2", " 2 1"], {"answer": [" 1 2", " 1 2"]})
        >>> totals, parts["steps"]
        ([1.5, 0.0], [1.0, 0.0])
        >>> steps
        {'steps': [[(2, 1.0), (4, 1.0)], [(2, 0.0), (4, 0.0)]]}
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
    steps: dict[str, list[list[StepScore]]] = {}
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
            component_steps = _checked_steps(described, reward, raw, list(completions))
            if component_steps is None:
                values = _checked_values(described, raw, size)
            else:
                values = [step_mean(completion_steps) for completion_steps in component_steps]
                steps[name] = component_steps
        except RewardError as exc:
            # A custom function's bad result: point at the function (its `def` line).
            source_file, source_line = getattr(reward, "source_file", None), getattr(reward, "source_line", None)
            if source_file and source_line:
                exc.user_location = (source_file, source_line)
            raise
        per_component[name] = values
        totals = [t + weight * v for t, v in zip(totals, values)]
    return _checked_totals(totals, per_component), per_component, steps


_SOURCE_ATTRIBUTES = ("reward_source", "source_file", "source_line", "timeout")


def _with_step_delimiter(reward: RewardFunc, delimiter: str | None) -> RewardFunc:
    """``reward`` marked as a step reward split at ``delimiter`` (attributes
    ``step_delimiter`` and ``returns_steps = True``); unchanged for None. A callable
    that takes no attributes (a bound method, a builtin) is wrapped in a function that
    carries them and its source attributes.

    e.g. (exact_match(), "\\n") -> the same function, with step_delimiter "\\n"
    """
    if delimiter is None:
        return reward
    try:
        reward.step_delimiter = delimiter
        reward.returns_steps = True
        return reward
    except (AttributeError, TypeError):
        pass

    def stepped(prompts: list[str], completions: list[str], **fields: list) -> list:
        return reward(prompts, completions, **fields)

    functools.update_wrapper(stepped, reward, assigned=functools.WRAPPER_ASSIGNMENTS + _SOURCE_ATTRIBUTES)
    stepped.step_delimiter = delimiter
    stepped.returns_steps = True
    return stepped


def build_reward_components(rewards_cfg, *, device=None, base_dir=None) -> list[tuple[str, float, RewardFunc]]:
    """The preset's ``rewards`` list as (label, weight, reward) triples for combine_rewards.

    ``device`` is where reward models run (a torch.device or a string like ``"cpu"``;
    None: CUDA if available); ``base_dir`` is the folder relative paths are resolved
    against first (the preset file's folder), then the current folder. Registry rewards
    are built here; a ``reward_model`` or ``process_reward_model`` is loaded (once per
    model, device and dtype);
    a custom function's file is imported. Problems name the entry, e.g.
    ``rewards[2] (my_rewards.py:brevity): no function 'brevity' in /abs/my_rewards.py;
    it defines: a, b``. An entry that sets ``step_delimiter`` gives a step reward: it
    carries ``step_delimiter`` and ``returns_steps = True`` (engine/rewards/steps.py).

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
        elif kind == "process_reward_model":
            from engine.rewards.process_model import process_reward_model_reward  # imports torch

            reward = process_reward_model_reward(**cfg.options, step_delimiter=getattr(cfg, "step_delimiter", None),
                                                 device=device, base_dir=base_dir, where=where)
        else:
            reward = load_custom_reward(cfg.name, cfg.options, base_dir=base_dir, where=where)
        reward = _with_step_delimiter(reward, getattr(cfg, "step_delimiter", None))
        components.append((component_label(cfg.name, getattr(cfg, "label", None)), cfg.weight, reward))
    return components
