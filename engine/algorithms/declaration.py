"""What a trainer declares a reader should draw, written into run_started
(docs/run-directory.md): PLOTS, each plot and the metrics it should expect, and
RECORDS, the layout of its trajectory records. Each trainer class sets its own.
"""

from __future__ import annotations

from engine.algorithms.reward_tokens import REWARD_TOKENS
from engine.rewards.kinds import REWARD_MODEL, component_label, learned_and_checks, reward_kind


def plot(key: str, title: str, *metrics: str, eval: tuple[str, ...] = (), help: str = "") -> dict:
    """One entry of a trainer's PLOTS: a plot and the metrics it should expect (`eval`:
    names from `eval` events; `help`: what it shows and what healthy looks like, a
    reader's tooltip; by default PLOT_HELP's for the same key and title). See
    docs/run-directory.md, run_started.

    >>> plot("lr", "Learning rate", "learning_rate")["help"][:28]
    'The learning rate each optim'
    """
    out = {"key": key, "title": title, "metrics": list(metrics)}
    if eval:
        out["eval"] = list(eval)
    help = help or common_plot_help(key, title)
    if help:
        out["help"] = help
    return out


def common_plot_help(key: str, title: str) -> str:
    """What the plot `key` titled `title` shows and what healthy looks like (PLOT_HELP;
    '' for a plot it does not know). Keyed by title too: one key can mean another thing
    in another algorithm (KTO's `kl` is a reference point, not a KL to the reference).

    >>> common_plot_help("kl", "KL to reference")[:20], common_plot_help("kl", "Something else")
    ('How far the policy h', '')
    """
    return PLOT_HELP.get((key, title), "")


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


# What each declared plot shows and what healthy looks like: the ⓘ of its plot in the
# window (and the window's fallback for a run recorded before plots carried help). Keyed
# by (key, title); a trainer whose plot means something else passes its own `help`.
PLOT_HELP: dict[tuple[str, str], str] = {
    # ---- every sampling algorithm (ROLLOUT_PLOTS)
    ("reward", "Reward"): (
        "The mean reward of the step's sampled completions (± their std as a band), and each reward "
        "component's mean. Healthy: it rises and levels off; a band that shrinks to nothing means every "
        "completion scores alike and the group has nothing left to learn from."),
    ("eval", "Held-out evaluation"): (
        "Accuracy (the share of held-out prompts whose greedy answer is right) and mean reward on prompts "
        "the run never trains on, at each evaluation (points). Healthy: it rises with the training reward; "
        "training reward up while this stays flat or falls is memorising or exploiting the reward."),
    ("kl", "KL to reference"): (
        "How far the policy has drifted from the reference model (the base, without the adapter): the mean "
        "per-token KL estimate (k3, always >= 0) over the step's completions, in nats. Healthy: it grows "
        "slowly from 0 and levels off; a sudden spike or steady climb means the policy is running away "
        "(beta holds it back)."),
    ("entropy", "Entropy"): (
        "The policy's mean per-token entropy over the completions, in nats: how unsure it is of the next "
        "token. Healthy: it falls slowly as the model grows confident; a collapse towards 0 early means it "
        "stopped exploring (every sample alike), a rise means it is getting noisier."),
    ("loss", "Loss"): (
        "The objective the update minimises, averaged over the step. For the policy-gradient losses (GRPO, "
        "PPO) it hovers near 0 and says little on its own: watch the reward. For preference losses (DPO's "
        "sigmoid starts at log 2 = 0.69) healthy runs see it fall. NaN or a jump by orders of magnitude is "
        "a broken step."),
    ("length", "Completion length"): (
        "Mean (and min, max) length of the sampled completions, in tokens. Healthy: it settles near what "
        "the task needs; a steady climb towards max_completion_length often means the reward pays for "
        "length, a fall to a few tokens that the model found a short answer that scores."),
    ("grad_norm", "Gradient norm"): (
        "The norm of the step's gradient before clipping (training.max_grad_norm clips it). Healthy: "
        "roughly flat with occasional spikes; a steady climb or spikes far above the clip norm mean the "
        "learning rate is too high or a step was unusual."),
    ("lr", "Learning rate"): (
        "The learning rate each optimizer step used. Healthy: the preset's schedule (training."
        "warmup_steps, then constant, linear or cosine decay): nothing to watch unless it is not what you "
        "set."),
    ("timing", "Step time"): (
        "Seconds per training step, and its parts (sampling the rollout, scoring the rewards, the "
        "update). Healthy: flat; it rises when completions grow longer, and steps with an evaluation or a "
        "checkpoint take longer."),
    ("throughput", "Throughput"): (
        "Tokens processed per second in the step (and the rollout's sampling speed alone). Healthy: flat "
        "for a given machine; a drop while the step time rises is the machine, not the training."),
    # ---- GRPO and its family
    ("clip", "Clip ratio"): (
        "The share of completion tokens whose probability ratio (new / sampling policy) left the clip "
        "range, so the update ignored them. Healthy: 0 with one update per batch (num_iterations 1); a "
        "few per cent with more; a large share means each batch moves the policy too far."),
    ("truncated", "Truncated completions"): (
        "The share of sampled completions cut off at max_completion_length without an end token. "
        "Healthy: near 0; a rising share means answers grow too long for the budget, and their rewards "
        "are judged on half an answer."),
    ("zero_std", "Groups with no signal"): (
        "The share of prompt groups whose completions all got the same reward, so every advantage is 0 "
        "and the group teaches nothing. Healthy: well below 1; near 1 when the task is too easy (all "
        "right) or too hard (all wrong) for the model."),
    # ---- PPO (names as TRL logs them)
    ("ppo_objective", "RLHF objective"): (
        "The score the rewards gave (score), the KL penalty against the reference (KL penalty, <= 0) and "
        "their sum, the objective PPO maximises. Healthy: the objective rises; a score rising while the "
        "penalty grows as fast means the policy buys reward by drifting."),
    ("value_loss", "Value loss"): (
        "The critic's loss (how far its value estimates are from the returns) and the policy's clipped "
        "surrogate loss. Healthy: the value loss falls as the critic learns; the policy loss hovers near 0."),
    ("explained_variance", "Explained variance"): (
        "How much of the returns' variance the critic's values explain: 1 is perfect, 0 no better than "
        "a constant, below 0 worse. Healthy: it climbs towards 1 and stays above 0; the advantages are "
        "noise while it is near 0."),
    ("ppo_clip", "Clipped fraction"): (
        "The share of tokens where the policy's ratio (and the value's change) hit PPO's clip range. "
        "Healthy: a few per cent to about 20 %; more means each update moves too far (lower the learning "
        "rate or the epochs)."),
    ("ppo_approxkl", "Policy change per update"): (
        "How far each update moved the policy from the one that sampled (approximate KL, old to new) and "
        "the mean probability ratio. Healthy: small (about 0.01 or less) with the ratio near 1; large "
        "values mean the updates are too big."),
    # ---- preference pairs (DPO, online DPO; names as TRL logs them)
    ("dpo_margins", "Reward margins"): (
        "The implicit rewards (beta x log-ratio of policy to reference, summed over the answer) of the "
        "chosen and rejected answers, and their margin. Healthy: the margin rises above 0; both "
        "falling while the margin grows is the common case (the rejected falls faster)."),
    ("dpo_margins", "Implicit reward margins"): (
        "The implicit rewards (beta x log-ratio of policy to reference, summed over the answer) of the "
        "chosen and rejected samples, and their margin. Healthy: the margin rises above 0."),
    ("dpo_logps", "Sequence logprobs"): (
        "The policy's summed log-probability of the chosen and of the rejected answers. Healthy: the gap "
        "opens with chosen above rejected; both falling far below where they started means the policy "
        "is pushing probability to answers that are neither."),
    ("dpo_eval", "Held-out preference accuracy"): (
        "The share of held-out pairs whose chosen answer gets the higher implicit reward, at each "
        "evaluation. Healthy: it rises above 0.5 (chance) and stays there."),
    ("dpo_accuracy", "Preference accuracy"): (
        "The share of the step's pairs whose chosen answer has the higher implicit reward. Healthy: it "
        "rises from 0.5 (chance at the start, when policy and reference agree) towards 1; 1 from the "
        "first steps on training pairs alone may be memorising."),
    ("scores_margin", "Score margin (chosen - rejected)"): (
        "How much higher the rewards scored the chosen sample than the rejected one, on average. Healthy: "
        "above 0; near 0 means the two samples are hard to tell apart and the pairs carry little signal."),
    ("zero_std", "Tied pairs"): (
        "The share of pairs whose two samples got the same score (the first sampled is then chosen): a "
        "tie teaches nothing. Healthy: well below 1."),
    ("contain_eos", "Completions with EOS"): (
        "The share of sampled completions that ended with an end token (not cut at max_completion_length). "
        "Healthy: near 1."),
    # ---- KTO
    ("kl", "KL reference point (mismatched pairs)"): (
        "KTO's reference point: the KL of policy to reference estimated on mismatched prompt-answer pairs, "
        "clamped at 0, against which each row's implicit reward is weighed. Healthy: it starts at 0 and "
        "grows slowly."),
    ("kto_rewards", "Implicit rewards"): (
        "The mean implicit reward (beta x log-ratio of policy to reference) of the desirable rows "
        "(chosen) and the undesirable ones (rejected), and their difference. Healthy: desirable rises "
        "above undesirable."),
    ("kto_logps", "Sequence logprobs"): (
        "The policy's summed log-probability of the desirable and of the undesirable rows' answers. "
        "Healthy: the desirable ones rise (or fall less) relative to the undesirable ones."),
    ("kto_eval", "Held-out label accuracy"): (
        "The share of held-out rows the implicit reward labels right (above 0 for a desirable answer, "
        "below for an undesirable one), at each evaluation. Healthy: it rises above 0.5."),
    ("kto_counts", "Desirable and undesirable rows"): (
        "How many desirable (chosen) and undesirable (rejected) rows each step's batch held. Nothing to "
        "watch unless one side is missing: KTO's loss weighs each side by desirable_weight and "
        "undesirable_weight."),
    # ---- reward model
    ("eval", "Held-out accuracy (pairs)"): (
        "The share of held-out pairs where the reward model scores the chosen answer above the rejected "
        "one, at each evaluation. Healthy: it rises above 0.5 (chance) and stays near the training "
        "accuracy; a gap that opens is overfitting."),
    ("loss", "Loss (Bradley-Terry)"): (
        "The pairwise loss -log sigmoid(score chosen - score rejected): log 2 = 0.69 at chance. Healthy: it "
        "falls below 0.69; near 0 on training pairs alone may be memorising."),
    ("rm_accuracy", "Accuracy (chosen scored above rejected)"): (
        "The share of the step's training pairs scored the right way round. Healthy: it rises from 0.5 "
        "towards 1."),
    ("rm_rewards", "Rewards"): (
        "The mean score of the chosen and of the rejected answers, and their margin. Healthy: the margin "
        "grows; the scores' level is arbitrary (center_rewards_coefficient keeps it near 0)."),
    ("rm_range", "Reward range"): (
        "The lowest, mean and highest score in the step's batch. Healthy: a range that widens slowly; "
        "scores running off to large values make a poor reward for RL later."),
    ("rm_eval_margin", "Held-out margin"): (
        "The mean score margin (chosen - rejected) on held-out pairs, at each evaluation. Healthy: above 0 "
        "and rising with the training margin."),
    # ---- SFT
    ("loss", "Loss (completion NLL)"): (
        "The mean negative log-likelihood of the demonstrations' completion tokens (nats per token). "
        "Healthy: it falls and levels off; near 0 is the model reciting the training data."),
    ("sft_eval_loss", "Held-out loss"): (
        "The completion NLL on held-out demonstrations, at each evaluation. Healthy: it falls with the "
        "training loss; rising while the training loss falls is overfitting (stop there)."),
    ("sft_eval_tokens", "Held-out token accuracy"): (
        "The share of held-out completion tokens the model predicts exactly (greedy next token), at each "
        "evaluation. Healthy: it rises with the training accuracy."),
    ("sft_accuracy", "Mean token accuracy"): (
        "The share of the step's completion tokens whose greedy prediction is the demonstration's token. "
        "Healthy: it rises; near 1 on training data alone is memorising."),
    ("sft_entropy", "Entropy"): (
        "The model's mean per-token entropy on the demonstrations' completions, in nats. Healthy: it falls "
        "as the model learns the demonstrations' style."),
    ("sft_tokens", "Tokens trained on"): (
        "The running count of completion tokens trained on. Healthy: it grows steadily; nothing to watch."),
    # ---- the update's effect (UPDATE_EFFECT_PLOTS)
    ("update_effect", "Update effect on tokens"): (
        "How this step's update moved the recorded tokens' log-probabilities (a share, 0 to 1). Healthy: "
        "few tokens moved against their advantage, and the top 10 % share well below 1."),
    ("update_change", "Δ log p by advantage sign"): (
        "The mean change of log p in this step's update, for tokens the update pushes up and down (DPO: "
        "the chosen and rejected sides). Healthy: above 0 for positive advantages, below 0 for negative."),
    # ---- multi-turn episodes (EPISODE_PLOTS)
    ("episode_turns", "Turns per episode"): (
        "The model's turns per episode, averaged over the step. Healthy: it settles where the task needs "
        "tools; 1 throughout means the model never calls a tool."),
    ("tool_calls", "Tool calls per episode"): (
        "How often the model calls its tools, and how often the calls fail. Healthy: calls settle at what "
        "the task needs and failures fall towards 0."),
    ("episode_truncated", "Truncated episodes"): (
        "The share of episodes cut short before the model's final answer (token budget, max_turns or "
        "max_tool_calls ran out). Healthy: near 0."),
    ("episode_tokens", "Tokens per episode"): (
        "Tokens the model wrote per episode (trained) and tokens the tools and the chat template added "
        "(attended to, never trained). Healthy: the model's share stays within the budget."),
}


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
    plot("episode_tokens", "Tokens per episode", "episodes/model_tokens_mean", "episodes/tool_tokens_mean"),
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
