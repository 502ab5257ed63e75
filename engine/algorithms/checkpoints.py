"""A trainer's checkpoints: the adapter (peft format) beside the optimizer, scheduler,
RNG states, step and data position, so that a resumed run continues exactly.

A checkpoint is made of the trainer's parts (`CheckpointParts`: the policy's model, the
optimizer part, the random states, the processes) and its `Progress`; it never sees the
trainer itself. Its files:

    step_N/adapter_model.safetensors, adapter_config.json   the adapter (peft)
    step_N/trainer_state.pt    optimizer, sharded, scheduler, scaler, generator, extra
                               (an algorithm's own modules: PPO's value head), each
                               rank's random states under `ranks`, rank 0's also at the
                               top level (as checkpoints from one process have them)
    step_N/state.json          step, data_position, nonfinite_steps, time, world_size

A checkpoint is written to step_N.tmp and renamed, and deleted by renaming to a .tmp
name first: a kill at any moment leaves every checkpoint folder complete or named .tmp
(which resume ignores). Its files and folder are flushed to the disk (fsync) before the
rename, so a power cut cannot leave a complete-looking checkpoint with empty files
after the older ones were pruned.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.algorithms.optimization import Optimization
from engine.algorithms.random_states import RandomStates
from engine.distributed.launch import checkpoint_world_size_problem
from engine.distributed.world import World
from engine.run import rundir
from engine.run.failures import storage_error

__all__ = ["CheckpointParts", "Progress", "save_checkpoint", "load_checkpoint", "WorldSizeMismatch",
           "TRAINER_STATE"]

TRAINER_STATE = "trainer_state.pt"


class WorldSizeMismatch(ValueError):
    """A checkpoint written by a run in N processes, resumed in another number."""


@dataclass
class Progress:
    """Where a run stands (a checkpoint's state.json, besides its time and world size)."""

    step: int
    data_position: int
    nonfinite_steps: int


@dataclass
class CheckpointParts:
    """The parts of a trainer a checkpoint holds. `sharded`: under training.fsdp with
    several processes, one module holding every trained module (it names the sharded
    optimizer state); None otherwise."""

    model: torch.nn.Module  # the peft model: its adapter is saved
    optimization: Optimization
    random_states: RandomStates
    world: World
    sharded: torch.nn.Module | None = None


def _discard_checkpoint(folder: Path) -> None:
    """Delete a checkpoint folder so that no moment of it looks like a complete,
    half-deleted checkpoint: renamed to a .tmp name first (resume ignores those)."""
    doomed = folder.with_name(folder.name + ".old.tmp")
    shutil.rmtree(doomed, ignore_errors=True)
    folder.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _fsync(path: Path) -> None:
    """Flush a file, or a folder's entries (a rename inside it), to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot fsync a folder; the files are what matter
        if not path.is_dir():
            raise
    finally:
        os.close(fd)


def fsync_folder(folder: Path) -> None:
    """Flush every file in `folder` (recursively), then the folder itself."""
    for path in sorted(folder.rglob("*")) + [folder]:
        _fsync(path)


def trainer_state(parts: CheckpointParts, ranks: list[dict], extra: dict, optimizer: dict | None = None) -> dict:
    """trainer_state.pt's contents. `ranks`: every rank's random states (rank order);
    `optimizer`: the whole optimizer state gathered from the shards (sharded runs)."""
    held = parts.optimization.state_dict(optimizer)
    return {
        "optimizer": held["optimizer"],
        "sharded": optimizer is not None,
        "scheduler": held["scheduler"],
        **ranks[0],  # rank 0's (and a one-process run's) at the top level, as before
        "ranks": ranks,
        "generator": parts.random_states.generator.get_state(),
        "extra": extra,
        "scaler": held["scaler"],
    }


def _write_checkpoint(tmp: Path, model, adapter: dict | None, state: dict, progress: Progress, world_size: int) -> None:
    model.save_pretrained(tmp, state_dict=adapter)
    torch.save(state, tmp / TRAINER_STATE)
    info = {"step": progress.step, "data_position": progress.data_position,
            "nonfinite_steps": progress.nonfinite_steps, "time": time.time(), "world_size": world_size}
    (tmp / rundir.CHECKPOINT_STATE).write_text(json.dumps(info))
    fsync_folder(tmp)


def save_checkpoint(parts: CheckpointParts, run_dir: Path, progress: Progress, extra: dict, keep: int) -> Path:
    """Adapter (peft format) + optimizer, scheduler, RNG, step and data position, in
    RUN_DIR/checkpoints/step_N; the newest `keep` checkpoints stay.
    Written to step_N.tmp, then renamed: a checkpoint on disk is always complete.
    With several processes every rank calls this: their random states are gathered and
    rank 0 writes them all, so the checkpoint alone resumes every rank.
    A checkpoint is deleted (replaced, or pruned past `keep`) by renaming it to a .tmp
    name first, so a kill at any moment leaves every checkpoint folder either complete
    or named .tmp (which resume ignores, and the next save removes)."""
    world = parts.world
    ranks = world.gather_objects(parts.random_states.rank_state())
    adapter = optimizer = None
    if parts.sharded is not None:  # whole tensors gathered from the shards (every process takes part)
        from engine.distributed.sharding import full_adapter_state, full_optimizer_state

        adapter = full_adapter_state(parts.model)
        optimizer = full_optimizer_state(parts.sharded, parts.optimization.optimizer)
    final = rundir.checkpoint_dir(run_dir, progress.step)
    if not world.is_main:
        return final
    tmp = final.with_name(final.name + ".tmp")
    for stale in final.parent.glob("step_*.tmp"):  # left by a killed engine
        shutil.rmtree(stale, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        state = trainer_state(parts, ranks, extra, optimizer)
        _write_checkpoint(tmp, parts.model, adapter, state, progress, world.size)
    except BaseException as exc:
        # Nothing half-written keeps the space (a full disk, a kill by Ctrl-C), and a
        # refused write names the checkpoint (safetensors' own error names no file).
        shutil.rmtree(tmp, ignore_errors=True)
        refused = storage_error(exc)
        if refused is not None and not refused.filename:
            raise rundir.naming_the_file(refused, final) from exc
        raise
    if final.exists():
        _discard_checkpoint(final)
    tmp.rename(final)
    _fsync(final.parent)  # the rename itself
    for old in rundir.complete_checkpoints(run_dir)[:-keep]:
        _discard_checkpoint(old)
    return final


def load_checkpoint(parts: CheckpointParts, folder: Path, device: torch.device) -> tuple[Progress, dict]:
    """Put a checkpoint's adapter, optimizer, schedule and random states into `parts`
    (the adapter's weights on `device`); returns its Progress and its `extra` (the
    algorithm's own modules' states). Every rank reads the same checkpoint and takes its
    own random states from it. A different number of processes is refused: the ranks'
    sampling streams and shares of the batch would not continue the run."""
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    world = parts.world
    problem = checkpoint_world_size_problem(folder, world.size)
    if problem:
        raise WorldSizeMismatch(problem)
    info = json.loads((folder / rundir.CHECKPOINT_STATE).read_text())
    state = torch.load(folder / TRAINER_STATE, map_location="cpu", weights_only=False)
    if state.get("sharded", False) != (parts.sharded is not None):
        saved = "true" if state.get("sharded") else "false"
        raise ValueError(f"{folder.name} was written with training.fsdp: {saved}; resume with the same "
                         f"(--set training.fsdp={saved})")
    if parts.sharded is not None:  # each process takes its shards of the whole tensors
        from engine.distributed.sharding import load_adapter_state, load_optimizer_state

        load_adapter_state(parts.model, load_peft_weights(str(folder), device="cpu"))
        load_optimizer_state(parts.sharded, parts.optimization.optimizer, state["optimizer"])
    else:
        set_peft_model_state_dict(parts.model, load_peft_weights(str(folder), device=str(device)))
    parts.optimization.load_state_dict(state, with_optimizer=parts.sharded is None)
    ranks = state.get("ranks") or [state]  # a checkpoint from before several processes
    parts.random_states.set_rank_state(ranks[world.rank])
    parts.random_states.generator.set_state(state["generator"])
    progress = Progress(info["step"], info["data_position"], info["nonfinite_steps"])
    return progress, state.get("extra", {})
