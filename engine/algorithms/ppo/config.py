"""PPO's section of a preset (`algorithm: {name: ppo, ...}`); torch-free."""

from __future__ import annotations

from typing import ClassVar, Literal, Union

from pydantic import Field

from engine.algorithms.config_base import OnlineAlgorithm, UpdateBatch
from engine.rl.catalog import KL_ESTIMATORS
from engine.foundation.registry import choice_of
from engine.foundation.section import Float
from engine.foundation.limits import MAX_BATCH, MAX_COEF, MAX_REPEATS, MAX_REWARD_SCALE, MAX_TEMPERATURE, MAX_TOKENS


class PPOConfig(OnlineAlgorithm):
    """Proximal Policy Optimization with a learned critic, token-level rewards (the score
    on the last token, a KL penalty on every token) and GAE. Names follow TRL's PPOConfig.
    The critic is a value head on the policy's LoRA backbone (docs/architecture.md)."""
    trains_episodes: ClassVar[bool] = True  # data.environment: the critic values the model's tokens

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
    kl_estimator: choice_of(KL_ESTIMATORS) = Field(
        "k1", description="Per-token estimate of the KL to the reference in the reward."
    )
    whiten_rewards: bool = Field(False, description="Scale the per-token rewards to unit variance over the batch (mean kept).")
    missing_eos_penalty: Union[Float, None] = Field(
        None, ge=-MAX_REWARD_SCALE, le=MAX_REWARD_SCALE, description="Subtracted from the score of a completion that hit max_completion_length without EOS."
    )

    # Declarations (engine/algorithms/config_base.py).
    trains_value_head: ClassVar[bool] = True

    def update_batch(self, training) -> UpdateBatch:
        """A mini-batch; random mini-batches break the groups (engine/algorithms/ppo/trainer.py).

        >>> from engine.preset.schema import TrainingConfig
        >>> PPOConfig(num_generations=4, num_mini_batches=2).update_batch(TrainingConfig(batch_size=32))
        UpdateBatch(units=16, rows=1, micro_rows=1)
        """
        rows = training.batch_size // self.num_mini_batches
        if self.num_mini_batches > 1:
            return UpdateBatch(units=rows, rows=1)
        return UpdateBatch(units=rows // self.num_generations, rows=self.num_generations)

    def batch_problems(self, training) -> list[str]:
        if training.batch_size % self.num_mini_batches:
            return [f"training.batch_size: {training.batch_size} must be divisible by "
                    f"algorithm.num_mini_batches ({self.num_mini_batches})"]
        return []

    def world_size_problems(self, training, size: int) -> list[str]:
        mini_batch = training.batch_size // self.num_mini_batches
        if self.num_mini_batches > 1 and mini_batch < size:
            return [f"--nproc-per-node {size}: a PPO mini-batch of {mini_batch} completions "
                    f"(training.batch_size / algorithm.num_mini_batches) cannot be shared by {size} processes; "
                    "lower algorithm.num_mini_batches or the process count"]
        return []

    def playground_reason(self) -> str:
        return ("PPO's advantages come from its critic (GAE over each token, with the value head's estimates), "
                "which needs the model; only the rewards are shown")
