"""`rl-workbench`: the desktop window (the workbench window issue builds it).

Until then this entry point says so, and points at the headless engine.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    preset = argv[0] if argv else "presets/grpo-sort.yaml"
    print(
        "The RL Workbench window is not built yet.\n"
        f"Train headless meanwhile:  rl-engine run {preset}\n"
        "and read the run directory it writes (see docs/run-directory.md).",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
