"""The experiment preset: one YAML file that describes a whole run.

This module assembles the preset from its sections, each beside the code it configures
(model: engine/model/config.py, data: engine/data/config.py, rewards:
engine/rewards/config.py, algorithm: engine/algorithms/NAME/config.py, alarms:
engine/alarms/config.py; training here), and holds the rules across sections. The engine trains from it and the
workbench builds its forms from it (field types, defaults, ranges and help text), so
it imports neither torch nor Qt.

Loading is strict: unknown keys, wrong types, out-of-range values and impossible
combinations are refused with a `PresetError` whose lines name the field path, the
bad value and what is allowed. Hyperparameter names follow TRL's where TRL has the
same knob, so what users know carries over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Field, ValidationError, model_validator

from engine.alarms.config import AlarmsConfig
from engine.algorithms import ALGORITHMS
from engine.algorithms.grpo.config import GRPOConfig
from engine.data.config import DataConfig
from engine.model.config import ModelConfig
from engine.rewards.config import RewardConfig
from engine.foundation.section import Float, Section
from engine.foundation.errors import PresetError, format_errors
from engine.foundation.io import apply_overrides, read_preset_dict
from engine.foundation.limits import (
    MAX_BATCH, MAX_COEF, MAX_COUNT, MAX_GRAD_NORM, MAX_LEARNING_RATE, MAX_REPEATS, MAX_SEED, structure_problem,
)

# ----------------------------------------------------------------------- algorithm
# Each algorithm's section lives beside its trainer (engine/algorithms/NAME/config.py),
# registered in engine.algorithms.ALGORITHMS; the union, the names and the name -> class
# map are read off that registry.

ALGORITHM_CONFIGS: dict[str, type[Section]] = {entry.name: entry.declares for entry in ALGORITHMS.entries()}
AlgorithmConfig = Annotated[Union[tuple(ALGORITHM_CONFIGS.values())], Field(discriminator="name")]
ALGORITHM_NAMES = tuple(ALGORITHM_CONFIGS)


def unread_fields(algorithm: str) -> tuple[str, ...]:
    """The preset fields outside the algorithm's section that `algorithm` does not read
    (its declarations, engine/algorithms/config_base.py): the set-up form hides them.
    Empty for a name that is no algorithm (its own message comes from validation).

    >>> unread_fields("grpo")
    ('data.chosen_field', 'data.rejected_field')
    """
    config = ALGORITHM_CONFIGS.get(algorithm)
    return config.unread_fields() if config is not None else ()


# ------------------------------------------------------------------------ training


class TrainingConfig(Section):
    max_steps: int = Field(200, ge=1, le=MAX_COUNT, description="Optimizer steps (one rollout batch each).")
    batch_size: int = Field(
        64, ge=1, le=MAX_BATCH, description="Completions per step (prompts per step = batch_size / num_generations); "
        "preference pairs per step for DPO."
    )
    micro_batch_size: Union[Annotated[int, Field(ge=1, le=MAX_BATCH)], Literal["auto"], None] = Field(
        None, description="Completions per forward/backward pass (gradient accumulation); null = whole batch; "
        "`auto`: start with the whole batch and halve it whenever the GPU runs out of memory (reported as an event)."
    )
    gradient_checkpointing: Union[bool, Literal["auto"]] = Field(
        "auto", description="Recompute each layer's activations in the backward pass instead of keeping them: "
        "much less memory, about a third more update time. `auto`: on for models of 1B parameters or more."
    )
    fsdp: bool = Field(
        False, description="With several processes (--nproc-per-node): shard each decoder layer's weights across them "
        "with FSDP2, so each holds 1/N of the base model; for a model too big for one GPU. Off: every process holds "
        "the whole model (DDP)."
    )
    learning_rate: Float = Field(1e-4, gt=0.0, le=MAX_LEARNING_RATE, description="AdamW learning rate of the LoRA weights.")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="Decay after warmup."
    )
    warmup_steps: int = Field(0, ge=0, le=MAX_COUNT, description="Linear warmup steps.")
    weight_decay: Float = Field(0.0, ge=0.0, le=MAX_COEF, description="AdamW weight decay.")
    adam_beta1: Float = Field(0.9, ge=0.0, lt=1.0, description="AdamW beta1.")
    adam_beta2: Float = Field(0.999, ge=0.0, lt=1.0, description="AdamW beta2.")
    max_grad_norm: Float = Field(1.0, gt=0.0, le=MAX_GRAD_NORM, description="Gradient clipping norm.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seeds data, sampling and initialisation; a CPU run is reproducible.")
    eval_steps: int = Field(25, ge=0, le=MAX_COUNT, description="Evaluate on the held-out split every N steps (greedy); 0 = only at start and end.")
    save_steps: int = Field(100, ge=0, le=MAX_COUNT, description="Save a checkpoint every N steps; 0 = only at the end or stop.")
    save_total_limit: int = Field(2, ge=1, le=MAX_REPEATS, description="Checkpoints kept on disk; older ones are deleted.")
    logging_steps: int = Field(1, ge=1, le=MAX_COUNT, description="Write a metrics event every N steps.")
    log_completions: int = Field(8, ge=0, le=MAX_REPEATS, description="Sampled completions written as `samples` events per logged step.")
    record_rollouts: int = Field(4, ge=0, le=MAX_REPEATS, description="Rollouts per step saved token by token for the trajectory inspector.")
    record_update_effect: bool = Field(
        True, description="After each step's update, one more pass over the recorded rollouts (record_rollouts) gives "
        "each of their tokens' log-probability under the updated policy: the inspector's change after the update "
        "(Δ log p) and the update/* metrics. Costs a forward pass over those rows only.")
    max_nonfinite_steps: int = Field(
        5, ge=0, le=MAX_COUNT, description="NaN/inf losses or gradients skip the step; the run stops after this many such steps."
    )
    report_to: Literal["none", "tensorboard", "wandb", "trackio"] = Field(
        "none", description="Also send the run's metrics somewhere as they are logged: `tensorboard` writes event "
        "files into RUN_DIR/tensorboard/ (pip install tensorboard; `rl-engine export RUN_DIR --tensorboard OUT` "
        "does it for a past run); `wandb` or `trackio` log to a run of that name in project $WANDB_PROJECT / "
        "$TRACKIO_PROJECT (default rl-workbench), when the package is installed."
    )


# -------------------------------------------------------------------------- preset


class Preset(Section):
    name: str = Field("experiment", min_length=1, description="Name of the experiment.")
    description: str = Field("", description="Free text.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = Field(default_factory=GRPOConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    rewards: list[RewardConfig] = Field(
        default_factory=lambda: [RewardConfig(name="exact_match")], min_length=1,
        description="Reward components; the total reward is their weighted sum.",
    )
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    alarms: AlarmsConfig = Field(default_factory=AlarmsConfig)

    @model_validator(mode="after")
    def _combinations(self):
        algo, train = self.algorithm, self.training
        group = self.group_size
        if train.batch_size % group:
            raise ValueError(
                f"training.batch_size: {train.batch_size} must be divisible by "
                f"algorithm.num_generations ({group}); try batch_size "
                f"{max(1, train.batch_size // group) * group}"
            )
        batch_problems = algo.batch_problems(train)  # the algorithm's own rules (PPO's mini-batches)
        if batch_problems:
            raise ValueError(batch_problems[0])
        if isinstance(train.micro_batch_size, int) and train.micro_batch_size > train.batch_size:
            raise ValueError(
                f"training.micro_batch_size: {train.micro_batch_size} exceeds training.batch_size ({train.batch_size})"
            )
        if self.data.environment and not algo.trains_episodes:
            raise ValueError(f"data.environment: {algo.name} does not train on multi-turn episodes "
                             f"({algo.episodes_reason}); use grpo or ppo, or set data.environment: null")
        from engine.rewards.kinds import is_step_reward_entry

        stepped = [i for i, r in enumerate(self.rewards) if is_step_reward_entry(r)]
        problem = algo.step_rewards_problem() if stepped else ""
        if problem:
            i = stepped[0]
            raise ValueError(f"rewards.{i}: {self.rewards[i].name} scores each step of a completion; {problem}")
        labels = [r.component_name for r in self.rewards]
        for label in dict.fromkeys(labels):
            where = [i for i, other in enumerate(labels) if other == label]
            if len(where) > 1:
                raise ValueError(
                    f"rewards: {', '.join(f'rewards.{i}' for i in where)} are "
                    f"{'both' if len(where) == 2 else 'all'} logged as {label!r}; each component is logged "
                    f"by its label: give one a distinct `label` (e.g. label: {label}_{len(where)})"
                )
        return self

    @property
    def group_size(self) -> int:
        """Completions per prompt in a step (1 for DPO, whose batch is preference pairs)."""
        return getattr(self.algorithm, "num_generations", 1)

    @property
    def prompts_per_step(self) -> int:
        return self.training.batch_size // self.group_size


# ---------------------------------------------------------------- validating, loading
# The errors' wording is engine.foundation.errors'; reading, --set overrides and saving are
# engine.foundation.io's.


def preset_from_dict(data: Any, source: str = "preset") -> Preset:
    if not isinstance(data, dict):
        raise PresetError([f"the top level must be a mapping of sections, got {type(data).__name__}"], source)
    # Data built in code (the window, --set) gets the file's guards too: nothing below
    # may recurse into a self-referencing, absurdly deep or alias-expanded structure.
    problem = structure_problem(data)
    if problem:
        raise PresetError([problem], source)
    try:
        return Preset.model_validate(data)
    except ValidationError as exc:
        raise PresetError(format_errors(exc, Preset, ALGORITHM_CONFIGS), source) from None
    except RecursionError:  # belt and braces: structure_problem bounds the depth
        raise PresetError(["nested too deeply to check; a preset's values are a few levels deep"], source) from None


def load_preset(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Preset:
    """Read and validate a preset file, applying `dotted.key=value` overrides first."""
    data = read_preset_dict(path)
    if overrides:
        data = apply_overrides(data, overrides, source=str(path))
    return preset_from_dict(data, str(path))
