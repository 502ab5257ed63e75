"""Every bundled preset's first steps, to compare two versions of the engine: a
refactor of the training loop must log the same per-step losses with the same seed.

    python bench/same_losses.py --steps 25 --out bench/out/losses-before.json
    python bench/same_losses.py --steps 25 --compare bench/out/losses-before.json
    python bench/same_losses.py --runs RUNS   # whole runs (RUNS/<preset>/, the README's command)
                                              # against tests/data/bundled_runs/<preset>.jsonl

Each preset runs in this process, as `rl-engine run PRESET` would (same preset, same
seed, same max_steps, so the same learning-rate schedule), and is stopped after
`--steps` steps. What is compared: every metric whose name says it is a loss (`loss`,
`loss/*`, `nll_loss`) and the gradient norm, step by step. Prints one line a preset:
the largest absolute difference found, and `same` when it is within `--tolerance`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PRESETS = ROOT / "presets"


def compared(metrics: dict) -> dict:
    """The metrics a step is compared on: its losses and gradient norm.

    e.g. {"loss": 0.5, "loss/value_avg": 0.1, "reward": 1.0, "grad_norm": 2.0}
         -> {"loss": 0.5, "loss/value_avg": 0.1, "grad_norm": 2.0}
    """
    return {k: v for k, v in metrics.items()
            if k == "loss" or k.startswith("loss/") or k == "nll_loss" or k == "grad_norm"}


def run_preset(path: Path, steps: int) -> list[dict]:
    from engine.commands.train import build_trainer
    from engine.preset.schema import load_preset

    preset = load_preset(path)
    per_step: list[dict] = []
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = build_trainer(preset, Path(run_dir) / "run", preset_dir=path.parent)

        def on_step(step: int, metrics: dict) -> None:
            per_step.append(compared(metrics))
            if step >= steps:
                trainer.stop.request("same_losses: enough steps")

        trainer.run(on_step=on_step)
    return per_step


def run_figures(events_path: Path) -> tuple[list[dict], dict]:
    """A whole run's compared metrics, step by step, and its last evaluation."""
    events = [json.loads(line) for line in events_path.read_text().splitlines() if line.strip()]
    steps = [compared(e) for e in events if e["type"] == "metrics"]
    evals = [e for e in events if e["type"] == "eval"]
    last = {k: v for k, v in evals[-1].items() if k in ("step", "accuracy", "reward")} if evals else {}
    return steps, last


def largest_difference(before: list[dict], after: list[dict]) -> tuple[float, str]:
    """The largest |before - after| over the steps both have, and where; a metric one
    side lacks or has as None where the other has a number counts as infinite."""
    worst, where = 0.0, ""
    if len(before) != len(after):
        return float("inf"), f"{len(before)} steps before, {len(after)} after"
    for step, (a, b) in enumerate(zip(before, after), start=1):
        for key in sorted(set(a) | set(b)):
            x, y = a.get(key), b.get(key)
            if x is None and y is None:
                continue
            gap = float("inf") if x is None or y is None else abs(x - y)
            if gap > worst:
                worst, where = gap, f"step {step} {key}: {x} vs {y}"
    return worst, where


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--out", type=Path, help="write the figures here (JSON)")
    parser.add_argument("--compare", type=Path, help="figures written before, to compare with")
    parser.add_argument("--tolerance", type=float, default=1e-6)
    parser.add_argument("--runs", type=Path, help="a folder of whole runs, one per preset, to compare with "
                                                   "the bundled recordings")
    parser.add_argument("presets", nargs="*", help="preset names (default: every bundled one)")
    args = parser.parse_args()
    names = args.presets or sorted(p.stem for p in PRESETS.glob("*.yaml"))
    if args.runs:
        failures = 0
        for name in names:
            run, recorded = args.runs / name / "events.jsonl", ROOT / "tests/data/bundled_runs" / f"{name}.jsonl"
            if not run.exists():
                print(f"{name:24s} no run at {run}")
                continue
            (steps, last), (steps_before, last_before) = run_figures(run), run_figures(recorded)
            gap, where = largest_difference(steps_before, steps)
            same = gap <= args.tolerance and last == last_before
            failures += not same
            print(f"{name:24s} {len(steps)} steps, largest difference {gap:.3g}; last eval {last}"
                  + ("  same" if same else f"  DIFFERENT ({where or last_before})"))
        return 1 if failures else 0
    before = json.loads(args.compare.read_text()) if args.compare else {}
    figures, failures = {}, 0
    for name in names:
        started = time.perf_counter()
        figures[name] = run_preset(PRESETS / f"{name}.yaml", args.steps)
        line = f"{name:24s} {len(figures[name])} steps in {time.perf_counter() - started:5.1f} s"
        if name in before:
            gap, where = largest_difference(before[name], figures[name])
            same = gap <= args.tolerance
            failures += not same
            line += f"  largest difference {gap:.3g}" + ("  same" if same else f"  DIFFERENT ({where})")
        print(line, flush=True)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(figures, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
