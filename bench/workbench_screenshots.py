"""Screenshots of the workbench for docs/workbench.md and the README, from real runs of
the bundled preset on the built-in model.

    xvfb-run -a -s "-screen 0 1600x1000x24" python bench/workbench_screenshots.py --out docs/screenshots

Writes setup.png, setup-validation.png, dashboard.png (mid-run), samples.png,
compare.png and runs.png. Two 100-step runs: a few minutes on two CPU cores.
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
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--runs", type=Path, default=None, help="runs folder (default: a temporary one)")
    parser.add_argument("--setup-only", action="store_true", help="only the set-up panel shots (no runs)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs_folder = args.runs or Path(tempfile.mkdtemp(prefix="wb-shots-"))
    os.environ.setdefault("RL_WORKBENCH_CONFIG_DIR", str(runs_folder / "config"))

    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from workbench.main_window import MainWindow
    from workbench.window.names import DASHBOARD, RUNS, SAMPLES, SETUP
    from workbench.settings import Settings

    camera = Camera(app, args.out, settle_s=0.4)
    settle, shot, wait_until = camera.settle, camera.shot, camera.wait_until

    window = MainWindow(Settings(runs_folder=str(runs_folder)), settings_path=runs_folder / "config" / "settings.json")
    window.ask = lambda title, text, choices: "Discard" if "Discard" in choices else choices[0]
    window.resize(1600, 1000)
    window.show()
    preset = ROOT / "presets" / "grpo-sort.yaml"
    window.presets.open_bundled(preset)
    window.setup.validate_now()
    shot(window, "setup.png")

    # A problem next to its field, as the engine words it.
    editor = window.setup.editor("training.batch_size")
    editor.line.setText("60")
    editor.line.textEdited.emit("60")
    window.setup.validate_now()
    window.run_control.act_run.trigger()  # refused, with the reason
    settle()
    shot(window, "setup-validation.png")
    editor.line.setText("64")
    editor.line.textEdited.emit("64")
    if args.setup_only:
        window.close()
        return

    def launch(changes: dict, name: str):
        window.presets.open_bundled(preset)
        window.doc.update({"name": name, "training.max_steps": 100, **changes})
        run_dir = window.run_control.run()
        if run_dir is None:
            raise RuntimeError(window.run_message.text())
        return run_dir

    # Run A: the bundled preset. Dashboard mid-run.
    run_a = launch({}, "grpo-sort")
    wait_until(lambda: window.shown and window.shown[0].metrics.size >= 55, 900, "55 steps of run A")
    window.tabs.setCurrentIndex(DASHBOARD)
    shot(window, "dashboard.png")
    wait_until(lambda: not window.run_control.engine.running, 600, "run A to finish")
    window.tick()

    window.tabs.setCurrentIndex(SAMPLES)
    settle()
    table = window.samples.table
    model = window.samples.model
    table.sortByColumn(0, Qt.DescendingOrder)  # newest first
    best = max(range(min(30, model.rowCount())), key=lambda r: model.sample(r).reward)
    window.samples.select_row(best)
    shot(window, "samples.png")

    # Run B: the same with a KL penalty, for the comparison.
    run_b = launch({"algorithm.beta": 0.04}, "grpo-sort-kl")
    wait_until(lambda: not window.run_control.engine.running, 600, "run B to finish")
    window.tick()
    window.tabs.setCurrentIndex(RUNS)
    window.runs_view.refresh()
    window.runs_view.select_paths([run_a, run_b])
    shot(window, "runs.png")
    window.compare_runs([run_a, run_b])
    window.dashboard.smoothing.setValue(80)
    shot(window, "compare.png")
    window.tabs.setCurrentIndex(SETUP)
    window.close()


if __name__ == "__main__":
    main()
