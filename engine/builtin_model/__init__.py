"""The small built-in models: `builtin:tiny` (assets/tiny-model) and `builtin:tiny-tools`
(assets/tiny-tools-model, with a chat template for calculator episodes). Their recipe
(`recipe`, the tools variant's episodes and template in `tools`) and the saved folder with
its model card (`card`). `python -m engine.builtin_model [--variant tools]` rebuilds one.

This package's top level is torch-free (the window imports it to find the folders).
"""

from __future__ import annotations

from pathlib import Path

# Built-in name -> (folder under assets/, the command that rebuilds it).
BUILTIN_MODELS: dict[str, tuple[str, str]] = {
    "builtin:tiny": ("tiny-model", "python -m engine.builtin_model --out assets/tiny-model"),
    "builtin:tiny-tools": (
        "tiny-tools-model",
        "python -m engine.builtin_model --variant tools --out assets/tiny-tools-model",
    ),
}

ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"


def builtin_model_folder(name: str) -> Path | None:
    """The folder a built-in model name stands for; None for any other name.

    Example:
        >>> builtin_model_folder("builtin:tiny-tools").parts[-2:]
        ('assets', 'tiny-tools-model')
        >>> builtin_model_folder("gpt2") is None
        True
    """
    entry = BUILTIN_MODELS.get(name)
    return None if entry is None else ASSETS_DIR / entry[0]


def rebuild_command(name: str) -> str:
    """The command that rebuilds a built-in model.

    Example:
        >>> rebuild_command("builtin:tiny")
        'python -m engine.builtin_model --out assets/tiny-model'
    """
    return BUILTIN_MODELS[name][1]
