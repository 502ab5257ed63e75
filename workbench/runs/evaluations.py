"""A run's evaluations, as `rl-engine eval` writes them into `RUN_DIR/evals/NAME/`
(eval.json, version 1, and samples.jsonl): which exist, one read leniently, a model's
samples of one prompt, the prompts each of two models solves, and the command line and
output lines of the CLI. No Qt.

As with the report cards (reward_report.py), a missing, half-written, garbled or newer
file is a message the page shows, never a traceback; a part of eval.json that is missing
or of the wrong shape leaves only that part empty (`problems` names it).
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbench.runs.json_file import int_or_none as _int, is_int as _is_int, number as _number
from workbench.runs.json_file import read_json_object, read_part, text as _text
from workbench.runs.reward_report import failure_text, last_line  # noqa: F401 (the CLI's lines are read alike)

EVALS_DIR = "evals"
EVAL_FILE = "eval.json"
SAMPLES_FILE = "samples.jsonl"
KIND = "evaluation"
VERSION = 1  # the newest format this window reads
MAX_BYTES = 64 * 1024 * 1024  # eval.json holds counts, not samples: a few MB at most
METRICS = ("pass_at_k", "pass_hat_k", "maj_at_k")

# A prompt's category for a pair of models (first, second): which of them solves it
# (any of its samples correct).
FIRST_ONLY, SECOND_ONLY, BOTH, NEITHER = "first only", "second only", "both", "neither"
CATEGORIES = (FIRST_ONLY, SECOND_ONLY, BOTH, NEITHER)


class EvaluationError(Exception):
    """An evaluation that cannot be shown, with what to tell the user."""


# ------------------------------------------------------------------- the CLI


def new_eval_name(now: float | None = None) -> str:
    """The engine's default name for an evaluation started at `now`; the window passes it
    itself so that it knows the folder even when the run is stopped (and can resume it)."""
    return time.strftime("eval-%Y%m%d-%H%M%S", time.localtime(now))


def eval_command(run_dir: Path, models: list[str], n: int, reward_model: Path | None = None,
                 name: str | None = None, python: str | None = None) -> list[str]:
    """The engine's command line that evaluates `models` of a run with `n` samples per prompt.

    >>> eval_command(Path("/r/run"), ["base", "step_000400"], 32, python="py")
    ['py', '-m', 'engine', 'eval', '/r/run', '--models', 'base,step_000400', '--n', '32', '--progress']
    >>> eval_command(Path("/r"), ["base"], 8, Path("/r/rm"), "e1", python="py")[-4:]
    ['--reward-model', '/r/rm', '--name', 'e1']
    """
    command = [python or sys.executable, "-m", "engine", "eval", str(run_dir), "--models", ",".join(models),
               "--n", str(int(n)), "--progress"]
    if reward_model is not None:
        command += ["--reward-model", str(reward_model)]
    return command + (["--name", name] if name else [])


_PROGRESS = re.compile(r"progress\s+(\d+)\s*/\s*(\d+)\s*")
_WROTE = re.compile(r"wrote (.+)")


def progress_count(line: str) -> tuple[int, int] | None:
    """(done, total) prompt-model units of a `progress DONE/TOTAL` line, else None.

    >>> progress_count("progress 12/400"), progress_count("loading step_000400"), progress_count("progress 0/0")
    ((12, 400), None, None)
    """
    match = _PROGRESS.fullmatch(line.strip())
    if not match or int(match.group(2)) <= 0:
        return None
    return int(match.group(1)), int(match.group(2))


def written_folder(stdout: str) -> Path | None:
    """The evaluation folder the engine says it wrote: its last `wrote PATH` line.

    >>> written_folder("sampling\\nwrote /r/run/evals/eval-1\\n")
    PosixPath('/r/run/evals/eval-1')
    """
    found = [m.group(1).strip() for m in map(_WROTE.fullmatch, stdout.splitlines()) if m]
    return Path(found[-1]) if found else None


# ------------------------------------------------------- what can be evaluated

CHECKPOINTS_DIR, CHECKPOINT_STATE = "checkpoints", "state.json"  # engine/foundation/run_files.py's names


def run_checkpoints(run_dir: Path) -> list[tuple[str, int]]:
    """(folder name, step) of each complete checkpoint of the run, oldest first: a
    checkpoint is written under step_N.tmp and renamed, state.json its last file, so a
    folder without it is one being written (the engine's complete_checkpoints rule)."""
    found = []
    try:
        for folder in Path(run_dir, CHECKPOINTS_DIR).glob("step_*"):
            step = folder.name[len("step_"):]
            if step.isdigit() and folder.is_dir() and (folder / CHECKPOINT_STATE).is_file():
                found.append((folder.name, int(step)))
    except OSError:
        return []
    return sorted(found, key=lambda item: item[1])


# ------------------------------------------------------------ which evaluations


@dataclass(frozen=True)
class EvaluationEntry:
    """One evaluation folder of a run (it has an eval.json) and when that was last written."""

    folder: Path
    name: str
    modified: float


def list_evaluations(run_dir: Path) -> list[EvaluationEntry]:
    """The run's evaluations, newest first (by when eval.json was last written: a name
    given with --name says nothing of when)."""
    entries = []
    try:
        for path in Path(run_dir, EVALS_DIR).glob(f"*/{EVAL_FILE}"):
            try:
                entries.append(EvaluationEntry(path.parent, path.parent.name, path.stat().st_mtime))
            except OSError:
                continue  # removed while listing
    except OSError:
        return []
    return sorted(entries, key=lambda e: (e.modified, e.name), reverse=True)


# ----------------------------------------------------------------- the results


@dataclass
class BestOfN:
    """Keyed by N = 1..n: the verifier's score of the sample the reward model picks among
    N, and of the verifier's own pick (the oracle, = pass@N)."""

    reward_model: dict[int, float]
    oracle: dict[int, float]


@dataclass
class ModelResult:
    name: str  # base | step_000400 (what --models names)
    label: str
    checkpoint: str | None
    step: int | None
    done_prompts: int | None
    pass_at_k: dict[int, float] | None
    pass_hat_k: dict[int, float] | None
    maj_at_k: dict[int, float] | None
    mean_reward: float | None
    best_of_n: BestOfN | None
    samples_per_second: float | None


@dataclass
class Crossing:
    """Where model b's `metric` curve crosses model a's, at k (interpolated on log k)."""

    a: str
    b: str
    k: float
    metric: str


@dataclass
class PromptRow:
    index: int
    prompt: str
    correct: dict[str, int]  # model name -> correct samples (absent: not sampled yet)


@dataclass
class Evaluation:
    folder: Path
    name: str = ""
    run: str = ""
    created: float | None = None
    finished: bool = False
    n: int | None = None
    ks: list[int] = field(default_factory=list)
    sampling: dict = field(default_factory=dict)
    verifier: str | None = None
    reward_model: str | None = None
    prompts: int | None = None
    models: list[ModelResult] = field(default_factory=list)
    crossings: list[Crossing] = field(default_factory=list)
    per_prompt: list[PromptRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the parts that could not be read

    def model(self, name: str) -> ModelResult | None:
        return next((m for m in self.models if m.name == name), None)

    def partial(self, model: ModelResult) -> bool:
        """Whether `model` was stopped before it had sampled every prompt."""
        return None not in (model.done_prompts, self.prompts) and model.done_prompts < self.prompts


def load_evaluation(folder: Path) -> Evaluation:
    """The evaluation in `folder` (or its eval.json); EvaluationError, with what to tell
    the user, when there is none to show. A garbled part is left empty and named in `problems`."""
    folder = Path(folder)
    folder = folder.parent if folder.name == EVAL_FILE else folder
    data = read_json_object(folder / EVAL_FILE, "evaluation", EvaluationError, MAX_BYTES,
                            name=f"{folder.name}/{EVAL_FILE}")
    if data.get("kind") != KIND:
        raise EvaluationError(f"{folder.name}/{EVAL_FILE} is not an evaluation (its kind is {data.get('kind')!r})")
    version = data.get("version")
    if not _is_int(version):
        raise EvaluationError(f"{folder.name}/{EVAL_FILE} does not say which version of the format it is")
    if version > VERSION:
        raise EvaluationError(f"{folder.name}/{EVAL_FILE} is version {version} of the evaluation format, newer "
                              f"than this window reads (version {VERSION}); update the workbench")
    sampling = data.get("sampling")
    evaluation = Evaluation(
        folder, name=_text(data.get("name")) or folder.name, run=_text(data.get("run")),
        created=_number(data.get("created")), finished=data.get("finished") is True, n=_int(data.get("n")),
        sampling=sampling if isinstance(sampling, dict) else {}, verifier=_text(data.get("verifier")) or None,
        reward_model=_text(data.get("reward_model")) or None, prompts=_int(data.get("prompts")))
    evaluation.ks = _part(evaluation, "ks", data, lambda v: sorted(int(k) for k in v)) or []
    evaluation.models = _part(evaluation, "models", data, lambda v: [_model(m) for m in v]) or []
    evaluation.crossings = _part(evaluation, "crossings", data, lambda v: [_crossing(c) for c in v],
                                 expected=False) or []
    evaluation.per_prompt = _part(evaluation, "per_prompt", data, lambda v: [_prompt_row(r) for r in v]) or []
    return evaluation


def _part(evaluation, name: str, data: dict, read, expected: bool = True):
    return read_part(data, name, read, evaluation.problems, "evaluation", expected)


def _model(value: dict) -> ModelResult:
    name = value["name"]
    if not isinstance(name, str) or not name:
        raise ValueError("a model without a name")
    curves = {metric: _curve(value.get(metric)) for metric in METRICS}
    return ModelResult(name, _text(value.get("label")) or name, _text(value.get("checkpoint")) or None,
                       _int(value.get("step")), _int(value.get("done_prompts")), **curves,
                       mean_reward=_number(value.get("mean_reward")), best_of_n=_best_of_n(value.get("best_of_n")),
                       samples_per_second=_number(value.get("samples_per_second")))


def _curve(value) -> dict[int, float] | None:
    """{k: value} of a curve's JSON object (keys are strings there); a point that is not a
    finite number is left out; None for null."""
    if not isinstance(value, dict):
        return None
    points = {int(k): _number(v) for k, v in value.items()}
    return {k: points[k] for k in sorted(points) if points[k] is not None}


def _best_of_n(value) -> BestOfN | None:
    if not isinstance(value, dict):
        return None
    reward_model, oracle = _curve(value.get("reward_model")), _curve(value.get("oracle"))
    return BestOfN(reward_model, oracle or {}) if reward_model else None


def _crossing(value: dict) -> Crossing:
    k = _number(value["k"])
    if k is None:
        raise ValueError("a crossing without its k")
    return Crossing(str(value["a"]), str(value["b"]), k, _text(value.get("metric")) or "pass_at_k")


def _prompt_row(value: dict) -> PromptRow:
    correct = {str(name): int(count) for name, count in value["correct"].items() if _is_int(count)}
    return PromptRow(int(value["index"]), _text(value.get("prompt")), correct)


# ------------------------------------------------------------------ the prompts


def category(row: PromptRow, first: str, second: str) -> str | None:
    """Which of two models solves the prompt (a correct sample among its n); None while
    either has not sampled it.

    >>> row = PromptRow(0, "sort 3 1 =", {"base": 0, "step_000400": 30})
    >>> category(row, "base", "step_000400"), category(row, "step_000400", "base"), category(row, "base", "x")
    ('second only', 'first only', None)
    """
    a, b = row.correct.get(first), row.correct.get(second)
    if a is None or b is None:
        return None
    return BOTH if a and b else FIRST_ONLY if a else SECOND_ONLY if b else NEITHER


def category_counts(rows: list[PromptRow], first: str, second: str) -> dict[str, int]:
    """How many prompts fall in each category (those not sampled by both are not counted).

    >>> rows = [PromptRow(i, "", {"a": a, "b": b}) for i, (a, b) in enumerate([(0, 3), (2, 0), (1, 1), (0, 0), (0, 5)])]
    >>> category_counts(rows, "a", "b")
    {'first only': 1, 'second only': 2, 'both': 1, 'neither': 1}
    """
    counts = dict.fromkeys(CATEGORIES, 0)
    for row in rows:
        found = category(row, first, second)
        if found is not None:
            counts[found] += 1
    return counts


# ------------------------------------------------------------------ the samples


@dataclass
class SampleRow:
    completion: str
    correct: bool | None
    vote: str | None
    reward: float | None
    rm_score: float | None


class SamplesFile:
    """A model's samples of one prompt from samples.jsonl, read lazily: the file (tens of
    MB, still growing while the engine runs) is indexed once by where each line starts,
    and only the line asked for is parsed; lines appended since are indexed when a
    prompt is not found."""

    # The top-level keys, found without parsing the line: in JSON text a quote inside a
    # string is always escaped, so a quote after `{`, `,` or a space begins a key.
    _MODEL = re.compile(rb'[{,\s]"model":\s*"((?:[^"\\]|\\.)*)"')
    _INDEX = re.compile(rb'[{,\s]"index":\s*(\d+)')
    HEAD = 512  # the bytes of a line where its model and index are looked for first

    def __init__(self, path: Path):
        self.path = Path(path)
        self.offsets: dict[tuple[str, int], int] = {}
        self.indexed = 0  # the bytes indexed so far: complete lines only

    def samples(self, model: str, index: int) -> tuple[str | None, list[SampleRow]] | None:
        """(the reference answer, the samples) of prompt `index` by `model`; None when the
        file has no such line (yet), or it cannot be read."""
        if (model, index) not in self.offsets:
            self._index_new_lines()
        offset = self.offsets.get((model, index))
        if offset is None:
            return None
        try:
            with open(self.path, "rb") as file:
                file.seek(offset)
                record = json.loads(file.readline())
            rows = [_sample(s) for s in record.get("samples") or [] if isinstance(s, dict)]
        except (OSError, ValueError, AttributeError, TypeError):
            return None
        answer = record.get("answer")
        return (answer if isinstance(answer, str) else None if answer is None else str(answer)), rows

    def _index_new_lines(self) -> None:
        try:
            with open(self.path, "rb") as file:
                file.seek(self.indexed)
                offset = self.indexed
                for line in file:
                    if not line.endswith(b"\n"):
                        break  # being written: indexed next time
                    key = self._key(line)
                    if key is not None:
                        self.offsets.setdefault(key, offset)
                    offset += len(line)
                self.indexed = offset
        except OSError:
            return

    def _key(self, line: bytes) -> tuple[str, int] | None:
        head = line[: self.HEAD]
        model, index = self._MODEL.search(head), self._INDEX.search(head)
        if model and index:
            return json.loads(b'"' + model.group(1) + b'"'), int(index.group(1))
        try:  # keys written in another order, or a very long value first
            record = json.loads(line)
            return str(record["model"]), int(record["index"])
        except (ValueError, KeyError, TypeError):
            return None


def _sample(value: dict) -> SampleRow:
    correct, vote = value.get("correct"), value.get("vote")
    return SampleRow(_text(value.get("completion")), correct if isinstance(correct, bool) else None,
                     None if vote is None else str(vote), _number(value.get("reward")), _number(value.get("rm_score")))


# ------------------------------------------------------------------- in words


def short_name(model: ModelResult) -> str:
    """A model as a column or a curve names it: `base`, or `step 400`.

    >>> short_name(ModelResult("step_000400", "step 400", "/r/c", 400, 9, None, None, None, None, None, None))
    'step 400'
    """
    if model.checkpoint is None and model.name == "base":
        return "base"
    return f"step {model.step}" if model.step is not None else model.label


def fraction_text(value: float | None, digits: int = 3) -> str:
    """
    >>> fraction_text(0.3125), fraction_text(None), fraction_text(1.0)
    ('0.312', '—', '1.000')
    """
    return "—" if value is None else f"{value:.{digits}f}"


def crossing_text(k: float) -> str:
    """
    >>> crossing_text(12.5), crossing_text(3.0)
    ('curves cross at k ≈ 12.5', 'curves cross at k ≈ 3')
    """
    return f"curves cross at k ≈ {k:.3g}"
