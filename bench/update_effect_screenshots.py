"""Screenshots of the update's effect (issue 28): a grpo-sort rollout in the inspector coloured
by its change after the update (Δ log p), the advantage drawn beside it, and the dashboard's
update plots. The step shown is the recorded one, among the first 100, whose update moved
the recorded tokens most (update/change_abs_mean).

    .venv/bin/rl-engine run presets/grpo-sort.yaml --run-dir runs/full-grpo-sort
    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/update_effect_screenshots.py runs/full-grpo-sort docs/screenshots
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.camera import Camera, open_inspector  # noqa: E402

from engine.run import rundir  # noqa: E402


def most_moved_step(run: Path, last: int = 100) -> int:
    """The recorded step among the first `last` with the largest update/change_abs_mean."""
    recorded = set(rundir.trajectory_steps(run))
    events = (json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip())
    moved = {e["step"]: e["update/change_abs_mean"] for e in events
             if e.get("type") == "metrics" and e.get("update/change_abs_mean") is not None}
    candidates = [s for s in moved if s in recorded and s <= last]
    if not candidates:
        raise SystemExit(f"{run}: no recorded step with update/* metrics (training.record_update_effect off?)")
    return max(candidates, key=moved.get)


def main(run: str, out: str) -> None:
    run_dir, out_dir = Path(run), Path(out)
    step = most_moved_step(run_dir)
    app, view = open_inspector(run_dir, step, 0)
    view.set_quantity("logprob_change")
    Camera(app, out_dir).shot(view, "inspector-update-effect.png")
    print(f"step {step}: {out_dir}/inspector-update-effect.png; {view.summary.text()}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
