"""The preset's `data` section (`DataConfig`): where a run's prompts come from, and
its episodes' settings; what engine/data/splits.py loads. Torch-free: the preset's
assembly (engine/preset/schema.py) and the workbench's forms read it.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import Field, model_validator

from engine.data.columns import compile_answer_pattern
from engine.data.tasks import TASKS, check_task_options, check_task_size
from engine.foundation.limits import MAX_COUNT
from engine.foundation.registry import choice_of
from engine.foundation.section import Float, Section

__all__ = ["DataConfig", "without_default_task"]


class DataConfig(Section):
    # Any task registered with engine.data.tasks.register_task.
    task: Union[choice_of(TASKS), None] = Field(
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
            _named("task_options", check_task_options, self.task, self.task_options)
            check_task_size(self.task, self.task_options, self.num_train, self.num_eval)
        if self.dataset is None:
            for name in ("subset", "eval_split"):
                if getattr(self, name) is not None:
                    raise ValueError(f"`{name}` applies to `dataset` only; remove it or set `dataset`")
        if self.answer_pattern is not None:
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
