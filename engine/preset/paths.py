"""A preset's relative files made absolute, by engine/foundation/paths.py's rule.

A relative prompt file, data set, chat template, custom-reward file or reward-model
folder is looked up against
the preset's folder first, then the current folder. :func:`absolute_preset_paths` fixes
them in a copy of the preset, so the copy a run keeps (its preset.yaml, the window's
launch preset) still finds them from anywhere. Torch-free.

Example:
    >>> import tempfile
    >>> from engine.preset.schema import Preset
    >>> from engine.data.config import DataConfig
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "prompts.jsonl").write_text('{"prompt": "hi"}\\n')
    ...     preset = Preset(data=DataConfig(task=None, path="prompts.jsonl"))
    ...     fixed = absolute_preset_paths(preset, folder)
    ...     fixed.data.path == str((Path(folder) / "prompts.jsonl").resolve())
    True
"""

from __future__ import annotations

from pathlib import Path

from engine.foundation.paths import on_disk, resolve_data_path
from engine.preset.schema import Preset
from engine.rewards.paths import absolute_reward_paths
from engine.rl.user_files import absolute_user_functions

__all__ = ["absolute_preset_paths"]


def _absolute(value: str | None, preset_dir, keep=()) -> str | None:
    """A relative path made absolute where it exists; anything else (None, a hub id, a
    keyword in `keep`, a path found nowhere) unchanged."""
    if value is None or value in keep or Path(value).expanduser().is_absolute():
        return value
    found = resolve_data_path(value, preset_dir)
    return str(found) if on_disk(found) and found.is_absolute() else value


def absolute_preset_paths(preset: Preset, preset_dir: str | Path | None) -> Preset:
    """A copy of ``preset`` whose relative prompt file, data set folder or file, chat
    template file, custom-reward files, reward-model folders and the files of a user's own
    loss or advantage estimator are absolute where they exist (see the module's rule);
    ``preset_dir`` is the folder of the preset file (None: an unsaved preset).
    """
    data = {key: _absolute(getattr(preset.data, key), preset_dir) for key in ("path", "dataset")}
    model = {"chat_template": _absolute(preset.model.chat_template, preset_dir, keep=("auto", "none"))}
    preset = preset.model_copy(update={"data": preset.data.model_copy(update=data),
                                       "model": preset.model.model_copy(update=model)})
    rewards = []
    for reward in preset.rewards:
        name, options = absolute_reward_paths(reward.name, reward.options, preset_dir)
        rewards.append(reward.model_copy(update={"name": name, "options": options}))
    return preset.model_copy(update={"rewards": rewards,
                                     "algorithm": absolute_user_functions(preset.algorithm, preset_dir)})
