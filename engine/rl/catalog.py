"""The RL variants the engine knows: one registry per kind, and the built-in entries.

Each registry maps a name (what a preset writes) to a function (named lazily as
``"module:attr"``, so this module and the preset schema load no torch) and to the
kind's declarations, a small frozen dataclass below: what the rest of the engine must
know about the variant without calling it (an aggregation's micro-batch weight, an
estimator's shape, whether a DPO loss works on length-averaged logprobs).

Adding a variant = its function in a torch module of engine/rl/ and one ``register``
line here (or, from a plug-in or a test, the same call on the registry). The preset's
fields, the set-up window's choices and their help text all read these registries.

Contracts (tensors positionally, options by keyword: a function's keyword-only
parameters are the options it takes from the engine; see engine.rl.registry):

=================  =========================================================================
SURROGATES         (logprobs (B,T), old_logprobs (B,T), advantages (B,1)|(B,T), mask (B,T),
                   *, log_ratio (B,T)|(B,1), epsilon_low, epsilon_high, max_completion_length)
                   -> (per_token_loss (B,T), ratio (B,T), flags {metric: bool (B,T)})
AGGREGATIONS       (per_token_loss (B,T), mask (B,T), *, max_completion_length) -> scalar
ESTIMATORS         (rewards (B,), mask (B,T), *, num_generations, scale_rewards)
                   -> advantages (B,) or (B,T)
REWARD_SCALINGS    (centred (P,G) float64, grouped (P,G) float64, *, eps) -> (P,G)
KL_ESTIMATORS      (logprobs (B,T), ref_logprobs (B,T)) -> (B,T)
IMPORTANCE_LEVELS  (logprobs (B,T), old_logprobs (B,T), mask (B,T)) -> log ratio (B,T)|(B,1)
DPO_LOSSES         (h (B,), *, beta, label_smoothing) -> per-pair losses (B,)
POLICY_LOSSES      no function: a surrogate and an aggregation, by name
=================  =========================================================================

Tasks are registered in engine/data/tasks.py (``register_task``), on the same Registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from engine.rl.registry import Registry

__all__ = [
    "PolicyLoss", "Surrogate", "Aggregation", "Estimator", "RewardScaling", "DPOLoss", "ImportanceLevel",
    "POLICY_LOSSES", "SURROGATES", "AGGREGATIONS", "ESTIMATORS", "REWARD_SCALINGS", "KL_ESTIMATORS",
    "IMPORTANCE_LEVELS", "DPO_LOSSES", "DEFAULT_AGGREGATION", "rows_share", "tokens_share",
    "policy_loss_parts", "micro_batch_weight", "length_neutral_loss_types", "register_policy_loss",
    "unregister_policy_loss",
]


# ------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class PolicyLoss:
    """A GRPO ``loss_type``: which surrogate, aggregated how (TRL's names kept)."""

    surrogate: str
    aggregation: str


@dataclass(frozen=True)
class Surrogate:
    """``metrics``: the per-token flags the surrogate returns, each reported as the share
    of the batch flagged (counted as the importance-sampling level says); None: every flag
    it returns (a user's surrogate, whose flags are known once it runs: engine/rl/user_code.py);
    ``inspector_flag``: the one the inspector shows as a token's "clipped" (None, or a flag
    not returned: nothing marked)."""

    metrics: tuple[str, ...] | None = ()
    inspector_flag: str | None = None


def rows_share(micro_mask, batch_mask) -> float:
    """A micro-batch's share of the batch's rows: for a loss normalised by the row count.

    e.g. 1 row of 4 -> 0.25 (tensor methods only: no torch import here)
    """
    return micro_mask.shape[0] / batch_mask.shape[0]


def tokens_share(micro_mask, batch_mask) -> float:
    """A micro-batch's share of the batch's real tokens: for a loss normalised by the
    token count. e.g. 3 tokens of 12 -> 0.25"""
    return float(micro_mask.sum() / batch_mask.sum().clamp(min=1))


@dataclass(frozen=True)
class Aggregation:
    """``micro_batch_weight(micro_mask, batch_mask) -> float``: the share of the whole
    batch's normaliser one micro-batch carries, so that the weighted micro-batch losses
    sum to the full-batch loss (gradient accumulation is exact); ``length_neutral``:
    whether a token weighs the same whatever its completion's length."""

    micro_batch_weight: Callable = rows_share
    length_neutral: bool = False


@dataclass(frozen=True)
class Estimator:
    """``per_token``: (B, T) advantages (which depend on the completions' token counts)
    rather than one per completion; ``uses_scale_rewards``: reads ``scale_rewards``;
    ``needs_group``: relative to the other completions of its prompt (num_generations >= 2)."""

    per_token: bool = False
    uses_scale_rewards: bool = False
    needs_group: bool = True


@dataclass(frozen=True)
class RewardScaling:
    """``spans_batch``: the scale comes from every group of the batch, not each group's own."""

    spans_batch: bool = False


@dataclass(frozen=True)
class DPOLoss:
    """``length_averaged``: on each side's token-mean logprob instead of the sum (IPO);
    ``label_smoothing``: whether it reads ``label_smoothing``."""

    length_averaged: bool = False
    label_smoothing: bool = False


@dataclass(frozen=True)
class ImportanceLevel:
    """``counts``: what a clip fraction is the share of (tokens, or sequences when the
    ratio is one per sequence, as TRL counts GSPO's)."""

    counts: Literal["tokens", "sequences"] = "tokens"


# ----------------------------------------------------------------------- registries

SURROGATES: Registry[Surrogate] = Registry(
    "policy surrogate", given=("log_ratio", "epsilon_low", "epsilon_high", "max_completion_length"),
    files=True, file_declares=Surrogate())  # files: a FILE.py:FUNCTION loss type is its own surrogate
AGGREGATIONS: Registry[Aggregation] = Registry(
    "loss aggregation", field="algorithm.loss_aggregation", given=("max_completion_length",))
POLICY_LOSSES: Registry[PolicyLoss] = Registry(
    "loss type", field="algorithm.loss_type", files=True, file_kind=SURROGATES,
    file_help="your own surrogate in a file next to the preset")
ESTIMATORS: Registry[Estimator] = Registry(
    "advantage estimator", field="algorithm.advantage_estimator", files=True,
    file_help="your own estimator in a file next to the preset", given=("num_generations", "scale_rewards"),
    file_declares=Estimator())
REWARD_SCALINGS: Registry[RewardScaling] = Registry("reward scaling", field="algorithm.scale_rewards",
                                                    given=("eps",))
KL_ESTIMATORS: Registry[None] = Registry("KL estimator", field="algorithm.kl_estimator")
IMPORTANCE_LEVELS: Registry[ImportanceLevel] = Registry(
    "importance sampling level", field="algorithm.importance_sampling_level")
DPO_LOSSES: Registry[DPOLoss] = Registry("DPO loss type", field="algorithm.loss_type",
                                         given=("beta", "label_smoothing"))

_CLIP_METRICS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")

SURROGATES.register(
    "clipped", "engine.rl.surrogates:clipped",
    "PPO's clipped ratio times advantage, clip range 1 - epsilon_low .. 1 + epsilon_high",
    Surrogate(metrics=_CLIP_METRICS, inspector_flag="clip_ratio/region_mean"))

AGGREGATIONS.register(
    "sequence_mean", "engine.rl.aggregation:sequence_mean",
    "mean over each completion's tokens, then over completions (long completions' tokens weigh less)",
    Aggregation(micro_batch_weight=rows_share))
AGGREGATIONS.register(
    "fixed_length", "engine.rl.aggregation:fixed_length",
    "sum over tokens / (batch * max_completion_length) (Dr. GRPO)",
    Aggregation(micro_batch_weight=rows_share, length_neutral=True))
AGGREGATIONS.register(
    "token_mean", "engine.rl.aggregation:token_mean",
    "mean over every token of the batch (DAPO)",
    Aggregation(micro_batch_weight=tokens_share, length_neutral=True))

#: A ``FILE.py:FUNCTION`` loss type (a user's surrogate) is aggregated this way unless
#: ``loss_aggregation`` says otherwise (GRPO's default loss type, dapo, does the same).
DEFAULT_AGGREGATION = "token_mean"

POLICY_LOSSES.register("grpo", None, "mean per sequence, then over sequences",
                       PolicyLoss("clipped", "sequence_mean"))
POLICY_LOSSES.register("dr_grpo", None, "sum over tokens / (batch * max_completion_length)",
                       PolicyLoss("clipped", "fixed_length"))
POLICY_LOSSES.register("dapo", None, "mean over all tokens in the batch",
                       PolicyLoss("clipped", "token_mean"))

ESTIMATORS.register("grpo", "engine.rl.advantages:grpo_estimator",
                    "(r - group mean) / std (see scale_rewards)", Estimator(uses_scale_rewards=True))
ESTIMATORS.register("rloo", "engine.rl.advantages:rloo_estimator",
                    "r minus the mean of the group's other completions", Estimator())
ESTIMATORS.register("reinforce_pp", "engine.rl.advantages:reinforce_pp_estimator",
                    "REINFORCE++, rewards whitened over the batch (no group baseline)",
                    Estimator(per_token=True, needs_group=False))
ESTIMATORS.register("reinforce_pp_baseline", "engine.rl.advantages:reinforce_pp_baseline_estimator",
                    "group mean subtracted, then whitened over the batch", Estimator(per_token=True))

REWARD_SCALINGS.register("group", "engine.rl.advantages:scale_by_group_std",
                         "divide by the group's reward std (GRPO)", RewardScaling())
REWARD_SCALINGS.register("batch", "engine.rl.advantages:scale_by_batch_std",
                         "divide by the std of the whole batch's rewards", RewardScaling(spans_batch=True))
REWARD_SCALINGS.register("none", "engine.rl.advantages:no_scaling",
                         "no division (Dr. GRPO)", RewardScaling())

KL_ESTIMATORS.register("k1", "engine.rl.kl:kl_k1", "log pi - log ref (unbiased, can be negative)")
KL_ESTIMATORS.register("k3", "engine.rl.kl:kl_k3", "(r - 1) - log r: lower variance, always >= 0")

IMPORTANCE_LEVELS.register("token", "engine.rl.importance:token_log_ratio",
                           "one probability ratio per token (GRPO/PPO)", ImportanceLevel("tokens"))
IMPORTANCE_LEVELS.register("sequence", "engine.rl.importance:sequence_log_ratio",
                           "GSPO, one ratio per completion (geometric mean of its tokens'), clipped as a "
                           "whole; use a small epsilon (3e-4 to 4e-4)", ImportanceLevel("sequences"))

DPO_LOSSES.register("sigmoid", "engine.rl.dpo_losses:sigmoid_loss", "DPO",
                    DPOLoss(label_smoothing=True))
DPO_LOSSES.register("ipo", "engine.rl.dpo_losses:ipo_loss", "squared loss on length-averaged logprobs",
                    DPOLoss(length_averaged=True))
DPO_LOSSES.register("hinge", "engine.rl.dpo_losses:hinge_loss", "SLiC", DPOLoss())


# -------------------------------------------------------------------- composition


def register_policy_loss(name: str, surrogate: Callable | str, help: str = "", *,
                         aggregation: str = DEFAULT_AGGREGATION, metrics: tuple[str, ...] = (),
                         inspector_flag: str | None = None, origin: str = "built-in") -> None:
    """A new GRPO ``loss_type`` in one call: its surrogate registered under the same name,
    averaged by ``aggregation``, reporting ``metrics`` (flags it returns).

    e.g. register_policy_loss("cispo", cispo_surrogate, "clipped IS weight, REINFORCE-style",
                              metrics=("clip_ratio/high_mean",))
    """
    AGGREGATIONS.entry(aggregation)  # an unknown aggregation is refused before anything is added
    SURROGATES.register(name, surrogate, help, Surrogate(metrics, inspector_flag), origin=origin)
    POLICY_LOSSES.register(name, None, help or SURROGATES.entry(name).help, PolicyLoss(name, aggregation),
                           origin=origin)


def unregister_policy_loss(name: str) -> None:
    """Remove a loss type and its surrogate (a test's registration, after the test)."""
    POLICY_LOSSES.unregister(name)
    SURROGATES.unregister(name)


def policy_loss_parts(loss_type: str, loss_aggregation: str | None = None) -> tuple[str, str]:
    """(surrogate, aggregation) a GRPO preset's ``loss_type`` and ``loss_aggregation``
    name: the loss type's own, the aggregation replaced when given. A ``FILE.py:FUNCTION``
    loss type is its own surrogate (resolved by ``engine.rl.user_code.resolve``).

    >>> policy_loss_parts("dr_grpo"), policy_loss_parts("grpo", "token_mean")
    (('clipped', 'fixed_length'), ('clipped', 'token_mean'))
    >>> policy_loss_parts("my_losses.py:clip_cov")
    ('my_losses.py:clip_cov', 'token_mean')
    """
    if loss_type in POLICY_LOSSES:
        parts = POLICY_LOSSES.declares(loss_type)
        return parts.surrogate, loss_aggregation or parts.aggregation
    POLICY_LOSSES.check(loss_type)  # a file name passes; anything else raises, naming the allowed
    return loss_type, loss_aggregation or DEFAULT_AGGREGATION


def micro_batch_weight(loss_type: str, micro_mask, batch_mask, loss_aggregation: str | None = None) -> float:
    """Share of the whole batch's loss normaliser that one micro-batch carries, so that
    gradient accumulation gives the gradient of the full-batch loss: the rule the loss's
    aggregation declares (`loss_aggregation` replaces the loss type's own).

    dapo (token_mean) normalises by the batch's token count; grpo and dr_grpo by its row count.
    input:  dapo, micro mask with 3 tokens, batch mask with 12 tokens   output: 0.25
    """
    aggregation = policy_loss_parts(loss_type, loss_aggregation)[1]
    return AGGREGATIONS.declares(aggregation).micro_batch_weight(micro_mask, batch_mask)


def length_neutral_loss_types() -> list[str]:
    """The loss types whose aggregation weighs every token alike (the length-drift
    alarm's hint). e.g. ['dr_grpo', 'dapo']"""
    return [name for name, entry in zip(POLICY_LOSSES.names(), POLICY_LOSSES.entries())
            if AGGREGATIONS.declares(entry.declares.aggregation).length_neutral]
