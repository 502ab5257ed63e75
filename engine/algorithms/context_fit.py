"""The run's check that its prompts fit the model's context, made as `rl-engine validate`
makes it (engine/commands/validate.py): the longest prompt named by its row in the data
("row 3 of data file /d.jsonl"), and, with data.environment, the tools' descriptions when
they are most of it. The message is engine/foundation/limits.py's `context_problem`.
"""

from __future__ import annotations

from pathlib import Path

from engine.model.loading import check_context_fits
from engine.data.location import prompt_location

__all__ = ["check_prompts_fit"]


def check_prompts_fit(tokenizer, templated: list, rows: list, preset, preset_dir: Path | None, limit: int | None,
                      tools_tokens: int = 0) -> int:
    """The longest of the `templated` examples' prompts in tokens; ValueError when it plus
    algorithm.max_completion_length does not fit the context `limit`, naming its row
    (`rows`: the same examples as loaded, in the same order) and, given `tools_tokens`
    (how many of a prompt's tokens the tools' schemas take), the tools."""
    return check_context_fits(tokenizer, [e.prompt for e in templated], preset.algorithm.max_completion_length, limit,
                              lambda i: prompt_location(preset.data, preset_dir, rows[i]), tools_tokens)
