"""The training algorithms, one module each: `grpo` (with RLOO, REINFORCE++, GSPO), `ppo`,
`dpo`, on the shared `base.Trainer`. `TRAINERS` maps a preset's `algorithm.name` to its
trainer class as "module:Class", imported only when asked for, so importing this package
loads no torch.

Adding an algorithm: its module here, its line in TRAINERS, its config class in
engine/preset/schema.py (docs/architecture.md, "Where to add a new algorithm").
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.algorithms.base import Trainer
    from engine.preset.schema import Preset
    from engine.run.stopping import StopFlag

TRAINERS = {
    "grpo": "engine.algorithms.grpo.trainer:GRPOTrainer",
    "ppo": "engine.algorithms.ppo.trainer:PPOTrainer",
    "dpo": "engine.algorithms.dpo.trainer:DPOTrainer",
}


def trainer_class(name: str) -> type[Trainer]:
    """The trainer class of an algorithm name; a ValueError naming the known ones else.

    >>> trainer_class("sft")
    Traceback (most recent call last):
    ...
    ValueError: algorithm.name: unknown algorithm 'sft'; known: dpo, grpo, ppo
    """
    if name not in TRAINERS:
        raise ValueError(f"algorithm.name: unknown algorithm {name!r}; known: {', '.join(sorted(TRAINERS))}")
    module, _, cls = TRAINERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def build_trainer(preset: Preset, run_dir: str | Path, stop: StopFlag | None = None,
                  preset_dir: Path | None = None, world=None) -> Trainer:
    """The trainer for the preset's algorithm; `world` (engine.distributed.world.World)
    when this process is one of several."""
    return trainer_class(preset.algorithm.name)(preset, run_dir, stop=stop, preset_dir=preset_dir, world=world)
