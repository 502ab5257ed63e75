"""Rewards: what scores a completion.

A preset's ``rewards`` entry names one of three kinds, each in a module of its own:

* ``builtin.py``: the registry rewards (``exact_match``, ``numeric_match``, ...), each a
  factory whose keyword options are its signature (engine/foundation/registry.py checks them);
* ``model.py``: ``reward_model``, a Hugging Face sequence-classification model, and
  ``process_model.py``: ``process_reward_model``, a model scoring each step (the only
  modules here that import torch; imported only when a preset uses one);
* ``custom.py``: ``FILE.py:FUNCTION``, the user's own function (read without running it
  for the workbench's checks, imported and called with a time limit for a run).

Beside them: ``base.py`` (the reward's call shape and the errors), ``kinds.py`` (which
kind a name is, and the checks made without loading anything: the preset's validators
import only this side), ``paths.py`` (relative files and folders, and what is missing),
``steps.py`` (step rewards: a list of scored steps per completion, checked and placed
on tokens) and ``combine.py`` (building the components and their weighted sum).

The modules import one way: base <- builtin <- kinds <- custom <- paths <- model, steps
on base, and combine on top; none imports this package's ``__init__``. This package
re-exports the public names and stays torch-free at import (the workbench imports it).

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
    sort_steps,
)
from engine.rewards.combine import (
    build_reward_components,
    combine_rewards,
    describe_component,
    score_rewards_with_steps,
)
from engine.rewards.kinds import (
    PROCESS_REWARD_MODEL,
    PROCESS_REWARD_MODEL_OPTIONS,
    PRM_HEADS,
    PRM_STEP_DELIMITER_DEFAULT,
    REWARD_MODEL,
    REWARD_MODEL_OPTIONS,
    check_label,
    check_process_reward_model_options,
    check_reward,
    check_reward_model_options,
    component_label,
    is_step_reward_entry,
    reward_kind,
    reward_options,
    split_custom_name,
)
from engine.rewards.paths import absolute_reward_paths, num_labels_message, resolve_reward_model, reward_source_problems
from engine.rewards.steps import (
    STEP_DELIMITER_DEFAULT,
    StepScore,
    checked_step_scores,
    outcome_as_step,
    returns_steps,
    split_step_ends,
    step_mean,
    token_step_ends,
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
    "resolve_reward_model",
    "num_labels_message",
    "build_reward",
    "build_reward_components",
    "reward_options",
    "reward_source_problems",
    "absolute_reward_paths",
    "combine_rewards",
    "score_rewards_with_steps",
    "StepScore",
    "STEP_DELIMITER_DEFAULT",
    "split_step_ends",
    "checked_step_scores",
    "outcome_as_step",
    "step_mean",
    "returns_steps",
    "token_step_ends",
    "PROCESS_REWARD_MODEL",
    "PROCESS_REWARD_MODEL_OPTIONS",
    "PRM_HEADS",
    "PRM_STEP_DELIMITER_DEFAULT",
    "check_process_reward_model_options",
    "is_step_reward_entry",
    "exact_match",
    "numeric_match",
    "regex_format",
    "sort_position",
    "sort_inclusion_order",
    "length_penalty",
    "sort_steps",
]
