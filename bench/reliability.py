"""Kill the engine with SIGKILL at random moments, resume each time, and check that
nothing is lost or corrupted.

    .venv/bin/python bench/reliability.py                 # 20 kills, seed 0
    .venv/bin/python bench/reliability.py --kills 50 --seed 3

A small GRPO preset on the built-in model (CPU, one thread, a checkpoint every
`--save-steps` steps) is first run once without interruption (the reference). Then the
same preset is started and killed with `kill -9` `--kills` times, each time at a random
moment (seeded), in turn: one at a random moment of set-up (imports, model loading), two at
a random moment while training (steps, evaluations, event, trajectory and checkpoint
writes alike), one the moment a checkpoint folder is being written (a new `*.tmp`
folder appears). After each kill the
run is resumed with `rl-engine resume`; a kill before the first checkpoint leaves
nothing to resume from, and `rl-engine resume` starts the run again from step 0 in the
same folder (a "restart"; a kill before preset.yaml was written leaves no run, and it is
started anew with `rl-engine run`). After the last kill the run is resumed to the end.

Checked after every kill and at the end:
- every checkpoint folder under checkpoints/ is complete and loadable (adapter,
  trainer state, state.json); a `.tmp` folder is allowed (a checkpoint being written or
  deleted) only because resume ignores it: resume must never start from one;
- every line of events.jsonl parses (a torn last line right after a kill is counted
  as "torn", and must be gone once the engine has run again);
- the final adapter equals the reference run's, bit for bit (max abs difference over
  every tensor).

Prints the figures and writes them as JSON to bench/out/reliability.json (`--json`).
Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.run import rundir  # noqa: E402  (light: no torch)
from engine.run.failures import can_restart  # noqa: E402  (light: no torch)

OUT = ROOT / "bench" / "out"
CHECKPOINT_FILES = ("adapter_config.json", "adapter_model.safetensors", "trainer_state.pt", rundir.CHECKPOINT_STATE)


def preset_dict(max_steps: int, save_steps: int, seed: int = 0) -> dict:
    """The built-in tiny model, a few prompts a step: a step takes a fraction of a
    second on one CPU thread, so kills land in steps, in evaluations and in
    checkpoint writing alike."""
    return {
        "name": "reliability",
        "model": {"name_or_path": "builtin:tiny", "device": "cpu", "lora": {"r": 4, "alpha": 8.0}},
        "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 14, "epsilon_high": 0.28},
        "data": {"task": "sort", "num_train": 200, "num_eval": 8},
        "rewards": [{"name": "exact_match"}, {"name": "sort_position", "weight": 0.5}],
        "training": {"max_steps": max_steps, "batch_size": 8, "learning_rate": 0.01, "seed": seed,
                     "eval_steps": 0, "save_steps": save_steps, "save_total_limit": 2,
                     "record_rollouts": 2, "log_completions": 4},
    }


def engine_env() -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def engine(*args: str) -> list[str]:
    return [sys.executable, "-m", "engine", *args, "--quiet"]


# --------------------------------------------------------------------- checks


def checkpoint_problem(folder: Path) -> str | None:
    """Why a checkpoint folder is not a complete, loadable checkpoint; None when it is."""
    import torch
    from safetensors.torch import load_file

    missing = [name for name in CHECKPOINT_FILES if not (folder / name).is_file()]
    if missing:
        return f"{folder.name}: missing {', '.join(missing)}"
    try:
        state = json.loads((folder / rundir.CHECKPOINT_STATE).read_text())
        if state["step"] != int(folder.name.split("_")[1]):
            return f"{folder.name}: state.json says step {state['step']}"
        json.loads((folder / "adapter_config.json").read_text())
        load_file(folder / "adapter_model.safetensors")
        torch.load(folder / "trainer_state.pt", map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any failure to load is corruption
        return f"{folder.name}: {type(exc).__name__}: {exc}"
    return None


def inspect_checkpoints(run_dir: Path) -> tuple[list[str], list[str]]:
    """(problems of folders that claim to be checkpoints, names of .tmp leftovers)."""
    folder = run_dir / rundir.CHECKPOINTS_DIR
    problems, leftovers = [], []
    for path in sorted(folder.glob("*")) if folder.is_dir() else []:
        if path.name.endswith(".tmp"):
            leftovers.append(path.name)
            continue
        problem = checkpoint_problem(path)
        if problem:
            problems.append(problem)
    complete = rundir.complete_checkpoints(run_dir)
    problems += [f"complete_checkpoints lists {p.name}" for p in complete if p.name.endswith(".tmp")]
    return problems, leftovers


def event_lines(run_dir: Path) -> tuple[int, int, bool]:
    """(lines, lines that do not parse, whether the last line is torn: no newline)."""
    path = run_dir / rundir.EVENTS_FILE
    if not path.exists():
        return 0, 0, False
    data = path.read_bytes()
    torn = bool(data) and not data.endswith(b"\n")
    lines = data.split(b"\n")
    if torn:
        lines = lines[:-1]  # a reader leaves the partly written last line for later
    bad = 0
    total = 0
    for line in lines:
        if not line.strip():
            continue
        total += 1
        try:
            json.loads(line)
        except ValueError:
            bad += 1
    return total, bad, torn


def adapter_difference(a: Path, b: Path) -> float:
    """Max abs difference between two adapters' tensors (inf when their keys or shapes differ)."""
    from safetensors.torch import load_file

    first, second = load_file(a / "adapter_model.safetensors"), load_file(b / "adapter_model.safetensors")
    if first.keys() != second.keys():
        return float("inf")
    worst = 0.0
    for key, tensor in first.items():
        other = second[key]
        if tensor.shape != other.shape:
            return float("inf")
        worst = max(worst, (tensor.double() - other.double()).abs().max().item() if tensor.numel() else 0.0)
    return worst


# ----------------------------------------------------------------------- runs


# What each kill aims at, in turn: a random moment of set-up (imports, model loading; the
# first kill so lands before the first checkpoint), a random moment while training
# (steps, evaluations, event and trajectory writes, checkpoint saves alike), the moment a
# checkpoint folder is being written, then training again.
KILL_PLAN = ("setup", "training", "checkpoint_writing", "training")


def tmp_folders(run_dir: Path) -> set[tuple[str, int]]:
    folder = run_dir / rundir.CHECKPOINTS_DIR
    found = set()
    for path in folder.glob("*.tmp") if folder.is_dir() else []:
        try:
            found.add((path.name, path.stat().st_ino))
        except OSError:
            pass
    return found


def lifecycle_after(run_dir: Path, offset: int) -> tuple[list[dict], int]:
    records, offset = rundir.read_jsonl(run_dir / rundir.EVENTS_FILE, offset)
    return [r for r in records if r.get("type") in ("run_started", "run_resumed")], offset


def reference_run(work: Path, preset: Path) -> tuple[Path, dict]:
    run = work / "reference"
    shutil.rmtree(run, ignore_errors=True)
    t0 = time.time()
    result = subprocess.run(engine("run", str(preset), "--run-dir", str(run)), cwd=work, env=engine_env(),
                            capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"the reference run failed:\n{result.stderr[-3000:]}")
    events = rundir.read_events(run)
    started = next(e for e in events if e["type"] == "run_started")
    metrics = [e["time"] for e in events if e["type"] == "metrics"]
    step_s = (metrics[-1] - metrics[0]) / max(1, len(metrics) - 1) if len(metrics) > 1 else 0.2
    timing = {"seconds": time.time() - t0, "setup_s": started["time"] - t0, "step_s": step_s}
    return run, timing


def kill_and_resume(work: Path, preset: Path, *, kills: int, seed: int, max_steps: int, timing: dict,
                    log=print) -> tuple[Path, dict]:
    rng = random.Random(seed)
    run = work / "killed"
    shutil.rmtree(run, ignore_errors=True)
    env = engine_env()
    figures = {"kills": 0, "kills_during_setup": 0, "kills_during_training": 0, "kills_during_checkpoint_writing": 0,
               "kills_leaving_a_partial_checkpoint": 0, "resumes": 0, "restarts": 0,
               "resumed_from_partial_checkpoint": 0, "finished_before_the_kill": 0,
               "corrupt_checkpoints": 0, "torn_last_lines": 0}
    problems: list[str] = []
    save_steps = preset_save_steps(preset)
    while True:
        checkpoints = rundir.complete_checkpoints(run)
        if checkpoints:
            cmd = engine("resume", str(run))
            expected = checkpoints[-1].name
            figures["resumes"] += 1
        elif run.exists() and can_restart(run):
            # Killed before the first checkpoint: `rl-engine resume` starts the run again
            # from step 0 in the same folder (its first line says so, and why).
            cmd = engine("resume", str(run))
            expected = None
            figures["restarts"] += 1
        else:
            # Killed before even preset.yaml was written: nothing of the run is there.
            shutil.rmtree(run, ignore_errors=True)
            cmd = engine("run", str(preset), "--run-dir", str(run))
            expected = None
        last = figures["kills"] >= kills
        offset = (run / rundir.EVENTS_FILE).stat().st_size if (run / rundir.EVENTS_FILE).exists() else 0
        stale = tmp_folders(run)
        launched = time.time()
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        phase = None
        if not last:
            phase = KILL_PLAN[figures["kills"] % len(KILL_PLAN)]
            if phase == "setup":
                time.sleep(rng.uniform(0.0, timing["setup_s"]))
            elif phase == "checkpoint_writing":
                # Kill the moment a checkpoint folder is being written (or deleted): a
                # new *.tmp folder (not one left by an earlier kill) appears.
                while proc.poll() is None and time.time() - launched < 600 and not (tmp_folders(run) - stale):
                    time.sleep(0.0005)
            else:
                seen: list[dict] = []
                while not seen and proc.poll() is None and time.time() - launched < 600:
                    found, offset = lifecycle_after(run, offset)
                    seen += found
                    time.sleep(0.005)
                remaining = max(1, max_steps - (int(expected.split("_")[1]) if expected else 0))
                window = min(remaining, 2 * save_steps) * timing["step_s"]
                time.sleep(rng.uniform(0.0, window))
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                figures["kills"] += 1
                figures[f"kills_during_{phase}"] += 1
                bad, leftovers = inspect_checkpoints(run)
                if tmp_folders(run) - stale:
                    figures["kills_leaving_a_partial_checkpoint"] += 1
                if bad:
                    figures["corrupt_checkpoints"] += len(bad)
                    problems += bad
                _total, unreadable, torn = event_lines(run)
                figures["torn_last_lines"] += int(torn)
                if unreadable:
                    problems.append(f"after kill {figures['kills']}: {unreadable} unreadable event lines")
                log(f"kill {figures['kills']:>3}/{kills}: {phase:<18} after {time.time() - launched:5.2f} s, "
                    f"checkpoints {[p.name for p in rundir.complete_checkpoints(run)]}"
                    + (f", leftovers {leftovers}" if leftovers else ""))
                if expected is not None:
                    resumed = [e for e in rundir.read_events(run) if e.get("type") == "run_resumed"]
                    if resumed and resumed[-1].get("time", 0) >= launched and resumed[-1]["checkpoint"] != expected:
                        figures["resumed_from_partial_checkpoint"] += 1
                        problems.append(f"resumed from {resumed[-1]['checkpoint']}, expected {expected}")
                continue
        _out, err = proc.communicate(timeout=1800)
        if expected is not None:
            resumed = [e for e in rundir.read_events(run) if e.get("type") == "run_resumed"]
            if resumed and resumed[-1]["checkpoint"] != expected:
                figures["resumed_from_partial_checkpoint"] += 1
                problems.append(f"resumed from {resumed[-1]['checkpoint']}, expected {expected}")
        if proc.returncode != 0:
            problems.append(f"{' '.join(cmd[3:5])} exited {proc.returncode}: {err.decode(errors='replace')[-2000:]}")
            break
        if not last:
            figures["finished_before_the_kill"] += 1
        events = rundir.read_events(run)
        if events and events[-1].get("type") == "run_finished" and events[-1].get("status") == "done":
            break
        problems.append(f"the run ended without run_finished done: {events[-1] if events else None}")
        break
    figures["problems"] = problems
    return run, figures


def preset_save_steps(preset: Path) -> int:
    import yaml

    return int(yaml.safe_load(preset.read_text())["training"]["save_steps"]) or 1


def measure(kills: int = 20, seed: int = 0, max_steps: int | None = None, save_steps: int = 2,
            work: Path | None = None, log=print) -> dict:
    import yaml

    t0 = time.time()
    work = Path(work) if work is not None else OUT / "reliability"
    work.mkdir(parents=True, exist_ok=True)
    if max_steps is None:
        max_steps = max(12, 2 * kills * save_steps)
    preset = work / "preset.yaml"
    preset.write_text(yaml.safe_dump(preset_dict(max_steps, save_steps), sort_keys=False))
    reference, timing = reference_run(work, preset)
    log(f"reference: {max_steps} steps in {timing['seconds']:.1f} s (set-up {timing['setup_s']:.1f} s, "
        f"{timing['step_s']:.3f} s a step)")
    run, figures = kill_and_resume(work, preset, kills=kills, seed=seed, max_steps=max_steps, timing=timing, log=log)
    problems = figures.pop("problems")
    corrupt, leftovers = inspect_checkpoints(run)
    figures["corrupt_checkpoints"] += len(corrupt)
    problems += corrupt
    lines, unreadable, torn = event_lines(run)
    final = rundir.checkpoint_dir(run, max_steps)
    difference = adapter_difference(rundir.checkpoint_dir(reference, max_steps), final) if final.is_dir() else float("inf")
    figures.update({
        "event_lines": lines, "unreadable_lines": unreadable + int(torn),
        "tmp_leftovers_at_the_end": leftovers,
        "max_adapter_abs_diff": difference if difference != float("inf") else None,
        "adapters_identical": difference == 0.0,
        "steps": max_steps, "save_steps": save_steps, "seed": seed,
        "reference_seconds": round(timing["seconds"], 1), "seconds": round(time.time() - t0, 1),
    })
    if difference != 0.0:
        problems.append(f"the final adapter differs from the reference run's: max abs diff {difference}")
    if unreadable or torn:
        problems.append(f"events.jsonl: {unreadable} unreadable lines, torn last line {torn}")
    figures["problems"] = problems
    figures["ok"] = not problems
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments (default 0)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default max(12, 2 x kills x save-steps))")
    parser.add_argument("--save-steps", type=int, default=2, help="a checkpoint every N steps (default 2)")
    parser.add_argument("--work", type=Path, default=OUT / "reliability", help="run folders go here")
    parser.add_argument("--json", type=Path, default=OUT / "reliability.json", help="figures (JSON)")
    args = parser.parse_args(argv)
    figures = measure(args.kills, args.seed, args.steps, args.save_steps, args.work)
    print()
    print(f"kills                    {figures['kills']} ({figures['kills_during_setup']} in set-up, "
          f"{figures['kills_during_training']} at random while training, "
          f"{figures['kills_during_checkpoint_writing']} while a checkpoint was written; "
          f"{figures['kills_leaving_a_partial_checkpoint']} left a partly written checkpoint)")
    print(f"resumes                  {figures['resumes']} (+ {figures['restarts']} restarts: killed before "
          "the first checkpoint, started again from step 0)")
    print(f"corrupt checkpoints      {figures['corrupt_checkpoints']}")
    print(f"resumed from a partial   {figures['resumed_from_partial_checkpoint']}")
    print(f"unreadable event lines   {figures['unreadable_lines']} of {figures['event_lines']} "
          f"({figures['torn_last_lines']} torn last lines after kills, dropped on resume)")
    print(f"max adapter difference   {figures['max_adapter_abs_diff']} "
          f"({'bit for bit identical' if figures['adapters_identical'] else 'DIFFERENT'} to an uninterrupted run)")
    print(f"time                     {figures['seconds']} s")
    for problem in figures["problems"]:
        print(f"PROBLEM: {problem}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    print(f"figures: {args.json}")
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
