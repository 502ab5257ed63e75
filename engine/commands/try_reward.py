r"""`rl-engine try-reward PRESET --prompt TEXT --completion TEXT [--field NAME=VALUE ...]`:
one completion scored by a preset's rewards, each component and the weighted total, and
under the total the steps each step reward found (engine/rewards/steps.py): a line a
step, its characters, its score and its text (quoted, line breaks as \n).
Its own module, as fork, export and score-rewards are: cli.py keeps the commands that train."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.run.failures import failure_location, failure_message
from engine.foundation.errors import PresetError
from engine.preset.schema import load_preset

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
STEP_TEXT_WIDTH = 40  # characters of a step's text shown; a longer one keeps its start and its end


def parse_fields(items: list[str]) -> dict[str, str]:
    """`--field answer=" 1 2 3"` -> {"answer": " 1 2 3"}; the value is kept as written
    (spaces included). PresetError for an item that is not NAME=VALUE."""
    fields, problems = {}, []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            problems.append(f"--field {item!r}: expected NAME=VALUE, e.g. --field answer=' 1 2 3'")
        else:
            fields[key.strip()] = value
    if problems:
        raise PresetError(problems, "--field")
    return fields


def format_reward_table(components, parts: dict[str, list[float]], total: float) -> str:
    """The table try-reward prints: one line per component, then the weighted total.

    component      weight    value  weighted  source
    exact_match         1   1.0000    1.0000
    sort_position     0.5   1.0000    0.5000
    brevity           0.1  -0.5000   -0.0500  my_rewards.py:brevity
    total                             1.4500
    """
    rows = [("component", "weight", "value", "weighted", "source")]
    for label, weight, reward in components:
        value = parts[label][0]
        source = getattr(reward, "reward_source", "") or ""
        rows.append((label, f"{weight:g}", f"{value:.4f}", f"{weight * value:.4f}", source))
    rows.append(("total", "", "", f"{total:.4f}", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:4], widths[1:])]
        lines.append(("  ".join(cells) + ("  " + row[4] if row[4] else "")).rstrip())
    return "\n".join(lines)


def visible_text(text: str, width: int = STEP_TEXT_WIDTH) -> str:
    r"""A step's text on one line: quoted (spaces at its ends show), line breaks and tabs
    written as escapes, and a text longer than `width` characters shortened to its start
    and end around `...`.

    >>> print(visible_text(" 1"), visible_text("3+4=7\n"), visible_text("a\tb"))
    " 1" "3+4=7\n" "a\tb"
    >>> print(visible_text("The sum is 7, so x equals 12\n", 12))
    "The su" ... "ls 12\n"
    """
    if len(text) <= width:
        return json.dumps(text, ensure_ascii=False)
    head, tail = text[: width // 2], text[len(text) - (width - width // 2):]
    return f"{json.dumps(head, ensure_ascii=False)} ... {json.dumps(tail, ensure_ascii=False)}"


def format_step_lines(label: str, reward, text: str, steps: list[tuple[int, float]]) -> list[str]:
    r"""The lines try-reward prints under the total for one step component: a header, then
    one line a step (its characters [start, end), score and text); text after the last
    step, in no step, on a line of its own.

    e.g. ("sort_steps", reward, " 1 3 2\n", [(2, 1.0), (4, 0.0), (6, 0.0)]) ->
    steps of sort_steps (3; its value is their mean):
      step  chars   score  text
         1    0-2  1.0000  " 1"
         2    2-4  0.0000  " 3"
         3    4-6  0.0000  " 2"
              6-7          "\n" (after the last step)
    """
    delimiter = getattr(reward, "step_delimiter", None)
    split = f"split at {json.dumps(delimiter, ensure_ascii=False)}; " if delimiter else ""
    if not steps:
        return [f"steps of {label}: none ({split}its value is 0)"]
    rows, start = [("step", "chars", "score", "text")], 0
    for k, (end, score) in enumerate(steps, 1):
        rows.append((str(k), f"{start}-{end}", f"{score:.4f}", visible_text(text[start:end])))
        start = end
    if start < len(text):
        rows.append(("", f"{start}-{len(text)}", "", visible_text(text[start:]) + " (after the last step)"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"steps of {label} ({len(steps)}; {split}its value is their mean):"]
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(r[:3], widths)) + "  " + r[3] for r in rows]
    return [line.rstrip() for line in lines]


def cmd_try_reward(args) -> int:
    """Score one completion with the preset's rewards and print each component and the
    weighted total, then each step reward's steps. Exit 0; 2 for a bad preset, --field or
    a missing field; 1 when a reward fails to load or to score (the message names it, and
    the file and line of a fault in a custom function)."""
    from engine.rewards import MissingFieldError, build_reward_components, score_rewards_with_steps

    try:
        preset = load_preset(args.preset, args.set)
        fields = parse_fields(args.field)
    except PresetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    base_dir = Path(args.preset).resolve().parent
    try:
        components = build_reward_components(preset.rewards, device=preset.model.device, base_dir=base_dir)
        totals, parts, steps = score_rewards_with_steps(components, [args.prompt], [args.completion],
                                                        {k: [v] for k, v in fields.items()})
    except MissingFieldError as exc:
        print(f"error: {failure_message(exc)}\n  give it with --field NAME=VALUE, e.g. --field answer=' 1 2 3'",
              file=sys.stderr)
        return EXIT_INVALID
    except Exception as exc:
        message = failure_message(exc)
        where = failure_location(exc)  # a fault's line, or the def of a function that returned bad values
        if where and where[0] not in message:
            message += f" ({where[0]}:{where[1]})"
        print(f"error: {message}", file=sys.stderr)
        return EXIT_FAILED
    print(format_reward_table(components, parts, totals[0]))
    for label, _, reward in components:
        if label in steps:
            print("\n".join(["", *format_step_lines(label, reward, args.completion, steps[label][0])]))
    return EXIT_OK


def add_try_reward_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("try-reward", help="score one completion with the preset's rewards; prints each component")
    p.add_argument("preset")
    p.add_argument("--prompt", required=True, help="the prompt, as the policy sees it")
    p.add_argument("--completion", required=True,
                   help="the completion to score (text starting with '-': --completion=-5)")
    p.add_argument("--field", action="append", default=[], metavar="NAME=VALUE",
                   help="a data field the rewards read, e.g. --field answer=' 1 2 3' (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=cmd_try_reward)
    return p
