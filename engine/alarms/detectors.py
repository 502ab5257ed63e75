"""One pure function per alarm: the run's metric and evaluation history in, a `Finding`
(what it saw, over which steps, the numbers) or None out. Each alarm's title, why it
matters and what to try are in KINDS. Thresholds come from the preset's `alarms`
section (engine/alarms/config.py); the window is `alarms.window` steps.

The metrics are the engine's own (TRL's names where TRL has them): `reward`,
`frac_reward_zero_std`, `completions/mean_length`, `completions/clipped_ratio`, `kl`,
`entropy`, `grad_norm`, `skipped_steps`, and with step rewards (docs/algorithms.md)
`frac_step_reward_zero_std` and `steps/single_step_ratio`, and with
training.record_update_effect the update/* metrics; a metric an algorithm does not
log leaves its alarms silent (DPO samples nothing while training: only the non-finite,
held-out and update alarms apply to it; a run without step rewards never raises the step
alarms).
"""

from __future__ import annotations

import math

from engine.alarms.config import AlarmsConfig
from engine.alarms.exploitation import EXPLOITED, EXPLOITED_KIND, reward_model_exploited
from engine.alarms.history import Finding, History, Kind
from engine.alarms.history import correlation as _correlation, evaluations as _evaluations, evidence as _evidence
from engine.alarms.history import mean as _mean, number as _number, raw as _raw, span as _span
from engine.alarms.history import signed as _signed
from engine.rl.catalog import length_neutral_loss_types

__all__ = ["KINDS", "DETECTORS", "Finding", "History", "held_out_score"]


KINDS: dict[str, Kind] = {
    "no_learning_signal": Kind(
        "No learning signal",
        "Updates follow differences in reward between completions; where there are none (equal rewards, "
        "truncated completions, a zero gradient), the steps teach the model nothing.",
        (("algorithm.num_generations", "more completions per prompt make a group with different rewards likelier"),
         ("rewards", "a reward with partial credit (e.g. sort_position beside exact_match) separates near misses"),
         ("algorithm.temperature", "a higher temperature samples more varied completions"),
         ("algorithm.max_completion_length", "room for the model to finish, if completions are cut off"))),
    "step_reward_no_signal": Kind(
        "No step-reward signal",
        "A process reward helps only where it scores the steps of a group's completions differently; where every "
        "step of a group got one score, it cannot tell the completions apart and adds nothing to their advantages.",
        (("rewards", "read the step scores of these steps' samples (`rl-engine try-reward` prints each step's); a "
                     "process reward model may need another `label`, `good_token` or `step_tag`"),
         ("algorithm.num_generations", "more completions per prompt make a group whose steps differ likelier"),
         ("algorithm.temperature", "a higher temperature samples more varied steps"))),
    "steps_not_split": Kind(
        "Steps no longer split",
        "A step reward splits each completion at its step delimiter; when the completions stop containing it (a "
        "changed format), each is one step and the process reward degenerates to an outcome reward.",
        (("rewards", "check the entries' `step_delimiter` against these steps' samples (`rl-engine try-reward` "
                     "prints the steps it finds), or add a format reward that pays for the step layout"),
         ("algorithm.beta", "a KL penalty keeps the policy near the reference's format"),
         ("algorithm.max_completion_length", "room for more than one step, if completions are cut short"))),
    "kl_spike": Kind(
        "KL spike",
        "A sudden jump in KL means an update moved the policy far from the reference at once; such jumps often "
        "precede a collapse into degenerate text.",
        (("training.learning_rate", "lower it (e.g. by 3-10x)"),
         ("training.max_grad_norm", "clip gradients harder"),
         ("algorithm.beta", "a larger KL coefficient holds the policy nearer the reference"))),
    "update_against_advantage": Kind(
        "Tokens moved against their advantage",
        "An update should make the tokens with a positive advantage likelier and those with a negative one less "
        "likely; when many move the other way, something else steers it: clipping (a clipped token gets no push of "
        "its own and is carried by the others), the KL term pulling toward the reference, a learning rate too high "
        "for the batch, or completions that share weights pulling against each other.",
        (("training.learning_rate", "lower it: a smaller step overshoots less, so tokens move more as their own "
                                    "advantage asks"),
         ("algorithm.num_iterations", "fewer updates on one batch (PPO: algorithm.num_ppo_epochs): after the first, "
                                      "tokens whose ratio left the clip range get no push of their own"),
         ("algorithm.epsilon", "with several updates a batch, check clip_ratio: a wider clip range (PPO: "
                               "algorithm.cliprange) leaves fewer tokens clipped, at the price of larger steps"),
         ("algorithm.beta", "with beta > 0 the KL term pulls tokens back toward the reference, against the advantage "
                            "where they disagree; a smaller beta (PPO: algorithm.kl_coef) lets the advantage lead"))),
    "entropy_collapse": Kind(
        "Entropy collapse",
        "With little entropy left the policy samples nearly the same completion every time, so groups stop "
        "differing and exploration ends.",
        (("training.learning_rate", "lower it"),
         ("algorithm.temperature", "sample at a higher temperature"),
         ("algorithm.beta", "a KL penalty keeps the policy near the reference's spread"))),
    "length_drift": Kind(
        "Length drift",
        "Completions grow or shrink while the held-out score stays put: the updates are changing how much the "
        "model writes, not whether it is right.",
        (("rewards", "check which component pays for length; add a length-neutral verifier or a brevity penalty"),
         ("algorithm.max_completion_length", "bound the length"),
         ("algorithm.loss_type", " or ".join(f"`{name}`" for name in length_neutral_loss_types())
          + " normalise the loss without favouring long or short answers"))),
    "reward_hacking": Kind(
        "Reward rising with length",
        "When the training reward rises only together with completion length, the policy may be earning reward "
        "by writing more rather than by being right (the common reward-hacking sign).",
        (("rewards", "read the samples of these steps; penalise length or reward only verified answers"),
         ("algorithm.max_completion_length", "bound the length"),
         ("data.eval_fraction", "a held-out split shows whether the gain is real"))),
    "eval_falling": Kind(
        "Held-out score falling",
        "The training reward goes up while the held-out score goes down: the policy is fitting the reward or the "
        "training prompts, not the task.",
        (("rewards", "a reward that verifies the answer rather than its form"),
         ("training.learning_rate", "lower it"),
         ("algorithm.beta", "a KL penalty limits how far the policy drifts"),
         ("training.max_steps", "stop at the best checkpoint (training.save_steps)"))),
    "nonfinite_steps": Kind(
        "Non-finite steps skipped",
        "A NaN or inf loss or gradient skips the step; repeated, the run stops at training.max_nonfinite_steps.",
        (("training.learning_rate", "lower it"),
         ("training.max_grad_norm", "clip gradients harder"),
         ("rewards", "check the rewards for extreme values"),
         ("model.dtype", "bfloat16 rather than float16 (its range is wider)"))),
}


def held_out_score(result: dict) -> tuple[str, float] | None:
    """The held-out score an evaluation gives: accuracy by the verifier when there is one,
    else DPO's preference accuracy, else the mean reward."""
    for key in ("accuracy", "preference_accuracy", "reward"):
        if _number(result.get(key)):
            return key, float(result[key])
    return None


def _training_score(history: History) -> str | None:
    for key in ("reward", "rewards/accuracies"):
        if any(_number(m.get(key)) for m in history.metrics[-1:]):
            return key
    return None


# ------------------------------------------------------------------ the detectors


def _all_alike(history: History, cfg: AlarmsConfig, key: str) -> list[tuple[int, float]] | None:
    """The last `window` steps of a frac_*_zero_std metric when their mean is at or above
    equal_rewards_fraction (that share of the groups got one score), else None."""
    pairs = history.series(key, cfg.window)
    return pairs if len(pairs) == cfg.window and _mean(pairs) >= cfg.equal_rewards_fraction else None


def no_learning_signal(history: History, cfg: AlarmsConfig) -> Finding | None:
    # Equal steps and equal totals in a run with step rewards are step_reward_no_signal's
    # alarm, which quotes both: one alarm for one cause (its consequences, a zero gradient
    # among them, included), the one that names the steps.
    if (_all_alike(history, cfg, "frac_step_reward_zero_std") is not None
            and _all_alike(history, cfg, "frac_reward_zero_std") is not None):
        return None
    checks = (
        ("frac_reward_zero_std", lambda m: m >= cfg.equal_rewards_fraction,
         lambda m, which: f"{which} was {m:.0%}: that share of the prompt groups had completions that all got the "
                          f"same reward (alarm at {cfg.equal_rewards_fraction:.0%}), so their advantages are zero"),
        ("completions/clipped_ratio", lambda m: m >= cfg.truncated_fraction,
         lambda m, which: f"{which} was {m:.0%}: that share of the completions were cut at max_completion_length "
                          f"(alarm at {cfg.truncated_fraction:.0%})"),
        ("grad_norm", lambda m: m <= 1e-8,
         lambda m, which: f"{which} was {m:.2g}: the updates changed nothing"),
    )
    for key, fires, words in checks:
        pairs = history.series(key, cfg.window)
        if len(pairs) == cfg.window and fires(_mean(pairs)):
            return Finding(pairs[0][0], pairs[-1][0], key, words(_mean(pairs), _raw(key, pairs)),
                           _evidence(**{key.replace("/", "__"): pairs}))
    return None


def step_reward_no_signal(history: History, cfg: AlarmsConfig) -> Finding | None:
    """frac_step_reward_zero_std (the share of groups whose step scores, every step
    component, are all equal) averaged over `window` steps at or above equal_rewards_fraction,
    as no_learning_signal reads frac_reward_zero_std.

    e.g. window 4, frac_step_reward_zero_std 0.75, 1, 1, 1 -> mean 0.9375 >= 0.9: fires.
    """
    key = "frac_step_reward_zero_std"
    pairs = _all_alike(history, cfg, key)
    if pairs is None:
        return None
    level = _mean(pairs)
    saw = (f"{_raw(key, pairs)} was {level:.0%}: in that share of the prompt groups every step of every completion "
           f"was scored alike (alarm at {cfg.equal_rewards_fraction:.0%}), so the step reward cannot tell the "
           f"completions apart")
    totals = _all_alike(history, cfg, "frac_reward_zero_std")
    if totals is not None:
        saw += (f"; {_raw('frac_reward_zero_std', totals)} was {_mean(totals):.0%} too: their total rewards were "
                f"equal as well, so their advantages are zero")
        return Finding(pairs[0][0], pairs[-1][0], key, saw,
                       _evidence(frac_step_reward_zero_std=pairs, frac_reward_zero_std=totals))
    return Finding(pairs[0][0], pairs[-1][0], key, saw, _evidence(frac_step_reward_zero_std=pairs))


# Where steps/single_step_ratio must have been (a `window` mean at or below it) before the
# steps-not-split alarm can fire: the completions were split into steps earlier in the run.
SPLIT_BEFORE = 0.5


def _lowest_window(pairs: list[tuple[int, float]], window: int) -> list[tuple[int, float]]:
    """The `window` consecutive points of `pairs` with the lowest mean (the earliest of equals).

    >>> _lowest_window([(1, 1.0), (2, 0.0), (3, 0.5), (4, 0.0)], 2)
    [(2, 0.0), (3, 0.5)]
    """
    best, best_sum, total = 0, math.inf, 0.0
    for i, (_, value) in enumerate(pairs):
        total += value - (pairs[i - window][1] if i >= window else 0.0)
        if i >= window - 1 and total < best_sum - 1e-12:
            best, best_sum = i - window + 1, total
    return pairs[best:best + window]


def steps_not_split(history: History, cfg: AlarmsConfig) -> Finding | None:
    """steps/single_step_ratio (the share of completions a step reward found at most one
    step in) averaged over the last `window` steps at or above single_step_fraction, after
    `window` steps earlier in the run averaged at or below SPLIT_BEFORE. A run whose
    completions were never split is not this alarm (the format was never there).

    e.g. window 4, 0.25, 0.25, 0.5, 0.5 then 1, 1, 0.75, 1: 0.375 <= 0.5, then 0.9375 >= 0.9: fires.
    """
    key = "steps/single_step_ratio"
    last = history.series(key, cfg.window)
    if len(last) < cfg.window or _mean(last) < cfg.single_step_fraction:
        return None
    earlier = [p for p in history.series(key) if p[0] < last[0][0]]
    if len(earlier) < cfg.window:
        return None
    before = _lowest_window(earlier, cfg.window)
    if _mean(before) > SPLIT_BEFORE:
        return None
    now, then = _mean(last), _mean(before)
    return Finding(last[0][0], last[-1][0], key,
                   f"{_raw(key, last)} was {now:.0%}: that share of the completions held at most one step for a step "
                   f"reward (alarm at {cfg.single_step_fraction:.0%}), after {_raw(key, before)} was {then:.0%} "
                   f"(at or below {SPLIT_BEFORE:.0%}): the completions no longer contain the step delimiter",
                   _evidence(steps__single_step_ratio=before + last))


def kl_spike(history: History, cfg: AlarmsConfig) -> Finding | None:
    pairs = history.series("kl", cfg.window + 1)
    if len(pairs) < 2:  # a run's first step has KL 0 exactly (policy = reference): a jump from it counts
        return None
    before, (step, now) = pairs[:-1], pairs[-1]
    level = _mean(before)
    if now >= cfg.kl_spike_min and now >= cfg.kl_spike_factor * level:
        return Finding(step, step, "kl",
                       f"{_raw('kl', pairs[-1:])} was {now:.3g}, {now / max(level, 1e-12):.1f}x its raw mean of "
                       f"{level:.3g} over {_span(before)} (alarm at {cfg.kl_spike_factor:g}x and {cfg.kl_spike_min:g})",
                       _evidence(kl=pairs))
    return None


def update_against_advantage(history: History, cfg: AlarmsConfig) -> Finding | None:
    """update/against_advantage_ratio (the share of the recorded tokens with a nonzero
    advantage that the update moved the other way, engine/rl/update_effect.py) averaged over
    the last `window` steps that have it, at or above against_advantage_fraction. Its text
    and evidence add the mean Δ log p of the tokens with a positive and a negative advantage
    over the same steps.

    A step has no ratio when none of its few recorded rows had a nonzero advantage (in
    grpo-sort, 4 rows of one group whose rewards were all equal: 8 of its first 20 steps),
    so the window counts the steps that have one, not the last `window` steps.

    e.g. window 4, against ratio 0.3, 0.5, (none), 0.4, 0.5 -> mean 0.425 >= 0.4: fires over steps 1-5.
    """
    key = "update/against_advantage_ratio"
    pairs = history.series(key)[-cfg.window:]
    if len(pairs) < cfg.window or _mean(pairs) < cfg.against_advantage_fraction:
        return None
    saw = (f"{_raw(key, pairs)} was {_mean(pairs):.0%}: the update moved that share of the recorded tokens with a "
           f"nonzero advantage against it, lowering a token its advantage asked to raise or raising one it asked to "
           f"lower (alarm at {cfg.against_advantage_fraction:.0%})")
    series = {key.replace("/", "__"): pairs}
    for sign, mean_key in (("positive", "update/change_pos_adv_mean"), ("negative", "update/change_neg_adv_mean")):
        means = [p for p in history.series(mean_key) if p[0] >= pairs[0][0]]
        if means:
            saw += (f"; {_raw(mean_key, means)} was {_signed(_mean(means))}: the mean Δ log p of the tokens with a "
                    f"{sign} advantage")
            series[mean_key.replace("/", "__")] = means
    return Finding(pairs[0][0], pairs[-1][0], key, saw, _evidence(**series))


def entropy_collapse(history: History, cfg: AlarmsConfig) -> Finding | None:
    first, last = history.series("entropy")[: cfg.window], history.series("entropy", cfg.window)
    if len(first) < cfg.window or len(last) < cfg.window or last[0][0] <= first[-1][0]:
        return None
    start, now = _mean(first), _mean(last)
    if start > 0 and now < cfg.entropy_collapse_fraction * start:
        return Finding(last[0][0], last[-1][0], "entropy",
                       f"{_raw('entropy', last)} was {now:.3g} nats a token, {now / start:.0%} of its raw mean of "
                       f"{start:.3g} over {_span(first)} (alarm below {cfg.entropy_collapse_fraction:.0%})",
                       _evidence(entropy=first + last))
    return None


def _scores(history: History) -> list[tuple[int, float, str]]:
    out = []
    for step, result in history.evals:
        score = held_out_score(result)
        if score is not None:
            out.append((step, score[1], score[0]))
    return out


def length_drift(history: History, cfg: AlarmsConfig) -> Finding | None:
    key = "completions/mean_length"
    first, last = history.series(key)[: cfg.window], history.series(key, cfg.window)
    scores = _scores(history)
    if len(first) < cfg.window or len(last) < cfg.window or last[0][0] <= first[-1][0] or len(scores) < 2:
        return None
    start, now = _mean(first), _mean(last)
    moved = abs(scores[-1][1] - scores[0][1])
    if start <= 0 or abs(now - start) < cfg.length_drift_fraction * start or moved > cfg.eval_tolerance:
        return None
    threshold = start * (1 + cfg.length_drift_fraction * (1 if now > start else -1))
    crossed = [s for s, v in history.series(key) if (v >= threshold if now > start else v <= threshold)]
    began = crossed[0] if crossed else last[0][0]
    name = scores[0][2]
    return Finding(began, last[-1][0], key,
                   f"{_raw(key, first)} was {start:.3g} tokens and {_raw(key, last)} {now:.3g}, "
                   f"{now / start - 1:+.0%}, while the held-out {name} stayed at "
                   f"{scores[0][1]:.3g} -> {scores[-1][1]:.3g} ({_evaluations([scores[0], scores[-1]])})",
                   _evidence(completions__mean_length=first + [p for p in history.series(key) if p[0] >= began],
                             **{f"eval__{name}": [(s, v) for s, v, _ in scores]}))


def reward_hacking(history: History, cfg: AlarmsConfig) -> Finding | None:
    if history.learned_rewards and reward_model_exploited(history, cfg):
        return None  # a learned reward's runaway is that alarm's, which names the reward model
    span = 2 * cfg.window
    rows = [(s, float(m["reward"]), float(m["completions/mean_length"]))
            for s, m in zip(history.steps[-span:], history.metrics[-span:])
            if _number(m.get("reward")) and _number(m.get("completions/mean_length"))]
    if len(rows) < span:
        return None
    rewards, lengths = [r for _, r, _ in rows], [n for _, _, n in rows]
    w = cfg.window
    r0, r1 = sum(rewards[:w]) / w, sum(rewards[-w:]) / w
    n0, n1 = sum(lengths[:w]) / w, sum(lengths[-w:]) / w
    corr = _correlation(rewards, lengths)
    if corr >= cfg.hacking_correlation and n0 > 0 and n1 >= (1 + cfg.hacking_length_rise) * n0 and r1 > r0:
        return Finding(rows[0][0], rows[-1][0], "reward",
                       f"reward (raw, means over steps {rows[0][0]}-{rows[w - 1][0]} and {rows[-w][0]}-{rows[-1][0]}) "
                       f"went {r0:.3g} -> {r1:.3g} and completions/mean_length (raw, the same means) {n0:.3g} -> "
                       f"{n1:.3g} tokens ({n1 / n0 - 1:+.0%}), their raw values over steps {rows[0][0]}-{rows[-1][0]} "
                       f"correlated {corr:.2f} (alarm at {cfg.hacking_correlation:g} with a length rise of "
                       f"{cfg.hacking_length_rise:.0%})",
                       _evidence(reward=[(s, r) for s, r, _ in rows],
                                 completions__mean_length=[(s, n) for s, _, n in rows]))
    return None


def eval_falling(history: History, cfg: AlarmsConfig) -> Finding | None:
    if history.learned_rewards and reward_model_exploited(history, cfg):
        return None  # one alarm for one cause: the exploited reward model's names the reward and its check
    scores, key = _scores(history), _training_score(history)
    if len(scores) < 2 or key is None:
        return None
    best = max(scores[:-1], key=lambda t: t[1])
    (step, now, name), (best_step, best_score, _) = scores[-1], best
    train = history.series(key)
    # the training reward's level when the held-out score was best (its first steps, when
    # that was the evaluation before training)
    at_best = [p for p in train if p[0] <= best_step][-cfg.window:]
    if len(at_best) < cfg.window:
        at_best = train[: cfg.window]
    recent = [p for p in train if p[0] <= step][-cfg.window:]
    if len(at_best) < cfg.window or len(recent) < cfg.window or recent[0][0] <= at_best[-1][0]:
        return None
    rise = _mean(recent) - _mean(at_best)
    if best_score - now >= cfg.eval_drop and rise >= cfg.reward_rise:
        return Finding(best_step, step, f"eval/{name}",
                       f"the held-out {name} fell from {best_score:.3g} to {now:.3g} ({_evaluations([best, scores[-1]])}) "
                       f"while {_raw(key, at_best)} was {_mean(at_best):.3g} and {_raw(key, recent)} "
                       f"{_mean(recent):.3g} (alarm at a fall of {cfg.eval_drop:g} and a rise of {cfg.reward_rise:g})",
                       _evidence(**{f"eval__{name}": [(s, v) for s, v, _ in scores], key.replace("/", "__"): train
                                    if len(train) <= 200 else at_best + recent}))
    return None


def nonfinite_steps(history: History, cfg: AlarmsConfig) -> Finding | None:
    pairs = history.series("skipped_steps", 2)
    if len(pairs) < 1:
        return None
    before = pairs[-2][1] if len(pairs) == 2 else 0.0
    (step, total) = pairs[-1]
    if total > before and step in history.nonfinite_causes:
        field_name, cause = history.nonfinite_causes[step]
        return Finding(step, step, "skipped_steps",
                       f"step {step} was skipped: {cause}; {_raw('skipped_steps', pairs[-1:])} is {total:g}, and "
                       "the run stops when more than training.max_nonfinite_steps are",
                       _evidence(skipped_steps=pairs),
                       ((field_name, "the function returned the NaN or inf: fix it (`rl-engine validate` runs it on "
                                     "a synthetic batch and says what it returns)"),))
    if total > before:
        return Finding(step, step, "skipped_steps",
                       f"step {step} was skipped: its loss or gradient was NaN or inf; {_raw('skipped_steps', pairs[-1:])} "
                       f"is {total:g}, and the run stops when more than training.max_nonfinite_steps are",
                       _evidence(skipped_steps=pairs))
    return None


DETECTORS = {
    "no_learning_signal": no_learning_signal,
    "step_reward_no_signal": step_reward_no_signal,
    "steps_not_split": steps_not_split,
    "kl_spike": kl_spike,
    "update_against_advantage": update_against_advantage,
    "entropy_collapse": entropy_collapse,
    "length_drift": length_drift,
    "reward_hacking": reward_hacking,
    "eval_falling": eval_falling,
    "nonfinite_steps": nonfinite_steps,
}

KINDS[EXPLOITED] = EXPLOITED_KIND
DETECTORS[EXPLOITED] = reward_model_exploited
