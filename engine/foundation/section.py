"""What every preset section is built from: `Section` (strict, unknown keys refused) and
`Float` (a float field that also takes YAML's `1e-3` text). Its own module so that
sections defined beside the code they configure (engine/alarms/config.py) share them
with engine/preset/schema.py without importing it."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from engine.foundation.limits import MAX_TEMPERATURE, MAX_TOKENS

__all__ = ["Float", "SamplingFields", "Section"]

_FLOAT_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(inf|infinity|nan)$", re.I)


def _yaml_float(value: Any) -> Any:
    # YAML 1.1 reads `1e-3` (no dot) as a string; users write learning rates that way,
    # so numeric text is accepted for float fields. Anything else goes on to strict checks.
    # 'inf' / 'nan' are converted too, so that they are refused as non-finite numbers
    # (Section's allow_inf_nan) rather than as text.
    if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
        return float(value)
    return value


Float = Annotated[float, BeforeValidator(_yaml_float)]


class Section(BaseModel):
    """Base of every preset section: unknown keys and wrong types are errors."""

    # allow_inf_nan=False: every float field of every section refuses .inf and .nan (no
    # loss weight, rate or temperature means them), with the one message "finite number".
    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True, allow_inf_nan=False)


class SamplingFields(Section):
    """How online algorithms sample their rollouts."""

    max_completion_length: int = Field(
        256, ge=1, le=MAX_TOKENS, description="Most tokens generated per completion."
    )
    temperature: Float = Field(1.0, gt=0.0, le=MAX_TEMPERATURE, description="Sampling temperature for rollouts.")
    top_p: Float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling: keep the smallest set of tokens with this much probability.")
    top_k: int = Field(0, ge=0, le=MAX_TOKENS, description="Sample among the k most likely tokens; 0 disables.")
