"""Rewards: what scores a completion.

A preset's ``rewards`` entry names one of three kinds, each in a module of its own:

* ``builtin.py``: the registry rewards (``exact_match``, ``numeric_match``, ...), each a
  factory whose keyword options are its signature (engine/preset/options.py checks them);
* ``model.py``: ``reward_model``, a Hugging Face sequence-classification model (the only
  module here that imports torch; imported only when a preset uses one);
* ``custom.py``: ``FILE.py:FUNCTION``, the user's own function (read without running it
  for the workbench's checks, imported and called with a time limit for a run).

Beside them: ``base.py`` (the reward's call shape and the errors), ``kinds.py`` (which
kind a name is, and the checks made without loading anything: the preset's validators
import only this side), ``paths.py`` (relative files and folders, and what is missing)
and ``combine.py`` (building the components and their weighted sum).

The modules import one way: base <- builtin <- kinds <- custom <- paths <- model, and
combine on top; none imports this package's ``__init__``. This package re-exports the
public names and stays torch-free at import (the workbench imports it).

Example:
    >>> reward = build_reward("exact_match")
    >>> reward(["sort 2 1 ="], [" 1 2"], answer=[" 1 2"])
    [1.0]
"""

from __future__ import annotations

from engine.rewards.base import MissingFieldError, RewardError, RewardFunc, RewardTimeout
from engine.rewards.builtin import (
    REWARDS,
    build_reward,
    exact_match,
    length_penalty,
    numeric_match,
    regex_format,
    sort_inclusion_order,
    sort_position,
)
from engine.rewards.combine import build_reward_components, combine_rewards, describe_component
from engine.rewards.kinds import (
    REWARD_MODEL,
    REWARD_MODEL_OPTIONS,
    check_label,
    check_reward,
    check_reward_model_options,
    component_label,
    reward_kind,
    reward_options,
    split_custom_name,
)
from engine.rewards.paths import (
    absolute_reward_paths,
    looks_like_local_path,
    num_labels_message,
    resolve_reward_model,
    reward_source_problems,
)

__all__ = [
    "RewardFunc",
    "RewardError",
    "MissingFieldError",
    "RewardTimeout",
    "REWARDS",
    "REWARD_MODEL",
    "REWARD_MODEL_OPTIONS",
    "reward_kind",
    "split_custom_name",
    "component_label",
    "check_label",
    "check_reward",
    "check_reward_model_options",
    "describe_component",
    "looks_like_local_path",
    "resolve_reward_model",
    "num_labels_message",
    "build_reward",
    "build_reward_components",
    "reward_options",
    "reward_source_problems",
    "absolute_reward_paths",
    "combine_rewards",
    "exact_match",
    "numeric_match",
    "regex_format",
    "sort_position",
    "sort_inclusion_order",
    "length_penalty",
]
