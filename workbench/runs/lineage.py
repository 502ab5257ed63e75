"""A run's pipeline: the runs it was built from (RLHF: an SFT run whose adapter it starts
from, a reward-model run that scores it), as its run_started event's `lineage` says, and
the runs folder's reward-model runs a preset can use. No Qt: the runs list, the run
header and the rewards editor draw from this.

The contract (the engine writes it, docs/run-directory.md): run_started's `lineage` is a
list of `{"role": "start_from" | "reward_model", "run": "/abs/run", "checkpoint":
"step_000300", "step": 300, "algorithm": "sft", "preset": "sft-sort"}`; absent or empty
in a run built from nothing but its base model, and in runs older than the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from engine.foundation.run_files import SCORE_HEAD, has_score_head, run_preset
from engine.run import rundir

START_FROM, REWARD_MODEL = "start_from", "reward_model"  # the roles a lineage entry names
_ROLE_ORDER = {START_FROM: 0, REWARD_MODEL: 1}  # the policy's origin first, then what scores it
RUN_STAMP = re.compile(r"-\d{8}-\d{6}(-\d+)?$")  # the launch time the engine and the window end a run's name with


def strip_stamp(name: str) -> str:
    """
    >>> strip_stamp("sft-sort-20261128-140000"), strip_stamp("my-run")
    ('sft-sort', 'my-run')
    """
    return RUN_STAMP.sub("", name) or name


@dataclass(frozen=True)
class Stage:
    """One earlier run of a pipeline, as the later run's lineage names it."""

    role: str  # start_from | reward_model (another role the engine adds later reads as itself)
    run: Path
    checkpoint: str = ""
    step: int | None = None
    algorithm: str = ""
    preset: str = ""

    @property
    def name(self) -> str:
        return self.run.name

    @property
    def label(self) -> str:
        """The stage's short name: "RM" for the run that scores (its role), else its
        algorithm's ("SFT", "GRPO"), or "run"."""
        if self.role == REWARD_MODEL:
            return "RM"
        return algorithm_label(self.algorithm) if self.algorithm else "run"

    @property
    def where(self) -> str:
        """"step 300" (the checkpoint's step), "step_000300" without a step, or ""."""
        if self.step is not None:
            return f"step {self.step}"
        return self.checkpoint


def algorithm_label(algorithm: str) -> str:
    """An algorithm's name as the window shows it (the window learns no algorithm names).

    >>> algorithm_label("sft"), algorithm_label("reward_model"), algorithm_label("online_dpo")
    ('SFT', 'REWARD MODEL', 'ONLINE DPO')
    """
    return algorithm.replace("_", " ").upper()


def stages_of(lineage) -> list[Stage]:
    """The stages a run_started `lineage` names, the policy's origin first, then its
    reward models; an entry without a run folder is left out (a run of an engine that
    wrote something else reads as one without a pipeline, never as an error).

    >>> [s.label + " " + s.name for s in stages_of([
    ...     {"role": "reward_model", "run": "/r/rm-sort", "algorithm": "reward_model"},
    ...     {"role": "start_from", "run": "/r/sft-sort", "step": 300, "algorithm": "sft"}, "junk"])]
    ['SFT sft-sort', 'RM rm-sort']
    """
    if not isinstance(lineage, list):
        return []
    stages = []
    for entry in lineage:
        if not isinstance(entry, dict) or not isinstance(entry.get("run"), str) or not entry["run"]:
            continue
        step = entry.get("step")
        stages.append(Stage(role=str(entry.get("role") or ""), run=Path(entry["run"]),
                            checkpoint=str(entry.get("checkpoint") or ""),
                            step=step if isinstance(step, int) and not isinstance(step, bool) else None,
                            algorithm=str(entry.get("algorithm") or ""), preset=str(entry.get("preset") or "")))
    return sorted(stages, key=lambda s: _ROLE_ORDER.get(s.role, len(_ROLE_ORDER)))


def family_text(stages: list[Stage]) -> str:
    """The runs list's short words for a pipeline: where the policy came from, then each
    reward model, by their names without the launch time (the column is narrow; its
    tooltip names the folders).

    >>> family_text(stages_of([{"role": "start_from", "run": "/r/sft-a-20261128-140000", "algorithm": "sft"},
    ...                        {"role": "reward_model", "run": "/r/rm-a-20261128-150000"}]))
    'from sft-a · RM rm-a'
    """
    words = [f"from {strip_stamp(s.name)}" if s.role == START_FROM else f"{s.label} {strip_stamp(s.name)}"
             for s in stages]
    return " · ".join(words)


def pipeline_text(stages: list[Stage], algorithm: str) -> str:
    """The pipeline in stage names, this run last.

    >>> pipeline_text(stages_of([{"role": "start_from", "run": "/r/a", "algorithm": "sft"},
    ...                          {"role": "reward_model", "run": "/r/b", "algorithm": "reward_model"}]), "ppo")
    'SFT → RM → PPO'
    """
    return " → ".join([s.label for s in stages] + [algorithm_label(algorithm) if algorithm else "this run"])


def pipeline_tooltip(stages: list[Stage], algorithm: str, name: str) -> str:
    """The whole pipeline spelled out: the stages' names, then each one's folder and
    checkpoint (plain text, one line each)."""
    lines = [pipeline_text(stages, algorithm)]
    for stage in stages:
        role = "starts from" if stage.role == START_FROM else "scored by" if stage.role == REWARD_MODEL else stage.role
        at = f" at {stage.checkpoint}" if stage.checkpoint else ""
        step = f" (step {stage.step})" if stage.step is not None else ""
        lines.append(f"{stage.label}: {role} {stage.run}{at}{step}")
    lines.append(f"{algorithm_label(algorithm) if algorithm else 'this run'}: {name}")
    return "\n".join(lines)


# ------------------------------------------------------- the runs a preset can use


@dataclass(frozen=True)
class RewardModelRun:
    """A reward-model run of the runs folder, with a complete checkpoint to score with."""

    path: Path
    preset: str  # the preset's name (run:PRESET picks its newest run)
    step: int  # its newest complete checkpoint's
    accuracy: float | None  # the held-out accuracy of its last evaluation, if it logged one
    saved: float  # when its newest checkpoint was complete (run:PRESET takes the newest: engine/run/lineage.py)

    @property
    def name(self) -> str:
        return self.path.name

    def describe(self) -> str:
        """
        >>> RewardModelRun(Path("/r/rm-sort-1"), "rm-sort", 200, 0.9125, 0.0).describe()
        'rm-sort-1 — step 200, accuracy 0.912'
        """
        accuracy = f", accuracy {self.accuracy:.3g}" if self.accuracy is not None else ""
        return f"{self.name} — step {self.step}{accuracy}"


_TAIL_BYTES = 256 * 1024


def last_accuracy(run_dir: Path) -> float | None:
    """The accuracy of the last evaluation in a run's events' tail (None: none logged)."""
    events = rundir.read_jsonl_tail(Path(run_dir) / rundir.EVENTS_FILE, _TAIL_BYTES)
    for event in reversed(events):
        value = event.get("accuracy")
        if event.get("type") == "eval" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def reward_model_runs(folder: Path | None) -> list[RewardModelRun]:
    """The reward-model runs in `folder` that have a complete checkpoint, the newest
    checkpoint first."""
    found = []
    try:
        folders = [p for p in Path(folder).iterdir() if p.is_dir()] if folder else []
    except OSError:
        return []
    for run_dir in folders:
        checkpoints = rundir.complete_checkpoints(run_dir)
        if not checkpoints or not has_score_head(checkpoints[-1]):
            continue
        newest = checkpoints[-1]
        found.append(RewardModelRun(
            path=run_dir.resolve(), preset=str(run_preset(run_dir).get("name") or ""),
            step=int(newest.name.split("_")[1]), accuracy=last_accuracy(run_dir),
            saved=(newest / rundir.CHECKPOINT_STATE).stat().st_mtime))
    return sorted(found, key=lambda r: r.saved, reverse=True)


def has_complete_checkpoint(run_dir: Path) -> bool:
    return bool(rundir.complete_checkpoints(run_dir))


def is_reward_model_run(run_dir: Path) -> bool:
    """Whether a run is a reward model (not its algorithm's name): its newest complete
    checkpoint's adapter carries a trained score head, what the engine's reward loads; a
    run with no checkpoint yet, its run_started's model `head` is `score`."""
    checkpoints = rundir.complete_checkpoints(run_dir)
    if checkpoints:
        return has_score_head(checkpoints[-1])
    first = rundir.read_first_record(Path(run_dir) / rundir.EVENTS_FILE) or {}
    model = first.get("model")
    return isinstance(model, dict) and model.get("head") == SCORE_HEAD
