"""SFT's section of a preset (`algorithm: {name: sft, ...}`); torch-free."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from engine.algorithms.config_base import AlgorithmSection, UpdateBatch
from engine.foundation.limits import MAX_TOKENS


class SFTConfig(AlgorithmSection):
    """Supervised fine-tuning on demonstrations (prompt-completion, conversational or plain
    text rows, as TRL's SFTTrainer reads them): the mean negative log-likelihood of the
    completion's tokens. The first stage of the RLHF pipeline: an RL run starts from it
    with model.start_from."""

    name: Literal["sft"] = Field("sft", description="Algorithm.")
    completion_only_loss: bool = Field(
        True, description="Train on the completion's tokens only (TRL's default for prompt-completion data); "
        "false trains on the prompt's tokens too. Plain-text rows train on every token either way.",
    )
    max_completion_length: int = Field(
        256, ge=1, le=MAX_TOKENS,
        description="Completions are cut to this many tokens; also the generation length at evaluation.",
    )

    trains_on_demonstrations: ClassVar[bool] = True  # (engine/algorithms/config_base.py)

    def update_batch(self, training) -> UpdateBatch:
        return UpdateBatch(units=training.batch_size, rows=1)

    def step_shares(self, training) -> tuple[int, str]:
        return training.batch_size, "demonstrations (training.batch_size)"

    def playground_reason(self) -> str:
        return "SFT trains on demonstrations and computes no advantages (its rewards judge held-out generations only)"
