"""DPO's section of a preset (`algorithm: {name: dpo, ...}`); torch-free."""

from __future__ import annotations

from typing import Literal, Union

from pydantic import Field, model_validator

from engine.preset.base import Float, Section
from engine.preset.limits import MAX_COEF, MAX_TOKENS


class DPOConfig(Section):
    """Direct Preference Optimization on (prompt, chosen, rejected) pairs, offline.
    Names follow TRL's DPOConfig. The reference is the model with the adapter disabled."""

    name: Literal["dpo"] = Field("dpo", description="Algorithm.")
    beta: Float = Field(0.1, gt=0.0, le=MAX_COEF, description="Strength of the implicit KL to the reference; higher stays closer.")
    loss_type: Literal["sigmoid", "ipo", "hinge"] = Field(
        "sigmoid", description="sigmoid: DPO; ipo: squared loss on length-averaged logprobs; hinge: SLiC."
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
        if self.label_smoothing and self.loss_type != "sigmoid":
            raise ValueError(f"label_smoothing: applies to loss_type sigmoid only (loss_type is {self.loss_type})")
        return self
