"""GRPO's section of a preset (`algorithm: {name: grpo, ...}`); torch-free."""

from __future__ import annotations

from typing import Literal, Union

from pydantic import Field, field_validator

from engine.preset.base import Float, SamplingFields
from engine.preset.limits import MAX_BATCH, MAX_COEF, MAX_REPEATS


class GRPOConfig(SamplingFields):
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
    loss_type: Literal["grpo", "dr_grpo", "dapo"] = Field(
        "dapo",
        description="grpo: mean per sequence, then over sequences; dr_grpo: sum over tokens / "
        "(batch * max_completion_length); dapo: mean over all tokens in the batch.",
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Divide advantages by the group's reward std, the batch's, or not at all (Dr. GRPO)."
    )
    num_iterations: int = Field(
        1, ge=1, le=MAX_REPEATS, description="Updates per rollout batch; >1 reuses rollouts against their old logprobs (the ratio then moves from 1)."
    )
    mask_truncated_completions: bool = Field(
        False, description="Exclude completions that hit max_completion_length without EOS from the loss."
    )
    advantage_estimator: Literal["grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"] = Field(
        "grpo",
        description="grpo: (r - group mean) / std (see scale_rewards); rloo: r minus the mean of the "
        "group's other completions; reinforce_pp: REINFORCE++, rewards whitened over the batch "
        "(no group baseline); reinforce_pp_baseline: group mean subtracted, then whitened over the batch.",
    )
    importance_sampling_level: Literal["token", "sequence"] = Field(
        "token",
        description="token: one probability ratio per token (GRPO/PPO); sequence: GSPO, one ratio per "
        "completion (geometric mean of its tokens'), clipped as a whole; use a small epsilon (3e-4 to 4e-4).",
    )

    @field_validator("epsilon_high")
    @classmethod
    def _eps_high(cls, value):
        if value is not None and not value > 0:
            raise ValueError("must be greater than 0")
        return value
