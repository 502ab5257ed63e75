"""The run's check that its prompts fit the model's context, made as `rl-engine validate`
makes it (engine/commands/validate.py): the longest prompt named by its row in the data
("row 3 of data file /d.jsonl"), and, with data.environment, the tools' descriptions when
they are most of it. The message is engine/foundation/limits.py's `context_problem`.

A preset that does not set algorithm.max_completion_length (the default is in force) has
that default cut to what the longest prompt leaves of the context, as the window's set-up
form cuts it (workbench/setup/switching.py's `fitted_default`), and the cut said once; a
value the preset sets is checked as it is. The cut value is then the preset's own (set,
so the run's preset.yaml carries it and a resume or a fork reads the same).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.model.loading import check_context_fits
from engine.data.location import prompt_location

__all__ = ["ContextFit", "FITTED_FIELD", "default_in_force", "fit_episodes", "fit_prompts", "fit_trainer",
           "unset_fitted_fields"]

log = logging.getLogger(__name__)

COMPLETION = "max_completion_length"
FITTED_FIELD = f"algorithm.{COMPLETION}"  # the one field whose default is fitted to the model


@dataclass(frozen=True)
class ContextFit:
    """What the check found: the longest prompt in tokens, the preset to run (the one given,
    or a copy with its default completion length cut) and the line saying so (None: no cut)."""

    longest: int
    preset: Any
    note: str | None = None


def default_in_force(algorithm) -> bool:
    """Whether the algorithm section leaves max_completion_length unset (its default in force).

    >>> from engine.algorithms.grpo.config import GRPOConfig
    >>> default_in_force(GRPOConfig()), default_in_force(GRPOConfig(max_completion_length=256))
    (True, False)
    """
    return COMPLETION not in algorithm.model_fields_set


def unset_fitted_fields(preset) -> tuple[str, ...]:
    """The fitted field when the preset leaves it unset, else (): what a preset saved before
    the fit leaves out (foundation/io.py's save_preset `leave_out`), so that the run, started
    again from that file, fits it as this one would rather than refuse the default."""
    return (FITTED_FIELD,) if default_in_force(preset.algorithm) else ()


def fit_prompts(tokenizer, templated: list, rows: list, preset, preset_dir: Path | None, limit: int | None,
                tools_tokens: int = 0) -> ContextFit:
    """The `templated` examples' prompts against the context `limit`. ValueError when the
    longest plus algorithm.max_completion_length does not fit, naming its row (`rows`: the
    same examples as loaded, in the same order) and, given `tools_tokens` (how many of a
    prompt's tokens the tools' schemas take), the tools; except that a default completion
    length is cut to fit (the prompt alone must still leave room for one token)."""
    algo = preset.algorithm
    asked, default = algo.max_completion_length, default_in_force(algo)
    longest = check_context_fits(tokenizer, [e.prompt for e in templated], 1 if default else asked, limit,
                                 lambda i: prompt_location(preset.data, preset_dir, rows[i]), tools_tokens)
    if not default or limit is None or longest + asked <= limit:
        return ContextFit(longest, preset)
    room = limit - longest
    fitted = preset.model_copy(update={"algorithm": algo.model_copy(update={COMPLETION: room})})
    note = (f"{FITTED_FIELD} {asked} -> {room} to fit the model's {limit}-position context (the longest prompt has "
            f"{longest} tokens); set it in the preset to choose another length")
    return ContextFit(longest, fitted, note)


def fit_episodes(runner, preset) -> None:
    """An episode runner built before the fit (engine/algorithms/episodes.py) given the
    preset's completion length as its token budget; None (no data.environment) is left."""
    if runner is not None:
        runner.settings = replace(runner.settings, budget=preset.algorithm.max_completion_length)


def fit_trainer(trainer, rows: list, preset_dir: Path | None, limit: int | None) -> list[str]:
    """The trainer's set-up check (engine/algorithms/base.py), after its examples are
    templated: `fit_prompts` on them; a cut is taken by the trainer (its preset, algorithm
    section, sampling length and episode budget), logged, and returned as the set-up's
    notes for the CLI to print ([] without one)."""
    fit = fit_prompts(trainer.tokenizer, trainer.train_examples + trainer.eval_examples, rows, trainer.preset,
                      preset_dir, limit, getattr(trainer.episodes, "tools_tokens", 0))
    if fit.note is None:
        return []
    trainer.preset, trainer.algo = fit.preset, fit.preset.algorithm
    trainer.policy.sampling = replace(trainer.policy.sampling, max_tokens=trainer.algo.max_completion_length)
    fit_episodes(trainer.episodes, fit.preset)
    log.info(fit.note)
    return [fit.note]
