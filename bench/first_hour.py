"""The window's first hour, timed as a new user meets it, with screenshots for the README.

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python bench/first_hour.py --out docs/screenshots

Starts `rl-workbench` as the README's `make run` does with no preset (workbench.app's
create_window, so the start page shows), and prints:
- window up: from this script's start (Python already running, nothing imported) to the
  window shown with its start page painted;
- start page -> Run -> first metrics: from the click on the default card's Run to the
  dashboard holding the run's first metrics point (the engine's start-up, its first step);
- and writes start-page.png (the start page), then stops the run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

T0 = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.camera import Camera  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--card", default="grpo-sort", help="the card whose Run is clicked")
    args = parser.parse_args()
    args.out = args.out.resolve()  # before the chdir below
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="wb-first-hour-"))
    os.environ["RL_WORKBENCH_CONFIG_DIR"] = str(work / "config")  # a new user's settings: none
    os.chdir(work)  # the default runs folder is ./runs

    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from workbench.app import create_window

    window = create_window([])
    app = QApplication.instance()
    window.resize(1400, 900)
    camera = Camera(app, args.out, settle_s=0.4)

    wait_until = camera.wait_until

    page = window.start.page
    wait_until(lambda: page.isVisible(), 30, "the start page")
    app.processEvents()
    window_up = time.perf_counter() - T0
    camera.shot(window, "start-page.png")

    run_button = page.cards[args.card].run_button
    clicked = time.perf_counter()
    QTest.mouseClick(run_button, Qt.LeftButton)
    wait_until(lambda: bool(window.shown) and window.shown[0].metrics.size > 0, 600, "the first metrics")
    first_metrics = time.perf_counter() - clicked

    window.run_control.stop()
    wait_until(lambda: not window.run_control.running, 120, "the run to stop")
    print(f"window up (start page painted): {window_up:.1f} s")
    print(f"start page -> Run -> first metrics on the dashboard: {first_metrics:.1f} s")
    window.close()


if __name__ == "__main__":
    main()
