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


def sample_field(key: str, title: str, kind: str, help: str, **words: str) -> dict:
    """One entry of a trainer's SAMPLE_FIELDS: a key its samples events carry on each row
    besides the ones every row has, and how a reader shows it. `kind`: text, number, flag
    (with `true` and `false`, the words for each), scores (name -> number), baseline
    (ReMax's greedy completion, shown by its reward), steps (reward label -> step scores),
    episode. See docs/run-directory.md, run_started."""
    return {"key": key, "title": title, "kind": kind, "help": help, **words}


REJECTED = sample_field("rejected", "rejected completion", "text", "the pair's rejected completion")
TIE = sample_field("tie", "tie", "flag", "whether the pair's two scores tied (the first sampled is then chosen)",
                   true="yes", false="no")
LABEL = sample_field("label", "label", "flag", "whether the row's completion is desirable",
                     true="desirable", false="undesirable")
COMPONENT_ADVANTAGES = sample_field("component_advantages", "advantage per reward", "scores",
                                    "each reward's own group-normalised advantage (GDPO)")
BASELINE = sample_field("baseline", "greedy baseline", "baseline",
                        "the reward of the prompt's greedy completion, the group's baseline (ReMax)")
STEPS = sample_field("steps", "steps", "steps", "each step's score from the step rewards, in order")
EPISODE = sample_field("episode", "episode", "episode", "the multi-turn episode: turns, tool calls, how it ended")


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
    SAMPLE_FIELDS: tuple[dict, ...] = ()  # what its samples rows carry besides the common keys

    def sample_fields(self) -> list[dict]:
        """The fields this run's samples carry (SAMPLE_FIELDS, and those its preset adds)."""
        fields = [dict(f) for f in self.SAMPLE_FIELDS]
        if getattr(self, "episodes", None) is not None:
            fields.append(dict(EPISODE))
        return fields

    def declaration(self) -> dict:
        plots, records = [dict(p) for p in self.PLOTS], dict(self.RECORDS)
        if self.RECORDS_UPDATE_EFFECT and self.cfg.record_update_effect:
            plots += [dict(p) for p in UPDATE_EFFECT_PLOTS]
            records["token_values"] = [*records.get("token_values", []), *UPDATE_EFFECT_TOKENS]
        if getattr(self, "episodes", None) is not None:
            plots += [dict(p) for p in EPISODE_PLOTS]
            records["episodes"] = True
        return {"plots": plots, "records": records, "sample_fields": self.sample_fields()}
