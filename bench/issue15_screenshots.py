"""Screenshots for the README of an alarm with its evidence, the reward playground and a
fork compared with its parent, from real runs of the engine on the built-in model.

    xvfb-run -a -s "-screen 0 1600x1000x24" python bench/issue15_screenshots.py --out docs/screenshots
    python bench/issue15_screenshots.py --runs DIR       # keep (and reuse) the runs in DIR

Trains, headless (`python -m engine run` / `fork`), three small runs:

  alarm      GRPO on the sort task whose reward is a constant (a function in r.py next
             to the run's preset): every group's rewards are equal, so the engine raises
             a "no learning signal" alarm after `alarms.window` (5) steps
  parent     presets/grpo-sort.yaml, 30 steps of 32 completions, checkpoints at 15 and 30
  fork       the parent forked at step 15 with training.learning_rate=5e-4

and writes:

  alarm.png         the alarm run on the Dashboard: the marker on the plots, the Alarms
                    panel under them with the alarm selected (what it saw, why, what to
                    try, the evidence)
  playground.png    the Reward playground on the parent run's samples of its latest step
                    with a group of three or more different rewards (there a new weight
                    moves the advantages too), scored with sort_inclusion_order's weight
                    typed in as 2: the table beside the run's own totals and advantages
  fork-compare.png  the Runs list (the fork's family column: "fork of grpo-sort @ step 15")
                    over the Dashboard comparing the two runs (unsmoothed, scrolled to the
                    learning-rate plot; the preset fields that differ), one image of the
                    two views

About a minute on two idle CPU cores. A runs folder that already holds the finished runs
is reused (--runs), so the shots can be retaken without training again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.camera import Camera  # noqa: E402

CONSTANT_REWARD = '''"""A reward that never tells completions apart: every GRPO group gets equal rewards."""


def constant(prompts, completions, **fields):
    return [0.5 for _ in completions]
'''

# Small and quick: the shots need a few steps of real numbers, not a trained model.
QUICK = ["data.num_eval=16", "training.eval_steps=0"]
ALARM_SET = QUICK + ["training.max_steps=14", "training.batch_size=16", "training.save_steps=0", "alarms.window=5"]
PARENT_SET = QUICK + ["training.max_steps=30", "training.batch_size=32", "training.save_steps=15",
                      "training.warmup_steps=3", "training.log_completions=16"]
FORK_CHECKPOINT, FORK_SET = "step_000015", ["training.learning_rate=5e-4"]


def finished(run_dir: Path) -> bool:
    events = run_dir / "events.jsonl"
    return events.exists() and b'"run_finished"' in events.read_bytes()


def engine(args: list[str], run_dir: Path) -> Path:
    """`python -m engine ARGS --run-dir RUN_DIR --quiet`, unless RUN_DIR holds a finished run."""
    if finished(run_dir):
        print(f"{run_dir}: reusing the finished run")
        return run_dir
    if run_dir.exists():
        raise SystemExit(f"{run_dir} holds an unfinished run; remove it or pick another --runs folder")
    command = [sys.executable, "-m", "engine", *args, "--run-dir", str(run_dir), "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    start = time.monotonic()
    print("engine:", " ".join(command[3:]))
    subprocess.run(command, check=True, cwd=ROOT, env=env)
    print(f"  {time.monotonic() - start:.0f} s")
    return run_dir


def sets(overrides: list[str]) -> list[str]:
    return [arg for override in overrides for arg in ("--set", override)]


def train(folder: Path) -> dict[str, Path]:
    # The alarm run's preset: grpo-sort with the constant reward, next to its r.py.
    presets = folder / "presets"
    presets.mkdir(parents=True, exist_ok=True)
    (presets / "r.py").write_text(CONSTANT_REWARD)
    preset = yaml.safe_load((ROOT / "presets" / "grpo-sort.yaml").read_text())
    preset["name"] = "constant-reward"
    preset["description"] = "GRPO whose reward is a constant: no learning signal, an alarm."
    preset["rewards"] = [{"name": "r.py:constant"}]
    alarm_preset = presets / "constant-reward.yaml"
    alarm_preset.write_text(yaml.safe_dump(preset, sort_keys=False))

    alarm = engine(["run", str(alarm_preset), *sets(ALARM_SET)], folder / "constant-reward")
    parent = engine(["run", str(ROOT / "presets" / "grpo-sort.yaml"), *sets(PARENT_SET)], folder / "grpo-sort")
    checkpoints = sorted(p.name for p in (parent / "checkpoints").glob("step_*"))
    if FORK_CHECKPOINT not in checkpoints:
        raise SystemExit(f"{parent} has no {FORK_CHECKPOINT} (it has {checkpoints})")
    fork = engine(["fork", str(parent), "--checkpoint", FORK_CHECKPOINT, *sets(FORK_SET)],
                  folder / "grpo-sort-lr5e-4")
    if b'"alarm"' not in (alarm / "events.jsonl").read_bytes():
        raise SystemExit(f"{alarm} raised no alarm: the alarm shot would show none")
    return {"alarm": alarm, "parent": parent, "fork": fork}


def varied_step(run_dir: Path) -> int | None:
    """The latest step whose logged samples hold a group (`group`) with three or more
    different totals."""
    found = None
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("type") != "samples":
            continue
        groups: dict[int, set] = {}
        for sample in event.get("samples", []):
            groups.setdefault(sample.get("group"), set()).add(round(sample.get("reward", 0.0), 6))
        if any(len(rewards) >= 3 for rewards in groups.values()):
            found = event["step"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--runs", type=Path, default=None, help="runs folder (default: a temporary one)")
    parser.add_argument("--size", default="1600x1000", help="window size, WIDTHxHEIGHT")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    folder = (args.runs or Path(tempfile.mkdtemp(prefix="issue15-shots-"))).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    runs = train(folder)

    os.environ.setdefault("RL_WORKBENCH_CONFIG_DIR", str(folder / "config"))
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QPainter, QPixmap
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from workbench.main_window import MainWindow
    from workbench.window.names import DASHBOARD, RUNS
    from workbench.settings import Settings

    width, height = (int(v) for v in args.size.split("x"))
    camera = Camera(app, args.out, settle_s=0.6)
    settle, shot = camera.settle, camera.shot

    wait_until = camera.wait_until

    window = MainWindow(Settings(runs_folder=str(folder)), settings_path=folder / "config" / "settings.json")
    window.ask = lambda title, text, choices: "Discard" if "Discard" in choices else choices[0]
    window.resize(width, height)
    window.show()
    settle()

    # 1. The alarm: its marker on the plots, and the panel with its details.
    window.open_run(runs["alarm"])
    window.tabs.setCurrentIndex(DASHBOARD)
    settle()
    panel = window.alarms
    if not panel.alarms:
        raise SystemExit("the Alarms panel shows no alarm")
    panel.list.setCurrentRow(0)
    # Room for the details (saw / why / try / evidence) under plots still tall enough to read.
    column = window.dash.column
    total = sum(column.sizes())
    column.setSizes([total - 425, 425])
    panel.body.setSizes([300, width - 300])
    settle()
    # The marker is on the plot of the alarm's metric (frac_reward_zero_std: "Groups with
    # no signal", in the third row): scroll it into view, as a user would.
    marked = window.dashboard.plot("zero_std")
    if marked is None:
        raise SystemExit("the dashboard has no 'Groups with no signal' plot")
    window.dashboard.scroll.ensureWidgetVisible(marked, 0, 0)
    shot(window, "alarm.png")

    # 2. The reward playground on the parent run: a weight typed in, then Score.
    window.open_run(runs["parent"])
    view = window.playground
    window.tabs.setCurrentWidget(view)
    wait_until(lambda: view.source.run is not None and bool(view.rewards.items), 10, "the playground's run")
    # The latest step with a group of three or more different rewards: there a new weight
    # moves the advantages too, not only the totals.
    step = varied_step(runs["parent"])
    if step is not None:
        view.source.step_combo.setCurrentIndex(view.source.step_combo.findData(step))
        settle()
    line = view.rewards.items[1].weight.line
    line.setFocus()
    line.selectAll()  # typed over, key by key, as a user does
    QTest.keyClick(line, Qt.Key_Backspace)
    QTest.keyClicks(line, "2")
    QTest.keyClick(line, Qt.Key_Tab)
    settle()
    if view.doc.get("rewards")[1]["weight"] != 2.0:
        raise SystemExit(f"the typed weight did not take: {view.doc.get('rewards')}")
    if not view.score():
        raise SystemExit(f"Score did not start: {view.status.text()} {view.error_label.text()}")
    wait_until(lambda: not view.scorer.running and view.score_button.isEnabled(), 120, "the scoring")
    if view.error is not None:
        raise SystemExit(f"the scoring failed: {view.error.message}")
    shot(window, "playground.png")

    # 3. The fork beside its parent: the Runs list (family column), then Compare selected.
    window.tabs.setCurrentIndex(RUNS)
    window.runs_view.refresh()
    window.runs_view.select_paths([runs["parent"], runs["fork"]])
    settle()
    # The part of the Runs tab the picture keeps: from its tab bar down to the list's last
    # row (measured now: the header above the tabs is shorter once two runs are compared).
    table = window.runs_view.table
    last = table.model().rowCount() - 1
    viewport_top = table.viewport().mapTo(window, table.viewport().rect().topLeft()).y()
    rows_bottom = min(viewport_top + table.rowViewportPosition(last) + table.rowHeight(last) + 10, window.height())
    tabs_top = window.tabs.mapTo(window, window.tabs.rect().topLeft()).y()
    runs_pixmap = window.grab()
    ratio = runs_pixmap.devicePixelRatio()
    top = runs_pixmap.copy(0, int(tabs_top * ratio), runs_pixmap.width(), int((rows_bottom - tabs_top) * ratio))

    window.runs_view.compare_button.click()
    settle()
    if len(window.shown) != 2:
        raise SystemExit(f"Compare selected showed {len(window.shown)} runs")
    # Down to the learning-rate plot, where the fork's change shows from its first step
    # (the other curves part from the parent's only slowly over 15 steps).
    lr_plot = window.dashboard.plot("lr")
    if lr_plot is None:
        raise SystemExit("the dashboard has no learning-rate plot")
    window.dashboard.scroll.ensureWidgetVisible(lr_plot, 0, 0)
    # Unsmoothed: the fork's own curves restart the smoothing at its first step, so
    # smoothed they would part from the parent's at step 16, where both logged the same.
    window.dashboard.smoothing.setValue(0)
    settle()
    compare_pixmap = window.grab()
    # One picture of the two views: that part of the Runs tab over the whole comparison.
    for pixmap in (top, compare_pixmap):
        pixmap.setDevicePixelRatio(1.0)  # drawn pixel for pixel
    combined = QPixmap(compare_pixmap.width(), top.height() + 6 + compare_pixmap.height())
    combined.fill(Qt.darkGray)
    painter = QPainter(combined)
    painter.drawPixmap(0, 0, top)
    painter.drawPixmap(0, top.height() + 6, compare_pixmap)
    painter.end()
    path = args.out / "fork-compare.png"
    combined.save(str(path), "PNG", 0)
    print(f"{path}: {path.stat().st_size // 1024} KB")
    window.close()


if __name__ == "__main__":
    main()
