"""`rl-engine fork RUN_DIR`: a new run that starts from one of a run's checkpoints, with
some settings changed.

    rl-engine fork RUN_DIR [--checkpoint step_N] [--run-dir NEW] [--set key=value ...]
                           [--quiet] [--nproc-per-node N [--gpus LIST]]

The fork is a new run folder (default `runs/<parent>-fork-<step>-<timestamp>`) whose
preset.yaml is the parent's with the `--set` overrides, and which continues from the
checkpoint (default the newest complete one) exactly as `rl-engine resume` would:
adapter, optimizer, scheduler, random states, data position and step. Its steps go on
numbering from the checkpoint's step, so its metrics line up with the parent's by step;
with no `--set` its steps are the very steps the parent took after that checkpoint. Its
`run_started` event carries `parent`: {`run` (the parent's folder, absolute),
`checkpoint` (folder name), `step`}.

Refused (exit status 2): no such run or checkpoint (the available ones are listed), a
`--set` that changes what a checkpoint cannot carry (the algorithm, the base model, the
adapter's rank or target modules), a max_steps not past the checkpoint's step, and a
target folder that already holds a run. The planning is here (torch-free: the window's
fork dialog uses it); the fork's training process is engine/commands/train.py's `cmd_fork`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from engine.run import rundir
from engine.run.failures import NoSuchCheckpoint, named_checkpoint
from engine.preset.schema import Preset, load_preset
from engine.foundation.errors import PresetError

EXIT_INVALID = 2

__all__ = ["ForkError", "add_fork_parser", "find_checkpoint", "carried_field_problems", "carried_set_problem",
           "default_fork_dir", "fork_parent", "plan_fork"]


class ForkError(ValueError):
    """Bad input to a fork; the message says what to change (exit status 2)."""


# What a checkpoint fixes: changing one of these would leave weights or state that do not
# fit. (field path, getter, why)
CARRIED_FIELDS = (
    ("algorithm.name", lambda p: p.algorithm.name,
     "the checkpoint's optimizer state (and PPO's value head) belong to the algorithm that wrote it"),
    ("model.name_or_path", lambda p: p.model.name_or_path,
     "the checkpoint's adapter was trained on the parent's base model and fits no other"),
    ("model.lora.r", lambda p: p.model.lora.r,
     "the adapter's matrices have the parent's rank; weights of one rank cannot be loaded at another"),
    ("model.lora.target_modules", lambda p: p.model.lora.target_modules,
     "the adapter holds weights for the parent's modules only"),
)


def find_checkpoint(run_dir: Path, name: str | None = None) -> Path:
    """The complete checkpoint `name` names (step_N, step_000050 or N), or the newest one;
    ForkError listing the available ones when there is none such."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ForkError(f"{run_dir}: no such run folder")
    if not (run_dir / rundir.PRESET_FILE).exists():
        raise ForkError(f"{run_dir} has no {rundir.PRESET_FILE}: not a run folder")
    try:
        return named_checkpoint(run_dir, name, "to fork from")
    except NoSuchCheckpoint as exc:
        raise ForkError(str(exc)) from None


def checkpoint_step(checkpoint: Path) -> int:
    return int(json.loads((checkpoint / rundir.CHECKPOINT_STATE).read_text())["step"])


def carried_field_problems(parent: Preset, fork: Preset) -> list[str]:
    """What the fork's preset changes that the parent's checkpoint cannot carry, one
    message a field (naming it, both values and why)."""
    problems = []
    for path, get, why in CARRIED_FIELDS:
        before, after = get(parent), get(fork)
        if before != after:
            problems.append(f"--set {path}: {before!r} -> {after!r} cannot be forked: {why}; "
                            "start a new run for that (rl-engine run)")
    return problems


def carried_set_problem(sets: list[str], parent: Preset) -> str | None:
    """For `--set` items that made the parent's preset invalid: when one sets a field the
    checkpoint fixes (a --set of the algorithm makes the parent's other algorithm fields
    unknown), the one thing that matters, else None."""
    keys = {item.partition("=")[0].strip() for item in sets}
    for path, get, why in CARRIED_FIELDS:
        if path in keys:
            return (f"--set {path}: the parent's is {get(parent)!r} and cannot be changed in a fork: {why}; "
                    "start a new run for that (rl-engine run)")
    return None


def default_fork_dir(parent: Path, step: int) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{Path(parent).resolve().name}-fork-{step}-{stamp}"


def fork_parent(parent: Path, checkpoint: Path, step: int) -> dict:
    """The `parent` field of the fork's run_started event."""
    return {"run": str(Path(parent).resolve()), "checkpoint": checkpoint.name, "step": step}


def plan_fork(args) -> tuple[Preset, Path, Path, dict]:
    """(the fork's preset, the parent's checkpoint, the fork's folder, its `parent`
    field) for the parsed arguments; ForkError / PresetError for bad input."""
    from engine.distributed.launch import checkpoint_world_size_problem, launched_by_torchrun, launched_rank
    from engine.preset.paths import absolute_preset_paths

    parent_dir = Path(args.parent)
    checkpoint = find_checkpoint(parent_dir, args.checkpoint)
    step = checkpoint_step(checkpoint)
    if launched_by_torchrun() and not args.run_dir:
        raise ForkError("under torchrun give --run-dir (every process must write to the same folder)")
    run_dir = Path(args.run_dir) if args.run_dir else default_fork_dir(parent_dir, step)
    if run_dir.resolve() == parent_dir.resolve():
        raise ForkError(f"--run-dir {run_dir} is the parent's folder; a fork goes into a new one "
                        f"(to continue the parent itself: rl-engine resume {parent_dir})")
    if launched_rank() == 0 and (run_dir / rundir.EVENTS_FILE).exists():
        raise ForkError(f"--run-dir {run_dir} already holds a run; choose a new folder")
    parent_preset = load_preset(parent_dir / rundir.PRESET_FILE)
    try:
        preset = load_preset(parent_dir / rundir.PRESET_FILE, args.set)
    except PresetError:
        carried = carried_set_problem(args.set, parent_preset)
        if carried:
            raise ForkError(carried) from None
        raise
    problems = carried_field_problems(parent_preset, preset)
    if preset.training.max_steps <= step:
        problems.append(f"training.max_steps {preset.training.max_steps}: the fork starts at step {step} (the "
                        f"checkpoint's) and would train nothing; give more, e.g. --set "
                        f"training.max_steps={max(2 * step, step + 1)}")
    launching = bool(args.nproc_per_node) and not launched_by_torchrun()
    size = args.nproc_per_node if launching else int(os.environ.get("WORLD_SIZE", "1"))
    world = checkpoint_world_size_problem(checkpoint, size or 1)
    if world:
        problems.append(world.replace("this resume", "this fork").replace("Resume it", "Fork it"))
    if problems:
        raise ForkError("\n  ".join(problems))
    # Paths in the preset (prompt file, custom rewards, reward models) as the parent
    # resolved them: the fork's preset.yaml must find them from its own folder too.
    preset = absolute_preset_paths(preset, parent_dir.resolve())
    return preset, checkpoint, run_dir, fork_parent(parent_dir, checkpoint, step)


def add_fork_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("fork", help="a new run from a run's checkpoint, with settings changed",
                       description="Start a new run folder from a run's checkpoint (adapter, optimizer, scheduler, "
                                   "random states, data position, step), with --set overrides of its preset.")
    p.add_argument("parent", metavar="RUN_DIR", help="the run to fork")
    p.add_argument("--checkpoint", metavar="step_N", help="which checkpoint (default: the newest complete one)")
    p.add_argument("--run-dir", help="where to write the fork (default: runs/PARENT-fork-STEP-TIMESTAMP)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field of the parent's preset, e.g. --set training.learning_rate=5e-4")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--nproc-per-node", type=int, default=0, metavar="N",
                   help="train in N processes under torchrun (as many as wrote the checkpoint)")
    p.add_argument("--gpus", default="", metavar="LIST", help="the GPUs the processes use (CUDA_VISIBLE_DEVICES)")
    return p
