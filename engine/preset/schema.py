"""The experiment preset: one YAML file that describes a whole run.

This module is the single schema for presets. The engine trains from it and the
workbench builds its forms from it (field types, defaults, ranges and help text), so
it imports neither torch nor Qt.

Loading is strict: unknown keys, wrong types, out-of-range values and impossible
combinations are refused with a `PresetError` whose lines name the field path, the
bad value and what is allowed. Hyperparameter names follow TRL's where TRL has the
same knob, so what users know carries over.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from engine.alarms.config import AlarmsConfig
from engine.algorithms import ALGORITHMS
from engine.algorithms.dpo.config import DPOConfig  # noqa: F401 (re-exported: the schema's sections in one place)
from engine.algorithms.grpo.config import GRPOConfig
from engine.algorithms.ppo.config import PPOConfig  # noqa: F401
from engine.preset.base import Float, Section
from engine.rl.registry import choice_of
from engine.preset.errors import PresetError, format_errors
from engine.preset.io import apply_overrides, read_preset_dict
from engine.preset.limits import (
    MAX_BATCH, MAX_COEF, MAX_COUNT, MAX_GRAD_NORM, MAX_LEARNING_RATE, MAX_LORA_ALPHA, MAX_REPEATS,
    MAX_REWARD_SCALE, MAX_SEED, MAX_TEMPERATURE, MAX_TOKENS, structure_problem,
)

BUILTIN_MODEL = "builtin:tiny"

# --------------------------------------------------------------------------- model


class LoraConfig(Section):
    r: int = Field(16, ge=1, le=4096, description="LoRA rank: width of the low-rank update.")
    alpha: Float = Field(32.0, gt=0, le=MAX_LORA_ALPHA, description="LoRA alpha; the update is scaled by alpha / r.")
    dropout: Float = Field(0.0, ge=0.0, lt=1.0, description=(
        "Dropout on the LoRA input, in DPO updates with algorithm.disable_dropout false only. "
        "GRPO and PPO run every pass dropout-free (as TRL): their importance ratio compares "
        "two passes, and dropout would make it noise."))
    target_modules: Union[Literal["auto"], list[str]] = Field(
        "auto",
        description="Module names to adapt, or `auto` to pick the attention and MLP "
        "projections by architecture.",
    )

    @field_validator("target_modules")
    @classmethod
    def _non_empty(cls, value):
        if isinstance(value, list) and not value:
            raise ValueError("must name at least one module, or be `auto`")
        return value


class ModelConfig(Section):
    name_or_path: str = Field(
        BUILTIN_MODEL,
        min_length=1,
        description="Hugging Face hub id, local folder, or `builtin:tiny` (the small "
        "character-level model shipped in assets/, runs offline on a CPU) or `builtin:tiny-tools` (its "
        "variant with a chat template for calculator episodes).",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weight dtype; `auto` is bf16 on CUDA and fp32 on CPU."
    )
    device: str = Field(
        "auto", description="`auto` (CUDA if available, else CPU), `cpu`, `cuda`, `cuda:N` or `mps`."
    )
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapter settings.")
    chat_template: str = Field(
        "auto", min_length=1,
        description="`auto`: prompts go through the tokenizer's chat template when it has one (a plain "
        "prompt becomes one user message, the generation prompt is added); `none`: prompts are fed as "
        "plain text; or a Jinja template file (.jinja, found next to the preset) used instead of the tokenizer's.",
    )
    load_in_4bit: bool = Field(
        False, description="QLoRA: the base model's weights in 4 bit (bitsandbytes NF4, CUDA only), the adapter "
        "in fp32; for GPUs too small for the bf16 weights. The reference is still the adapter switched off.",
    )
    trust_remote_code: bool = Field(
        False, description="Run the Python code a hub model ships with its weights. Off: such a model is "
        "refused, since its code runs with your rights; turn it on only for a model whose code you trust.",
    )

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", value):
            raise ValueError("must be auto, cpu, cuda, cuda:N or mps")
        return value


# ----------------------------------------------------------------------- algorithm
# Each algorithm's section lives beside its trainer (engine/algorithms/NAME/config.py),
# registered in engine.algorithms.ALGORITHMS; the union, the names and the name -> class
# map are read off that registry.

ALGORITHM_CONFIGS: dict[str, type[Section]] = {name: algorithm.config for name, algorithm in ALGORITHMS.items()}
AlgorithmConfig = Annotated[Union[tuple(ALGORITHM_CONFIGS.values())], Field(discriminator="name")]
ALGORITHM_NAMES = tuple(ALGORITHM_CONFIGS)


# ---------------------------------------------------------------------------- data


class DataConfig(Section):
    # Any task registered with engine.data.tasks.register_task (that module is named, not
    # imported: it imports this one).
    task: Union[choice_of("engine.data.tasks:TASKS"), None] = Field(
        "sort", description="Built-in task generated offline from the seed; null when `path` or `dataset` is set "
        "(a data section that gives `path` or `dataset` and leaves `task` out has none; `sort` is the default "
        "only when no data source is given)."
    )
    task_options: dict[str, Any] = Field(
        default_factory=dict, description="Options of the built-in task (e.g. min_len, max_len for sort)."
    )
    path: Union[str, None] = Field(
        None, description="Prompt file (JSONL, CSV or parquet) with a prompt column; other columns go to the rewards."
    )
    dataset: Union[str, None] = Field(
        None, min_length=1,
        description="A Hugging Face data set, read with the `datasets` library: a hub id (openai/gsm8k; "
        "from the local cache when offline), a folder saved with save_to_disk, a folder of data files, "
        "or one data file. Only the rows a run uses are read.",
    )
    subset: Union[str, None] = Field(
        None, min_length=1, description="The data set's subset (configuration), e.g. `main` for openai/gsm8k."
    )
    split: str = Field("train", min_length=1, description="Split of `dataset` to train on.")
    eval_split: Union[str, None] = Field(
        None, min_length=1,
        description="Split of `dataset` for held-out evaluation (e.g. test); null holds out num_eval rows of `split`.",
    )
    prompt_field: str = Field(
        "prompt", min_length=1,
        description="Column holding the prompt: text, or a conversation (a list of {role, content} messages, "
        "TRL's conversational format).",
    )
    answer_field: str = Field(
        "answer", min_length=1,
        description="Column holding the reference answer; the rewards see it as `answer`. Optional in the data.",
    )
    answer_pattern: Union[str, None] = Field(
        None, min_length=1,
        description="Regular expression that extracts the answer from the answer column: its first group "
        "(or the whole match), e.g. `####\\s*(.+)` for GSM8K's `... #### 72`. A row it does not match is an error.",
    )
    chosen_field: str = Field("chosen", min_length=1, description="DPO: column with the preferred answer (text or messages).")
    rejected_field: str = Field("rejected", min_length=1, description="DPO: column with the dispreferred answer (text or messages).")
    system_prompt: Union[str, None] = Field(
        None, description="System message put before every prompt (chat-templated models), unless the "
        "prompt's conversation has its own."
    )
    num_train: int = Field(5000, ge=1, le=MAX_COUNT, description="Training prompts: generated for a built-in task; "
                           "the most rows used of a data set (a seeded sample when it has more).")
    num_eval: int = Field(200, ge=0, le=MAX_COUNT, description="Held-out prompts for evaluation (built-in task, file or data set).")
    # Multi-turn episodes (engine/episodes/, docs/episodes.md)
    environment: Union[str, None] = Field(
        None, min_length=1,
        description="Multi-turn episodes with tools: a built-in environment (calculator) or `FILE.py:CLASS` next to "
        "the preset. One instance per episode: reset(**row) starts it, its public methods are the tools offered "
        "to the model, an optional get_reward() scores it. null: single completions.",
    )
    max_turns: int = Field(4, ge=1, le=64, description="Episodes: the most turns the model writes in one episode.")
    max_tool_calls: int = Field(8, ge=0, le=256, description="Episodes: the most tool calls in one episode.")
    tool_timeout: Float = Field(10.0, gt=0, le=3600,
                                description="Episodes: seconds one tool call may take; a slower one answers an error.")
    tool_call_format: Literal["auto", "hermes", "llama3_json", "pythonic"] = Field(
        "auto", description="Episodes: how tool calls are written: hermes (<tool_call>{json}</tool_call>: Qwen2.5, "
        "Hermes), llama3_json (Llama 3.1/3.3), pythonic ([f(a=1)]: Llama 3.2/4); auto reads the chat template.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_default_task_with_a_source(cls, data: Any) -> Any:
        return without_default_task(data)

    @model_validator(mode="after")
    def _one_source(self):
        sources = [name for name in ("task", "path", "dataset") if getattr(self, name) is not None]
        if len(sources) == 2 and sources[0] == "task":
            other = sources[1]
            raise ValueError(
                f"set exactly one data source: `task` ({self.task!r}) and `{other}` are both set; "
                f"set task: null to train on `{other}`, or remove `{other}` (a data section that gives "
                f"`{other}` and leaves `task` out has no task)")
        if len(sources) != 1:
            said = f" (set: {', '.join(sources)})" if sources else ""
            raise ValueError(
                "set exactly one data source: `task` (a built-in task), `path` (a prompt file) or "
                f"`dataset` (a Hugging Face data set){said}; set the others to null")
        if self.task is None and self.task_options:
            raise ValueError("`task_options` apply to built-in tasks only; remove them or set `task`")
        if self.task is not None:
            from engine.data.tasks import check_task_options, check_task_size

            _named("task_options", check_task_options, self.task, self.task_options)
            check_task_size(self.task, self.task_options, self.num_train, self.num_eval)
        if self.dataset is None:
            for name in ("subset", "eval_split"):
                if getattr(self, name) is not None:
                    raise ValueError(f"`{name}` applies to `dataset` only; remove it or set `dataset`")
        if self.answer_pattern is not None:
            from engine.data.columns import compile_answer_pattern

            compile_answer_pattern(self.answer_pattern)
        return self


def without_default_task(data: Any) -> Any:
    """A data section as it is meant: `task` defaults to `sort` only for a section that
    names no data source; one that gives `path` or `dataset` and does not mention `task`
    trains on what it gives (task null). Anything else is returned as it is. For code
    that fills a section's defaults itself (the window's form does) before validating.

    Example:
        >>> without_default_task({"path": "prompts.jsonl"})
        {'path': 'prompts.jsonl', 'task': None}
        >>> without_default_task({"task": "sort", "path": "prompts.jsonl"})  # both set: refused on validation
        {'task': 'sort', 'path': 'prompts.jsonl'}
    """
    if isinstance(data, dict) and "task" not in data and any(
            data.get(name) is not None for name in ("path", "dataset")):
        return {**data, "task": None}
    return data


def _named(field: str, check, name: str, options: dict) -> None:
    """Run a registry's option check, prefixing its message with the field it is about."""
    try:
        check(name, options)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None


# ------------------------------------------------------------------------- rewards


class RewardConfig(Section):
    """One reward component. `name` is a registry reward (`exact_match`, ...),
    `reward_model` (options: model, batch_size, max_length, dtype), `process_reward_model`
    (a model scoring each step; options: model, step_tag, head, label, good_token, bad_token,
    batch_size, max_length, dtype), or `FILE.py:FUNCTION`
    (your own function; options are passed to it as keyword arguments). Only what can
    be checked without reading files is checked here; the file, the function and the
    model are checked when the run builds the rewards (and by the workbench)."""

    name: str = Field(
        ..., min_length=1,
        description="A registry reward (exact_match, numeric_match, regex_format, ...), `reward_model` "
        "(a Hugging Face sequence-classification model), `process_reward_model` (a Hugging Face "
        "token-classification or causal LM process reward model scoring each step; steps split at "
        "step_delimiter, default \"\\n\\n\"), or FILE.py:FUNCTION (your own Python function; "
        "a relative file is found next to the preset).",
    )
    label: Union[str, None] = Field(
        None, min_length=1,
        description="Name the component is logged under (rewards/<label>/mean); default: the reward's "
        "name, or the function's name for FILE.py:FUNCTION.",
    )
    weight: Float = Field(1.0, ge=-MAX_REWARD_SCALE, le=MAX_REWARD_SCALE, description="Weight of this component in the total reward.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of this reward: the registry reward's; a reward model's model (hub id or "
        "folder, required), batch_size, max_length, dtype; a process reward model's model (required), "
        "step_tag (text after each step the score is read at; default \"\": the step's last token), head "
        "(auto, token_classification, causal_lm), label (token_classification: the class scored; default "
        "1), good_token / bad_token (causal_lm: score p(good) / (p(good) + p(bad))), batch_size (8), "
        "max_length (1024), dtype; a custom function's keyword arguments.",
    )
    step_delimiter: Union[str, None] = Field(
        None, min_length=1,
        description="Makes this a step reward: the text a completion's steps are split at, e.g. \"\\n\" "
        "(one line, one step) or \"\\n\\n\". A step ends just after its delimiter; the text after the "
        "last one is one more step. The reward then returns, per completion, a list of scores, one per "
        "step, or (end, score) pairs (end: the character offset just after the step); its logged value "
        "is the mean of the step scores. Default: none (one score per completion; a reward that "
        "returns lists anyway is split at \"\\n\").",
    )

    @field_validator("label")
    @classmethod
    def _label(cls, value):
        from engine.rewards.kinds import check_label

        return value if value is None else check_label(value)

    @model_validator(mode="after")
    def _known(self):
        from engine.rewards.kinds import check_reward

        # Registry rewards are built (cheap: a closure); a reward model's options and a
        # custom function's FILE.py:FUNCTION are checked for form only.
        check_reward(self.name, self.options)
        return self

    @model_serializer(mode="wrap")
    def _omit_unset_label(self, handler):
        # `label: null` (and `step_delimiter: null`) is noise in every saved preset; each
        # is written only when set.
        data = handler(self)
        for key in ("label", "step_delimiter"):
            if isinstance(data, dict) and data.get(key) is None:
                data.pop(key, None)
        return data

    @property
    def component_name(self) -> str:
        """The logged name: `label`, else the function's name for FILE.py:FUNCTION, else `name`."""
        from engine.rewards.kinds import component_label

        return component_label(self.name, self.label)


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
# The errors' wording is engine.preset.errors'; reading, --set overrides and saving are
# engine.preset.io's.


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
