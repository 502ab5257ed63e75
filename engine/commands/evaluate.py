"""`rl-engine eval TARGET [--models base,last,step_N] [--n 32] [--k 1,4,16] [--reward-model PATH]
[--prompts K] [--name NAME] [--set KEY=VALUE] [--progress] [--quiet]`: base against checkpoints,
N samples a held-out prompt, graded by the task's verifier (engine/evaluate/ has the
estimators and the answer rules).

TARGET is a run folder (its starting model, "base": the base model with the adapters the
run stands on merged, and any of its checkpoints) or a preset file (its base model alone).
The samples are drawn as the run's training draws them (the preset's sampling settings;
`--set algorithm.temperature=1.0` changes them), N of a prompt sharing its encoded prefix,
several prompts a batch, each chunk of prompts with a generator seeded by the model and the
chunk, so a resumed evaluation draws what an uninterrupted one would. Multi-turn presets
are sampled as episodes.

Written to RUN/evals/NAME/ (a preset's: runs/evals/PRESET-STAMP/): samples.jsonl, a line a
(model, prompt) with every sample and its verdict, appended chunk by chunk; eval.json, the
estimates, rewritten after each chunk (docs/run-directory.md). Ctrl-C or SIGTERM stops after
the chunk under way, keeping what is done (exit 130); the same command with --name NAME
resumes. Exit 0; 2 for bad input (one `error:` line).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from engine.evaluate.answers import vote_keys
from engine.evaluate.estimators import best_of_n, crossings, maj_at_k, pass_at_k, pass_hat_k, powers_of_two
from engine.foundation.errors import PresetError
from engine.run import rundir

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_STOPPED = 0, 1, 2, 130
EVALS_DIR = "evals"
ROWS_PER_BATCH = 256  # samples decoded at once: prompts a chunk = this // N (at least 1)
VERSION = 1


class EvalError(ValueError):
    """Bad input: one line naming the option and the fix."""


@dataclass
class ModelSpec:
    name: str  # "base" or a checkpoint's folder name
    label: str
    checkpoint: Path | None
    step: int


@dataclass
class Plan:
    preset: object
    run_dir: Path | None
    out: Path
    models: list[ModelSpec]
    n: int
    ks: list[int]
    prompts: int | None
    reward_model: str | None
    preset_dir: Path | None = None  # where the preset's relative paths start


# ------------------------------------------------------------------ the plan


def _models(run_dir: Path | None, names: list[str]) -> list[ModelSpec]:
    found = {c.name: c.resolve() for c in rundir.complete_checkpoints(run_dir)} if run_dir else {}
    out = []
    for name in names:
        if name == "base":
            out.append(ModelSpec("base", "base (no adapter)", None, 0))
            continue
        if run_dir is None:
            raise EvalError(f"--models: {name} is a run's checkpoint, and the target is a preset (its base model "
                            "only); give a run folder to evaluate its checkpoints")
        if name == "last":
            if not found:
                raise EvalError(f"--models: run {run_dir.name} has no complete checkpoint yet; evaluate `base`, or "
                                "let it reach training.save_steps")
            name = sorted(found)[-1]
        if name not in found:
            raise EvalError(f"--models: run {run_dir.name} has no checkpoint {name} (it has: "
                            f"{', '.join(sorted(found)) or 'none'}); give base, last or one of those")
        step = int(name.split("_")[-1])
        out.append(ModelSpec(name, f"step {step}", found[name], step))
    return list({m.name: m for m in out}.values())


def _check_resumed(out: Path, n: int, models: list[str]) -> None:
    """An evaluation resumed (its folder holds one) must draw as it drew: the same N, and
    the models it had among these."""
    try:
        before = json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if before.get("n") != n:
        raise EvalError(f"--n: evaluation {out.name} drew {before.get('n')} samples a prompt; resume it with "
                        f"--n {before.get('n')}, or give another --name")
    had = [m.get("name") for m in before.get("models", []) if m.get("done_prompts")]
    if any(name not in models for name in had):
        raise EvalError(f"--models: evaluation {out.name} evaluated {', '.join(had)}; resume it with --models "
                        f"{','.join(had)}, or give another --name")


def plan_evaluation(args) -> Plan:
    """What to evaluate, checked before any model loads; EvalError or PresetError."""
    from engine.preset.schema import load_preset

    target = Path(args.target)
    run_dir = target if (target / rundir.PRESET_FILE).is_file() else None
    if run_dir is None and not target.is_file():
        raise EvalError(f"{target} is neither a run folder (with {rundir.PRESET_FILE}) nor a preset file")
    preset = load_preset(run_dir / rundir.PRESET_FILE if run_dir else target, args.set)
    if preset.algorithm.trains_score_head:
        raise EvalError(f"{target} trains a reward model, which has no policy to sample; its report card is "
                        "`rl-engine reward-report`")
    if args.n < 1:
        raise EvalError(f"--n: {args.n} samples a prompt; give at least 1")
    try:
        ks = sorted({int(k) for k in args.k.split(",") if k.strip()}) if args.k else powers_of_two(args.n)
    except ValueError:
        raise EvalError(f"--k: {args.k!r} is not a comma-separated list of whole numbers (e.g. 1,4,32)") from None
    if not ks:
        raise EvalError("--k: no k given; leave --k out for 1, 2, 4, ... up to --n")
    if ks[0] < 1 or ks[-1] > args.n:
        raise EvalError(f"--k: k must be between 1 and --n {args.n} (pass@k of {ks[-1]} samples needs at least "
                        f"{ks[-1]} a prompt); raise --n or drop it")
    if args.prompts is not None and args.prompts < 1:
        raise EvalError(f"--prompts: {args.prompts}; give at least 1, or leave it out for every held-out prompt")
    models = _models(run_dir.resolve() if run_dir else None, [m.strip() for m in args.models.split(",") if m.strip()])
    if args.name is not None and (not args.name.strip() or args.name != Path(args.name).name
                                  or args.name in (".", "..")):
        raise EvalError(f"--name: {args.name!r} is not a folder name (it goes under the run's {EVALS_DIR}/ folder, "
                        "so no '/' and not '.' or '..'); give a plain name such as n32-temp1")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = args.name or f"eval-{stamp}"
    out = (run_dir / EVALS_DIR / name) if run_dir else \
        Path("runs") / EVALS_DIR / (args.name or f"{preset.name}-{stamp}")
    _check_resumed(out, args.n, [m.name for m in models])
    return Plan(preset, run_dir.resolve() if run_dir else None, out.resolve(), models, args.n, ks, args.prompts,
                args.reward_model, (run_dir or target.parent).resolve())


# ------------------------------------------------------------------ sampling and grading


class Sampler:
    """The run's trainer (models, data, rewards, episodes, as training has them), its
    adapter switched between the models evaluated."""

    def __init__(self, plan: Plan):
        from peft import get_peft_model_state_dict

        from engine.algorithms.evaluation import accuracy_function
        from engine.commands.train import build_trainer

        self.trainer = build_trainer(plan.preset, plan.run_dir or plan.out, preset_dir=plan.preset_dir)
        self.examples = self.trainer.eval_examples[: plan.prompts] if plan.prompts else self.trainer.eval_examples
        if not self.examples:
            raise EvalError("the preset holds out no prompts (data.num_eval is 0); set data.num_eval")
        self.accuracy_name = self.trainer.accuracy_reward
        self.accuracy = accuracy_function(plan.preset.rewards, self.accuracy_name)
        options = next((r.options for r in plan.preset.rewards if r.name == self.accuracy_name), {})
        self.votes = vote_keys(self.accuracy_name, options)
        self.start = {k: v.clone() for k, v in get_peft_model_state_dict(self.trainer.model).items()}
        self.rm_label, self.rm = _reward_model(plan, self.trainer)

    def use(self, model: ModelSpec) -> None:
        from peft import set_peft_model_state_dict
        from peft.utils import load_peft_weights

        weights = self.start if model.checkpoint is None else load_peft_weights(str(model.checkpoint),
                                                                                device=str(self.trainer.device))
        set_peft_model_state_dict(self.trainer.model, weights)

    def sample(self, indices: list[int], n: int, seed: int) -> tuple[list[dict], float]:
        """Each prompt's n samples, graded; and the seconds the sampling took."""
        from engine.algorithms.episodes import StepEpisodes

        t = self.trainer
        examples = [self.examples[i] for i in indices]
        prompts = [e.prompt for e in examples for _ in range(n)]
        names = sorted({k for e in examples for k in e.fields})
        fields = {k: [e.fields.get(k) for e in examples for _ in range(n)] for k in names}
        t.random_states.sample_generator.manual_seed(seed)
        started = time.perf_counter()
        rollout, completions = t.sample_batch(prompts, n, fields=fields)
        seconds = time.perf_counter() - started
        fields = StepEpisodes(rollout, t.tokenizer).reward_fields(fields)
        totals, components = t.score(prompts, completions, fields, n)
        correct = self.accuracy(prompts, completions, **fields) if self.accuracy else [None] * len(prompts)
        votes = self.votes(completions) if self.votes else [None] * len(prompts)
        rm = components.get(self.rm_label) if self.rm_label else (self.rm(prompts, completions) if self.rm else None)
        rows = []
        for p, (i, e) in enumerate(zip(indices, examples)):
            part = slice(p * n, (p + 1) * n)
            rows.append({"index": i, "prompt": e.prompt, "answer": e.fields.get("answer"), "samples": [
                {"completion": completions[r], "reward": totals[r], "rewards": {k: v[r] for k, v in components.items()},
                 "correct": None if correct[r] is None else correct[r] >= 1.0, "vote": votes[r],
                 "rm_score": None if rm is None else rm[r]} for r in range(part.start, part.stop)]})
        return rows, seconds


def _reward_model(plan: Plan, trainer):
    """(label of the preset's learned reward, None) when it has one and no --reward-model
    is given: best-of-N by its score, already computed; else (None, a scorer) for
    --reward-model; else (None, None)."""
    from engine.algorithms.declaration import reward_model_labels

    if plan.reward_model is None:
        learned = reward_model_labels(plan.preset.rewards)
        return (learned[0] if learned else None), None
    from engine.rewards.base import RewardError
    from engine.rewards.model import reward_model_reward
    from engine.run.lineage import is_run_reference, resolve_run

    model = plan.reward_model
    if is_run_reference(model):
        try:
            runs = plan.run_dir.parent if plan.run_dir else Path("runs").resolve()  # run:NAME beside the run
            model = str(resolve_run(model, "--reward-model", runs).checkpoint)
        except ValueError as exc:
            raise EvalError(str(exc)) from exc
    try:
        return None, reward_model_reward(model=model, device=trainer.device, where="--reward-model")
    except RewardError as exc:
        raise EvalError(str(exc)) from exc


# ------------------------------------------------------------------ the estimates


def row_estimates(row: dict, n: int, ks: list[int]) -> dict:
    """One prompt's estimates (cached on its row: the summary is rewritten after every
    chunk, and maj@k's draws are the costly part)."""
    if "_estimates" in row:
        return row["_estimates"]
    samples = row["samples"]
    graded = all(s["correct"] is not None for s in samples)
    correct = [bool(s["correct"]) for s in samples]
    c = sum(correct)
    out = {"reward": sum(s["reward"] for s in samples) / len(samples), "graded": graded,
           "pass": {k: pass_at_k(n, c, k) for k in ks} if graded else None,
           "hat": {k: pass_hat_k(n, c, k) for k in ks} if graded else None,
           "maj": None, "bon": None, "oracle": None}
    votes = [s["vote"] for s in samples]
    if graded and any(v is not None for v in votes):  # the verifier has an answer rule
        out["maj"] = {k: maj_at_k(votes, correct, k, seed=row["index"]) for k in ks}
    scores = [s["rm_score"] for s in samples]
    if graded and all(v is not None for v in scores):
        out["bon"] = {m: best_of_n(scores, correct, m) for m in range(1, n + 1)}
        out["oracle"] = {m: pass_at_k(n, c, m) for m in range(1, n + 1)}
    row["_estimates"] = out
    return out


def _mean_of(estimates: list[dict], key: str, points) -> dict | None:
    if not estimates or any(e[key] is None for e in estimates):
        return None
    return {str(k): sum(e[key][k] for e in estimates) / len(estimates) for k in points}


def model_summary(spec: ModelSpec, rows: list[dict], n: int, ks: list[int], seconds: float) -> dict:
    """A model's estimates over its prompts graded so far (`rows`: samples.jsonl's), each
    a mean over the prompts."""
    estimates = [row_estimates(r, n, ks) for r in rows]
    bon = _mean_of(estimates, "bon", range(1, n + 1))
    oracle = _mean_of(estimates, "oracle", range(1, n + 1))
    return {"name": spec.name, "label": spec.label, "checkpoint": str(spec.checkpoint) if spec.checkpoint else None,
            "step": spec.step, "done_prompts": len(rows),
            "mean_reward": sum(e["reward"] for e in estimates) / len(estimates) if estimates else None,
            "pass_at_k": _mean_of(estimates, "pass", ks), "pass_hat_k": _mean_of(estimates, "hat", ks),
            "maj_at_k": _mean_of(estimates, "maj", ks),
            "best_of_n": {"reward_model": bon, "oracle": oracle} if bon else None,
            "samples_per_second": (len(rows) * n / seconds) if seconds > 0 else None}


def summary(plan: Plan, done: dict[str, list[dict]], seconds: dict[str, float], finished: bool,
            sampler: Sampler | None) -> dict:
    models = [model_summary(m, sorted(done.get(m.name, []), key=lambda r: r["index"]), plan.n, plan.ks,
                            seconds.get(m.name, 0.0)) for m in plan.models]
    cross = []
    for a in models[:1]:
        for b in models[1:]:
            if a["pass_at_k"] and b["pass_at_k"]:
                cross += [{"a": a["name"], "b": b["name"], "k": k, "metric": "pass_at_k"} for k in crossings(
                    {int(k): v for k, v in a["pass_at_k"].items()}, {int(k): v for k, v in b["pass_at_k"].items()})]
    per_prompt: dict[int, dict] = {}
    for name, rows in done.items():
        for r in rows:
            entry = per_prompt.setdefault(r["index"], {"index": r["index"], "prompt": r["prompt"], "correct": {}})
            entry["correct"][name] = sum(bool(s["correct"]) for s in r["samples"])
    prompts = len(sampler.examples) if sampler else max((len(v) for v in done.values()), default=0)
    s = plan.preset.algorithm
    return {"kind": "evaluation", "version": VERSION, "name": plan.out.name,
            "run": str(plan.run_dir) if plan.run_dir else None,
            "preset": str(plan.run_dir / rundir.PRESET_FILE) if plan.run_dir else plan.preset.name,
            "created": time.time(), "finished": finished, "n": plan.n, "ks": plan.ks,
            "sampling": {"temperature": getattr(s, "temperature", 1.0), "top_p": getattr(s, "top_p", 1.0),
                         "top_k": getattr(s, "top_k", 0), "max_completion_length": s.max_completion_length},
            "verifier": sampler.accuracy_name if sampler else None,
            "reward_model": plan.reward_model or (sampler.rm_label if sampler else None), "prompts": prompts,
            "models": models, "crossings": cross, "per_prompt": [per_prompt[i] for i in sorted(per_prompt)]}


# ------------------------------------------------------------------ the files


def read_done(out: Path) -> dict[str, list[dict]]:
    """samples.jsonl's rows by model, the last of a (model, prompt) kept; a line cut by a
    kill is skipped (its chunk is drawn again)."""
    done: dict[str, dict[int, dict]] = {}
    path = out / SAMPLES_FILE
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                done.setdefault(row["model"], {})[int(row["index"])] = row
            except (ValueError, KeyError, TypeError):
                continue
    return {model: list(rows.values()) for model, rows in done.items()}


def write_summary(out: Path, report: dict) -> None:
    partial = out / (SUMMARY_FILE + ".tmp")
    partial.write_text(json.dumps(rundir.json_safe(report), indent=1, allow_nan=False), encoding="utf-8")
    partial.replace(out / SUMMARY_FILE)


SAMPLES_FILE, SUMMARY_FILE = "samples.jsonl", "eval.json"


def chunks(total: int, n: int) -> list[list[int]]:
    """The prompts' fixed partition into chunks (a resumed evaluation draws the same ones).

    >>> chunks(5, 128)
    [[0, 1], [2, 3], [4]]
    """
    size = max(1, ROWS_PER_BATCH // n)
    return [list(range(i, min(total, i + size))) for i in range(0, total, size)]


def evaluate(plan: Plan, progress, stop: list[bool]) -> tuple[dict, bool]:
    """Sample and grade every (model, chunk) not yet in samples.jsonl, appending each chunk
    and rewriting eval.json after it; (the summary, whether it was stopped)."""
    plan.out.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(plan)
    if sampler.accuracy is None:
        progress(f"note: no verifier grades {plan.preset.data.task or 'this data'} (no `answer` column), so pass@k, "
                 "pass^k and maj@k are not given; the mean reward is")
    done = read_done(plan.out)
    seconds: dict[str, float] = {}
    parts = chunks(len(sampler.examples), plan.n)
    total, finished = len(plan.models) * len(sampler.examples), sum(
        len({r["index"] for r in done.get(m.name, [])}) for m in plan.models)
    for number, model in enumerate(plan.models):
        have = {r["index"] for r in done.get(model.name, [])}
        todo = [(c, part) for c, part in enumerate(parts) if not set(part) <= have]
        if not todo:
            continue
        sampler.use(model)
        for c, part in todo:
            if stop[0]:
                return summary(plan, done, seconds, False, sampler), True
            rows, took = sampler.sample(part, plan.n, seed=plan.preset.training.seed * 1_000_003 + 7919 * number + c)
            seconds[model.name] = seconds.get(model.name, 0.0) + took
            with (plan.out / SAMPLES_FILE).open("a", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(rundir.json_safe({"model": model.name, **row}), ensure_ascii=False) + "\n")
            done.setdefault(model.name, [])
            done[model.name] = [r for r in done[model.name] if r["index"] not in set(part)] + [
                {"model": model.name, **r} for r in rows]
            finished += len(part)
            progress(f"progress {finished}/{total}")
            write_summary(plan.out, summary(plan, done, seconds, False, sampler))
    report = summary(plan, done, seconds, True, sampler)
    write_summary(plan.out, report)
    return report, False


def format_summary(report: dict) -> str:
    """The estimates as a table: a row a model."""
    ks = report["ks"]
    head = ["model", *[f"pass@{k}" for k in ks], f"maj@{ks[-1]}", "mean reward", "samples/s"]
    width = max(len(m["label"]) for m in report["models"]) if report["models"] else 5
    lines = [f"{head[0]:<{width}}  " + "  ".join(f"{h:>10}" for h in head[1:])]
    for m in report["models"]:
        cells = [m["label"]] + [f"{m['pass_at_k'][str(k)]:.1%}" if m["pass_at_k"] else "-" for k in ks]
        cells.append(f"{m['maj_at_k'][str(ks[-1])]:.1%}" if m["maj_at_k"] else "-")
        cells.append(f"{m['mean_reward']:.3f}" if m["mean_reward"] is not None else "-")
        cells.append(f"{m['samples_per_second']:.0f}" if m["samples_per_second"] else "-")
        lines.append(f"{cells[0]:<{width}}  " + "  ".join(f"{c:>10}" for c in cells[1:]))
    for cross in report["crossings"]:
        lines.append(f"pass@k of {cross['b']} crosses {cross['a']}'s at k = {cross['k']:.1f}")
    for m in report["models"]:
        if m["best_of_n"]:
            rm, oracle = m["best_of_n"]["reward_model"], m["best_of_n"]["oracle"]
            lines.append(f"{m['label']}: best-of-N by the reward model / by the verifier: " + ", ".join(
                f"N={k} {rm[str(k)]:.1%}/{oracle[str(k)]:.1%}" for k in ks))
    return "\n".join(lines)


def cmd_eval(args) -> int:
    from engine.model.loading import quiet_progress_bars

    quiet_progress_bars()
    try:
        plan = plan_evaluation(args)
    except (EvalError, PresetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    stop = [False]

    def on_signal(signum, frame):  # after the chunk under way: what is done stays done
        stop[0] = True
        print("stopping after this chunk...", file=sys.stderr, flush=True)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    bar = None
    if not args.quiet and not args.progress:
        from tqdm import tqdm

        bar = tqdm(total=None, unit="prompt", desc="eval")

    def progress(line: str) -> None:
        if line.startswith("progress ") and bar is not None:
            done, total = (int(x) for x in line.split()[1].split("/"))
            bar.total, bar.n = total, done
            bar.refresh()
        elif line.startswith("progress ") and not args.progress:
            return
        else:
            print(line, file=sys.stderr, flush=True)

    try:
        report, stopped = evaluate(plan, progress, stop)
    except (EvalError, PresetError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if bar is not None:
            bar.close()
    print(format_summary(report))
    if stopped:
        again = " ".join(a for a in sys.argv[1:] if a != "--name" and a != plan.out.name) if sys.argv[1:2] == [
            "eval"] else f"eval {args.target} --n {plan.n} --models {','.join(m.name for m in plan.models)}"
        print(f"stopped: what is done is in {plan.out}; `rl-engine {again} --name {plan.out.name}` resumes",
              file=sys.stderr)
        return EXIT_STOPPED
    print(f"wrote {plan.out}")
    return EXIT_OK


def add_eval_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("eval", help="pass@k, maj@k and best-of-N: base against a run's checkpoints")
    p.add_argument("target", help="a run folder, or a preset file (its base model only)")
    p.add_argument("--models", default="base,last", help="comma-separated: base, last, or checkpoint names "
                                                         "(step_000200); default base,last")
    p.add_argument("--n", type=int, default=32, help="samples a prompt (default 32)")
    p.add_argument("--k", help="comma-separated k for pass@k and maj@k (default 1, 2, 4, ... up to N)")
    p.add_argument("--reward-model", metavar="PATH", help="best-of-N as this reward model picks (a reward-model "
                                                          "run, its checkpoint, or a model folder); default: the "
                                                          "preset's learned reward, if it has one")
    p.add_argument("--prompts", type=int, help="the first K held-out prompts only")
    p.add_argument("--name", help="the evaluation's folder name under RUN/evals/ (the same name resumes it)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="change a preset field for sampling, e.g. --set algorithm.temperature=1.0")
    p.add_argument("--progress", action="store_true", help="`progress DONE/TOTAL` lines on stderr (the window's)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_eval)
    return p
