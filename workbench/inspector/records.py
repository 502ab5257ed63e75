"""Trajectory records and how their tokens are drawn. No Qt.

A trajectory record (docs/run-directory.md, `trajectories/step_NNNNNN.jsonl`) is one
rollout or one preference pair, as the run's declared record layout says
(workbench/run_declaration.py: "group", "single" or "pair"). Here each becomes a
`Trajectory` with one `Side` (the completion) or two (a pair's sides); a side
holds the tokens and every per-token number as a numpy array (NaN for null), whatever
the keys are, so a quantity the engine adds later shows up in the tooltip and the
picker without a change here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from engine.run import rundir
from workbench.inspector.episodes import Episode, record_episode
from workbench.inspector.quantities import MARKS, QUANTITIES, _int, _num
from workbench.inspector.steps import StepComponent, labelled_scores_text, record_steps
from workbench.inspector.update_effect import derived_numbers
from workbench.run_declaration import GROUP, PAIR, SINGLE, algorithm_of, records_of
from workbench.inspector.wording import signed

# Per-token lists that are not numbers to colour by (an episode's tool flags and turns:
# Trajectory.episode).
_NOT_NUMBERS = {"tokens", "token_ids", "top_ids", "top_tokens", "top_probs", "tool_mask", "turn"}


# ======================================================================= records


@dataclass
class Side:
    """One token sequence of a record: the completion of a rollout, or one side of a
    DPO pair."""

    name: str  # "completion", "chosen" or "rejected"
    tokens: list[str]
    token_ids: list
    numbers: dict[str, np.ndarray]  # every per-token numeric key, NaN for null
    top_tokens: list | None = None
    top_probs: list | None = None
    top_ids: list | None = None
    completion: str = ""
    reward: float | None = None
    rewards: dict | None = None  # a sampled pair's side: the components of its score (its reward)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def implicit_total(self) -> float | None:
        """The sum of the side's per-token implicit rewards (None: it has none)."""
        values = self.numbers.get("implicit_reward")
        return float(np.nansum(values)) if values is not None and np.isfinite(values).any() else None

    @property
    def clipped(self) -> np.ndarray | None:
        return self.numbers.get("clipped")

    @classmethod
    def from_mapping(cls, name: str, raw: dict) -> "Side":
        tokens = raw.get("tokens")
        ids = raw.get("token_ids") if isinstance(raw.get("token_ids"), list) else []
        if not isinstance(tokens, list):
            tokens = [str(t) for t in ids]
        tokens = [t if isinstance(t, str) else str(t) for t in tokens]
        n = len(tokens)
        numbers: dict[str, np.ndarray] = {}
        for key, value in raw.items():
            if key in _NOT_NUMBERS or not isinstance(value, list) or len(value) != n or not n:
                continue
            if all(v is None or isinstance(v, (int, float)) for v in value):
                numbers[key] = np.array(value, dtype=float)
        numbers.update(derived_numbers(numbers))  # Δ p, which the engine leaves to the window
        if "logprob" in numbers and "probability" not in numbers:  # read more easily than a logprob
            numbers["probability"] = np.exp(numbers["logprob"])
        reward, rewards = raw.get("reward"), raw.get("rewards")
        return cls(name=name, tokens=tokens, token_ids=list(ids), numbers=numbers,
                   top_tokens=raw.get("top_tokens") if isinstance(raw.get("top_tokens"), list) else None,
                   top_probs=raw.get("top_probs") if isinstance(raw.get("top_probs"), list) else None,
                   top_ids=raw.get("top_ids") if isinstance(raw.get("top_ids"), list) else None,
                   completion=str(raw.get("completion", "")),
                   reward=float(reward) if isinstance(reward, (int, float)) else None,
                   rewards=dict(rewards) if isinstance(rewards, dict) else None)


@dataclass
class Trajectory:
    """One record of a step file."""

    record: dict
    algorithm: str
    step: int
    index: int
    group: int
    prompt: str
    sides: list[Side]
    layout: str = GROUP  # "group", "single" or "pair" (workbench/run_declaration.py)
    preferred: tuple[str, ...] = ("advantage",)  # the quantities to colour by first
    demonstration: bool = False  # declared: the completion is the data's answer (SFT), not a sample

    @classmethod
    def from_record(cls, record: dict, declared: dict | None = None) -> "Trajectory":
        """`declared`: the run's record declaration (None: the old default for the
        record's algorithm)."""
        layout_of = records_of(record, declared)
        layout = str(layout_of.get("layout") or SINGLE)
        step, index = _int(record.get("step")), _int(record.get("index"))
        group = _int(record.get("group"), index)
        if layout == PAIR:
            names = layout_of.get("sides") or ["chosen", "rejected"]
            sides = [Side.from_mapping(str(name), record.get(name) if isinstance(record.get(name), dict) else {})
                     for name in names]
        else:
            sides = [Side.from_mapping("completion", record)]
        preferred = tuple(str(k) for k in layout_of.get("preferred") or ("advantage",))
        return cls(record=record, algorithm=algorithm_of(record, layout), step=step, index=index, group=group,
                   prompt=str(record.get("prompt", "")), sides=sides, layout=layout, preferred=preferred,
                   demonstration=layout != PAIR and layout_of.get("demonstration") is True)

    @property
    def key(self) -> tuple[int, int]:
        return (self.step, self.index)

    @property
    def reward(self) -> float | None:
        value = self.record.get("reward")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def advantage(self) -> float | None:
        """The rollout's advantage (the mean over tokens where it varies per token); a
        pair's margin."""
        if self.layout == PAIR:
            value = self.record.get("margin")
            return float(value) if isinstance(value, (int, float)) else None
        adv = self.sides[0].numbers.get("advantage")
        if adv is None or not np.isfinite(adv).any():
            return None
        return float(np.nanmean(adv))

    @property
    def advantage_range(self) -> tuple[float, float] | None:
        """The lowest and highest per-token advantage when they differ (step rewards, PPO's
        GAE: the advantage varies within the completion); None when every token has one."""
        adv = self.sides[0].numbers.get("advantage") if self.layout != PAIR else None
        if adv is None or not np.isfinite(adv).any():
            return None
        low, high = float(np.nanmin(adv)), float(np.nanmax(adv))
        return (low, high) if high - low > 1e-9 * max(1.0, abs(high)) else None

    @property
    def mean_logprob(self) -> float | None:
        """The mean log-probability of the completion's tokens (None without logprobs)."""
        values = self.sides[0].numbers.get("logprob")
        return float(np.nanmean(values)) if values is not None and np.isfinite(values).any() else None

    @cached_property
    def steps(self) -> list[StepComponent]:
        """The completion's step rewards, each step's end token and score ([] without
        `steps`, and for a pair)."""
        return record_steps(self.record, len(self.sides[0])) if self.layout != PAIR else []

    @cached_property
    def episode(self) -> Episode | None:
        """A multi-turn episode's tool tokens, turns and calls (None: not an episode, or a pair)."""
        return record_episode(self.record, len(self.sides[0])) if self.layout != PAIR else None

    @property
    def desirable(self) -> bool | None:
        """An unpaired completion's `label`: True desirable (the update pushes it up),
        False undesirable (down), None when the record has none."""
        value = self.record.get("label")
        return value if isinstance(value, bool) else None

    @property
    def scored(self) -> bool:
        """A pair whose sides were sampled and scored by the rewards (`score_margin`, or
        sides with `rewards`): each side's `reward` is then its score, not its implicit
        reward (that is the sum of its tokens')."""
        return self.layout == PAIR and ("score_margin" in self.record or any(s.rewards is not None
                                                                              for s in self.sides))

    def side_implicit_reward(self, side: Side) -> float | None:
        """A side's implicit reward: its `reward`, or for a scored pair the sum of its tokens'."""
        return side.implicit_total if self.scored else side.reward

    def score_outcome(self) -> str:
        """Which side of a scored pair won on the rewards and by how much ('' for a pair
        given by the data). A tie: the first sampled was taken as chosen."""
        if not self.scored:
            return ""
        if self.record.get("tie") is True:
            return f"tie: first sampled taken as {self.sides[0].name}"
        margin = self.record.get("score_margin")
        margin = signed(margin)
        return f"{self.sides[0].name} won by {margin} score"

    def quantities(self) -> list[str]:
        """The per-token quantities this record has, known ones first (in the
        inspector's order), then any others alphabetically."""
        keys: set[str] = set()
        for side in self.sides:
            keys.update(k for k in side.numbers if k not in MARKS)
        # A quantity null on every token was not measured (beta 0 skips the reference
        # pass: no reference logprob, no KL): offering it would show an empty scale. The
        # preferred one stays, so the record still opens on its (grey) tokens.
        tokens = sum(len(side) for side in self.sides)
        keys = {k for k in keys if not tokens or k in self.preferred
                or any(np.isfinite(v).any() for v in self.values(k))}
        known = [k for k in QUANTITIES if k in keys]
        return known + sorted(keys - set(known))

    def values(self, key: str) -> list[np.ndarray]:
        """The quantity on each side (NaN where a side lacks it, and on an episode's tool
        tokens: not trained, they are in no scale and no curve)."""
        out = [side.numbers.get(key, np.full(len(side), np.nan)) for side in self.sides]
        episode = self.episode
        if episode is not None and episode.has_tool_tokens:
            out[0] = np.where(episode.tool_mask, np.nan, out[0])
        return out

    def label(self) -> str:
        """One line for the rollout picker."""
        if self.layout == PAIR:
            if self.scored:
                return (f"pair {self.index} · {self.score_outcome()} · implicit margin "
                        f"{_num(self.record.get('margin'))} · "
                        + " / ".join(f"{s.name} score {_num(s.reward)}" for s in self.sides))
            return (f"pair {self.index} · margin {_num(self.record.get('margin'))} · "
                    + " / ".join(f"{s.name} {_num(s.reward)}" for s in self.sides))
        parts = [f"#{self.index}"]
        if self.group != self.index or self.layout == GROUP:
            parts.append(f"group {self.group}")
        if self.desirable is not None:
            parts.append("desirable" if self.desirable else "undesirable")
        if self.demonstration:  # the data's answer: how likely the model finds it, not a reward
            parts += ["demonstration", f"mean logprob {_num(self.mean_logprob)}"]
        else:
            parts.append(f"reward {_num(self.reward)}")
        if "score" in self.record:
            parts.append(f"score {_num(self.record.get('score'))}")
        if self.steps:
            parts.append("steps " + labelled_scores_text({c.label: list(c.scores) for c in self.steps}))
        adv = self.advantage
        if adv is not None:
            mean = self.layout == SINGLE or self.advantage_range is not None
            parts.append(f"{'mean adv' if mean else 'adv'} {signed(adv, 3)}")
        parts.append(f"{len(self.sides[0])} tok")
        if self.episode is not None:
            parts.append(f"{self.episode.turns} turn{'' if self.episode.turns == 1 else 's'}")
        if self.record.get("truncated"):
            parts.append("truncated")
        return " · ".join(parts)

# ============================================================ how tokens look

SPECIAL_TOKEN = re.compile(r"^(<\|[^|<>\s]{1,40}\|>|</?[A-Za-z_][\w.\-]{0,30}>|\[[A-Z_]{2,12}\]|<0x[0-9A-Fa-f]{2}>)$")
SPECIAL_IN_TEXT = re.compile(r"(<\|[^|<>\s]{1,40}\|>)")
TEXT, MARK, SPECIAL, BREAK = "text", "mark", "special", "break"
# U+FFFD is what a tokenizer decodes a partial multi-byte character to: drawn as ∅, as
# a token that decodes to nothing is.
_MARK_OF = {" ": "·", "\t": "→", "\n": "↵", "\r": "␍", "\ufffd": "∅"}


def token_segments(token: str) -> list[tuple[str, str]]:
    """How one token is drawn: (text, kind) runs, kind one of text, mark (visible
    whitespace: space ·, tab →, newline ↵, other control characters as their control
    picture, part of a multi-byte character ∅), special (a tag, e.g. <eos>) and break (a line break after the newline's ↵).

    >>> token_segments(" the\\n")
    [('·', 'mark'), ('the', 'text'), ('↵', 'mark'), ('\\n', 'break')]
    >>> token_segments("<eos>"), token_segments(""), token_segments("\\ufffd")
    ([('<eos>', 'special')], [('∅', 'mark')], [('∅', 'mark')])
    """
    if not token:
        return [("∅", MARK)]  # decodes to nothing (part of a multi-byte character)
    if SPECIAL_TOKEN.match(token):
        return [(token, SPECIAL)]
    out: list[tuple[str, str]] = []

    def put(text: str, kind: str) -> None:
        if out and out[-1][1] == kind and kind != BREAK:
            out[-1] = (out[-1][0] + text, kind)
        else:
            out.append((text, kind))

    for ch in token:
        if ch in _MARK_OF:
            put(_MARK_OF[ch], MARK)
            if ch == "\n":
                out.append(("\n", BREAK))
        elif ch.isspace():
            put("·", MARK)  # other spaces (no-break, em space, ...)
        elif ord(ch) < 32 or ord(ch) == 127:
            put(chr(0x2400 + ord(ch)) if ord(ch) < 32 else "␡", MARK)
        else:
            put(ch, TEXT)
    return out


def prompt_segments(prompt: str) -> list[tuple[str, str]]:
    """The prompt as word-sized runs for wrapping: spaces stay spaces, newlines are ↵
    and a break, tabs →, special tokens in the text (<|im_start|>) are tags."""
    out: list[tuple[str, str]] = []
    for part in SPECIAL_IN_TEXT.split(prompt):
        if not part:
            continue
        if SPECIAL_IN_TEXT.fullmatch(part):
            out.append((part, SPECIAL))
            continue
        for piece in re.findall(r"\n|\t|[^\S\n\t]+|[^\s]+", part):
            if piece == "\n":
                out += [("↵", MARK), ("\n", BREAK)]
            elif piece == "\t":
                out.append(("→", MARK))
            else:
                out.append((piece, TEXT))
    return out


def text_display(text: str) -> str:
    """A prompt or completion on one line: newlines ↵, tabs →, spaces kept.

    >>> text_display("a b\\nc")
    'a b↵c'
    """
    return text.replace("\r\n", "↵").replace("\n", "↵").replace("\t", "→")


def token_display(token: str) -> str:
    """The token as drawn, on one line (tooltips, lists)."""
    return "".join(text for text, kind in token_segments(token) if kind != BREAK)


# ================================================================ a step file

def parse_records(data: bytes, declared: dict | None = None) -> list[Trajectory]:
    """The records of a step file; `declared`: the run's record declaration."""
    # The whole file: a step file is written at once (atomically), so its last line
    # is complete even without a newline; a line that does not parse is skipped.
    lines = [line for line in data.splitlines() if line.strip()]
    return [Trajectory.from_record(record, declared) for record in rundir.parse_lines(lines)
            if isinstance(record, dict)]

