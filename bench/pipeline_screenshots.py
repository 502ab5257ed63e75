"""A screenshot of RLHF pipelines in the window (issue 38): the Runs list, whose family
column names each run's pipeline, under the header of a run built from earlier runs
(its pipeline line: SFT … → RM … → PPO this run).

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python bench/pipeline_screenshots.py RUNS_FOLDER OUT.png

The run in the header: --run NAME, else the newest run of the folder whose run_started
names a lineage (else the newest run). Reads the folder only; writes OUT.png.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.camera import Camera  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, help="the runs folder")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--run", help="the run whose header is shown (a folder name in RUNS)")
    parser.add_argument("--size", default="1500x800", help="the window's size, WIDTHxHEIGHT")
    args = parser.parse_args()
    # The window's settings in a folder of its own: the user's recent presets stay as they are.
    os.environ.setdefault("RL_WORKBENCH_CONFIG_DIR", tempfile.mkdtemp(prefix="wb-pipeline-shot-"))

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from workbench.main_window import MainWindow
    from workbench.settings import Settings
    from workbench.window.names import RUNS

    window = MainWindow(Settings(runs_folder=str(args.runs.resolve())))
    width, height = (int(n) for n in args.size.split("x"))
    window.resize(width, height)
    window.show()
    runs = window.runs_view.index.scan()
    if not runs:
        sys.exit(f"{args.runs} holds no runs")
    shown = next((r for r in runs if r.name == args.run), None) if args.run else \
        next((r for r in runs if r.lineage), runs[0])
    if shown is None:
        sys.exit(f"no run {args.run} in {args.runs}")
    window.open_run(shown.path)
    window.tabs.setCurrentIndex(RUNS)
    window.runs_view.refresh()
    window.runs_view.select_paths([shown.path])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    camera = Camera(app, args.out.parent, settle_s=1.0)
    camera.shot(window, args.out.name)
    print(f"header: {shown.name}; pipeline: {window.header.pipeline.toolTip().splitlines()[:1]}")
    window.close()


if __name__ == "__main__":
    main()
