"""Which fields of a preset's algorithm section name a user's own function
(``FILE.py:FUNCTION`` in ``loss_type`` or ``advantage_estimator``), and their files:
missing ones found by reading, not running (:func:`source_problems`: ``run`` refuses
those before making the run folder), relative ones made absolute for the run's
preset.yaml (:func:`absolute_user_functions`). Torch-free, and it never imports the
user's code: the preset's paths, the run's start-up checks and the window read it.
Loading and running the functions is engine/rl/user_code.py's.
"""

from __future__ import annotations

from pathlib import Path

from engine.rewards.custom import find_reward_file, read_function
from engine.foundation.registry import Registry, RegistryChoice, split_file_name


def user_function_fields(algorithm) -> list[tuple[str, str, Registry]]:
    """The fields of a preset's ``algorithm`` section that name a user's function:
    (``algorithm.FIELD``, the value, the field's registry), read off the section's
    registry-choice fields (engine.foundation.registry.RegistryChoice) that accept files.

    e.g. GRPOConfig(advantage_estimator="my_advantages.py:median_baseline")
         -> [("algorithm.advantage_estimator", "my_advantages.py:median_baseline", ESTIMATORS)]
    """
    found = []
    for name, info in type(algorithm).model_fields.items():
        value = getattr(algorithm, name, None)
        if not (isinstance(value, str) and split_file_name(value)):
            continue
        for marker in info.metadata:
            if isinstance(marker, RegistryChoice) and marker.registry.files:
                found.append((f"algorithm.{name}", value, marker.registry))
    return found


def source_problems(algorithm, base_dir: str | Path | None) -> list[tuple[str, str]]:
    """(field, message) for each user function whose file or function is missing (or
    whose file does not parse), found by reading the file, not running it.

    e.g. loss_type "my_losses.py:clip_cv" -> [("algorithm.loss_type",
         "no function 'clip_cv' in /work/presets/my_losses.py; it defines: clip_cov")]
    """
    problems = []
    for field, value, _registry in user_function_fields(algorithm):
        _node, missing = read_function(value, base_dir)
        if missing:
            problems.append((field, missing))
    return problems


def absolute_user_functions(algorithm, base_dir: str | Path | None):
    """A copy of ``algorithm`` whose user functions' relative files are absolute where
    they exist (engine/preset/paths.py's rule), so a run's preset.yaml finds them from
    anywhere (a resume, a fork).

    e.g. loss_type "my_losses.py:clip_cov", base_dir /work/presets (where it is)
         -> loss_type "/work/presets/my_losses.py:clip_cov"
    """
    update = {}
    for field, value, _registry in user_function_fields(algorithm):
        file, function = split_file_name(value)
        found = find_reward_file(file, base_dir)
        if found is not None:
            update[field.removeprefix("algorithm.")] = f"{found}:{function}"
    return algorithm.model_copy(update=update) if update else algorithm
