"""Where a preset's relative files are: one rule for the CLI, the window and the engine.

A relative prompt file, data set, chat template, custom-reward file or reward-model
folder is looked up against
the preset's folder first, then the current folder. :func:`absolute_preset_paths` fixes
them in a copy of the preset, so the copy a run keeps (its preset.yaml, the window's
launch preset) still finds them from anywhere. Torch-free.

Example:
    >>> import tempfile
    >>> from engine.preset.schema import DataConfig, Preset
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "prompts.jsonl").write_text('{"prompt": "hi"}\\n')
    ...     preset = Preset(data=DataConfig(task=None, path="prompts.jsonl"))
    ...     fixed = absolute_preset_paths(preset, folder)
    ...     fixed.data.path == str((Path(folder) / "prompts.jsonl").resolve())
    True
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from engine.preset.schema import BUILTIN_MODEL, Preset
from engine.rewards.paths import stat_errno, absolute_reward_paths, link_problem, looks_like_local_path
from engine.rl.user_files import absolute_user_functions

__all__ = ["resolve_data_path", "local_or_hub_id", "absolute_preset_paths", "model_path_problem", "link_problem"]


def resolve_data_path(path: str | Path, preset_dir: str | Path | None = None) -> Path:
    """A prompt file's path: ``~`` expanded; a relative one found in ``preset_dir``
    first, then the current folder (made absolute where found); where it is in
    neither, ``preset_dir / path`` (so an error names the preset's folder). A symlink
    that leads nowhere (dangling, or a loop) is found too, where nothing real is, so
    that the error can say what it is (:func:`link_problem`).

    Example:
        >>> resolve_data_path("/data/p.jsonl", "/presets")
        PosixPath('/data/p.jsonl')
        >>> resolve_data_path("missing.jsonl", "/presets")
        PosixPath('/presets/missing.jsonl')
    """
    path = Path(path).expanduser()
    if path.is_absolute():
        return path
    roots = [Path(root) for root in (preset_dir, Path.cwd()) if root is not None]
    for root in roots:
        if (root / path).exists():
            return (root / path).resolve()
    for root in roots:
        if _on_disk(root / path):  # a broken link: made absolute, not followed (a loop cannot be)
            return (root / path).absolute()
    return Path(preset_dir) / path if preset_dir is not None else path


def local_or_hub_id(name: str, preset_dir: str | Path | None = None) -> Path | str:
    """A model's or data set's name: a local folder or file (relative ones found by the
    rule above) when it is on disk (a broken symlink too: it is meant as a local path,
    and :func:`link_problem` says what is wrong with it), else the name unchanged, a
    hub id."""
    local = resolve_data_path(name, preset_dir)
    return local if _on_disk(local) else name


def _absolute(value: str | None, preset_dir, keep=()) -> str | None:
    """A relative path made absolute where it exists; anything else (None, a hub id, a
    keyword in `keep`, a path found nowhere) unchanged."""
    if value is None or value in keep or Path(value).expanduser().is_absolute():
        return value
    found = resolve_data_path(value, preset_dir)
    return str(found) if _on_disk(found) and found.is_absolute() else value


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


def _on_disk(path: Path) -> bool:
    """Whether `path` names something on disk: a file or folder, or a symlink, even one
    that leads nowhere (dangling, or a loop anywhere along the path)."""
    return os.path.lexists(path) or stat_errno(path) == errno.ELOOP


def model_path_problem(name: str, preset_dir: str | Path | None = None) -> str | None:
    """Why `model.name_or_path` cannot be a model when it is a local path: missing, a
    dangling symlink or a symlink loop, a file, a folder without config.json; None for
    a folder that may hold a model, a built-in name or a hub id (``org/name``), which
    the hub libraries check. A path that looks local (``/``, ``./``, ``~``, two
    slashes) is never taken for a hub id: the hub would only answer that it is not
    one; nor is a bare name or ``org/name`` that is a dangling symlink or a symlink
    loop here (someone made that link to reach a model on disk). Relative paths are
    looked for as :func:`resolve_data_path` does.

    Example:
        >>> model_path_problem("org/model"), model_path_problem(BUILTIN_MODEL)
        (None, None)
        >>> model_path_problem("/no/such/model")
        "model.name_or_path: could not load '/no/such/model': no such folder (the path does not exist); give the folder of a saved model (one with config.json) or a hub id like 'org/name'"
    """
    if name.startswith("builtin:"):
        return None  # engine.model.loading and the window's checks know the built-in names
    path = resolve_data_path(name, preset_dir)
    if not looks_like_local_path(name) and not path.is_dir() and link_problem(path) is None:
        return None  # 'gpt2' or 'org/name' with no such folder here: a hub id, as transformers takes it
    fix = "give the folder of a saved model (one with config.json) or a hub id like 'org/name'"
    said = f"model.name_or_path: could not load {name!r}:"
    link = link_problem(path)
    if link is not None:  # a bare name or org/name too: a broken link of that name here is meant as a path
        missing = "" if stat_errno(path) == errno.ELOOP else "no such folder: "
        return f"{said} {missing}it is {link}; point the link at the model's folder, or {fix}"
    if stat_errno(path) is not None:
        return f"{said} no such folder (the path does not exist); {fix}"
    if not path.is_dir():
        return f"{said} it is a file, not a folder; {fix}"
    if not (path / "config.json").exists():
        held = sorted(p.name for p in path.iterdir())
        has = f"it has only {', '.join(held[:6])}{', ...' if len(held) > 6 else ''}" if held else "it is empty"
        return (f"{said} the folder holds no model files (no config.json; {has}); give the folder a model was "
                "saved to (save_pretrained, or `hf download ID --local-dir FOLDER`)")
    return None
