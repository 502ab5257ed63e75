"""Which device a run will use, found without torch, and the memory note for it.

The engine resolves `model.device: auto` with torch (CUDA when `torch.cuda.is_available()`,
else the CPU: engine/model/loading.py's resolve_device). The window must not import torch,
so it looks for what a GPU driver leaves on the machine: an NVIDIA driver's GPU entries
in /proc or its device files, or ROCm's /dev/kfd, and honours CUDA_VISIBLE_DEVICES hiding
every GPU. A torch built without CUDA on a machine with a GPU would still train on the
CPU: the note says "GPU found" so the user can tell what it assumed.
"""

from __future__ import annotations

import glob
import os
from functools import lru_cache

GPU_MARKERS = ("/proc/driver/nvidia/gpus/*", "/dev/nvidia[0-9]*", "/dev/kfd")
DTYPE_WORDS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


@lru_cache(maxsize=1)
def gpu_found() -> bool:
    """Whether this machine shows a GPU the engine's CUDA could use (looked for once)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return any(glob.glob(pattern) for pattern in GPU_MARKERS)


def run_device(setting: str, found: bool) -> str:
    """'cuda', 'cpu' or 'mps': where model.device `setting` puts the run, `found` whether a
    GPU was found (auto: CUDA when one is, else the CPU, as the engine resolves it).

    >>> run_device("auto", False), run_device("auto", True), run_device("cuda:1", False), run_device("mps", True)
    ('cpu', 'cuda', 'cuda', 'mps')
    """
    if setting == "auto":
        return "cuda" if found else "cpu"
    return "cuda" if setting.startswith("cuda") else setting


def dtype_word(dtype: str, device: str, four_bit: bool = False) -> str:
    """The weights' precision on `device` as the engine picks it (auto: bf16 on CUDA, fp32 elsewhere).

    >>> dtype_word("auto", "cpu"), dtype_word("auto", "cuda"), dtype_word("float16", "cpu")
    ('fp32', 'bf16', 'fp16')
    >>> dtype_word("auto", "cuda", four_bit=True)
    '4-bit'
    """
    if four_bit:
        return "4-bit"
    if dtype == "auto":
        return "bf16" if device == "cuda" else "fp32"
    return DTYPE_WORDS.get(dtype, dtype)


def with_units(breakdown: str, amount: str) -> str:
    """An estimate's breakdown with the unit its numbers are in (the total's).

    >>> with_units("update: weights 0.9, optimizer 0.1; with gradient checkpointing", "5.8 GiB")
    'update phase, in GiB: weights 0.9, optimizer 0.1; with gradient checkpointing'
    """
    phase, _, parts = breakdown.partition(": ")
    unit = amount.split()[-1] if amount.split() else ""
    return f"{phase} phase, in {unit}: {parts}" if parts else breakdown


def memory_note(cpu, gpu, setting: str, dtype: str, four_bit: bool, found: bool, processes: int = 1) -> str:
    """The memory note, leading with the device the run will use (`cpu`, `gpu`: the
    estimates there, MemoryEstimate's `amount()` and `breakdown()`): on the CPU its RAM,
    on a GPU its memory and then the CPU's figure."""
    needs = f"each of {processes} processes needs" if processes > 1 else "needs"
    device = run_device(setting, found)
    if device != "cuda":
        where = "the Mac's GPU (MPS), in shared RAM" if device == "mps" else "the CPU"
        why = "no GPU found, " if setting == "auto" else ""
        return (f"{needs} about {cpu.amount()} of RAM on {where} ({why}{dtype_word(dtype, device)}); "
                f"{with_units(cpu.breakdown(), cpu.amount())}")
    why = "GPU found, " if setting == "auto" else ""
    return (f"{needs} about {gpu.amount()} of GPU memory ({why}{dtype_word(dtype, device, four_bit)}); "
            f"{with_units(gpu.breakdown(), gpu.amount())}. On the CPU: about {cpu.amount()} of RAM")
