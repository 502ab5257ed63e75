"""Every sampled generation of a run (Sample, SampleStore), parsed when first needed, and
how a sample reads in words (the samples table's detail pane, its flag and baseline
cells). No Qt."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from engine.run import rundir
from workbench.inspector.episodes import conversation_html, turns_of
from workbench.inspector.steps import mean_score, scores_text, step_scores
from workbench.runs.metric_table import MetricTable, _is_number


@dataclass
class Sample:
    """One sampled generation from a `samples` event."""

    step: int
    index: int
    group: int
    prompt: str
    completion: str
    reward: float
    rewards: dict
    advantage: float
    # Keys some algorithms add to a row (docs/run-directory.md, `samples`); empty/None
    # where the row has none: each reward's own advantage, {reward name: value} (rewards
    # normalised one by one); the greedy completion of the prompt that the reward is
    # measured against, {"completion", "reward", "rewards"}; whether an unpaired
    # completion is desirable; whether a pair's two scores tied; a pair's rejected text;
    # a step reward's score of each step, {reward label: [score, ...]}; a multi-turn
    # episode's {turns, truncated, reward_source, tool_calls, messages} (episodes.py).
    component_advantages: dict = field(default_factory=dict)
    baseline: dict | None = None
    label: bool | None = None
    tie: bool | None = None
    rejected: str | None = None
    steps: dict = field(default_factory=dict)
    episode: dict | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.step, self.index)

    @property
    def baseline_reward(self) -> float:
        """The greedy baseline's reward (NaN: no baseline)."""
        return _number((self.baseline or {}).get("reward"))


def _number(value: Any) -> float:
    return float(value) if _is_number(value) else math.nan


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _steps_mean(value: Any) -> float | None:
    """The mean of every step score of a row's `steps` (None: the row has no steps).

    >>> _steps_mean({"a": [1, 1, 0], "b": [0.5]}), _steps_mean(None)
    (0.625, None)
    """
    scores = [s for item in step_scores(value).values() for s in item]
    mean = mean_score(scores)
    return mean if math.isfinite(mean) else None


# The number columns of the optional keys (numbers(name)), when a row has them: a flag
# is 1/0 so the table sorts by it; the steps column sorts by the mean of every step score,
# the episode column by the episode's turns.
LABEL, BASELINE, TIE, STEPS, EPISODE = "label", "baseline/reward", "tie", "steps", "episode"
COMPONENT_ADVANTAGE = "component_advantages/"


class SampleStore:
    """Every sampled generation of a run, in arrival order, with numpy columns of the
    numbers (step, index, reward, advantage, each component) so the table can filter
    and sort 100,000 rows in milliseconds.

    `samples` events are kept unparsed until the samples are first needed: most of a
    long run's events.jsonl is generated text, and opening the run for its curves need
    not read it.
    """

    def __init__(self) -> None:
        self._pending: list = []  # raw lines (bytes) or parsed samples events, in order
        self._step: list[int] = []
        self._raw: list[dict] = []  # the sample mappings as logged
        self.components_seen: list[str] = []
        self.advantage_components_seen: list[str] = []  # names in rows' component_advantages
        self.optional_seen: set[str] = set()  # LABEL, BASELINE, TIE: some row had it
        self._numbers = MetricTable()

    # ------------------------------------------------------------------ adding

    def add(self, item) -> None:
        """Queue one `samples` event (a parsed mapping, or its raw JSON line)."""
        self._pending.append(item)

    def append(self, step: int, samples: Iterable[dict]) -> int:
        """Add samples of one step now (parsed)."""
        self.add({"type": "samples", "step": step, "samples": list(samples)})
        before = len(self._raw)
        self._materialize()
        return len(self._raw) - before

    @property
    def pending_events(self) -> int:
        return len(self._pending)

    def _materialize(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        # Raw lines parsed as rundir.read_jsonl parses them (a torn line is skipped).
        lines = [i for i, item in enumerate(pending) if isinstance(item, (bytes, str))]
        parsed = rundir.parse_lines([p.encode() if isinstance(p, str) else p for p in (pending[i] for i in lines)])
        for i, event in zip(lines, parsed):
            pending[i] = event
        steps: list[int] = []
        raws: list[dict] = []
        for item in pending:
            if not isinstance(item, dict):
                continue
            step = item.get("step", 0)
            step = int(step) if isinstance(step, (int, float)) else 0
            for sample in item.get("samples") or []:
                if isinstance(sample, dict):
                    steps.append(step)
                    raws.append(sample)
        if not raws:
            return
        columns: dict[str, list] = {
            "index": [r.get("index") for r in raws],
            "reward": [r.get("reward") for r in raws],
            "advantage": [r.get("advantage") for r in raws],
        }
        for raw in raws:
            rewards = raw.get("rewards")
            if isinstance(rewards, dict):
                for name in rewards:
                    if name not in self.components_seen:
                        self.components_seen.append(name)
        for name in self.components_seen:
            columns[f"rewards/{name}"] = [r["rewards"].get(name) if isinstance(r.get("rewards"), dict) else None
                                          for r in raws]
        columns.update(self._optional_columns(raws))
        self._numbers.append_columns(steps, columns)
        self._step.extend(steps)
        self._raw.extend(raws)

    def _optional_columns(self, raws: list[dict]) -> dict[str, list]:
        """The number columns of the keys only some algorithms write (each reward's
        advantage, the greedy baseline's reward, label, tie), for the rows `raws`."""
        columns: dict[str, list] = {}
        for raw in raws:
            parts = raw.get("component_advantages")
            if isinstance(parts, dict):
                for name in parts:
                    if name not in self.advantage_components_seen:
                        self.advantage_components_seen.append(name)
        for name in self.advantage_components_seen:
            columns[COMPONENT_ADVANTAGE + name] = [
                r["component_advantages"].get(name) if isinstance(r.get("component_advantages"), dict) else None
                for r in raws]
        values = {LABEL: [_flag(r.get("label")) for r in raws], TIE: [_flag(r.get("tie")) for r in raws],
                  BASELINE: [r["baseline"].get("reward") if isinstance(r.get("baseline"), dict) else None
                             for r in raws],
                  STEPS: [_steps_mean(r.get("steps")) for r in raws],
                  EPISODE: [turns_of(r["episode"]) if isinstance(r.get("episode"), dict) else None for r in raws]}
        for name, column in values.items():
            if name in self.optional_seen or any(v is not None for v in column):
                self.optional_seen.add(name)
                columns[name] = column
        return columns

    # ---------------------------------------------------------------- reading

    def __len__(self) -> int:
        self._materialize()
        return len(self._raw)

    @property
    def components(self) -> list[str]:
        self._materialize()
        return self.components_seen

    @property
    def advantage_components(self) -> list[str]:
        """The rewards some row gave an advantage of its own (component_advantages)."""
        self._materialize()
        return self.advantage_components_seen

    def has(self, name: str) -> bool:
        """Whether some row has the optional key of column `name` (LABEL, BASELINE, TIE,
        STEPS, EPISODE)."""
        self._materialize()
        return name in self.optional_seen

    def row(self, i: int) -> Sample:
        self._materialize()
        raw = self._raw[i]
        rewards = raw.get("rewards")
        index, group = raw.get("index"), raw.get("group")
        parts, baseline, rejected = raw.get("component_advantages"), raw.get("baseline"), raw.get("rejected")
        episode = raw.get("episode")
        return Sample(step=self._step[i], index=int(index) if _is_number(index) else 0,
                      group=int(group) if _is_number(group) else 0,
                      prompt=str(raw.get("prompt", "")), completion=str(raw.get("completion", "")),
                      reward=_number(raw.get("reward")), rewards=dict(rewards) if isinstance(rewards, dict) else {},
                      advantage=_number(raw.get("advantage")),
                      component_advantages=dict(parts) if isinstance(parts, dict) else {},
                      baseline=dict(baseline) if isinstance(baseline, dict) else None,
                      label=_flag(raw.get("label")), tie=_flag(raw.get("tie")),
                      rejected=rejected if isinstance(rejected, str) else None, steps=step_scores(raw.get("steps")),
                      episode=dict(episode) if isinstance(episode, dict) else None)

    def text(self, i: int, name: str) -> str:
        """The prompt or completion of row i, without building the whole Sample."""
        return str(self._raw[i].get(name, ""))

    @property
    def rows(self) -> "_Rows":
        self._materialize()
        return _Rows(self)

    def numbers(self, name: str) -> np.ndarray:
        """`step`, `index`, `reward`, `advantage`, `rewards/<component>`,
        `component_advantages/<reward>`, LABEL, BASELINE, TIE, STEPS or EPISODE for every row."""
        self._materialize()
        if name == "step":
            return self._numbers.steps
        return self._numbers.column(name)

    def truncate_after(self, step: float) -> None:
        self._materialize()
        if any(s > step for s in self._step):
            keep = [i for i, s in enumerate(self._step) if s <= step]
            self._step = [self._step[i] for i in keep]
            self._raw = [self._raw[i] for i in keep]
            self._numbers.truncate_after(step)


class _Rows:
    """The samples as a read-only sequence of Sample (built on access)."""

    def __init__(self, store: SampleStore):
        self._store = store

    def __len__(self) -> int:
        return len(self._store)

    def __getitem__(self, i: int) -> Sample:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._store.row(i)

    def __iter__(self):
        return (self._store.row(i) for i in range(len(self)))


# ====================================================== a sample in words


def _fmt(value: float) -> str:
    return "null" if not math.isfinite(value) else f"{value:.4g}"


def flag_text(name: str, value: bool | None) -> str:
    """A label or tie cell: `label` true/false is desirable/undesirable, `tie` yes/no.

    >>> flag_text("label", False), flag_text("tie", True), flag_text("tie", None)
    ('undesirable', 'yes', '')
    """
    if value is None:
        return ""
    if name == LABEL:
        return "desirable" if value else "undesirable"
    return "yes" if value else "no"


def baseline_text(baseline: dict | None) -> str:
    """The greedy baseline's tooltip: its reward, components and whole completion.

    >>> baseline_text({"completion": " 1 2", "reward": 1.0, "rewards": {"exact_match": 1.0}})
    'greedy completion (the baseline, not trained on): reward 1 (exact_match 1)\\n 1 2'
    """
    if not baseline:
        return ""
    rewards = baseline.get("rewards") if isinstance(baseline.get("rewards"), dict) else {}
    parts = ", ".join(f"{k} {_fmt(float(v)) if isinstance(v, (int, float)) else v}" for k, v in rewards.items())
    reward = baseline.get("reward")
    head = (f"greedy completion (the baseline, not trained on): reward "
            f"{_fmt(float(reward)) if isinstance(reward, (int, float)) else 'null'}" + (f" ({parts})" if parts else ""))
    return f"{head}\n{baseline.get('completion', '')}"


def _values(values: dict, signed: bool = False) -> str:
    return ", ".join(f"{html.escape(str(k))} "
                     + ((f"{v:+.4g}" if signed else _fmt(float(v))) if isinstance(v, (int, float))
                        else html.escape(str(v))) for k, v in values.items())


def sample_html(sample: Sample) -> str:
    """The detail pane: every number and the whole texts, whitespace kept."""
    parts = [f"<b>step {sample.step}</b> · prompt group {sample.group} · sample {sample.index}"
             + (f" · <b>{flag_text(LABEL, sample.label)}</b>" if sample.label is not None else "")
             + (" · <b>tie</b> (the first sampled was taken as chosen)" if sample.tie else "") + "<br>",
             f"reward <b>{_fmt(sample.reward)}</b> · advantage <b>{_fmt(sample.advantage)}</b>"]
    if sample.rewards:
        parts.append("<br>components: " + _values(sample.rewards))
    if sample.component_advantages:
        parts.append("<br>advantage of each reward (normalised within the group, before weights): "
                     + _values(sample.component_advantages, signed=True))
    for label, scores in sample.steps.items():
        mean = mean_score(scores)
        parts.append(f"<br>steps of {html.escape(label)}: <b>{html.escape(scores_text(scores))}</b>"
                     + (f" (mean {_fmt(mean)})" if math.isfinite(mean) else ""))
    pre = "white-space:pre-wrap; background:#f6f8fa; padding:4px; font-family:monospace"
    parts.append(f"<p><b>Prompt</b></p><pre style='{pre}'>{html.escape(sample.prompt)}</pre>")
    if sample.episode is not None:  # the conversation first, then its tokens' text as decoded
        parts.append(conversation_html(sample.episode))
        parts.append(f"<p><b>Episode text</b> (model and tool tokens, as decoded)</p>"
                     f"<pre style='{pre}'>{html.escape(sample.completion)}</pre>")
    else:
        parts.append(f"<p><b>Completion</b></p><pre style='{pre}'>{html.escape(sample.completion)}</pre>")
    if sample.rejected is not None:
        parts.append(f"<p><b>Rejected</b></p><pre style='{pre}'>{html.escape(sample.rejected)}</pre>")
    if sample.baseline is not None:
        head, _, text = baseline_text(sample.baseline).partition("\n")
        parts.append(f"<p><b>Greedy baseline</b> ({html.escape(head.partition(': ')[2])}; the baseline the "
                     f"reward is measured against, not trained on)</p><pre style='{pre}'>{html.escape(text)}</pre>")
    return "".join(parts)
