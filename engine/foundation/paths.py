"""The path rules: where a preset's relative files are, and what a local path is.

A relative prompt file, data set, chat template, custom-reward file or reward-model
folder is looked up against the preset's folder first, then the current folder
(:func:`resolve_data_path`); a name that is on disk is a local folder or file, any
other a hub id (:func:`local_or_hub_id`, :func:`looks_like_local_path`); a symlink
that leads nowhere is named as such (:func:`link_problem`). One rule for the CLI, the
window and the engine; engine/preset/paths.py applies it to a whole preset
(`absolute_preset_paths`). Torch-free, stdlib only.

Example:
    >>> looks_like_local_path("org/model"), looks_like_local_path(".\\\\rm")
    (False, True)
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["resolve_data_path", "local_or_hub_id", "model_path_problem", "looks_like_local_path", "link_problem",
           "stat_errno"]


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
        if on_disk(root / path):  # a broken link: made absolute, not followed (a loop cannot be)
            return (root / path).absolute()
    return Path(preset_dir) / path if preset_dir is not None else path


def local_or_hub_id(name: str, preset_dir: str | Path | None = None) -> Path | str:
    """A model's or data set's name: a local folder or file (relative ones found by the
    rule above) when it is on disk (a broken symlink too: it is meant as a local path,
    and :func:`link_problem` says what is wrong with it), else the name unchanged, a
    hub id."""
    local = resolve_data_path(name, preset_dir)
    return local if on_disk(local) else name


def looks_like_local_path(name_or_path: str) -> bool:
    """A hub id is ``name`` or ``org/name``; anything starting like a path is a folder.

    Example:
        >>> looks_like_local_path("org/model"), looks_like_local_path("./rm"), looks_like_local_path("a/b/c")
        (False, True, True)
    """
    return name_or_path.startswith(("/", "./", "../", "~", ".\\")) or name_or_path.count("/") > 1


def stat_errno(path: Path) -> int | None:
    """The errno stat() gives for `path` (following symlinks), None when it succeeds."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno
    return None


def link_problem(path: str | Path) -> str | None:
    """What is wrong with a path that is a symlink leading nowhere: a symlink loop, or a
    dangling symlink (naming what it points to); None for anything else (a real file or
    folder, or a path that is simply missing).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     (Path(folder) / "link").symlink_to("gone")
        ...     (Path(folder) / "a").symlink_to("b"); (Path(folder) / "b").symlink_to("a")
        ...     link_problem(Path(folder) / "link"), link_problem(Path(folder) / "a")
        ...     link_problem(Path(folder)), link_problem(Path(folder) / "missing")
        ("a dangling symlink (it points to 'gone', which does not exist)", 'a symlink loop (its links point back at each other)')
        (None, None)
    """
    path = Path(path)
    error = stat_errno(path)
    if error == errno.ELOOP:
        return "a symlink loop (its links point back at each other)"
    if error is not None and path.is_symlink():
        return f"a dangling symlink (it points to {os.readlink(path)!r}, which does not exist)"
    return None


def on_disk(path: Path) -> bool:
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
        >>> model_path_problem("org/model"), model_path_problem("builtin:tiny")
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
