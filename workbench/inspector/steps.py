"""Step rewards as the window shows them: each step's score at the token that ends it.
No Qt.

A process reward scores a completion step by step (docs/run-directory.md): a trajectory
record's `steps` is `{label: {"ends": [token, ...], "scores": [score, ...]}}` (each end
the 0-based index of the step's last token, ascending) and a samples row's is
`{label: [score, ...]}`. Here they become `StepComponent`s, and the words, marks and
colours the inspector, the samples table and the playground draw them with:

- "1 1 0": a completion's scores, compactly (`scores_text`);
- a step's badge at its end token, coloured by its score against the group's mean
  (green above, pink below: the sign its normalised step reward has, DeepSeekMath
  §4.1.3, which is what the update pushes with);
- the first wrong step: the first score under the midpoint of the group's lowest and
  highest score of that reward (0.5 for a right/wrong reward scoring 1/0);
- "[ 1] 1  [ 3] 0": a completion's text cut at its steps' character ends (the
  playground's answer), each piece followed by its score (`step_pieces`, `pieces_text`).

>>> [c.label for c in record_steps({"steps": {"sort_steps": {"ends": [1, 3], "scores": [1, 0]}}}, 5)]
['sort_steps']
>>> scores_text([1.0, 1.0, 0.0])
'1 1 0'
"""

from __future__ import annotations

import bisect
import html
import math
from dataclasses import dataclass
from typing import Any

from workbench.inspector.colors import diverging_hex, text_hex

# ================================================================ the records


@dataclass(frozen=True)
class StepComponent:
    """One step reward's steps of one completion: `ends[k]` the token that ends step k
    (inclusive, ascending), `scores[k]` its score (NaN for null)."""

    label: str
    ends: tuple[int, ...]
    scores: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.ends)

    def step_of(self, token: int) -> int | None:
        """The step token `token` belongs to (0-based): the first whose end is at or
        after it; None after the last step's end (e.g. an end-of-text token).

        >>> c = StepComponent("s", (1, 3), (1.0, 0.0))
        >>> c.step_of(0), c.step_of(1), c.step_of(2), c.step_of(4)
        (0, 0, 1, None)
        """
        k = bisect.bisect_left(self.ends, token)
        return k if k < len(self.ends) else None


def _score(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else math.nan


def record_steps(record: dict, n_tokens: int) -> list[StepComponent]:
    """The steps of a trajectory record with `n_tokens` tokens, in the record's order of
    components. A component whose ends are not whole token indices within the tokens,
    strictly ascending, one score each, is left out rather than drawn in the wrong
    place; a record without `steps` has none.

    >>> record_steps({"steps": {"a": {"ends": [0, 2], "scores": [0.5, None]}, "b": {"ends": [3, 1], "scores": [1, 1]}}}, 3)
    [StepComponent(label='a', ends=(0, 2), scores=(0.5, nan))]
    """
    steps = record.get("steps")
    if not isinstance(steps, dict):
        return []
    out = []
    for label, value in steps.items():
        if not isinstance(value, dict):
            continue
        ends, scores = value.get("ends"), value.get("scores")
        if not isinstance(ends, list) or not isinstance(scores, list) or len(ends) != len(scores):
            continue
        if not all(isinstance(e, int) and not isinstance(e, bool) and 0 <= e < n_tokens for e in ends):
            continue
        if any(b <= a for a, b in zip(ends, ends[1:])):
            continue
        out.append(StepComponent(str(label), tuple(ends), tuple(_score(s) for s in scores)))
    return out


def step_scores(value: Any) -> dict[str, list[float]]:
    """{label: [score, ...]} of a samples row's `steps` ({label: [score, ...]}) or a
    record's ({label: {"ends", "scores"}}); {} when there are none.

    >>> step_scores({"a": [1, 0], "b": {"ends": [2], "scores": [0.5]}, "c": "x"})
    {'a': [1.0, 0.0], 'b': [0.5]}
    """
    if not isinstance(value, dict):
        return {}
    out = {}
    for label, item in value.items():
        scores = item.get("scores") if isinstance(item, dict) else item
        if isinstance(scores, list):
            out[str(label)] = [_score(s) for s in scores]
    return out


def step_parity(components: list[StepComponent], n_tokens: int) -> list[int] | None:
    """Each token's step in the first component, as 0/1 alternating (-1 after the last
    step): the text underlines steps in turn. None without steps.

    >>> step_parity([StepComponent("a", (1, 2), (1.0, 0.0))], 4)
    [0, 0, 1, -1]
    """
    if not components:
        return None
    first = components[0]
    return [-1 if (k := first.step_of(i)) is None else k % 2 for i in range(n_tokens)]


def plot_marks(components: list[StepComponent]) -> list[tuple[int, str]]:
    """The plot's step lines: (end token, its label) for each distinct end, the scores of
    every component ending there (after their labels when there are several).

    >>> plot_marks([StepComponent("a", (1, 3), (1.0, 0.0)), StepComponent("b", (3,), (0.5,))])
    [(1, 'a 1'), (3, 'a 0 · b 0.5')]
    """
    several = len(components) > 1
    at: dict[int, list[str]] = {}
    for c in components:
        for end, score in zip(c.ends, c.scores):
            at.setdefault(end, []).append(f"{c.label} {short_number(score)}" if several else short_number(score))
    return [(end, " · ".join(texts)) for end, texts in sorted(at.items())]


# ================================================================ in words


def short_number(value: float) -> str:
    """A score in a badge or a compact list: two significant digits, '?' for null.

    >>> short_number(1.0), short_number(0.8333), short_number(-0.5), short_number(float("nan"))
    ('1', '0.83', '-0.5', '?')
    """
    return f"{value:.2g}" if math.isfinite(value) else "?"


def scores_text(scores: list[float]) -> str:
    """A completion's step scores, compactly; '–' for no steps.

    >>> scores_text([1.0, 0.5, 0.0]), scores_text([])
    ('1 0.5 0', '–')
    """
    return " ".join(short_number(s) for s in scores) if scores else "–"


def labelled_scores_text(steps: dict[str, list[float]]) -> str:
    """Every component's scores: the list alone for one component, each after its label
    for several.

    >>> labelled_scores_text({"a": [1.0, 0.0]}), labelled_scores_text({"a": [1.0], "prm": [0.9, 0.2]})
    ('1 0', 'a: 1 · prm: 0.9 0.2')
    """
    if len(steps) == 1:
        return scores_text(next(iter(steps.values())))
    return " · ".join(f"{label}: {scores_text(scores)}" for label, scores in steps.items())


def mean_score(scores: list[float]) -> float:
    """The mean of the finite scores (a step component's value for the completion, as
    the engine sums it into the reward); NaN when there are none.

    >>> mean_score([1.0, 1.0, 0.0]), mean_score([])
    (0.6666666666666666, nan)
    """
    finite = [s for s in scores if math.isfinite(s)]
    return sum(finite) / len(finite) if finite else math.nan


def steps_tooltip(steps: dict[str, list[float]]) -> str:
    """A samples cell's tooltip: each component's steps one a line, with their mean.

    >>> print(steps_tooltip({"sort_steps": [1.0, 0.0]}))
    sort_steps: 2 steps, mean 0.5
      step 1: 1
      step 2: 0
    """
    lines = []
    for label, scores in steps.items():
        mean = mean_score(scores)
        lines.append(f"{label}: {len(scores)} step{'' if len(scores) == 1 else 's'}"
                     + (f", mean {mean:.4g}" if math.isfinite(mean) else ""))
        lines += [f"  step {k + 1}: {s:.4g}" if math.isfinite(s) else f"  step {k + 1}: null"
                  for k, s in enumerate(scores)]
    return "\n".join(lines)


def token_step_lines(components: list[StepComponent], token: int) -> list[str]:
    """Where token `token` sits in each component's steps (the tooltip's lines).

    >>> token_step_lines([StepComponent("sort_steps", (1, 3, 5), (1.0, 1.0, 0.0))], 3)
    ['step 2 of 3 (sort_steps): score 1 · ends here']
    >>> token_step_lines([StepComponent("sort_steps", (1,), (1.0,))], 4)
    ['after the last step (sort_steps)']
    """
    lines = []
    for c in components:
        k = c.step_of(token)
        if k is None:
            lines.append(f"after the last step ({c.label})")
            continue
        score = c.scores[k]
        lines.append(f"step {k + 1} of {len(c)} ({c.label}): score {score:.4g}" if math.isfinite(score)
                     else f"step {k + 1} of {len(c)} ({c.label}): score null")
        if c.ends[k] == token:
            lines[-1] += " · ends here"
    return lines


def step_pieces(text: str, steps: list[tuple[int, float]]) -> list[tuple[str, float]]:
    """A completion cut at its steps' ends: (the step's text, its score); a step starts
    where the one before it ended.

    >>> step_pieces(" 1 3 2", [(2, 1.0), (4, 0.0), (6, 0.0)])
    [(' 1', 1.0), (' 3', 0.0), (' 2', 0.0)]
    """
    out, start = [], 0
    for end, score in steps:
        out.append((text[start:end], score))
        start = max(start, end)
    return out


def pieces_text(pieces: list[tuple[str, float]]) -> str:
    """The steps on one line: each step's text in brackets (spaces show), then its score;
    newlines as ⏎.

    >>> pieces_text([(" 1", 1.0), (" 3\\n", 0.0)])
    '[ 1] 1  [ 3⏎] 0'
    """
    def score(value: float) -> str:
        return f"{value:.3g}" if math.isfinite(value) else "null"

    return "  ".join(f"[{piece.replace(chr(10), '⏎').replace(chr(9), '→')}] {score(value)}"
                     for piece, value in pieces) or "(no steps)"


# ================================================================ against the group


@dataclass(frozen=True)
class Reference:
    """A step reward's scores over a group: their mean (the neutral colour), the
    half-width of the colours (the largest distance from the mean) and the midpoint of
    the lowest and highest score (under it a step is wrong; None when all are equal)."""

    mean: float
    spread: float
    threshold: float | None

    @classmethod
    def of(cls, scores: list[float]) -> "Reference":
        """The Reference of some scores.

        >>> Reference.of([1.0, 1.0, 0.0, 0.0, 1.0])
        Reference(mean=0.6, spread=0.6, threshold=0.5)
        """
        finite = [s for s in scores if math.isfinite(s)]
        if not finite:
            return cls(math.nan, 0.0, None)
        mean = sum(finite) / len(finite)
        low, high = min(finite), max(finite)
        return cls(mean, max(abs(high - mean), abs(low - mean)), (low + high) / 2 if high > low else None)

    def colour(self, score: float) -> str:
        """The badge's background: green above the group's mean, pink below."""
        return diverging_hex(score if math.isfinite(score) else None, self.spread,
                             self.mean if math.isfinite(self.mean) else 0.0)


def references(groups: list[dict[str, list[float]]]) -> dict[str, Reference]:
    """Each step reward's Reference over the completions of a group (each one's
    {label: scores}).

    >>> references([{"a": [1.0, 0.0]}, {"a": [1.0, 1.0]}])["a"].mean
    0.75
    """
    pooled: dict[str, list[float]] = {}
    for steps in groups:
        for label, scores in steps.items():
            pooled.setdefault(label, []).extend(scores)
    return {label: Reference.of(scores) for label, scores in pooled.items()}


def first_wrong(scores: list[float], reference: Reference | None) -> int | None:
    """The first step (0-based) scored under the group's midpoint; None when none is
    (or the group's scores are all equal: nothing to call wrong).

    >>> first_wrong([1.0, 1.0, 0.0, 0.0], Reference.of([1.0, 0.0]))
    2
    >>> first_wrong([1.0], Reference.of([1.0, 1.0])) is None
    True
    """
    if reference is None or reference.threshold is None:
        return None
    return next((k for k, s in enumerate(scores) if math.isfinite(s) and s < reference.threshold), None)


def order_key(steps: dict[str, list[float]], refs: dict[str, Reference]) -> tuple:
    """A completion's place when a group is sorted by its steps: those with no wrong
    step first, then the later the first wrong step the earlier; ties by the mean
    score, highest first. The first component decides."""
    if not steps:
        return (2, 0, 0.0)
    label, scores = next(iter(steps.items()))
    wrong = first_wrong(scores, refs.get(label))
    mean = mean_score(scores)
    return (0 if wrong is None else 1, -(wrong or 0), -mean if math.isfinite(mean) else math.inf)


def badges(components: list[StepComponent], refs: dict[str, Reference]) -> dict[int, list[tuple[str, str]]]:
    """What to draw after each step's end token: {token: [(text, background hex)]}, the
    score (after the component's label when there are several), coloured against the
    group's mean (grey-white without a group).

    >>> badges([StepComponent("a", (1, 3), (1.0, 0.0))], {"a": Reference.of([1.0, 0.0])})
    {1: [('1', '#2f6300')], 3: [('0', '#a9006b')]}
    """
    several = len(components) > 1
    out: dict[int, list[tuple[str, str]]] = {}
    for c in components:
        ref = refs.get(c.label) or Reference.of(list(c.scores))
        for end, score in zip(c.ends, c.scores):
            text = f"{c.label} {short_number(score)}" if several else short_number(score)
            out.setdefault(end, []).append((text, ref.colour(score)))
    return out


def chips_html(steps: dict[str, list[float]], refs: dict[str, Reference]) -> str:
    """A group row's steps: each score on its colour, the first wrong step bold and
    underlined (Qt's rich text draws no border on a span) and named, then the mean;
    each component after its label when there are several."""
    parts = []
    for label, scores in steps.items():
        ref = refs.get(label) or Reference.of(scores)
        wrong = first_wrong(scores, ref)
        chips = []
        for k, score in enumerate(scores):
            bg = ref.colour(score)
            mark = "font-weight:bold; text-decoration:underline;" if k == wrong else ""
            chips.append(f"<span style='background:{bg}; color:{text_hex(bg)}; {mark}'>"
                         f"&nbsp;{short_number(score)}&nbsp;</span>")
        mean = mean_score(scores)
        text = ("" if len(steps) == 1 else f"{html.escape(label)} ") + ("".join(chips) or "none")
        text += f" mean <b>{mean:.3g}</b>" if math.isfinite(mean) else ""
        if wrong is not None:
            text += f" <span style='color:#b00020'>first wrong: step {wrong + 1}</span>"
        parts.append(text)
    return "steps " + " · ".join(parts)
