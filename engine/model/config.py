"""The preset's `model` section (`ModelConfig`, its `lora` section `LoraConfig`): what
engine/model/loading.py loads. Torch-free: the preset's assembly (engine/preset/schema.py)
and the workbench's forms read it.
"""

from __future__ import annotations

import re
from typing import Literal, Union

from pydantic import Field, field_validator

from engine.foundation.limits import MAX_LORA_ALPHA
from engine.foundation.section import Float, Section

__all__ = ["BUILTIN_MODEL", "LoraConfig", "ModelConfig"]

BUILTIN_MODEL = "builtin:tiny"

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
    start_from: Union[str, None] = Field(
        None, min_length=1,
        description="Start from another run's adapter instead of the bare base model: a run folder (its newest "
        "checkpoint), a checkpoint folder in one (RUN/checkpoints/step_N), or `run:PRESET_NAME` (the newest run of "
        "that preset in the runs folder). Its adapter is merged into the base, which is then this run's policy and "
        "reference (an SFT run before RL); it must have been trained on this name_or_path. The run keeps the "
        "checkpoint it took in its preset.yaml.",
    )
    decode: Literal["auto", "plain", "static", "captured"] = Field(
        "auto", description="How rollouts decode. `plain`: one forward a token over the rows still generating "
        "(finished rows leave the batch). `static`: a fixed-shape step over a preallocated KV cache, finished rows "
        "masked, sampled on the device. `captured`: that step recorded once as a CUDA graph and replayed (CUDA only; "
        "elsewhere it runs as `static`). `auto`: captured on CUDA for completions of 32 tokens or more, else plain. "
        "Plain and static sample the same tokens under one seed; the captured step's compiled kernels may round "
        "differently (docs/gpu.md).",
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
