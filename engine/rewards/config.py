"""The preset's `rewards` section: one `RewardConfig` per reward component, what
engine/rewards/combine.py builds. Torch-free: the preset's assembly
(engine/preset/schema.py) and the workbench's forms read it.
"""

from __future__ import annotations

from typing import Any, Union

from pydantic import Field, field_validator, model_serializer, model_validator

from engine.foundation.limits import MAX_REWARD_SCALE
from engine.foundation.section import Float, Section
from engine.rewards.kinds import check_label, check_reward, component_label

__all__ = ["RewardConfig"]


class RewardConfig(Section):
    """One reward component. `name` is a registry reward (`exact_match`, ...),
    `reward_model` (options: model, batch_size, max_length, dtype), `process_reward_model`
    (a model scoring each step; options: model, step_tag, head, label, good_token, bad_token,
    batch_size, max_length, dtype), or `FILE.py:FUNCTION`
    (your own function; options are passed to it as keyword arguments). Only what can
    be checked without reading files is checked here; the file, the function and the
    model are checked when the run builds the rewards (and by the workbench)."""

    name: str = Field(
        ..., min_length=1,
        description="A registry reward (exact_match, numeric_match, regex_format, ...), `reward_model` "
        "(a Hugging Face sequence-classification model), `process_reward_model` (a Hugging Face "
        "token-classification or causal LM process reward model scoring each step; steps split at "
        "step_delimiter, default \"\\n\\n\"), or FILE.py:FUNCTION (your own Python function; "
        "a relative file is found next to the preset).",
    )
    label: Union[str, None] = Field(
        None, min_length=1,
        description="Name the component is logged under (rewards/<label>/mean); default: the reward's "
        "name, or the function's name for FILE.py:FUNCTION.",
    )
    weight: Float = Field(1.0, ge=-MAX_REWARD_SCALE, le=MAX_REWARD_SCALE, description="Weight of this component in the total reward.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of this reward: the registry reward's; a reward model's model (hub id or "
        "folder, required), batch_size, max_length, dtype; a process reward model's model (required), "
        "step_tag (text after each step the score is read at; default \"\": the step's last token), head "
        "(auto, token_classification, causal_lm), label (token_classification: the class scored; default "
        "1), good_token / bad_token (causal_lm: score p(good) / (p(good) + p(bad))), batch_size (8), "
        "max_length (1024), dtype; a custom function's keyword arguments.",
    )
    step_delimiter: Union[str, None] = Field(
        None, min_length=1,
        description="Makes this a step reward: the text a completion's steps are split at, e.g. \"\\n\" "
        "(one line, one step) or \"\\n\\n\". A step ends just after its delimiter; the text after the "
        "last one is one more step. The reward then returns, per completion, a list of scores, one per "
        "step, or (end, score) pairs (end: the character offset just after the step); its logged value "
        "is the mean of the step scores. Default: none (one score per completion; a reward that "
        "returns lists anyway is split at \"\\n\").",
    )

    @field_validator("label")
    @classmethod
    def _label(cls, value):
        return value if value is None else check_label(value)

    @model_validator(mode="after")
    def _known(self):
        # Registry rewards are built (cheap: a closure); a reward model's options and a
        # custom function's FILE.py:FUNCTION are checked for form only.
        check_reward(self.name, self.options)
        return self

    @model_serializer(mode="wrap")
    def _omit_unset_label(self, handler):
        # `label: null` (and `step_delimiter: null`) is noise in every saved preset; each
        # is written only when set.
        data = handler(self)
        for key in ("label", "step_delimiter"):
            if isinstance(data, dict) and data.get(key) is None:
                data.pop(key, None)
        return data

    @property
    def component_name(self) -> str:
        """The logged name: `label`, else the function's name for FILE.py:FUNCTION, else `name`."""
        return component_label(self.name, self.label)
