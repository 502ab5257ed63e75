"""What the Try tab (try_page.py) runs and reads, without Qt: the `rl-engine try` command line,
its progress lines, its JSON report as answers (each token's logprob under the model that wrote
it, under the other model, and log p_checkpoint - log p_base), the two quantities the tokens are
coloured by, and a token's tooltip; a given answer to score (an evaluation's sample, `--completion`)
instead of sampling. The engine's side is engine/commands/try_model.py.
"""

from __future__ import annotations

import html
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.foundation.run_files import run_preset
from workbench.inspector.colors import Scale
from workbench.inspector.quantities import Quantity, make_scale

VERSION = 1  # the report's version this reads

QUANTITIES = {
    "logprob": Quantity("logprob", "logprob", "sequential",
                        "log-probability under the model that wrote the answer (temperature 1); darker = less likely",
                        loud="low", anchor=0.0),
    "log_ratio": Quantity("log_ratio", "log-ratio", "diverging",
                          "log p_checkpoint − log p_base of the same token: green = training made it more likely, "
                          "pink = less likely; averaged over the checkpoint's own tokens it estimates "
                          "KL(checkpoint ‖ base)"),
}


class TryReportError(ValueError):
    """The engine's output cannot be read as a report (said in the page)."""


@dataclass(frozen=True)
class GivenAnswer:
    """An answer to score token by token instead of sampling (the Evaluate tab's sample):
    its held-out prompt, its text, the checkpoint it is scored under beside the base, and
    where it came from (said above the answers)."""

    run_dir: Path
    held_out: int
    completion: str
    checkpoint: str | None  # None: the Try tab's newest checkpoint
    source: str  # e.g. "sample 3 of step 400 in eval-20261128-170000"
    max_new_tokens: int | None = None  # the evaluation's answer length limit


def try_command(run_dir: Path, checkpoint: str, prompt: str | None = None, held_out: int | None = None,
                greedy: bool = True, samples: int = 1, temperature: float | None = None, seed: int | None = None,
                max_new_tokens: int | None = None, python: str | None = None,
                completion: str | None = None) -> list[str]:
    """The engine's command line that tries `checkpoint` of a run on a typed or held-out prompt
    (`completion`: scores that answer, samples none).

    >>> try_command(Path("/r/run"), "last", prompt="sort 2 1 =", python="py")[3:]
    ['try', '/r/run', '--checkpoint', 'last', '--json', '--progress', '--prompt=sort 2 1 =', '--greedy']
    >>> try_command(Path("/r"), "step_000004", held_out=3, greedy=False, samples=4, temperature=0.7, seed=1,
    ...             max_new_tokens=32, python="py")[9:]
    ['--held-out', '3', '--samples', '4', '--temperature', '0.7', '--seed', '1', '--max-new-tokens', '32']
    >>> try_command(Path("/r"), "step_000004", held_out=3, completion="-1 2", max_new_tokens=16, python="py")[9:]
    ['--held-out', '3', '--completion=-1 2', '--max-new-tokens', '16']
    """
    command = [python or sys.executable, "-m", "engine", "try", str(run_dir), "--checkpoint", checkpoint, "--json",
               "--progress"]
    # `--prompt=TEXT`: a prompt that starts with '-' is still the prompt, not an option
    command += ["--held-out", str(int(held_out))] if held_out is not None else [f"--prompt={prompt or ''}"]
    if completion is not None:
        command.append(f"--completion={completion}")
    elif greedy:
        command.append("--greedy")
    else:
        command += ["--samples", str(int(samples))]
        command += ["--temperature", f"{temperature:g}"] if temperature is not None else []
        command += ["--seed", str(int(seed))] if seed is not None else []
    return command + (["--max-new-tokens", str(int(max_new_tokens))] if max_new_tokens else [])


_PROGRESS = re.compile(r"progress\s+(\d+)\s*/\s*(\d+)\s*(.*)")


def progress_of(line: str) -> tuple[int, int, str] | None:
    """(done, total, what) of a `progress DONE/TOTAL WHAT` line, else None.

    >>> progress_of("progress 1/4 sampling base"), progress_of("loading"), progress_of("progress 1/0")
    ((1, 4, 'sampling base'), None, None)
    """
    match = _PROGRESS.fullmatch(line.strip())
    if not match or int(match.group(2)) <= 0:
        return None
    return int(match.group(1)), int(match.group(2)), match.group(3).strip()


@dataclass(frozen=True)
class RunDefaults:
    """What the form starts from: the preset's sampling temperature, answer length and
    held-out prompt count."""

    temperature: float = 1.0
    max_new_tokens: int = 64
    held_out: int = 0
    tools: str | None = None


def run_defaults(run_dir: Path) -> RunDefaults:
    """The run's preset.yaml read as plain data (a field it lacks keeps the default).

    >>> run_defaults(Path("/nowhere"))
    RunDefaults(temperature=1.0, max_new_tokens=64, held_out=0, tools=None)
    """
    try:
        preset = run_preset(run_dir)
    except (OSError, ValueError):
        return RunDefaults()
    algorithm = preset.get("algorithm") if isinstance(preset.get("algorithm"), dict) else {}
    data = preset.get("data") if isinstance(preset.get("data"), dict) else {}

    def number(value, default, kind):
        return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default

    tools = data.get("environment")
    return RunDefaults(number(algorithm.get("temperature"), 1.0, float),
                       number(algorithm.get("max_completion_length"), 64, int),
                       number(data.get("num_eval"), 0, int), tools if isinstance(tools, str) else None)


def _floats(values, n: int) -> np.ndarray:
    """A per-token list (null for none) as floats, NaN for null; TryReportError when its
    length is not the tokens'."""
    if not isinstance(values, list) or len(values) != n:
        raise TryReportError(f"a per-token list has {len(values) if isinstance(values, list) else 'no'} values "
                             f"for {n} tokens")
    return np.array([v if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan for v in values],
                    dtype=float)


@dataclass
class Answer:
    """One answer of one model, token by token."""

    text: str
    tokens: list[str]
    logprob: np.ndarray  # under the model that wrote it; NaN on a tool's token
    other_logprob: np.ndarray  # under the other model
    log_ratio: np.ndarray  # log p_checkpoint - log p_base
    tool: np.ndarray | None  # True on a tool's token (an episode's), else None
    truncated: bool = False

    @classmethod
    def of(cls, raw: dict) -> "Answer":
        tokens = raw.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise TryReportError("an answer has no token list")
        n = len(tokens)
        tool = raw.get("tool")
        return cls(str(raw.get("text", "")), tokens, _floats(raw.get("logprob"), n),
                   _floats(raw.get("other_logprob"), n), _floats(raw.get("log_ratio"), n),
                   np.array([bool(v) for v in tool]) if isinstance(tool, list) and len(tool) == n else None,
                   bool(raw.get("truncated")))

    def values(self, key: str) -> np.ndarray:
        return self.log_ratio if key == "log_ratio" else self.logprob

    @property
    def sum_logprob(self) -> float:
        return float(np.nansum(self.logprob))

    @property
    def mean_log_ratio(self) -> float | None:
        finite = self.log_ratio[np.isfinite(self.log_ratio)]
        return float(finite.mean()) if finite.size else None


@dataclass
class ModelAnswers:
    name: str
    label: str
    answers: list[Answer]


@dataclass
class TryReport:
    prompt: str
    templated_prompt: str
    checkpoint: str
    held_out: int | None
    expected: str | None
    sampling: dict
    tools: str | None
    models: list[ModelAnswers] = field(default_factory=list)
    seconds: float | None = None
    given: bool = False  # the answer was given (--completion), not sampled


def load_report(stdout: str) -> TryReport:
    """The JSON object the engine printed (its last line that is one)."""
    raw = None
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                raw = json.loads(line)
            except ValueError as exc:
                raise TryReportError(f"the engine's answer is not JSON ({exc})") from exc
            break
    if not isinstance(raw, dict) or raw.get("kind") != "try":
        raise TryReportError("the engine printed no answers")
    if raw.get("version") != VERSION:
        raise TryReportError(f"the engine's answers are version {raw.get('version')}; this window reads {VERSION}")
    models = raw.get("models")
    if not isinstance(models, list) or len(models) != 2:
        raise TryReportError("the engine's answers do not hold two models")
    out = TryReport(str(raw.get("prompt") or ""), str(raw.get("templated_prompt") or ""), str(raw.get("checkpoint")),
                    raw.get("held_out") if isinstance(raw.get("held_out"), int) else None,
                    None if raw.get("expected_answer") is None else str(raw.get("expected_answer")),
                    raw.get("sampling") if isinstance(raw.get("sampling"), dict) else {},
                    raw.get("tools") if isinstance(raw.get("tools"), str) else None)
    for model in models:
        answers = model.get("answers") if isinstance(model, dict) else None
        if not isinstance(answers, list) or not answers:
            raise TryReportError("a model has no answers")
        out.models.append(ModelAnswers(str(model.get("name")), str(model.get("label") or model.get("name")),
                                       [Answer.of(a) for a in answers]))
    out.given = raw.get("given") is True
    seconds = raw.get("seconds")
    out.seconds = seconds.get("total") if isinstance(seconds, dict) else None
    return out


def shared_scale(key: str, answers: list[Answer]) -> Scale:
    """One scale over the answers on show (both sides), so a colour means the same number
    on the left and the right."""
    return make_scale(QUANTITIES[key], [a.values(key) for a in answers], "both answers on show")


def _num(value: float) -> str:
    return "—" if not math.isfinite(value) else f"{value:.4g}"


def token_tooltip(answer: Answer, i: int, own: str, other: str) -> str:
    """A token's tooltip: its text, its logprob under both models (and probabilities) and
    the log-ratio; a tool's token says no model wrote it."""
    text = html.escape(repr(answer.tokens[i]))
    if answer.tool is not None and answer.tool[i]:
        return f"<b>{text}</b><br>written by the tool (the environment), not by a model: no logprob"
    mine, theirs, ratio = answer.logprob[i], answer.other_logprob[i], answer.log_ratio[i]

    def prob(lp: float) -> str:
        return "" if not math.isfinite(lp) else f" (p = {math.exp(lp):.3g})"

    return (f"<b>{text}</b> · token {i + 1} of {len(answer.tokens)}<br>"
            f"log p under {html.escape(own)}: {_num(mine)}{prob(mine)}<br>"
            f"log p under {html.escape(other)}: {_num(theirs)}{prob(theirs)}<br>"
            f"log-ratio (checkpoint − base): {_num(ratio)}")
