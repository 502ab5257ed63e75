"""The processes of a run: who this one is, and the few collectives the trainers need.

A run started by `torchrun` (or `rl-engine run --nproc-per-node N`, which starts
torchrun) has RANK, WORLD_SIZE and LOCAL_RANK in its environment: `init_world` then
joins the process group (NCCL on CUDA, gloo on a CPU). A run started plainly is a
World of one with no process group, and every collective here is a no-op, so the
trainers call them unconditionally.

Data parallel, as the trainers use it (docs/architecture.md, "Several processes"):
every rank takes the same prompts of a step, samples its share of them, and the
rollouts and rewards are gathered so that every rank holds the whole batch; each rank
runs the update's passes over its own rows (`share`), DDP averages the LoRA gradients,
and per-row results (logprobs, ratios) are combined with `combine_rows` so that the
metrics every rank computes are those of the whole batch. Rank 0 alone writes the run
directory.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from engine.distributed.launch import launched_by_torchrun

__all__ = ["World", "TrainedModules", "init_world", "launched_by_torchrun"]

# How long a collective waits for a slow rank (evaluation runs on rank 0 alone while
# the others wait at the next collective) before it is an error.
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=int(os.environ.get("RL_ENGINE_COLLECTIVE_TIMEOUT_MIN", "60")))


@dataclass
class World:
    """This process's place in the run. `backend` None: one process, no process group."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str | None = None
    # (host, pid) of every rank, gathered when the group forms: names a rank that died.
    processes: list[tuple[str, int]] = field(default_factory=list)

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        """Where collectives put their tensors: the rank's GPU under NCCL, else the CPU."""
        return torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")

    # ------------------------------------------------------------ row shares

    def share(self, rows: int, unit: int = 1, rank: int | None = None) -> slice:
        """The rows of a batch of `rows` that this rank (or `rank`) runs, in whole units (a
        GRPO group, a DPO pair): contiguous, rank 0 first, sizes differing by at most a unit.

        input:  rows 12, unit 3 (4 groups), 2 ranks   output: rank 0 slice(0, 6), rank 1 slice(6, 12)
        """
        rank = self.rank if rank is None else rank
        units = rows // unit
        start, stop = units * rank // self.size, units * (rank + 1) // self.size
        return slice(start * unit, stop * unit)

    # ------------------------------------------------------------ collectives

    def sum_floats(self, values: list[float]) -> list[float]:
        """Each value summed over the ranks (float64, so a sum of shares is exact enough
        to equal one process's total)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def sum_dict(self, values: dict[str, float]) -> dict[str, float]:
        """sum_floats over a dict's values; every rank must hold the same keys."""
        keys = sorted(values)
        return dict(zip(keys, self.sum_floats([values[k] for k in keys])))

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on any (a stop that reached one rank)."""
        if not self.distributed:
            return bool(flag)
        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def combine_rows(self, tensor: torch.Tensor, owned) -> torch.Tensor:
        """`tensor` (rows first) with every row taken from the rank that owns it: rows
        outside `owned` (a slice, or a bool mask over the rows) are zeroed and the
        ranks' tensors summed. Each row is owned by exactly one rank, so the result is
        bit-equal to the owner's values (x + 0 = x). In place; returns `tensor`."""
        if not self.distributed:
            return tensor
        keep = torch.zeros(tensor.shape[0], dtype=torch.bool, device=tensor.device)
        keep[owned] = True
        tensor.mul_(keep.view(-1, *([1] * (tensor.dim() - 1))).to(tensor.dtype))
        moved = tensor.to(self.device)
        dist.all_reduce(moved, op=dist.ReduceOp.SUM)
        tensor.copy_(moved)
        return tensor

    def gather_objects(self, obj) -> list:
        """Every rank's `obj` (picklable), in rank order."""
        if not self.distributed:
            return [obj]
        out = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj):
        """Rank 0's `obj` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    # ------------------------------------------------------------ gradients

    def data_parallel(self, modules: list[torch.nn.Module]):
        """A DistributedDataParallel over `modules` (the LoRA model, PPO's value head), or
        None for one process (or when FSDP2 shards everything trained). Only trainable parameters are DDP's: the frozen base
        weights are neither broadcast nor reduced (every rank loads the same ones). The
        passes that need gradients run through it (`Trainer.completion_logits`)."""
        if not self.distributed:
            return None
        from torch.nn.parallel import DistributedDataParallel

        from torch.distributed.tensor import DTensor

        holder = TrainedModules(modules)
        # Frozen weights, and the shards FSDP2 reduces itself (sharding.py), are not DDP's.
        ignored = [name for name, p in holder.named_parameters() if not p.requires_grad or isinstance(p, DTensor)]
        if len(ignored) == len(list(holder.parameters())):
            return None  # everything trained is sharded: FSDP2 reduces all of it
        ignored += [name for name, _ in holder.named_buffers()]
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(holder, ignored)
        # device_ids None: the inputs are not moved (they are where the model is). Buffers
        # are ignored above: rotary tables are the same everywhere, nothing to broadcast.
        return DistributedDataParallel(holder, device_ids=None)

    @staticmethod
    def no_sync(ddp, sync: bool):
        """The context for one micro-batch's forward and backward: gradients are reduced
        across ranks only on the last micro-batch of an optimizer step (`sync`)."""
        return contextlib.nullcontext() if ddp is None or sync else ddp.no_sync()

    def close(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()


class TrainedModules(torch.nn.Module):
    """What DDP wraps: the trained modules, and a forward that runs the function given
    to it (a teacher-forced pass), so DDP prepares its gradient reduction for the
    backward pass that follows."""

    def __init__(self, modules: list[torch.nn.Module]):
        super().__init__()
        self.trained = torch.nn.ModuleList(modules)

    def forward(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)


def init_world(device: str = "auto") -> World:
    """Join the process group when torchrun started this process; a World of one else.
    `device` is the preset's model.device: CUDA gives NCCL and one GPU per local rank."""
    if not launched_by_torchrun():
        return World()
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(
                f"process {local_rank} of this machine has no GPU: {torch.cuda.device_count()} visible; "
                f"use --nproc-per-node {max(torch.cuda.device_count(), 1)} (one process a GPU) or model.device: cpu")
        torch.cuda.set_device(local_rank)
    backend = "nccl" if use_cuda else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT)
    world = World(rank=rank, size=size, local_rank=local_rank, backend=backend)
    world.processes = world.gather_objects((socket.gethostname(), os.getpid()))
    return world
