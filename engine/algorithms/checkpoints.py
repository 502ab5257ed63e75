"""A trainer's checkpoints: the adapter (peft format) beside the optimizer, scheduler,
RNG states, step and data position, so that a resumed run continues exactly.

A checkpoint is written to step_N.tmp and renamed, and deleted by renaming to a .tmp
name first: a kill at any moment leaves every checkpoint folder complete or named .tmp
(which resume ignores). Its files and folder are flushed to the disk (fsync) before the
rename, so a power cut cannot leave a complete-looking checkpoint with empty files
after the older ones were pruned. `self` is the Trainer (engine/algorithms/base.py).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from engine.run import rundir
from engine.distributed.launch import checkpoint_world_size_problem
from engine.run.failures import storage_error

if TYPE_CHECKING:
    from engine.algorithms.base import Trainer

__all__ = ["save_checkpoint", "load_checkpoint", "rank_random_state", "WorldSizeMismatch"]


class WorldSizeMismatch(ValueError):
    """A checkpoint written by a run in N processes, resumed in another number."""


def rank_random_state(self: "Trainer") -> dict:
    """This process's random states: what differs between the ranks of a run."""
    return {
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "python_rng": random.getstate(),
        "sample_generator": self.sample_generator.get_state(),
    }


def _set_rank_random_state(self: "Trainer", state: dict) -> None:
    torch.set_rng_state(state["torch_rng"])
    if state["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    random.setstate(state["python_rng"])
    if state.get("sample_generator") is not None:
        self.sample_generator.set_state(state["sample_generator"])


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


def _write_checkpoint(self: "Trainer", tmp: Path, adapter, optimizer, ranks: list) -> None:
    self.model.save_pretrained(tmp, state_dict=adapter)
    torch.save({
        "optimizer": self.optimizer.state_dict() if optimizer is None else optimizer,
        "sharded": optimizer is not None,
        "scheduler": self.scheduler.state_dict(),
        **ranks[0],  # rank 0's (and a one-process run's) at the top level, as before
        "ranks": ranks,
        "generator": self.generator.get_state(),
        "extra": self.extra_state(),
        "scaler": self.scaler.state_dict(),
    }, tmp / "trainer_state.pt")
    state = {"step": self.step, "data_position": self.stream.position,
             "nonfinite_steps": self.nonfinite_steps, "time": time.time(), "world_size": self.world.size}
    (tmp / rundir.CHECKPOINT_STATE).write_text(json.dumps(state))
    fsync_folder(tmp)


def save_checkpoint(self: "Trainer") -> Path:
    """Adapter (peft format) + optimizer, scheduler, RNG, step and data position.
    Written to step_N.tmp, then renamed: a checkpoint on disk is always complete.
    With several processes every rank calls this: their random states are gathered and
    rank 0 writes them all, so the checkpoint alone resumes every rank.
    A checkpoint is deleted (replaced, or pruned past save_total_limit) by renaming
    it to a .tmp name first, so a kill at any moment leaves every checkpoint folder
    either complete or named .tmp (which resume ignores, and the next save removes)."""
    ranks = self.world.gather_objects(rank_random_state(self))
    adapter = optimizer = None
    if self.sharded_layers:  # whole tensors gathered from the shards (every process takes part)
        from engine.distributed.sharding import full_adapter_state, full_optimizer_state

        adapter = full_adapter_state(self.model)
        optimizer = full_optimizer_state(self.trained_holder(), self.optimizer)
    final = rundir.checkpoint_dir(self.run_dir, self.step)
    if not self.world.is_main:
        return final
    tmp = final.with_name(final.name + ".tmp")
    for stale in final.parent.glob("step_*.tmp"):  # left by a killed engine
        shutil.rmtree(stale, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        _write_checkpoint(self, tmp, adapter, optimizer, ranks)
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
    for old in rundir.complete_checkpoints(self.run_dir)[: -self.cfg.save_total_limit]:
        _discard_checkpoint(old)
    return final


def _apply_optimizer_settings(self: "Trainer") -> None:
    """The preset's AdamW settings over those the loaded optimizer and scheduler states
    carry, at the schedule's position: a fork (or a resume) with --set
    training.learning_rate (weight_decay, adam_beta1/2) trains with the new value. With
    the same settings these are the very values the checkpoint had (LambdaLR's formula)."""
    cfg = self.cfg
    self.scheduler.base_lrs = [cfg.learning_rate for _ in self.optimizer.param_groups]
    step = self.scheduler.last_epoch
    lrs = [base * rule(step) for rule, base in zip(self.scheduler.lr_lambdas, self.scheduler.base_lrs)]
    for group, lr in zip(self.optimizer.param_groups, lrs):
        group.update(lr=lr, initial_lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                     weight_decay=cfg.weight_decay)
    self.scheduler._last_lr = lrs


def load_checkpoint(self: "Trainer", folder: Path) -> None:
    """Every rank reads the same checkpoint and takes its own random states from it. A
    different number of processes is refused: the ranks' sampling streams and shares of
    the batch would not continue the run."""
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    problem = checkpoint_world_size_problem(folder, self.world.size)
    if problem:
        raise WorldSizeMismatch(problem)
    info = json.loads((folder / rundir.CHECKPOINT_STATE).read_text())
    state = torch.load(folder / "trainer_state.pt", map_location="cpu", weights_only=False)
    if state.get("sharded", False) != bool(self.sharded_layers):
        saved = "true" if state.get("sharded") else "false"
        raise ValueError(f"{folder.name} was written with training.fsdp: {saved}; resume with the same "
                         f"(--set training.fsdp={saved})")
    if self.sharded_layers:  # each process takes its shards of the whole tensors
        from engine.distributed.sharding import load_adapter_state, load_optimizer_state

        load_adapter_state(self.model, load_peft_weights(str(folder), device="cpu"))
        load_optimizer_state(self.trained_holder(), self.optimizer, state["optimizer"])
    else:
        set_peft_model_state_dict(self.model, load_peft_weights(str(folder), device=str(self.device)))
        self.optimizer.load_state_dict(state["optimizer"])
    self.scheduler.load_state_dict(state["scheduler"])
    _apply_optimizer_settings(self)
    ranks = state.get("ranks") or [state]  # a checkpoint from before several processes
    _set_rank_random_state(self, ranks[self.world.rank])
    self.generator.set_state(state["generator"])
    self.load_extra_state(state.get("extra", {}))
    if state.get("scaler"):
        self.scaler.load_state_dict(state["scaler"])
    self.step = info["step"]
    self.stream.position = info["data_position"]
    self.nonfinite_steps = info["nonfinite_steps"]
