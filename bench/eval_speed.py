"""Samples/s of `rl-engine eval`'s sampling against training's, in one process on one
model (issue 40: the evaluation must sample no slower than training does).

    .venv/bin/python bench/eval_speed.py [RUN] [--n 32] [--repeats 5]

RUN: a run folder (default: a fresh trainer of presets/grpo-sort.yaml). Times the trainer's
own sample_batch on a training step's shape (prompts_per_step x num_generations rows) and
on an evaluation chunk's (256 // N prompts x N rows), alternating, and prints the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", nargs="?", type=Path)
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from engine.commands import evaluate as ev
    from engine.commands.train import build_trainer
    from engine.preset.schema import load_preset

    source = args.run / "preset.yaml" if args.run else ROOT / "presets" / "grpo-sort.yaml"
    preset = load_preset(source)
    trainer = build_trainer(preset, args.run or Path("/tmp/eval-speed-run"))
    examples = trainer.eval_examples
    group, per_step = preset.group_size, preset.prompts_per_step
    per_chunk = max(1, ev.ROWS_PER_BATCH // args.n)
    timings = {"training": [], "evaluation": []}
    for r in range(args.repeats + 1):  # the first round warms up
        for kind, prompts_n, g in (("training", per_step, group), ("evaluation", per_chunk, args.n)):
            chosen = examples[(r * prompts_n) % len(examples):][:prompts_n]
            prompts = [e.prompt for e in chosen for _ in range(g)]
            trainer.random_states.sample_generator.manual_seed(r)
            started = time.perf_counter()
            rollout, _ = trainer.sample_batch(prompts, g)
            seconds = time.perf_counter() - started
            if r:
                timings[kind].append((len(prompts) / seconds, float(rollout.lengths.float().mean())))
    print(f"{source}: training rows {per_step} x {group}, evaluation rows {per_chunk} x {args.n}")
    for kind, rows in timings.items():
        print(f"{kind:>10}: {statistics.median(s for s, _ in rows):7.0f} samples/s "
              f"(mean length {statistics.mean(n for _, n in rows):.1f} tokens, median of {len(rows)})")


if __name__ == "__main__":
    main()
