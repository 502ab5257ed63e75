"""What recording the update's effect costs: a preset trained with
training.record_update_effect on and off, the mean step time of each and their ratio.

    python bench/update_effect_bench.py                    # presets/grpo-sort.yaml, 20 steps, 2 warm-up
    python bench/update_effect_bench.py --steps 6 --set training.batch_size=32 --repeats 2

Both runs are in this process, one after the other (never at once), from the same preset
with the same --set overrides and seed: `training.max_steps=STEPS`, no evaluation or
checkpoint between steps (the first evaluation comes before step 1 and the last one and
the final checkpoint after step STEPS, all outside the timed steps), and
`training.record_update_effect` true, then false (with --repeats the order alternates;
the figures are the medians of the repeats' means). A step's time is the wall time between
the ends of two consecutive steps (Trainer.run's `on_step`), so it holds everything a step
does: sampling, rewards, the update, the pass after it over the recorded rows
(training.record_rollouts), and writing the step's events and records. The first WARMUP
steps are not timed (allocations, lazy imports, the first compiled kernels).

It prints, for each setting, the timed steps, the mean and median step time and the mean
`timing/update` (the update phase, where the pass after the update runs); the ratio on /
off; the time of the pass after the update itself (each call to
engine.algorithms.update_effect.logprobs_after_update timed, the GPU synchronised: a figure
a loaded machine blurs less than the difference of two runs' step times); whether both
runs trained alike (the pass after the update must not change training: same rewards and
losses at every step); and the on run's update/* metrics (mean over the timed steps)
beside the alarm's threshold. It asserts nothing; take figures on a quiet
machine. Runs go to bench/out/runs/update_effect/ (git-ignored).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RUNS = ROOT / "bench" / "out" / "runs" / "update_effect"
EFFECT_METRICS = ("update/change_abs_mean", "update/change_top10_share", "update/change_pos_adv_mean",
                  "update/change_neg_adv_mean", "update/against_advantage_ratio")
SAME_TRAINING = ("reward", "loss")  # metrics that must match step by step when the pass changes nothing


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", type=Path, default=ROOT / "presets" / "grpo-sort.yaml")
    p.add_argument("--steps", type=int, default=20, help="steps a run trains (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="first steps not timed (default 2)")
    p.add_argument("--repeats", type=int, default=1, help="pairs of runs, the order alternating (default 1)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="a preset override, as `rl-engine run --set` (repeatable)")
    args = p.parse_args(argv)
    if args.steps < args.warmup + 2:
        p.error(f"--steps {args.steps}: needs at least --warmup + 2 = {args.warmup + 2} (two timed steps)")
    return args


class PassClock:
    """Times the pass after the update itself: wraps `logprobs_after_update` where the
    trainers' modules imported it (they call it by that name), for one run."""

    def __init__(self):
        self.seconds: list[float] = []
        self._patched: list[tuple[object, object]] = []

    def __enter__(self):
        import engine.algorithms.update_effect as effect

        original = effect.logprobs_after_update

        def timed(*a, **kw):
            start = time.perf_counter()
            try:
                return original(*a, **kw)
            finally:
                _synchronize()
                self.seconds.append(time.perf_counter() - start)

        for module in list(sys.modules.values()):
            if (getattr(module, "__name__", "").startswith("engine.algorithms.")
                    and getattr(module, "logprobs_after_update", None) is original):
                self._patched.append((module, original))
                module.logprobs_after_update = timed
        return self

    def __exit__(self, *exc):
        for module, original in self._patched:
            module.logprobs_after_update = original


def _synchronize() -> None:
    """Wait for the GPU's queued work, so a pass on it is timed whole (no-op on a CPU)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_once(args, record: bool, run_dir: Path) -> dict:
    """Train the preset with record_update_effect = `record`; {'durations': {step: seconds},
    'metrics': {step: metrics}, 'pass': {step: seconds in the pass after the update}} (timed steps)."""
    from engine.commands.train import build_trainer
    from engine.preset.schema import load_preset

    overrides = [f"training.max_steps={args.steps}", "training.eval_steps=0", "training.save_steps=0",
                 "training.report_to=none", f"training.record_update_effect={str(record).lower()}", *args.sets]
    preset = load_preset(args.preset, overrides)
    shutil.rmtree(run_dir, ignore_errors=True)
    trainer = build_trainer(preset, run_dir, preset_dir=args.preset.parent)  # imports its trainer module
    ends, metrics, passes = {}, {}, {}
    clock = PassClock()

    def on_step(step: int, step_metrics: dict) -> None:
        ends[step] = time.perf_counter()
        metrics[step] = dict(step_metrics)
        passes[step] = sum(clock.seconds) - sum(passes.values())  # this step's share of the clock

    with clock:
        status = trainer.run(on_step=on_step)
    if status != "done" or sorted(ends) != list(range(1, args.steps + 1)):
        raise RuntimeError(f"the run with record_update_effect={record} ended {status!r} after steps {sorted(ends)}")
    timed = range(args.warmup + 1, args.steps + 1)
    return {"durations": {s: ends[s] - ends[s - 1] for s in timed}, "metrics": metrics,
            "pass": {s: passes[s] for s in timed}}


def mean_over(run: dict, key: str, steps) -> float | None:
    values = [run["metrics"][s].get(key) for s in steps]
    values = [v for v in values if isinstance(v, (int, float))]
    return statistics.fmean(values) if values else None


def trained_alike(on: dict, off: dict) -> str:
    """'yes' when every SAME_TRAINING metric matches at every step, else the first difference."""
    for step in sorted(on["metrics"]):
        for key in SAME_TRAINING:
            a, b = on["metrics"][step].get(key), off["metrics"][step].get(key)
            if a != b:
                return f"no: step {step} {key} {a} (on) vs {b} (off)"
    return "yes (" + ", ".join(SAME_TRAINING) + f" equal at every step 1-{max(on['metrics'])})"


def main(argv=None) -> None:
    args = parse_args(argv)
    timed = list(range(args.warmup + 1, args.steps + 1))
    means: dict[bool, list[float]] = {True: [], False: []}
    steps: dict[bool, list[float]] = {True: [], False: []}  # every timed step of every repeat
    updates: dict[bool, list[float]] = {True: [], False: []}
    passes: list[float] = []  # the on runs' mean seconds a step in the pass after the update
    last: dict[bool, dict] = {}
    for repeat in range(args.repeats):
        order = (True, False) if repeat % 2 == 0 else (False, True)
        for record in order:
            name = "on" if record else "off"
            print(f"repeat {repeat + 1}/{args.repeats}: record_update_effect {name} ...", flush=True)
            run = run_once(args, record, RUNS / f"{name}-{repeat + 1}")
            means[record].append(statistics.fmean(run["durations"].values()))
            steps[record] += run["durations"].values()
            update = mean_over(run, "timing/update", timed)
            if update is not None:
                updates[record].append(update)
            if record:
                passes.append(statistics.fmean(run["pass"].values()))
            last[record] = run

    print(f"\npreset {args.preset.name}, {args.steps} steps, timed steps {timed[0]}-{timed[-1]} "
          f"(the first {args.warmup} are warm-up), overrides: {args.sets or 'none'}; "
          f"{args.repeats} repeat(s), medians of the repeats' means (median step: of every timed step)")
    print(f"{'record_update_effect':<22}{'mean step (s)':>15}{'median step (s)':>17}{'mean timing/update (s)':>25}"
          f"   each repeat's mean step (s)")
    for record in (True, False):
        update = f"{statistics.median(updates[record]):.4f}" if updates[record] else "-"
        each = ", ".join(f"{m:.4f}" for m in means[record])
        print(f"{'on' if record else 'off':<22}{statistics.median(means[record]):>15.4f}"
              f"{statistics.median(steps[record]):>17.4f}{update:>25}   {each}")
    on, off = statistics.median(means[True]), statistics.median(means[False])
    print(f"ratio on / off: {on / off:.3f} ({on - off:+.4f} s a step)")
    print(f"the pass after the update itself (on, timed around each call): {statistics.median(passes):.4f} s a step, "
          f"{statistics.median(passes) / off:.1%} of the off run's step")
    print(f"trained alike: {trained_alike(last[True], last[False])}")
    print("update/* of the on run, mean over the timed steps:")
    for key in EFFECT_METRICS:
        value = mean_over(last[True], key, timed)
        print(f"  {key:<34}{'-' if value is None else f'{value:.4f}'}")
    from engine.alarms import AlarmsConfig

    print(f"  (the update_against_advantage alarm fires at a `window`-step mean of "
          f"{AlarmsConfig().against_advantage_fraction:g}, alarms.against_advantage_fraction)")


if __name__ == "__main__":
    main()
