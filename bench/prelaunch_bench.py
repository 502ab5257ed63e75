"""How long the set-up form's pre-launch checks take on every bundled preset.

    python bench/prelaunch_bench.py [--repeats 3] [--engine]

The window runs `workbench.setup.checks.prelaunch_checks` on a worker thread after each
edit, and Run waits for it: it generates the data, templates every prompt with the
model's chat template and counts tokens. Each preset is checked in a fresh process
(`cold`: nothing cached, as the first check after opening a preset), then again in the
same process `--repeats` times (`warm`: the data splits cached, as after an edit that
leaves the data alone; the median is printed).

With `--engine`, the engine's own set-up too: seconds from `python -m engine run PRESET`
to its run_started event and to its first metrics (one step, no evaluation; the median
of two launches), the wait after Run once the checks have passed.

Target (hardening issue, round three): under 2 s cold on every bundled preset, on the
2-core CPU. Before the chat template was compiled once, grpo-calculator-tools took
31-86 s (one jinja2 compilation per each of its 5,200 prompts).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TARGET_S = 2.0

_CHILD = """
import json, sys, time
from pathlib import Path
from engine.preset.schema import load_preset
from workbench.setup.checks import prelaunch_checks
path, repeats = Path(sys.argv[1]), int(sys.argv[2])
preset = load_preset(path)
times = []
for _ in range(1 + repeats):
    start = time.perf_counter()
    result = prelaunch_checks(preset, path.parent)
    times.append(time.perf_counter() - start)
print(json.dumps({"times": times, "problems": result.problems}))
"""


def check_times(preset: Path, repeats: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(preset), str(repeats)], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine", action="store_true", help="also time the engine's set-up on each preset")
    args = parser.parse_args()
    presets = sorted((ROOT / "presets").glob("*.yaml"))
    engine = f" {'engine: started s':>18} {'first step s':>13}" if args.engine else ""
    print(f"{'preset':<32} {'cold s':>7} {'warm s':>7} {'problems':>8}{engine}")
    slow = []
    started = time.perf_counter()
    for preset in presets:
        result = check_times(preset, args.repeats)
        cold, warm = result["times"][0], statistics.median(result["times"][1:] or result["times"])
        if cold >= TARGET_S:
            slow.append(preset.name)
        line = f"{preset.name:<32} {cold:7.2f} {warm:7.2f} {len(result['problems']):8d}"
        if args.engine:
            from bench.common import launch_latency

            with tempfile.TemporaryDirectory() as work:
                latency = launch_latency(preset, Path(work), dict(os.environ))
            line += f" {latency['run_started_s']:18.2f} {latency['first_metrics_s']:13.2f}"
        print(line)
    print(f"{len(presets)} presets in {time.perf_counter() - started:.0f} s; target: cold < {TARGET_S:g} s each")
    if slow:
        print(f"over the target: {', '.join(slow)}")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
