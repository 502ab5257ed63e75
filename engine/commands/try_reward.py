"""`rl-engine try-reward PRESET --prompt TEXT --completion TEXT [--field NAME=VALUE ...]`:
one completion scored by a preset's rewards, each component and the weighted total.
Its own module, as fork, export and score-rewards are: cli.py keeps the commands that train."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.run.failures import failure_message, user_code_location
from engine.preset.errors import PresetError
from engine.preset.schema import load_preset

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


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


def cmd_try_reward(args) -> int:
    """Score one completion with the preset's rewards and print each component and the
    weighted total. Exit 0; 2 for a bad preset, --field or a missing field; 1 when a
    reward fails to load or to score (the message names it, and the file and line of a
    fault in a custom function)."""
    from engine.rewards import MissingFieldError, build_reward_components, combine_rewards

    try:
        preset = load_preset(args.preset, args.set)
        fields = parse_fields(args.field)
    except PresetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    base_dir = Path(args.preset).resolve().parent
    try:
        components = build_reward_components(preset.rewards, device=preset.model.device, base_dir=base_dir)
        totals, parts = combine_rewards(components, [args.prompt], [args.completion],
                                        {k: [v] for k, v in fields.items()})
    except MissingFieldError as exc:
        print(f"error: {failure_message(exc)}\n  give it with --field NAME=VALUE, e.g. --field answer=' 1 2 3'",
              file=sys.stderr)
        return EXIT_INVALID
    except Exception as exc:
        message = failure_message(exc)
        where = user_code_location(exc)
        if where and where[0] not in message:
            message += f" ({where[0]}:{where[1]})"
        print(f"error: {message}", file=sys.stderr)
        return EXIT_FAILED
    print(format_reward_table(components, parts, totals[0]))
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
