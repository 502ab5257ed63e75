"""Screenshots of a process-supervised rollout in the inspector (issue 25): the first
recorded rollout of a grpo-sort-process run whose steps go from right to wrong, on the
Trajectory page (tokens coloured by advantage, a badge at each step's end) and its group
on the Group page.

    .venv/bin/rl-engine run presets/grpo-sort-process.yaml --run-dir runs/full-grpo-sort-process
    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/process_screenshots.py runs/full-grpo-sort-process docs/screenshots
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.camera import Camera, open_inspector  # noqa: E402

from engine.run import rundir  # noqa: E402
from workbench.inspector.view import GROUP_PAGE  # noqa: E402


def right_then_wrong(run: Path, first_step: int = 100) -> tuple[int, int]:
    """(step, index) of the first recorded rollout from `first_step` on whose sort_steps scores
    start right and then go wrong, in a group whose advantages are not all 0."""
    for step in rundir.trajectory_steps(run):
        if step < first_step:
            continue
        records = rundir.read_trajectories(run, step)
        if all(set(r["advantage"]) == {0.0} for r in records):
            continue
        for record in records:
            scores = record.get("steps", {}).get("sort_steps", {}).get("scores", [])
            if len(scores) >= 3 and scores[0] == 1.0 and 0.0 in scores:
                return step, record["index"]
    raise SystemExit(f"no recorded rollout in {run} goes from right to wrong")


def main(run: str, out: str) -> None:
    run_dir, out_dir = Path(run), Path(out)
    step, index = right_then_wrong(run_dir)
    app, view = open_inspector(run_dir, step, index)
    view.select_token(2)
    camera = Camera(app, out_dir)
    camera.shot(view, "inspector-process-steps.png")
    view.pages.setCurrentIndex(GROUP_PAGE)
    camera.shot(view, "inspector-process-group.png")
    print(f"step {step}, rollout {index}: {out_dir}/inspector-process-steps.png, inspector-process-group.png")


if __name__ == "__main__":
    main(*sys.argv[1:3])
