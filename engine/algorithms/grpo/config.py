"""GRPO's section of a preset (`algorithm: {name: grpo, ...}`); torch-free."""

from __future__ import annotations

from typing import Literal, Union

from pydantic import Field, field_validator

from engine.algorithms.config_base import OnlineAlgorithm
from engine.rl.catalog import AGGREGATIONS, ESTIMATORS, IMPORTANCE_LEVELS, POLICY_LOSSES, REWARD_SCALINGS
from engine.rl.registry import choice_of
from engine.preset.base import Float
from engine.preset.limits import MAX_BATCH, MAX_COEF, MAX_REPEATS


class GRPOConfig(OnlineAlgorithm):
    """Group Relative Policy Optimization (Shao et al. 2024), with the DAPO and Dr. GRPO
    loss variants, GSPO's sequence-level ratio, and the RLOO and REINFORCE++ advantage
    estimators. Names follow TRL's GRPOConfig."""

    name: Literal["grpo"] = Field("grpo", description="Algorithm.")
    num_generations: int = Field(
        8, ge=2, le=MAX_BATCH, description="Completions sampled per prompt; advantages are relative within this group."
    )
    beta: Float = Field(
        0.0, ge=0.0, le=MAX_COEF, description="Weight of the KL penalty to the reference model (k3 estimator); 0 skips the reference pass over the batch (the recorded rollouts still get one, for the inspector's per-token KL)."
    )
    epsilon: Float = Field(0.2, gt=0.0, lt=1.0, description="Lower clip range of the probability ratio: 1 - epsilon.")
    epsilon_high: Union[Float, None] = Field(
        None, le=MAX_COEF, description="Upper clip range, 1 + epsilon_high (clip-higher, DAPO); defaults to epsilon."
    )
    # The registry-backed fields take their allowed names (and the window its choices and
    # their help) from the registries of engine/rl/catalog.py, read when validating.
    loss_type: choice_of(POLICY_LOSSES) = Field(
        "dapo", description="The policy loss (TRL's names): a surrogate and how its tokens are averaged.",
    )
    loss_aggregation: Union[choice_of(AGGREGATIONS), None] = Field(
        None, description="How the per-token loss is averaged, replacing the loss type's own; null: the "
        "loss type's (grpo: sequence_mean, dr_grpo: fixed_length, dapo: token_mean).",
    )
    scale_rewards: choice_of(REWARD_SCALINGS) = Field(
        "group", description="What advantages are divided by (the grpo estimator's)."
    )
    num_iterations: int = Field(
        1, ge=1, le=MAX_REPEATS, description="Updates per rollout batch; >1 reuses rollouts against their old logprobs (the ratio then moves from 1)."
    )
    mask_truncated_completions: bool = Field(
        False, description="Exclude completions that hit max_completion_length without EOS from the loss."
    )
    advantage_estimator: choice_of(ESTIMATORS) = Field(
        "grpo", description="How each completion's advantage is computed from the rewards.",
    )
    importance_sampling_level: choice_of(IMPORTANCE_LEVELS) = Field(
        "token", description="What the probability ratio pi / pi_old is taken over.",
    )

    @field_validator("epsilon_high")
    @classmethod
    def _eps_high(cls, value):
        if value is not None and not value > 0:
            raise ValueError("must be greater than 0")
        return value

    # Declarations (engine/algorithms/config_base.py): groups of num_generations, as every
    # OnlineAlgorithm; and the playground recomputes GRPO's group-relative advantages.

    def playground_reason(self) -> str:
        return ""
