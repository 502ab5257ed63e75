"""Multi-turn episodes with tools as the window shows them (issue 26). No Qt.

A run with an environment records each episode as one completion whose tokens are the
model's turns and, between them, the tokens a tool (or the chat template) wrote
(docs/run-directory.md): a trajectory record carries `tool_mask` (1: a tool token,
attended to, never trained; its per-token values are null), `turn` (each token's turn;
a tool reply belongs to the turn whose calls it answers) and `episode` {`turns`,
`truncated`, `reward_source`, `tool_calls` [{`turn`, `name`, `arguments`, `result`,
`error`}], `messages`}; a samples row carries `episode` alone. A record or row without
them is not an episode and is drawn exactly as before.

Here they become an `Episode` (the inspector's: which tokens are the tools', where each
turn starts, what a token's tooltip says) and the words the samples table, the Group
page and the inspector print:

>>> ep = {"turns": 3, "tool_calls": [{"turn": 0, "name": "calculate", "error": False},
...       {"turn": 1, "name": "calculate", "error": True}]}
>>> episode_summary(ep)
'3 turns · calculate ×2 · 1 error'
>>> tool_spans([0, 0, 1, 1, 0, 1])
[(2, 3), (5, 5)]
"""

from __future__ import annotations

import html
import json
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

TOOL_HEX = "#a8a8a8"  # a tool token's background: a neutral grey, darker than the null grey (#d4d4d4)
TOOL_TEXT_HEX = "#1f1f1f"
TOOL_SPAN_HEX = "#9e9e9e"  # the plot's shading under a tool span (drawn see-through)
TOOL_LEGEND = "tool / environment: not trained"
TURN, TOOL = "turn", "tool"  # the kinds of tag the text draws before a token


# ================================================================ the record


@dataclass(frozen=True)
class ToolCallInfo:
    """One tool call of an episode as recorded: the turn that made it, the tool's name
    and arguments, what it returned (or its error text) and whether it failed."""

    turn: int | None
    name: str
    arguments: dict
    result: str
    error: bool

    def call_text(self) -> str:
        """The call as written: its name and arguments (values as JSON).

        >>> ToolCallInfo(0, "calculate", {"expression": "3+4"}, "7", False).call_text()
        'calculate(expression="3+4")'
        """
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in self.arguments.items())
        return f"{self.name or '(malformed call)'}({args})"


def tool_calls_of(episode: Any) -> list[ToolCallInfo]:
    """The `tool_calls` of an `episode` mapping ([] when it has none); odd entries kept
    as far as they can be read.

    >>> [c.name for c in tool_calls_of({"tool_calls": [{"name": "a", "turn": 1}, "x", {"result": "?"}]})]
    ['a', '']
    """
    calls = episode.get("tool_calls") if isinstance(episode, dict) else None
    out = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        turn, arguments = call.get("turn"), call.get("arguments")
        out.append(ToolCallInfo(turn=turn if isinstance(turn, int) and not isinstance(turn, bool) else None,
                                name=str(call.get("name") or ""),
                                arguments=arguments if isinstance(arguments, dict) else {},
                                result=str(call.get("result", "")), error=call.get("error") is True))
    return out


def tool_spans(mask) -> list[tuple[int, int]]:
    """The runs of tool tokens, (first, last) inclusive, in order.

    >>> tool_spans([1, 0, 0, 1]), tool_spans([])
    ([(0, 0), (3, 3)], [])
    """
    flags = np.asarray(mask, dtype=bool)
    if not flags.size:
        return []
    edges = np.diff(np.concatenate([[False], flags, [False]]).astype(np.int8))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    return [(int(a), int(b)) for a, b in zip(starts, ends)]


@dataclass
class Episode:
    """An episode's record for the inspector: each token's tool flag and turn (None when
    the record has no per-token turns), the tool calls and the counts."""

    tool_mask: np.ndarray  # (T,) bool
    turn: np.ndarray | None  # (T,) int
    turns: int
    truncated: bool
    reward_source: str | None
    calls: list[ToolCallInfo]
    raw: dict  # the record's `episode` mapping

    @cached_property
    def base(self) -> int:
        """The first turn's number in the record (0 for the engine's 0-based turns); turns
        are shown counted from 1 whatever it is."""
        return int(self.turn.min()) if self.turn is not None and self.turn.size else 0

    def shown_turn(self, turn: int) -> int:
        return turn - self.base + 1

    @property
    def has_tool_tokens(self) -> bool:
        return bool(self.tool_mask.any())

    def tool_names(self, turn: int | None) -> str:
        """The tools whose calls turn `turn` (as recorded) made, joined: what its tool
        tokens answer ('' when none is recorded).

        >>> ep = Episode(np.zeros(0, bool), None, 1, False, None, [ToolCallInfo(0, "a", {}, "", False),
        ...              ToolCallInfo(0, "b", {}, "", False), ToolCallInfo(0, "a", {}, "", False)], {})
        >>> ep.tool_names(0), ep.tool_names(1)
        ('a, b', '')
        """
        names = [c.name or "(malformed call)" for c in self.calls if c.turn == turn]
        return ", ".join(dict.fromkeys(names))

    def text_tags(self) -> dict[int, tuple[str, str]]:
        """What the text draws before a token, on a new line: each turn's first token a
        `turn k` tag (TURN), each tool span's first token the tools it answers (TOOL).

        >>> ep = Episode(np.array([0, 0, 1, 1, 0], bool), np.array([0, 0, 0, 0, 1]), 2, False, None,
        ...              [ToolCallInfo(0, "calculate", {}, "7", False)], {})
        >>> ep.text_tags()
        {0: ('turn 1', 'turn'), 2: ('↳ calculate', 'tool'), 4: ('turn 2', 'turn')}
        """
        tags: dict[int, tuple[str, str]] = {}
        if self.turn is not None and self.turn.size:
            starts = np.flatnonzero(np.concatenate([[True], self.turn[1:] != self.turn[:-1]]))
            tags.update({int(i): (f"turn {self.shown_turn(int(self.turn[i]))}", TURN) for i in starts})
        for first, _last in tool_spans(self.tool_mask):
            if first not in tags:
                names = self.tool_names(int(self.turn[first])) if self.turn is not None else ""
                tags[first] = (f"↳ {names or 'tool'}", TOOL)
        return dict(sorted(tags.items()))

    def token_lines(self, i: int) -> list[str]:
        """What token i's tooltip says about the episode: its turn, and for a tool token
        that it is not trained and which tool it answers.

        >>> ep = Episode(np.array([0, 1, 0], bool), np.array([0, 0, 1]), 2, False, None,
        ...              [ToolCallInfo(0, "calculate", {}, "7", False)], {})
        >>> ep.token_lines(1), ep.token_lines(2)
        (['turn 1 of 2 · tool / environment: not trained', 'answers the call to calculate'], ['turn 2 of 2 · written by the model'])
        """
        if not 0 <= i < len(self.tool_mask):
            return []
        where = ""
        if self.turn is not None:
            where = f"turn {self.shown_turn(int(self.turn[i]))} of {self.turns} · "
        if not self.tool_mask[i]:
            return [where + "written by the model"]
        names = self.tool_names(int(self.turn[i])) if self.turn is not None else ""
        return [where + TOOL_LEGEND] + ([f"answers the call to {names}"] if names else [])


def record_episode(record: dict, n_tokens: int) -> Episode | None:
    """The episode of a trajectory record with `n_tokens` tokens; None when the record
    is not an episode (no `episode` and no `tool_mask`). A per-token list of the wrong
    length is left out (no tool tokens, no turns) rather than drawn in the wrong place.

    >>> ep = record_episode({"tool_mask": [0, 1, 0], "turn": [0, 0, 1], "episode": {"turns": 2}}, 3)
    >>> ep.tool_mask.tolist(), ep.turn.tolist(), ep.turns
    ([False, True, False], [0, 0, 1], 2)
    >>> record_episode({"tokens": ["a"]}, 1) is None
    True
    """
    raw, mask, turn = record.get("episode"), record.get("tool_mask"), record.get("turn")
    if not isinstance(raw, dict) and not isinstance(mask, list):
        return None
    raw = raw if isinstance(raw, dict) else {}
    flags = np.array([v == 1 for v in mask], dtype=bool) if isinstance(mask, list) and len(mask) == n_tokens \
        else np.zeros(n_tokens, dtype=bool)
    turns = None
    if isinstance(turn, list) and len(turn) == n_tokens and all(isinstance(t, int) for t in turn):
        turns = np.array(turn, dtype=np.int64)
    count = raw.get("turns")
    if not isinstance(count, int) or isinstance(count, bool):
        count = len(np.unique(turns)) if turns is not None and turns.size else _assistant_turns(raw)
    return Episode(tool_mask=flags, turn=turns, turns=count, truncated=raw.get("truncated") is True,
                   reward_source=raw.get("reward_source") if isinstance(raw.get("reward_source"), str) else None,
                   calls=tool_calls_of(raw), raw=raw)


def _messages(episode: Any) -> list[dict]:
    messages = episode.get("messages") if isinstance(episode, dict) else None
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _assistant_turns(episode: Any) -> int:
    return sum(1 for m in _messages(episode) if m.get("role") == "assistant")


# ================================================================ in words


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def turns_of(episode: Any) -> int:
    """An `episode` mapping's model turns: its `turns`, else its assistant messages."""
    turns = episode.get("turns") if isinstance(episode, dict) else None
    return turns if isinstance(turns, int) and not isinstance(turns, bool) else _assistant_turns(episode)


def episode_summary(episode: Any) -> str:
    """One line for a samples cell: turns, each tool's calls, failed calls, truncation.

    >>> episode_summary({"turns": 1, "tool_calls": [], "truncated": True})
    '1 turn · no tool calls · truncated'
    """
    if not isinstance(episode, dict):
        return ""
    calls = tool_calls_of(episode)
    parts = [_plural(turns_of(episode), "turn")]
    counts = Counter(c.name or "(malformed call)" for c in calls)
    parts += [f"{name} ×{n}" for name, n in counts.items()] or ["no tool calls"]
    errors = sum(c.error for c in calls)
    if errors:
        parts.append(_plural(errors, "error"))
    if episode.get("truncated") is True:
        parts.append("truncated")
    return " · ".join(parts)


def conversation(episode: Any) -> list[tuple[str, str, bool]]:
    """The episode after the prompt as (kind, text, failed) lines: "turn" (a model turn
    begins: `turn k`), "model" (its text), "tool" (a tool's answer: the call, then what
    it returned). A tool message is paired with the next recorded call; an episode with
    calls but no messages lists the calls alone.

    >>> conversation({"messages": [{"role": "assistant", "content": "<tool_call>…"},
    ...     {"role": "tool", "name": "calculate", "content": "7"}, {"role": "assistant", "content": " 7"}],
    ...     "tool_calls": [{"turn": 0, "name": "calculate", "arguments": {"expression": "3+4"}, "result": "7"}]})
    [('turn', 'turn 1', False), ('model', '<tool_call>…', False), ('tool', 'calculate(expression="3+4") → 7', False), ('turn', 'turn 2', False), ('model', ' 7', False)]
    """
    calls = tool_calls_of(episode)
    messages = _messages(episode)
    if not messages:
        return [("tool", f"{c.call_text()} → {c.result}", c.error) for c in calls]
    out: list[tuple[str, str, bool]] = []
    turn, pending = 0, list(calls)
    for message in messages:
        role, content = message.get("role"), str(message.get("content") or "")
        if role == "tool":
            call = pending.pop(0) if pending else None
            what = call.call_text() if call is not None else f"{message.get('name') or 'tool'}()"
            out.append(("tool", f"{what} → {content}", call is not None and call.error))
        else:
            turn += role == "assistant"
            out += [("turn", f"turn {turn}", False)] if role == "assistant" else []
            out.append(("model" if role == "assistant" else str(role or "message"), content, False))
    return out


def conversation_text(episode: Any) -> str:
    """The conversation as plain text (a samples cell's tooltip)."""
    lines = []
    for kind, text, failed in conversation(episode):
        if kind == "turn":
            lines.append(f"── {text} ──")
        elif kind == "tool":
            lines.append(f"  {'✗ error: ' if failed else '↳ '}{text}")
        else:
            lines.append(text)
    return "\n".join([episode_summary(episode)] + lines)


def conversation_html(episode: Any) -> str:
    """The conversation for the samples detail pane: each turn's text, each tool call
    with its result on grey (a failed one marked in red)."""
    pre = "white-space:pre-wrap; padding:4px; font-family:monospace; margin:2px 0"
    out = [f"<p><b>Episode</b> · {html.escape(episode_summary(episode))}</p>"]
    for kind, text, failed in conversation(episode):
        if kind == "turn":
            out.append(f"<p style='margin:6px 0 0 0; color:#37474f'><b>{html.escape(text)}</b> · model</p>")
        elif kind == "tool":
            mark = "<b style='color:#b00020'>error</b> " if failed else ""
            out.append(f"<pre style='{pre}; background:{TOOL_HEX}; color:#222'>{mark}↳ {html.escape(text)}</pre>")
        else:
            out.append(f"<pre style='{pre}; background:#f6f8fa'>{html.escape(text)}</pre>")
    return "".join(out)


def episode_line_html(episode: Any, reward: float | None, max_calls: int = 4) -> str:
    """A Group page row's episode: turns, each tool call with its result (failed ones in
    red, the first `max_calls`), the final reward and where it came from."""
    calls = tool_calls_of(episode)
    shown = []
    for c in calls[:max_calls]:
        text = html.escape(f"{c.call_text()} → {_short(c.result)}")
        shown.append(f"<span style='color:#b00020'>✗ {text}</span>" if c.error else text)
    if len(calls) > max_calls:
        shown.append(f"… {len(calls) - max_calls} more")
    parts = [f"<b>episode</b> {_plural(turns_of(episode), 'turn')}",
             (f"{_plural(len(calls), 'tool call')}: " + "; ".join(shown)) if calls else "no tool calls"]
    source = episode.get("reward_source") if isinstance(episode, dict) else None
    reward_text = "null" if reward is None else f"{reward:.4g}"
    source = f" ({html.escape(source)})" if isinstance(source, str) else ""
    parts.append(f"final reward <b>{reward_text}</b>{source}")
    if isinstance(episode, dict) and episode.get("truncated") is True:
        parts.append("<span style='color:#b00020'>truncated</span>")
    return " · ".join(parts)


def _short(text: str, limit: int = 40) -> str:
    """A result on one line, cut at `limit` characters.

    >>> _short("a\\nb"), _short("x" * 50, 5)
    ('a⏎b', 'xxxx…')
    """
    text = text.replace("\n", "⏎")
    return text if len(text) <= limit else text[:limit - 1] + "…"
