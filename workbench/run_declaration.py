"""What a run declares the workbench should draw, read from its `run_started` event:
`plots` (each plot and the metrics it should expect) and `records` (the layout of its
trajectory records and their per-token quantities); docs/run-directory.md. No Qt.

Runs written before the engine declared these carry only `algorithm`: `declaration_of`
builds what their engine would have declared. This is the one place in the workbench
that knows algorithms by name; a new algorithm needs nothing here.
"""

from __future__ import annotations

GROUP, PAIR, SINGLE = "group", "pair", "single"
GRPO, PPO, DPO = "grpo", "ppo", "dpo"  # the algorithms of old runs


def _plot(key: str, title: str, *metrics: str, eval: tuple[str, ...] = ()) -> dict:
    out = {"key": key, "title": title, "metrics": list(metrics)}
    if eval:
        out["eval"] = list(eval)
    return out


# What engine/algorithms/{grpo,ppo,dpo}.py declared when they started declaring.
_ROLLOUT = (_plot("reward", "Reward", "reward", "reward_std"),
            _plot("eval", "Held-out evaluation", eval=("accuracy", "reward")),
            _plot("kl", "KL to reference", "kl"), _plot("entropy", "Entropy", "entropy"),
            _plot("loss", "Loss", "loss"), _plot("length", "Completion length", "completions/mean_length"),
            _plot("grad_norm", "Gradient norm", "grad_norm"), _plot("lr", "Learning rate", "learning_rate"),
            _plot("timing", "Step time", "step_time"))
_TOKENS = ["advantage", "logprob", "ref_logprob", "kl", "entropy", "ratio"]
_OLD: dict[str, dict] = {
    "grpo": {"plots": _ROLLOUT + (
        _plot("clip", "Clip ratio", "clip_ratio/region_mean"),
        _plot("truncated", "Truncated completions", "completions/clipped_ratio"),
        _plot("zero_std", "Groups with no signal", "frac_reward_zero_std"),
        _plot("throughput", "Throughput", "throughput/tokens_per_second")),
        "records": {"layout": GROUP, "token_values": _TOKENS, "preferred": ["advantage"]}},
    "ppo": {"plots": _ROLLOUT + (
        _plot("ppo_objective", "RLHF objective", "objective/rlhf_reward", "objective/scores",
              "objective/non_score_reward"),
        _plot("value_loss", "Value loss", "loss/value_avg", "loss/policy_avg"),
        _plot("explained_variance", "Explained variance", "val/explained_variance"),
        _plot("ppo_clip", "Clipped fraction", "policy/clipfrac_avg", "val/clipfrac_avg"),
        _plot("ppo_approxkl", "Policy change per update", "policy/approxkl_avg", "val/ratio")),
        "records": {"layout": SINGLE, "token_values": _TOKENS + ["value", "return", "kl_reward", "reward_per_token"],
                    "preferred": ["advantage"]}},
    "dpo": {"plots": (
        _plot("eval", "Held-out evaluation", eval=("accuracy", "reward")), _plot("loss", "Loss", "loss"),
        _plot("grad_norm", "Gradient norm", "grad_norm"), _plot("lr", "Learning rate", "learning_rate"),
        _plot("timing", "Step time", "step_time"),
        _plot("dpo_margins", "Reward margins", "rewards/margins", "rewards/chosen", "rewards/rejected"),
        _plot("dpo_logps", "Sequence logprobs", "logps/chosen", "logps/rejected"),
        _plot("dpo_eval", "Held-out preference accuracy", eval=("preference_accuracy",)),
        _plot("dpo_accuracy", "Preference accuracy", "rewards/accuracies")),
        "records": {"layout": PAIR, "sides": ["chosen", "rejected"],
                    "token_values": ["implicit_reward", "logprob", "ref_logprob"],
                    "preferred": ["implicit_reward", "advantage"]}},
}
_UNKNOWN = {"plots": (_plot("reward", "Reward", "reward"), _plot("eval", "Held-out evaluation", eval=("accuracy", "reward"))),
            "records": {"layout": SINGLE, "token_values": [], "preferred": ["advantage"]}}


def declaration_of(started: dict | None, algorithm: str = "") -> dict:
    """{"plots": [...], "records": {...}} for a run: what its run_started (or
    run_resumed) declared, else the old default for its algorithm (`algorithm` names it
    when there is no event yet, e.g. from the preset).

    >>> declaration_of({"algorithm": "dpo"})["records"]["layout"]
    'pair'
    >>> declaration_of({"algorithm": "my_algo", "plots": [], "records": {"layout": "group"}})["records"]["layout"]
    'group'
    """
    started = started if isinstance(started, dict) else {}
    name = str(started.get("algorithm") or algorithm or "").lower()
    old = _OLD.get(name, _UNKNOWN)
    plots = started.get("plots")
    records = started.get("records")
    plots = [p for p in plots if isinstance(p, dict) and p.get("key")] if isinstance(plots, list) else None
    records = dict(records) if isinstance(records, dict) else None
    return {"plots": plots if plots is not None else [dict(p) for p in old["plots"]],
            "records": records if records is not None else dict(old["records"])}


def declared_records(started: dict | None) -> dict | None:
    """The record layout a run declared; None for an old run (each record then gets
    the old default for its own `algorithm`: see records_of)."""
    records = started.get("records") if isinstance(started, dict) else None
    return dict(records) if isinstance(records, dict) else None


def records_of(record: dict, declared: dict | None = None) -> dict:
    """The record layout for one trajectory record: the run's declared one, else the
    old default for the record's `algorithm` (a record with `chosen` and `rejected`
    sides is a pair whatever it says)."""
    if declared is None:
        declared = declaration_of({"algorithm": record.get("algorithm") or "grpo"})["records"]
    if declared.get("layout") != PAIR and "chosen" in record and "rejected" in record:
        declared = _OLD[DPO]["records"]
    return declared


def algorithm_of(record: dict, layout: str) -> str:
    """A record's algorithm for display: its own, else what an old record of that
    layout was (records written before records carried `algorithm`)."""
    return str(record.get("algorithm") or "").lower() or (DPO if layout == PAIR else GRPO)
