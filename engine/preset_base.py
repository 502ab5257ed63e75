"""What every preset section is built from: `Section` (strict, unknown keys refused) and
`Float` (a float field that also takes YAML's `1e-3` text). Its own module so that
sections defined beside the code they configure (engine/alarms/config.py) share them
with engine/preset.py without importing it."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

__all__ = ["Float", "Section"]

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
