"""What the inspector says about a trajectory in words: the summary line, the token
tooltip, and the HTML and JSON export. No Qt.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass

import numpy as np

from workbench.inspector.colors import Scale, text_hex
from workbench.inspector.episodes import TOOL_HEX, episode_summary
from workbench.inspector.quantities import QUANTITIES, _num, quantity
from workbench.run_declaration import GROUP, PAIR, SINGLE
from workbench.inspector.records import BREAK, MARK, SPECIAL, Side, Trajectory, token_display, token_segments
from workbench.inspector.steps import badges, mean_score, scores_text, token_step_lines
from workbench.inspector.update_effect import EFFECT_KEYS, effect_rows, token_marks, trajectory_effect_text
from workbench.inspector.wording import signed

# ===================================================================== summary


@dataclass(frozen=True)
class SummaryPart:
    """One item of a trajectory's summary line: `label`, then `value` (emphasised in
    HTML), then `after`; `heading` makes the whole item bold, `warn` red."""

    label: str
    value: str = ""
    after: str = ""
    heading: bool = False
    warn: bool = False

    def text(self) -> str:
        return " ".join(p for p in (self.label, self.value, self.after) if p)

    def html(self) -> str:
        if self.heading:
            return f"<b>{html.escape(self.text())}</b>"
        if self.warn:
            return f"<span style='color:#b00020'>{html.escape(self.text())}</span>"
        out = html.escape(self.label)
        if self.value:
            out += f" <b>{html.escape(self.value)}</b>"
        if self.after:
            out += f" {html.escape(self.after)}"
        return out


def signed_values(values: dict) -> str:
    """{name: number} as `name +1.2, other -0.4` (null where not a number).

    >>> signed_values({"exact_match": 1.2, "format": -0.4, "x": None})
    'exact_match +1.2, format -0.4, x null'
    """
    return ", ".join(f"{k} {signed(v)}" for k, v in values.items())


def _components(values) -> str:
    return ", ".join(f"{k} {_num(v)}" for k, v in values.items()) if isinstance(values, dict) else ""


def rollout_context(trajectory: Trajectory) -> list[SummaryPart]:
    """What the record says about the whole completion besides its reward: each reward's
    own advantage (`component_advantages`: which reward drives the update) and the
    greedy baseline the reward is measured against (`baseline`)."""
    parts = []
    per_reward = trajectory.record.get("component_advantages")
    if isinstance(per_reward, dict) and per_reward:
        parts.append(SummaryPart("advantage per reward", signed_values(per_reward),
                                 "(each reward normalised within the group, before weights)"))
    baseline = trajectory.record.get("baseline")
    if isinstance(baseline, dict):
        rewards = _components(baseline.get("rewards"))
        parts.append(SummaryPart("greedy baseline reward", _num(baseline.get("reward")),
                                 f"({rewards})" if rewards else ""))
    return parts


def _pair_parts(t: Trajectory) -> list[SummaryPart]:
    parts = [SummaryPart(f"pair {t.index}")]
    if not t.scored:
        parts += [SummaryPart(key, _num(t.record.get(key))) for key in ("margin", "beta") if key in t.record]
        parts += [SummaryPart(f"{side.name} reward", _num(side.reward), f"({len(side)} tokens)") for side in t.sides]
        return parts
    parts.append(SummaryPart(t.score_outcome(), heading=True))
    parts += [SummaryPart(label, _num(t.record.get(key))) for label, key in
              (("implicit reward margin", "margin"), ("beta", "beta")) if key in t.record]
    for side in t.sides:
        rewards = _components(side.rewards)
        parts.append(SummaryPart(f"{side.name} score", _num(side.reward),
                                 (f"({rewards}) " if rewards else "")
                                 + f"implicit reward {_num(t.side_implicit_reward(side))}, {len(side)} tokens"))
    return parts


def summary_parts(trajectory: Trajectory) -> list[SummaryPart]:
    """Every per-rollout number of the record, in order (what summary_html shows)."""
    t = trajectory
    parts = [SummaryPart(f"step {t.step}", heading=True)]
    if t.layout == PAIR:
        return parts + _pair_parts(t) + effect_parts(t)
    if t.demonstration:  # the data's answer: how likely the model finds it, and where it would not write it
        parts += [SummaryPart(f"demonstration {t.index}", heading=True),
                  SummaryPart("mean logprob", _num(t.mean_logprob))] + disagreement_parts(t)
        return parts + [SummaryPart(f"{len(t.sides[0])} tokens")] + effect_parts(t)
    parts.append(SummaryPart(f"rollout {t.index}"))
    if t.layout == GROUP or t.group != t.index:
        parts.append(SummaryPart(f"group {t.group}"))
    if t.desirable is not None:
        parts.append(SummaryPart("desirable" if t.desirable else "undesirable", heading=True))
    parts.append(SummaryPart("reward", _num(t.reward)))
    rewards = t.record.get("rewards")
    if isinstance(rewards, dict) and rewards:
        parts.append(SummaryPart("(" + _components(rewards) + ")"))
    if "score" in t.record:
        parts.append(SummaryPart("score", _num(t.record.get("score"))))
    if isinstance(t.record.get("kl"), (int, float)):  # a scalar: the step's reference point (unpaired preferences)
        parts.append(SummaryPart("KL reference point", _num(t.record.get("kl"))))
    parts += step_parts(t)
    adv = t.advantage
    spread = t.advantage_range
    if adv is not None and spread is not None:  # varies by token: its mean is not every token's
        parts.append(SummaryPart("mean advantage", signed(adv),
                                 f"(per token {signed(spread[0])} to {signed(spread[1])})"))
    elif adv is not None:
        parts.append(SummaryPart("mean advantage" if t.layout == SINGLE else "advantage", signed(adv)))
    parts += rollout_context(t)
    parts.append(SummaryPart(f"{len(t.sides[0])} tokens"))
    if t.episode is not None:
        tools = int(t.episode.tool_mask.sum())
        parts.append(SummaryPart("episode", episode_summary(t.episode.raw) or f"{t.episode.turns} turns",
                                 f"({tools} tool tokens, not trained)" if tools else ""))
    if t.record.get("truncated"):
        parts.append(SummaryPart("truncated (no EOS)", warn=True))
    clipped = t.sides[0].clipped
    if clipped is not None and np.nansum(clipped) > 0:
        parts.append(SummaryPart(f"{int(np.nansum(clipped))} clipped"))
    return parts + effect_parts(t)


def disagreement_parts(trajectory: Trajectory) -> list[SummaryPart]:
    """How many of a demonstration's tokens the model would not have put first (from
    `rank`, else from the top-5; none when the record has neither)."""
    side = trajectory.sides[0]
    ranks = [token_rank(side, i)[0] for i in range(len(side))]
    known = [r for r in ranks if r is not None]
    if not known:
        return []
    return [SummaryPart("not the model's top choice", f"{sum(r != 1 for r in known)} of {len(known)} tokens")]


def effect_parts(trajectory: Trajectory) -> list[SummaryPart]:
    """What this step's update did to each side's tokens (none without Δ log p)."""
    pair = trajectory.layout == PAIR
    texts = [(side.name, trajectory_effect_text(trajectory, k)) for k, side in enumerate(trajectory.sides)]
    return [SummaryPart(f"{name} update:" if pair else "update:", text) for name, text in texts if text]


def step_parts(trajectory: Trajectory) -> list[SummaryPart]:
    """Each step reward's scores, in order, with their mean (its value in the reward)
    and its weight when the record gives one."""
    weights = trajectory.record.get("step_weights")
    weights = weights if isinstance(weights, dict) else {}
    parts = []
    for c in trajectory.steps:
        mean = mean_score(list(c.scores))
        weight = weights.get(c.label)
        after = f"(mean {_num(mean)}" + (f", weight {_num(weight)}" if isinstance(weight, (int, float)) else "") + ")"
        parts.append(SummaryPart(f"steps of {c.label}", scores_text(list(c.scores)), after))
    return parts


def summary_html(trajectory: Trajectory) -> str:
    """The line above the text: every per-rollout number of the record."""
    return " · ".join(part.html() for part in summary_parts(trajectory))


# ================================================================ tooltip, export


def token_rank(side: Side, i: int) -> tuple[int | None, str]:
    """Token i's rank among the vocabulary and how the tooltip says it: the recorded
    `rank`, else its place among the top-5 alternatives (a record from before `rank`);
    (None, '') when neither tells."""
    recorded = side.numbers.get("rank")
    if recorded is not None and math.isfinite(recorded[i]):
        rank = int(recorded[i])
        return rank, f"{rank}" + (" (the model's top choice)" if rank == 1 else "")
    ids = side.top_ids[i] if side.top_ids is not None and i < len(side.top_ids) else None
    if not isinstance(ids, list) or not ids or i >= len(side.token_ids):
        return None, ""
    if side.token_ids[i] in ids:
        rank = ids.index(side.token_ids[i]) + 1
        return rank, f"{rank} (of the top {len(ids)})" if rank > 1 else "1 (the model's top choice)"
    return len(ids) + 1, f"below the top {len(ids)}"


def token_numbers(side: Side, i: int) -> list[tuple[str, str]]:
    """(name, value) of every per-token number of token i, known quantities first; its
    probability after its logprob, then its rank."""
    keys = [k for k in QUANTITIES if k in side.numbers and k not in EFFECT_KEYS and k != "rank"]
    keys += sorted(k for k in side.numbers if k not in keys and k not in EFFECT_KEYS and k != "rank")
    out = []
    for key in keys:
        value = side.numbers[key][i]
        if key == "clipped":
            out.append((key, "yes" if value == 1 else "no" if value == 0 else "null"))
        else:
            out.append((key, _num(value)))
    names = [name for name, _ in out]
    if "probability" not in names and "logprob" in side.numbers and math.isfinite(side.numbers["logprob"][i]):
        out.insert(names.index("logprob") + 1, ("probability", _num(math.exp(side.numbers["logprob"][i]))))
    rank = token_rank(side, i)[1]
    if rank:
        names = [name for name, _ in out]
        out.insert(names.index("probability") + 1 if "probability" in names else len(out), ("rank", rank))
    effect = effect_rows(side, i)  # the update's effect together: before -> after, Δ log p, Δ p
    names = [name for name, _ in out]
    after = next((n for n in ("rank", "probability") if n in names), None)
    at = names.index(after) + 1 if after else len(out)
    out[at:at] = effect
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
    where = f"{side.name} " if trajectory.layout == PAIR else "demonstration " if trajectory.demonstration else ""
    rows = "".join(f"<tr><td>{html.escape(name)}</td><td align='right'><b>{html.escape(value)}</b></td></tr>"
                   for name, value in token_numbers(side, i))
    head = (f"<b style='font-family:monospace'>{html.escape(token_display(token))}</b> "
            f"<span style='color:#666'>{where}token {i}" + (f" · id {token_id}" if token_id is not None else "")
            + "</span>")
    alts = top_alternatives(side, i)
    alt_html = ""
    if alts:
        # A demonstration's token is the data's: the alternatives are what the model would have written.
        mark = "◀ <span style='font-family:sans-serif;color:#555'>the data's</span>" if trajectory.demonstration \
            else "◀"
        alt_rows = "".join(
            f"<tr><td style='font-family:monospace'>{'<b>' if chosen else ''}{html.escape(text)}"
            f"{f'</b> {mark}' if chosen else ''}</td><td align='right'>{_num(p)}</td></tr>"
            for text, p, chosen in alts)
        whose = "the model's " if trajectory.demonstration else ""
        alt_html = (f"<p style='margin:4px 0 0 0'><b>{whose}top {len(alts)}</b> (probability)</p>"
                    f"<table>{alt_rows}</table>")
    steps = token_step_lines(trajectory.steps, i) if side_index == 0 else []
    # An episode's token: its turn (and a tool's: not trained, what it answers) before its numbers.
    turn = trajectory.episode.token_lines(i) if side_index == 0 and trajectory.episode is not None else []
    turn_html = ("<p style='margin:2px 0'>" + "<br>".join(html.escape(line) for line in turn) + "</p>"
                 if turn else "")
    steps_html = ("<p style='margin:4px 0 0 0'>" + "<br>".join(html.escape(line) for line in steps) + "</p>"
                  if steps else "")
    # What the whole completion has (each reward's advantage, a greedy baseline) belongs beside it.
    context = "".join(f"<br><span style='color:#555'>{html.escape(part.text())}</span>"
                      for part in rollout_context(trajectory))
    context = f"<p style='margin:4px 0 0 0'><b>the completion</b>{context}</p>" if context else ""
    return f"<div>{head}{turn_html}<table>{rows}</table>{steps_html}{alt_html}{context}</div>"


def token_title(side: Side, i: int, steps=(), episode=None) -> str:
    """The tooltip as plain text (the exported HTML's title attribute); `steps`: the
    completion's step rewards (StepComponent); `episode`: its episodes.Episode."""
    lines = [f"token {i}: {token_display(side.tokens[i])}"]
    lines += episode.token_lines(i) if episode is not None else []
    lines += [f"{name} {value}" for name, value in token_numbers(side, i)]
    lines += token_step_lines(list(steps), i)
    alts = top_alternatives(side, i)
    if alts:
        lines.append("top: " + ", ".join(f"{text} {_num(p)}" for text, p, _ in alts))
    return "\n".join(lines)


def export_name(run_name: str, trajectory: Trajectory | None, suffix: str) -> str:
    """The file name an export suggests: run-stepN-rolloutK.suffix (pairK for a pair)."""
    what = "pair" if trajectory and trajectory.layout == PAIR else "rollout"
    step = trajectory.step if trajectory else None
    return f"{run_name or 'run'}-step{step}-{what}{trajectory.index if trajectory else 0}.{suffix}"


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
.t span.st { border-left: 2px solid #555; padding: 0 3px; margin: 0 3px 0 1px; font-size: 11px;
             border-radius: 0 6px 6px 0; }
.p { color: #888; }
.legend { display: flex; align-items: center; gap: 8px; font-size: 13px; margin: 8px 0 16px 0; }
.bar { width: 260px; height: 14px; border: 1px solid #999; }
.sides { display: flex; gap: 24px; } .sides > div { flex: 1; min-width: 0; }
.note { background: #fff8e1; color: #5c4400; padding: 4px 8px; font-size: 13px; }
h1 { font-size: 18px; } h2 { font-size: 15px; margin-bottom: 4px; }
"""


def _side_html(side: Side, colours: list[str], marks, steps=(), episode=None) -> str:
    """A side's tokens as spans; `marks` (1/0 per token, or None) outlines tokens in red;
    `steps` (StepComponent): each step's score after its end token, behind a bar;
    `episode`: its tool tokens grey."""
    out = []
    if episode is not None:
        colours = [TOOL_HEX if tool else c for c, tool in zip(colours, episode.tool_mask.tolist())]
    ends = badges(list(steps), {})
    for i, token in enumerate(side.tokens):
        bg = colours[i]
        fg = text_hex(bg)
        inner = []
        for text, kind in token_segments(token):
            if kind == BREAK:
                continue
            cls = {MARK: " class='m'", SPECIAL: " class='s'"}.get(kind, "")
            inner.append(f"<span{cls}>{html.escape(text)}</span>" if cls else html.escape(text))
        mark = " c" if marks is not None and marks[i] == 1 else ""
        out.append(f"<span class='k{mark}' data-i='{i}' style='background:{bg};color:{fg}' "
                   f"title='{html.escape(token_title(side, i, steps, episode), quote=True)}'>{''.join(inner)}</span>")
        for text, bg in ends.get(i, []):
            out.append(f"<span class='st' style='background:{bg};color:{text_hex(bg)}'>{html.escape(text)}</span>")
        if "\n" in token:
            out.append("\n" * token.count("\n"))
    return "".join(out)


def _baseline_html(baseline, prompt: str) -> str:
    """The greedy baseline's text under the completion ('' when the record has none)."""
    if not isinstance(baseline, dict):
        return ""
    rewards = _components(baseline.get("rewards"))
    return (f"<h2>greedy baseline · reward {_num(baseline.get('reward'))}{f' ({html.escape(rewards)})' if rewards else ''}"
            " · the completion the reward is measured against (greedy, not sampled, not trained on)</h2>"
            f"<div class='t'><span class='p'>{prompt}</span>{html.escape(str(baseline.get('completion', '')))}</div>")


def export_html(trajectory: Trajectory, key: str, scale: Scale, run_name: str = "") -> str:
    """A self-contained HTML page (inline CSS, no scripts or links): the prompt dimmed,
    each token a span with its background colour and a title holding its numbers, the
    legend of the scale."""
    q = quantity(key, trajectory.values(key))
    label = {True: " (desirable)", False: " (undesirable)"}.get(trajectory.desirable, "")
    title = f"{run_name + ' · ' if run_name else ''}step {trajectory.step} · " + (
        f"pair {trajectory.index}" if trajectory.layout == PAIR else f"rollout {trajectory.index}{label}")
    gradient = ", ".join(scale.gradient(11))
    low, high = scale.low, scale.high
    legend = (f"<div class='legend'><b>{html.escape(q.label)}</b> <span>{_num(low)}</span>"
              f"<div class='bar' style='background:linear-gradient(to right, {gradient})'></div>"
              f"<span>{_num(high)}</span> <span style='color:#555'>{html.escape(scale.how)} · "
              f"{html.escape(q.meaning)}</span></div>")
    if q.note:
        legend += f"<p class='note'>{html.escape(q.note)}</p>"
    prompt = html.escape(trajectory.prompt)
    body = []
    for k, (side, values) in enumerate(zip(trajectory.sides, trajectory.values(key))):
        colours = [scale.hex(v) for v in values.tolist()]
        marks = token_marks(trajectory, k, key)  # boxed: clipped (ratio), against the push (change)
        text = _side_html(side, colours, marks, trajectory.steps if k == 0 else (),
                          trajectory.episode if k == 0 else None)
        head = ""
        if trajectory.scored:
            head = (f"<h2>{side.name} · score {_num(side.reward)} · implicit reward "
                    f"{_num(trajectory.side_implicit_reward(side))}</h2>")
        elif trajectory.layout == PAIR:
            head = f"<h2>{side.name} · reward {_num(side.reward)}</h2>"
        elif trajectory.demonstration:
            head = "<h2>demonstration · the data's answer, not a sample from the model</h2>"
        body.append(f"<div>{head}<div class='t'><span class='p'>{prompt}</span>{text}</div></div>")
    content = f"<div class='sides'>{''.join(body)}</div>" if len(body) > 1 else body[0]
    content += _baseline_html(trajectory.record.get("baseline"), prompt)
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_EXPORT_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{summary_html(trajectory)}</p>{legend}{content}</body></html>\n")

