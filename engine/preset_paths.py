"""Where a preset's relative files are: one rule for the CLI, the window and the engine.

A relative prompt file, custom-reward file or reward-model folder is looked up against
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

__all__ = ["resolve_data_path", "absolute_preset_paths"]


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


def absolute_preset_paths(preset: Preset, preset_dir: str | Path | None) -> Preset:
    """A copy of ``preset`` whose relative prompt file, custom-reward files and
    reward-model folders are absolute where they exist (see the module's rule);
    ``preset_dir`` is the folder of the preset file (None: an unsaved preset).
    """
    if preset.data.path is not None and not Path(preset.data.path).expanduser().is_absolute():
        path = str(resolve_data_path(preset.data.path, preset_dir))
        preset = preset.model_copy(update={"data": preset.data.model_copy(update={"path": path})})
    rewards = []
    for reward in preset.rewards:
        name, options = absolute_reward_paths(reward.name, reward.options, preset_dir)
        rewards.append(reward.model_copy(update={"name": name, "options": options}))
    return preset.model_copy(update={"rewards": rewards})
