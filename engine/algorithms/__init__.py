"""The training algorithms, one folder each: `grpo` (with RLOO, REINFORCE++, GSPO), `ppo`,
`dpo`, `online_dpo`, `kto`, and the RLHF pipeline's first stages `sft` and
`reward_model`, on the shared `base.Trainer`. Each folder holds its preset section
(`config.py`, torch-free, with the declarations of engine/algorithms/config_base.py) and
its trainer (`trainer.py`). `ALGORITHMS` (a foundation Registry, as every other kind's) is
the one registry: a preset's `algorithm.name` -> its trainer class as "module:Class",
imported only when asked for, so importing this package loads no torch; each entry
declares its config class. engine/preset/schema.py builds the preset's algorithm union
from it; engine/commands/train.py's `build_trainer` picks the trainer.

Adding an algorithm: its folder here and its `register_algorithm` line (docs/architecture.md,
"Where to add a new algorithm").
"""

from __future__ import annotations

import inspect

from engine.algorithms.config_base import AlgorithmSection
from engine.algorithms.dpo.config import DPOConfig
from engine.algorithms.grpo.config import GRPOConfig
from engine.algorithms.kto.config import KTOConfig
from engine.algorithms.online_dpo.config import OnlineDPOConfig
from engine.algorithms.ppo.config import PPOConfig
from engine.algorithms.reward_model.config import RewardModelConfig
from engine.algorithms.sft.config import SFTConfig
from engine.foundation.registry import Registry, first_line


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


#: A preset's `algorithm.name` -> its trainer ("module:Class", imported when asked for);
#: each entry declares its preset section (the config class).
ALGORITHMS: Registry[type[AlgorithmSection]] = Registry("algorithm", field="algorithm.name")


def register_algorithm(config: type, trainer: str, *, origin: str = "built-in", registry: Registry = ALGORITHMS):
    """An algorithm in one line: its preset section and its trainer ("module:Class"), under
    the section's name, in registration order (the order presets' errors and the window's
    chooser list them); a TypeError for a config that leaves a declaration out.

    >>> register_algorithm(dict, "tests.nowhere:Trainer")
    Traceback (most recent call last):
    ...
    TypeError: <class 'dict'> is not an AlgorithmSection (engine/algorithms/config_base.py)
    """
    problem = undeclared(config)
    if problem:
        raise TypeError(problem)
    return registry.register(algorithm_name(config), trainer, first_line(config.__doc__), declares=config,
                             origin=origin)


register_algorithm(GRPOConfig, "engine.algorithms.grpo.trainer:GRPOTrainer")
register_algorithm(PPOConfig, "engine.algorithms.ppo.trainer:PPOTrainer")
register_algorithm(DPOConfig, "engine.algorithms.dpo.trainer:DPOTrainer")
register_algorithm(OnlineDPOConfig, "engine.algorithms.online_dpo.trainer:OnlineDPOTrainer")
register_algorithm(KTOConfig, "engine.algorithms.kto.trainer:KTOTrainer")
register_algorithm(SFTConfig, "engine.algorithms.sft.trainer:SFTTrainer")
register_algorithm(RewardModelConfig, "engine.algorithms.reward_model.trainer:RewardModelTrainer")


def trainer_class(name: str) -> type:
    """The trainer class (an engine.algorithms.base.Trainer) of an algorithm name; a
    ValueError naming the known ones else.

    >>> trainer_class("rlhf")
    Traceback (most recent call last):
    ...
    ValueError: algorithm.name: unknown algorithm 'rlhf'; known: dpo, grpo, ...
    """
    if name not in ALGORITHMS:
        raise ValueError(f"algorithm.name: unknown algorithm {name!r}; known: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS.function(name)
