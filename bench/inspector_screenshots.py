"""Screenshots of the trajectory inspector for docs/workbench.md and the README, from
real runs on the built-in model.

    xvfb-run -a -s "-screen 0 1600x1000x24" python bench/inspector_screenshots.py --out docs/screenshots
    python bench/inspector_screenshots.py --only ppo          # just the PPO one
    python bench/inspector_screenshots.py --runs DIR          # keep (and reuse) the runs in DIR

Trains (headless, `python -m engine run`) a short GRPO run of presets/grpo-sort.yaml
(40 steps, 16 rollouts recorded a step: two whole groups) and a short PPO run of
presets/ppo-sort.yaml (40 steps), opens each in the window's Inspector tab and writes:

  inspector-grpo-group.png      a GRPO group: completions side by side, rewards, advantages
  inspector-grpo-no-signal.png  a group whose rewards are all equal, flagged
  inspector-ppo.png             a PPO rollout coloured by its per-token advantages (on its own
                                scale), a token selected (its numbers and top-5 alternatives
                                beside the plot)

About two minutes on two CPU cores. A run folder that already holds a finished run is
reused (--runs), so the shots can be retaken without training again.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.camera import Camera  # noqa: E402

COMMON = ["training.save_steps=0", "training.eval_steps=10", "data.num_eval=40", "training.max_steps=40"]
RUNS = {
    "grpo": ("grpo-sort.yaml", COMMON + ["training.batch_size=64", "training.record_rollouts=16",
                                          "training.log_completions=16"]),
    "ppo": ("ppo-sort.yaml", COMMON + ["training.batch_size=32", "training.record_rollouts=8"]),
}


def train(kind: str, folder: Path) -> Path:
    preset, overrides = RUNS[kind]
    run_dir = folder / f"inspector-{kind}"
    if (run_dir / "events.jsonl").exists() and b'"run_finished"' in (run_dir / "events.jsonl").read_bytes():
        print(f"{run_dir}: reusing the finished run")
        return run_dir
    if run_dir.exists():
        raise SystemExit(f"{run_dir} holds an unfinished run; remove it or pick another --runs folder")
    command = [sys.executable, "-m", "engine", "run", str(ROOT / "presets" / preset), "--run-dir", str(run_dir),
               "--quiet"]
    for override in overrides:
        command += ["--set", override]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    start = time.monotonic()
    print("training:", " ".join(command[3:]))
    subprocess.run(command, check=True, cwd=ROOT, env=env)
    print(f"  {time.monotonic() - start:.0f} s")
    return run_dir


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--runs", type=Path, default=None, help="runs folder (default: a temporary one)")
    parser.add_argument("--only", choices=sorted(RUNS), default=None)
    parser.add_argument("--size", default="1500x900", help="window size, WIDTHxHEIGHT")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    folder = args.runs or Path(tempfile.mkdtemp(prefix="inspector-shots-"))
    folder.mkdir(parents=True, exist_ok=True)
    kinds = [args.only] if args.only else sorted(RUNS)
    run_dirs = {kind: train(kind, folder) for kind in kinds}

    os.environ.setdefault("RL_WORKBENCH_CONFIG_DIR", str(folder / "config"))
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from workbench.inspector.view import GROUP_PAGE, TRAJECTORY_PAGE
    from workbench.main_window import MainWindow
    from workbench.window.names import INSPECTOR
    from workbench.settings import Settings

    width, height = (int(v) for v in args.size.split("x"))

    camera = Camera(app, args.out, settle_s=0.5)
    settle, shot = camera.settle, camera.shot

    window = MainWindow(Settings(runs_folder=str(folder)), settings_path=folder / "config" / "settings.json")
    window.ask = lambda title, text, choices: "Discard" if "Discard" in choices else choices[0]
    window.resize(width, height)
    window.show()
    inspector = window.inspector

    if "grpo" in run_dirs:
        window.open_run(run_dirs["grpo"])
        window.tabs.setCurrentIndex(INSPECTOR)
        settle()
        index = inspector.index
        # The latest step with a group whose rewards spread widely (three or more
        # distinct rewards), and the latest group with no spread at all.
        varied = flat = None
        for step in reversed(index.steps):
            for record in index.records(step):
                if record.index % 8:
                    continue
                inspector.open_step(step, index=record.index, follow=False)
                group = inspector.current_group()
                rewards = {r.reward for r in group.rows}
                if varied is None and len(rewards) >= 3:
                    varied = (step, record.index)
                if flat is None and group.no_signal:
                    flat = (step, record.index)
            if varied and flat:
                break
        for name, found in (("inspector-grpo-group.png", varied), ("inspector-grpo-no-signal.png", flat)):
            if found is None:
                print(f"{name}: no such group in this run; not written")
                continue
            inspector.open_step(found[0], index=found[1], follow=False)
            inspector.set_quantity("advantage")
            inspector.pages.setCurrentIndex(GROUP_PAGE)
            shot(window, name)
        inspector.pages.setCurrentIndex(TRAJECTORY_PAGE)

    if "ppo" in run_dirs:
        window.open_run(run_dirs["ppo"])
        window.tabs.setCurrentIndex(INSPECTOR)
        settle()
        index = inspector.index
        # A late rollout whose tokens are pushed both ways (some up, some down), with
        # the most varied per-token advantages.
        best = None
        for step in index.steps[-15:]:
            for record in index.records(step):
                adv = record.sides[0].numbers.get("advantage")
                if adv is None or len(adv) < 6:
                    continue
                both = float(min(adv.max(), -adv.min()))  # > 0 when both signs are there
                score = (both > 0.2, both, float(adv.max() - adv.min()))
                if best is None or score > best[0]:
                    best = (score, step, record.index)
        inspector.open_step(best[1], index=best[2], follow=False)
        inspector.set_quantity("advantage")
        inspector.scope_box.setCurrentIndex(inspector.scope_box.findData("rollout"))  # this rollout's own scale
        inspector.pages.setCurrentIndex(TRAJECTORY_PAGE)
        adv = inspector.current.sides[0].numbers["advantage"]
        inspector.select_token(int(abs(adv).argmax()))
        shot(window, "inspector-ppo.png")
    window.close()


if __name__ == "__main__":
    main()
