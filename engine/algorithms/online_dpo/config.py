"""Online DPO's section of a preset (`algorithm: {name: online_dpo, ...}`); torch-free."""

from __future__ import annotations

from typing import ClassVar, Literal, Union

from pydantic import Field, field_validator

from engine.algorithms.config_base import OnlineAlgorithm
from engine.foundation.section import Float
from engine.foundation.limits import MAX_COEF, MAX_REWARD_SCALE, MAX_TEMPERATURE, MAX_TOKENS
from engine.rl.catalog import DPO_LOSSES, offer_section_fields
from engine.foundation.registry import choice_of

PAIR = 2  # completions sampled per prompt: the pair the rewards rank
# The DPO losses TRL's OnlineDPOTrainer takes (its `loss_type` choices).
ONLINE_LOSS_TYPES = ("sigmoid", "ipo")


class OnlineDPOConfig(OnlineAlgorithm):
    """Online DPO (Guo et al. 2024, "Direct language model alignment from online AI
    feedback"): two completions sampled per prompt, ranked by the preset's rewards, and
    DPO's loss on the pair against the reference (the adapter disabled). Names follow
    TRL's OnlineDPOConfig."""
    episodes_reason: ClassVar[str] = "it ranks pairs of single completions"

    name: Literal["online_dpo"] = Field("online_dpo", description="Algorithm.")
    num_generations: Literal[2] = Field(
        PAIR, description="Completions sampled per prompt: always 2, the pair the rewards rank (chosen, rejected)."
    )
    max_completion_length: int = Field(
        64, ge=1, le=MAX_TOKENS, description="Most tokens generated per completion (TRL: max_new_tokens)."
    )
    temperature: Float = Field(
        0.9, gt=0.0, le=MAX_TEMPERATURE, description="Sampling temperature for the pairs (the loss is taken at temperature 1, as TRL's)."
    )
    beta: Float = Field(
        0.1, gt=0.0, le=MAX_COEF, description="Strength of the implicit KL to the reference; higher stays closer (IPO's tau)."
    )
    loss_type: choice_of(DPO_LOSSES) = Field(
        "sigmoid", description="The loss on the pair's margin: sigmoid (DPO) or ipo (on length-averaged logprobs)."
    )
    missing_eos_penalty: Union[Float, None] = Field(
        None, ge=0.0, le=MAX_REWARD_SCALE, description="Subtracted from the score of a completion that hit "
        "max_completion_length without EOS, before the pair is ranked; null: no penalty."
    )
    disable_dropout: bool = Field(
        True, description="Every dropout off in updates, the adapter's included (TRL's default); false lets "
        "model.lora.dropout act in updates."
    )

    @field_validator("num_generations", mode="before")
    @classmethod
    def _a_pair(cls, value):
        if value != PAIR or isinstance(value, bool):
            raise ValueError("online DPO samples exactly 2 completions per prompt, the pair its rewards rank; "
                             "leave num_generations out or set it to 2 (for more per prompt use grpo)")
        return value

    @field_validator("loss_type")
    @classmethod
    def _online_loss(cls, value):
        if value not in ONLINE_LOSS_TYPES:
            raise ValueError(f"online DPO takes loss_type {' or '.join(ONLINE_LOSS_TYPES)}, as TRL's "
                             f"OnlineDPOTrainer; {value} is for offline DPO (name: dpo)")
        return value

    # Declarations (engine/algorithms/config_base.py): a step is training.batch_size
    # completions, 2 a prompt (update_batch: OnlineAlgorithm's, pairs of 2 rows);
    # micro_batch_size counts completions and keeps pairs whole.

    def step_shares(self, training) -> tuple[int, str]:
        return training.batch_size // PAIR, (
            f"pairs (training.batch_size {training.batch_size} / 2 completions a prompt), "
            "and a pair stays on one process")

    def batch_problems(self, training) -> list[str]:
        """e.g. micro_batch_size 3 -> ["training.micro_batch_size: 3 would split a pair ..."]"""
        micro = training.micro_batch_size
        if isinstance(micro, int) and micro % PAIR:
            return [f"training.micro_batch_size: {micro} would split a pair (online DPO's loss compares the 2 "
                    f"completions of a prompt in one pass); use an even number, e.g. {max(PAIR, micro - 1)}"]
        return []

    def step_rewards_problem(self) -> str:
        return ("online DPO (algorithm.name: online_dpo) ranks each prompt's completions by their total reward, so "
                "the steps would count only as their mean; use GRPO with algorithm.advantage_estimator: grpo_process, "
                "or PPO")

    def playground_reason(self) -> str:
        return ("online DPO ranks each prompt's 2 completions by these rewards (the higher total is chosen; "
                "a tie goes to the first sampled) but learns from implicit rewards, beta x (log pi - log ref), "
                "which need the model; only the rewards are shown")


# Every field of the section is an option its loss types may name (engine.rl.catalog).
offer_section_fields(OnlineDPOConfig, DPO_LOSSES)
