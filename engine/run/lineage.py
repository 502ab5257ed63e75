"""Runs that stand on runs: the RLHF pipeline's hand-off. A preset names an earlier run
in two places, `model.start_from` (the policy starts from that run's adapter: an SFT run)
and a `reward_model` reward's `options.model` (a reward-model run scores the
completions). Either may be a run folder (its newest complete checkpoint), a checkpoint
folder inside a run, or `run:PRESET_NAME`, the newest run of that preset that has a
checkpoint in the runs folder (beside the new run's own folder).

`pin_run_references` resolves them before any model loads: it refuses what cannot work,
naming the field and the fix (not a run, no checkpoint yet, a reward-model run without
its score head, a base model or chat template that differs), replaces each reference
with the checkpoint folder it found (so the run's preset.yaml, and a resume, keep the
very checkpoint), and returns the run's `lineage` for run_started
(docs/run-directory.md). Torch-free: the window lists runs by it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from engine.foundation.paths import resolve_data_path
from engine.foundation.run_files import RUN_PREFIX, SCORE_HEAD, checkpoint_run, has_score_head, run_preset
from engine.rewards.kinds import REWARD_MODEL
from engine.run import rundir

__all__ = ["RUN_PREFIX", "RunReferenceError", "RunReference", "is_run_reference", "resolve_run", "runs_of",
           "pin_run_references", "has_score_head", "reward_model_problem"]



class RunReferenceError(ValueError):
    """References to runs that cannot work: `problems`, one line each, naming the field."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class RunReference:
    """A run a preset stands on: its folder, the checkpoint taken, its preset (plain data)."""

    run: Path
    checkpoint: Path
    preset: dict

    def section(self, name: str) -> dict:
        value = self.preset.get(name)
        return value if isinstance(value, dict) else {}

    @property
    def algorithm(self) -> str:
        return str(self.section("algorithm").get("name", "grpo"))

    @property
    def base_model(self) -> str:
        return str(self.section("model").get("name_or_path", "builtin:tiny"))

    @property
    def step(self) -> int:
        return int(self.checkpoint.name.split("_")[1])

    def lineage(self, role: str) -> dict:
        """One entry of run_started's `lineage`."""
        return {"role": role, "run": str(self.run), "checkpoint": self.checkpoint.name, "step": self.step,
                "algorithm": self.algorithm, "preset": str(self.preset.get("name", self.run.name))}


def runs_of(preset_name: str, runs_folder: Path) -> list[Path]:
    """The runs of preset `preset_name` in `runs_folder` that have a complete checkpoint,
    the one with the newest checkpoint last: what `run:NAME` may name."""
    return runs_of_preset(preset_name, runs_folder)[0]


def runs_of_preset(preset_name: str, runs_folder: Path) -> tuple[list[Path], list[Path]]:
    """(the runs of preset `preset_name` in `runs_folder` with a complete checkpoint, the
    newest checkpoint last; those without one yet, the newest last). The window reads the
    second to say which run a later stage still waits for."""
    ready, waiting = [], []
    for run in Path(runs_folder).glob("*") if Path(runs_folder).is_dir() else ():
        if _may_be_named(run / rundir.PRESET_FILE, preset_name) and run_preset(run).get("name") == preset_name:
            checkpoints = rundir.complete_checkpoints(run)
            if checkpoints:
                ready.append(((checkpoints[-1] / rundir.CHECKPOINT_STATE).stat().st_mtime, run))
            else:
                waiting.append(((run / rundir.PRESET_FILE).stat().st_mtime, run))
    return [run for _, run in sorted(ready)], [run for _, run in sorted(waiting)]


# A preset file's top-level `name:` line holding a plain word (as the engine writes a run's
# preset.yaml): enough to tell most runs of a folder from the one asked for unparsed.
_NAME_LINE = re.compile(rb"^name:[ \t]*([A-Za-z0-9_.\-]+)[ \t]*(?:#[^\n]*)?$", re.M)


def _may_be_named(preset_file: Path, preset_name: str) -> bool:
    r"""Whether `preset_file` exists and may be preset `preset_name`'s: False when it is
    missing or its one top-level `name:` line is a plain word other than that name (a
    plain word reads as itself, so the YAML need not be parsed: a scan of a folder of
    hundreds of runs parsed every one, ~6 ms each); True otherwise, to be parsed.

    >>> import tempfile; f = Path(tempfile.mkdtemp()) / "preset.yaml"
    >>> _ = f.write_text("name: grpo-sort\nmodel: {name: builtin:tiny}\n")
    >>> _may_be_named(f, "rm-sort"), _may_be_named(f, "grpo-sort")
    (False, True)
    >>> _ = f.write_text("name: 'rm-sort'\n")  # quoted: parsed
    >>> _may_be_named(f, "rm-sort"), _may_be_named(f.with_name("none.yaml"), "rm-sort")
    (True, False)
    """
    try:
        raw = preset_file.read_bytes()
    except OSError:
        return False
    found = _NAME_LINE.findall(raw)
    return len(found) != 1 or found[0] == preset_name.encode()


def is_run_reference(value: object, base_dir: Path | None = None) -> bool:
    """Whether a start_from or reward-model value names a run (`run:NAME`, a run folder
    or a checkpoint folder in one) rather than a model folder or hub id."""
    if not isinstance(value, str) or not value:
        return False
    if value.startswith(RUN_PREFIX):
        return True
    path = resolve_data_path(value, base_dir)
    return path.is_dir() and ((path / rundir.PRESET_FILE).is_file() or checkpoint_run(path) is not None)


def resolve_run(value: str, field: str, runs_folder: Path, base_dir: Path | None = None) -> RunReference:
    """The run and checkpoint `value` names (see the module); ValueError starting with
    `field` saying what is wrong and what to do."""
    if value.startswith(RUN_PREFIX):
        name = value[len(RUN_PREFIX):].strip()
        runs = runs_of(name, runs_folder)
        if not runs:
            raise ValueError(f"{field}: no run of preset {name!r} with a checkpoint in {runs_folder}; run that "
                             f"preset first (rl-engine run PRESET), or give the run's folder")
        run = runs[-1].resolve()
        return RunReference(run, rundir.complete_checkpoints(run)[-1], run_preset(run))
    path = resolve_data_path(value, base_dir)
    if not path.is_dir():
        raise ValueError(f"{field}: {value} is not a folder; give a run folder, a checkpoint folder in one, or "
                         f"run:PRESET_NAME")
    run = checkpoint_run(path)
    if run is not None:
        return RunReference(run.resolve(), path.resolve(), run_preset(run))
    if not (path / rundir.PRESET_FILE).is_file():
        raise ValueError(f"{field}: {value} is not a run folder (it has no {rundir.PRESET_FILE}); give the folder "
                         f"of a run, a checkpoint folder in one (RUN/checkpoints/step_N), or run:PRESET_NAME")
    checkpoints = rundir.complete_checkpoints(path)
    if not checkpoints:
        raise ValueError(f"{field}: run {path.name} has no checkpoint yet; let it reach its first checkpoint "
                         f"(training.save_steps) or finish, then start again")
    return RunReference(path.resolve(), checkpoints[-1].resolve(), run_preset(path))


def _format_problem(field: str, ref: RunReference, preset, what: str) -> str | None:
    """Why `ref`'s texts were formatted otherwise than `preset` formats them (chat
    template, system prompt, and the tokenizer whose template `auto` takes), or None."""
    theirs, ours = ref.section("model"), preset.model
    their_template = theirs.get("chat_template", "auto")
    if their_template != ours.chat_template:
        return (f"{field}: {what} {ref.run.name} formatted prompts with model.chat_template {their_template!r}, "
                f"this preset with {ours.chat_template!r}; set model.chat_template: {their_template}")
    if their_template == "auto" and ref.base_model != ours.name_or_path:
        return (f"{field}: {what} {ref.run.name} formatted prompts with the chat template of {ref.base_model}, "
                f"this preset with that of {ours.name_or_path}; use the same model.name_or_path, or set "
                "model.chat_template to one template file in both")
    their_system = ref.section("data").get("system_prompt")
    if their_system != preset.data.system_prompt:
        return (f"{field}: {what} {ref.run.name} had data.system_prompt {their_system!r}, this preset "
                f"{preset.data.system_prompt!r}; set the same system prompt")
    return None


def _start_problem(ref: RunReference, preset) -> str | None:
    field = "model.start_from"
    if has_score_head(ref.checkpoint):
        return (f"{field}: {ref.run.name} is a reward model (its adapter carries a score head), a scorer, not a "
                f"policy; use it as a reward (rewards: - name: reward_model, options: {{model: {ref.run}}}), or "
                "start from an SFT or RL run")
    if ref.base_model != preset.model.name_or_path:
        return (f"{field}: {ref.run.name}'s adapter was trained on {ref.base_model}, not on this preset's "
                f"model.name_or_path {preset.model.name_or_path}; set model.name_or_path: {ref.base_model}")
    return _format_problem(field, ref, preset, "run")


def reward_model_problem(field: str, ref: RunReference, preset) -> str | None:
    if not has_score_head(ref.checkpoint):
        return (f"{field}: {ref.run.name} (a {ref.algorithm} run) has no trained score head in "
                f"{ref.checkpoint.name} (no '{SCORE_HEAD}' in its adapter's modules_to_save), so it would score "
                "at random: give a reward-model run (algorithm.name: reward_model); to start the policy from "
                "this run, use model.start_from")
    return _format_problem(field, ref, preset, "reward-model run")


def _checked(value: str, field: str, runs_folder: Path, base_dir: Path | None, problem_of):
    """(the run `value` names, or None; what is wrong with it, or None)."""
    try:
        ref = resolve_run(value, field, runs_folder, base_dir)
    except ValueError as exc:
        return None, str(exc)
    return ref, problem_of(ref)


def pin_run_references(preset, runs_folder: Path, base_dir: Path | None = None):
    """(the preset with every run reference replaced by its checkpoint folder, the
    run's lineage); RunReferenceError naming the field and the fix for each reference that
    cannot work. `preset` is an engine.preset.schema.Preset."""
    lineage, problems = [], []
    model = preset.model
    if model.start_from is not None:
        ref, problem = _checked(model.start_from, "model.start_from", runs_folder, base_dir,
                                lambda ref: _start_problem(ref, preset))
        if problem:
            problems.append(problem)
        else:
            lineage.append(ref.lineage("start_from"))
            model = model.model_copy(update={"start_from": str(ref.checkpoint)})
    rewards = []
    for index, reward in enumerate(preset.rewards):
        value = reward.options.get("model") if reward.name == REWARD_MODEL else None
        if is_run_reference(value, base_dir):
            field = f"rewards.{index}.options.model"
            ref, problem = _checked(value, field, runs_folder, base_dir,
                                    lambda ref: reward_model_problem(field, ref, preset))
            if problem:
                problems.append(problem)
            else:
                lineage.append(ref.lineage("reward_model"))
                reward = reward.model_copy(update={"options": {**reward.options, "model": str(ref.checkpoint)}})
        rewards.append(reward)
    if problems:
        raise RunReferenceError(problems)
    return preset.model_copy(update={"model": model, "rewards": rewards}), lineage
