"""KTO's section of a preset (`algorithm: {name: kto, ...}`); torch-free."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from engine.algorithms.config_base import AlgorithmSection, UpdateBatch
from engine.foundation.section import Float
from engine.foundation.limits import MAX_COEF, MAX_TOKENS
from engine.rl.catalog import KTO_LOSSES, offer_section_fields
from engine.foundation.registry import choice_of

# Eq. (8) of the KTO paper, as TRL 1.16 applies it: the desirable side's weighted count
# should be 1 to 4/3 times the undesirable side's.
BALANCE_RANGE = (1.0, 1.33)


def weight_ranges(num_desirable: int, num_undesirable: int, desirable_weight: float,
                  undesirable_weight: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """The ranges TRL recommends for desirable_weight (the other weight kept) and for
    undesirable_weight (the other kept), from the training data's label counts.

    e.g. 100 desirable, 300 undesirable, weights 1 and 1:
         desirable_weight in [3.0, 3.99] (300 x 1 / 100 x 1 .. x 1.33),
         undesirable_weight in [0.25, 0.33] (100 x 1 / 300 / 1.33 .. / 1)
    >>> weight_ranges(100, 300, 1.0, 1.0)
    ((3.0, 3.99), (0.25, 0.33))
    """
    low, high = BALANCE_RANGE
    desirable = num_undesirable * undesirable_weight / num_desirable
    undesirable = num_desirable * desirable_weight / num_undesirable
    return ((round(desirable * low, 2), round(desirable * high, 2)),
            (round(undesirable / high, 2), round(undesirable / low, 2)))


class KTOConfig(AlgorithmSection):
    """Kahneman-Tversky Optimization (Ethayarajh et al. 2024) on unpaired rows (a prompt, a
    completion and whether it is desirable), offline. Names follow TRL's KTOConfig. The
    reference is the model with the adapter disabled."""

    name: Literal["kto"] = Field("kto", description="Algorithm.")
    beta: Float = Field(0.1, gt=0.0, le=MAX_COEF, description="Strength of the implicit KL to the reference; higher stays closer.")
    loss_type: choice_of(KTO_LOSSES) = Field(
        "kto", description="kto: each row's log ratio against a KL reference point; apo_zero_unpaired: no reference "
        "point (engine/rl/catalog.py's KTO_LOSSES)."
    )
    desirable_weight: Float = Field(
        1.0, gt=0.0, le=MAX_COEF, description="Weight of the desirable rows' losses (to balance unequal numbers of "
        "desirable and undesirable rows; the run's log recommends a range when they differ)."
    )
    undesirable_weight: Float = Field(
        1.0, gt=0.0, le=MAX_COEF, description="Weight of the undesirable rows' losses."
    )
    precompute_ref_log_probs: bool = Field(
        False, description="Compute the reference logprobs of every training row once before training. The KL "
        "reference point's mismatched pairs change every step, so with loss_type kto their reference pass still runs."
    )
    max_completion_length: int = Field(
        256, ge=1, le=MAX_TOKENS, description="Completions are cut to this many tokens; also the generation length at eval."
    )
    disable_dropout: bool = Field(
        True, description="Every dropout off in updates, the adapter's included (TRL's default); false lets "
        "model.lora.dropout act in updates."
    )

    def balance_warning(self, num_desirable: int, num_undesirable: int) -> str:
        """TRL's warning when the data's desirable and undesirable rows differ in number
        and neither weight is in its recommended range (weight_ranges); "" otherwise. As
        TRL: counts of 0 count as 1.

        >>> KTOConfig().balance_warning(100, 100)
        ''
        >>> KTOConfig(desirable_weight=3.5).balance_warning(100, 300)
        ''
        >>> KTOConfig().balance_warning(100, 300)[:60]
        'algorithm.desirable_weight / undesirable_weight: the trainin'
        """
        desirable = max(num_desirable, 1)
        undesirable = max(num_desirable + num_undesirable - desirable, 1)
        if desirable == undesirable:
            return ""
        (d_low, d_high), (u_low, u_high) = weight_ranges(desirable, undesirable, self.desirable_weight,
                                                         self.undesirable_weight)
        if d_low <= self.desirable_weight <= d_high or u_low <= self.undesirable_weight <= u_high:
            return ""
        return (f"algorithm.desirable_weight / undesirable_weight: the training data has {num_desirable} desirable "
                f"and {num_undesirable} undesirable rows, and the weights ({self.desirable_weight:g}, "
                f"{self.undesirable_weight:g}) do not balance them; TRL recommends EITHER desirable_weight in "
                f"[{d_low}, {d_high}] OR undesirable_weight in [{u_low}, {u_high}] (not both), from Eq. (8) of "
                "the KTO paper")

    # Declarations (engine/algorithms/config_base.py): a step is training.batch_size rows,
    # each one completion after its own prompt; micro_batch_size counts rows. Several
    # processes share the rows; the KL reference point is taken over every process's rows
    # (they are combined before its mean), so no rule beyond step_shares.
    trains_on_unpaired: ClassVar[bool] = True

    def update_batch(self, training) -> UpdateBatch:
        return UpdateBatch(units=training.batch_size, rows=1)

    def step_shares(self, training) -> tuple[int, str]:
        return training.batch_size, "unpaired rows (training.batch_size)"

    def batch_problems(self, training) -> list[str]:
        if training.batch_size < 2 and KTO_LOSSES.declares(self.loss_type).uses_kl:
            return [f"training.batch_size: KTO's loss_type {self.loss_type} needs at least 2 rows a step: its KL "
                    "reference point pairs each prompt with another row's completion, and with one row that is "
                    "the row itself (TRL refuses a batch of 1 too); set batch_size to 2 or more, or loss_type "
                    "apo_zero_unpaired"]
        return []

    def playground_reason(self) -> str:
        return ("KTO trains on labelled completions from the data and computes no advantages "
                "(its rewards judge held-out generations only)")


# Every field of the section is an option its loss types may name (engine.rl.catalog).
offer_section_fields(KTOConfig, KTO_LOSSES)
