"""What a trainer declares a reader should draw, written into run_started
(docs/run-directory.md): PLOTS, each plot and the metrics it should expect, and
RECORDS, the layout of its trajectory records. Each trainer class sets its own.
"""

from __future__ import annotations

from engine.algorithms.reward_tokens import REWARD_TOKENS
from engine.rewards.kinds import REWARD_MODEL, component_label, learned_and_checks, reward_kind


def plot(key: str, title: str, *metrics: str, eval: tuple[str, ...] = (), help: str = "") -> dict:
    """One entry of a trainer's PLOTS: a plot and the metrics it should expect (`eval`:
    names from `eval` events; `help`: what it shows, a reader's tooltip). See
    docs/run-directory.md, run_started."""
    out = {"key": key, "title": title, "metrics": list(metrics)}
    if eval:
        out["eval"] = list(eval)
    if help:
        out["help"] = help
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

LEARNED_VS_TRUTH_HELP = (
    "Each learned reward (a reward model the policy is trained against) beside the other rewards, the checks "
    "it only approximates (a verifier such as exact_match, often logged with weight 0): training means, and "
    "the held-out evaluation's as points. Healthy: they rise together. The learned reward rising while a "
    "check falls is the policy exploiting the reward model (Goodhart's law).")


def learned_vs_truth(entries) -> dict | None:
    """The Goodhart plot of a preset whose `rewards` (`entries`) hold a learned reward and
    another component: every one's `rewards/<label>/mean`, in training and in the held-out
    evaluation; None otherwise.

    >>> from types import SimpleNamespace as E
    >>> learned_vs_truth([E(name="reward_model", label=None), E(name="exact_match", label=None)])["metrics"]
    ['rewards/reward_model/mean', 'rewards/exact_match/mean']
    >>> learned_vs_truth([E(name="exact_match", label=None)]) is None
    True
    """
    learned, checks = learned_and_checks(entries)
    if not learned or not checks:
        return None
    names = [f"rewards/{label}/mean" for label in (*learned, *checks)]
    return plot("learned_vs_truth", "Learned reward against the truth", *names, eval=tuple(names),
                help=LEARNED_VS_TRUTH_HELP)


def reward_model_labels(entries) -> list[str]:
    """The labels of a preset's `reward_model` components (the learned rewards read token
    by token on the recorded rows: engine/algorithms/reward_tokens.py).

    >>> from types import SimpleNamespace as E
    >>> reward_model_labels([E(name="reward_model", label="rm"), E(name="process_reward_model", label=None)])
    ['rm']
    """
    learned, _ = learned_and_checks(entries)
    return [label for entry in entries if reward_kind(entry.name) == REWARD_MODEL
            and (label := component_label(entry.name, getattr(entry, "label", None))) in learned]


class Declares:
    """What a trainer declares (the Trainer base class holds it): each subclass sets
    its PLOTS and RECORDS, RECORDS_UPDATE_EFFECT when it records the update's effect on its
    recorded rows, RECORDS_REWARD_TOKENS when they carry a reward model's score token by
    token; `declaration()` is what run_started carries (with the Goodhart plot,
    `learned_vs_truth`, for an algorithm trained on the rewards of its own samples)."""

    PLOTS: tuple[dict, ...] = ()
    RECORDS: dict = {"layout": "single", "token_values": [], "preferred": ["advantage"]}
    RECORDS_UPDATE_EFFECT: bool = False
    # rm_score / rm_score_change on the recorded rows when the preset has a reward_model reward
    RECORDS_REWARD_TOKENS: bool = False
    SAMPLE_FIELDS: tuple[dict, ...] = ()  # what its samples rows carry besides the common keys

    def sample_fields(self) -> list[dict]:
        """The fields this run's samples carry (SAMPLE_FIELDS, and those its preset adds)."""
        fields = [dict(f) for f in self.SAMPLE_FIELDS]
        if getattr(self, "episodes", None) is not None:
            fields.append(dict(EPISODE))
        return fields

    def declaration(self) -> dict:
        plots, records = [dict(p) for p in self.PLOTS], dict(self.RECORDS)
        rewards = getattr(getattr(self, "preset", None), "rewards", None) or []
        episodes = getattr(self, "episodes", None) is not None  # their records go without (reward_tokens.py)
        if self.RECORDS_REWARD_TOKENS and reward_model_labels(rewards) and not episodes:
            records["token_values"] = [*records.get("token_values", []), *REWARD_TOKENS]
        # An algorithm that samples its batch (TrainingStep.SAMPLES) is trained on its rewards:
        # it can exploit a learned one.
        goodhart = learned_vs_truth(rewards) if getattr(self, "SAMPLES", False) else None
        if goodhart is not None:
            plots.append(goodhart)
        if self.RECORDS_UPDATE_EFFECT and self.cfg.record_update_effect:
            plots += [dict(p) for p in UPDATE_EFFECT_PLOTS]
            records["token_values"] = [*records.get("token_values", []), *UPDATE_EFFECT_TOKENS]
        if episodes:
            plots += [dict(p) for p in EPISODE_PLOTS]
            records["episodes"] = True
        return {"plots": plots, "records": records, "sample_fields": self.sample_fields()}
