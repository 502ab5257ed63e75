"""Screenshots of a multi-turn episode (issue 26): a grpo-calculator-tools episode in the
inspector (turn blocks, the model's tokens by advantage, the tool's reply greyed and its span
shaded in the plot). The step shown is the first recorded one, from step 5
on, whose first episode called the tool.

    .venv/bin/rl-engine run presets/grpo-calculator-tools.yaml --run-dir runs/full-grpo-calculator-tools
    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/episode_screenshots.py runs/full-grpo-calculator-tools docs/screenshots
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.camera import Camera, open_inspector  # noqa: E402

from engine.run import rundir  # noqa: E402


def episode_step(run: Path, first: int = 5) -> tuple[int, int]:
    """The first recorded step (>= `first`) and the index of its first episode that called a
    tool and then answered."""
    for step in rundir.trajectory_steps(run):
        if step < first:
            continue
        for record in rundir.read_trajectories(run, step):
            episode = record.get("episode") or {}
            if episode.get("tool_calls") and episode.get("stop_reason") == "answered":
                return step, record["index"]
    raise SystemExit(f"{run}: no recorded episode with a tool call (is it a data.environment run?)")


def main(run: str, out: str) -> None:
    run_dir, out_dir = Path(run), Path(out)
    step, index = episode_step(run_dir)
    app, view = open_inspector(run_dir, step, index, size=(1300, 700))
    view.set_quantity("advantage")
    camera = Camera(app, out_dir)
    camera.shot(view, "inspector-episode.png")
    print(f"step {step} episode {index}: {out_dir}/inspector-episode.png; {view.summary.text()}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
