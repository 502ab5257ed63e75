"""DPO's section of a preset (`algorithm: {name: dpo, ...}`); torch-free."""

from __future__ import annotations

from typing import ClassVar, Literal, Union

from pydantic import Field, model_validator

from engine.algorithms.config_base import AlgorithmSection, UpdateBatch
from engine.foundation.section import Float
from engine.rl.catalog import DPO_LOSSES, offer_section_fields
from engine.foundation.registry import choice_of
from engine.foundation.limits import MAX_COEF, MAX_TOKENS


class DPOConfig(AlgorithmSection):
    """Direct Preference Optimization on (prompt, chosen, rejected) pairs, offline.
    Names follow TRL's DPOConfig. The reference is the model with the adapter disabled."""

    name: Literal["dpo"] = Field("dpo", description="Algorithm.")
    beta: Float = Field(0.1, gt=0.0, le=MAX_COEF, description="Strength of the implicit KL to the reference; higher stays closer.")
    loss_type: choice_of(DPO_LOSSES) = Field(
        "sigmoid", description="The loss on the margin between chosen and rejected (engine/rl/catalog.py's DPO_LOSSES)."
    )
    label_smoothing: Float = Field(
        0.0, ge=0.0, lt=0.5, description="Assumed fraction of flipped labels (conservative DPO; sigmoid loss only)."
    )
    precompute_ref_log_probs: bool = Field(
        False, description="Compute the reference logprobs of every pair once before training (no reference pass per step)."
    )
    rpo_alpha: Union[Float, None] = Field(
        None, ge=0.0, le=MAX_COEF, description="RPO (Pang et al. 2024): add rpo_alpha x the chosen answers' token-mean NLL to the "
        "loss, so the chosen answers' likelihood does not sink with the rejected ones'; null = plain DPO."
    )
    max_completion_length: int = Field(
        256, ge=1, le=MAX_TOKENS, description="Chosen and rejected are cut to this many tokens; also the generation length at eval."
    )
    disable_dropout: bool = Field(
        True, description="Every dropout off in updates, the adapter's included (TRL's default); false lets "
        "model.lora.dropout act in updates."
    )

    @model_validator(mode="after")
    def _smoothing(self):
        if self.label_smoothing and not DPO_LOSSES.declares(self.loss_type).label_smoothing:
            readers = " or ".join(e.name for e in DPO_LOSSES.entries() if e.declares.label_smoothing)
            raise ValueError(f"label_smoothing: applies to loss_type {readers} only (loss_type is {self.loss_type})")
        return self

    # Declarations (engine/algorithms/config_base.py): a step is training.batch_size pairs,
    # two sequences each after one prompt; micro_batch_size counts pairs.
    trains_on_pairs: ClassVar[bool] = True

    def update_batch(self, training) -> UpdateBatch:
        return UpdateBatch(units=training.batch_size, rows=2, micro_rows=2)

    def step_shares(self, training) -> tuple[int, str]:
        return training.batch_size, "preference pairs (training.batch_size)"

    def playground_reason(self) -> str:
        return ("DPO trains on preference pairs and computes no advantages "
                "(its rewards judge held-out generations only)")


# Every field of the section is an option its loss types may name (engine.rl.catalog).
offer_section_fields(DPOConfig, DPO_LOSSES)
