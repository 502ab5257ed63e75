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
                   *, log_ratio (B,T)|(B,1), epsilon_low, epsilon_high, max_completion_length,
                   sapo_temperature_pos, sapo_temperature_neg)
                   -> (per_token_loss (B,T), ratio (B,T), flags {metric: bool (B,T)})
AGGREGATIONS       (per_token_loss (B,T), mask (B,T), *, max_completion_length) -> scalar
ESTIMATORS         (rewards (B,), mask (B,T), *, num_generations, scale_rewards, baseline_rewards (B,))
                   -> advantages (B,) or (B,T)
REWARD_AGGREGATIONS (components (B,K), weights (K,), num_generations)
                   -> (advantages (B,), component_advantages (B,K)); no function: the
                   weighted sum goes to the estimator
REWARD_SCALINGS    (centred (P,G) float64, grouped (P,G) float64, *, eps) -> (P,G)
KL_ESTIMATORS      (logprobs (B,T), ref_logprobs (B,T)) -> (B,T)
IMPORTANCE_LEVELS  (logprobs (B,T), old_logprobs (B,T), mask (B,T)) -> log ratio (B,T)|(B,1)
DPO_LOSSES         (h (B,), *, beta, label_smoothing) -> per-pair losses (B,)
KTO_LOSSES         (logratios (B,), desirable (B,) bool, kl 0-dim, *, beta) -> per-row losses (B,)
POLICY_LOSSES      no function: a surrogate and an aggregation, by name
=================  =========================================================================

Tasks are registered in engine/data/tasks.py (``register_task``), on the same Registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from engine.foundation.registry import Registry

__all__ = [
    "PolicyLoss", "Surrogate", "Aggregation", "Estimator", "RewardScaling", "DPOLoss", "ImportanceLevel",
    "POLICY_LOSSES", "SURROGATES", "AGGREGATIONS", "ESTIMATORS", "REWARD_SCALINGS", "KL_ESTIMATORS",
    "IMPORTANCE_LEVELS", "DPO_LOSSES", "KTOLoss", "KTO_LOSSES", "DEFAULT_AGGREGATION", "rows_share", "tokens_share",
    "policy_loss_parts", "micro_batch_weight", "surrogate_options", "offer_section_fields",
    "length_neutral_loss_types", "register_policy_loss",
    "unregister_policy_loss", "upper_clip", "wants_greedy_baseline", "RewardAggregation", "REWARD_AGGREGATIONS",
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
    not returned: nothing marked); ``default_epsilon_high``: what an unset ``epsilon_high``
    means for it (None: ``epsilon``; cispo's cap: 5.0, see :func:`upper_clip`)."""

    metrics: tuple[str, ...] | None = ()
    inspector_flag: str | None = None
    default_epsilon_high: float | None = None


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
    ``needs_group``: relative to the other completions of its prompt (num_generations >= 2);
    ``greedy_baseline``: reads ``baseline_rewards``, the reward of each prompt's greedy
    completion, which the GRPO trainer then generates and scores every step (ReMax);
    ``step_rewards``: reads ``step_rewards`` and ``step_ends`` (B, T), every step reward at
    the token ending its step and the outcome rewards as a step on the last token
    (engine/rl/process.py), which a preset's step rewards (engine/rewards/steps.py) need."""

    per_token: bool = False
    uses_scale_rewards: bool = False
    needs_group: bool = True
    greedy_baseline: bool = False
    step_rewards: bool = False


@dataclass(frozen=True)
class RewardAggregation:
    """``own_advantages``: the aggregation computes the advantages itself from the
    components (the estimator is not used); False: it hands the estimator one reward per
    completion."""

    own_advantages: bool = False


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
class KTOLoss:
    """``uses_kl``: compares each row's log ratio with the KL reference point, which costs
    the policy and reference passes over the step's mismatched pairs (KTO); False: no
    reference point (APO-zero), those passes are skipped."""

    uses_kl: bool = True


@dataclass(frozen=True)
class ImportanceLevel:
    """``counts``: what a clip fraction is the share of (tokens, or sequences when the
    ratio is one per sequence, as TRL counts GSPO's)."""

    counts: Literal["tokens", "sequences"] = "tokens"


# ----------------------------------------------------------------------- registries

# given: the engine's own options; the GRPO section's fields join them (offer_section_fields).
SURROGATES: Registry[Surrogate] = Registry(
    "policy surrogate", given=("log_ratio", "epsilon_low", "epsilon_high"),
    files=True, file_declares=Surrogate())  # files: a FILE.py:FUNCTION loss type is its own surrogate
AGGREGATIONS: Registry[Aggregation] = Registry(
    "loss aggregation", field="algorithm.loss_aggregation", given=("max_completion_length",))
POLICY_LOSSES: Registry[PolicyLoss] = Registry(
    "loss type", field="algorithm.loss_type", files=True, file_kind=SURROGATES,
    file_help="your own surrogate in a file next to the preset")
ESTIMATORS: Registry[Estimator] = Registry(
    "advantage estimator", field="algorithm.advantage_estimator", files=True,
    file_help="your own estimator in a file next to the preset",
    given=("baseline_rewards", "step_rewards", "step_ends"),  # and the section's fields (offer_section_fields)
    file_declares=Estimator())
REWARD_AGGREGATIONS: Registry[RewardAggregation] = Registry(
    "reward aggregation", field="algorithm.multi_objective_aggregation")
REWARD_SCALINGS: Registry[RewardScaling] = Registry("reward scaling", field="algorithm.scale_rewards",
                                                    given=("eps",))
KL_ESTIMATORS: Registry[None] = Registry("KL estimator", field="algorithm.kl_estimator")
IMPORTANCE_LEVELS: Registry[ImportanceLevel] = Registry(
    "importance sampling level", field="algorithm.importance_sampling_level")
DPO_LOSSES: Registry[DPOLoss] = Registry("DPO loss type", field="algorithm.loss_type",
                                         given=("beta", "label_smoothing"))
KTO_LOSSES: Registry[KTOLoss] = Registry("KTO loss type", field="algorithm.loss_type", given=("beta",))

_CLIP_METRICS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")

SURROGATES.register(
    "clipped", "engine.rl.surrogates:clipped",
    "PPO's clipped ratio times advantage, clip range 1 - epsilon_low .. 1 + epsilon_high",
    Surrogate(metrics=_CLIP_METRICS, inspector_flag="clip_ratio/region_mean"))
# The cap of cispo's weight is epsilon_high itself; unset it is 5.0 (MiniMax-M1 / ScaleRL),
# not epsilon as TRL has it: a cap of 0.2 would shrink every token's gradient fivefold.
SURROGATES.register(
    "cispo", "engine.rl.surrogates:cispo",
    "CISPO (MiniMax-M1): logprob times advantage, weighted by the ratio capped at epsilon_high "
    "(unset: 5.0) and detached; no token's gradient is cut off",
    Surrogate(metrics=("cispo_clip_ratio",), inspector_flag="cispo_clip_ratio", default_epsilon_high=5.0))
SURROGATES.register(
    "sapo", "engine.rl.surrogates:sapo",
    "SAPO: a sigmoid gate on the ratio instead of a hard clip (sapo_temperature_pos / _neg)", Surrogate())

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
POLICY_LOSSES.register("cispo", None, "CISPO: capped, detached importance weight times logprob; mean over all "
                       "tokens (epsilon_high is the cap, unset 5.0)", PolicyLoss("cispo", "token_mean"))
POLICY_LOSSES.register("sapo", None, "SAPO: soft sigmoid gate instead of the clip; mean per sequence, then "
                       "over sequences", PolicyLoss("sapo", "sequence_mean"))

ESTIMATORS.register("grpo", "engine.rl.advantages:grpo_estimator",
                    "(r - group mean) / std (see scale_rewards)", Estimator(uses_scale_rewards=True))
ESTIMATORS.register("rloo", "engine.rl.advantages:rloo_estimator",
                    "r minus the mean of the group's other completions", Estimator())
ESTIMATORS.register("reinforce_pp", "engine.rl.advantages:reinforce_pp_estimator",
                    "REINFORCE++, rewards whitened over the batch (no group baseline)",
                    Estimator(per_token=True, needs_group=False))
ESTIMATORS.register("reinforce_pp_baseline", "engine.rl.advantages:reinforce_pp_baseline_estimator",
                    "group mean subtracted, then whitened over the batch", Estimator(per_token=True))
ESTIMATORS.register("remax", "engine.rl.advantages:remax_estimator",
                    "ReMax: r minus the reward of the prompt's greedy completion (one more generation a prompt)",
                    Estimator(needs_group=False, greedy_baseline=True))
ESTIMATORS.register("grpo_process", "engine.rl.process:grpo_process_estimator",
                    "process supervision (DeepSeekMath): every step reward of a group normalised by the group's, "
                    "a token's advantage the sum of those of the steps ending at or after it",
                    Estimator(per_token=True, uses_scale_rewards=True, step_rewards=True))

REWARD_AGGREGATIONS.register("sum_then_normalize", None,
                             "the rewards' weighted sum goes to the advantage estimator",
                             RewardAggregation(own_advantages=False))
REWARD_AGGREGATIONS.register("normalize_then_sum", "engine.rl.advantages:normalize_then_sum",
                             "GDPO: each reward normalised in its group, weighted sum normalised over the "
                             "batch (advantage_estimator grpo; scale_rewards ignored)",
                             RewardAggregation(own_advantages=True))

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

KTO_LOSSES.register("kto", "engine.rl.kto_losses:kto_row_losses",
                    "KTO: each row's log ratio against the KL reference point (mismatched pairs)", KTOLoss())
KTO_LOSSES.register("apo_zero_unpaired", "engine.rl.kto_losses:apo_zero_unpaired_row_losses",
                    "APO-zero, unpaired: desirable rows' likelihood up, undesirable down; no reference point",
                    KTOLoss(uses_kl=False))


# -------------------------------------------------------------------- composition


def register_policy_loss(name: str, surrogate: Callable | str, help: str = "", *,
                         aggregation: str = DEFAULT_AGGREGATION, metrics: tuple[str, ...] = (),
                         inspector_flag: str | None = None, default_epsilon_high: float | None = None,
                         origin: str = "built-in") -> None:
    """A new GRPO ``loss_type`` in one call: its surrogate registered under the same name,
    averaged by ``aggregation``, reporting ``metrics`` (flags it returns); an unset
    ``epsilon_high`` means ``default_epsilon_high`` for it (None: ``epsilon``).

    e.g. register_policy_loss("clip_cov", clip_cov_surrogate, "clip a few high-covariance tokens",
                              metrics=("clip_cov/clipped",))
    """
    AGGREGATIONS.entry(aggregation)  # an unknown aggregation is refused before anything is added
    SURROGATES.register(name, surrogate, help, Surrogate(metrics, inspector_flag, default_epsilon_high),
                        origin=origin)
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


def upper_clip(loss_type: str, epsilon: float, epsilon_high: float | None) -> float:
    """The ``epsilon_high`` a GRPO loss type's surrogate is given: the preset's when set,
    else the surrogate's declared default (``Surrogate.default_epsilon_high``), else
    ``epsilon`` (TRL's rule for every loss type; for cispo, whose cap is epsilon_high
    itself, that would be 0.2: a weight of at most 0.2 on every token).

    >>> upper_clip("dapo", 0.2, None), upper_clip("cispo", 0.2, None), upper_clip("cispo", 0.2, 3.0)
    (0.2, 5.0, 3.0)
    """
    if epsilon_high is not None:
        return epsilon_high
    surrogate = policy_loss_parts(loss_type)[0]
    declared = SURROGATES.declares(surrogate) if surrogate in SURROGATES else None  # a user's: epsilon
    default = getattr(declared, "default_epsilon_high", None)
    return epsilon if default is None else default


def surrogate_options(algorithm) -> dict:
    """What a GRPO run's surrogate and aggregation may ask for by name (engine.rl.losses.grpo_loss's
    `options`): every field of the algorithm's section, and the clip range as the surrogate
    takes it, epsilon_low (the section's epsilon) and epsilon_high (`upper_clip`'s). The run
    and `rl-engine validate`'s dry run of a user's surrogate both take them from here.

    >>> from engine.algorithms.grpo.config import GRPOConfig
    >>> options = surrogate_options(GRPOConfig(loss_type="cispo", delta=2.0))
    >>> options["epsilon_low"], options["epsilon_high"], options["delta"], options["sapo_temperature_neg"]
    (0.2, 5.0, 2.0, 1.05)
    """
    return {**algorithm.model_dump(), "epsilon_low": algorithm.epsilon,
            "epsilon_high": upper_clip(algorithm.loss_type, algorithm.epsilon, algorithm.epsilon_high)}


def offer_section_fields(section, *registries: Registry) -> None:
    """Every field of an algorithm's preset section becomes an option the registries'
    functions may name (their `given`, which a user's function's signature is checked
    against, `given` and then `section_fields`): the section module calls it once, below
    its class, so that a new option is a field there and a keyword of the function that
    reads it, and nothing else.

    e.g. offer_section_fields(GRPOConfig, SURROGATES) -> SURROGATES.section_fields holds 'delta'
    """
    for registry in registries:  # several sections may offer to one registry (DPO's losses: DPO, online DPO)
        offered = registry.section_fields
        registry.section_fields = (*offered, *(name for name in section.model_fields
                                               if name not in registry.given and name not in offered))


def wants_greedy_baseline(entry) -> bool:
    """Whether an estimator (a registry entry, engine.rl.user_code.resolve's) needs the
    greedy completion's reward of each prompt: it declares ``greedy_baseline`` (remax; a
    user's function does when it asks for ``baseline_rewards``).

    >>> wants_greedy_baseline(ESTIMATORS.entry("remax")), wants_greedy_baseline(ESTIMATORS.entry("grpo"))
    (True, False)
    """
    return bool(getattr(entry.declares, "greedy_baseline", False))


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
