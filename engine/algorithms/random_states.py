"""The random states a run depends on, so that a checkpoint or an out-of-memory retry
puts every one back: the process-wide ones (torch's, CUDA's, Python's `random`) and the
trainer's two generators.

`generator` draws what every rank must draw alike (PPO's mini-batch order);
`sample_generator` samples completions and differs between ranks (in one process it is
the same generator).
"""

from __future__ import annotations

import random

import torch

__all__ = ["RandomStates", "seed_process", "process_state", "set_process_state"]


def seed_process(seed: int) -> None:
    """Seed torch and Python's `random` (before the model loads: LoRA's initial weights
    come from torch's generator)."""
    torch.manual_seed(seed)
    random.seed(seed)


def process_state() -> dict:
    """The process-wide random states: torch's, CUDA's (None without CUDA), Python's."""
    return {
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "python_rng": random.getstate(),
    }


def set_process_state(state: dict) -> None:
    torch.set_rng_state(state["torch_rng"])
    if state["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    random.setstate(state["python_rng"])


class RandomStates:
    """The trainer's generators, seeded from the preset's seed (and the rank).

    Example:
        >>> one = RandomStates(seed=0, device=torch.device("cpu"))
        >>> one.sample_generator is one.generator
        True
        >>> two = RandomStates(seed=0, device=torch.device("cpu"), rank=1, world_size=2)
        >>> two.sample_generator is two.generator
        False
    """

    # An odd prime times the rank: the ranks' sampling seeds stay apart for any seed.
    RANK_SEED_STRIDE = 1_000_003

    def __init__(self, seed: int, device: torch.device, rank: int = 0, world_size: int = 1):
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.sample_generator = self.generator
        if world_size > 1:
            self.sample_generator = torch.Generator(device=device).manual_seed(seed + self.RANK_SEED_STRIDE * rank)

    def rank_state(self) -> dict:
        """This process's random states: what differs between the ranks of a run (a
        checkpoint keeps every rank's, under these keys)."""
        return {**process_state(), "sample_generator": self.sample_generator.get_state()}

    def set_rank_state(self, state: dict) -> None:
        set_process_state(state)
        if state.get("sample_generator") is not None:
            self.sample_generator.set_state(state["sample_generator"])
