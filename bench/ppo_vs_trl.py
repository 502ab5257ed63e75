"""Throughput and peak memory: our PPO engine against TRL 1.12's PPOTrainer, same settings.

    python bench/ppo_vs_trl.py --setup               # once: bench/out/trl112-venv with trl==1.12.0
    python bench/ppo_vs_trl.py                       # both models, defaults
    python bench/ppo_vs_trl.py --models tiny --steps 8 --repeats 3 --json bench/out/ppo.json

TRL dropped its PPO trainer after 1.12, so TRL's side runs `trl.experimental.ppo` from
trl==1.12.0 in its own virtual environment, bench/out/trl112-venv (`--setup` creates it:
the project venv's versions of torch, transformers, peft, accelerate and datasets, and
trl 1.12.0; it is created on first use when missing). Our side runs in the interpreter
that runs this script (`python -m engine run PRESET ...`).

For each model the same PPO configuration is run through our engine and through TRL's
PPOTrainer (this script again with `--side trl`, under the TRL 1.12 venv's python), each
in its own subprocess, one after the other, never at once; with `--repeats` the order
alternates and the median is reported.

Same on both sides: policy weights and tokenizer (one folder both load), LoRA (r, alpha,
dropout 0, the target modules our engine picks), prompts (the built-in sort task, one
completion per prompt), the reward model (bench/out/models/reward-model: a small random
GPT2ForSequenceClassification with one label and the character tokenizer, built with a
fixed seed), completions per step, response length, temperature 0.7 (top_p 1, top_k 0),
stop at EOS, num_ppo_epochs, num_mini_batches, cliprange, cliprange_value, vf_coef, gamma,
lam, kl_coef, the k1 KL estimator, no reward whitening, no missing-EOS penalty, the
reference = the policy with its adapter disabled, AdamW (not fused) at a constant learning
rate, no gradient clipping (TRL 1.12's PPO loop never clips; ours gets a max_grad_norm so
large it never does), fp32 on the CPU, no gradient checkpointing, no evaluation, sample
generations or checkpoints inside the timed window, no external logging.

Different by design: our critic is a value head on the policy's own LoRA backbone, so one
forward gives logits and values, and only LoRA weights plus the head train. TRL's critic
is a separate value model (AutoModelForSequenceClassification, num_labels=1), here
initialised from the policy folder as TRL's examples do, so it is the policy's size, and
all of its weights train. That is TRL's PPO as shipped; the figures include its cost.

Throughput: samples/s = completions trained on per second, (N - W) * batch_size over the
wall time from the end of step W (warm-up, default 2) to the end of step N; a step is one
rollout batch and its num_ppo_epochs x num_mini_batches optimizer steps. Our side reads
the `time` of each step's `metrics` event in events.jsonl; TRL's side records
time.perf_counter() in a TrainerCallback's on_step_end (called once per rollout batch).
Peak memory: the child process's peak resident set size (ru_maxrss from os.wait4).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    add_run_options, alternate_sides, child_env, clock_window, compare_sides, fmt_table, load_average_line, make_clock,
    mean_of, parameter_count, prepare_model, prepare_reward_model, print_child_result, read_child_result,
    run_our_side, run_child, setup_trl112, tail, trl112_python, trl112_ready, vmhwm_mb, write_json,
    parse_timed_args, timing_figures,
)

# Shared PPO settings that have no flag (the flags carry the rest). Names follow TRL's PPOConfig.
FIXED = dict(
    lora_r=16, lora_alpha=32.0, temperature=0.7, top_p=1.0, top_k=0,
    cliprange=0.2, cliprange_value=0.2, vf_coef=0.1, gamma=1.0, lam=0.95, kl_coef=0.05,
    whiten_rewards=False, missing_eos_penalty=None,
    weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
    # TRL 1.12's PPO loop calls optimizer.step() without clipping; ours must have a norm
    # (> 0), so it gets one that never clips.
    our_max_grad_norm=1e9,
    seed=0, num_eval=8,
)


# ------------------------------------------------------------------------------ our side


def write_preset(args, model_path: Path, reward_model: Path, dest: Path) -> Path:
    """Our PPO preset, written whole (every field that matters is set here)."""
    import yaml

    data = {
        "name": "bench-ppo-vs-trl",
        "description": "written by bench/ppo_vs_trl.py",
        "model": {
            "name_or_path": str(model_path), "dtype": "float32", "device": "cpu",
            "lora": {"r": FIXED["lora_r"], "alpha": FIXED["lora_alpha"], "dropout": 0.0, "target_modules": "auto"},
        },
        "algorithm": {
            "name": "ppo", "num_generations": 1, "max_completion_length": args.max_completion_length,
            "temperature": FIXED["temperature"], "top_p": FIXED["top_p"], "top_k": FIXED["top_k"],
            "num_ppo_epochs": args.num_ppo_epochs, "num_mini_batches": args.num_mini_batches,
            "cliprange": FIXED["cliprange"], "cliprange_value": FIXED["cliprange_value"], "vf_coef": FIXED["vf_coef"],
            "gamma": FIXED["gamma"], "lam": FIXED["lam"], "kl_coef": FIXED["kl_coef"],
            "kl_estimator": args.kl_estimator, "whiten_rewards": FIXED["whiten_rewards"],
            "missing_eos_penalty": FIXED["missing_eos_penalty"],
        },
        "data": {"task": "sort", "task_options": {}, "path": None, "num_train": args.num_train,
                 "num_eval": FIXED["num_eval"]},
        # TRL scores the whole rollout batch in one reward-model forward; so does ours.
        "rewards": [{"name": "reward_model", "weight": 1.0,
                     "options": {"model": str(reward_model), "batch_size": args.batch_size, "dtype": "float32"}}],
        "training": {
            "max_steps": args.steps, "batch_size": args.batch_size, "micro_batch_size": None,
            "learning_rate": args.learning_rate, "lr_scheduler_type": "constant", "warmup_steps": 0,
            "weight_decay": FIXED["weight_decay"], "adam_beta1": FIXED["adam_beta1"],
            "adam_beta2": FIXED["adam_beta2"], "max_grad_norm": FIXED["our_max_grad_norm"],
            "seed": FIXED["seed"], "eval_steps": 0, "save_steps": 0, "logging_steps": 1,
        },
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def run_ours(args, model_path: Path, reward_model: Path, work: Path, env: dict) -> dict:
    preset = write_preset(args, model_path, reward_model, work / "preset.yaml")
    run, peak_mb, wall = run_our_side(args, preset, work, env)
    timed = run["timed"]
    model_info = run["started"].get("model", {})
    result = summarise(args, run["window"], peak_mb, wall,
                       in_step=sum(m.get("step_time", 0.0) for m in timed),
                       mean_length=mean_of(timed, "completions/mean_length"),
                       scores=[m.get("objective/scores", m.get("reward")) for m in timed])
    result["lora_targets"] = model_info.get("lora_targets")
    result["trainable_parameters"] = model_info.get("trainable_parameters")
    result["timing_split"] = {k: mean_of(timed, f"timing/{k}") for k in ("rollout", "reward", "update")}
    if not args.keep_runs:
        shutil.rmtree(run["run_dir"], ignore_errors=True)
    return result


# ------------------------------------------------------------------------------ TRL side


def run_trl_parent(args, model_path: Path, reward_model: Path, work: Path, env: dict) -> dict:
    cmd = [str(trl112_python()), str(Path(__file__).resolve()), "--side", "trl", "--model-path", str(model_path),
           "--reward-model", str(reward_model), "--work-dir", str(work), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--batch-size", str(args.batch_size),
           "--max-completion-length", str(args.max_completion_length), "--learning-rate", repr(args.learning_rate),
           "--num-train", str(args.num_train), "--num-ppo-epochs", str(args.num_ppo_epochs),
           "--num-mini-batches", str(args.num_mini_batches), "--kl-estimator", args.kl_estimator]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.trl_verbose:
        cmd += ["--trl-verbose"]
    log = work / "trl.log"
    rc, peak_mb, wall = run_child(cmd, log, env, args.timeout)
    if rc != 0:
        raise RuntimeError(f"the TRL side exited with status {rc}; log {log}:\n{tail(log)}")
    child = read_child_result(log)
    result = summarise(args, child["window"], peak_mb, wall, in_step=None, mean_length=child["mean_length"],
                       scores=child["scores"])
    result.update(lora_targets=child["lora_targets"], trainable_parameters=child["trainable_parameters"],
                  lora_parameters=child["lora_parameters"], value_model_parameters=child["value_model_parameters"],
                  completions_per_step=child["completions_per_step"], trl_version=child["trl_version"],
                  torch_threads=child["torch_threads"], child_vmhwm_mb=child["vmhwm_mb"])
    if not args.keep_runs:
        shutil.rmtree(work / "trl-output", ignore_errors=True)
    return result


def trl_child(args) -> int:
    """The TRL side, in its own process under the TRL 1.12 venv: train, then print one
    RESULT line."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    from trl.experimental.ppo import PPOConfig, PPOTrainer
    from trl.experimental.ppo import ppo_trainer as ppo_module

    from engine.model.loading import find_lora_targets, load_tokenizer
    from engine.data import make_task

    path = args.model_path
    tokenizer = load_tokenizer(path)  # what our engine uses: left padding, pad token set
    torch.manual_seed(FIXED["seed"])
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    # The critic as TRL's examples build it: a sequence-classification model with one
    # label, here from the policy's folder (the score head is new, seeded above).
    value_model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    value_model.config.pad_token_id = tokenizer.pad_token_id
    reward_model = AutoModelForSequenceClassification.from_pretrained(args.reward_model, num_labels=1,
                                                                      dtype=torch.float32)
    reward_model.config.pad_token_id = tokenizer.pad_token_id
    targets = find_lora_targets(policy)

    train, evals = make_task("sort", seed=FIXED["seed"], num_train=args.num_train, num_eval=FIXED["num_eval"])

    def tokenized(examples):
        return Dataset.from_dict({"input_ids": [tokenizer(e.prompt)["input_ids"] for e in examples]})

    # Completions scored per rollout batch, and their lengths (EOS included), read where TRL
    # calls the reward model.
    scored: list[int] = []
    lengths: list[float] = []
    inner_get_reward = ppo_module.get_reward

    def get_reward(model, query_responses, pad_token_id, context_length):
        out = inner_get_reward(model, query_responses, pad_token_id, context_length)
        if model is reward_model:
            scored.append(int(query_responses.shape[0]))
            lengths.append(float((out[2] - context_length + 1).float().mean()))
        return out

    ppo_module.get_reward = get_reward

    clock = make_clock()
    config = PPOConfig(
        output_dir=str(Path(args.work_dir) / "trl-output"),
        # batch: completions per rollout, one generate call, one scoring pass
        per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=1,
        local_rollout_forward_batch_size=args.batch_size,
        total_episodes=args.steps * args.batch_size,
        num_ppo_epochs=args.num_ppo_epochs, num_mini_batches=args.num_mini_batches,
        # sampling: stop at EOS (responses are cut after it, as ours stop there)
        response_length=args.max_completion_length, temperature=FIXED["temperature"], stop_token="eos",
        missing_eos_penalty=FIXED["missing_eos_penalty"],
        # PPO
        cliprange=FIXED["cliprange"], cliprange_value=FIXED["cliprange_value"], vf_coef=FIXED["vf_coef"],
        gamma=FIXED["gamma"], lam=FIXED["lam"], kl_coef=FIXED["kl_coef"], kl_estimator=args.kl_estimator,
        whiten_rewards=FIXED["whiten_rewards"],
        # optimiser: torch.optim.AdamW at a constant rate (TRL's default is the fused one)
        learning_rate=args.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=FIXED["weight_decay"], adam_beta1=FIXED["adam_beta1"], adam_beta2=FIXED["adam_beta2"],
        adam_epsilon=FIXED["adam_epsilon"], optim="adamw_torch", seed=FIXED["seed"],
        # fp32 on the CPU, no gradient checkpointing (TRL's default is on; ours has none)
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        # no sample generations, eval or checkpoints; no external logging
        num_sample_generations=0, eval_strategy="no", save_strategy="no", report_to="none",
        logging_steps=1, disable_tqdm=True, dataloader_num_workers=0, dataloader_pin_memory=False,
    )
    peft_config = LoraConfig(r=FIXED["lora_r"], lora_alpha=FIXED["lora_alpha"], lora_dropout=0.0,
                             target_modules=targets, task_type="CAUSAL_LM")
    trainer = PPOTrainer(args=config, processing_class=tokenizer, model=policy, ref_model=None,
                         reward_model=reward_model, train_dataset=tokenized(train), value_model=value_model,
                         eval_dataset=tokenized(evals), callbacks=[clock], peft_config=peft_config)
    named = list(trainer.model.named_parameters())
    trainable = sum(p.numel() for _, p in named if p.requires_grad)
    lora_params = sum(p.numel() for n, p in named if p.requires_grad and "lora_" in n)
    value_params = sum(p.numel() for p in value_model.parameters() if p.requires_grad)
    trainer.train()

    W, N = args.warmup, args.steps
    window = clock_window(clock, W, N)
    if args.trl_verbose:
        for s in sorted(clock.logs):
            print(f"TRL step {s}: {json.dumps(clock.logs[s], sort_keys=True)}", flush=True)
    print_child_result({
        "window": window,
        "mean_length": statistics.fmean(lengths[W:N]),
        "completions_per_step": scored[W:N],
        "scores": [clock.logs.get(s, {}).get("objective/scores") for s in range(W + 1, N + 1)],
        "lora_targets": targets,
        "trainable_parameters": trainable,
        "lora_parameters": lora_params,
        "value_model_parameters": value_params,
        "trl_version": trl.__version__,
        "torch_threads": torch.get_num_threads(),
        "vmhwm_mb": vmhwm_mb(),
    })
    return 0


# -------------------------------------------------------------------------------- parent


def summarise(args, window, peak_mb, wall, *, in_step, mean_length, scores) -> dict:
    scores = [s for s in scores if s is not None]
    return {
        **timing_figures(args, window, peak_mb, wall, in_step),
        "mean_completion_length": mean_length,
        "mean_score": statistics.fmean(scores) if scores else None,
    }


def bench_model(args, name: str, reward_model: Path) -> dict:
    folder, note = prepare_model(name)
    params = parameter_count(folder)
    env = child_env(args.threads)
    runs = alternate_sides(
        name, args.repeats, 'ppo-', args.keep_runs,
        lambda side, work: (run_ours if side == "ours" else run_trl_parent)(args, folder, reward_model, work, env),
        lambda r: f"{r['samples_per_s']:.2f} samples/s, peak RSS {r['peak_rss_mb']:.0f} MB, "
                  f"mean completion length {r['mean_completion_length']:.1f}")
    for r in runs["trl"]:
        bad = [n for n in r["completions_per_step"] if n != args.batch_size]
        if bad or len(r["completions_per_step"]) != args.steps - args.warmup:
            raise RuntimeError(f"TRL scored {r['completions_per_step']} completions in the timed steps, "
                               f"expected {args.batch_size} in each of {args.steps - args.warmup}")
    ours0, trl0 = runs["ours"][0], runs["trl"][0]
    if ours0["lora_targets"] is not None and ours0["lora_targets"] != trl0["lora_targets"]:
        raise RuntimeError(f"LoRA targets differ: ours {ours0['lora_targets']}, TRL {trl0['lora_targets']}")
    return {
        "model": name, "path": str(folder), "note": note, "params": params,
        "lora_targets": trl0["lora_targets"],
        "trl_lora_parameters": trl0["lora_parameters"],
        "trl_value_model_parameters": trl0["value_model_parameters"],
        **compare_sides(runs, params, args.steps - args.warmup, "mean_completion_length"),
    }


def table(rows: list[dict]) -> str:
    header = ("side", "params", "steps timed", "samples/s", "peak RSS MB", "mean compl. len")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)
    return fmt_table(header, [(r["side"], fmt(r["params"], ","), str(r["steps_timed"]),
                               fmt(r["samples_per_s"], ".2f"), fmt(r["peak_rss_mb"], ".0f"),
                               fmt(r["mean_completion_length"], ".1f")) for r in rows])


def hidden_size(folder: Path) -> int:
    config = json.loads((folder / "config.json").read_text())
    return int(config.get("hidden_size") or config["n_embd"])


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setup", action="store_true",
                   help="create (or check) bench/out/trl112-venv with trl==1.12.0, then exit")
    p.add_argument("--reinstall", action="store_true", help="with --setup: delete the venv and create it again")
    p.add_argument("--models", default="tiny,10x", help="comma-separated: tiny, 10x (default both)")
    p.add_argument("--steps", type=int, default=12, help="rollout batches per run (default 12)")
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the timing, at least 1 (default 2)")
    p.add_argument("--batch-size", type=int, default=64, help="completions per step, one per prompt (default 64)")
    p.add_argument("--max-completion-length", type=int, default=16,
                   help="tokens per completion at most; TRL's response_length (default 16)")
    p.add_argument("--num-ppo-epochs", type=int, default=4, help="passes over each rollout batch (default 4)")
    p.add_argument("--num-mini-batches", type=int, default=1, help="optimizer steps per pass (default 1)")
    p.add_argument("--kl-estimator", choices=["k1", "k3"], default="k1", help="KL estimator (default k1)")
    p.add_argument("--learning-rate", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    p.add_argument("--num-train", type=int, default=2000, help="training prompts of the sort task (default 2000)")
    add_run_options(p, child_paths=("--reward-model",))
    args = parse_timed_args(p, argv)
    if args.batch_size % args.num_mini_batches:
        p.error("--batch-size must be a multiple of --num-mini-batches")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.side == "trl":
        return trl_child(args)
    if args.setup:
        setup_trl112(force=args.reinstall)
        return 0
    if not trl112_ready():
        print("bench/out/trl112-venv is missing: creating it (python bench/ppo_vs_trl.py --setup does only this)",
              flush=True)
        setup_trl112()
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    import torch

    threads = args.threads or torch.get_num_threads()
    print(f"PPO: ours vs TRL 1.12 (trl.experimental.ppo). batch {args.batch_size} completions/step (one per "
          f"prompt), response length {args.max_completion_length}, {args.num_ppo_epochs} PPO epochs x "
          f"{args.num_mini_batches} mini-batch(es), kl {args.kl_estimator}, {args.steps} steps ({args.warmup} "
          f"warm-up), fp32 CPU, torch threads {threads}, repeats {args.repeats}, cpus {os.cpu_count()}")
    if args.ours_set:
        print(f"extra engine overrides: {args.ours_set}")
    load, line = load_average_line()
    if line:
        print(line)
    reward_model = prepare_reward_model()
    report = {"benchmark": "ppo", "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                                               if k not in ("side", "model_path", "reward_model", "work_dir")},
              "fixed": FIXED, "reward_model": str(reward_model), "load_average_at_start": load,
              "torch_threads": threads, "models": []}
    for name in names:
        result = bench_model(args, name, reward_model)
        report["models"].append(result)
        print(f"\n== {name}: {result['path']} ({result['note']})")
        head = hidden_size(Path(result["path"])) + 1
        print(f"   {result['params']:,} parameters; LoRA r={FIXED['lora_r']} on {', '.join(result['lora_targets'])}")
        print(f"   trained: ours {result['ours']['trainable_parameters']:,} LoRA + {head:,} value head; TRL "
              f"{result['trl_lora_parameters']:,} LoRA + {result['trl_value_model_parameters']:,} value model")
        print(table([result["ours"], result["trl"]]))
        print(f"ratio samples/s (ours/TRL): {result['ratio_samples_per_s']:.2f}x   (target >= 1.9x)")
        print(f"ratio peak memory (ours/TRL): {result['ratio_peak_memory']:.2f}x   (target <= 1.0x)")
        if result["ours"]["in_step_fraction"] is not None:
            print(f"(ours: {1 - result['ours']['in_step_fraction']:.1%} of the timed window is outside its step "
                  "timer -- events, samples, trajectory records)", flush=True)
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
