"""Where a preset's rewards point: custom-reward files and reward-model folders.

Relative paths are looked up against the preset's folder first, then the current
folder; :func:`absolute_reward_paths` fixes them in a copy of the preset (a run's
preset.yaml), :func:`reward_source_problems` finds what is missing without importing
user code or loading a model (the workbench's checks use it). Torch-free.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.foundation.paths import link_problem, looks_like_local_path
from engine.foundation.run_files import PRESET_FILE, RUN_PREFIX, is_adapter
from engine.rewards.custom import find_reward_file, static_problems
from engine.rewards.kinds import reward_kind, split_custom_name

__all__ = [
    "resolve_reward_model",
    "absolute_reward_paths",
    "num_labels_message",
    "reward_source_problems",
]


def resolve_reward_model(model: str, base_dir=None) -> str:
    """A reward model's folder as an absolute path when it exists, looked up against
    ``base_dir`` (the preset's folder) first, then the current folder; anything else
    (a hub id) unchanged.

    Example:
        >>> resolve_reward_model("org/reward-model", "/nowhere")
        'org/reward-model'
    """
    path = Path(model).expanduser()
    if path.is_absolute():
        return str(path)
    for root in (base_dir, Path.cwd()):
        if root is not None and (Path(root) / path).is_dir():
            return str((Path(root) / path).resolve())
    return model


def absolute_reward_paths(name: str, options: dict, base_dir=None) -> tuple[str, dict]:
    """The same entry with a relative custom-reward file or reward-model folder made
    absolute (where it exists), so a copy of the preset elsewhere (a run's
    preset.yaml) still finds it.

    Example (``/work/presets/my_rewards.py`` exists):
        absolute_reward_paths("my_rewards.py:brevity", {}, "/work/presets")
        -> ("/work/presets/my_rewards.py:brevity", {})
    """
    kind = reward_kind(name)
    if kind == "custom":
        file, function = split_custom_name(name)
        found = find_reward_file(file, base_dir)
        return (f"{found}:{function}" if found is not None else name), dict(options)
    if kind in ("reward_model", "process_reward_model") and isinstance(options.get("model"), str):
        return name, {**options, "model": resolve_reward_model(options["model"], base_dir)}
    return name, dict(options)


def _reward_model_problems(model: str, base_dir, one_label: bool = True) -> list[tuple[str, str]]:
    """What can be told about a reward model without loading it: a local folder that
    is missing, is not a model, or (``one_label``: a reward model, not a process reward
    model) has a number of labels other than one."""
    resolved = Path(resolve_reward_model(model, base_dir))
    if model.startswith(RUN_PREFIX) or (resolved / PRESET_FILE).is_file() or is_adapter(resolved):
        return []  # a reward-model run (or its adapter): checked before the run loads (engine/run/lineage.py)
    if not resolved.is_dir():
        # A bare name or org/name that is a broken link here is no hub id: it was meant local.
        for root in (base_dir, Path.cwd()):
            broken = link_problem(Path(root) / Path(model).expanduser()) if root is not None else None
            if broken:
                return [("options.model", f"{model} is {broken}; point the link at the reward model's folder, "
                                          "or give a hub id that is not a path here")]
        if looks_like_local_path(model):
            where = f"{base_dir} or the current folder" if base_dir is not None else "the current folder"
            return [("options.model", f"folder {model} does not exist (looked in {where})")]
        return []  # a hub id: checked when it is loaded
    config_path = resolved / "config.json"
    if not config_path.exists():
        return [("options.model", f"{resolved} has no config.json; is it a Hugging Face model folder?")]
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [("options.model", f"cannot read {config_path}: {exc}")]
    if not one_label:
        return []
    labels = config.get("id2label")
    count = len(labels) if isinstance(labels, dict) else config.get("num_labels", 2)
    if count != 1:
        return [("options.model", num_labels_message(str(resolved), count))]
    return []


def num_labels_message(model: str, count: object) -> str:
    """The message for a reward model whose classifier does not have one output."""
    return (
        f"{model} has num_labels {count}; a reward model must output one score "
        "(num_labels 1, a sequence-classification head with a single output). A causal LM "
        "or a multi-class classifier cannot be used as a reward model."
    )


def reward_source_problems(rewards_cfg, base_dir=None) -> list[tuple[str, str]]:
    """Problems with what the rewards point at, found without importing user code or
    loading a model: a custom reward's file or function that is missing, options its
    function does not take; a local reward-model folder that is missing or whose
    config does not have exactly one label. Returned as (field path, message) pairs
    like ``("rewards.2.name", "no function 'brevity' in /abs/my_rewards.py; it defines: a, b")``.
    """
    problems = []
    for index, cfg in enumerate(rewards_cfg):
        name, options = cfg.name, cfg.options
        try:
            kind = reward_kind(name)
        except ValueError:
            continue  # the schema reports it
        if kind == "custom":
            found = static_problems(name, options, base_dir)
        elif kind in ("reward_model", "process_reward_model") and isinstance(options.get("model"), str) \
                and options["model"].strip():
            found = _reward_model_problems(options["model"], base_dir, one_label=kind == "reward_model")
        else:
            found = []
        problems += [(f"rewards.{index}.{field}", message) for field, message in found]
    return problems
