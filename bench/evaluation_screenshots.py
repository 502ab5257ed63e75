"""Screenshots of a reward model's report card and of an evaluation (issues 39 and 40): the
Report card tab of a reward-model run and one of its recorded pairs in the inspector (the
chosen and rejected answers side by side, coloured by the reward of each prefix), the
Evaluate tab of a run with an evaluation, and the Try tab scoring one of the evaluation's
samples token by token (its "tokens ▸" link, which runs `rl-engine try --completion`, so
this takes a few seconds).

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python bench/evaluation_screenshots.py \\
        --report runs/readme-rm-sort-2009 --eval runs/readme-sft-sort-2009 --name readme-bon OUT_FOLDER

Reads the runs only (the report card must have been computed: `rl-engine reward-report RUN`);
writes OUT_FOLDER/reward-report-card.png, inspector-rm-pair.png, evaluate.png and
evaluate-try.png.
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

SIZE = (1600, 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder the PNGs go to")
    parser.add_argument("--report", type=Path, help="a reward-model run with a computed report card")
    parser.add_argument("--eval", type=Path, help="a run with an evaluation (rl-engine eval)")
    parser.add_argument("--name", help="the evaluation's name (default: the newest)")
    parser.add_argument("--pair", type=int, default=0, help="the recorded pair of the report run's last step")
    args = parser.parse_args()
    os.environ.setdefault("RL_WORKBENCH_CONFIG_DIR", tempfile.mkdtemp(prefix="wb-eval-shot-"))
    from PySide6.QtCore import QUrl
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])

    args.out.mkdir(parents=True, exist_ok=True)
    camera = Camera(app, args.out, settle_s=1.0)
    if args.report:
        window = open_run_window(args.report, SIZE)
        window.tabs.setCurrentWidget(window.report_card)
        camera.wait_until(lambda: window.report_card.body.currentWidget() is window.report_card.content, 20,
                          "the report card")
        camera.shot(window.report_card, "reward-report-card.png")
        window.close()
        _, view = open_inspector(args.report.resolve(), last_recorded_step(args.report), args.pair)
        view.quantity_box.setCurrentIndex(max(0, view.quantity_box.findData("score")))
        camera.shot(view, "inspector-rm-pair.png")
    if args.eval:
        window = open_run_window(args.eval, SIZE)
        page = window.evaluate
        window.tabs.setCurrentWidget(page)
        if args.name:
            folder = args.eval.resolve() / "evals" / args.name
            if not page.show_evaluation(folder):
                sys.exit(f"no evaluation {folder}")
        camera.settle(1.0)
        prompts = page.view.prompts
        # The prompts a checkpoint solves and the base never did, the first one's samples beside them.
        texts = [prompts.filter.itemText(i) for i in range(prompts.filter.count())]
        only = [i for i, t in enumerate(texts) if t.endswith(")") and " only " in t and "base" not in t]
        if only:
            prompts.filter.setCurrentIndex(only[0])
        prompts.table.selectRow(0)
        camera.shot(page, "evaluate.png")
        # The checkpoint's first sample of it, token by token: "tokens ▸" runs `rl-engine try --completion`.
        prompts._link_clicked(QUrl("tokens:1/0"))
        camera.wait_until(lambda: window.tabs.currentWidget() is window.try_page, 5, "the Try tab")
        camera.wait_until(lambda: not window.try_page.running, 120, "the engine's scores")
        camera.shot(window.try_page, "evaluate-try.png")
        window.close()


if __name__ == "__main__":
    main()
