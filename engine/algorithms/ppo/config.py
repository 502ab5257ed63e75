"""PPO's section of a preset (`algorithm: {name: ppo, ...}`); torch-free."""

from __future__ import annotations

from typing import Literal, Union

from pydantic import Field

from engine.preset.base import Float, SamplingFields
from engine.preset.limits import MAX_BATCH, MAX_COEF, MAX_REPEATS, MAX_REWARD_SCALE, MAX_TEMPERATURE, MAX_TOKENS


class PPOConfig(SamplingFields):
    """Proximal Policy Optimization with a learned critic, token-level rewards (the score
    on the last token, a KL penalty on every token) and GAE. Names follow TRL's PPOConfig.
    The critic is a value head on the policy's LoRA backbone (docs/architecture.md)."""

    name: Literal["ppo"] = Field("ppo", description="Algorithm.")
    max_completion_length: int = Field(53, ge=1, le=MAX_TOKENS, description="Most tokens generated per completion (TRL: response_length).")
    temperature: Float = Field(0.7, gt=0.0, le=MAX_TEMPERATURE, description="Sampling temperature for rollouts.")
    num_generations: int = Field(
        1, ge=1, le=MAX_BATCH, description="Completions sampled per prompt (PPO's critic needs no group; 1 is usual)."
    )
    num_ppo_epochs: int = Field(4, ge=1, le=MAX_REPEATS, description="Passes over each rollout batch.")
    num_mini_batches: int = Field(
        1, ge=1, le=MAX_BATCH, description="Mini-batches per epoch; one optimizer step each (batch_size must divide evenly)."
    )
    cliprange: Float = Field(0.2, gt=0.0, lt=1.0, description="Clip range of the policy's probability ratio.")
    cliprange_value: Float = Field(0.2, gt=0.0, le=MAX_REWARD_SCALE, description="Clip range of the value prediction around its old value.")
    vf_coef: Float = Field(0.1, ge=0.0, le=MAX_COEF, description="Weight of the value loss in the total loss.")
    gamma: Float = Field(1.0, ge=0.0, le=1.0, description="Discount factor.")
    lam: Float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda: 1 is Monte-Carlo returns, 0 one-step TD.")
    kl_coef: Float = Field(0.05, ge=0.0, le=MAX_COEF, description="Per-token KL penalty against the reference, added to the reward.")
    kl_estimator: Literal["k1", "k3"] = Field(
        "k1", description="k1: log pi - log ref (unbiased, can be negative); k3: lower variance, always >= 0."
    )
    whiten_rewards: bool = Field(False, description="Scale the per-token rewards to unit variance over the batch (mean kept).")
    missing_eos_penalty: Union[Float, None] = Field(
        None, ge=-MAX_REWARD_SCALE, le=MAX_REWARD_SCALE, description="Subtracted from the score of a completion that hit max_completion_length without EOS."
    )
