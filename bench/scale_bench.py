"""Scaling on one machine: samples/s of 1 and 2 processes, one thread each, and what the
2-process run spends in its collectives.

    python bench/scale_bench.py                          # presets/grpo-sort.yaml, 20 steps, 2 warm-up, 3 repeats
    python bench/scale_bench.py --preset presets/grpo-sort.yaml --preset presets/ppo-sort.yaml --json bench/out/scale.json

1. Throughput. Per preset, the same engine command twice, one after the other (never at
   once; with --repeats the order alternates and medians are reported):
   `python -m engine run PRESET --run-dir DIR --quiet --set ...` with OMP_NUM_THREADS=1
   (one process, one thread), and the same with `--nproc-per-node 2` (torchrun, gloo;
   each worker one thread: OMP_NUM_THREADS=1 is set for torchrun, which hands it on).
   Same preset, same --set overrides, same batch, same steps. samples/s counts from the
   end of warm-up step W to the end of the last step N, `(N - W) * batch_size / time`,
   using the `time` of each step's `metrics` event in events.jsonl. With 2 processes rank 0
   writes those events, so rank 0's clock times each step (a step ends for rank 0 once the
   collectives that close it have heard from rank 1). Step, rollout and update times are
   the medians of `step_time`, `timing/rollout` and `timing/update` over the timed steps.
   `--one-process-threads N` adds a reference row: 1 process with N torch threads.

2. Collectives. What DDP sends per optimizer step is one all-reduce of the trainable
   parameters' gradients (float32). Two processes started with torch.multiprocessing.spawn
   on gloo, one thread each, time it directly on a float32 tensor of exactly the run's
   trainable-parameter count (`trainable_parameters` of the 2-process run's run_started
   event), and the small collectives the engine adds every step (the 1-element stop
   agreement, the gathered rewards, the gathered rollout, the per-token rows combined).
   Each call is preceded by a barrier, so it is timed with both ranks present (the wait for
   a slower rank that a real step may add is not in these figures); the reported time of a
   call is the slower rank's, the median over --iters calls after a few warm-up calls.
   (PPO's DDP also reduces its value head, hidden size + 1 floats, not counted here.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    child_env, fmt_table, load_average_line, read_our_run, ROOT, run_child, RUNS_DIR, tail, write_json,
)

DEFAULT_PRESET = ROOT / "presets" / "grpo-sort.yaml"
# Applied to both sides before the user's --set items: no evaluation or checkpoint inside
# the run (the start and end evaluation remain, outside the timed window, on 8 prompts),
# and the CPU (gloo), which this benchmark is about.
BASE_SETS = ("training.eval_steps=0", "training.save_steps=0", "data.num_eval=8", "model.device=cpu")
# Prompt tokens a row, for the mock rollout that the collective benchmark gathers: the
# built-in sort prompts ('sort 0 6 1 =') are at most ~20 characters, one token each.
PROMPT_TOKENS = 20


# ------------------------------------------------------------------------------ runs


def run_engine(args, preset: Path, nproc: int, work: Path, env: dict, threads: int = 1) -> dict:
    """One engine run in a child process (`threads`: OMP_NUM_THREADS of each process, as
    set in `env`); the figures of its timed window."""
    run_dir = work / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "engine", "run", str(preset), "--run-dir", str(run_dir), "--quiet"]
    if nproc > 1:
        cmd += ["--nproc-per-node", str(nproc)]
    for item in (f"training.max_steps={args.steps}", *BASE_SETS, *args.set):
        cmd += ["--set", item]
    log = work / f"engine-{nproc}p{threads}t.log"
    load = _load()
    rc, _peak_mb, wall = run_child(cmd, log, env, args.timeout)
    if rc != 0:
        raise RuntimeError(f"the engine exited with status {rc}; command: {' '.join(cmd)}; log {log}:\n{tail(log)}")
    run = read_our_run(run_dir, args.warmup, args.steps)
    started, timed, window = run["started"], run["timed"], run["window"]
    if started.get("world_size", 1) != nproc:
        raise RuntimeError(f"run_started says world_size {started.get('world_size')}, expected {nproc}")
    cfg = started["preset"]
    batch = cfg["training"]["batch_size"]
    timed_steps = args.steps - args.warmup
    med = lambda key: statistics.median(m[key] for m in timed)  # noqa: E731
    in_step = sum(m["step_time"] for m in timed)
    result = {
        "processes": nproc,
        "threads_per_process": threads,
        "batch_size": batch,
        "steps_timed": timed_steps,
        "window_s": window,
        "samples_per_s": timed_steps * batch / window,
        "step_time_median_s": med("step_time"),
        "rollout_median_s": med("timing/rollout") if "timing/rollout" in timed[0] else None,
        "update_median_s": med("timing/update"),
        "outside_step_fraction": 1 - in_step / window if window > 0 else None,
        "mean_completion_length": (statistics.fmean(m["completions/mean_length"] for m in timed)
                                   if "completions/mean_length" in timed[0] else None),
        "trainable_parameters": started["model"]["trainable_parameters"],
        "backend": started.get("backend"),
        "process_wall_s": wall,
        "load_average_before": load,
        "preset": cfg,
    }
    if not args.keep_runs:
        shutil.rmtree(work, ignore_errors=True)
    return result


def optimizer_steps_per_step(cfg: dict) -> int:
    """Optimizer steps (gradient all-reduces) in one training step of the preset."""
    algo = cfg["algorithm"]
    if algo["name"] == "grpo":
        return int(algo.get("num_iterations", 1))
    if algo["name"] == "ppo":
        return int(algo.get("num_ppo_epochs", 1)) * int(algo.get("num_mini_batches", 1))
    return 1


def bench_preset(args, preset: Path) -> dict:
    # (label, processes, threads a process). OMP_NUM_THREADS=MKL_NUM_THREADS=1 on the two
    # compared sides; the optional reference is one process with more threads.
    sides = [("1", 1, 1), ("2", 2, 1)]
    if args.one_process_threads:
        sides.append((f"1x{args.one_process_threads}t", 1, args.one_process_threads))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    runs: dict[str, list[dict]] = {label: [] for label, _, _ in sides}
    for rep in range(args.repeats):
        order = sides if rep % 2 == 0 else sides[::-1]
        for label, nproc, threads in order:
            work = RUNS_DIR / f"scale-{preset.stem}-{stamp}-r{rep}-{nproc}p{threads}t"
            work.mkdir(parents=True, exist_ok=True)
            print(f"[{preset.stem}] repeat {rep + 1}/{args.repeats}: {nproc} process(es), {threads} thread(s) each ...",
                  file=sys.stderr, flush=True)
            r = run_engine(args, preset, nproc, work, child_env(threads=threads), threads)
            print(f"[{preset.stem}]   {nproc}p x {threads}t: {r['samples_per_s']:.1f} samples/s, step "
                  f"{r['step_time_median_s'] * 1e3:.0f} ms (median), process {r['process_wall_s']:.0f}s, "
                  f"load average before {r['load_average_before']:.2f}", file=sys.stderr, flush=True)
            runs[label].append(r)
    counts = {label: rs[0]["trainable_parameters"] for label, rs in runs.items()}
    if len(set(counts.values())) != 1:
        raise RuntimeError(f"trainable parameters differ between the runs: {counts}")
    summary = {}
    for (label, nproc, threads), rs in zip(sides, runs.values()):
        summary[label] = {"processes": nproc, "threads_per_process": threads, **{k: _median(rs, k) for k in (
            "samples_per_s", "step_time_median_s", "rollout_median_s", "update_median_s", "outside_step_fraction",
            "mean_completion_length")}, "runs": [{k: v for k, v in r.items() if k != "preset"} for r in rs]}
    cfg = runs["2"][0]["preset"]
    params = runs["2"][0]["trainable_parameters"]
    algo = cfg["algorithm"]
    shapes = {
        "trainable_parameters": params,
        "batch_size": cfg["training"]["batch_size"],
        "completion_tokens": int(algo.get("max_completion_length", 16)),
        "rewards": len(cfg.get("rewards") or []) or 1,
    }
    print(f"[{preset.stem}] collectives: 2 processes, gloo, {args.iters} calls each ...", file=sys.stderr, flush=True)
    collectives = time_collectives(shapes, args.iters)
    return {
        "preset": str(preset), "name": cfg["name"], "algorithm": algo["name"], "shapes": shapes,
        "optimizer_steps_per_step": optimizer_steps_per_step(cfg),
        "one_process": summary["1"], "two_processes": summary["2"],
        "one_process_threads": summary.get(f"1x{args.one_process_threads}t"),
        "speedup_samples_per_s": summary["2"]["samples_per_s"] / summary["1"]["samples_per_s"],
        "collectives": collectives,
    }


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _median(rows: list[dict], key: str):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


# ------------------------------------------------------------------------ collectives


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _collective_worker(rank: int, world: int, port: int, shapes: dict, iters: int, out_path: str) -> None:
    """One rank of the collective benchmark (torch.multiprocessing.spawn calls it)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    B, T, P = shapes["batch_size"], shapes["completion_tokens"], PROMPT_TOKENS
    share = B // world
    grads = torch.zeros(shapes["trainable_parameters"], dtype=torch.float32)  # zeros: repeated sums stay finite
    flag = torch.zeros(1, dtype=torch.int32)
    loss = torch.zeros(1, dtype=torch.float64)
    rows = torch.zeros(B, T, dtype=torch.float32)
    rewards = ([0.5] * share, {f"reward_{i}": [0.25] * share for i in range(shapes["rewards"])})
    rollout = {
        "prompt_ids": torch.randint(0, 40, (share, P)), "prompt_mask": torch.ones(share, P, dtype=torch.long),
        "completion_ids": torch.randint(0, 40, (share, T)), "completion_mask": torch.ones(share, T),
        "sampling_logprobs": torch.randn(share, T), "truncated": torch.zeros(share, dtype=torch.bool),
    }

    def gather(obj):
        out = [None] * world
        dist.all_gather_object(out, obj)

    ops = {
        "grad_allreduce": lambda: dist.all_reduce(grads, op=dist.ReduceOp.SUM),
        "stop_allreduce": lambda: dist.all_reduce(flag, op=dist.ReduceOp.MAX),
        "loss_allreduce": lambda: dist.all_reduce(loss, op=dist.ReduceOp.SUM),
        "rows_allreduce": lambda: dist.all_reduce(rows, op=dist.ReduceOp.SUM),
        "reward_gather": lambda: gather(rewards),
        "rollout_gather": lambda: gather(rollout),
    }
    times = {}
    for name, op in ops.items():
        for _ in range(5):
            op()
        samples = []
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            op()
            samples.append(time.perf_counter() - t0)
        times[name] = samples
    everyone = [None] * world
    dist.all_gather_object(everyone, times)
    if rank == 0:
        # A call is done when the slower rank is done: per call, the larger of the ranks' times.
        slower = {name: [max(t[name][i] for t in everyone) for i in range(iters)] for name in ops}
        Path(out_path).write_text(json.dumps({name: {"median": statistics.median(v), "min": min(v),
                                                     "p90": statistics.quantiles(v, n=10)[-1] if len(v) > 1 else v[0]}
                                              for name, v in slower.items()}))
    dist.barrier()
    dist.destroy_process_group()


def time_collectives(shapes: dict, iters: int) -> dict:
    """Median seconds of each collective, 2 processes on gloo, one thread each."""
    import torch.multiprocessing as mp

    saved = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"  # the spawned ranks read them at start
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "collectives.json"
        try:
            mp.spawn(_collective_worker, args=(2, _free_port(), shapes, iters, str(out)), nprocs=2, join=True)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        stats = json.loads(out.read_text())
    medians = {name: s["median"] for name, s in stats.items()}
    B, T, P, share = shapes["batch_size"], shapes["completion_tokens"], PROMPT_TOKENS, shapes["batch_size"] // 2
    grad_bytes = shapes["trainable_parameters"] * 4
    return {
        "iters": iters,
        "grad_allreduce_s": medians["grad_allreduce"],
        "grad_bytes": grad_bytes,
        "grad_gb_per_s": grad_bytes / medians["grad_allreduce"] / 1e9,
        "grad_gb_per_s_best": grad_bytes / stats["grad_allreduce"]["min"] / 1e9,
        "stop_allreduce_s": medians["stop_allreduce"],
        "loss_allreduce_s": medians["loss_allreduce"],
        "rows_allreduce_s": medians["rows_allreduce"],
        "reward_gather_s": medians["reward_gather"],
        "rollout_gather_s": medians["rollout_gather"],
        "spread_s": stats,
        "what": {
            "grad_allreduce": f"all_reduce SUM, float32 [{shapes['trainable_parameters']:,}] "
                              f"({grad_bytes / 2**20:.2f} MiB): DDP's gradient reduction, once an optimizer step",
            "stop_allreduce": "all_reduce MAX, int32 [1]: the stop agreement, once a step",
            "loss_allreduce": "all_reduce SUM, float64 [1]: a loss / metric sum (GRPO: 2 a step)",
            "rows_allreduce": f"all_reduce SUM, float32 [{B}, {T}]: per-token rows combined (GRPO: 4 a step)",
            "reward_gather": f"all_gather_object: {share} rewards + {shapes['rewards']} x {share} components a rank, once a step",
            "rollout_gather": f"all_gather_object: a rank's rollout, {share} rows x ({P} prompt + {T} completion) "
                              "tokens, once a step (GRPO, PPO)",
        },
    }


def grpo_overhead(c: dict, optimizer_steps: int) -> float:
    """Seconds of collectives in one GRPO step: the gradient all-reduce once an optimizer
    step, the stop agreement, 2 loss/metric sums, 4 per-token row combines, the reward
    and rollout gathers."""
    return (optimizer_steps * c["grad_allreduce_s"] + c["stop_allreduce_s"] + 2 * c["loss_allreduce_s"]
            + 4 * c["rows_allreduce_s"] + c["reward_gather_s"] + c["rollout_gather_s"])


# ------------------------------------------------------------------------------ report


def print_report(r: dict) -> None:
    one, two = r["one_process"], r["two_processes"]
    ms = lambda s: "-" if s is None else f"{s * 1e3:.0f}"  # noqa: E731
    print(f"\n== {r['name']} ({r['preset']}): {r['algorithm']}, batch {r['shapes']['batch_size']}, "
          f"{r['shapes']['trainable_parameters']:,} trainable parameters")
    rows = []
    for s in (one, two, r["one_process_threads"]):
        if s is None:
            continue
        rows.append((str(s["processes"]), str(s["threads_per_process"]), f"{s['samples_per_s']:.1f}",
                     ms(s["step_time_median_s"]), ms(s["rollout_median_s"]), ms(s["update_median_s"]),
                     "-" if s["mean_completion_length"] is None else f"{s['mean_completion_length']:.1f}",
                     f"{s['outside_step_fraction']:.1%}"))
    print(fmt_table(("processes", "threads each", "samples/s", "step ms", "rollout ms", "update ms", "mean compl. len",
                     "outside step timer"), rows))
    print(f"speed-up samples/s, 2 processes / 1 process: {r['speedup_samples_per_s']:.2f}x "
          f"(step time {one['step_time_median_s'] / two['step_time_median_s']:.2f}x, "
          f"rollout {_ratio(one['rollout_median_s'], two['rollout_median_s'])}, "
          f"update {_ratio(one['update_median_s'], two['update_median_s'])})")
    print("(the speed-up compares the first two rows: one thread a process on both sides; step/rollout/update "
          "ms are medians over the timed steps; with 2 processes rank 0's clock times each step)")
    ref = r["one_process_threads"]
    if ref is not None:
        print(f"reference, 1 process x {ref['threads_per_process']} threads: 2 processes x 1 thread / it = "
              f"{two['samples_per_s'] / ref['samples_per_s']:.2f}x samples/s")
    c = r["collectives"]
    step = two["step_time_median_s"]
    print(f"\ncollectives, 2 processes on gloo, one thread each, median of {c['iters']} calls (slower rank):")
    body = []
    for key in ("grad_allreduce", "stop_allreduce", "loss_allreduce", "rows_allreduce", "reward_gather",
                "rollout_gather"):
        seconds = c[f"{key}_s"]
        spread = c["spread_s"][key]
        body.append((key, f"{seconds * 1e3:.3f}", f"{spread['min'] * 1e3:.3f}", f"{spread['p90'] * 1e3:.3f}",
                     f"{seconds / step:.2%}"))
    print(fmt_table(("collective", "median ms", "min ms", "p90 ms", "median of 2p step"), body))
    for key, what in c["what"].items():
        print(f"  {key}: {what}")
    k = r["optimizer_steps_per_step"]
    print(f"gradient all-reduce: {c['grad_bytes'] / 2**20:.2f} MiB in {c['grad_allreduce_s'] * 1e3:.3f} ms = "
          f"{c['grad_gb_per_s']:.2f} GB/s (best call {c['grad_gb_per_s_best']:.2f} GB/s); x{k} a step = {k * c['grad_allreduce_s'] / step:.2%} of the "
          f"2-process median step ({step * 1e3:.0f} ms)")
    if r["algorithm"] == "grpo":
        total = grpo_overhead(c, k)
        print(f"all of a GRPO step's collectives together (gradients x{k}, stop, 2 sums, 4 row combines, "
              f"reward and rollout gathers): {total * 1e3:.2f} ms = {total / step:.2%} of the step")


def _ratio(a, b) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


# ------------------------------------------------------------------------------ main


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", action="append", type=Path, default=[],
                   help="preset YAML, repeatable (default presets/grpo-sort.yaml)")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per run (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the timing, at least 1 (default 2)")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs per process count, order alternating; medians are reported (default 3)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra --set override for both runs (after the benchmark's own: "
                        + ", ".join(BASE_SETS) + ")")
    p.add_argument("--one-process-threads", type=int, default=0, metavar="N",
                   help="also run 1 process with N threads, as a reference row (default: off)")
    p.add_argument("--iters", type=int, default=100, help="timed calls of each collective (default 100)")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    p.add_argument("--keep-runs", action="store_true", help="keep run folders and logs under bench/out/runs")
    p.add_argument("--timeout", type=float, default=900, help="seconds one run may take (default 900)")
    args = p.parse_args(argv)
    if not 1 <= args.warmup < args.steps:
        p.error("--warmup must be at least 1 (the first step carries one-off costs) and less than --steps")
    if args.repeats < 1 or args.iters < 1:
        p.error("--repeats and --iters must be at least 1")
    args.preset = [Path(x).resolve() for x in (args.preset or [DEFAULT_PRESET])]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    print(f"Scaling on one machine: 1 vs 2 processes, one thread each (OMP_NUM_THREADS=1), gloo. "
          f"{args.steps} steps ({args.warmup} warm-up), repeats {args.repeats}, torch {torch.__version__}, "
          f"cpus {os.cpu_count()}")
    print(f"overrides on both sides: {', '.join((*BASE_SETS, *args.set))}")
    load, line = load_average_line()
    if line:
        print(line)
    report = {"settings": {"steps": args.steps, "warmup": args.warmup, "repeats": args.repeats, "iters": args.iters,
                           "sets": [*BASE_SETS, *args.set], "cpus": os.cpu_count(), "torch": torch.__version__},
              "load_average_at_start": load, "presets": []}
    for preset in args.preset:
        result = bench_preset(args, preset)
        report["presets"].append(result)
        print_report(result)
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
