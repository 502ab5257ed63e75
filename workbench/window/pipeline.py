"""The next stage of a pipeline, from the Runs tab's context menu: "Start a policy from
this run" (the set-up form's preset starts from the run's adapter, `model.start_from`, on
the run's base model) and "Use as reward model" (a reward-model run added to the form's
rewards). `PipelineController`, owned by MainWindow: it edits the set-up form as a user
would, and launches nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from engine.model.config import BUILTIN_MODEL, ModelConfig
from engine.rewards import REWARD_MODEL as REWARD_MODEL_KIND
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
