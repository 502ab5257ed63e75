"""A reward-model run's report cards, as `rl-engine reward-report` writes them into
`RUN_DIR/reports/` (version 1): which exist, and one read leniently. No Qt, no engine.

A report card is read the way the window reads everything the engine writes: a missing,
half-written or garbled file is a message the page shows, never a traceback, and a part
of the file that is missing or of the wrong shape leaves only that part empty (the
report's `problems` say which).
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.foundation.errors import PresetError
from engine.foundation.io import read_preset_dict
from engine.foundation.run_files import RUN_PREFIX, run_preset
from engine.rewards import REWARD_MODEL as REWARD_MODEL_KIND
from workbench.runs.json_file import int_or_none as _int, is_int as _is_int, number as _number
from workbench.runs.json_file import read_json_object, read_part, text as _text

REPORTS_DIR = "reports"
HELD_OUT_FILE = "reward-report.json"
KIND = "reward_report"
VERSION = 1  # the newest format this window reads
STATUSES = ("good", "worrying", "bad", "skipped")
MAX_BYTES = 64 * 1024 * 1024  # a report of every pair of a large set is a few MB


class ReportError(Exception):
    """A report card that cannot be shown, with what to tell the user."""


def reward_report_command(run_dir: Path, pairs: Path | None = None, python: str | None = None,
                          policy: Path | None = None) -> list[str]:
    """The engine's command line that writes a run's report card (of `pairs`, a preference
    file, when given; else of the run's held-out pairs), its preflight checking the RL
    preset `policy` against the reward model when given (else the bundled preset that
    scores with this run's, if one does: policy_preset).

    >>> reward_report_command(Path("/r/rm"), python="py", policy=Path("/p/ppo.yaml"))
    ['py', '-m', 'engine', 'reward-report', '/r/rm', '--policy', '/p/ppo.yaml']
    >>> reward_report_command(Path("/r/rm"), Path("/d/pairs.jsonl"), python="py")[-2:]
    ['--pairs', '/d/pairs.jsonl']
    """
    from workbench.settings import bundled_presets

    command = [python or sys.executable, "-m", "engine", "reward-report", str(run_dir)]
    command += ["--pairs", str(pairs)] if pairs is not None else []
    policy = policy or policy_preset(run_dir, bundled_presets())
    return command + (["--policy", str(policy)] if policy is not None else [])


def policy_preset(run_dir: Path, presets: list[Path]) -> Path | None:
    """The first of `presets` with a `reward_model` reward whose model is this run (its
    folder, or `run:NAME` with NAME the run's preset): the RL preset that will use the
    reward model, whose model, chat template and system prompt the report card's
    preflight holds against the reward model's. None when none names it."""
    try:
        name = run_preset(run_dir).get("name")
    except (OSError, ValueError):
        return None
    wanted = {f"{RUN_PREFIX}{name}", str(Path(run_dir).resolve())} if name else {str(Path(run_dir).resolve())}
    for path in presets:
        try:
            rewards = read_preset_dict(path).get("rewards") or []
        except (OSError, ValueError, PresetError):
            continue
        for reward in rewards if isinstance(rewards, list) else []:
            options = reward.get("options") if isinstance(reward, dict) else None
            model = options.get("model") if isinstance(options, dict) else None
            if reward.get("name") == REWARD_MODEL_KIND and isinstance(model, str) and model.strip() in wanted:
                return path
    return None


# ---------------------------------------------------------------- which reports


@dataclass(frozen=True)
class ReportEntry:
    """One report card file of a run: its path and how the picker names it."""

    path: Path
    label: str
    held_out: bool


def report_path(run_dir: Path, pairs: Path | None = None) -> Path:
    """Where the engine writes the report of the held-out pairs, or of the file `pairs`.

    >>> report_path(Path("/r"), Path("/d/hard.pairs.jsonl")).name
    'reward-report-hard.pairs.json'
    """
    name = HELD_OUT_FILE if pairs is None else f"reward-report-{Path(pairs).stem}.json"
    return Path(run_dir) / REPORTS_DIR / name


def list_reports(run_dir: Path) -> list[ReportEntry]:
    """The run's report cards: the held-out pairs' first, then each preference file's by name."""
    folder = Path(run_dir) / REPORTS_DIR
    try:
        files = sorted(p for p in folder.glob("reward-report*.json") if p.is_file())
    except OSError:
        return []
    entries = [ReportEntry(p, "held-out pairs", True) for p in files if p.name == HELD_OUT_FILE]
    for path in files:
        stem = path.stem[len("reward-report-"):]
        if path.name != HELD_OUT_FILE and stem:
            entries.append(ReportEntry(path, f"file: {stem}", False))
    return entries


# ------------------------------------------------------------------ the report


@dataclass
class Margin:
    """The histogram of r(chosen) − r(rejected): len(edges) == len(counts) + 1."""

    mean: float | None
    median: float | None
    edges: list[float]
    counts: list[int]


@dataclass
class CalibrationBin:
    low: float
    high: float
    count: int
    predicted: float | None  # mean σ(r_a − r_b) of the bin's pairs; None when it has none
    observed: float | None  # how often a was the chosen one


@dataclass
class Calibration:
    ece: float | None
    bins: list[CalibrationBin]
    ece_interval: tuple[float, float] | None = None  # a 90% bootstrap interval over the pairs (newer reports)


@dataclass
class LengthCheck:
    unit: str
    longer_accuracy: float | None
    ties: int | None
    correlation: float | None
    matched_accuracy: float | None
    matched_pairs: int | None


@dataclass
class Finding:
    """A preflight check or a verdict line: what was looked at, how it went, what was seen
    (and, for a verdict line, what to try)."""

    key: str  # a check's name, or a line's topic
    title: str
    status: str
    saw: str
    try_: str | None = None


@dataclass
class Pair:
    prompt: str
    chosen: str
    rejected: str
    reward_chosen: float | None
    reward_rejected: float | None
    length_chosen: int | None
    length_rejected: int | None

    @property
    def margin(self) -> float | None:
        """r(chosen) − r(rejected): below 0, the reward model ranks the pair the wrong way round."""
        if self.reward_chosen is None or self.reward_rejected is None:
            return None
        return self.reward_chosen - self.reward_rejected


@dataclass
class RewardReport:
    path: Path
    run: str = ""
    checkpoint: str = ""
    step: int | None = None
    created: float | None = None
    source_kind: str = ""  # held_out | file
    source_path: str | None = None
    source_pairs: int | None = None
    accuracy: float | None = None
    margin: Margin | None = None
    calibration: Calibration | None = None
    length: LengthCheck | None = None
    preflight: list[Finding] = field(default_factory=list)
    lines: list[Finding] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the parts that could not be read


def load_report(path: Path) -> RewardReport:
    """The report card in `path`; ReportError (with what to tell the user) when there is
    none to show. A part that is missing or garbled is left empty and named in `problems`."""
    path = Path(path)
    data = read_json_object(path, "report card", ReportError, MAX_BYTES)
    if data.get("kind") != KIND:
        raise ReportError(f"{path.name} is not a reward-model report card (its kind is {data.get('kind')!r})")
    version = data.get("version")
    if not _is_int(version):
        raise ReportError(f"{path.name} does not say which version of the report format it is")
    if version > VERSION:
        raise ReportError(f"{path.name} is version {version} of the report format, newer than this window reads "
                          f"(version {VERSION}); update the workbench")
    report = RewardReport(path, run=_text(data.get("run")), checkpoint=_text(data.get("checkpoint")),
                          step=_int(data.get("step")), created=_number(data.get("created")),
                          accuracy=_fraction(data.get("accuracy")))
    _read_source(report, data.get("source"))
    # A report that scored nothing (its checkpoint has no score head) has no numbers by
    # design: its checks say why. Only a report that scored pairs misses them.
    scored = report.accuracy is not None or bool(report.source_pairs)
    report.margin = _part(report, "margin", data, _margin, expected=scored)
    report.calibration = _part(report, "calibration", data, _calibration, expected=scored)
    report.length = _part(report, "length", data, _length, expected=scored)
    report.preflight = _part(report, "preflight", data, lambda v: _findings(v, "check")) or []
    report.lines = _part(report, "lines", data, lambda v: _findings(v, "topic")) or []
    report.pairs = _part(report, "pairs", data, _pairs) or []
    return report


def _part(report, name: str, data: dict, read, expected: bool = True):
    return read_part(data, name, read, report.problems, "report", expected)


def _read_source(report: RewardReport, source) -> None:
    if not isinstance(source, dict):
        report.problems.append("the report does not say which pairs it scored")
        return
    report.source_kind = _text(source.get("kind"))
    report.source_path = source.get("path") if isinstance(source.get("path"), str) else None
    report.source_pairs = _int(source.get("pairs"))


def _margin(value: dict) -> Margin:
    edges = [float(x) for x in value["edges"]]
    counts = [int(c) for c in value["counts"]]
    if len(edges) != len(counts) + 1:
        raise ValueError("a histogram has one edge more than it has counts")
    return Margin(_number(value.get("mean")), _number(value.get("median")), edges, counts)


def _calibration(value: dict) -> Calibration:
    bins = [CalibrationBin(float(b["low"]), float(b["high"]), int(b.get("count") or 0),
                           _fraction(b.get("predicted")), _fraction(b.get("observed"))) for b in value["bins"]]
    interval = value.get("ece_interval")
    low, high = (_number(x) for x in interval) if isinstance(interval, list) and len(interval) == 2 else (None, None)
    return Calibration(_number(value.get("ece")), bins, (low, high) if low is not None and high is not None else None)


def _length(value: dict) -> LengthCheck:
    return LengthCheck(_text(value.get("unit")) or "tokens", _fraction(value.get("longer_accuracy")),
                       _int(value.get("ties")), _number(value.get("correlation")),
                       _fraction(value.get("matched_accuracy")), _int(value.get("matched_pairs")))


def _findings(value: list, key: str) -> list[Finding]:
    """Preflight checks (`key` "check") or verdict lines (`key` "topic"); an unknown status reads as worrying."""
    found = []
    for item in value:
        status = item.get("status")
        found.append(Finding(_text(item.get(key)), _text(item.get("title")) or _text(item.get(key)),
                             status if status in STATUSES else "worrying", _text(item.get("saw")),
                             item.get("try") if isinstance(item.get("try"), str) and item.get("try") else None))
    return found


def _pairs(value: list) -> list[Pair]:
    return [Pair(_text(p.get("prompt")), _text(p.get("chosen")), _text(p.get("rejected")),
                 _number(p.get("reward_chosen")), _number(p.get("reward_rejected")),
                 _int(p.get("length_chosen")), _int(p.get("length_rejected"))) for p in value]


def _fraction(value) -> float | None:
    number = _number(value)
    return number if number is not None and 0.0 <= number <= 1.0 else None


# ------------------------------------------------------------------- in words


def percent(value: float | None) -> str:
    """
    >>> percent(0.785), percent(None)
    ('78.5 %', '—')
    """
    return "—" if value is None else f"{100 * value:.1f} %"


def number(value: float | None, digits: int = 3) -> str:
    """
    >>> number(0.04123), number(None), number(12)
    ('0.0412', '—', '12')
    """
    return "—" if value is None else f"{value:.{digits}g}"


def source_text(report: RewardReport) -> str:
    """Which pairs a report scored, in words.

    >>> source_text(RewardReport(Path("r.json"), source_kind="held_out", source_pairs=200))
    'the run’s 200 held-out pairs'
    >>> source_text(RewardReport(Path("r.json"), source_kind="file", source_path="/d/hard.jsonl", source_pairs=57))
    '57 pairs of hard.jsonl'
    """
    count = "" if report.source_pairs is None else f"{report.source_pairs} "
    if report.source_kind == "file":
        name = Path(report.source_path).name if report.source_path else "a preference file"
        return f"{count}pairs of {name}"
    return f"the run’s {count}held-out pairs"


def created_text(created: float | None) -> str:
    return "—" if created is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(created))


# ------------------------------------------------------------- the CLI's output

_WROTE = re.compile(r"wrote (.+\.json)\s*")
_COUNT = re.compile(r"(\d+)\s*/\s*(\d+)")


def written_file(stdout: str) -> Path | None:
    """The report the engine says it wrote: its last `wrote PATH` line.

    >>> written_file("loading\\nwrote /r/reports/reward-report.json\\n")
    PosixPath('/r/reports/reward-report.json')
    """
    found = [m.group(1) for m in map(_WROTE.fullmatch, stdout.splitlines()) if m]
    return Path(found[-1]) if found else None


def last_line(text: str) -> str:
    """The last line a person would see of a process's output: a line redrawn with
    carriage returns counts as its last state.

    >>> last_line("scoring pairs 10/200\\rscoring pairs 64/200\\n\\n")
    'scoring pairs 64/200'
    """
    lines = [part.strip() for line in text.split("\n") for part in line.split("\r")]
    return next((line for line in reversed(lines) if line), "")


def progress_count(line: str) -> tuple[int, int] | None:
    """(done, total) of a progress line, when it counts.

    >>> progress_count("scoring pairs 64/200"), progress_count("loading the checkpoint")
    ((64, 200), None)
    """
    match = _COUNT.search(line)
    if not match or int(match.group(2)) <= 0:
        return None
    return int(match.group(1)), int(match.group(2))


def failure_text(stderr: str, code: int | None) -> str:
    """Why the engine failed: its last `error: ` line; of a traceback (an engine bug) its
    last line; else how it ended.

    >>> failure_text("scoring pairs 3/9\\nerror: no pairs in x.csv\\n", 2)
    'no pairs in x.csv'
    >>> failure_text("", None)
    'the engine stopped without saying why (killed by a signal)'
    """
    lines = [line.rstrip() for line in stderr.replace("\r", "\n").splitlines() if line.strip()]
    errors = [line[len("error: "):] for line in lines if line.startswith("error: ")]
    if errors:
        return errors[-1]
    status = "killed by a signal" if code is None else f"exit status {code}"
    if any(line.startswith("Traceback") for line in lines):
        return f"the engine failed: {next(line for line in reversed(lines) if not line[0].isspace())} ({status})"
    return f"the engine stopped without saying why ({status})" + (f"; its last words: {lines[-1]}" if lines else "")
