"""A reward model's report card from its scores on preference pairs: accuracy and the
margins' histogram, calibration (a reliability diagram and its expected calibration
error), the length baseline, and a verdict line per topic saying what is good, what is
worrying and what to try. Pure and torch-free: engine/reward_report/compute.py scores
the pairs and checks the model (preflight.py); the window draws the JSON this makes.

A pair's margin is r_chosen - r_rejected. Bradley-Terry reads σ(margin) as the
probability that the chosen answer is preferred, so calibration asks whether it is: both
orders of every pair are binned by their predicted probability (σ(m) for chosen-first,
σ(-m) for rejected-first) and each bin's mean prediction is set against the share of its
entries whose first answer is the chosen one. The diagram is symmetric about 0.5 and
equals top-label calibration (confidence against accuracy) folded in two.
"""

from __future__ import annotations

import math
import random
import statistics

__all__ = ["margin_histogram", "calibration", "ece_interval", "wilson_interval", "length_baseline", "card_numbers",
           "verdict_lines", "STATUSES"]

STATUSES = ("good", "worrying", "bad")
MARGIN_BINS = 20
CALIBRATION_BINS = 10
# Two answers "of matched length": within this fraction of the longer one's length. One
# token of ten is matched; a dropped word of a short answer is not.
MATCHED_LENGTH = 0.1

# Where a verdict turns. Accuracy: reward-bench's easy subsets sit above 0.9 for good
# models, a model no better than 0.55 is near a coin. ECE: under 0.05 is a well-calibrated
# classifier's; over 0.15 means σ(margin) cannot be read as a probability.
GOOD_ACCURACY, POOR_ACCURACY = 0.7, 0.55
GOOD_ECE, POOR_ECE = 0.05, 0.15
# Reward and length correlated this much: the reward model may be paying for length.
LENGTH_CORRELATION = 0.3
# Within length-matched pairs the accuracy should hold; this much lower says length carried it.
MATCHED_DROP = 0.1
# How sure a few hundred pairs make the numbers: a 90% interval for the accuracy (Wilson's)
# and for the ECE (a seeded bootstrap over the pairs). At 200 pairs the ECE's middle bins
# hold a few dozen entries, and a few pairs crossing a bin edge move it threefold.
INTERVAL_LEVEL = 0.9
Z_90 = 1.6448536269514722  # the standard normal's 95th percentile
BOOTSTRAP_RESAMPLES = 200


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def margin_histogram(margins: list[float], bins: int = MARGIN_BINS) -> dict:
    """Mean, median and a histogram of the margins on a range symmetric about 0 (so the
    bar at 0 separates the pairs ranked wrong from those ranked right).

    >>> margin_histogram([-1.0, 0.5, 1.0], bins=4)["counts"]
    [1, 0, 0, 2]
    """
    if not margins:
        return {"mean": None, "median": None, "edges": [], "counts": []}
    span = max(abs(m) for m in margins) or 1.0
    width = 2 * span / bins
    edges = [-span + i * width for i in range(bins + 1)]
    counts = [0] * bins
    for m in margins:
        counts[min(bins - 1, int((m + span) / width))] += 1
    return {"mean": statistics.fmean(margins), "median": statistics.median(margins),
            "edges": [round(e, 6) for e in edges], "counts": counts}


def calibration(margins: list[float], bins: int = CALIBRATION_BINS) -> dict:
    """The reliability diagram of σ(margin) over both orders of each pair, and its
    expected calibration error: Σ_b (n_b / N) |mean prediction_b - observed win rate_b|.

    e.g. margins [ln 3, -ln 3], one pair ranked right and one wrong: bin [0.7, 0.8) holds
    the first pair chosen-first (p 0.75, won) and the second rejected-first (p 0.75, lost):
    observed 0.5 against 0.75; bin [0.2, 0.3) mirrors it. ECE = 2/4 · 0.25 + 2/4 · 0.25.

    >>> round(calibration([math.log(3), -math.log(3)])["ece"], 6)
    0.25
    """
    rows = [[0, 0.0, 0.0] for _ in range(bins)]  # count, summed prediction, summed outcome
    for m in margins:
        p = _sigmoid(m)
        for prediction, outcome in ((p, 1.0), (1.0 - p, 0.0)):
            row = rows[min(bins - 1, int(prediction * bins))]
            row[0] += 1
            row[1] += prediction
            row[2] += outcome
    total = sum(r[0] for r in rows)
    ece = sum(abs(s - o) for _, s, o in rows) / total if total else None  # n_b/N · |s/n_b - o/n_b|
    return {"ece": ece, "bins": [{"low": round(b / bins, 6), "high": round((b + 1) / bins, 6), "count": n,
                                  "predicted": s / n if n else None, "observed": o / n if n else None}
                                 for b, (n, s, o) in enumerate(rows)]}


def wilson_interval(successes: int, n: int, z: float = Z_90) -> tuple[float, float] | None:
    """Wilson's score interval for a proportion (90% by default): better than the normal
    approximation near 0 and 1 and with few trials.

    e.g. 8 of 10 at z = 2: centre (0.8 + 4/20) / (1 + 4/10) = 5/7 = 0.714286, half-width
    (2 / 1.4) · √(0.8 · 0.2 / 10 + 4 / 400) = 1.428571 · √0.026 = 0.230350.

    >>> [round(x, 4) for x in wilson_interval(8, 10, z=2.0)]
    [0.4839, 0.9446]
    """
    if n <= 0:
        return None
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def ece_interval(margins: list[float], resamples: int = BOOTSTRAP_RESAMPLES, level: float = INTERVAL_LEVEL,
                 seed: int = 0) -> tuple[float, float] | None:
    """A bootstrap interval for the expected calibration error: the pairs drawn again with
    replacement `resamples` times (seeded, so a report is reproducible), the ECE of each,
    and the (1 - level) / 2 and (1 + level) / 2 quantiles of those."""
    if len(margins) < 2:
        return None
    draw = random.Random(seed)
    values = sorted(calibration([margins[draw.randrange(len(margins))] for _ in margins])["ece"]
                    for _ in range(resamples))
    tail = (1 - level) / 2
    return values[int(tail * (resamples - 1))], values[math.ceil((1 - tail) * (resamples - 1))]


def _correlation(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def length_baseline(chosen_lengths: list[int], rejected_lengths: list[int], chosen_rewards: list[float],
                    rejected_rewards: list[float]) -> dict:
    """What length alone explains. `longer_accuracy`: how often "pick the longer answer"
    picks the chosen one, a tie (equal lengths: the rule cannot choose) counting half, as
    a coin would; `ties`: how many pairs tie. `correlation`: Pearson's r of reward and
    length over every answer. `matched_accuracy`: the reward model's accuracy on the pairs
    whose answers' lengths are within MATCHED_LENGTH of each other (`matched_pairs`), where
    length cannot be what it ranks by.

    >>> length_baseline([5, 3, 4], [4, 3, 6], [1.0, 0.0, 2.0], [0.0, 1.0, 1.0])["longer_accuracy"]
    0.5
    """
    n = len(chosen_lengths)
    if n == 0:
        return {"unit": "tokens", "longer_accuracy": None, "ties": 0, "correlation": None, "matched_accuracy": None,
                "matched_pairs": 0}
    ties = sum(c == r for c, r in zip(chosen_lengths, rejected_lengths))
    longer = sum(c > r for c, r in zip(chosen_lengths, rejected_lengths)) + 0.5 * ties
    matched = [rc > rr for c, r, rc, rr in zip(chosen_lengths, rejected_lengths, chosen_rewards, rejected_rewards)
               if abs(c - r) <= MATCHED_LENGTH * max(c, r)]
    return {"unit": "tokens", "longer_accuracy": longer / n, "ties": ties,
            "correlation": _correlation([float(x) for x in chosen_lengths + rejected_lengths],
                                        chosen_rewards + rejected_rewards),
            "matched_accuracy": sum(matched) / len(matched) if matched else None, "matched_pairs": len(matched)}


def card_numbers(chosen_rewards: list[float], rejected_rewards: list[float], chosen_lengths: list[int],
                 rejected_lengths: list[int]) -> dict:
    """Accuracy (chosen scored strictly above rejected, as TRL counts it), the margins,
    calibration and the length baseline of one set of scored pairs; a pair with a NaN or
    inf score is left out of them (the preflight's scores check names it).

    >>> card_numbers([1.0, float("nan")], [0.0, 0.0], [2, 2], [2, 2])["accuracy"]
    1.0
    """
    kept = [i for i, (c, r) in enumerate(zip(chosen_rewards, rejected_rewards)) if math.isfinite(c - r)]
    if len(kept) < len(chosen_rewards):
        chosen_rewards, rejected_rewards = [chosen_rewards[i] for i in kept], [rejected_rewards[i] for i in kept]
        chosen_lengths, rejected_lengths = [chosen_lengths[i] for i in kept], [rejected_lengths[i] for i in kept]
    margins = [c - r for c, r in zip(chosen_rewards, rejected_rewards)]
    right = sum(m > 0 for m in margins)
    return {"accuracy": right / len(margins) if margins else None,
            "accuracy_interval": wilson_interval(right, len(margins)),
            "margin": margin_histogram(margins),
            "calibration": {**calibration(margins), "ece_interval": ece_interval(margins)},
            "length": length_baseline(chosen_lengths, rejected_lengths, chosen_rewards, rejected_rewards)}


def _line(topic: str, title: str, status: str, saw: str, try_: str | None = None) -> dict:
    return {"topic": topic, "title": title, "status": status, "saw": saw, "try": try_}


def _accuracy_line(card: dict, pairs: int) -> dict:
    accuracy, longer = card["accuracy"], card["length"]["longer_accuracy"]
    saw = f"{accuracy:.1%} of {pairs} pairs have the chosen answer scored above the rejected one" + \
        _interval_text(card.get("accuracy_interval"), ".1%")
    if accuracy < POOR_ACCURACY:
        return _line("accuracy", "Accuracy", "bad", saw + f": near a coin's 50 % (under {POOR_ACCURACY:.0%})",
                     "check the pairs' labels (chosen and rejected swapped?), train longer or with a larger "
                     "training.learning_rate, or start from a stronger model (model.start_from an SFT run)")
    if longer is not None and accuracy <= longer + 0.02:
        return _line("accuracy", "Accuracy", "worrying", saw + f", no better than picking the longer answer "
                     f"({longer:.1%})", "read the length lines below; pairs whose answers differ in length only "
                     "teach the model length")
    if accuracy < GOOD_ACCURACY:
        return _line("accuracy", "Accuracy", "worrying", saw + f" (good is {GOOD_ACCURACY:.0%} and up)",
                     "more pairs or steps; the pairs the table lists first are those it ranks most wrongly")
    return _line("accuracy", "Accuracy", "good", saw)


def _calibration_line(card: dict) -> dict:
    cal = card["calibration"]
    ece = cal["ece"]
    confident = [b for b in cal["bins"] if b["count"] and b["low"] >= 0.5]
    over = sum(b["count"] * (b["predicted"] - b["observed"]) for b in confident)
    direction = "overconfident (σ(margin) above the observed win rate)" if over > 0 else \
        "underconfident (σ(margin) below the observed win rate)"
    interval = cal.get("ece_interval")
    saw = f"expected calibration error {ece:.3f}" + _interval_text(interval, ".3f")
    # An interval reaching past a threshold: the pairs are too few to tell which side it is on.
    unsure = "; too few pairs to be sure of it, read the diagram's counts" if interval and (
        interval[0] < GOOD_ECE <= interval[1] or interval[0] < POOR_ECE <= interval[1]) else ""
    if ece < GOOD_ECE:
        return _line("calibration", "Calibration", "good", saw + ": σ(margin) reads as the chance that the chosen "
                     "answer wins" + unsure)
    status = "worrying" if ece < POOR_ECE else "bad"
    direction += unsure
    advice = ("fewer steps or a smaller learning rate (it learned its pairs too well), or more pairs; scale the "
              "rewards down before comparing two answers" if over > 0 else
              "train longer: the margins are still small (an RL run normalising advantages is not hurt by it)")
    return _line("calibration", "Calibration", status, f"{saw}, {direction}", advice)


def _interval_text(interval, spec: str) -> str:
    """' (90% interval LOW-HIGH)', or nothing without one (an old report, too few pairs)."""
    if not interval or len(interval) != 2:
        return ""
    return f" (90% interval {format(interval[0], spec)}-{format(interval[1], spec)})"


def _length_lines(card: dict) -> list[dict]:
    length, accuracy = card["length"], card["accuracy"]
    lines = []
    corr, matched = length["correlation"], length["matched_accuracy"]
    if corr is not None:
        saw = f"reward and answer length correlate r = {corr:+.2f} over every answer"
        if abs(corr) >= LENGTH_CORRELATION:
            lines.append(_line("length", "Reward against length", "worrying", saw + (
                ": longer answers score higher, which a policy can learn to exploit by writing more" if corr > 0
                else ": shorter answers score higher; a policy can learn to stop early"),
                "add pairs whose better answer is the shorter one, or a length penalty in the RL run's rewards"))
        else:
            lines.append(_line("length", "Reward against length", "good", saw + ": length alone does not set the "
                               "reward"))
    if matched is not None:
        saw = (f"on the {length['matched_pairs']} pairs whose answers have about the same length "
               f"(within {MATCHED_LENGTH:.0%}) the accuracy is {matched:.1%}, against {accuracy:.1%} on all")
        if matched < accuracy - MATCHED_DROP:
            lines.append(_line("length", "Length-matched pairs", "worrying", saw + ": length does part of the "
                               "ranking", "train on more pairs of equal length, where content must decide"))
        else:
            lines.append(_line("length", "Length-matched pairs", "good", saw))
    return lines


def verdict_lines(card: dict, pairs: int, preflight: list[dict]) -> list[dict]:
    """One line per topic (accuracy, calibration, length) and one per preflight check
    that is not good, each with its status and what to try."""
    if card["accuracy"] is None:
        return [_line("accuracy", "Accuracy", "bad", "no pairs were scored", "give a file of preference pairs")]
    lines = [_accuracy_line(card, pairs), _calibration_line(card), *_length_lines(card)]
    for check in preflight:
        if check["status"] in ("worrying", "bad"):
            lines.append(_line("preflight", check["title"], check["status"], check["saw"], check.get("try")))
    return lines
