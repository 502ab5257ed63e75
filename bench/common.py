"""Helpers shared by the `*_vs_trl.py` benchmarks.

Everything the benchmarks build goes under bench/out/ (git-ignored): the benchmark models
(`models/`), run folders and logs (`runs/`), and the separate virtual environment with
TRL 1.12 that the PPO benchmark needs (`trl112-venv/`; TRL dropped its PPO trainer after
1.12, so it cannot share the project's venv, which has a newer TRL).

The two sides of a benchmark always run as child processes, one after the other:
`run_child` waits for a child with os.wait4, whose ru_maxrss is the child's own peak
resident set size, the memory figure of every benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUT = ROOT / "bench" / "out"
MODELS_DIR = OUT / "models"
RUNS_DIR = OUT / "runs"
RESULT_PREFIX = "BENCH_RESULT "

# The 10x model: the tiny model's recipe is 4 layers x 128 wide (~0.82M parameters);
# 8 layers x 288 wide is ~8.1M, about ten times as many.
TEN_X = dict(n_layer=8, n_embd=288, n_head=6, n_positions=128, seed=0)

# The Qwen-vocabulary model: Qwen2.5-0.5B's vocabulary (151,936) and width (896, its heads and
# MLP), 2 layers, tied embeddings. Its 136M-parameter LM head dominates as a real model's does
# on a GPU. The built-in character tokenizer's ~100 ids are all below the vocabulary; the ids
# above it that random weights sample decode to nothing (both sides alike).
QWEN_VOCAB = dict(architecture="qwen2", vocab_size=151936, hidden_size=896, num_hidden_layers=2,
                  num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                  max_position_embeddings=1024, seed=0)

# The reward model of the PPO benchmark: a small randomly initialised
# GPT2ForSequenceClassification (one logit) with the built-in character tokenizer. Its
# scores are meaningless; it is there so that both sides pay for a reward-model forward.
REWARD_MODEL = dict(n_layer=2, n_embd=64, n_head=2, n_positions=128, seed=1, num_labels=1)


# ----------------------------------------------------------------------------- models


def gpt2_spec(n_layer: int, n_embd: int, n_head: int, n_positions: int, seed: int) -> dict:
    return dict(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_positions=n_positions, seed=seed)


def _spec_is_current(folder: Path, spec: dict) -> bool:
    marker = folder / "bench_spec.json"
    return marker.exists() and json.loads(marker.read_text()) == spec and (folder / "config.json").exists()


def build_cached_model(folder: Path, spec: dict) -> None:
    """A randomly initialised GPT-2 with the built-in character tokenizer, saved with
    save_pretrained; rebuilt only when the spec changed."""
    if _spec_is_current(folder, spec):
        return
    from engine.builtin_model.recipe import RecipeConfig, build_model, build_tokenizer

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    tokenizer = build_tokenizer(model_max_length=spec["n_positions"])
    model = build_model(RecipeConfig(**spec), tokenizer)  # seeds torch with spec["seed"]
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    (folder / "bench_spec.json").write_text(json.dumps(spec))


def prepare_model(name: str) -> tuple[Path, str]:
    """(folder, note) of a benchmark policy model, building it when needed."""
    if name == "tiny":
        from engine.builtin_model.recipe import RecipeConfig, builtin_model_path

        path = builtin_model_path()
        if (path / "config.json").exists():
            return path, "assets/tiny-model"
        recipe = RecipeConfig()
        folder = MODELS_DIR / "tiny-standin"
        build_cached_model(folder, gpt2_spec(recipe.n_layer, recipe.n_embd, recipe.n_head, recipe.n_positions, recipe.seed))
        return folder, "assets/tiny-model is missing: untrained stand-in of the same architecture"
    if name == "10x":
        folder = MODELS_DIR / "gpt2-10x"
        build_cached_model(folder, gpt2_spec(**TEN_X))
        return folder, "random init, seed {seed}: {n_layer} layers x {n_embd} wide, {n_head} heads".format(**TEN_X)
    if name == "qwen-vocab":
        folder = MODELS_DIR / "qwen2-vocab"
        build_qwen_vocab_model(folder, QWEN_VOCAB)
        return folder, ("random init, seed {seed}: Qwen2, {num_hidden_layers} layers x {hidden_size} wide, "
                        "vocabulary {vocab_size:,}, the built-in tokenizer").format(**QWEN_VOCAB)
    raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODEL_NAMES)}")


MODEL_NAMES = ("tiny", "10x", "qwen-vocab")


def build_qwen_vocab_model(folder: Path, spec: dict) -> None:
    """A randomly initialised Qwen2ForCausalLM of `spec` with the built-in character
    tokenizer, saved with save_pretrained; rebuilt only when the spec changed."""
    if _spec_is_current(folder, spec):
        return
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from engine.builtin_model.recipe import build_tokenizer

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    tokenizer = build_tokenizer(model_max_length=spec["max_position_embeddings"])
    assert len(tokenizer) <= spec["vocab_size"]
    fields = {k: v for k, v in spec.items() if k not in ("architecture", "seed")}
    config = Qwen2Config(**fields, tie_word_embeddings=True, rope_theta=1e6, rms_norm_eps=1e-6,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(spec["seed"])
    model = Qwen2ForCausalLM(config)
    for key in ("pad_token_id", "eos_token_id", "bos_token_id"):
        setattr(model.generation_config, key, getattr(tokenizer, key))
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    (folder / "bench_spec.json").write_text(json.dumps(spec))


def prepare_reward_model() -> Path:
    """bench/out/models/reward-model: a GPT2ForSequenceClassification with one label, random
    init with a fixed seed, the built-in character tokenizer; rebuilt only when the spec
    changed."""
    folder = MODELS_DIR / "reward-model"
    spec = dict(REWARD_MODEL)
    if _spec_is_current(folder, spec):
        return folder
    import torch
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from engine.builtin_model.recipe import build_tokenizer

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    tokenizer = build_tokenizer(model_max_length=spec["n_positions"])
    torch.manual_seed(spec["seed"])
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=spec["n_positions"], n_embd=spec["n_embd"],
        n_layer=spec["n_layer"], n_head=spec["n_head"], num_labels=spec["num_labels"],
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = GPT2ForSequenceClassification(config)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    (folder / "bench_spec.json").write_text(json.dumps(spec))
    return folder


def parameter_count(folder: Path) -> int:
    """Parameters of the base model (tied embeddings counted once)."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        for key in f.keys():
            n = 1
            for d in f.get_slice(key).get_shape():
                n *= d
            total += n
    return total


# ----------------------------------------------------------------------- child processes


def child_env(threads: int = 0) -> dict:
    env = dict(os.environ)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for key in ("WANDB_DISABLED", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env[key] = "1"
    env["WANDB_MODE"] = "disabled"
    if threads:
        # Both sides read it at torch's start; the TRL children also call torch.set_num_threads.
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def run_child(cmd: list[str], log_path: Path, env: dict, timeout: float) -> tuple[int, float, float]:
    """Run `cmd` to completion; (exit status, peak RSS in MB, wall seconds). Output goes
    to log_path. ru_maxrss from wait4 is the child's own peak resident set."""
    started = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + timeout
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() > deadline:
                    proc.kill()
                    pid, status, usage = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.05)
        except BaseException:
            proc.kill()
            os.wait4(proc.pid, 0)
            proc.returncode = -9
            raise
    rc = os.waitstatus_to_exitcode(status)
    proc.returncode = rc  # reaped here; keep Popen from waiting again
    return rc, usage.ru_maxrss / 1024.0, time.perf_counter() - started


def tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def read_child_result(log: Path) -> dict:
    """The last RESULT line a TRL child printed."""
    lines = [l for l in log.read_text(errors="replace").splitlines() if l.startswith(RESULT_PREFIX)]
    if not lines:
        raise RuntimeError(f"the TRL side printed no result; log {log}:\n{tail(log)}")
    return json.loads(lines[-1][len(RESULT_PREFIX):])


def vmhwm_mb() -> float | None:
    """This process's peak resident set from /proc (a cross-check of ru_maxrss)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def print_child_result(result: dict) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def alternate_sides(name: str, repeats: int, work_prefix: str, keep_runs: bool,
                    run_side: Callable[[str, Path], dict], describe: Callable[[dict], str],
                    sides: tuple[str, ...] = ("ours", "trl")) -> dict[str, list[dict]]:
    """Run our side and TRL's (or every one of `sides`) `repeats` times each, one process
    at a time, alternating which goes first (so neither always runs on a warmer machine;
    with more sides, the order turns round). `run_side(side, work)` runs one side in the
    folder `work` and returns its result; `describe(result)` is the progress line.
    Returns {side: [...]}."""
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for rep in range(repeats):
        turn = rep % len(sides)
        order = sides[turn:] + sides[:turn]
        for side in order:
            work = RUNS_DIR / f"{work_prefix}{name}-{stamp}-r{rep}-{side}"
            work.mkdir(parents=True, exist_ok=True)
            print(f"[{name}] repeat {rep + 1}/{repeats}: {side} ...", file=sys.stderr, flush=True)
            result = run_side(side, work)
            print(f"[{name}]   {side}: {describe(result)}, process {result['process_wall_s']:.0f}s",
                  file=sys.stderr, flush=True)
            runs[side].append(result)
            if not keep_runs:
                shutil.rmtree(work, ignore_errors=True)
    return runs


def compare_sides(runs: dict[str, list[dict]], params: int, steps_timed: int, extra_key: str) -> dict:
    """Each side's medians over its repeats (samples/s, peak RSS, in-step fraction and the
    benchmark's own `extra_key`) and the two ratios ours / TRL."""
    summary = {}
    for side in ("ours", "trl"):
        rs = runs[side]
        summary[side] = {
            "side": side, "params": params, "steps_timed": steps_timed,
            "samples_per_s": median_of(rs, "samples_per_s"),
            "peak_rss_mb": median_of(rs, "peak_rss_mb"),
            extra_key: median_of(rs, extra_key),
            "in_step_fraction": median_of(rs, "in_step_fraction"),
            "trainable_parameters": rs[0]["trainable_parameters"],
            "runs": rs,
        }
    return {
        "ours": summary["ours"], "trl": summary["trl"],
        "ratio_samples_per_s": summary["ours"]["samples_per_s"] / summary["trl"]["samples_per_s"],
        "ratio_peak_memory": summary["ours"]["peak_rss_mb"] / summary["trl"]["peak_rss_mb"],
    }


def make_clock():
    """A transformers TrainerCallback that records time.perf_counter() at the start and the
    end of every optimizer step (`begins[step]`, `ends[step]`, step = global_step once
    it ends) and keeps every logged dict (`logs[global_step]`)."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self):
            self.begins: dict[int, float] = {}
            self.ends: dict[int, float] = {}
            self.logs: dict[int, dict] = {}

        def on_step_begin(self, _args, state, control, **kw):
            self.begins[state.global_step + 1] = time.perf_counter()

        def on_step_end(self, _args, state, control, **kw):
            self.ends[state.global_step] = time.perf_counter()

        def on_log(self, _args, state, control, logs=None, **kw):
            if logs:
                self.logs.setdefault(state.global_step, {}).update(logs)

    return Clock()


def clock_window(clock, warmup: int, steps: int) -> float:
    """Seconds from the end of step `warmup` to the end of step `steps`."""
    if sorted(clock.ends) != list(range(1, steps + 1)):
        raise RuntimeError(f"TRL ran steps {sorted(clock.ends)}, expected 1..{steps}")
    return clock.ends[steps] - clock.ends[warmup]


# ----------------------------------------------------------------------------- our side


def run_our_side(args, preset: Path, work: Path, env: dict, sets: tuple[str, ...] = ()) -> tuple[dict, float, float]:
    """Train `preset` with our engine in a child process (`sets`, then the `--ours-set`
    items, as --set overrides) in `work`/run, and read the finished run: (read_our_run's
    dict plus 'run_dir', peak RSS in MB, wall seconds)."""
    run_dir = work / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "engine", "run", str(preset), "--run-dir", str(run_dir), "--quiet"]
    for item in (*sets, *args.ours_set):
        cmd += ["--set", item]
    log = work / "ours.log"
    rc, peak_mb, wall = run_child(cmd, log, env, args.timeout)
    if rc != 0:
        raise RuntimeError(f"our engine exited with status {rc}; command: {' '.join(cmd)}; log {log}:\n{tail(log)}")
    return {**read_our_run(run_dir, args.warmup, args.steps), "run_dir": run_dir}, peak_mb, wall


def read_our_run(run_dir: Path, warmup: int, steps: int) -> dict:
    """Events of a finished run of our engine: {'events', 'metrics' (by step), 'timed'
    (metrics of steps warmup+1..steps), 'window' (seconds between the metrics events of
    step `warmup` and step `steps`), 'started' (the run_started event)}."""
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    metrics = {e["step"]: e for e in events if e["type"] == "metrics"}
    finished = [e for e in events if e["type"] == "run_finished"]
    if not finished or finished[-1].get("status") != "done":
        raise RuntimeError(f"our run did not finish: {finished[-1] if finished else 'no run_finished event'}")
    missing = [s for s in range(warmup, steps + 1) if s not in metrics]
    if missing:
        raise RuntimeError(f"our run has no metrics event for steps {missing}")
    started = next(e for e in events if e["type"] == "run_started")
    return {
        "events": events,
        "metrics": metrics,
        "timed": [metrics[s] for s in range(warmup + 1, steps + 1)],
        "window": metrics[steps]["time"] - metrics[warmup]["time"],
        "started": started,
    }


# Where our step's time goes: the phases our engine times (metrics `timing/*`, seconds), in
# the order a step runs them; `update` is what is left of timing/update without the passes
# inside it, `writing` what is left of the timed window outside the step timer.
BREAKDOWN = ("sampling", "rewards", "reference passes", "update", "after-update look", "writing events, samples, records")


def step_breakdown(timed: list[dict], window: float) -> dict[str, float]:
    """Milliseconds per step, mean over the timed steps, of each part of BREAKDOWN.

    e.g. one step: timing/rollout 0.05, timing/reward 0.001, timing/update 0.07 of which
    timing/reference 0.006 and timing/after_update 0.008, step_time 0.121, window 0.125
    -> sampling 50, rewards 1, reference passes 6, update 56, after-update look 8, writing 4
    """
    def mean(key: str) -> float:
        return statistics.fmean(m.get(key) or 0.0 for m in timed) * 1e3

    inside = mean("timing/reference") + mean("timing/after_update")
    return dict(zip(BREAKDOWN, (mean("timing/rollout"), mean("timing/reward"), mean("timing/reference"),
                                mean("timing/update") - inside, mean("timing/after_update"),
                                window / len(timed) * 1e3 - mean("step_time"))))


def breakdown_line(parts: dict[str, float]) -> str:
    total = sum(parts.values())
    return "; ".join(f"{name} {ms:.1f} ms ({ms / total:.0%})" for name, ms in parts.items())


def launch_latency(preset: Path, work: Path, env: dict, repeats: int = 2, timeout: float = 300) -> dict:
    """Seconds from starting `python -m engine run PRESET` (one step, no evaluation or
    checkpoint) to its run_started event and to its first metrics event: the wait a user
    has after pressing Run. Medians of `repeats` launches, one after the other."""
    started, first = [], []
    work.mkdir(parents=True, exist_ok=True)
    for index in range(repeats):
        run_dir = work / f"latency-{index}"
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = [sys.executable, "-m", "engine", "run", str(preset), "--run-dir", str(run_dir), "--quiet",
               "--set", "training.max_steps=1", "--set", "training.eval_steps=0", "--set", "training.save_steps=0"]
        launched = time.time()
        rc, _, _ = run_child(cmd, work / f"latency-{index}.log", env, timeout)
        if rc != 0:
            raise RuntimeError(f"launch latency: the engine exited with {rc}; log {work / f'latency-{index}.log'}")
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
        started.append(next(e["time"] for e in events if e["type"] == "run_started") - launched)
        first.append(next(e["time"] for e in events if e["type"] == "metrics") - launched)
        shutil.rmtree(run_dir, ignore_errors=True)
    return {"run_started_s": statistics.median(started), "first_metrics_s": statistics.median(first),
            "runs": [{"run_started_s": a, "first_metrics_s": b} for a, b in zip(started, first)]}


def mean_of(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.fmean(values) if values else None


# ------------------------------------------------------------------------------ options


def add_run_options(p: argparse.ArgumentParser, *, child_paths: tuple[str, ...] = (),
                    trl_python: bool = False) -> None:
    """The options every `*_vs_trl.py` shares, in the order --help lists them: repeats,
    threads, (`--trl-python`), output, our overrides, run folders, time limit, TRL's log;
    then the internal ones that start the TRL child: `--side trl`, `--model-path`, the
    `child_paths` it is handed besides, and `--work-dir`."""
    p.add_argument("--repeats", type=int, default=1, help="runs per side, order alternating; the median is reported")
    p.add_argument("--threads", type=int, default=0, help="torch threads on both sides (default: torch's default)")
    if trl_python:
        p.add_argument("--trl-python", default=sys.executable,
                       help="interpreter of TRL's side (default: this one, the project venv with TRL 1.16)")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    p.add_argument("--ours-set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra --set override for our engine (e.g. training.record_rollouts=0); "
                        "makes the comparison unequal if it changes the work done")
    p.add_argument("--keep-runs", action="store_true", help="keep run folders and logs under bench/out/runs")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one side may take (default 1800)")
    p.add_argument("--trl-verbose", action="store_true", help="print TRL's logged metrics of every step in trl.log")
    # internal: the TRL child
    p.add_argument("--side", choices=["trl"], help=argparse.SUPPRESS)
    p.add_argument("--model-path", help=argparse.SUPPRESS)
    for flag in child_paths:
        p.add_argument(flag, help=argparse.SUPPRESS)
    p.add_argument("--work-dir", help=argparse.SUPPRESS)


def parse_timed_args(p: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """`p.parse_args(argv)`, refusing a warm-up that leaves no timed step."""
    args = p.parse_args(argv)
    if not 1 <= args.warmup < args.steps:
        p.error("--warmup must be at least 1 (the first step carries one-off costs) and less than --steps")
    return args


def timing_figures(args, window: float, peak_mb, wall, in_step) -> dict:
    """The figures of one side's run that every benchmark reports, in report order."""
    timed_steps = args.steps - args.warmup
    return {
        "steps_timed": timed_steps,
        "window_s": window,
        "samples_per_s": timed_steps * args.batch_size / window,
        "peak_rss_mb": peak_mb,
        "process_wall_s": wall,
        "in_step_fraction": in_step / window if in_step is not None and window > 0 else None,
    }


# ------------------------------------------------------------------------------- report


def load_average_line() -> tuple[float | None, str]:
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None, ""
    busy = load > 0.25 * (os.cpu_count() or 1)
    return load, (f"load average before start: {load:.2f} on {os.cpu_count()} CPUs"
                  + ("  -- WARNING: the machine is busy; timings will be noisy (contention slows torch's "
                     "threads badly; try --threads 1, or a quiet machine)" if busy else ""))


def fmt_table(header: tuple[str, ...], body: list[tuple[str, ...]]) -> str:
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(b) for b in body])


def median_of(results: list[dict], key: str) -> float | None:
    values = [r[key] for r in results if r.get(key) is not None]
    return statistics.median(values) if values else None


def write_json(path: Path | None, report: dict) -> None:
    if not path:
        return
    try:
        report["load_average_at_end"] = os.getloadavg()[0]
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    print(f"figures written to {path}")


# ------------------------------------------------------------------- TRL 1.12 environment

TRL112_VENV = OUT / "trl112-venv"
TRL112_VERSION = "1.12.0"
# The library stack of the TRL 1.12 venv is pinned to what the project's own venv has
# (read from it when this runs there), so that the two TRL versions differ in TRL only.
STACK = ("torch", "transformers", "peft", "accelerate", "datasets", "safetensors", "pyyaml", "pydantic")
STACK_FALLBACK = {"torch": "2.13.0", "transformers": "5.23.0", "peft": "0.21.2", "accelerate": "1.15.0",
                  "datasets": "5.2.0"}


def trl112_python() -> Path:
    return TRL112_VENV / "bin" / "python"


def _stack_pins() -> dict[str, str]:
    from importlib import metadata

    pins = {}
    for name in STACK:
        try:
            pins[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if name in STACK_FALLBACK:
                pins[name] = STACK_FALLBACK[name]
    return pins


def _venv_marker() -> Path:
    return TRL112_VENV / "bench_setup.json"


def trl112_ready() -> bool:
    marker = _venv_marker()
    if not (trl112_python().exists() and marker.exists()):
        return False
    return json.loads(marker.read_text()).get("trl") == TRL112_VERSION


def setup_trl112(force: bool = False) -> Path:
    """Create bench/out/trl112-venv with trl==1.12.0 and the project venv's versions of
    torch, transformers, peft, accelerate, datasets. torch is installed first and alone,
    so that no other requirement pulls a different (CUDA) build; a local CPU build
    (`2.13.0+cpu` from pip's find-links) wins over PyPI's build of the same version. The
    engine is not installed there: the TRL children import it through PYTHONPATH."""
    if trl112_ready() and not force:
        print(f"{TRL112_VENV}: ready (trl {TRL112_VERSION})")
        return trl112_python()
    pins = _stack_pins()
    if force and TRL112_VENV.exists():
        shutil.rmtree(TRL112_VENV)
    py = trl112_python()
    if not py.exists():
        print(f"creating {TRL112_VENV} ...", flush=True)
        subprocess.run([sys.executable if not _in_venv() else _base_python(), "-m", "venv", str(TRL112_VENV)],
                       check=True)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check"]
    torch_pin = pins.get("torch", STACK_FALLBACK["torch"])
    print(f"installing torch=={torch_pin} ...", flush=True)
    if subprocess.run(pip + [f"torch=={torch_pin}"]).returncode != 0:
        if not torch_pin.endswith("+cpu"):
            raise SystemExit(f"could not install torch=={torch_pin} into {TRL112_VENV}")
        # A CPU build that pip's own indexes do not have: PyTorch's CPU index has it.
        print("retrying from https://download.pytorch.org/whl/cpu ...", flush=True)
        subprocess.run(pip + ["--extra-index-url", "https://download.pytorch.org/whl/cpu", f"torch=={torch_pin}"],
                       check=True)
    reqs = [f"trl=={TRL112_VERSION}"] + [f"{name}=={version}" for name, version in pins.items()]
    print(f"installing {' '.join(reqs)} ...", flush=True)
    subprocess.run(pip + reqs, check=True)
    check = subprocess.run([str(py), "-c", "import torch, trl; from trl.experimental.ppo import PPOTrainer; "
                            "print(trl.__version__, torch.__version__)"], check=True, capture_output=True, text=True)
    print(f"{TRL112_VENV}: trl, torch = {check.stdout.strip()}")
    _venv_marker().write_text(json.dumps({"trl": TRL112_VERSION, "pins": pins}))
    return py


def _in_venv() -> bool:
    return sys.prefix != getattr(sys, "base_prefix", sys.prefix)


def _base_python() -> str:
    """The interpreter the current venv was made from (a venv made from a venv's python
    would still work, but this keeps the two venvs independent)."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    return str(base) if base.exists() else "python3"
