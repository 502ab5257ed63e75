"""The trajectory inspector's model: records, quantities, scales, groups, prompt
history and export. No Qt (the views in inspector*.py draw what this computes).

A trajectory record (docs/run-directory.md, `trajectories/step_NNNNNN.jsonl`) is one
rollout (GRPO, PPO) or one preference pair (DPO). Here each becomes a `Trajectory`
with one `Side` (GRPO, PPO: the completion) or two (DPO: chosen and rejected); a side
holds the tokens and every per-token number as a numpy array (NaN for null), whatever
the keys are, so a quantity the engine adds later shows up in the tooltip and the
picker without a change here.

`TrajectoryIndex` indexes the step files on disk and loads them lazily (a few recent
steps are cached); `poll()` notices new steps of a live run from the folder's mtime.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from engine import rundir
from workbench.inspector_colors import Scale, symmetric_scale, text_hex

GRPO, PPO, DPO = "grpo", "ppo", "dpo"
# Per-token lists that are not numbers to colour by.
_NOT_NUMBERS = {"tokens", "token_ids", "top_ids", "top_tokens", "top_probs"}
MARKS = {"clipped"}  # per-token flags: shown as marks and in the tooltip, not in the picker


# =================================================================== quantities


@dataclass(frozen=True)
class Quantity:
    """A per-token number the inspector can colour by.

    kind "diverging" (signed, centred at `centre`, symmetric scale) or "sequential"
    (`loud` "high" or "low" is the dark end; `anchor`, when set, fixes the pale end)."""

    key: str
    label: str
    kind: str
    meaning: str
    centre: float = 0.0
    loud: str = "high"
    anchor: float | None = None
    stops: str = "heat"


QUANTITIES: dict[str, Quantity] = {q.key: q for q in (
    Quantity("advantage", "advantage", "diverging",
             "green: the update pushes the token up; pink: pushes it down"),
    Quantity("logprob", "logprob", "sequential",
             "log-probability under the sampling policy; darker = less likely", loud="low", anchor=0.0),
    Quantity("ref_logprob", "reference logprob", "sequential",
             "log-probability under the reference model; darker = less likely", loud="low", anchor=0.0),
    Quantity("kl", "KL", "sequential",
             "per-token KL(policy ‖ reference), k3; darker = further from the reference", anchor=0.0),
    Quantity("entropy", "entropy", "sequential",
             "entropy of the sampling distribution, nats; darker = less certain", anchor=0.0),
    Quantity("ratio", "ratio", "diverging",
             "new/old probability in the last update; green > 1 > pink; clipped tokens boxed in red",
             centre=1.0),
    Quantity("value", "value", "sequential", "the critic's value at that position; darker = higher",
             stops="blues"),
    Quantity("return", "return", "sequential", "the GAE return at that position; darker = higher",
             stops="blues"),
    Quantity("kl_reward", "KL reward", "diverging", "the KL part of the token's reward (-kl_coef x KL)"),
    Quantity("reward_per_token", "reward per token", "diverging",
             "the token's reward: its KL reward, plus the score on the last token"),
    Quantity("implicit_reward", "implicit reward", "diverging",
             "beta x (logprob - reference logprob): green = the policy prefers it more than the reference"),
)}


def quantity(key: str, values: Iterable[np.ndarray] = ()) -> Quantity:
    """The spec of a quantity; one the inspector does not know yet is diverging when it
    has negative values, else sequential."""
    known = QUANTITIES.get(key)
    if known is not None:
        return known
    signed = any(np.nanmin(v) < 0 for v in values if v.size and np.isfinite(v).any())
    return Quantity(key, key.replace("_", " "), "diverging" if signed else "sequential",
                    f"{key} (per token, as recorded)")


def make_scale(q: Quantity, arrays: list[np.ndarray], scope: str) -> Scale:
    """The colour scale of a quantity over some tokens (the shown step's rollouts, or
    one rollout): diverging = symmetric, half-width max |value - centre|; sequential =
    from the anchor (or the other extreme) to the extreme on the loud side. `scope`
    is the words for where the tokens came from ("the 8 rollouts of step 12")."""
    values = np.concatenate([np.asarray(a, dtype=float) for a in arrays]) if arrays else np.empty(0)
    finite = values[np.isfinite(values)]
    note = ""
    if q.kind == "sequential" and q.anchor is not None and finite.size:
        # Values on both sides of the anchor (a k1 KL estimate below 0): a one-sided map
        # would hide them, so the quantity is shown diverging around the anchor.
        if (finite.min() < q.anchor) if q.loud == "high" else (finite.max() > q.anchor):
            q = replace(q, kind="diverging", centre=q.anchor)
            note = f" (values on both sides of {q.anchor:g}: diverging)"
    if q.kind == "diverging":
        s = symmetric_scale(finite, q.centre)
        centre = f"{q.centre:g} ± " if q.centre else "±"
        how = f"{centre}{_num(s)} = max |{q.label}{f' - {q.centre:g}' if q.centre else ''}| over {scope}{note}"
        return Scale("diverging", centre=q.centre, scale=s, how=how)
    if not finite.size:
        return Scale("sequential", quiet=0.0, loud=0.0, stops=q.stops, how=f"no values in {scope}")
    lo, hi = float(finite.min()), float(finite.max())
    if q.loud == "low":
        quiet = q.anchor if q.anchor is not None else hi
        loud = lo
        how = f"pale {_num(quiet)} to dark {_num(loud)} (the lowest {q.label} over {scope})"
    else:
        quiet = q.anchor if q.anchor is not None else lo
        loud = hi
        how = f"pale {_num(quiet)} to dark {_num(loud)} (the highest {q.label} over {scope})"
    return Scale("sequential", quiet=quiet, loud=loud, stops=q.stops, how=how)


def _num(value: Any) -> str:
    """A number as the inspector prints it: 4 significant digits, null for missing."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    if not math.isfinite(value):
        return "null"
    return f"{value:.4g}"


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

    def __len__(self) -> int:
        return len(self.tokens)

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
        reward = raw.get("reward")
        return cls(name=name, tokens=tokens, token_ids=list(ids), numbers=numbers,
                   top_tokens=raw.get("top_tokens") if isinstance(raw.get("top_tokens"), list) else None,
                   top_probs=raw.get("top_probs") if isinstance(raw.get("top_probs"), list) else None,
                   top_ids=raw.get("top_ids") if isinstance(raw.get("top_ids"), list) else None,
                   completion=str(raw.get("completion", "")),
                   reward=float(reward) if isinstance(reward, (int, float)) else None)


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

    @classmethod
    def from_record(cls, record: dict) -> "Trajectory":
        algorithm = str(record.get("algorithm") or GRPO).lower()
        step, index = _int(record.get("step")), _int(record.get("index"))
        group = _int(record.get("group"), index)
        if algorithm == DPO or ("chosen" in record and "rejected" in record):
            algorithm = DPO
            sides = [Side.from_mapping(name, record.get(name) if isinstance(record.get(name), dict) else {})
                     for name in ("chosen", "rejected")]
        else:
            sides = [Side.from_mapping("completion", record)]
        return cls(record=record, algorithm=algorithm, step=step, index=index, group=group,
                   prompt=str(record.get("prompt", "")), sides=sides)

    @property
    def key(self) -> tuple[int, int]:
        return (self.step, self.index)

    @property
    def reward(self) -> float | None:
        value = self.record.get("reward")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def advantage(self) -> float | None:
        """The rollout's advantage: GRPO's (the same on every token), PPO's mean over
        tokens; a DPO pair's margin."""
        if self.algorithm == DPO:
            value = self.record.get("margin")
            return float(value) if isinstance(value, (int, float)) else None
        adv = self.sides[0].numbers.get("advantage")
        if adv is None or not np.isfinite(adv).any():
            return None
        return float(np.nanmean(adv))

    def quantities(self) -> list[str]:
        """The per-token quantities this record has, known ones first (in the
        inspector's order), then any others alphabetically."""
        keys: set[str] = set()
        for side in self.sides:
            keys.update(k for k in side.numbers if k not in MARKS)
        known = [k for k in QUANTITIES if k in keys]
        return known + sorted(keys - set(known))

    def values(self, key: str) -> list[np.ndarray]:
        """The quantity on each side (NaN where a side lacks it)."""
        return [side.numbers.get(key, np.full(len(side), np.nan)) for side in self.sides]

    def label(self) -> str:
        """One line for the rollout picker."""
        if self.algorithm == DPO:
            return (f"pair {self.index} · margin {_num(self.record.get('margin'))} · "
                    f"chosen {_num(self.sides[0].reward)} / rejected {_num(self.sides[1].reward)}")
        parts = [f"#{self.index}"]
        if self.group != self.index or self.algorithm == GRPO:
            parts.append(f"group {self.group}")
        parts.append(f"reward {_num(self.reward)}")
        if self.algorithm == PPO and "score" in self.record:
            parts.append(f"score {_num(self.record.get('score'))}")
        adv = self.advantage
        if adv is not None:
            parts.append(f"{'mean adv' if self.algorithm == PPO else 'adv'} {adv:+.3g}")
        parts.append(f"{len(self.sides[0])} tok")
        if self.record.get("truncated"):
            parts.append("truncated")
        return " · ".join(parts)

    def summary_html(self) -> str:
        """The line above the text: every per-rollout number of the record."""
        parts = [f"<b>step {self.step}</b>"]
        if self.algorithm == DPO:
            parts.append(f"pair {self.index}")
            for key in ("margin", "beta"):
                if key in self.record:
                    parts.append(f"{key} <b>{_num(self.record.get(key))}</b>")
            for side in self.sides:
                parts.append(f"{side.name} reward <b>{_num(side.reward)}</b> ({len(side)} tokens)")
            return " · ".join(parts)
        parts.append(f"rollout {self.index}")
        if self.algorithm == GRPO or self.group != self.index:
            parts.append(f"group {self.group}")
        parts.append(f"reward <b>{_num(self.reward)}</b>")
        rewards = self.record.get("rewards")
        if isinstance(rewards, dict) and rewards:
            parts.append("(" + ", ".join(f"{html.escape(str(k))} {_num(v)}" for k, v in rewards.items()) + ")")
        if "score" in self.record:
            parts.append(f"score <b>{_num(self.record.get('score'))}</b>")
        adv = self.advantage
        if adv is not None:
            parts.append(f"{'mean advantage' if self.algorithm == PPO else 'advantage'} <b>{adv:+.4g}</b>")
        parts.append(f"{len(self.sides[0])} tokens")
        if self.record.get("truncated"):
            parts.append("<span style='color:#b00020'>truncated (no EOS)</span>")
        clipped = self.sides[0].clipped
        if clipped is not None and np.nansum(clipped) > 0:
            parts.append(f"{int(np.nansum(clipped))} clipped")
        return " · ".join(parts)


def _int(value: Any, default: int = 0) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def step_scale(records: list[Trajectory], key: str, scope_step: int | None = None) -> Scale:
    """The scale of a quantity over every record of a step (all sides)."""
    arrays = [a for r in records for a in r.values(key)]
    q = quantity(key, arrays)
    n = len(records)
    what = "pairs" if records and records[0].algorithm == DPO else "rollouts"
    scope = f"the {n} recorded {what} of step {scope_step}" if scope_step is not None else f"{n} {what}"
    return make_scale(q, arrays, scope)


def trajectory_scale(trajectory: Trajectory, key: str) -> Scale:
    arrays = trajectory.values(key)
    q = quantity(key, arrays)
    what = "this pair" if trajectory.algorithm == DPO else "this rollout"
    return make_scale(q, arrays, what)


# ============================================================ how tokens look

SPECIAL_TOKEN = re.compile(r"^(<\|[^|<>\s]{1,40}\|>|</?[A-Za-z_][\w.\-]{0,30}>|\[[A-Z_]{2,12}\]|<0x[0-9A-Fa-f]{2}>)$")
SPECIAL_IN_TEXT = re.compile(r"(<\|[^|<>\s]{1,40}\|>)")
TEXT, MARK, SPECIAL, BREAK = "text", "mark", "special", "break"
_MARK_OF = {" ": "·", "\t": "→", "\n": "↵", "\r": "␍"}


def token_segments(token: str) -> list[tuple[str, str]]:
    """How one token is drawn: (text, kind) runs, kind one of text, mark (visible
    whitespace: space ·, tab →, newline ↵, other control characters as their control
    picture), special (a tag, e.g. <eos>) and break (a line break after the newline's ↵).

    >>> token_segments(" the\\n")
    [('·', 'mark'), ('the', 'text'), ('↵', 'mark'), ('\\n', 'break')]
    >>> token_segments("<eos>"), token_segments("")
    ([('<eos>', 'special')], [('∅', 'mark')])
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


# ================================================================ tooltip, export


def token_numbers(side: Side, i: int) -> list[tuple[str, str]]:
    """(name, value) of every per-token number of token i, known quantities first."""
    keys = [k for k in QUANTITIES if k in side.numbers]
    keys += sorted(k for k in side.numbers if k not in keys)
    out = []
    for key in keys:
        value = side.numbers[key][i]
        if key == "clipped":
            out.append((key, "yes" if value == 1 else "no" if value == 0 else "null"))
        else:
            out.append((key, _num(value)))
    if "logprob" in side.numbers and math.isfinite(side.numbers["logprob"][i]):
        out.insert(keys.index("logprob") + 1, ("probability", _num(math.exp(side.numbers["logprob"][i]))))
    return out


def top_alternatives(side: Side, i: int, k: int = 5) -> list[tuple[str, float | None, bool]]:
    """(token as drawn, probability, is the sampled token) of the top-k alternatives."""
    if side.top_tokens is None or i >= len(side.top_tokens) or not isinstance(side.top_tokens[i], list):
        return []
    probs = side.top_probs[i] if side.top_probs is not None and i < len(side.top_probs) else None
    ids = side.top_ids[i] if side.top_ids is not None and i < len(side.top_ids) \
        and isinstance(side.top_ids[i], list) else None
    out = []
    for j, tok in enumerate(side.top_tokens[i][:k]):
        p = probs[j] if isinstance(probs, list) and j < len(probs) else None
        chosen = (ids is not None and j < len(ids) and i < len(side.token_ids) and ids[j] == side.token_ids[i]) \
            or (ids is None and str(tok) == side.tokens[i])
        out.append((token_display(str(tok)), float(p) if isinstance(p, (int, float)) else None, chosen))
    return out


def tooltip_html(trajectory: Trajectory, side_index: int, i: int) -> str:
    """Every number of token i, and the top-5 alternatives with their probabilities."""
    side = trajectory.sides[side_index]
    if not 0 <= i < len(side):
        return ""
    token = side.tokens[i]
    token_id = side.token_ids[i] if i < len(side.token_ids) else None
    where = f"{side.name} " if trajectory.algorithm == DPO else ""
    rows = "".join(f"<tr><td>{html.escape(name)}</td><td align='right'><b>{html.escape(value)}</b></td></tr>"
                   for name, value in token_numbers(side, i))
    head = (f"<b style='font-family:monospace'>{html.escape(token_display(token))}</b> "
            f"<span style='color:#666'>{where}token {i}" + (f" · id {token_id}" if token_id is not None else "")
            + "</span>")
    alts = top_alternatives(side, i)
    alt_html = ""
    if alts:
        alt_rows = "".join(
            f"<tr><td style='font-family:monospace'>{'<b>' if chosen else ''}{html.escape(text)}"
            f"{'</b> ◀' if chosen else ''}</td><td align='right'>{_num(p)}</td></tr>"
            for text, p, chosen in alts)
        alt_html = f"<p style='margin:4px 0 0 0'><b>top {len(alts)}</b> (probability)</p><table>{alt_rows}</table>"
    return f"<div>{head}<table>{rows}</table>{alt_html}</div>"


def token_title(side: Side, i: int) -> str:
    """The tooltip as plain text (the exported HTML's title attribute)."""
    lines = [f"token {i}: {token_display(side.tokens[i])}"]
    lines += [f"{name} {value}" for name, value in token_numbers(side, i)]
    alts = top_alternatives(side, i)
    if alts:
        lines.append("top: " + ", ".join(f"{text} {_num(p)}" for text, p, _ in alts))
    return "\n".join(lines)


def export_json(trajectory: Trajectory) -> str:
    """The record, as the engine wrote it (pretty-printed)."""
    return json.dumps(trajectory.record, ensure_ascii=False, indent=1)


_EXPORT_CSS = """
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1100px; }
.t { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 14px; line-height: 1.9;
     white-space: pre-wrap; word-break: break-all; }
.t span.k { padding: 1px 0; margin-right: 1px; border-radius: 2px; }
.t span.m { opacity: 0.55; }
.t span.s { border: 1px solid #555; border-radius: 4px; padding: 0 3px; font-size: 12px; }
.t span.c { outline: 2px solid #d00; }
.p { color: #888; }
.legend { display: flex; align-items: center; gap: 8px; font-size: 13px; margin: 8px 0 16px 0; }
.bar { width: 260px; height: 14px; border: 1px solid #999; }
.sides { display: flex; gap: 24px; } .sides > div { flex: 1; min-width: 0; }
h1 { font-size: 18px; } h2 { font-size: 15px; margin-bottom: 4px; }
"""


def _side_html(side: Side, colours: list[str], show_marks: bool) -> str:
    out = []
    clipped = side.clipped
    for i, token in enumerate(side.tokens):
        bg = colours[i]
        fg = text_hex(bg)
        inner = []
        for text, kind in token_segments(token):
            if kind == BREAK:
                continue
            cls = {MARK: " class='m'", SPECIAL: " class='s'"}.get(kind, "")
            inner.append(f"<span{cls}>{html.escape(text)}</span>" if cls else html.escape(text))
        mark = " c" if show_marks and clipped is not None and clipped[i] == 1 else ""
        out.append(f"<span class='k{mark}' data-i='{i}' style='background:{bg};color:{fg}' "
                   f"title='{html.escape(token_title(side, i), quote=True)}'>{''.join(inner)}</span>")
        if "\n" in token:
            out.append("\n" * token.count("\n"))
    return "".join(out)


def export_html(trajectory: Trajectory, key: str, scale: Scale, run_name: str = "") -> str:
    """A self-contained HTML page (inline CSS, no scripts or links): the prompt dimmed,
    each token a span with its background colour and a title holding its numbers, the
    legend of the scale."""
    q = quantity(key, trajectory.values(key))
    title = f"{run_name + ' · ' if run_name else ''}step {trajectory.step} · " + (
        f"pair {trajectory.index}" if trajectory.algorithm == DPO else f"rollout {trajectory.index}")
    gradient = ", ".join(scale.gradient(11))
    low, high = scale.low, scale.high
    legend = (f"<div class='legend'><b>{html.escape(q.label)}</b> <span>{_num(low)}</span>"
              f"<div class='bar' style='background:linear-gradient(to right, {gradient})'></div>"
              f"<span>{_num(high)}</span> <span style='color:#555'>{html.escape(scale.how)} · "
              f"{html.escape(q.meaning)}</span></div>")
    prompt = html.escape(trajectory.prompt)
    body = []
    show_marks = key == "ratio"
    for side, values in zip(trajectory.sides, trajectory.values(key)):
        colours = [scale.hex(v) for v in values.tolist()]
        text = _side_html(side, colours, show_marks)
        head = f"<h2>{side.name} · reward {_num(side.reward)}</h2>" if trajectory.algorithm == DPO else ""
        body.append(f"<div>{head}<div class='t'><span class='p'>{prompt}</span>{text}</div></div>")
    content = f"<div class='sides'>{''.join(body)}</div>" if len(body) > 1 else body[0]
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_EXPORT_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{trajectory.summary_html()}</p>{legend}{content}</body></html>\n")


# ================================================================ on disk

_STEP_FILE = re.compile(r"^step_(\d+)\.jsonl$")
_PROMPT_RE = re.compile(rb'"prompt":\s*"((?:[^"\\]|\\.)*)"')
_INDEX_RE = re.compile(rb'"index":\s*(-?\d+)')


def parse_records(data: bytes) -> list[Trajectory]:
    out = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(Trajectory.from_record(record))
    return out


class TrajectoryIndex:
    """The step files of a run's trajectories/ folder: which steps are on disk
    (`steps`, kept current by `poll()`), their records loaded on demand and the last
    `cache_size` steps kept, and which steps recorded a given prompt (`scan_prompts`
    reads the files a few at a time, picking the prompts out of the raw lines)."""

    def __init__(self, run_dir: str | Path, cache_size: int = 48):
        self.run_dir = Path(run_dir)
        self.folder = self.run_dir / rundir.TRAJECTORIES_DIR
        self.steps: list[int] = []
        self._stamp: int | None = None
        self._polls = 0
        self._cache: OrderedDict[int, tuple[tuple, list[Trajectory]]] = OrderedDict()
        self.cache_size = cache_size
        self._prompts: dict[int, tuple[tuple, list[tuple[int, str]]]] = {}  # step -> (stamp, [(index, prompt)])

    def poll(self) -> bool:
        """Re-list the folder if it changed (its mtime moves when a step file is renamed
        into it; re-listed every 10th poll anyway). True when the steps changed."""
        self._polls += 1
        try:
            stamp = self.folder.stat().st_mtime_ns
        except OSError:
            stamp = None
        if stamp == self._stamp and self._polls % 10 and self.steps:
            return False
        self._stamp = stamp
        steps: list[int] = []
        if stamp is not None:
            try:
                with os.scandir(self.folder) as it:
                    for entry in it:
                        m = _STEP_FILE.match(entry.name)
                        if m:
                            steps.append(int(m.group(1)))
            except OSError:
                pass
        steps.sort()
        if steps != self.steps:
            self.steps = steps
            return True
        return False

    def _file_stamp(self, step: int) -> tuple | None:
        try:
            st = rundir.trajectory_path(self.run_dir, step).stat()
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns)

    def records(self, step: int) -> list[Trajectory]:
        """The records of one step ([] when it has no file). A file rewritten since it
        was read (a resumed run redoes steps) is read again."""
        stamp = self._file_stamp(step)
        hit = self._cache.get(step)
        if hit is not None and hit[0] == stamp:
            self._cache.move_to_end(step)
            return hit[1]
        if stamp is None:
            self._cache.pop(step, None)
            return []
        try:
            data = rundir.trajectory_path(self.run_dir, step).read_bytes()
        except OSError:
            return []
        records = parse_records(data)
        self._cache[step] = (stamp, records)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return records

    def find(self, step: int, index: int) -> Trajectory | None:
        for record in self.records(step):
            if record.index == index:
                return record
        return None

    def neighbour_step(self, step: int, direction: int) -> int | None:
        """The step on disk after (+1) or before (-1) `step`."""
        import bisect

        if not self.steps:
            return None
        if direction > 0:
            i = bisect.bisect_right(self.steps, step)
            return self.steps[i] if i < len(self.steps) else None
        i = bisect.bisect_left(self.steps, step) - 1
        return self.steps[i] if i >= 0 else None

    def nearest_step(self, step: int) -> int | None:
        if not self.steps:
            return None
        return min(self.steps, key=lambda s: (abs(s - step), s))

    # ---------------------------------------------------------------- prompts

    def scan_prompts(self, budget_s: float = 0.02) -> bool:
        """Read the prompts of files not yet scanned (or rewritten) for at most
        `budget_s`; True when every step on disk is scanned."""
        deadline = time.perf_counter() + budget_s
        for step in self.steps:
            hit = self._prompts.get(step)
            if hit is not None:
                continue
            stamp = self._file_stamp(step)
            try:
                data = rundir.trajectory_path(self.run_dir, step).read_bytes()
            except OSError:
                continue
            found = []
            for line in data.splitlines():
                m = _PROMPT_RE.search(line)
                if not m:
                    continue
                try:
                    prompt = json.loads(b'"' + m.group(1) + b'"')
                except ValueError:
                    continue
                im = _INDEX_RE.search(line)
                found.append((int(im.group(1)) if im else -1, prompt))
            self._prompts[step] = (stamp, found)
            if time.perf_counter() > deadline:
                return self.prompts_scanned() >= len(self.steps)
        return True

    def prompts_scanned(self) -> int:
        return sum(1 for s in self.steps if s in self._prompts)

    def steps_with_prompt(self, prompt: str) -> list[tuple[int, int]]:
        """(step, index) of every scanned record with this prompt."""
        out = []
        for step in self.steps:
            hit = self._prompts.get(step)
            if hit is None:
                continue
            out += [(step, index) for index, p in hit[1] if p == prompt]
        return out


# ================================================================ groups


@dataclass
class GroupRow:
    index: int
    reward: float | None
    rewards: dict
    advantage: float | None
    completion: str
    trajectory: Trajectory | None = None  # None: only in a samples event (text, no tokens)


@dataclass
class Group:
    step: int
    group: int
    prompt: str
    rows: list[GroupRow] = field(default_factory=list)
    size: int | None = None  # num_generations, when known

    @property
    def complete(self) -> bool:
        return self.size is not None and len(self.rows) >= self.size

    @property
    def rewards_equal(self) -> bool:
        rewards = [r.reward for r in self.rows if r.reward is not None and math.isfinite(r.reward)]
        return len(rewards) >= 2 and max(rewards) - min(rewards) <= 1e-9 * max(1.0, abs(rewards[0]))

    @property
    def no_signal(self) -> bool:
        """Every completion of the group got the same reward: the group-relative
        advantages are all 0 and the update learns nothing from it. Judged from the
        whole group, or, when only part of it is on disk, from the advantages too."""
        if not self.rewards_equal:
            return False
        if self.complete:
            return True
        advantages = [r.advantage for r in self.rows if r.advantage is not None]
        return bool(advantages) and all(abs(a) < 1e-6 for a in advantages)

    def flag(self) -> str:
        """What to tell the user about the group's signal ('' when there is signal)."""
        if self.no_signal:
            reward = next(r.reward for r in self.rows if r.reward is not None)
            return (f"No learning signal: all {len(self.rows)} completions of this group got reward "
                    f"{_num(reward)}, so every advantage is 0 and the update learns nothing from them.")
        if self.rewards_equal:
            return (f"The {len(self.rows)} completions on record got the same reward, but the group has "
                    f"{self.size} and the advantages are not 0: the others differ.")
        return ""


def build_group(records: list[Trajectory], samples: list[dict], step: int, group: int,
                size: int | None = None) -> Group:
    """The completions of one prompt group at one step: the token-level records, plus
    the completions that only a `samples` event holds (text and reward)."""
    rows: dict[int, GroupRow] = {}
    prompt = ""
    for sample in samples:
        if not isinstance(sample, dict) or _int(sample.get("group"), -1) != group:
            continue
        index = _int(sample.get("index"), -1)
        prompt = prompt or str(sample.get("prompt", ""))
        rows[index] = GroupRow(index=index, reward=_float(sample.get("reward")),
                               rewards=dict(sample.get("rewards") or {}),
                               advantage=_float(sample.get("advantage")),
                               completion=str(sample.get("completion", "")))
    for record in records:
        if record.group != group or record.algorithm == DPO:
            continue
        prompt = record.prompt or prompt
        rewards = record.record.get("rewards")
        rows[record.index] = GroupRow(index=record.index, reward=record.reward,
                                      rewards=dict(rewards) if isinstance(rewards, dict) else {},
                                      advantage=record.advantage, completion=record.sides[0].completion,
                                      trajectory=record)
    return Group(step=step, group=group, prompt=prompt, rows=[rows[i] for i in sorted(rows)], size=size)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(float(value)) else None


# ================================================================ prompt history


@dataclass
class HistoryRow:
    step: int
    source: str  # "rollout" (token-level record), "sample" (samples event) or "eval" (greedy, held out)
    index: int | None
    completion: str
    reward: float | None
    advantage: float | None = None
    has_tokens: bool = False


def prompt_history(prompt: str, index: TrajectoryIndex | None, samples=None,
                   eval_samples: list[tuple[int, list[dict]]] | None = None) -> list[HistoryRow]:
    """Every completion of one prompt the run recorded, oldest step first: token-level
    rollouts (those `index.scan_prompts` has reached), samples events and evaluations.
    A rollout that is also in a samples event is listed once, as the rollout."""
    rows: list[HistoryRow] = []
    seen: set[tuple[int, int]] = set()
    if index is not None:
        for step, i in index.steps_with_prompt(prompt):
            t = index.find(step, i)
            if t is None:
                continue
            seen.add((step, i))
            completion = t.sides[0].completion if t.algorithm != DPO else \
                f"chosen: {t.sides[0].completion} | rejected: {t.sides[1].completion}"
            rows.append(HistoryRow(step, "rollout", i, completion, t.reward if t.algorithm != DPO
                                   else t.sides[0].reward, t.advantage, True))
    if samples is not None:
        n = len(samples)
        if n:
            steps = samples.numbers("step")
            indices = samples.numbers("index")
            rewards = samples.numbers("reward")
            advantages = samples.numbers("advantage")
            for r in range(n):
                if samples.text(r, "prompt") != prompt:
                    continue
                step = int(steps[r])
                i = int(indices[r]) if math.isfinite(indices[r]) else None
                if i is not None and (step, i) in seen:
                    continue
                rows.append(HistoryRow(step, "sample", i, samples.text(r, "completion"),
                                       _float(float(rewards[r])), _float(float(advantages[r]))))
    for step, items in eval_samples or []:
        for item in items:
            if isinstance(item, dict) and item.get("prompt") == prompt:
                rows.append(HistoryRow(int(step), "eval", None, str(item.get("completion", "")),
                                       _float(item.get("reward"))))
    order = {"eval": 0, "rollout": 1, "sample": 2}
    rows.sort(key=lambda r: (r.step, order[r.source], r.index if r.index is not None else -1))
    return rows
