"""The reward playground's model, no Qt: the completions to score (a run's logged
samples of one step, or typed in), the request for `rl-engine score-rewards`, its answer
read back, and the edited rewards made fit for the set-up form.

The scoring itself runs in the engine (engine/commands/score_rewards.py): rewards may need torch (a
reward model, a user's function), which the window never imports.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.run import rundir
from engine.foundation.io import read_preset_dict
from engine.rewards import absolute_reward_paths, reward_kind, split_custom_name

__all__ = ["Completion", "ScoreResult", "ScoreError", "run_completions", "sample_steps", "typed_completions",
           "build_request", "read_answer", "run_preset", "rewards_for_setup", "TypedInputError", "answer_steps"]


@dataclass
class Completion:
    """One completion to score, with what its run had (NaN / {} for typed ones)."""

    prompt: Any
    completion: str
    group: Any = None
    fields: dict = field(default_factory=dict)
    run_reward: float = math.nan
    run_rewards: dict = field(default_factory=dict)
    run_advantage: float = math.nan
    # Where the run wrote them: the prompt's greedy completion its reward was measured
    # against (sent to be scored with the edited rewards) and that one's reward; each
    # reward's own advantage {label: value}.
    baseline: str | None = None
    run_baseline_reward: float = math.nan
    run_component_advantages: dict = field(default_factory=dict)
    run_steps: dict = field(default_factory=dict)  # {step reward: [score, ...]} the run logged


@dataclass
class ScoreResult:
    """The engine's answer: the components (label, weight, source) in order, and per
    completion its component values, total and new advantage (None where none)."""

    components: list[dict]
    values: list[dict]
    totals: list[float]
    advantages: list[float | None]
    groups: list[Any]
    advantages_computed: bool
    advantages_reason: str
    notes: list[str]
    # Per completion, where the engine gives them: each reward's own advantage {label:
    # value} ({} where none), and the greedy baseline scored by the edited rewards
    # {"completion", "total", "components"} (None where none).
    component_advantages: list[dict] = field(default_factory=list)
    baselines: list[dict | None] = field(default_factory=list)
    # Per completion, for a step reward: {label: [(end, score), ...]}, each step's end
    # character offset in the completion and its score ({} where none).
    steps: list[dict] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        return [c["label"] for c in self.components]

    @property
    def step_labels(self) -> list[str]:
        """The step rewards some completion has steps of, in the components' order."""
        seen = {label for item in self.steps for label in item}
        return [label for label in self.labels if label in seen] + sorted(seen - set(self.labels))

    @property
    def weights(self) -> dict[str, float]:
        return {c["label"]: float(c["weight"]) for c in self.components}


@dataclass
class ScoreError:
    """Why scoring failed: the message, and the file and line of a fault in the user's
    own reward function (None when not in user code); problems by field path."""

    message: str
    file: str | None = None
    line: int | None = None
    problems: list = field(default_factory=list)

    @property
    def where(self) -> str:
        """`FILE:LINE`, or "" when the fault is not in a file of the user's."""
        return f"{self.file}:{self.line}" if self.file else ""


class TypedInputError(ValueError):
    """Typed-in completions or fields that cannot be scored; the message says what to fix."""


# ------------------------------------------------------------------ sources


def sample_steps(run) -> list[int]:
    """The steps a run (RunData) logged samples at, in order."""
    steps = run.samples.numbers("step") if len(run.samples) else []
    return sorted({int(s) for s in steps})


def run_completions(run, step: int) -> list[Completion]:
    """The samples a run (RunData) logged at `step`, with its reward, components and
    advantage of each. Samples events carry no data fields: the engine looks them up in
    the preset's data (fields_from_data)."""
    found = []
    for sample in run.samples.rows:
        if sample.step == step:
            baseline = sample.baseline or {}
            found.append(Completion(prompt=sample.prompt, completion=sample.completion, group=sample.group,
                                    run_reward=sample.reward, run_rewards=dict(sample.rewards),
                                    run_advantage=sample.advantage,
                                    baseline=baseline.get("completion") if isinstance(baseline.get("completion"),
                                                                                      str) else None,
                                    run_baseline_reward=sample.baseline_reward,
                                    run_component_advantages=dict(sample.component_advantages),
                                    run_steps=dict(sample.steps)))
    return found


def _unescape(text: str) -> str:
    # One completion a line: `\n` writes a line break inside one, `\\` a backslash.
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in "n\\t":
            out.append({"n": "\n", "t": "\t", "\\": "\\"}[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def parse_fields(text: str) -> dict[str, str]:
    """`NAME=VALUE` lines -> {NAME: VALUE}; the value as written, spaces included (as
    `try-reward --field`); blank lines skipped.

    >>> parse_fields("answer= 1 2\\n\\nunit=cm")
    {'answer': ' 1 2', 'unit': 'cm'}
    """
    fields = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip().isidentifier():
            raise TypedInputError(f"fields, line {number}: {line!r} is not NAME=VALUE; write e.g. answer= 1 2 3")
        fields[name.strip()] = value
    return fields


def typed_completions(prompt: str, completions_text: str, fields_text: str = "") -> list[Completion]:
    """Completions typed one a line (`\\n` for a line break inside one) for one prompt:
    one group. Blank lines are skipped.

    >>> [c.completion for c in typed_completions("sort 2 1 =", " 1 2\\n\\n 2 1")]
    [' 1 2', ' 2 1']
    """
    fields = parse_fields(fields_text)
    lines = [_unescape(line) for line in completions_text.splitlines() if line.strip()]
    if not lines:
        raise TypedInputError("completions: type at least one completion, one a line")
    return [Completion(prompt=prompt, completion=line, group=0, fields=dict(fields)) for line in lines]


def run_preset(run_dir: Path, fallback: dict | None = None) -> dict:
    """The preset a run trains from: its preset.yaml, else `fallback` (run_started's)."""
    try:
        data = read_preset_dict(Path(run_dir) / rundir.PRESET_FILE)
    except Exception:  # missing or unreadable: the event's copy
        data = None
    return copy.deepcopy(data if isinstance(data, dict) else (fallback or {}))


# ---------------------------------------------------------------- the request


def build_request(preset: dict, base_dir: Path | None, completions: list[Completion], group_size: int,
                  fields_from_data: bool) -> dict:
    """The request for `rl-engine score-rewards` (see engine/commands/score_rewards.py)."""
    return {
        "preset": preset,
        "base_dir": str(base_dir) if base_dir else "",
        "group_size": group_size,
        "fields_from_data": fields_from_data,
        "items": [{"prompt": c.prompt, "completion": c.completion, "fields": c.fields, "group": c.group,
                   **({"baseline": c.baseline} if c.baseline is not None else {})} for c in completions],
    }


def _last_json(text: str) -> dict | None:
    # The answer is the last line; anything a reward printed goes to stderr, but a
    # stray line before the answer must not hide it.
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            return value if isinstance(value, dict) else None
    return None


def read_answer(stdout: str, stderr: str, exit_code: int | None) -> ScoreResult | ScoreError:
    """The engine's answer as a ScoreResult, or a ScoreError (its error, or, when the
    process died without one, the end of what it wrote on stderr)."""
    answer = _last_json(stdout)
    if answer is None or ("error" not in answer and exit_code != 0):
        tail = "\n".join(stderr.strip().splitlines()[-12:]) or "(no output)"
        return ScoreError(f"the engine ended with exit code {exit_code} and no answer:\n{tail}")
    if "error" in answer:
        error = answer["error"] if isinstance(answer["error"], dict) else {"message": str(answer["error"])}
        line = error.get("line")
        return ScoreError(str(error.get("message") or "scoring failed"), error.get("file") or None,
                          int(line) if isinstance(line, int) else None, list(error.get("problems") or []))
    items = answer.get("items") or []
    about = answer.get("advantages") or {}
    return ScoreResult(
        components=list(answer.get("components") or []),
        values=[dict(item.get("components") or {}) for item in items],
        totals=[float(item.get("total", math.nan)) for item in items],
        advantages=[item.get("advantage") for item in items],
        groups=[item.get("group") for item in items],
        advantages_computed=bool(about.get("computed")),
        advantages_reason=str(about.get("reason") or ""),
        notes=[str(n) for n in answer.get("notes") or []],
        component_advantages=[dict(item.get("component_advantages") or {}) for item in items],
        baselines=[item["baseline"] if isinstance(item.get("baseline"), dict) else None for item in items],
        steps=[answer_steps(item.get("steps")) for item in items],
    )


def answer_steps(value: Any) -> dict[str, list[tuple[int, float]]]:
    """An answer item's `steps`, {label: [[end, score], ...]} (or {"end", "score"}
    mappings), as {label: [(end, score), ...]}; a step that is neither is left out.
    e.g. {"sort_steps": [[2, 1.0], {"end": 4, "score": 0}], "bad": 3} -> {"sort_steps": [(2, 1.0), (4, 0.0)]}
    """
    if not isinstance(value, dict):
        return {}
    out = {}
    for label, steps in value.items():
        if not isinstance(steps, list):
            continue
        pairs = []
        for step in steps:
            end, score = (step.get("end"), step.get("score")) if isinstance(step, dict) else \
                (step if isinstance(step, (list, tuple)) and len(step) == 2 else (None, None))
            if isinstance(end, int) and isinstance(score, (int, float)):
                pairs.append((end, float(score)))
        out[str(label)] = pairs
    return out


# ----------------------------------------------------------- into the set-up


def rewards_for_setup(rewards: list, from_dir: Path | None, to_dir: Path | None) -> list:
    """The edited rewards, their custom files and reward-model folders found from
    `from_dir` (where the playground's preset lives), written for a preset in `to_dir`:
    relative when inside it (so the preset can move with its rewards), else absolute."""
    moved = []
    for item in copy.deepcopy(rewards):
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            try:
                name, options = absolute_reward_paths(item["name"], item.get("options") or {}, from_dir)
                if reward_kind(name) == "custom" and to_dir is not None:
                    file, function = split_custom_name(name)
                    try:
                        file = Path(file).resolve().relative_to(Path(to_dir).resolve()).as_posix()
                    except ValueError:
                        pass
                    name = f"{file}:{function}"
                item = {**item, "name": name, "options": options}
            except ValueError:
                pass  # a half-typed name: carried as it is, the set-up form shows its problem
        moved.append(item)
    return moved
