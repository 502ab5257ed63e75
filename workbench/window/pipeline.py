"""The next stage of a pipeline, from the Runs tab's context menu: "Start a policy from
this run" (the set-up form's preset starts from the run's adapter, `model.start_from`, on
the run's base model) and "Use as reward model" (a reward-model run added to the form's
rewards). `PipelineController`, owned by MainWindow: it edits the set-up form as a user
would, and launches nothing.

And, without Qt, which earlier stages a preset needs that the runs folder does not hold
yet (`needed_runs`, `stages_first`): a preset naming `run:NAME` (model.start_from, a
reward model's options.model) stands on the newest run of preset NAME with a complete
checkpoint, as the engine resolves it (engine/run/lineage.py), so the start page can say
which stage must run first before launching one the engine would refuse."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.foundation.errors import PresetError
from engine.foundation.io import read_preset_dict
from engine.foundation.run_files import RUN_PREFIX
from engine.model.config import BUILTIN_MODEL, ModelConfig
from engine.rewards import REWARD_MODEL as REWARD_MODEL_KIND
from engine.run.lineage import runs_of_preset
from workbench.runs.lineage import has_complete_checkpoint, is_reward_model_run
from workbench.setup.model_picker import type_into
from workbench.window.hooks import WindowHooks
from workbench.window.names import SETUP

START_FROM = "model.start_from"
NAME_OR_PATH = "model.name_or_path"
# What a run started from must share with the run it starts from (the engine's check,
# engine/run/lineage.py), with the value a preset that leaves it out has.
MATCHED = {NAME_OR_PATH: BUILTIN_MODEL, "model.chat_template": "auto", "data.system_prompt": None}
NO_CHECKPOINT = ("{name} has no complete checkpoint yet (one is saved every training.save_steps steps and when a "
                 "run ends or is stopped)")


def engine_has_start_from() -> bool:
    """Whether this engine's presets have `model.start_from` (older ones do not: the form
    then has no field for it, and a preset naming it would be refused)."""
    return "start_from" in ModelConfig.model_fields


class PipelineController:
    """Given the window's callbacks (workbench/window/hooks.py), the set-up form (`setup`:
    its fields and rewards editor, which write the document) and `run_preset(run dir)`, a
    run's resolved preset."""

    def __init__(self, window: WindowHooks, setup, run_preset: Callable[[Path], dict | None]):
        self.window, self.setup, self.run_preset = window, setup, run_preset

    @property
    def doc(self):
        return self.setup.doc

    # ------------------------------------------------------------ start from

    def start_policy_from(self, run_dir: str | Path) -> bool:
        """Set the form's preset to start from the run's adapter, on the run's own base
        model (the adapter fits only the base it was trained on) and with its chat
        template and system prompt (the engine refuses a start that formatted prompts
        otherwise). False when refused."""
        run_dir = Path(run_dir).resolve()
        problem = self._start_from_problem(run_dir)
        preset = self.run_preset(run_dir) or {}
        base = (preset.get("model") or {}).get("name_or_path")
        if problem is None and not isinstance(base, str):
            problem = f"{run_dir.name}'s preset names no model.name_or_path to start from"
        if problem is not None:
            self.window.refuse(problem)
            return False
        changed = self._match_run(preset)
        self._type(START_FROM, str(run_dir))
        self.window.show_tab(SETUP)
        self.window.show_message(f"The preset starts from {run_dir.name}'s adapter on {base}"
                                 + (f" (set as the run's: {', '.join(changed)})" if changed else ""))
        return True

    def _match_run(self, preset: dict) -> list[str]:
        """Give the form the run's model and prompt format where they differ; the fields
        changed."""
        changed = []
        for path in MATCHED:
            section, _, key = path.partition(".")
            theirs = (preset.get(section) or {}).get(key, MATCHED[path])
            if self.doc.get(path, MATCHED[path]) != theirs:
                self._type(path, theirs)
                changed.append(path)
        if NAME_OR_PATH in changed and self.doc.get("model.lora.target_modules") != "auto":
            # Module names listed for the model that was there may match nothing in this one.
            self.doc.set("model.lora.target_modules", "auto")
        return changed

    def _start_from_problem(self, run_dir: Path) -> str | None:
        if not engine_has_start_from():
            return ("This engine's presets have no model.start_from yet: update the engine (engine/model/config.py) "
                    "to start a policy from a run")
        if is_reward_model_run(run_dir):
            return f"{run_dir.name} is a reward model: use it as a reward, not as a policy to start from"
        if not has_complete_checkpoint(run_dir):
            return NO_CHECKPOINT.format(name=run_dir.name)
        return None

    # ---------------------------------------------------------- reward model

    def use_as_reward_model(self, run_dir: str | Path) -> bool:
        """Add the reward-model run to the form's rewards (options.model: its folder).
        False when refused (not a reward model, no checkpoint, a reward already)."""
        run_dir = Path(run_dir).resolve()
        if not has_complete_checkpoint(run_dir):
            problem = NO_CHECKPOINT.format(name=run_dir.name)
        elif not is_reward_model_run(run_dir):
            problem = f"{run_dir.name} is not a reward-model run (its checkpoint has no trained score head)"
        elif self._rewarded_by(run_dir):
            problem = f"{run_dir.name} is one of the preset's rewards already"
        else:
            problem = None
        if problem is not None:
            self.window.refuse(problem)
            return False
        self.setup.rewards.add_reward_model(model=str(run_dir))
        self.window.show_tab(SETUP)
        self.window.show_message(f"{run_dir.name} added to the rewards (a reward model, weight "
                                 f"{self.doc.get('rewards')[-1].get('weight')})")
        return True

    def _rewarded_by(self, run_dir: Path) -> bool:
        rewards = self.doc.get("rewards")
        for item in rewards if isinstance(rewards, list) else []:
            if not isinstance(item, dict) or item.get("name") != REWARD_MODEL_KIND:
                continue
            model = (item.get("options") or {}).get("model") if isinstance(item.get("options"), dict) else None
            if isinstance(model, str) and _same_folder(model, run_dir):
                return True
        return False

    # ---------------------------------------------------------------- typing

    def _type(self, path: str, value: str | None) -> None:
        """Put `value` in the form's field as typed (validation and preview follow); the
        document directly when the form has no such line, or to clear a field."""
        row = self.setup.rows().get(path)
        if value is not None and row is not None and hasattr(row.editor, "line"):
            type_into(row.editor, value)
        else:
            self.doc.set(path, value)


def _same_folder(text: str, run_dir: Path) -> bool:
    try:
        return Path(text).expanduser().resolve() == run_dir
    except (OSError, RuntimeError):
        return False


# ------------------------------------------------------ the stages a preset needs first


@dataclass(frozen=True)
class NeededRun:
    """A `run:NAME` reference of a preset with no run of NAME to stand on yet."""

    field: str  # model.start_from, rewards.N.options.model
    preset: str  # NAME
    waiting: tuple[Path, ...] = ()  # runs of NAME without a complete checkpoint yet, newest last

    @property
    def role(self) -> str:
        """
        >>> NeededRun("model.start_from", "sft-sort").role, NeededRun("rewards.0.options.model", "rm").role
        ('starts from', 'is scored by')
        """
        return "starts from" if self.field == START_FROM else "is scored by"


def run_references(preset: dict) -> list[tuple[str, str]]:
    """(field, NAME) of each `run:NAME` the preset names, its start first, as the engine
    reads them (engine/run/lineage.py: model.start_from, a reward_model's options.model).

    >>> run_references({"model": {"start_from": "run:sft"}, "rewards": [
    ...     {"name": "exact_match"}, {"name": "reward_model", "options": {"model": "run:rm"}}]})
    [('model.start_from', 'sft'), ('rewards.1.options.model', 'rm')]
    """
    found = []
    model = preset.get("model") if isinstance(preset, dict) else None
    start = model.get("start_from") if isinstance(model, dict) else None
    if isinstance(start, str) and start.startswith(RUN_PREFIX):
        found.append((START_FROM, start[len(RUN_PREFIX):].strip()))
    rewards = preset.get("rewards") if isinstance(preset, dict) else None
    for index, reward in enumerate(rewards if isinstance(rewards, list) else []):
        options = reward.get("options") if isinstance(reward, dict) else None
        model = options.get("model") if isinstance(options, dict) and reward.get("name") == REWARD_MODEL_KIND else None
        if isinstance(model, str) and model.startswith(RUN_PREFIX):
            found.append((f"rewards.{index}.options.model", model[len(RUN_PREFIX):].strip()))
    return found


def needed_runs(preset: dict, runs_folder: Path) -> list[NeededRun]:
    """The preset's `run:NAME` references that the runs folder cannot resolve yet."""
    needed = []
    for field, name in run_references(preset):
        ready, waiting = runs_of_preset(name, runs_folder)
        if not ready:
            needed.append(NeededRun(field, name, tuple(waiting)))
    return needed


def unresolved_problems(preset: dict, presets: dict[str, Path], runs_folder: Path) -> list[tuple[str, str]]:
    """(field, message) for each `run:NAME` the runs folder cannot resolve yet, as the
    toolbar's Run refuses them (the start page's cards ask instead): which run is missing,
    and the stages to run in order (stages_first)."""
    needed = needed_runs(preset, runs_folder)
    if not needed:
        return []
    order = " → ".join([*stages_first(preset, presets, runs_folder), str(preset.get("name") or "this preset")])
    problems = []
    for need in needed:
        waiting = f" ({need.waiting[-1].name} has no complete checkpoint yet)" if need.waiting else ""
        problems.append((need.field, f"run:{need.preset}: no {need.preset} run with a complete checkpoint in "
                                     f"{runs_folder}{waiting}; run the stages in order: {order}"))
    return problems


def read_preset(path: Path) -> dict:
    try:
        data = read_preset_dict(path)
    except PresetError:
        return {}
    return data if isinstance(data, dict) else {}


def stages_first(preset: dict, presets: dict[str, Path], runs_folder: Path) -> list[str]:
    """The presets to run, in order, before `preset` can: each NAME it needs (and, first,
    what NAME's own preset needs, `presets` giving the file of each known one), earliest
    first. A NAME with no file in `presets` is listed as it is (its runs are the user's)."""
    order: list[str] = []

    def visit(data: dict, seen: tuple[str, ...]) -> None:
        for need in needed_runs(data, runs_folder):
            if need.preset in order or need.preset in seen:
                continue
            if need.preset in presets:
                visit(read_preset(presets[need.preset]), (*seen, need.preset))
            order.append(need.preset)

    visit(preset, ())
    return order
