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


class Declares:
    """What a trainer declares (the Trainer base class holds it): each subclass sets
    its PLOTS and RECORDS; `declaration()` is what run_started carries."""

    PLOTS: tuple[dict, ...] = ()
    RECORDS: dict = {"layout": "single", "token_values": [], "preferred": ["advantage"]}

    def declaration(self) -> dict:
        return {"plots": [dict(p) for p in self.PLOTS], "records": dict(self.RECORDS)}
