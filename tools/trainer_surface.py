"""How much of the base `Trainer` each algorithm's trainer reaches, and its size.

    .venv/bin/python tools/trainer_surface.py              # this checkout
    .venv/bin/python tools/trainer_surface.py --rev ae966dd  # a commit's (read with git show)
    .venv/bin/python tools/trainer_surface.py -v            # and the members each one uses

For each engine/algorithms/<name>/trainer.py: its lines, the `backward(` calls in it,
and the members of `Trainer` (methods, properties, class constants and attributes the
base sets on self: engine/algorithms/base.py's Trainer, step.py's TrainingStep and
declaration.py's Declares; a file missing at a commit counts for nothing) that it reads or calls as `self.<name>` or `super().<name>`. A member the
trainer defines itself (an override) counts when it also calls the base's.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ("grpo", "ppo", "dpo", "kto", "online_dpo")
BASE_FILES = ("engine/algorithms/base.py", "engine/algorithms/step.py", "engine/algorithms/declaration.py")


def source(path: str, rev: str | None) -> str:
    if rev is None:
        return (ROOT / path).read_text()
    return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def base_members(rev: str | None) -> set[str]:
    """What the base classes (Trainer, Declares) define: methods, class attributes and the
    attributes their methods set on self."""
    members: set[str] = set()
    for path in BASE_FILES:
        try:
            text = source(path, rev)
        except (subprocess.CalledProcessError, FileNotFoundError):
            continue  # not there at that commit
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.name in ("Trainer", "TrainingStep", "Declares"):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        members.add(item.name)
                    elif isinstance(item, ast.Assign):
                        members.update(t.id for t in item.targets if isinstance(t, ast.Name))
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        members.add(item.target.id)
                for sub in ast.walk(node):
                    if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store)
                            and isinstance(sub.value, ast.Name) and sub.value.id == "self"):
                        members.add(sub.attr)
    return {m for m in members if not (m.startswith("__") and m.endswith("__"))}


def used_members(text: str, members: set[str]) -> set[str]:
    """The base's members a trainer's module reads or calls on self (or through super())."""
    used = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr in members:
            value = node.value
            on_self = isinstance(value, ast.Name) and value.id == "self"
            on_super = isinstance(value, ast.Call) and getattr(value.func, "id", None) == "super"
            if on_self or on_super:
                used.add(node.attr)
    return used


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="a commit to read instead of the working tree")
    parser.add_argument("-v", action="store_true", help="list the members each trainer uses")
    args = parser.parse_args()
    members = base_members(args.rev)
    total = 0
    for name in ALGORITHMS:
        text = source(f"engine/algorithms/{name}/trainer.py", args.rev)
        used = used_members(text, members)
        lines = len(text.splitlines())
        total += lines
        print(f"{name:11s} {lines:4d} lines  {text.count('backward('):d} backward(  "
              f"{len(used):2d} of the base's {len(members)} members")
        if args.v:
            print("            " + ", ".join(sorted(used)))
    print(f"{'total':11s} {total:4d} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
