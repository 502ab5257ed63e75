"""Throughput and peak memory: our GRPO engine against TRL's GRPOTrainer, same settings.

    python bench/grpo_vs_trl.py                      # both models, defaults
    python bench/grpo_vs_trl.py --models tiny --steps 8 --repeats 3 --json bench/out/grpo.json

For each model the same GRPO configuration is run through our engine
(`python -m engine run PRESET ...`, a subprocess) and through TRL's `GRPOTrainer`
(this script again with `--side trl`, another subprocess), one after the other, never at
once; with `--repeats` the order alternates and the median is reported.

Same on both sides: model weights and tokenizer (one folder both load), LoRA (r, alpha,
dropout 0, the target modules our engine picks), prompts (the built-in sort task), reward
(`exact_match` from engine.rewards), completions per step, num_generations,
max_completion_length, sampling (temperature 1, top_p 1, top_k 0), beta 0, epsilon 0.2 /
0.28, loss dapo, group-scaled advantages, one update per batch, AdamW (not fused) with a
constant learning rate, gradient clipping at 1, fp32 on the CPU, no gradient
checkpointing (TRL turns it on by default), no evaluation or checkpoint inside the timed
window, no external logging.

Throughput: wall time from the end of step W (warm-up, default 2) to the end of step N;
samples/s = (N - W) * batch_size / that time. Our side reads the `time` of each step's
`metrics` event in events.jsonl (written right after the step); TRL's side records
time.perf_counter() in a TrainerCallback's on_step_end. Peak memory: the child process's
peak resident set size (ru_maxrss from os.wait4, the same measure for both sides; it
covers the whole process: imports, model load, training).

Models: `tiny` is assets/tiny-model (the built-in model; an untrained stand-in of the same
architecture is built when it is missing), `10x` a GPT-2 of about ten times its
parameters, same tokenizer, random init with a fixed seed, cached in bench/out/models/;
`qwen-vocab` a Qwen2 with Qwen2.5-0.5B's vocabulary (151,936) and width (896) and 2 layers,
random init, same tokenizer, whose LM head dominates as a real model's does on a GPU.

Update time: ours is the step's `timing/update` (with and without the inspector's passes
inside it: the recorded rows' reference pass and after-update look); TRL's is each step's
time from its `on_step_begin` to its `on_step_end` less the time in
`_generate_and_score_completions` (sampling and rewards). `--lean-ab` runs our side a
second time with the lean update off (RL_ENGINE_LEAN_UPDATE=0, side `ours-plain`) in the
same alternation: the before/after of issue 42's update.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    add_run_options, alternate_sides, child_env, compare_sides, fmt_table as _fmt_table, make_clock, parameter_count,
    prepare_model, print_child_result, read_child_result, ROOT, run_child, run_our_side, tail, vmhwm_mb,
    parse_timed_args, step_breakdown, breakdown_line, launch_latency, RUNS_DIR, median_of,
)

BASE_PRESET = ROOT / "presets" / "grpo-sort.yaml"

# Shared GRPO settings that have no flag (the flags carry the rest).
FIXED = dict(
    lora_r=16, lora_alpha=32.0, temperature=1.0, top_p=1.0, top_k=0, beta=0.0,
    epsilon=0.2, epsilon_high=0.28, loss_type="dapo", scale_rewards="group",
    num_iterations=1, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
    max_grad_norm=1.0, seed=0, num_eval=8,
)


# ------------------------------------------------------------------------------ sides


def write_preset(args, model_path: Path, dest: Path) -> Path:
    """presets/grpo-sort.yaml with the benchmark's fields overridden."""
    import yaml

    data = yaml.safe_load(BASE_PRESET.read_text())
    data["name"] = "bench-grpo-vs-trl"
    data["description"] = "written by bench/grpo_vs_trl.py"
    data["model"].update(name_or_path=str(model_path), dtype="float32", device="cpu")
    data["model"]["lora"].update(r=FIXED["lora_r"], alpha=FIXED["lora_alpha"], dropout=0.0, target_modules="auto")
    data["algorithm"].update(
        num_generations=args.num_generations, max_completion_length=args.max_completion_length,
        temperature=FIXED["temperature"], top_p=FIXED["top_p"], top_k=FIXED["top_k"], beta=FIXED["beta"],
        epsilon=FIXED["epsilon"], epsilon_high=FIXED["epsilon_high"], loss_type=FIXED["loss_type"],
        scale_rewards=FIXED["scale_rewards"], num_iterations=FIXED["num_iterations"],
        mask_truncated_completions=False,
    )
    data["data"].update(task="sort", task_options={}, path=None, num_train=args.num_train, num_eval=FIXED["num_eval"])
    data["rewards"] = [{"name": "exact_match", "weight": 1.0, "options": {}}]
    data["training"].update(
        max_steps=args.steps, batch_size=args.batch_size, micro_batch_size=None,
        learning_rate=args.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=FIXED["weight_decay"], adam_beta1=FIXED["adam_beta1"], adam_beta2=FIXED["adam_beta2"],
        max_grad_norm=FIXED["max_grad_norm"], seed=FIXED["seed"],
        eval_steps=0, save_steps=0, logging_steps=1,
    )
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def run_ours(args, model_path: Path, work: Path, env: dict) -> dict:
    preset = write_preset(args, model_path, work / "preset.yaml")
    return our_result(args, preset, work, env)


def our_result(args, preset: Path, work: Path, env: dict) -> dict:
    run, peak_mb, wall = run_our_side(args, preset, work, env,
                                      sets=("training.eval_steps=0", "training.save_steps=0"))
    timed, window, started, run_dir = run["timed"], run["window"], run["started"], run["run_dir"]
    result = summarise("ours", args, window, peak_mb, wall,
                       in_step=sum(m["step_time"] for m in timed),
                       mean_length=statistics.fmean(m["completions/mean_length"] for m in timed),
                       completions_per_step=[args.batch_size] * len(timed),
                       rewards=[m["reward"] for m in timed])
    result["lora_targets"] = started["model"]["lora_targets"]
    result["trainable_parameters"] = started["model"]["trainable_parameters"]
    result["timing_split"] = {k: statistics.fmean(m[f"timing/{k}"] for m in timed) for k in ("rollout", "reward", "update")}
    result["breakdown_ms"] = step_breakdown(timed, window)
    result["update_s"] = statistics.fmean(m["timing/update"] for m in timed)
    result["update_core_s"] = statistics.fmean(
        m["timing/update"] - (m.get("timing/reference") or 0.0) - (m.get("timing/after_update") or 0.0) for m in timed)
    if not args.keep_runs:
        shutil.rmtree(run_dir, ignore_errors=True)
    return result


def run_trl_parent(args, model_path: Path, work: Path, env: dict) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--side", "trl", "--model-path", str(model_path),
           "--work-dir", str(work), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--batch-size", str(args.batch_size), "--num-generations", str(args.num_generations),
           "--max-completion-length", str(args.max_completion_length),
           "--learning-rate", repr(args.learning_rate), "--num-train", str(args.num_train)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.trl_verbose:
        cmd += ["--trl-verbose"]
    log = work / "trl.log"
    rc, peak_mb, wall = run_child(cmd, log, env, args.timeout)
    if rc != 0:
        raise RuntimeError(f"the TRL side exited with status {rc}; log {log}:\n{tail(log)}")
    child = read_child_result(log)
    result = summarise("trl", args, child["window"], peak_mb, wall, in_step=child["in_step"],
                       mean_length=child["mean_length"], completions_per_step=child["completions_per_step"],
                       rewards=child["rewards"])
    result.update(lora_targets=child["lora_targets"], trainable_parameters=child["trainable_parameters"],
                  torch_threads=child["torch_threads"], child_vmhwm_mb=child["vmhwm_mb"],
                  update_s=child["update_s"], update_core_s=child["update_s"])
    if not args.keep_runs:
        shutil.rmtree(work / "trl-output", ignore_errors=True)
    return result


def summarise(side, args, window, peak_mb, wall, *, in_step, mean_length, completions_per_step, rewards) -> dict:
    timed_steps = args.steps - args.warmup
    return {
        "side": side,
        "steps_timed": timed_steps,
        "window_s": window,
        "samples_per_s": timed_steps * args.batch_size / window,
        "peak_rss_mb": peak_mb,
        "process_wall_s": wall,
        "in_step_fraction": in_step / window if window > 0 else None,
        "mean_completion_length": mean_length,
        "completions_per_step": completions_per_step,
        "mean_reward": statistics.fmean(rewards) if rewards else None,
    }


# --------------------------------------------------------------------------- TRL child


def trl_child(args) -> int:
    """The TRL side, in its own process: train, then print one RESULT line."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    clock = make_clock()
    trainer, targets, calls, rewards_per_call = trl_trainer(args, args.model_path, Path(args.work_dir), [clock])
    generation_seconds: list[float] = []  # one call a step (gradient_accumulation_steps 1)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    generate_and_score = trainer._generate_and_score_completions

    def timed_generate_and_score(*a, **kw):  # sampling and rewards: what is not the update
        started = time.perf_counter()
        out = generate_and_score(*a, **kw)
        generation_seconds.append(time.perf_counter() - started)
        return out

    trainer._generate_and_score_completions = timed_generate_and_score
    trainer.train()

    W, N = args.warmup, args.steps
    if sorted(clock.ends) != list(range(1, N + 1)):
        raise RuntimeError(f"TRL ran steps {sorted(clock.ends)}, expected 1..{N}")
    window = clock.ends[N] - clock.ends[W]
    timed_logs = [clock.logs[s] for s in range(W + 1, N + 1) if s in clock.logs]
    if args.trl_verbose:
        for s in sorted(clock.logs):
            print(f"TRL step {s}: {json.dumps(clock.logs[s], sort_keys=True)}", flush=True)
    result = {
        "window": window,
        "in_step": sum(l.get("step_time", 0.0) for l in timed_logs),
        "mean_length": statistics.fmean(l["completions/mean_length"] for l in timed_logs),
        "completions_per_step": calls[W:N],
        "rewards": rewards_per_call[W:N],
        "lora_targets": targets,
        "trainable_parameters": trainable,
        "torch_threads": torch.get_num_threads(),
        "vmhwm_mb": vmhwm_mb(),
        "update_s": statistics.fmean(clock.ends[s] - clock.begins[s] - generation_seconds[s - 1]
                                     for s in range(W + 1, N + 1)),
    }
    print_child_result(result)
    return 0


def trl_trainer(args, model_path, work_dir: Path, callbacks: list):
    """TRL's GRPOTrainer in the benchmark's configuration (FIXED and the flags), with
    `callbacks`: (trainer, LoRA targets, completions scored per reward call, mean reward
    per call)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from engine.model.loading import find_lora_targets, load_tokenizer
    from engine.rewards import build_reward
    from engine.data import make_task

    path = str(model_path)
    tokenizer = load_tokenizer(path)  # what our engine uses: left padding, pad token set
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    targets = find_lora_targets(model)
    train, _ = make_task("sort", seed=FIXED["seed"], num_train=args.num_train, num_eval=0)
    dataset = Dataset.from_dict({"prompt": [e.prompt for e in train],
                                 "answer": [e.fields["answer"] for e in train]})

    inner = build_reward("exact_match")
    calls: list[int] = []  # completions scored per reward call: one call per generation batch
    rewards_per_call: list[float] = []

    def exact_match(prompts, completions, **kwargs):
        values = inner(prompts, completions, answer=kwargs["answer"])
        calls.append(len(completions))
        rewards_per_call.append(sum(values) / len(values))
        return values

    output_dir = work_dir / "trl-output"
    config = GRPOConfig(
        output_dir=str(output_dir),
        # batch: completions per optimizer step, one generation per step, no accumulation
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=1,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        max_steps=args.steps,
        # sampling
        temperature=FIXED["temperature"], top_p=FIXED["top_p"], top_k=FIXED["top_k"],
        # loss
        beta=FIXED["beta"], epsilon=FIXED["epsilon"], epsilon_high=FIXED["epsilon_high"],
        loss_type=FIXED["loss_type"], scale_rewards=FIXED["scale_rewards"],
        num_iterations=FIXED["num_iterations"], mask_truncated_completions=False,
        # optimiser: torch.optim.AdamW as our engine builds it (TRL's default is the fused one)
        learning_rate=args.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=FIXED["weight_decay"], adam_beta1=FIXED["adam_beta1"], adam_beta2=FIXED["adam_beta2"],
        adam_epsilon=1e-8, optim="adamw_torch", max_grad_norm=FIXED["max_grad_norm"],
        seed=FIXED["seed"],
        # fp32 on the CPU, and no gradient checkpointing (TRL's default is on; ours has none)
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        # no eval, no checkpoints, no external logging; metrics every step to check the batch
        eval_strategy="no", save_strategy="no", report_to="none", logging_steps=1,
        log_completions=False, disable_tqdm=True, dataloader_num_workers=0, dataloader_pin_memory=False,
        remove_unused_columns=False,
    )
    peft_config = LoraConfig(r=FIXED["lora_r"], lora_alpha=FIXED["lora_alpha"], lora_dropout=0.0,
                             target_modules=targets, task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=[exact_match], args=config, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks)
    return trainer, targets, calls, rewards_per_call


# ------------------------------------------------------------------------------ parent


def fmt_table(rows: list[dict]) -> str:
    header = ("side", "params", "steps timed", "samples/s", "peak RSS MB", "mean compl. len")
    return _fmt_table(header, [(r["side"], f"{r['params']:,}", str(r["steps_timed"]), f"{r['samples_per_s']:.2f}",
                                f"{r['peak_rss_mb']:.0f}", f"{r['mean_completion_length']:.1f}") for r in rows])


def run_side(args, side: str, folder: Path, work: Path, env: dict) -> dict:
    """One run of `side`: ours, ours with the lean update off (ours-plain), or TRL's."""
    if side == "trl":
        return run_trl_parent(args, folder, work, env)
    return run_ours(args, folder, work, {**env, "RL_ENGINE_LEAN_UPDATE": "0"} if side == "ours-plain" else env)


def bench_model(args, name: str) -> dict:
    folder, note = prepare_model(name)
    params = parameter_count(folder)
    env = child_env(args.threads)
    runs = alternate_sides(
        name, args.repeats, '', args.keep_runs,
        lambda side, work: run_side(args, side, folder, work, env),
        lambda r: f"{r['samples_per_s']:.2f} samples/s, peak RSS {r['peak_rss_mb']:.0f} MB, "
                  f"update {r['update_s']:.3f} s/step, mean completion length {r['mean_completion_length']:.1f}",
        sides=("ours", "trl", "ours-plain") if args.lean_ab else ("ours", "trl"))
    plain = runs.pop("ours-plain", None)
    for r in runs["trl"]:
        bad = [n for n in r["completions_per_step"] if n != args.batch_size]
        if bad or len(r["completions_per_step"]) != args.steps - args.warmup:
            raise RuntimeError(f"TRL scored {r['completions_per_step']} completions in the timed steps, "
                               f"expected {args.batch_size} in each of {args.steps - args.warmup}")
    ours_targets, trl_targets = runs["ours"][0]["lora_targets"], runs["trl"][0]["lora_targets"]
    if ours_targets != trl_targets or runs["ours"][0]["trainable_parameters"] != runs["trl"][0]["trainable_parameters"]:
        raise RuntimeError(f"LoRA differs: ours {ours_targets} ({runs['ours'][0]['trainable_parameters']}), "
                           f"TRL {trl_targets} ({runs['trl'][0]['trainable_parameters']})")
    result = {
        "model": name, "path": str(folder), "note": note, "params": params,
        "lora_targets": ours_targets,
        **compare_sides(runs, params, args.steps - args.warmup, "mean_completion_length"),
    }
    for side in ("ours", "trl"):
        for key in ("update_s", "update_core_s"):
            result[side][key] = median_of(runs[side], key)
    if plain is not None:
        result["ours_plain"] = {key: median_of(plain, key) for key in (
            "samples_per_s", "peak_rss_mb", "update_s", "update_core_s", "mean_completion_length")}
        result["ours_plain"]["runs"] = plain
    return result


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="tiny,10x", help="comma-separated: tiny, 10x, qwen-vocab (default tiny,10x)")
    p.add_argument("--lean-ab", action="store_true",
                   help="also run our side with the lean update off (RL_ENGINE_LEAN_UPDATE=0) in the alternation")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per run (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the timing, at least 1 (default 2)")
    p.add_argument("--batch-size", type=int, default=64, help="completions per step (default 64)")
    p.add_argument("--num-generations", type=int, default=8, help="completions per prompt (default 8)")
    p.add_argument("--max-completion-length", type=int, default=16, help="tokens per completion at most (default 16)")
    p.add_argument("--learning-rate", type=float, default=2e-3, help="AdamW learning rate (default 2e-3, as the preset)")
    p.add_argument("--num-train", type=int, default=2000, help="training prompts of the sort task (default 2000)")
    p.add_argument("--no-latency", action="store_true",
                   help="skip the launch-latency measurement (two one-step runs of presets/grpo-sort.yaml)")
    add_run_options(p)
    args = parse_timed_args(p, argv)
    if args.batch_size % args.num_generations:
        p.error("--batch-size must be a multiple of --num-generations")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.side == "trl":
        return trl_child(args)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    import torch

    print(f"GRPO: ours vs TRL. batch {args.batch_size} completions/step ({args.batch_size // args.num_generations} "
          f"prompts x {args.num_generations}), max_completion_length {args.max_completion_length}, "
          f"{args.steps} steps ({args.warmup} warm-up), fp32 CPU, torch threads "
          f"{args.threads or torch.get_num_threads()}, repeats {args.repeats}, cpus {os.cpu_count()}")
    if args.ours_set:
        print(f"extra engine overrides: {args.ours_set}")
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    if load is not None:
        busy = load > 0.25 * (os.cpu_count() or 1)
        print(f"load average before start: {load:.2f} on {os.cpu_count()} CPUs"
              + ("  -- WARNING: the machine is busy; timings will be noisy (contention slows torch's "
                 "threads badly; try --threads 1, or a quiet machine)" if busy else ""))
    report = {"settings": {k: v for k, v in vars(args).items() if k not in ("side", "model_path", "work_dir", "json")},
              "fixed": FIXED, "load_average_at_start": load, "torch_threads": args.threads or torch.get_num_threads(),
              "models": []}
    sizes = {}
    for name in names:
        result = bench_model(args, name)
        report["models"].append(result)
        sizes[name] = result["params"]
        print(f"\n== {name}: {result['path']} ({result['note']})")
        print(f"   {result['params']:,} parameters; LoRA r={FIXED['lora_r']} on {', '.join(result['lora_targets'])} "
              f"({result['ours']['trainable_parameters']:,} trainable)")
        print(fmt_table([result["ours"], result["trl"]]))
        print(f"ratio samples/s (ours/TRL): {result['ratio_samples_per_s']:.2f}x")
        print(f"ratio peak memory (ours/TRL): {result['ratio_peak_memory']:.2f}x")
        print(f"(timed window outside each side's own step timer: ours "
              f"{1 - result['ours']['in_step_fraction']:.1%} -- events, samples, trajectory records; TRL "
              f"{1 - result['trl']['in_step_fraction']:.1%} -- clipping, optimizer step, logging)", flush=True)
        parts = {k: statistics.fmean(r["breakdown_ms"][k] for r in result["ours"]["runs"])
                 for k in result["ours"]["runs"][0]["breakdown_ms"]}
        result["ours"]["breakdown_ms"] = parts
        print(f"ours, where a step goes (mean of the timed steps): {breakdown_line(parts)}", flush=True)
        ours, trl = result["ours"], result["trl"]
        print(f"update s/step (median): ours {ours['update_s']:.3f} ({ours['update_core_s']:.3f} without the "
              f"inspector's passes), TRL {trl['update_s']:.3f}; ratio ours/TRL "
              f"{ours['update_s'] / trl['update_s']:.2f}x ({ours['update_core_s'] / trl['update_s']:.2f}x)", flush=True)
        plain = result.get("ours_plain")
        if plain:
            print(f"lean update off (ours-plain, median): {plain['samples_per_s']:.2f} samples/s "
                  f"({plain['samples_per_s'] / trl['samples_per_s']:.2f}x TRL), peak RSS {plain['peak_rss_mb']:.0f} MB "
                  f"({plain['peak_rss_mb'] / trl['peak_rss_mb']:.2f}x TRL), update {plain['update_s']:.3f} s/step "
                  f"({plain['update_core_s']:.3f} without the inspector's passes); lean on/off: samples/s "
                  f"{ours['samples_per_s'] / plain['samples_per_s']:.2f}x, update "
                  f"{plain['update_s'] / ours['update_s']:.2f}x faster", flush=True)
    if not args.no_latency:
        preset = ROOT / "presets" / "grpo-sort.yaml"
        latency = launch_latency(preset, RUNS_DIR / "grpo-latency", child_env(args.threads))
        report["launch_latency"] = {"preset": "presets/grpo-sort.yaml", **latency}
        print(f"\nlaunch latency, presets/grpo-sort.yaml (`python -m engine run`, median of "
              f"{len(latency['runs'])}): run_started after {latency['run_started_s']:.2f} s, "
              f"first metrics after {latency['first_metrics_s']:.2f} s")
    if "tiny" in sizes and "10x" in sizes:
        print(f"\nparameters: tiny {sizes['tiny']:,}, 10x {sizes['10x']:,} ({sizes['10x'] / sizes['tiny']:.1f}x)")
    try:
        report["load_average_at_end"] = os.getloadavg()[0]
    except OSError:
        pass
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
