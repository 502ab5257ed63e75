"""Trajectory inspector benchmark: rendering a long trajectory and switching the quantity.

    python bench/inspector_bench.py [--tokens 2000] [--repeats 15] [--scan-steps 1000] [--scan-only]
    xvfb-run -a -s "-screen 0 1600x1000x24" python bench/inspector_bench.py   # under X (xcb)

Writes a synthetic PPO run (one step file of 4 records, the first TOKENS tokens long, in
the engine's format, every per-token key PPO records) and, in an inspector window of
1400 x 900, measures (median and worst of REPEATS, milliseconds):

  1. read: parsing the step file (TrajectoryIndex.records, cache cleared);
  2. render: showing the long trajectory (tokens laid out, coloured, plotted, legend)
     until the text and the plot are painted (synchronous repaints);
  3. switch quantity: picking each other quantity in turn, until painted again;
  4. hover: a pointer move over a token, until the token and the plot marker are
     repainted; and hovering the plot until the text is repainted;
  5. resize: the window narrowed, until the text is re-laid out and painted;
  6. prompt scan: reading the prompts of SCAN_STEPS step files of 4 records each
     (TrajectoryIndex.scan_prompts, which the group view's prompt history uses), from
     the first call until every step is scanned. `--scan-only` runs just this one, no Qt.

Target (the inspector issue): render and switch each under 200 ms. It prints figures
and asserts nothing; take them on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # no X server: draw offscreen

WORDS = [" the", " cat", " sat", " on", " a", " mat", ".", ",", "\n", " 1", "2", " +", " =", " and", " is",
         " not", "\t", " (", ")", " x", "  ", " über", "<eos>"]


def _r(x: float) -> float:
    return float(f"{x:.4g}")


def ppo_record(step: int, index: int, n: int, rng: random.Random) -> dict:
    """A PPO record as the engine writes it (every per-token key, floats to 4 digits)."""
    tokens = [rng.choice(WORDS[:-1]) for _ in range(n - 1)] + ["<eos>"]
    logprob = [_r(-rng.random() ** 2 * 6) for _ in range(n)]
    ref = [_r(lp - rng.random() * 0.4) for lp in logprob]
    kl = [_r(abs(lp - r) * 0.5) for lp, r in zip(logprob, ref)]
    value = [_r(0.3 + 0.5 * i / n + rng.gauss(0, 0.05)) for i in range(n)]
    kl_reward = [_r(-0.05 * k) for k in kl]
    score = 1.0
    per_token = kl_reward[:-1] + [_r(kl_reward[-1] + score)]
    ret, acc = [], 0.0
    for r in reversed(per_token):
        acc = r + acc
        ret.append(_r(acc))
    ret.reverse()
    raw = [a - b for a, b in zip(ret, value)]
    mean = sum(raw) / n
    std = (sum((a - mean) ** 2 for a in raw) / n) ** 0.5 or 1.0
    ratio = [_r(1 + rng.gauss(0, 0.1)) for _ in range(n)]
    tops = []
    for t in tokens:
        probs = sorted((rng.random() for _ in range(5)), reverse=True)
        total = sum(probs) * 1.1
        tops.append(([rng.randrange(50000) for _ in range(5)], [t] + rng.sample(WORDS, 4),
                     [_r(p / total) for p in probs]))
    return {
        "algorithm": "ppo", "step": step, "index": index, "group": index, "prompt": "Write a long story.\n",
        "completion": "".join(tokens[:-1]), "reward": score, "rewards": {"judge": score}, "score": score,
        "truncated": False, "token_ids": [rng.randrange(50000) for _ in range(n)], "tokens": tokens,
        "logprob": logprob, "ref_logprob": ref, "kl": kl, "entropy": [_r(rng.random() * 3) for _ in range(n)],
        "advantage": [_r((a - mean) / std) for a in raw], "ratio": ratio,
        "clipped": [int(abs(r - 1) > 0.2) for r in ratio], "value": value, "return": ret,
        "kl_reward": kl_reward, "reward_per_token": per_token,
        "top_ids": [t[0] for t in tops], "top_tokens": [t[1] for t in tops], "top_probs": [t[2] for t in tops],
    }


def write_run(folder: Path, tokens: int) -> Path:
    from engine.run import rundir

    run_dir = folder / "inspector-bench"
    (run_dir / rundir.TRAJECTORIES_DIR).mkdir(parents=True)
    writer = rundir.EventWriter(run_dir)
    writer.emit("run_started", step=0, algorithm="ppo", max_steps=1, preset={})
    writer.emit("run_finished", step=1, status="done", reason="bench")
    writer.close()
    rng = random.Random(0)
    records = [ppo_record(1, 0, tokens, rng)] + [ppo_record(1, i, 200, rng) for i in range(1, 4)]
    rundir.write_trajectories(run_dir, 1, records)
    return run_dir


def prompt_scan_seconds(folder: Path, steps: int) -> float:
    """Seconds for TrajectoryIndex.scan_prompts to read the prompts of `steps` step files
    (4 records of 16 tokens each, 50 distinct prompts), in its default time slices."""
    from engine.run import rundir
    from workbench.inspector.index import TrajectoryIndex

    run_dir = folder / "scan-bench"
    rng = random.Random(1)
    for step in range(1, steps + 1):
        records = [dict(ppo_record(step, i, 16, rng), prompt=f"p{step % 50}") for i in range(4)]
        rundir.write_trajectories(run_dir, step, records)
    index = TrajectoryIndex(run_dir)
    index.poll()
    t0 = time.perf_counter()
    while not index.scan_prompts():
        pass
    return time.perf_counter() - t0


def stats(samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    return f"median {statistics.median(ms):7.1f} ms   worst {max(ms):7.1f} ms   (n={len(ms)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--scan-steps", type=int, default=1000, help="step files for the prompt scan")
    parser.add_argument("--scan-only", action="store_true", help="only the prompt scan (no Qt)")
    args = parser.parse_args()

    scan_s = prompt_scan_seconds(Path(tempfile.mkdtemp(prefix="inspector-scan-")), args.scan_steps)
    scan_line = f"  {'prompt scan of ' + format(args.scan_steps, ',') + ' step files':34s} {scan_s:.2f} s"
    if args.scan_only:
        print(scan_line)
        return

    from PySide6.QtCore import QEvent, QPointF, Qt
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from workbench.inspector.view import InspectorView
    from workbench.runs.rundata import RunData

    folder = Path(tempfile.mkdtemp(prefix="inspector-bench-"))
    run_dir = write_run(folder, args.tokens)
    size = (run_dir / "trajectories" / "step_000001.jsonl").stat().st_size
    run = RunData(run_dir)
    run.poll()
    view = InspectorView()
    view.resize(1400, 900)
    view.show()
    app.processEvents()
    view.set_run(run)
    app.processEvents()
    text, plot = view.sides[0].view, view.plot

    def paint() -> None:
        text.viewport().repaint()
        plot.viewport().repaint()
        view.legend.repaint()

    results: dict[str, list[float]] = {"read": [], "render": [], "switch": [], "hover_text": [], "hover_plot": [],
                                       "resize": []}
    for _ in range(args.repeats):
        view.index._cache.clear()
        t0 = time.perf_counter()
        view.index.records(1)
        results["read"].append(time.perf_counter() - t0)

        view.open_step(1, index=1)  # a short one first, so the long one is drawn from scratch
        app.processEvents()
        t0 = time.perf_counter()
        view.open_step(1, index=0)
        paint()
        results["render"].append(time.perf_counter() - t0)
        app.processEvents()

        for key in view.current.quantities():
            if key == view.key:
                continue
            t0 = time.perf_counter()
            view.set_quantity(key)
            paint()
            results["switch"].append(time.perf_counter() - t0)
            app.processEvents()
        view.set_quantity("advantage")

        for i in (10, 40, 80):
            pos = QPointF(text.token_rect(i).center())
            event = QMouseEvent(QEvent.MouseMove, pos, text.viewport().mapToGlobal(pos), Qt.NoButton, Qt.NoButton,
                                Qt.NoModifier)
            t0 = time.perf_counter()
            QApplication.sendEvent(text.viewport(), event)
            paint()
            results["hover_text"].append(time.perf_counter() - t0)
        for i in (300, 1200, args.tokens - 5):
            pos = plot.mapFromScene(plot.scene_pos_of(i))
            event = QMouseEvent(QEvent.MouseMove, QPointF(pos), plot.viewport().mapToGlobal(pos), Qt.NoButton,
                                Qt.NoButton, Qt.NoModifier)
            t0 = time.perf_counter()
            QApplication.sendEvent(plot.viewport(), event)
            paint()
            results["hover_plot"].append(time.perf_counter() - t0)
            assert text.hovered == plot.hovered >= 0
        app.processEvents()

        t0 = time.perf_counter()
        view.resize(1000, 900)
        app.processEvents()
        text.viewport().repaint()
        results["resize"].append(time.perf_counter() - t0)
        view.resize(1400, 900)
        app.processEvents()

    platform = QApplication.platformName()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"inspector: a {args.tokens:,}-token PPO trajectory ({len(view.current.quantities())} quantities; step file "
          f"{size / 1e6:.1f} MB with 3 more records of 200 tokens); {platform}; load average {load:.2f}; "
          f"{text.line_count} lines of text")
    labels = {"read": "read the step file", "render": "render the trajectory", "switch": "switch the quantity",
              "hover_text": "hover a token (plot marks it)", "hover_plot": "hover the plot (text marks it)",
              "resize": "resize (re-lay out the text)"}
    for key, label in labels.items():
        print(f"  {label:34s} {stats(results[key])}")
    print(scan_line)
    print("  target: render and switch < 200 ms")
    if args.json:
        args.json.write_text(json.dumps({"tokens": args.tokens, "platform": platform, "load": load,
                                         "prompt_scan_s": scan_s, "scan_steps": args.scan_steps,
                                         **{k: v for k, v in results.items()}}, indent=1))
    view.close()


if __name__ == "__main__":
    main()
