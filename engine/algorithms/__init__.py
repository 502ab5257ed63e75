"""The training algorithms, one folder each: `grpo` (with RLOO, REINFORCE++, GSPO), `ppo`,
`dpo`, on the shared `base.Trainer`. Each folder holds its preset section (`config.py`,
torch-free, with the declarations of engine/algorithms/config_base.py) and its trainer
(`trainer.py`). `ALGORITHMS` is the one registry: a preset's `algorithm.name` -> its
config class and its trainer class as "module:Class", imported only when asked for, so
importing this package loads no torch. engine/preset/schema.py builds the preset's
algorithm union from it; engine/commands/train.py's `build_trainer` picks the trainer.

Adding an algorithm: its folder here and its line in ALGORITHMS (docs/architecture.md,
"Where to add a new algorithm").
"""

from __future__ import annotations

import importlib
import inspect
from typing import NamedTuple

from engine.algorithms.config_base import AlgorithmSection
from engine.algorithms.dpo.config import DPOConfig
from engine.algorithms.grpo.config import GRPOConfig
from engine.algorithms.kto.config import KTOConfig
from engine.algorithms.online_dpo.config import OnlineDPOConfig
from engine.algorithms.ppo.config import PPOConfig


class Algorithm(NamedTuple):
    """A registered algorithm: its preset section and its trainer ("module:Class")."""

    config: type[AlgorithmSection]
    trainer: str


def algorithm_name(config: type) -> str:
    """The name a preset gives the algorithm: its config's `name` default.

    >>> algorithm_name(PPOConfig)
    'ppo'
    """
    return config.model_fields["name"].default


def undeclared(config: type) -> str:
    """What keeps `config` from being an algorithm's section ("" when nothing does): it
    must derive from AlgorithmSection and make every declaration, so that no module
    outside engine/algorithms/ falls back on another algorithm's rules.

    >>> class Half(AlgorithmSection):
    ...     def step_shares(self, training): return training.batch_size, "rows"
    >>> undeclared(Half)
    'Half does not declare update_batch (engine/algorithms/config_base.py)'
    """
    if not (isinstance(config, type) and issubclass(config, AlgorithmSection)):
        return f"{config!r} is not an AlgorithmSection (engine/algorithms/config_base.py)"
    missing = sorted(getattr(config, "__abstractmethods__", ()))
    if inspect.isabstract(config) and missing:
        return f"{config.__name__} does not declare {', '.join(missing)} (engine/algorithms/config_base.py)"
    return ""


def registry(*algorithms: Algorithm) -> dict[str, Algorithm]:
    """name -> algorithm, in the order given (the order presets' errors and the window's
    chooser list them); a TypeError for a config that leaves a declaration out."""
    for algorithm in algorithms:
        problem = undeclared(algorithm.config)
        if problem:
            raise TypeError(problem)
    return {algorithm_name(a.config): a for a in algorithms}


ALGORITHMS = registry(
    Algorithm(GRPOConfig, "engine.algorithms.grpo.trainer:GRPOTrainer"),
    Algorithm(PPOConfig, "engine.algorithms.ppo.trainer:PPOTrainer"),
    Algorithm(DPOConfig, "engine.algorithms.dpo.trainer:DPOTrainer"),
    Algorithm(OnlineDPOConfig, "engine.algorithms.online_dpo.trainer:OnlineDPOTrainer"),
    Algorithm(KTOConfig, "engine.algorithms.kto.trainer:KTOTrainer"),
)
TRAINERS = {name: algorithm.trainer for name, algorithm in ALGORITHMS.items()}


def trainer_class(name: str) -> type:
    """The trainer class (an engine.algorithms.base.Trainer) of an algorithm name; a
    ValueError naming the known ones else.

    >>> trainer_class("sft")
    Traceback (most recent call last):
    ...
    ValueError: algorithm.name: unknown algorithm 'sft'; known: dpo, grpo, ...
    """
    if name not in TRAINERS:
        raise ValueError(f"algorithm.name: unknown algorithm {name!r}; known: {', '.join(sorted(TRAINERS))}")
    module, _, cls = TRAINERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)
