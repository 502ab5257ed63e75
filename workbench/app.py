"""`rl-workbench`: the desktop window.

    rl-workbench                  the window on its start page (the bundled experiments), with the
                                  bundled default preset (grpo-sort) in Set-up
    rl-workbench PRESET.yaml      ... with that preset (one of presets/: an untitled copy,
                                  so Save does not overwrite what ships; `make run` opens one)
    rl-workbench RUN_DIR          ... showing that run (past or still running)

The window never imports torch, transformers or peft (tests/test_boundaries.py): it
starts the engine as a separate process and reads the run directory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rl-workbench", description="RL Workbench: the desktop window.")
    parser.add_argument("target", nargs="?", help="a preset (.yaml) to open, or a run folder to show")
    parser.add_argument("--runs", help="runs folder (default: the last one used, else ./runs)")
    return parser


def classify_target(target: str) -> str:
    """"run" for a run folder, "preset" for a file; ValueError with the reason otherwise."""
    path = Path(target)
    if path.is_dir():
        if (path / "events.jsonl").exists() or (path / "preset.yaml").exists() or (path / "workbench").is_dir():
            return "run"
        raise ValueError(f"{target} is a folder but not a run folder (no events.jsonl or preset.yaml)")
    if path.is_file():
        return "preset"
    raise ValueError(f"{target} does not exist")


DEFAULT_PRESET = "grpo-sort.yaml"


def default_preset() -> Path | None:
    """The bundled preset a plain `rl-workbench` opens (runnable as it is, on the
    built-in model); None when the presets/ folder is not there."""
    from workbench.settings import bundled_presets

    return next((p for p in bundled_presets() if p.name == DEFAULT_PRESET), None)


def freeze_startup_heap() -> None:
    """Take what exists once the window is built (~95,000 objects: the libraries' modules,
    functions and types, the window) out of the cyclic garbage collector's reach: they live
    as long as the process. A full collection otherwise walks them every time, a 37 ms
    stall of the window (bench/workbench_bench.py); now it walks what came after."""
    import gc

    gc.collect()  # what is garbage now is freed, not kept for good
    gc.freeze()


def create_window(argv: list[str]):
    """Parse the command line and build the window (shown, with the preset or run
    open). Raises ValueError for a target that is neither a preset nor a run folder."""
    args = build_parser().parse_args(argv)
    kind = classify_target(args.target) if args.target else None

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("RL Workbench")
    app.setOrganizationName("RL Workbench")

    from workbench.main_window import MainWindow
    from workbench.settings import Settings

    settings = Settings.load()
    if args.runs:
        settings.runs_folder = str(Path(args.runs).resolve())
    window = MainWindow(settings)
    window.show()
    if kind == "preset":
        window.presets.open_preset(args.target)
    elif kind == "run":
        window.open_run_and_preset(args.target)  # as Open Run Folder: a copy of its preset in Set-up
    else:
        preset = default_preset()
        if preset is not None:
            # Untitled (Save writes a copy): the first thing a new user sees can run.
            window.presets.open_bundled(preset)
        window.start.show_page()  # no preset or run asked for: the bundled experiments first (workbench/start/)
    return window


def main(argv: list[str] | None = None) -> int:
    from workbench import xcb_check

    problem = xcb_check.check()
    if problem:
        # Qt would abort with its own message, which blames libxcb-cursor0 whatever is missing.
        print(problem, file=sys.stderr)
        return 2
    try:
        window = create_window(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"rl-workbench: {exc}", file=sys.stderr)
        return 2
    from PySide6.QtWidgets import QApplication

    freeze_startup_heap()  # here, not in create_window: a test session's windows come and go
    code = QApplication.instance().exec()
    del window  # (held until here: the window lives as long as this reference)
    return code


if __name__ == "__main__":
    sys.exit(main())
