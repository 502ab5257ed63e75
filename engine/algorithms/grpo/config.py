"""GRPO's section of a preset (`algorithm: {name: grpo, ...}`); torch-free."""

from __future__ import annotations

from typing import ClassVar, Literal, Union

from pydantic import Field, field_validator, model_validator

from engine.algorithms.config_base import OnlineAlgorithm
from engine.rl.catalog import (AGGREGATIONS, ESTIMATORS, IMPORTANCE_LEVELS, POLICY_LOSSES, REWARD_AGGREGATIONS,
                                REWARD_SCALINGS, SURROGATES, offer_section_fields)
from engine.foundation.registry import choice_of
from engine.foundation.section import Float
from engine.foundation.limits import MAX_BATCH, MAX_COEF, MAX_REPEATS


class GRPOConfig(OnlineAlgorithm):
    """Group Relative Policy Optimization (Shao et al. 2024), with the DAPO, Dr. GRPO, CISPO
    and SAPO loss variants, GSPO's sequence-level ratio, and the RLOO and REINFORCE++ advantage
    estimators. Names follow TRL's GRPOConfig."""
    trains_episodes: ClassVar[bool] = True  # data.environment (engine/episodes/)

    name: Literal["grpo"] = Field("grpo", description="Algorithm.")
    num_generations: int = Field(
        8, ge=2, le=MAX_BATCH, description="Completions sampled per prompt; advantages are relative within this group."
    )
    beta: Float = Field(
        0.0, ge=0.0, le=MAX_COEF, description="Weight of the KL penalty to the reference model (k3 estimator); 0 skips the reference pass over the batch (the recorded rollouts still get one, for the inspector's per-token KL)."
    )
    epsilon: Float = Field(0.2, gt=0.0, lt=1.0, description="Lower clip range of the probability ratio: 1 - epsilon.")
    epsilon_high: Union[Float, None] = Field(
        None, le=MAX_COEF, description="Upper clip range, 1 + epsilon_high (clip-higher, DAPO); defaults to epsilon. "
        "For loss_type cispo it is the cap on the importance weight itself, min(ratio, epsilon_high), and unset "
        "means 5.0 (MiniMax-M1 / ScaleRL's value; TRL falls back to epsilon, 0.2, which caps every token's weight "
        "at 0.2)."
    )
    delta: Union[Float, None] = Field(
        None, gt=1.0, le=MAX_COEF, description="Two-sided clipping (INTELLECT-2; TRL's delta): the ratio is also "
        "capped at delta where the clip does not bound it (a negative advantage and a ratio far above 1), so no "
        "token's loss grows without limit; null: the one-sided clip. Keep it above 1 + epsilon_high. The clipped "
        "surrogate's (grpo, dr_grpo, dapo)."
    )
    # The registry-backed fields take their allowed names (and the window its choices and
    # their help) from the registries of engine/rl/catalog.py, read when validating.
    loss_type: choice_of(POLICY_LOSSES) = Field(
        "dapo", description="The policy loss (TRL's names): a surrogate and how its tokens are averaged.",
    )
    loss_aggregation: Union[choice_of(AGGREGATIONS), None] = Field(
        None, description="How the per-token loss is averaged, replacing the loss type's own; null: the "
        "loss type's (grpo, sapo: sequence_mean; dr_grpo: fixed_length; dapo, cispo: token_mean).",
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
    multi_objective_aggregation: choice_of(REWARD_AGGREGATIONS) = Field(
        "sum_then_normalize", description="How several rewards become advantages: sum_then_normalize hands their "
        "weighted sum to advantage_estimator; normalize_then_sum (GDPO) normalises each reward within its group, "
        "sums them with their weights and normalises that over the batch (advantage_estimator grpo only; "
        "scale_rewards is ignored, as in TRL).",
    )
    sapo_temperature_pos: Float = Field(
        1.0, gt=0.0, le=MAX_COEF, description="loss_type sapo: temperature of the sigmoid gate on the ratio for "
        "tokens with a positive advantage; larger: the gradient fades faster as the ratio leaves 1."
    )
    sapo_temperature_neg: Float = Field(
        1.05, gt=0.0, le=MAX_COEF, description="loss_type sapo: the gate's temperature for tokens with a zero or "
        "negative advantage (a little above the positive one: pushing a token down is riskier)."
    )
    use_bias_correction_kl: bool = Field(
        False, description="Multiply the k3 KL term by the importance ratio pi / pi_old, kept in the gradient, so "
        "the KL's gradient is the unbiased reverse-KL one (DeepSeek-V3.2); it changes the gradient whenever beta > 0, "
        "even on-policy where the ratio is 1, and the logged kl is the corrected term. TRL 1.16 defaults to true; "
        "false here keeps GRPO's k3 penalty as published."
    )

    @field_validator("epsilon_high")
    @classmethod
    def _eps_high(cls, value):
        if value is not None and not value > 0:
            raise ValueError("must be greater than 0")
        return value

    @model_validator(mode="after")
    def _aggregation_with_estimator(self):
        # An aggregation that computes the advantages itself (GDPO) leaves no reward for
        # another estimator to read: a preset naming both would silently drop one.
        own = REWARD_AGGREGATIONS.declares(self.multi_objective_aggregation).own_advantages
        if own and self.advantage_estimator != "grpo":
            raise ValueError(
                f"multi_objective_aggregation: {self.multi_objective_aggregation} computes the advantages itself "
                f"(each reward normalised in its group), so advantage_estimator must be grpo (got "
                f"{self.advantage_estimator}); set advantage_estimator: grpo, or multi_objective_aggregation: "
                "sum_then_normalize to keep the estimator")
        return self

    def step_rewards_problem(self) -> str:
        # Step rewards need an estimator that reads them (its declaration); a file
        # estimator declares itself and is checked when the run loads it.
        name = self.advantage_estimator
        if name in ESTIMATORS and not ESTIMATORS.declares(name).step_rewards:
            return (f"algorithm.advantage_estimator {name} gives each completion one advantage from one reward, so "
                    "the steps would count only as their mean; set algorithm.advantage_estimator: grpo_process "
                    "(process supervision), or use PPO (each step's reward on the token that ends it)")
        return ""

    # Declarations (engine/algorithms/config_base.py): groups of num_generations, as every
    # OnlineAlgorithm; and the playground recomputes GRPO's group-relative advantages.

    def playground_reason(self) -> str:
        return ""


# Every field of the section is an option the surrogates, aggregations and estimators may name
# (engine.rl.catalog.surrogate_options gives them in a run and in validate's dry run).
offer_section_fields(GRPOConfig, SURROGATES, AGGREGATIONS, ESTIMATORS)
