"""Where a preset's relative files are: one rule for the CLI, the window and the engine.

A relative prompt file, data set, chat template, custom-reward file or reward-model
folder is looked up against
the preset's folder first, then the current folder. :func:`absolute_preset_paths` fixes
them in a copy of the preset, so the copy a run keeps (its preset.yaml, the window's
launch preset) still finds them from anywhere. Torch-free.

Example:
    >>> import tempfile
    >>> from engine.preset import DataConfig, Preset
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "prompts.jsonl").write_text('{"prompt": "hi"}\\n')
    ...     preset = Preset(data=DataConfig(task=None, path="prompts.jsonl"))
    ...     fixed = absolute_preset_paths(preset, folder)
    ...     fixed.data.path == str((Path(folder) / "prompts.jsonl").resolve())
    True
"""

from __future__ import annotations

from pathlib import Path

from engine.preset import Preset
from engine.rewards.paths import absolute_reward_paths

__all__ = ["resolve_data_path", "local_or_hub_id", "absolute_preset_paths"]


def resolve_data_path(path: str | Path, preset_dir: str | Path | None = None) -> Path:
    """A prompt file's path: ``~`` expanded; a relative one found in ``preset_dir``
    first, then the current folder (made absolute where found); where it is in
    neither, ``preset_dir / path`` (so an error names the preset's folder).

    Example:
        >>> resolve_data_path("/data/p.jsonl", "/presets")
        PosixPath('/data/p.jsonl')
        >>> resolve_data_path("missing.jsonl", "/presets")
        PosixPath('/presets/missing.jsonl')
    """
    path = Path(path).expanduser()
    if path.is_absolute():
        return path
    for root in (preset_dir, Path.cwd()):
        if root is not None and (Path(root) / path).exists():
            return (Path(root) / path).resolve()
    return Path(preset_dir) / path if preset_dir is not None else path


def local_or_hub_id(name: str, preset_dir: str | Path | None = None) -> Path | str:
    """A model's or data set's name: a local folder or file (relative ones found by the
    rule above) when it exists, else the name unchanged, a hub id."""
    local = resolve_data_path(name, preset_dir)
    return local if local.exists() else name


def _absolute(value: str | None, preset_dir, keep=()) -> str | None:
    """A relative path made absolute where it exists; anything else (None, a hub id, a
    keyword in `keep`, a path found nowhere) unchanged."""
    if value is None or value in keep or Path(value).expanduser().is_absolute():
        return value
    found = resolve_data_path(value, preset_dir)
    return str(found) if found.exists() and found.is_absolute() else value


def absolute_preset_paths(preset: Preset, preset_dir: str | Path | None) -> Preset:
    """A copy of ``preset`` whose relative prompt file, data set folder or file, chat
    template file, custom-reward files and reward-model folders are absolute where they
    exist (see the module's rule);
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
    return preset.model_copy(update={"rewards": rewards})
