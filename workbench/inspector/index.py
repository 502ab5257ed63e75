"""The step files on disk, and what is gathered across them: a prompt group's
completions and a prompt's history. No Qt.

`TrajectoryIndex` indexes the step files on disk and loads them lazily (a few recent
steps are cached); `poll()` notices new steps of a live run from the folder's mtime.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.run import rundir
from workbench.inspector.quantities import _int, _num
from workbench.inspector.records import Trajectory, parse_records
from workbench.inspector.steps import Reference, references, step_scores
from workbench.run_declaration import PAIR, declared_records

# ================================================================ on disk

_STEP_FILE = re.compile(r"^step_(\d+)\.jsonl$")
_PROMPT_RE = re.compile(rb'"prompt":\s*"((?:[^"\\]|\\.)*)"')
_INDEX_RE = re.compile(rb'"index":\s*(-?\d+)')



class TrajectoryIndex:
    """The step files of a run's trajectories/ folder: which steps are on disk
    (`steps`, kept current by `poll()`), their records loaded on demand and the last
    `cache_size` steps kept, and which steps recorded a given prompt (`scan_prompts`
    reads the files a few at a time, picking the prompts out of the raw lines)."""

    def __init__(self, run_dir: str | Path, cache_size: int = 48, declared: dict | None = None):
        """`declared`: the run's record declaration (None: each record's old default)."""
        self.run_dir = Path(run_dir)
        self.declared = declared
        self.folder = self.run_dir / rundir.TRAJECTORIES_DIR
        self.steps: list[int] = []
        self._stamp: int | None = None
        self._polls = 0
        self._cache: OrderedDict[int, tuple[tuple, list[Trajectory]]] = OrderedDict()
        self.cache_size = cache_size
        self._prompts: dict[int, tuple[tuple, list[tuple[int, str]]]] = {}  # step -> (stamp, [(index, prompt)])

    @classmethod
    def of_run(cls, run) -> "TrajectoryIndex | None":
        """The index of a run (RunData, or None), reading its records in the layout the
        run declared."""
        return cls(run.run_dir, declared=declared_records(run.started)) if run is not None else None

    def poll(self) -> bool:
        """Re-list the folder if it changed (its mtime moves when a step file is renamed
        into it; re-listed every 10th poll anyway). True when the steps changed."""
        self._polls += 1
        try:
            stamp = self.folder.stat().st_mtime_ns
        except OSError:
            stamp = None
        if stamp == self._stamp and self._polls % 10 and self.steps:
            return False
        self._stamp = stamp
        steps: list[int] = []
        if stamp is not None:
            try:
                with os.scandir(self.folder) as it:
                    for entry in it:
                        m = _STEP_FILE.match(entry.name)
                        if m:
                            steps.append(int(m.group(1)))
            except OSError:
                pass
        steps.sort()
        if steps != self.steps:
            self.steps = steps
            return True
        return False

    def _file_stamp(self, step: int) -> tuple | None:
        try:
            st = rundir.trajectory_path(self.run_dir, step).stat()
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns)

    def records(self, step: int) -> list[Trajectory]:
        """The records of one step ([] when it has no file). A file rewritten since it
        was read (a resumed run redoes steps) is read again."""
        stamp = self._file_stamp(step)
        hit = self._cache.get(step)
        if hit is not None and hit[0] == stamp:
            self._cache.move_to_end(step)
            return hit[1]
        if stamp is None:
            self._cache.pop(step, None)
            return []
        try:
            data = rundir.trajectory_path(self.run_dir, step).read_bytes()
        except OSError:
            return []
        records = parse_records(data, self.declared)
        self._cache[step] = (stamp, records)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return records

    def find(self, step: int, index: int) -> Trajectory | None:
        for record in self.records(step):
            if record.index == index:
                return record
        return None

    def neighbour_step(self, step: int, direction: int) -> int | None:
        """The step on disk after (+1) or before (-1) `step`."""
        import bisect

        if not self.steps:
            return None
        if direction > 0:
            i = bisect.bisect_right(self.steps, step)
            return self.steps[i] if i < len(self.steps) else None
        i = bisect.bisect_left(self.steps, step) - 1
        return self.steps[i] if i >= 0 else None

    def nearest_step(self, step: int) -> int | None:
        if not self.steps:
            return None
        return min(self.steps, key=lambda s: (abs(s - step), s))

    # ---------------------------------------------------------------- prompts

    def scan_prompts(self, budget_s: float = 0.02) -> bool:
        """Read the prompts of files not yet scanned (or rewritten) for at most
        `budget_s`; True when every step on disk is scanned."""
        deadline = time.perf_counter() + budget_s
        for step in self.steps:
            hit = self._prompts.get(step)
            if hit is not None:
                continue
            stamp = self._file_stamp(step)
            try:
                data = rundir.trajectory_path(self.run_dir, step).read_bytes()
            except OSError:
                continue
            found = []
            for line in data.splitlines():
                m = _PROMPT_RE.search(line)
                if not m:
                    continue
                try:
                    prompt = json.loads(b'"' + m.group(1) + b'"')
                except ValueError:
                    continue
                im = _INDEX_RE.search(line)
                found.append((int(im.group(1)) if im else -1, prompt))
            self._prompts[step] = (stamp, found)
            if time.perf_counter() > deadline:
                return self.prompts_scanned() >= len(self.steps)
        return True

    def prompts_scanned(self) -> int:
        return sum(1 for s in self.steps if s in self._prompts)

    def steps_with_prompt(self, prompt: str) -> list[tuple[int, int]]:
        """(step, index) of every scanned record with this prompt."""
        out = []
        for step in self.steps:
            hit = self._prompts.get(step)
            if hit is None:
                continue
            out += [(step, index) for index, p in hit[1] if p == prompt]
        return out


# ================================================================ groups


@dataclass
class GroupRow:
    index: int
    reward: float | None
    rewards: dict
    advantage: float | None
    completion: str
    trajectory: Trajectory | None = None  # None: only in a samples event (text, no tokens)
    component_advantages: dict = field(default_factory=dict)  # {reward name: its own advantage}, when written
    label: bool | None = None  # an unpaired completion: desirable (True) or not
    steps: dict = field(default_factory=dict)  # {step reward: [score of each step]}, when written
    episode: dict | None = None  # a multi-turn episode's `episode` mapping (turns, tool calls), when written


@dataclass
class Baseline:
    """The greedy completion of a group's prompt that its rewards are measured against
    (`baseline` of its rows): scored, not sampled, not trained on (it has no tokens)."""

    completion: str
    reward: float | None
    rewards: dict

    @classmethod
    def of(cls, value: Any) -> "Baseline | None":
        """From a row's `baseline` mapping; None when it has none.

        >>> Baseline.of({"completion": " 1 2", "reward": 1.0, "rewards": {"exact_match": 1.0}}).reward
        1.0
        """
        if not isinstance(value, dict):
            return None
        rewards = value.get("rewards")
        return cls(completion=str(value.get("completion", "")), reward=_float(value.get("reward")),
                   rewards=dict(rewards) if isinstance(rewards, dict) else {})


@dataclass
class Group:
    step: int
    group: int
    prompt: str
    rows: list[GroupRow] = field(default_factory=list)
    size: int | None = None  # num_generations, when known
    baseline: Baseline | None = None  # the greedy completion the rewards are measured against, when written
    weights: dict = field(default_factory=dict)  # {reward label: weight} from the run's preset, when known

    @property
    def reward_names(self) -> list[str]:
        """The rewards some row has an advantage of its own for, in order of first sight."""
        names: list[str] = []
        for row in self.rows:
            names += [k for k in row.component_advantages if k not in names]
        return names

    @property
    def step_references(self) -> dict[str, Reference]:
        """Each step reward's scores over the group's completions (their mean colours the
        step badges; their midpoint tells a wrong step)."""
        return references([row.steps for row in self.rows])

    @property
    def steps_differ(self) -> bool:
        """Some step reward scored some step of the group differently from another: the
        steps carry a signal even where the completions' totals tie."""
        return any(r.threshold is not None for r in self.step_references.values())

    @property
    def complete(self) -> bool:
        return self.size is not None and len(self.rows) >= self.size

    @property
    def rewards_equal(self) -> bool:
        rewards = [r.reward for r in self.rows if r.reward is not None and math.isfinite(r.reward)]
        return len(rewards) >= 2 and max(rewards) - min(rewards) <= 1e-9 * max(1.0, abs(rewards[0]))

    @property
    def no_signal(self) -> bool:
        """Every completion of the group got the same reward: the group-relative
        advantages are all 0 and the update learns nothing from it. Judged from the
        whole group, or, when only part of it is on disk, from the advantages too."""
        if not self.rewards_equal or self.steps_differ:
            return False
        advantages = [r.advantage for r in self.rows if r.advantage is not None]
        if any(abs(a) >= 1e-6 for a in advantages):
            return False  # measured against something besides the group (a greedy baseline), or others differ
        return self.complete or bool(advantages)

    def flag(self) -> str:
        """What to tell the user about the group's signal ('' when there is signal)."""
        reward = next((r.reward for r in self.rows if r.reward is not None), None)
        if self.no_signal:
            return (f"No learning signal: all {len(self.rows)} completions of this group got reward "
                    f"{_num(reward)}, so every advantage is 0 and the update learns nothing from them.")
        if self.rewards_equal and self.steps_differ:
            return (f"All {len(self.rows)} completions got reward {_num(reward)}, but their steps were scored "
                    "differently: each step's reward is normalised over the group's steps, so the update still "
                    "learns from them.")
        if self.rewards_equal and self.baseline is not None:
            return (f"All {len(self.rows)} completions got reward {_num(reward)}, but the greedy baseline got "
                    f"{_num(self.baseline.reward)}: each advantage is reward - baseline, so the update still "
                    "learns from them.")
        if self.rewards_equal and not self.complete:
            return (f"The {len(self.rows)} completions on record got the same reward, but the group has "
                    f"{self.size} and the advantages are not 0: the others differ.")
        return ""

    def driving_reward(self, row: GroupRow) -> str | None:
        """The reward that moves a completion's advantage most: the largest |weight x its
        own advantage| (a weight the preset does not give counts 1); None without
        component advantages."""
        return driving_reward(row.component_advantages, self.weights)


def driving_reward(component_advantages: dict, weights: dict) -> str | None:
    """The reward with the largest |weight x advantage|: the one that drives the update.

    >>> driving_reward({"exact_match": 0.5, "format": -1.2}, {"format": 0.25})
    'exact_match'
    >>> driving_reward({"exact_match": 0.5, "format": -1.2}, {}) , driving_reward({}, {})
    ('format', None)
    """
    sized = {k: abs(v * weights.get(k, 1.0)) for k, v in component_advantages.items() if v is not None}
    return max(sized, key=sized.get) if sized and max(sized.values()) > 0 else None


def build_group(records: list[Trajectory], samples: list[dict], step: int, group: int,
                size: int | None = None, weights: dict | None = None) -> Group:
    """The completions of one prompt group at one step: the token-level records, plus
    the completions that only a `samples` event holds (text and reward)."""
    rows: dict[int, GroupRow] = {}
    prompt = ""
    baseline = None
    for sample in samples:
        if not isinstance(sample, dict) or _int(sample.get("group"), -1) != group:
            continue
        index = _int(sample.get("index"), -1)
        prompt = prompt or str(sample.get("prompt", ""))
        baseline = baseline or Baseline.of(sample.get("baseline"))
        rows[index] = GroupRow(index=index, reward=_float(sample.get("reward")),
                               rewards=dict(sample.get("rewards") or {}),
                               advantage=_float(sample.get("advantage")),
                               completion=str(sample.get("completion", "")),
                               component_advantages=_numbers(sample.get("component_advantages")),
                               label=_flag(sample.get("label")), steps=step_scores(sample.get("steps")),
                               episode=_mapping(sample.get("episode")))
    for record in records:
        if record.group != group or record.layout == PAIR:
            continue
        prompt = record.prompt or prompt
        baseline = Baseline.of(record.record.get("baseline")) or baseline
        rewards = record.record.get("rewards")
        rows[record.index] = GroupRow(index=record.index, reward=record.reward,
                                      rewards=dict(rewards) if isinstance(rewards, dict) else {},
                                      advantage=record.advantage, completion=record.sides[0].completion,
                                      trajectory=record,
                                      component_advantages=_numbers(record.record.get("component_advantages")),
                                      label=record.desirable,
                                      steps={c.label: list(c.scores) for c in record.steps},
                                      episode=_mapping(record.record.get("episode")))
    return Group(step=step, group=group, prompt=prompt, rows=[rows[i] for i in sorted(rows)], size=size,
                 baseline=baseline, weights=dict(weights or {}))


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(float(value)) else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _mapping(value: Any) -> dict | None:
    return value if isinstance(value, dict) else None


def _numbers(value: Any) -> dict:
    """{name: number or None} of a mapping of numbers ({} when it is not one)."""
    return {str(k): _float(v) for k, v in value.items()} if isinstance(value, dict) else {}


# ================================================================ prompt history


@dataclass
class HistoryRow:
    step: int
    source: str  # "rollout" (token-level record), "sample" (samples event) or "eval" (greedy, held out)
    index: int | None
    completion: str
    reward: float | None
    advantage: float | None = None
    has_tokens: bool = False
    advantage_is_mean: bool = False  # the advantage varies by token: `advantage` is the tokens' mean


def prompt_history(prompt: str, index: TrajectoryIndex | None, samples=None,
                   eval_samples: list[tuple[int, list[dict]]] | None = None) -> list[HistoryRow]:
    """Every completion of one prompt the run recorded, oldest step first: token-level
    rollouts (those `index.scan_prompts` has reached), samples events and evaluations.
    A rollout that is also in a samples event is listed once, as the rollout."""
    rows: list[HistoryRow] = []
    seen: set[tuple[int, int]] = set()
    if index is not None:
        for step, i in index.steps_with_prompt(prompt):
            t = index.find(step, i)
            if t is None:
                continue
            seen.add((step, i))
            completion = t.sides[0].completion if t.layout != PAIR else \
                " | ".join(f"{s.name}: {s.completion}" for s in t.sides)
            rows.append(HistoryRow(step, "rollout", i, completion, t.reward if t.layout != PAIR
                                   else t.sides[0].reward, t.advantage, True, t.advantage_range is not None))
    if samples is not None:
        n = len(samples)
        if n:
            steps = samples.numbers("step")
            indices = samples.numbers("index")
            rewards = samples.numbers("reward")
            advantages = samples.numbers("advantage")
            for r in range(n):
                if samples.text(r, "prompt") != prompt:
                    continue
                step = int(steps[r])
                i = int(indices[r]) if math.isfinite(indices[r]) else None
                if i is not None and (step, i) in seen:
                    continue
                rows.append(HistoryRow(step, "sample", i, samples.text(r, "completion"),
                                       _float(float(rewards[r])), _float(float(advantages[r]))))
    for step, items in eval_samples or []:
        for item in items:
            if isinstance(item, dict) and item.get("prompt") == prompt:
                rows.append(HistoryRow(int(step), "eval", None, str(item.get("completion", "")),
                                       _float(item.get("reward"))))
    order = {"eval": 0, "rollout": 1, "sample": 2}
    rows.sort(key=lambda r: (r.step, order[r.source], r.index if r.index is not None else -1))
    return rows


# ================================================================ the run's other records


def step_samples(run, step: int | None) -> list[dict]:
    """The `samples` events of one step (RunData's store), as the dicts `build_group` takes."""
    if run is None or not len(run.samples):
        return []
    store = run.samples
    out = []
    for r in np.flatnonzero(store.numbers("step") == step):
        s = store.row(int(r))
        out.append({"index": s.index, "group": s.group, "prompt": s.prompt, "completion": s.completion,
                    "reward": s.reward, "rewards": s.rewards, "advantage": s.advantage,
                    "component_advantages": s.component_advantages, "baseline": s.baseline, "label": s.label,
                    "steps": s.steps, "episode": s.episode})
    return out


def sample_group(run, step: int, index: int) -> int | None:
    """The group of rollout `index` of `step`, from the samples events (None: not there)."""
    if run is None:
        return None
    store = run.samples
    if not len(store):
        return None
    rows = np.flatnonzero((store.numbers("step") == step) & (store.numbers("index") == index))
    return store.row(int(rows[0])).group if rows.size else None


def run_group(run, records: list[Trajectory], step: int, group: int) -> Group:
    """The group `group` of a step of a run (RunData): its records, its samples event's
    rows, its size and its rewards' weights from the preset."""
    return build_group(records, step_samples(run, step), step, group, group_size(run), reward_weights(run))


def reward_weights(run) -> dict[str, float]:
    """{reward label: weight} of the run's preset (labels as the rewards are logged)."""
    from engine.rewards import component_label

    weights = {}
    for item in (getattr(run, "preset", None) or {}).get("rewards") or []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            weight = item.get("weight", 1.0)
            label = item.get("label") if isinstance(item.get("label"), str) else None
            weights[component_label(item["name"], label)] = float(weight) if isinstance(weight, (int, float)) else 1.0
    return weights


def group_size(run) -> int | None:
    """num_generations from the run's preset, when it has one."""
    size = ((getattr(run, "preset", None) or {}).get("algorithm") or {}).get("num_generations")
    return size if isinstance(size, int) else None


def recorded_per_step(run):
    """training.record_rollouts from the run's preset (None when unset)."""
    return ((getattr(run, "preset", None) or {}).get("training") or {}).get("record_rollouts")


def no_records_reason(run) -> str:
    """Why a run shows no trajectory records."""
    recorded = recorded_per_step(run)
    if recorded == 0:
        return "This run records no trajectories (training.record_rollouts is 0)."
    status = getattr(run, "status", "")
    if status in ("running", "empty"):
        return ("No trajectory records yet: the engine writes trajectories/step_N.jsonl after each step "
                f"({'training.record_rollouts = ' + str(recorded) if recorded else 'a few rollouts a step'}).")
    return "This run has no trajectory records (no trajectories/ folder)."
