"""What every reward shares: the call shape and the errors.

A reward has the same shape as a TRL reward function::

    reward(prompts: list[str], completions: list[str], **fields) -> list[float]

Each keyword field (``answer`` and any other dataset column) is a list aligned
with ``prompts``. Rewards must accept fields they do not use, because the engine
passes every column to every reward.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["RewardFunc", "RewardError", "MissingFieldError", "RewardTimeout"]


class RewardFunc(Protocol):
    """A reward: one float per completion, fields aligned with the prompts."""

    def __call__(
        self, prompts: list[str], completions: list[str], **fields: list
    ) -> list[float]: ...


class RewardError(ValueError):
    """A reward component failed or returned something other than finite floats."""


class MissingFieldError(RewardError):
    """A reward needs a data field (``answer``, ...) that the data does not have."""


class RewardTimeout(RewardError):
    """A custom reward function did not return within its time limit (see
    engine/rewards/custom.py). ``user_location`` is (file, line) where it was when the
    engine stopped waiting, or None."""

    user_location: tuple[str, int] | None = None
