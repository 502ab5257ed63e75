"""Every sampled generation of a run (Sample, SampleStore), parsed when first needed, and
how a sample reads in words (the samples table's detail pane, its flag and baseline
cells). No Qt."""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from engine.run import rundir
from workbench.inspector.episodes import conversation_html, turns_of
from workbench.inspector.steps import mean_score, scores_text, step_scores
from workbench.runs.metric_table import MetricTable, _is_number


# The kinds of a run's sample fields (run_started's `sample_fields`, docs/run-directory.md):
# how a field's value reads in the table, its tooltip and the detail pane.
TEXT, NUMBER, FLAG, SCORES, BASELINE_KIND, STEPS_KIND, EPISODE_KIND = (
    "text", "number", "flag", "scores", "baseline", "steps", "episode")
# Where a field's column goes: after the completion, the reward, the reward components,
# the advantage, or last.
AFTER_TEXT, AFTER_REWARD, AFTER_COMPONENTS, AFTER_ADVANTAGE, LAST = "text", "reward", "components", "advantage", "last"
_PLACE_OF_KIND = {TEXT: AFTER_TEXT, FLAG: AFTER_TEXT, EPISODE_KIND: AFTER_TEXT, BASELINE_KIND: AFTER_REWARD,
                  NUMBER: AFTER_COMPONENTS, STEPS_KIND: AFTER_COMPONENTS, SCORES: AFTER_ADVANTAGE}
# The keys every samples row has: a declared field cannot take their place.
CORE_KEYS = frozenset({"step", "index", "group", "prompt", "completion", "reward", "rewards", "advantage"})


@dataclass(frozen=True)
class SampleField:
    """One key of a run's samples rows beyond the core ones, as the run declared it (or,
    for an old run, as the workbench knew it): its title, kind, help, and for a flag the
    words for true and false. `place` and `signed` say where its column goes and whether
    its cells are green/pink by sign (a flag: true green); `column` False: the detail pane
    only (an old run's `rejected` text)."""

    key: str
    title: str = ""
    kind: str = TEXT
    help: str = ""
    true: str = "yes"
    false: str = "no"
    place: str = ""
    signed: bool = False
    column: bool = True

    @property
    def header(self) -> str:
        return self.title or self.key

    @property
    def where(self) -> str:
        return self.place or _PLACE_OF_KIND.get(self.kind, LAST)

    def word(self, value: Any) -> str:
        """A flag's value in words ('' for none).

        >>> SampleField("label", kind=FLAG, true="desirable", false="undesirable").word(False)
        'undesirable'
        """
        if not isinstance(value, bool):
            return ""
        return self.true if value else self.false


# The keys the workbench knew before runs declared their sample fields: an old run's
# fields (derived from the keys its rows carry), and the presentation a declared field
# of the same key and kind keeps (place, colours; title, help and words where its
# declaration leaves them out).
KNOWN_FIELDS: tuple[SampleField, ...] = (
    SampleField("episode", "episode", EPISODE_KIND, help=(
        "the multi-turn episode: the model's turns, each tool's calls (×count) and the failed calls; "
        "hover a cell for the whole conversation; sorts by the number of turns")),
    SampleField("label", "label", FLAG, help=(
        "desirable: the update pushes this completion up; undesirable: down (unpaired preference data)"),
        true="desirable", false="undesirable", signed=True),
    SampleField("rejected", "rejected completion", TEXT, help="the pair's rejected completion", column=False),
    SampleField("baseline", "greedy baseline", BASELINE_KIND, help=(
        "the reward of the greedy completion of the same prompt, the baseline the reward is measured "
        "against (advantage = reward - greedy baseline); hover a cell for its text")),
    SampleField("steps", "steps", STEPS_KIND, help=(
        "each step's score from the step rewards, in order (several rewards: each after its label); "
        "sorts by the mean of the scores; hover a cell for the list")),
    SampleField("component_advantages", "adv", SCORES, help=(
        "the advantage from {name} alone: that reward normalised within the prompt's group, before the "
        "weights (the advantage is their weighted sum, normalised over the batch)"), signed=True),
    SampleField("tie", "tie", FLAG, help="the pair's two completions got the same score: the first sampled was "
                "taken as chosen", place=LAST),
)
_KNOWN = {f.key: f for f in KNOWN_FIELDS}


def declared_field(entry: Any) -> SampleField | None:
    """A field of run_started's `sample_fields` ({key, title, kind, help, and for a flag
    true and false}); a key the workbench knew, of the same kind, keeps its place and
    colours and, where the entry leaves them out, its title, help and words. None: not a
    field (no key, or a core key).

    >>> declared_field({"key": "judge_note", "title": "Judge", "kind": "text"}).header
    'Judge'
    >>> f = declared_field({"key": "label", "kind": "flag", "title": "Label", "true": "good", "false": "bad"})
    >>> f.word(True), f.signed, f.where
    ('good', True, 'text')
    """
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), str) or not entry["key"]:
        return None
    key = entry["key"]
    if key in CORE_KEYS:
        return None

    def text(name: str, default: str) -> str:
        value = entry.get(name)
        return value if isinstance(value, str) and value else default

    kind = text("kind", TEXT)
    known = _KNOWN.get(key)
    base = known if known is not None and known.kind == kind else SampleField(key)
    return SampleField(key, text("title", base.title or key), kind, text("help", base.help),
                       text("true", base.true), text("false", base.false), place=base.place, signed=base.signed)


def sample_fields_of(started: Any) -> tuple[SampleField, ...] | None:
    """The sample fields a run's run_started declared (its `sample_fields`, at the top
    level where the engine spreads its declaration, or under `declaration`); None for a
    run that declares none (an old run: its fields are KNOWN_FIELDS).

    >>> [f.key for f in sample_fields_of({"sample_fields": [{"key": "x", "kind": "number"}, {"key": "reward"}]})]
    ['x']
    >>> sample_fields_of({"algorithm": "grpo"}) is None
    True
    """
    if not isinstance(started, dict):
        return None
    entries = started.get("sample_fields")
    if entries is None and isinstance(started.get("declaration"), dict):
        entries = started["declaration"].get("sample_fields")
    if not isinstance(entries, list):
        return None
    out: list[SampleField] = []
    for entry in entries:
        field_ = declared_field(entry)
        if field_ is not None and all(f.key != field_.key for f in out):
            out.append(field_)
    return tuple(out)


def compact_json(value: Any) -> str:
    """A value of a kind the window does not know, as compact text.

    >>> compact_json({"a": [1, 2]}), compact_json(None)
    ('{"a":[1,2]}', '')
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


@dataclass
class Sample:
    """One sampled generation from a `samples` event: the core keys, and `values`, the
    row's values of the run's sample fields (declared or known), as logged."""

    step: int
    index: int
    group: int
    prompt: str
    completion: str
    reward: float
    rewards: dict
    advantage: float
    values: dict = field(default_factory=dict)
    fields: tuple = ()  # the run's SampleFields the row has a value of, in the run's order

    @property
    def key(self) -> tuple[int, int]:
        return (self.step, self.index)

    # What the inspector and the playground read of the keys they know: each reward's
    # own advantage; the greedy baseline {"completion", "reward", "rewards"}; an
    # unpaired completion's label; a pair's tie; the step scores {reward label:
    # [score, ...]}; a multi-turn episode (episodes.py).
    @property
    def component_advantages(self) -> dict:
        value = self.values.get("component_advantages")
        return dict(value) if isinstance(value, dict) else {}

    @property
    def baseline(self) -> dict | None:
        value = self.values.get("baseline")
        return dict(value) if isinstance(value, dict) else None

    @property
    def label(self) -> bool | None:
        return _flag(self.values.get("label"))

    @property
    def tie(self) -> bool | None:
        return _flag(self.values.get("tie"))

    @property
    def steps(self) -> dict:
        return step_scores(self.values.get("steps"))

    @property
    def episode(self) -> dict | None:
        value = self.values.get("episode")
        return dict(value) if isinstance(value, dict) else None

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


def field_number(field_: SampleField, value: Any, part: str = "") -> float | bool | None:
    """The number a field's cell sorts by (None: none): a flag is 1/0, a baseline its
    reward, steps the mean of every step score, an episode its turns, scores the value
    of `part`; text and unknown kinds have none (they sort by their text)."""
    kind = field_.kind
    if kind == FLAG:
        return _flag(value)
    if kind == NUMBER:
        return value if _is_number(value) else None
    if kind == BASELINE_KIND:
        return value.get("reward") if isinstance(value, dict) else None
    if kind == STEPS_KIND:
        return _steps_mean(value)
    if kind == EPISODE_KIND:
        return turns_of(value) if isinstance(value, dict) else None
    if kind == SCORES:
        return value.get(part) if isinstance(value, dict) else None
    return None


NUMBER_KINDS = (FLAG, NUMBER, BASELINE_KIND, STEPS_KIND, EPISODE_KIND, SCORES)


def field_text(field_: SampleField, value: Any) -> str:
    """A text field's cell (a string), or a value of a kind the window does not know
    as compact JSON."""
    return value if isinstance(value, str) else compact_json(value)


# The column names of the known keys (numbers(name)), as they always were.
LABEL, BASELINE, TIE, STEPS, EPISODE = "label", "baseline/reward", "tie", "steps", "episode"
COMPONENT_ADVANTAGE = "component_advantages/"


def column_name(field_: SampleField, part: str = "") -> str:
    """A field's column: its key; a baseline's `KEY/reward`; one name of a scores field
    `KEY/NAME`.

    >>> column_name(_KNOWN["baseline"]), column_name(_KNOWN["component_advantages"], "format")
    ('baseline/reward', 'component_advantages/format')
    """
    if field_.kind == BASELINE_KIND:
        return f"{field_.key}/reward"
    if field_.kind == SCORES:
        return f"{field_.key}/{part}"
    return field_.key


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
        self.declared: tuple[SampleField, ...] | None = None  # the run's sample_fields (None: an old run)
        self._parts: dict[str, list[str]] = {}  # a scores field's key -> the names some row had
        self.optional_seen: set[str] = set()  # the field columns some row had a value of
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

    @property
    def fields(self) -> tuple[SampleField, ...]:
        """The run's sample fields: declared in its run_started, else (an old run) the
        keys the workbench knew."""
        return self.declared if self.declared is not None else KNOWN_FIELDS

    def set_fields(self, declared: tuple[SampleField, ...] | None) -> None:
        """The fields run_started declared (None: none). Rows already read are read again."""
        if declared == self.declared:
            return
        self.declared = declared
        steps, raws = self._step, self._raw
        self._step, self._raw, self._parts, self.optional_seen = [], [], {}, set()
        self._numbers = MetricTable()
        if raws:
            again: list[dict] = []
            for step, raw in zip(steps, raws):
                if not again or again[-1]["step"] != step:
                    again.append({"type": "samples", "step": step, "samples": []})
                again[-1]["samples"].append(raw)
            self._pending[:0] = again

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
        """The number columns of the run's sample fields (a scores field: one per name),
        for the rows `raws`; and which field columns some row has a value of."""
        columns: dict[str, list] = {}
        for field_ in self.fields:
            key = field_.key
            values = [r.get(key) for r in raws]
            if field_.kind == SCORES:
                names = self._parts.setdefault(key, [])
                for value in values:
                    if isinstance(value, dict):
                        names.extend(n for n in value if n not in names)
                for name in names:
                    column = column_name(field_, name)
                    columns[column] = [field_number(field_, v, name) for v in values]
                    self.optional_seen.add(column)
                continue
            column = column_name(field_)
            if field_.kind in NUMBER_KINDS:
                numbers = [field_number(field_, v) for v in values]
                if column in self.optional_seen or any(v is not None for v in numbers):
                    self.optional_seen.add(column)
                    columns[column] = numbers
            elif any(v is not None for v in values):
                self.optional_seen.add(column)
        return columns

    def field_columns(self) -> list[tuple[str, SampleField, str]]:
        """(column name, field, scores name or "") of each field column some row has a
        value of, in the run's order of its fields."""
        self._materialize()
        out = []
        for field_ in self.fields:
            if not field_.column:
                continue
            if field_.kind == SCORES:
                out += [(column_name(field_, n), field_, n) for n in self._parts.get(field_.key, [])]
            elif column_name(field_) in self.optional_seen:
                out.append((column_name(field_), field_, ""))
        return out

    # ---------------------------------------------------------------- reading

    def __len__(self) -> int:
        self._materialize()
        return len(self._raw)

    @property
    def components(self) -> list[str]:
        self._materialize()
        return self.components_seen

    def has(self, name: str) -> bool:
        """Whether some row has a value of the field column `name` (e.g. LABEL, BASELINE,
        TIE, STEPS, EPISODE)."""
        self._materialize()
        return name in self.optional_seen

    def row(self, i: int) -> Sample:
        self._materialize()
        raw = self._raw[i]
        rewards = raw.get("rewards")
        index, group = raw.get("index"), raw.get("group")
        fields = tuple(f for f in self.fields if raw.get(f.key) is not None)
        return Sample(step=self._step[i], index=int(index) if _is_number(index) else 0,
                      group=int(group) if _is_number(group) else 0,
                      prompt=str(raw.get("prompt", "")), completion=str(raw.get("completion", "")),
                      reward=_number(raw.get("reward")), rewards=dict(rewards) if isinstance(rewards, dict) else {},
                      advantage=_number(raw.get("advantage")), values={f.key: raw[f.key] for f in fields},
                      fields=fields)

    def value(self, i: int, key: str) -> Any:
        """Row i's value of `key`, as logged (None: none)."""
        return self._raw[i].get(key)

    def text(self, i: int, name: str) -> str:
        """The prompt or completion of row i, without building the whole Sample."""
        return str(self._raw[i].get(name, ""))

    @property
    def rows(self) -> "_Rows":
        self._materialize()
        return _Rows(self)

    def numbers(self, name: str) -> np.ndarray:
        """`step`, `index`, `reward`, `advantage`, `rewards/<component>`, or a field
        column (`component_advantages/<reward>`, LABEL, BASELINE, TIE, STEPS, EPISODE, a
        declared number...) for every row."""
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


def baseline_text(baseline: dict | None) -> str:
    """The greedy baseline's tooltip: its reward, components and whole completion.

    >>> baseline_text({"completion": " 1 2", "reward": 1.0, "rewards": {"exact_match": 1.0}})
    'greedy completion (the baseline, not trained on): reward 1 (exact_match 1)\\n 1 2'
    """
    if not isinstance(baseline, dict) or not baseline:
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


def _scores_heading(field_: SampleField) -> str:
    if field_.key == "component_advantages" and field_.kind == SCORES:
        return "advantage of each reward (normalised within the group, before weights)"
    return html.escape(field_.header)


def sample_html(sample: Sample) -> str:
    """The detail pane: every number and the whole texts, whitespace kept; each of the
    row's sample fields by its kind (a kind the window does not know as compact JSON)."""
    fields = sample.fields
    flags = "".join(f" · {html.escape(f.header)} <b>{html.escape(f.word(sample.values[f.key]))}</b>"
                    for f in fields if f.kind == FLAG and f.word(sample.values[f.key]))
    parts = [f"<b>step {sample.step}</b> · prompt group {sample.group} · sample {sample.index}{flags}<br>",
             f"reward <b>{_fmt(sample.reward)}</b> · advantage <b>{_fmt(sample.advantage)}</b>"]
    if sample.rewards:
        parts.append("<br>components: " + _values(sample.rewards))
    for f in fields:
        value = sample.values[f.key]
        if f.kind == NUMBER:
            parts.append(f"<br>{html.escape(f.header)}: <b>{_fmt(_number(value))}</b>")
        elif f.kind == SCORES and isinstance(value, dict) and value:
            parts.append(f"<br>{_scores_heading(f)}: " + _values(value, signed=f.signed))
        elif f.kind == STEPS_KIND:
            for label, scores in step_scores(value).items():
                mean = mean_score(scores)
                parts.append(f"<br>steps of {html.escape(label)}: <b>{html.escape(scores_text(scores))}</b>"
                             + (f" (mean {_fmt(mean)})" if math.isfinite(mean) else ""))
        elif f.kind not in (TEXT, FLAG, SCORES, BASELINE_KIND, EPISODE_KIND):
            parts.append(f"<br>{html.escape(f.header)}: <code>{html.escape(compact_json(value))}</code>")
    pre = "white-space:pre-wrap; background:#f6f8fa; padding:4px; font-family:monospace"
    parts.append(f"<p><b>Prompt</b></p><pre style='{pre}'>{html.escape(sample.prompt)}</pre>")
    episode = next((sample.values[f.key] for f in fields if f.kind == EPISODE_KIND
                    and isinstance(sample.values[f.key], dict)), None)
    if episode is not None:  # the conversation first, then its tokens' text as decoded
        parts.append(conversation_html(episode))
        parts.append(f"<p><b>Episode text</b> (model and tool tokens, as decoded)</p>"
                     f"<pre style='{pre}'>{html.escape(sample.completion)}</pre>")
    else:
        parts.append(f"<p><b>Completion</b></p><pre style='{pre}'>{html.escape(sample.completion)}</pre>")
    for f in fields:
        if f.kind == TEXT:
            title = f.header[:1].upper() + f.header[1:]
            parts.append(f"<p><b>{html.escape(title)}</b></p>"
                         f"<pre style='{pre}'>{html.escape(field_text(f, sample.values[f.key]))}</pre>")
    for f in fields:
        if f.kind == BASELINE_KIND and isinstance(sample.values[f.key], dict):
            head, _, text = baseline_text(sample.values[f.key]).partition("\n")
            parts.append(f"<p><b>Greedy baseline</b> ({html.escape(head.partition(': ')[2])}; the baseline the "
                         f"reward is measured against, not trained on)</p><pre style='{pre}'>{html.escape(text)}</pre>")
    return "".join(parts)
