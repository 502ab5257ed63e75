"""What a trainer declares a reader should draw, written into run_started
(docs/run-directory.md): PLOTS, each plot and the metrics it should expect, and
RECORDS, the layout of its trajectory records. Each trainer class sets its own.
"""

from __future__ import annotations


def plot(key: str, title: str, *metrics: str, eval: tuple[str, ...] = ()) -> dict:
    """One entry of a trainer's PLOTS: a plot and the metrics it should expect (`eval`:
    names from `eval` events). See docs/run-directory.md, run_started."""
    out = {"key": key, "title": title, "metrics": list(metrics)}
    if eval:
        out["eval"] = list(eval)
    return out


# The plots every sampling algorithm shows (GRPO, PPO); each trainer lists its own.
ROLLOUT_PLOTS = (
    plot("reward", "Reward", "reward", "reward_std"),
    plot("eval", "Held-out evaluation", eval=("accuracy", "reward")),
    plot("kl", "KL to reference", "kl"),
    plot("entropy", "Entropy", "entropy"),
    plot("loss", "Loss", "loss"),
    plot("length", "Completion length", "completions/mean_length"),
    plot("grad_norm", "Gradient norm", "grad_norm"),
    plot("lr", "Learning rate", "learning_rate"),
    plot("timing", "Step time", "step_time"),
)


# What a trainer that records the update's effect adds (engine/algorithms/update_effect.py)
# when the preset's training.record_update_effect is on.
UPDATE_EFFECT_PLOTS = (
    plot("update_effect", "Update effect on tokens", "update/against_advantage_ratio", "update/change_top10_share"),
    plot("update_change", "Δ log p by advantage sign", "update/change_pos_adv_mean", "update/change_neg_adv_mean",
         "update/change_abs_mean"),
)
UPDATE_EFFECT_TOKENS = ("logprob_after", "logprob_change")

# What a run of multi-turn episodes adds (data.environment, engine/episodes/)
EPISODE_PLOTS = (
    plot("episode_turns", "Turns per episode", "episodes/turns_mean"),
    plot("tool_calls", "Tool calls per episode", "tools/call_frequency", "tools/failure_frequency"),
    plot("episode_truncated", "Truncated episodes", "episodes/truncated_ratio"),
)


class Declares:
    """What a trainer declares (the Trainer base class holds it): each subclass sets
    its PLOTS and RECORDS, and RECORDS_UPDATE_EFFECT when it records the update's effect
    on its recorded rows; `declaration()` is what run_started carries."""

    PLOTS: tuple[dict, ...] = ()
    RECORDS: dict = {"layout": "single", "token_values": [], "preferred": ["advantage"]}
    RECORDS_UPDATE_EFFECT: bool = False

    def declaration(self) -> dict:
        plots, records = [dict(p) for p in self.PLOTS], dict(self.RECORDS)
        if self.RECORDS_UPDATE_EFFECT and self.cfg.record_update_effect:
            plots += [dict(p) for p in UPDATE_EFFECT_PLOTS]
            records["token_values"] = [*records.get("token_values", []), *UPDATE_EFFECT_TOKENS]
        if getattr(self, "episodes", None) is not None:
            plots += [dict(p) for p in EPISODE_PLOTS]
            records["episodes"] = True
        return {"plots": plots, "records": records}
