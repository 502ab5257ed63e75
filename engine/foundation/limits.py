"""Guards that keep a preset file, a `--set` value or an option from hurting the loader.

A preset is a few KB of plain YAML data. These guards refuse what no real preset holds,
before anything walks it: a file that is not UTF-8 text or is huge, nesting deeper than
any section needs, YAML aliases that expand into millions of nodes ("billion laughs"),
self-referencing aliases, non-finite numbers in free-form options, and numbers too large
to be meant. Every refusal is one line naming where the problem is (a line of the file,
or a field path) and what is allowed. Imports neither torch nor Qt.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any, Callable

import yaml

# A bundled preset is ~2 KB; 1 MiB is hundreds of times any real one (data go in a
# prompt file, not the preset) and small enough to parse in well under a second.
MAX_FILE_BYTES = 1 << 20
# The deepest bundled path is 4 levels (rewards.0.options.x); custom reward options may
# nest a little more. 32 levels is far beyond that and far below Python's recursion limit.
MAX_DEPTH = 32
# Nodes counted as if every alias were expanded: a preset has ~100. 100,000 leaves room
# for a long word list in a custom reward's options and stops an alias bomb at once.
MAX_NODES = 100_000
# A real preset uses an alias or two (a shared options block); a bomb needs many.
MAX_ALIASES = 100

_PLAIN = "text, a number, true/false, null, a list or a mapping"


class LimitError(ValueError):
    """A guard's refusal; `str()` is one line, prefixed by the place when it is known."""


def one_line(text: object, limit: int = 300) -> str:
    """`text` on one line (whitespace runs become one space), shortened to `limit`.

    >>> one_line("a\\n   b  c")
    'a b c'
    """
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def short_repr(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters: messages stay one readable line even for
    a huge list. Never walks more of `value` than it shows (a deep or aliased structure
    is summarised by its type and size).

    >>> short_repr(1e30), short_repr("x" * 100)[-5:], short_repr([[1]] * 10**6)
    ('1e+30', 'xxxx…', 'a list of 1000000 items')
    """
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        if len(value) > 20 or any(isinstance(v, (list, tuple, dict, set)) for v in value):
            noun = "mapping" if isinstance(value, dict) else type(value).__name__
            return f"a {noun} of {len(value)} item{'s' if len(value) != 1 else ''}"
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # a huge int (> 4300 digits) or a deep structure
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def structure_problem(data: Any, root: str = "") -> str | None:
    """One line describing why `data` cannot be a preset's (or a value's) structure:
    nested deeper than MAX_DEPTH, more than MAX_NODES nodes with aliases expanded, or a
    container that contains itself. None when it is fine. Iterative: never recurses.

    >>> structure_problem({"a": [1, 2, {"b": 3}]}) is None
    True
    >>> loop = []; loop.append(loop)
    >>> structure_problem({"x": loop}, "data.task_options")
    'data.task_options.x.0: refers to itself (a recursive YAML alias); a preset holds plain data'
    """
    # (value, path parts, ids of the containers above it)
    stack: list[tuple[Any, tuple, frozenset]] = [(data, (root,) if root else (), frozenset())]
    seen = 0
    while stack:
        value, parts, above = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            return (f"{path_text(parts)}: holds more than {MAX_NODES:,} values (counting what YAML "
                    "aliases repeat); a preset is a few hundred values: put data in a file")
        if not isinstance(value, (dict, list, tuple, set, frozenset)):
            continue
        if id(value) in above:
            return f"{path_text(parts)}: refers to itself (a recursive YAML alias); a preset holds plain data"
        if len(parts) - (1 if root else 0) >= MAX_DEPTH:
            return (f"{path_text(parts[:8])}…: nested more than {MAX_DEPTH} levels deep; "
                    f"a preset's values are a few levels deep")
        inner = above | {id(value)}
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            stack.append((item, parts + (short_repr(key, 40) if not isinstance(key, (str, int)) else key,), inner))
            if len(stack) > MAX_NODES:
                return (f"{path_text(parts)}: holds more than {MAX_NODES:,} values; "
                        "a preset is a few hundred values: put data in a file")
    return None


def path_text(parts: tuple) -> str:
    """A field path as messages show it; a key is cut to 40 characters (keys come from the
    file: a 10,000-character typo must not flood the message).

    >>> path_text(("rewards", 0, "x" * 50)), path_text(())
    ('rewards.0.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…', '(top level)')
    """
    shown = (p if isinstance(p, str) and p.isprintable() else str(p) if isinstance(p, int) else short_repr(p, 40)
             for p in parts)  # a key holding a newline is shown quoted: messages stay one line
    return ".".join(p if len(p) <= 40 else p[:39] + "…" for p in shown) or "(top level)"


def range_text(metadata) -> str:
    """The bounds in a field's metadata (pydantic's Ge/Gt/Le/Lt) as `0 < value <= 100`;
    "" when there are none."""
    def number(value) -> str:  # 10000000, not 1e+07: the form the user can type back
        return str(int(value)) if float(value).is_integer() and abs(value) < 1e16 else f"{value:g}"

    low = high = ""
    for item in metadata:
        for key, sign in (("ge", "<="), ("gt", "<")):
            if getattr(item, key, None) is not None:
                low = f"{number(getattr(item, key))} {sign} "
        for key, sign in (("le", "<="), ("lt", "<")):
            if getattr(item, key, None) is not None:
                high = f" {sign} {number(getattr(item, key))}"
    return f"{low}value{high}" if low or high else ""


def number_problem(value: Any, low: float | None = None, high: float | None = None) -> str | None:
    """Why a number is refused (not finite, or outside [low, high]); None when fine.
    Non-numbers are left to the type checks.

    >>> number_problem(float("nan")), number_problem(5, 1, 3), number_problem(2, 1, 3)
    ('must be a finite number, got nan', 'must be between 1 and 3, got 5', None)
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    if not math.isfinite(value):
        return f"must be a finite number, got {short_repr(value)}"
    if (low is not None and value < low) or (high is not None and value > high):
        return f"must be between {low:g} and {high:g}, got {short_repr(value)}"
    return None


def plain_data_problem(value: Any, path: str) -> str | None:
    """Why a free-form option value (a custom reward's keyword argument) is refused:
    a non-finite number, or something that is not plain data (a date, bytes, a set: YAML
    can make them, but they cannot be saved with the run). None when fine.

    >>> plain_data_problem({"a": [1, 2.5, "x", None]}, "options") is None
    True
    >>> plain_data_problem({"a": [1, float("inf")]}, "options")
    'options.a.1: must be a finite number, got inf'
    """
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{where}.{i}") for i, v in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{where}: must be a finite number, got {item!r}"
        elif not (item is None or isinstance(item, (str, int, float, bool))):
            return f"{where}: {type(item).__name__} {short_repr(item)} is not plain data; use {_PLAIN}"
    return None


# ------------------------------------------------------------------- reading YAML


class _GuardedLoader(yaml.SafeLoader):
    """SafeLoader (no Python tags) that stops at MAX_DEPTH nesting and MAX_ALIASES
    aliases while composing, before any recursion can run deep."""

    _depth = 0
    _aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise LimitError(f"{_where(self.peek_event().start_mark)}more than {MAX_ALIASES} "
                                 "YAML aliases (*name); a preset needs a few at most")
        elif self._depth >= MAX_DEPTH:
            raise LimitError(f"{_where(self.peek_event().start_mark)}nested more than {MAX_DEPTH} "
                             "levels deep; a preset's values are a few levels deep")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _where(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""


def decode_preset_bytes(raw: bytes) -> str:
    """The text of a preset file; LimitError (one line) when it is too big or not UTF-8.

    >>> decode_preset_bytes(b"\\xef\\xbb\\xbfname: x")  # a byte-order mark is dropped
    'name: x'
    >>> try: decode_preset_bytes(b"name: \\xff")
    ... except LimitError as exc: print(exc)
    not UTF-8 text (byte 0xff at offset 6); a preset is a YAML text file saved as UTF-8
    """
    if len(raw) > MAX_FILE_BYTES:
        raise LimitError(f"larger than {MAX_FILE_BYTES // 1024} KiB; a preset is a few KB of YAML "
                         "(put data in a prompt file)")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise LimitError("UTF-16 text; save the preset as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LimitError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                         "a preset is a YAML text file saved as UTF-8") from None


# Flow brackets ([ {) open past this count are refused before PyYAML reads them: its
# scanner looks ahead through every open flow level, keeping a possible key per level,
# and checks them all at each token, so a file of thousands of `[` cost it about a second
# (quadratic in the levels it reads ahead) before _GuardedLoader's depth check could run.
# Well above MAX_DEPTH, so a bracket inside text (a block scalar, a plain word) never
# reaches it in a real preset.
MAX_FLOW_BRACKETS = 4 * MAX_DEPTH


def _flow_nesting_problem(text: str) -> str | None:
    """Where `text` opens more than MAX_FLOW_BRACKETS flow collections at once, counting
    `[`/`{` against `]`/`}` outside quotes, comments and block scalars (a cheap upper
    bound of YAML's own nesting); None when it does not.

    >>> _flow_nesting_problem("a: " + "[" * 200 + "]" * 200)
    "line 1, column 35: nested more than 32 levels deep; a preset's values are a few levels deep"
    >>> _flow_nesting_problem("a: '" + "[" * 200 + "'") is None  # in quotes: text
    True
    >>> _flow_nesting_problem("a: |\\n  " + "[" * 200 + "\\nb: 1") is None  # a block scalar: text
    True
    """
    if text.count("[") + text.count("{") <= MAX_FLOW_BRACKETS:
        return None  # the common case, without a pass in Python
    depth, quote, escaped, block_indent, where = 0, "", False, -1, ""
    for number, line in enumerate(text.split("\n"), 1):
        indent = len(line) - len(line.lstrip(" "))
        if block_indent >= 0 and (not line.strip() or indent > block_indent):
            continue  # inside a block scalar (| or >): text
        block_indent, previous, content = -1, " ", []
        for column, char in enumerate(line, 1):
            if quote:
                if quote == '"' and char == "\\" and not escaped:
                    escaped = True
                    continue
                if char == quote and not escaped:
                    quote = ""
                escaped = False
            elif char in "'\"" and previous in " \t[{,:":
                quote = char
            elif char == "#" and previous in " \t":
                break  # a comment, to the end of the line
            elif char in "[{":
                depth += 1
                if depth == MAX_DEPTH:  # about where YAML's own count (with the block levels) passes it
                    where = f"line {number}, column {column}: "
                if depth > MAX_FLOW_BRACKETS:
                    return f"{where}nested more than {MAX_DEPTH} levels deep; a preset's values are a few levels deep"
            elif char in "]}":
                depth = max(0, depth - 1)
            previous = char
            content.append(char)
        if not quote and _BLOCK_SCALAR.search("".join(content)):
            block_indent = indent
    return None


_BLOCK_SCALAR = re.compile(r"(^|[\s:-])[|>][-+0-9]*\s*$")  # a line that starts a block scalar


def parse_yaml(text: str) -> Any:
    """Parse YAML text as plain data; LimitError (one line, with the line and column
    where YAML knows them) for anything that is not, whatever the parser throws.

    >>> parse_yaml("a: [1, 2]")
    {'a': [1, 2]}
    >>> try: parse_yaml("a: !!python/object/apply:os.system [echo hi]")
    ... except LimitError as exc: print(exc)
    line 1, column 4: not plain YAML data: the tag !!python/object/apply:os.system is not allowed (a preset holds text, numbers, true/false, null, lists and mappings)
    """
    problem = _flow_nesting_problem(text)
    if problem:
        raise LimitError(problem)
    try:
        data = yaml.load(text, Loader=_GuardedLoader)  # noqa: S506 (a SafeLoader subclass)
    except LimitError:
        raise
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        problem = str(exc.problem or exc)
        if "could not determine a constructor for the tag" in problem:
            tag = problem.rsplit("'", 2)[-2].replace("tag:yaml.org,2002:", "!!")
            problem = (f"the tag {tag} is not allowed (a preset holds text, numbers, true/false, "
                       "null, lists and mappings)")
        raise LimitError(f"{_where(mark)}not plain YAML data: {one_line(problem)}") from None
    except yaml.MarkedYAMLError as exc:
        raise LimitError(f"{_where(exc.problem_mark)}not valid YAML: {one_line(exc.problem or exc)}") from None
    except yaml.YAMLError as exc:  # e.g. a control character the reader refuses
        raise LimitError(f"not valid YAML: {one_line(exc)}") from None
    except RecursionError:
        raise LimitError("nested too deeply to read; a preset's values are a few levels deep") from None
    except Exception as exc:  # noqa: BLE001 - the constructors raise what they like
        # e.g. `2001-13-45` (a date YAML resolves, then cannot build: ValueError), an
        # integer of more than 4300 digits, `!!bool maybe` (KeyError).
        raise LimitError(f"not valid YAML: a value YAML cannot build: {one_line(exc, 120)}") from None
    problem = structure_problem(data)
    if problem:
        raise LimitError(problem)
    return data


# ------------------------------------------------------------- bounds of fields
# Upper bounds no real experiment reaches, so that a typo (an extra zero run, 1e20 for
# 1e-2) is refused at load instead of hanging the run or overflowing a tensor. Each is
# far past what any published RL recipe uses; the form shows them as the allowed range.

# Steps, prompts, checkpoints-every-N: 10 million optimizer steps is weeks at 10 steps/s;
# 10 million generated prompts is 2,000x the bundled presets.
MAX_COUNT = 10_000_000
# Completions (or preference pairs) per step: 1 million is ~1000x the largest published
# RL batch; anything bigger cannot fit in memory even split into micro-batches.
MAX_BATCH = 1_000_000
# Tokens per completion, and top_k: the longest context window of any model is ~1-10
# million tokens and the largest vocabulary is ~260k.
MAX_TOKENS = 1_000_000
# Repetitions of one batch (PPO epochs, GRPO iterations), samples written per step,
# checkpoints kept: each costs time or disk linearly; 10,000 is far past any use.
MAX_REPEATS = 10_000
# Seeds: the range every generator the engine seeds accepts (random, torch, CUDA, numpy).
MAX_SEED = 2**32 - 1
# Loss weights and coefficients (beta, vf_coef, kl_coef, rpo_alpha, epsilon_high...):
# useful values are 1e-3..10; 1,000 already makes one term drown all others.
MAX_COEF = 1_000.0
# Sampling temperature: at 100 the softmax of any real logits is already near uniform.
MAX_TEMPERATURE = 100.0
# Learning rate of AdamW: updates are ~lr per step whatever the gradient, so lr > 1
# destroys any weights; 10 leaves room for an experiment on purpose.
MAX_LEARNING_RATE = 10.0
# Values in reward units (a reward component's weight, a missing-EOS penalty, the value
# clip): rewards are O(1); a million times that is not a weight anyone means.
MAX_REWARD_SCALE = 1e6
# Gradient clipping norm: 1e12 is the largest "effectively never clip" anyone writes.
MAX_GRAD_NORM = 1e12
# LoRA alpha: the update is scaled by alpha / r (r <= 4096); 100,000 covers any ratio used.
MAX_LORA_ALPHA = 100_000.0
# Options of registry rewards and built-in tasks that are numbers (a tolerance, a target
# length, a digit count): a billion is beyond anything they measure.
MAX_OPTION_MAGNITUDE = 1e9


def context_problem(lengths: list[int], max_completion_length: int, limit: int | None,
                    where: Callable[[int], str] | None = None, tools_tokens: int = 0) -> str | None:
    """Why prompts of `lengths` tokens plus max_completion_length do not fit a context of
    `limit` tokens, naming the longest prompt by `where(its index)`; None when they fit
    (or the context is not known). `tools_tokens`: how many of a prompt's tokens the tools'
    descriptions take (data.environment's schemas in the system turn); when they are most
    of it, the message names them rather than the row.

    >>> context_problem([12, 20, 7], 100, 128) is None
    True
    >>> print(context_problem([12, 300, 7], 100, 128, where=lambda i: f"row {i + 1}")[:70])
    data: the longest prompt (row 2) has 300 tokens, more than the model's
    >>> print(context_problem([883], 100, 512, tools_tokens=850).split("; ")[1][:70])
    the tools' descriptions (data.environment) take 850 of its 883 tokens.
    """
    if limit is None or not lengths:
        return None
    longest = max(lengths)
    need = longest + max_completion_length
    if need <= limit:
        return None
    index = lengths.index(longest)
    at = f" ({where(index)})" if where is not None else ""
    room = limit - longest
    # the tools' schemas are in every prompt: when they are most of it, no row is to blame
    tools = 2 * tools_tokens >= longest
    share = f"the tools' descriptions (data.environment) take {tools_tokens} of its {longest} tokens"
    if room < 1:  # no completion length helps: the prompt itself must change
        over = sum(1 for n in lengths if n >= limit)
        others = f"; {over} of {len(lengths)} prompts are that long" if over > 1 else ""
        head = (f"data: the longest prompt{at} has {longest} tokens, more than the model's whole context of "
                f"{limit} tokens before any completion")
        if tools:
            return (f"{head}; {share}. Offer fewer tools or shorter descriptions (their docstrings), or use a model "
                    "with a longer context.")
        return (f"{head}{others}. Shorten or drop that row (the preset has no prompt length limit), or use a model "
                "with a longer context.")
    fix = "offer fewer tools or shorter descriptions (their docstrings)" if tools else "shorten that prompt"
    return (f"algorithm.max_completion_length: the longest prompt{at} has {longest} tokens"
            f"{f' ({share})' if tools else ''}; with max_completion_length {max_completion_length} a sequence needs "
            f"{need} positions but the model's context is {limit}. Lower max_completion_length to at most {room}, "
            f"or {fix}.")
