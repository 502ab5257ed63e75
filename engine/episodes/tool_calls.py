"""Tool calls read from the text of a model's turn, in the format its chat template taught it.

Three formats (``data.tool_call_format``; ``auto`` reads it off the chat template):

* ``hermes`` (Qwen 2.5 / 3, Hermes, the built-in tiny-tools model): each call is
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` anywhere in the turn;
* ``llama3_json`` (Llama 3.1 / 3.2): the whole turn, after an optional ``<|python_tag|>``,
  is one JSON object ``{"name": ..., "parameters": {...}}`` (or several joined by ``;``);
* ``pythonic`` (Llama 3.2 / 4's other format): the turn is a Python list of calls
  ``[name(a=1, b="x"), other()]`` with literal arguments, read with ``ast``.

A call the model meant to write but got wrong (broken JSON, no name, a non-literal
argument) is a :class:`ToolCall` with its ``problem``: the episode answers it with an
error, as TRL's tool loop answers a failing tool, so the model learns from it. A turn
with no call at all gives ``[]``: the episode ends there. Torch-free.

Example:
    >>> parse_tool_calls('<tool_call>{"name": "calculate", "arguments": {"expression": "3+4"}}</tool_call>', "hermes")
    [ToolCall(name='calculate', arguments={'expression': '3+4'}, problem=None)]
    >>> parse_tool_calls("The answer is 7.", "hermes")
    []
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

from engine.foundation.registry import Registry

__all__ = ["TOOL_CALL_FORMATS", "ToolCall", "parse_tool_calls", "detect_format", "call_format", "as_message_tool_calls"]

AUTO = "auto"

_HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_HERMES_OPEN = "<tool_call>"
_PYTHON_TAG = "<|python_tag|>"
# Llama 3 ends a turn with <|eot_id|> (answer) or <|eom_id|> (a call awaiting its result);
# text decoded with its special tokens may still hold them.
_LLAMA_ENDS = ("<|eot_id|>", "<|eom_id|>")
_JSON_CALL_START = re.compile(r'^\{\s*"name"\s*:')
_PYTHONIC_START = re.compile(r"^\[\s*[A-Za-z_][\w.]*\s*\(")
_NAME_IN_TEXT = re.compile(r'"name"\s*:\s*"([^"]+)"')
UNKNOWN = "unknown"  # the name of a malformed call whose name could not be read (TRL's word)


@dataclass
class ToolCall:
    """One call the model wrote: the tool's name and its keyword arguments. ``problem``
    is the parse error of a malformed call (its name is then what could be read, or
    "unknown", and its arguments ``{}``)."""

    name: str
    arguments: dict = field(default_factory=dict)
    problem: str | None = None


def _malformed(text: str, problem: str) -> ToolCall:
    """A call that could not be read, named as far as its text shows."""
    found = _NAME_IN_TEXT.search(text)
    return ToolCall(found.group(1) if found else UNKNOWN, {}, problem)


def _json_call(payload, keys: tuple[str, ...]) -> ToolCall:
    """A decoded JSON call ``{"name": ..., KEY: {...}}`` as a ToolCall, its arguments from
    the first of ``keys`` present (an object, or a JSON string holding one; absent or
    null: no arguments, as TRL takes a call with none)."""
    if not isinstance(payload, dict):
        return ToolCall(UNKNOWN, {}, f"a tool call must be a JSON object, got {type(payload).__name__}")
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall(UNKNOWN, {}, 'a tool call needs a "name" (text)')
    key = next((k for k in keys if k in payload), None)
    arguments = payload.get(key) if key else None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return ToolCall(name, {}, f'the "{key}" of {name} are not valid JSON: {exc.msg}')
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ToolCall(name, {}, f'the "{key}" of {name} must be a JSON object, got {type(arguments).__name__}')
    return ToolCall(name, arguments)


def _hermes(text: str) -> list[ToolCall]:
    """Every ``<tool_call>...</tool_call>`` block; an opening tag left unclosed after
    them is a malformed call (the model stopped inside it)."""
    calls = []
    for body in _HERMES_CALL.findall(text):
        try:
            payload = json.loads(body.strip())
        except json.JSONDecodeError as exc:
            calls.append(_malformed(body, f"the tool call is not valid JSON: {exc.msg} (at character {exc.pos})"))
            continue
        calls.append(_json_call(payload, ("arguments", "parameters")))
    rest = _HERMES_CALL.sub("", text)
    if _HERMES_OPEN in rest:
        calls.append(_malformed(rest[rest.index(_HERMES_OPEN):], "<tool_call> without its closing </tool_call>"))
    return calls


def _strip_llama(text: str) -> tuple[str, bool]:
    """The turn without Llama's end markers and ``<|python_tag|>``; whether the tag was there."""
    text = text.strip()
    for end in _LLAMA_ENDS:
        text = text.removesuffix(end).rstrip()
    tagged = text.startswith(_PYTHON_TAG)
    return text.removeprefix(_PYTHON_TAG).strip(), tagged


def _llama3_json(text: str) -> list[ToolCall]:
    """One JSON call, or several joined by ``;``, making up the whole turn. A turn is a
    call when it starts with ``<|python_tag|>`` or with ``{"name":``; otherwise it is an
    answer (``[]``)."""
    text, tagged = _strip_llama(text)
    if not (tagged or _JSON_CALL_START.match(text)):
        return []
    decoder, calls, at = json.JSONDecoder(), [], 0
    while at < len(text):
        try:
            payload, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            return calls + [_malformed(text[at:], f"the tool call is not valid JSON: {exc.msg} (at character {exc.pos})")]
        calls.append(_json_call(payload, ("parameters", "arguments")))
        rest = text[end:].lstrip()
        if rest and not rest.startswith(";"):
            return calls + [_malformed(rest, f"text after a tool call: {rest[:40]!r} (separate calls with ';')")]
        at = len(text) - len(rest.removeprefix(";").lstrip())
    return calls


def _dotted(node: ast.expr) -> str | None:
    """``f`` or ``tools.f`` as text; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _pythonic_call(node: ast.expr) -> ToolCall:
    """One element of the list, ``name(key=literal, ...)``, as a ToolCall."""
    name = _dotted(node.func) if isinstance(node, ast.Call) else None
    if name is None:
        return ToolCall(UNKNOWN, {}, f"each element must be a call name(key=value), got {ast.unparse(node)[:40]!r}")
    if node.args:
        return ToolCall(name, {}, f"{name} was given positional arguments; write them as key=value")
    arguments = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            return ToolCall(name, {}, f"{name} was given **{ast.unparse(keyword.value)}; write each argument as key=value")
        try:
            arguments[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, SyntaxError, TypeError):
            return ToolCall(name, {}, f"the argument {keyword.arg} of {name} is not a literal value: "
                                      f"{ast.unparse(keyword.value)[:40]}")
    return ToolCall(name, arguments)


def _pythonic(text: str) -> list[ToolCall]:
    """``[name(a=1), other()]`` making up the whole turn (after an optional
    ``<|python_tag|>``); a turn that does not start like one is an answer (``[]``)."""
    text, _tagged = _strip_llama(text)
    if not _PYTHONIC_START.match(text):
        return []
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        name = re.match(r"^\[\s*([\w.]+)", text).group(1)
        return [ToolCall(name, {}, f"the tool calls are not a valid Python list: {exc.msg}")]
    if not isinstance(tree.body, ast.List):
        return [ToolCall(UNKNOWN, {}, "the tool calls must be one Python list [name(key=value), ...]")]
    return [_pythonic_call(element) for element in tree.body.elts]


# The tool-call formats (name -> parser, as a mapping) that `data.tool_call_format` may name.
TOOL_CALL_FORMATS: Registry = Registry("tool-call format", field="data.tool_call_format")
TOOL_CALL_FORMATS.register("hermes", _hermes, "Hermes: <tool_call>{JSON}</tool_call> blocks")
TOOL_CALL_FORMATS.register("llama3_json", _llama3_json, "Llama 3: one JSON object, after <|python_tag|> or alone")
TOOL_CALL_FORMATS.register("pythonic", _pythonic, "a Python list of calls: [name(key=value), ...]")


def parse_tool_calls(text: str, fmt: str) -> list[ToolCall]:
    """The tool calls in one turn's text (decoded without its end token), in the order
    written; ``[]`` when the turn calls nothing.

    Example:
        >>> parse_tool_calls('<|python_tag|>{"name": "calculate", "parameters": {"expression": "2*3"}}', "llama3_json")
        [ToolCall(name='calculate', arguments={'expression': '2*3'}, problem=None)]
        >>> parse_tool_calls('[calculate(expression="2*3"), lookup(word="cat", limit=2)]', "pythonic")[1]
        ToolCall(name='lookup', arguments={'word': 'cat', 'limit': 2}, problem=None)
        >>> parse_tool_calls('<tool_call>{"name": "calculate", "arguments": {</tool_call>', "hermes")[0].problem
        'the tool call is not valid JSON: Expecting property name enclosed in double quotes (at character 36)'
    """
    if fmt not in TOOL_CALL_FORMATS:
        raise ValueError(f"data.tool_call_format: {fmt!r} is not a tool-call format; the formats are: "
                         + ", ".join(TOOL_CALL_FORMATS))
    return TOOL_CALL_FORMATS[fmt](text)


def detect_format(chat_template: str | None) -> str | None:
    """The tool-call format a chat template teaches, read off its text; None when it
    shows none of them.

    Example:
        >>> detect_format("... <tool_call>\\n{{ tool_call | tojson }}\\n</tool_call> ..."), detect_format("{{ x }}")
        ('hermes', None)
    """
    if not chat_template:
        return None
    if _HERMES_OPEN in chat_template:
        return "hermes"
    if _PYTHON_TAG in chat_template or "ipython" in chat_template:
        return "llama3_json"
    return None


def call_format(setting: str, chat_template: str | None) -> str:
    """The format ``data.tool_call_format`` asks for: ``auto`` detects it from the chat
    template (a ValueError saying which to set when it cannot), anything else must be
    one of :data:`TOOL_CALL_FORMATS`.

    Example:
        >>> call_format("auto", "{%- if tools %}<tool_call>{% endif %}"), call_format("pythonic", None)
        ('hermes', 'pythonic')
    """
    allowed = ", ".join(TOOL_CALL_FORMATS)
    if setting == AUTO:
        found = detect_format(chat_template)
        if found is None:
            raise ValueError("data.tool_call_format: `auto` cannot tell the tool-call format from the model's chat "
                             f"template (it has no <tool_call> or <|python_tag|>); set it to one of: {allowed}")
        return found
    if setting not in TOOL_CALL_FORMATS:
        raise ValueError(f"data.tool_call_format: {setting!r} is not a tool-call format; use auto or one of: {allowed}")
    return setting


def as_message_tool_calls(calls: list[ToolCall]) -> list[dict]:
    """The assistant message's ``tool_calls`` as transformers' chat templates take them;
    malformed calls (with a ``problem``) are left out, as they called nothing.

    Example:
        >>> as_message_tool_calls([ToolCall("calculate", {"expression": "3+4"}), ToolCall("unknown", {}, "bad JSON")])
        [{'type': 'function', 'function': {'name': 'calculate', 'arguments': {'expression': '3+4'}}}]
    """
    return [{"type": "function", "function": {"name": call.name, "arguments": dict(call.arguments)}}
            for call in calls if call.problem is None]
