"""How long `rl-engine run` takes to fail on a hub model that is not cached, offline.

    .venv/bin/python bench/offline_hub_bench.py              # 3 runs
    .venv/bin/python bench/offline_hub_bench.py --repeats 5

The engine should give up at once when the hub cannot be reached (HF_HUB_OFFLINE=1, an
empty HF_HOME): no retries, no waiting on timeouts. Each run starts the engine as a user
would, on a preset naming `nobody/not-cached-model`, and prints the wall time from start
to exit, most of which is the engine's imports; the `imports` line is `python -c "import
engine.cli, torch, transformers"` alone, for scale. A run that retries shows as seconds
above it. tests/test_chat_runs.py checks the failure itself (the exit status, `run_failed`
naming `model.name_or_path` and `hf download`); this script only prints figures, and
exits 1 when a run did not end in a `run_failed` naming `model.name_or_path`.
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
MODEL = "nobody/not-cached-model"


def timed(cmd: list[str], env: dict, cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    return time.perf_counter() - started, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   PYTHONUNBUFFERED="1", HF_HOME=str(tmp / "empty_home"), HF_HUB_OFFLINE="1")
        preset = tmp / "preset.yaml"
        preset.write_text(json.dumps({  # JSON is YAML
            "model": {"name_or_path": MODEL}, "training": {"max_steps": 1, "batch_size": 8},
            "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 4},
            "data": {"task": "sort", "num_train": 8, "num_eval": 0}}))

        imports = [timed([sys.executable, "-c", "import engine.cli, torch, transformers"], env, ROOT)[0]
                   for _ in range(args.repeats)]
        failures, bad = [], 0
        for i in range(args.repeats):
            run_dir = tmp / f"run{i}"
            took, result = timed([sys.executable, "-m", "engine.cli", "run", str(preset), "--run-dir", str(run_dir)],
                                 env, tmp)
            events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()] \
                if (run_dir / "events.jsonl").exists() else []
            ok = result.returncode != 0 and bool(events) and events[-1]["type"] == "run_failed" \
                and "model.name_or_path" in events[-1]["message"]
            bad += not ok
            failures.append(took)
            print(f"run {i + 1}: {took:6.2f} s, exit {result.returncode}{'' if ok else '  (NOT the expected failure)'}")

    print(f"\nimports alone     median {statistics.median(imports):6.2f} s  (min {min(imports):.2f}, max {max(imports):.2f})")
    print(f"offline failure   median {statistics.median(failures):6.2f} s  (min {min(failures):.2f}, max {max(failures):.2f})")
    print(f"failure - imports        {statistics.median(failures) - statistics.median(imports):6.2f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
