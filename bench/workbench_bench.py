"""Workbench responsiveness benchmark.

    python bench/workbench_bench.py [--steps 10000] [--metrics 40] [--rate 50] [--seconds 20]

Prints:
  1. time from process start to the window shown (a fresh Python process, median of 3);
  2. time to open a synthetic run of STEPS steps x METRICS metrics (plus a samples
     event of 8 generations a step), until its dashboard is drawn;
  3. with that run open on the dashboard and events arriving at RATE per second from
     another process, the longest and the 99th-percentile stall of the Qt event loop,
     measured as the lateness of a 5 ms timer.
Targets: window < 2 s, open < 1 s, longest stall < 16 ms (one frame at 60 Hz; the hardening issue).

Runs under whatever QT_QPA_PLATFORM says (offscreen by default; under Xvfb use
`xvfb-run -s "-screen 0 1600x1000x24" python bench/workbench_bench.py`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SAMPLES_PER_STEP = 8


def metric_names(count: int) -> list[str]:
    """The engine's GRPO metric names, padded with extra ones up to `count`."""
    names = ["reward", "reward_std", "rewards/exact_match/mean", "rewards/exact_match/std",
             "rewards/sort_position/mean", "rewards/sort_position/std", "frac_reward_zero_std", "kl", "entropy",
             "loss", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
             "completions/mean_length", "completions/min_length", "completions/max_length",
             "completions/clipped_ratio", "grad_norm", "learning_rate", "step_time", "timing/rollout",
             "timing/reward", "timing/update", "throughput/tokens_per_second",
             "throughput/rollout_tokens_per_second", "throughput/samples_per_second", "num_tokens",
             "skipped_steps"]
    names += [f"extra/metric_{i}" for i in range(max(0, count - len(names)))]
    return names[:count]


def metrics_event(step: int, t: float, names: list[str], rng: random.Random) -> dict:
    event = {"type": "metrics", "time": t, "step": step}
    for i, name in enumerate(names):
        event[name] = round(math.sin(step / 300 + i) + rng.random() * 0.1, 6)
    event["kl"] = None  # beta 0: logged as null, as the engine does
    return event


def samples_event(step: int, t: float, rng: random.Random) -> dict:
    return {"type": "samples", "time": t, "step": step, "samples": [
        {"index": i, "group": i // 4, "prompt": f"sort {rng.randint(0, 9)} {rng.randint(0, 9)} 4 1 =",
         "completion": " 1 4 9 9", "reward": rng.random(), "rewards": {"exact_match": 1.0, "sort_position": 0.5},
         "advantage": rng.random() - 0.5} for i in range(SAMPLES_PER_STEP)]}


def write_synthetic_run(folder: Path, steps: int, count: int) -> Path:
    from engine.preset.schema import Preset
    from engine.run.rundir import dumps  # the engine's own line format

    run_dir = folder / "synthetic-10k"
    run_dir.mkdir(parents=True)
    names = metric_names(count)
    rng = random.Random(0)
    start = time.time() - steps
    preset = Preset().model_dump(mode="json")
    with open(run_dir / "events.jsonl", "w", encoding="utf-8") as f:
        f.write(dumps({"type": "run_started", "time": start, "step": 0, "preset": preset, "algorithm": "grpo",
                       "max_steps": steps * 2, "model": {"name_or_path": "builtin:tiny"}}) + "\n")
        for step in range(1, steps + 1):
            f.write(dumps(metrics_event(step, start + step, names, rng)) + "\n")
            f.write(dumps(samples_event(step, start + step, rng)) + "\n")
    return run_dir


def writer_main(run_dir: str, rate: float, first_step: int, count: int, seconds: float) -> None:
    """Append events at `rate` per second (alternately metrics and samples), each line
    flushed as the engine does."""
    from engine.run.rundir import dumps

    names = metric_names(count)
    rng = random.Random(1)
    step = first_step
    interval = 1.0 / rate
    deadline = time.monotonic() + seconds
    next_at = time.monotonic()
    with open(Path(run_dir) / "events.jsonl", "a", encoding="utf-8") as f:
        i = 0
        while time.monotonic() < deadline:
            now = time.time()
            event = metrics_event(step, now, names, rng) if i % 2 == 0 else samples_event(step, now, rng)
            f.write(dumps(event) + "\n")
            f.flush()
            if i % 2:
                step += 1
            i += 1
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))


# ----------------------------------------------------------------------- startup


def startup_child(started: float) -> None:
    from workbench.app import create_window
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    window = create_window([str(ROOT / "presets" / "grpo-sort.yaml")])

    def shown() -> None:
        print(json.dumps({"shown": time.time() - started}), flush=True)
        window.ask = lambda *a: "Discard"
        QApplication.instance().quit()

    QTimer.singleShot(0, shown)  # after the first pass of the event loop: the window is on screen
    QApplication.instance().exec()


def measure_startup(repeats: int = 3) -> list[float]:
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as config:
            env = dict(os.environ, RL_WORKBENCH_CONFIG_DIR=config)
            started = time.time()
            out = subprocess.run([sys.executable, __file__, "--startup-child", repr(started)], env=env,
                                 capture_output=True, text=True, timeout=120)
            line = next((l for l in out.stdout.splitlines() if l.startswith("{")), None)
            if line is None:
                raise RuntimeError(f"startup child failed:\n{out.stderr}")
            times.append(json.loads(line)["shown"])
    return times


# ------------------------------------------------------------------ open + stalls


def measure_gui(steps: int, count: int, rate: float, seconds: float) -> dict:
    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from workbench.app import freeze_startup_heap
    from workbench.main_window import MainWindow
    from workbench.settings import Settings

    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        run_dir = write_synthetic_run(tmp / "runs", steps, count)
        result["write_s"] = time.perf_counter() - t
        result["events_mb"] = (run_dir / "events.jsonl").stat().st_size / 1e6
        window = MainWindow(Settings(runs_folder=str(tmp / "runs")), settings_path=tmp / "settings.json")
        window.ask = lambda *a: "Discard"
        window.resize(1600, 1000)
        window.show()
        freeze_startup_heap()  # as workbench.app.main does
        app.processEvents()

        t = time.perf_counter()
        window.open_run(run_dir)

        def undrawn() -> list:
            return [p for p in window.dashboard.plots if p.stale and not p.visibleRegion().isEmpty()]

        app.processEvents()
        while undrawn() and time.perf_counter() - t < 30:  # plots are drawn a few at a time
            app.processEvents()
        result["open_s"] = time.perf_counter() - t
        run = window.shown[0]
        result["open_rows"] = run.metrics.size
        for _ in range(5):
            app.processEvents()

        step = [steps + 1]

        def stalls_while_streaming(label: str) -> None:
            """How late a 5 ms timer fires while events stream in from another process."""
            gaps: list[float] = []
            clock = QElapsedTimer()
            clock.start()
            last = [clock.nsecsElapsed()]

            def beat() -> None:
                now = clock.nsecsElapsed()
                gaps.append((now - last[0]) / 1e6)
                last[0] = now

            heart = QTimer()
            heart.setInterval(5)
            heart.timeout.connect(beat)
            writer = subprocess.Popen([sys.executable, __file__, "--writer", str(run_dir), str(rate), str(step[0]),
                                       str(count), str(seconds)])
            heart.start()
            rows_before = run.metrics.size
            deadline = time.monotonic() + seconds + 1.0
            while time.monotonic() < deadline:
                app.processEvents()
                time.sleep(0.0005)  # a busy loop would compete with the writer for the CPU
            heart.stop()
            writer.wait(30)
            app.processEvents()
            window.tick()
            stalls = sorted(max(0.0, g - 5.0) for g in gaps[1:])
            result[label] = {
                "max_ms": stalls[-1] if stalls else float("nan"),
                "p99_ms": stalls[int(0.99 * (len(stalls) - 1))] if stalls else float("nan"),
                "median_ms": statistics.median(stalls) if stalls else float("nan"),
                "new_steps": run.metrics.size - rows_before,
            }
            step[0] += result[label]["new_steps"] + 1

        stalls_while_streaming("dashboard")
        result["plots"] = len(window.dashboard.plots)
        # The samples table: its first showing reads every generation of the run.
        t = time.perf_counter()
        window.tabs.setCurrentIndex(2)
        app.processEvents()
        result["samples_first_show_s"] = time.perf_counter() - t
        result["samples_rows"] = window.samples.model.rowCount()
        stalls_while_streaming("samples")
        window.close()
    return result


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--startup-child":
        startup_child(float(sys.argv[2]))
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--writer":
        writer_main(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--metrics", type=int, default=40)
    parser.add_argument("--rate", type=float, default=50.0, help="events a second while measuring stalls")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to stream events")
    parser.add_argument("--skip-startup", action="store_true")
    args = parser.parse_args()

    print(f"platform: {os.environ.get('QT_QPA_PLATFORM')}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    if not args.skip_startup:
        times = measure_startup()
        print(f"window shown after process start: median {statistics.median(times):.2f} s "
              f"(runs: {', '.join(f'{t:.2f}' for t in times)}; target < 2 s)")
    r = measure_gui(args.steps, args.metrics, args.rate, args.seconds)
    print(f"synthetic run: {r['open_rows']:,} steps x {args.metrics} metrics + {r['open_rows'] * SAMPLES_PER_STEP:,} samples "
          f"({r['events_mb']:.0f} MB of events)")
    print(f"open that run (read, parse, build and draw the dashboard): {r['open_s']:.2f} s (target < 1 s)")
    for label, what in (("dashboard", f"dashboard tab, {r['plots']} plots"), ("samples", "samples tab")):
        d = r[label]
        print(f"live on the {what}, {args.rate:.0f} events/s for {args.seconds:.0f} s ({d['new_steps']} new steps): "
              f"event-loop stall longest {d['max_ms']:.1f} ms, p99 {d['p99_ms']:.1f} ms, median {d['median_ms']:.2f} ms "
              "(target: longest < 16 ms)")
        if label == "dashboard":
            print(f"first showing of the samples tab ({r['samples_rows']:,} rows parsed then): "
                  f"{r['samples_first_show_s']:.2f} s")


if __name__ == "__main__":
    main()
