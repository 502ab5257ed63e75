"""The reward model's section of a preset (`algorithm: {name: reward_model, ...}`); torch-free."""

from __future__ import annotations

from typing import ClassVar, Literal, Union

from pydantic import Field

from engine.algorithms.config_base import AlgorithmSection, UpdateBatch
from engine.foundation.limits import MAX_COEF, MAX_TOKENS
from engine.foundation.section import Float


class RewardModelConfig(AlgorithmSection):
    """A reward model trained on preference pairs (Bradley-Terry, as TRL's RewardTrainer): a
    LoRA adapter on the base model and a one-output score head, read at the text's last
    token. Its run is a reward: rewards: - name: reward_model, options: {model: RUN}."""

    name: Literal["reward_model"] = Field("reward_model", description="Algorithm.")
    center_rewards_coefficient: Union[Float, None] = Field(
        None, ge=0.0, le=MAX_COEF,
        description="Adds this x the mean of (r_chosen + r_rejected)^2 to the loss, keeping rewards centred on 0 "
        "(Eisenstein et al. 2023; TRL's name; 0.01 is usual); null: off.",
    )
    max_completion_length: int = Field(
        256, ge=1, le=MAX_TOKENS,
        description="The longest answer, in tokens, the model's context must leave room for after a prompt. "
        "Answers are not cut: the score is read at the answer's end, as an RL reward reads it.",
    )

    # Declarations (engine/algorithms/config_base.py): a step is training.batch_size pairs,
    # two texts each; micro_batch_size counts pairs.
    trains_on_pairs: ClassVar[bool] = True
    trains_score_head: ClassVar[bool] = True

    def update_batch(self, training) -> UpdateBatch:
        return UpdateBatch(units=training.batch_size, rows=2, micro_rows=2)

    def step_shares(self, training) -> tuple[int, str]:
        return training.batch_size, "preference pairs (training.batch_size)"

    def playground_reason(self) -> str:
        return "a reward-model run trains a scorer on preference pairs; it has no advantages"
