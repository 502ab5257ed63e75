"""What the floors below engine/run/ may read of a run folder: its file names, a
checkpoint's run, the run's preset (unvalidated YAML) and the chain of adapters a
checkpoint stands on. A run that started from another run's checkpoint
(`model.start_from`, pinned to that checkpoint's folder in the run's preset.yaml) holds
an adapter trained on the base model with that checkpoint's adapters merged in: loading
it (engine/model/loading.py) and scoring with a reward-model run (engine/rewards/model.py)
merge the whole chain, oldest first. engine/run/rundir.py names the same files.
Torch-free, stdlib and YAML only.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["RUN_PREFIX", "PRESET_FILE", "CHECKPOINTS_DIR", "CHECKPOINT_STATE", "ADAPTER_CONFIG", "SCORE_HEAD",
           "checkpoint_run", "run_preset", "adapter_chain", "is_adapter", "has_score_head", "adapter_base_model"]

RUN_PREFIX = "run:"  # run:PRESET_NAME, the newest run of a preset (engine/run/lineage.py)
PRESET_FILE = "preset.yaml"
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_STATE = "state.json"
ADAPTER_CONFIG = "adapter_config.json"
SCORE_HEAD = "score"  # the one-output head a reward-model run trains beside its adapter

# The longest chain of runs started from runs followed (a loop of hand-edited presets ends here).
MAX_CHAIN = 16


def checkpoint_run(checkpoint: str | Path) -> Path | None:
    """The run folder of a complete checkpoint folder (RUN/checkpoints/step_N), or None
    when `checkpoint` is not one."""
    checkpoint = Path(checkpoint)
    run = checkpoint.parent.parent
    if (checkpoint.parent.name == CHECKPOINTS_DIR and (checkpoint / CHECKPOINT_STATE).is_file()
            and (run / PRESET_FILE).is_file()):
        return run
    return None


def run_preset(run: str | Path) -> dict:
    """A run's preset.yaml as plain data ({} when it cannot be read): what a lineage
    needs of it (its algorithm, model and start) without validating it."""
    from engine.foundation.io import read_preset_dict

    try:
        data = read_preset_dict(Path(run) / PRESET_FILE)
    except Exception:  # any unreadable file: the caller says what it lacks
        return {}
    return data if isinstance(data, dict) else {}


def start_of(preset: dict) -> str | None:
    """A preset's (plain data) model.start_from, or None."""
    model = preset.get("model")
    value = model.get("start_from") if isinstance(model, dict) else None
    return value if isinstance(value, str) and value else None


def adapter_chain(checkpoint: str | Path) -> list[Path]:
    """The adapters to merge into the base model, oldest first, to get the model
    `checkpoint`'s adapter was trained on, and that adapter last: [checkpoint] for a run
    that started from the base model. A run's start is read from its preset.yaml, where
    the engine pins it to a checkpoint folder.

    >>> adapter_chain("/nowhere/step_000001")
    [PosixPath('/nowhere/step_000001')]
    """
    chain = [Path(checkpoint)]
    while len(chain) <= MAX_CHAIN:
        run = checkpoint_run(chain[0])
        start = start_of(run_preset(run)) if run is not None else None
        if start is None:
            return chain
        chain.insert(0, Path(start))
    raise ValueError(f"model.start_from: {checkpoint} stands on more than {MAX_CHAIN} runs started from runs "
                     "(a loop?); start from a run nearer the base model")


def is_adapter(folder: str | Path) -> bool:
    """Whether `folder` holds a peft adapter (a checkpoint, an exported adapter)."""
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def adapter_config(folder: str | Path) -> dict:
    try:
        config = json.loads((Path(folder) / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def has_score_head(folder: str | Path) -> bool:
    """Whether an adapter carries a trained score head (peft's modules_to_save), as a
    reward-model run's checkpoints do."""
    return SCORE_HEAD in (adapter_config(folder).get("modules_to_save") or [])


def adapter_base_model(folder: str | Path) -> str | None:
    """The base model an adapter was trained on: its run's model.name_or_path when it is
    a run's checkpoint, else what peft wrote in adapter_config.json."""
    run = checkpoint_run(folder)
    if run is not None:
        model = run_preset(run).get("model")
        if isinstance(model, dict) and isinstance(model.get("name_or_path"), str):
            return model["name_or_path"]
        return "builtin:tiny"
    return adapter_config(folder).get("base_model_name_or_path")
