"""Screenshots of the reward model seen (issue 39): the Goodhart plot of an RL run against a
learned reward ("Learned reward against the truth", with the exploitation alarm's marker),
that run's window with the alarm selected, and the inspector on one of its recorded
rollouts coloured by the reward model's score token by token.

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python bench/goodhart_screenshots.py RUN OUT_FOLDER

RUN is a run folder of presets/ppo-sort-rm.yaml or grpo-sort-rm.yaml. Reads it only;
writes OUT_FOLDER/goodhart-plot.png, goodhart-alarm.png and inspector-rm-score.png.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.camera import Camera, last_recorded_step, open_inspector, open_run_window  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="an RL run against a reward-model run")
    parser.add_argument("out", type=Path, help="the folder the PNGs go to")
    parser.add_argument("--step", type=int, default=0, help="the inspector's step (default: the last recorded)")
    args = parser.parse_args()
    os.environ.setdefault("RL_WORKBENCH_CONFIG_DIR", tempfile.mkdtemp(prefix="wb-goodhart-shot-"))
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    args.out.mkdir(parents=True, exist_ok=True)
    camera = Camera(app, args.out, settle_s=1.0)
    window = open_run_window(args.run, (1500, 950))
    camera.settle(1.0)
    plot = next((p for p in window.dashboard.plots if p.spec.key == "learned_vs_truth"), None)
    if plot is None:
        sys.exit(f"{args.run} declares no learned_vs_truth plot (a run from before it, or no learned reward)")
    plot.resize(760, 420)
    window.dashboard.show_metric("rewards/exact_match/mean")
    camera.shot(plot, "goodhart-plot.png")
    if window.alarms.list.count():
        window.alarms.list.setCurrentRow(0)  # the first alarm: the reward model exploited
    camera.shot(window, "goodhart-alarm.png")
    window.close()

    _, view = open_inspector(args.run, args.step or last_recorded_step(args.run), 0)
    view.quantity_box.setCurrentIndex(max(0, view.quantity_box.findData("rm_score")))
    camera.shot(view, "inspector-rm-score.png")


if __name__ == "__main__":
    main()
