"""Throughput and peak memory: our DPO engine against TRL's DPOTrainer, same settings.

    python bench/dpo_vs_trl.py                       # both models, defaults
    python bench/dpo_vs_trl.py --models tiny --steps 10 --repeats 3 --json bench/out/dpo.json

For each model the same DPO configuration is run through our engine
(`python -m engine run PRESET ...`, a subprocess) and through TRL's `DPOTrainer` (this
script again with `--side trl`, another subprocess), one after the other, never at once;
with `--repeats` the order alternates and the median is reported. TRL's side runs under
the project's venv (TRL 1.16 from the `bench` extra) unless `--trl-python` names another
interpreter (e.g. bench/out/trl112-venv/bin/python for TRL 1.12; see ppo_vs_trl.py).

Same on both sides: model weights and tokenizer (one folder both load), LoRA (r, alpha,
dropout 0, the target modules our engine picks), the preference data (one JSONL file of
{prompt, chosen, rejected} for the built-in sort task, written from
engine.data.preference_pairs: chosen = the right answer, rejected = a corrupted one),
EOS after each answer, beta, loss sigmoid, label smoothing 0, pairs per step, no
truncation (every answer fits max_completion_length; TRL: max_length None), the reference
= the model with its adapter disabled (TRL: ref_model None with peft), reference logprobs
computed every step on both sides (or, with --precompute-ref-log-probs, once before
training on both sides), dropout off, AdamW (not fused) at a
constant learning rate, gradient clipping at 1, fp32 on the CPU, no gradient
checkpointing (TRL turns it on by default), no evaluation or checkpoint inside the timed
window, no external logging.

Throughput: samples/s = preference pairs trained on per second, (N - W) * batch_size over
the wall time from the end of step W (warm-up, default 2) to the end of step N; one step
is one optimizer step on batch_size pairs (2 x batch_size sequences). Our side reads the
`time` of each step's `metrics` event in events.jsonl; TRL's side records
time.perf_counter() in a TrainerCallback's on_step_end. Peak memory: the child process's
peak resident set size (ru_maxrss from os.wait4).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    add_run_options, alternate_sides, child_env, clock_window, compare_sides, fmt_table, load_average_line, make_clock,
    mean_of, OUT, parameter_count, prepare_model, print_child_result, read_child_result, run_our_side,
    run_child, tail, vmhwm_mb, write_json,
    parse_timed_args, timing_figures,
)

DATA_DIR = OUT / "data"

# Shared DPO settings that have no flag (the flags carry the rest). Names follow TRL's DPOConfig.
FIXED = dict(
    lora_r=16, lora_alpha=32.0, loss_type="sigmoid", label_smoothing=0.0,
    weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0, seed=0,
)


# ---------------------------------------------------------------------------------- data


def write_pairs(num_pairs: int, seed: int) -> tuple[Path, dict]:
    """bench/out/data/sort-pairs-N-seedS.jsonl: {prompt, chosen, rejected} of the built-in
    sort task (engine.data.preference_pairs), and a summary (longest answer, mean tokens)."""
    from engine.data import make_task, preference_pairs

    train, _ = make_task("sort", seed=seed, num_train=num_pairs, num_eval=0)
    pairs = preference_pairs(train, seed, "sort")
    rows = [{"prompt": e.prompt, "chosen": e.fields["chosen"], "rejected": e.fields["rejected"]} for e in pairs]
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    path = DATA_DIR / f"sort-pairs-{num_pairs}-seed{seed}.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    # The built-in tokenizer has one token per character; +1 for the EOS both sides append.
    answers = [len(r[k]) + 1 for r in rows for k in ("chosen", "rejected")]
    return path, {"pairs": len(rows), "longest_answer_tokens": max(answers),
                  "mean_answer_tokens": statistics.fmean(answers),
                  "longest_prompt_tokens": max(len(r["prompt"]) for r in rows)}


# ------------------------------------------------------------------------------ our side


def write_preset(args, model_path: Path, data_path: Path, dest: Path) -> Path:
    """Our DPO preset, written whole (every field that matters is set here)."""
    import yaml

    data = {
        "name": "bench-dpo-vs-trl",
        "description": "written by bench/dpo_vs_trl.py",
        "model": {
            "name_or_path": str(model_path), "dtype": "float32", "device": "cpu",
            "lora": {"r": FIXED["lora_r"], "alpha": FIXED["lora_alpha"], "dropout": 0.0, "target_modules": "auto"},
        },
        "algorithm": {
            "name": "dpo", "beta": args.beta, "loss_type": FIXED["loss_type"],
            "label_smoothing": FIXED["label_smoothing"],
            "precompute_ref_log_probs": args.precompute_ref_log_probs,
            "max_completion_length": args.max_completion_length,
        },
        # No held-out pairs: nothing to evaluate (TRL's side evaluates nothing either).
        "data": {"task": None, "path": str(data_path), "prompt_field": "prompt", "num_eval": 0},
        "training": {
            "max_steps": args.steps, "batch_size": args.batch_size, "micro_batch_size": None,
            "learning_rate": args.learning_rate, "lr_scheduler_type": "constant", "warmup_steps": 0,
            "weight_decay": FIXED["weight_decay"], "adam_beta1": FIXED["adam_beta1"],
            "adam_beta2": FIXED["adam_beta2"], "max_grad_norm": FIXED["max_grad_norm"],
            "seed": FIXED["seed"], "eval_steps": 0, "save_steps": 0, "logging_steps": 1,
        },
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def run_ours(args, model_path: Path, data_path: Path, work: Path, env: dict) -> dict:
    preset = write_preset(args, model_path, data_path, work / "preset.yaml")
    run, peak_mb, wall = run_our_side(args, preset, work, env)
    timed = run["timed"]
    model_info = run["started"].get("model", {})
    result = summarise(args, run["window"], peak_mb, wall,
                       in_step=sum(m.get("step_time", 0.0) for m in timed),
                       tokens_per_step=mean_of(timed, "num_tokens"),
                       accuracies=[m.get("rewards/accuracies") for m in timed])
    result["lora_targets"] = model_info.get("lora_targets")
    result["trainable_parameters"] = model_info.get("trainable_parameters")
    if not args.keep_runs:
        shutil.rmtree(run["run_dir"], ignore_errors=True)
    return result


# ------------------------------------------------------------------------------ TRL side


def run_trl_parent(args, model_path: Path, data_path: Path, work: Path, env: dict) -> dict:
    cmd = [args.trl_python, str(Path(__file__).resolve()), "--side", "trl", "--model-path", str(model_path),
           "--data-path", str(data_path), "--work-dir", str(work), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--batch-size", str(args.batch_size), "--beta", repr(args.beta),
           "--max-completion-length", str(args.max_completion_length),
           "--learning-rate", repr(args.learning_rate)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.trl_verbose:
        cmd += ["--trl-verbose"]
    if args.precompute_ref_log_probs:
        cmd += ["--precompute-ref-log-probs"]
    log = work / "trl.log"
    rc, peak_mb, wall = run_child(cmd, log, env, args.timeout)
    if rc != 0:
        raise RuntimeError(f"the TRL side exited with status {rc}; log {log}:\n{tail(log)}")
    child = read_child_result(log)
    result = summarise(args, child["window"], peak_mb, wall, in_step=None,
                       tokens_per_step=child["tokens_per_step"], accuracies=child["accuracies"])
    result.update(lora_targets=child["lora_targets"], trainable_parameters=child["trainable_parameters"],
                  pairs_per_step=child["pairs_per_step"], trl_version=child["trl_version"],
                  torch_threads=child["torch_threads"], child_vmhwm_mb=child["vmhwm_mb"])
    if not args.keep_runs:
        shutil.rmtree(work / "trl-output", ignore_errors=True)
    return result


def trl_child(args) -> int:
    """The TRL side, in its own process: train, then print one RESULT line."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer

    from engine.model.loading import find_lora_targets, load_tokenizer

    path = args.model_path
    tokenizer = load_tokenizer(path)  # what our engine uses: left padding, pad token set
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    targets = find_lora_targets(model)
    rows = [json.loads(line) for line in Path(args.data_path).read_text().splitlines() if line.strip()]
    dataset = Dataset.from_list(rows)

    # What each step trained on: pairs, and non-pad tokens (prompts, chosen and rejected).
    pairs: list[int] = []
    tokens: list[int] = []

    class CountingDPOTrainer(DPOTrainer):
        def compute_loss(self, model, inputs, *a, **kw):
            if model.training:
                if "completion_mask" in inputs:  # TRL >= 1.13: rows [chosen..., rejected...]
                    pairs.append(int(inputs["input_ids"].shape[0]) // 2)
                    tokens.append(int(inputs["attention_mask"].sum()))
                elif "chosen_input_ids" in inputs:  # TRL 1.12
                    pairs.append(int(inputs["chosen_input_ids"].shape[0]))
                    tokens.append(int(sum(inputs[k].sum() for k in inputs if k.endswith("attention_mask"))))
            return super().compute_loss(model, inputs, *a, **kw)

    clock = make_clock()
    settings = dict(
        output_dir=str(Path(args.work_dir) / "trl-output"),
        # batch: pairs per optimizer step, no accumulation; whole batches only
        per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=1, max_steps=args.steps,
        dataloader_drop_last=True,
        # DPO
        beta=args.beta, loss_type=FIXED["loss_type"], label_smoothing=FIXED["label_smoothing"],
        precompute_ref_log_probs=args.precompute_ref_log_probs, disable_dropout=True,
        # no truncation (every answer fits max_completion_length, checked by the parent)
        max_length=None, max_prompt_length=None, max_completion_length=args.max_completion_length,
        # optimiser: torch.optim.AdamW as our engine builds it (TRL's default is the fused one)
        learning_rate=args.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=FIXED["weight_decay"], adam_beta1=FIXED["adam_beta1"], adam_beta2=FIXED["adam_beta2"],
        adam_epsilon=FIXED["adam_epsilon"], optim="adamw_torch", max_grad_norm=FIXED["max_grad_norm"],
        seed=FIXED["seed"],
        # fp32 on the CPU, no gradient checkpointing (TRL's default is on; ours has none)
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        # no eval, no checkpoints, no external logging; metrics every step
        eval_strategy="no", save_strategy="no", report_to="none", logging_steps=1, disable_tqdm=True,
        dataloader_num_workers=0, dataloader_pin_memory=False,
    )
    # Pass only the fields this TRL version has (1.12 and 1.16 limit the whole sequence
    # with max_length alone; older versions also had prompt and completion limits).
    known = {f.name for f in dataclasses.fields(DPOConfig)}
    dropped = sorted(k for k in settings if k not in known)
    config = DPOConfig(**{k: v for k, v in settings.items() if k in known})
    if dropped:
        print(f"DPOConfig of TRL {trl.__version__} has no {', '.join(dropped)}", flush=True)
    peft_config = LoraConfig(r=FIXED["lora_r"], lora_alpha=FIXED["lora_alpha"], lora_dropout=0.0,
                             target_modules=targets, task_type="CAUSAL_LM")
    trainer = CountingDPOTrainer(model=model, ref_model=None, args=config, train_dataset=dataset,
                                 processing_class=tokenizer, peft_config=peft_config, callbacks=[clock])
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    first = trainer.train_dataset[0]
    if "chosen_ids" in first:  # TRL >= 1.13: check that the answers end with EOS
        if first["chosen_ids"][-1] != tokenizer.eos_token_id or first["rejected_ids"][-1] != tokenizer.eos_token_id:
            raise RuntimeError(f"TRL's tokenized answers do not end with EOS: {first}")
    trainer.train()

    W, N = args.warmup, args.steps
    window = clock_window(clock, W, N)
    if args.trl_verbose:
        for s in sorted(clock.logs):
            print(f"TRL step {s}: {json.dumps(clock.logs[s], sort_keys=True)}", flush=True)
    print_child_result({
        "window": window,
        "pairs_per_step": pairs[W:N],
        "tokens_per_step": statistics.fmean(tokens[W:N]) if tokens[W:N] else None,
        "accuracies": [clock.logs.get(s, {}).get("rewards/accuracies") for s in range(W + 1, N + 1)],
        "lora_targets": targets,
        "trainable_parameters": trainable,
        "trl_version": trl.__version__,
        "torch_threads": torch.get_num_threads(),
        "vmhwm_mb": vmhwm_mb(),
    })
    return 0


# -------------------------------------------------------------------------------- parent


def summarise(args, window, peak_mb, wall, *, in_step, tokens_per_step, accuracies) -> dict:
    accuracies = [a for a in accuracies if a is not None]
    return {
        **timing_figures(args, window, peak_mb, wall, in_step),
        "tokens_per_step": tokens_per_step,
        "mean_accuracy": statistics.fmean(accuracies) if accuracies else None,
    }


def bench_model(args, name: str, data_path: Path) -> dict:
    folder, note = prepare_model(name)
    params = parameter_count(folder)
    env = child_env(args.threads)
    runs = alternate_sides(
        name, args.repeats, 'dpo-', args.keep_runs,
        lambda side, work: (run_ours if side == "ours" else run_trl_parent)(args, folder, data_path, work, env),
        lambda r: f"{r['samples_per_s']:.2f} pairs/s, peak RSS {r['peak_rss_mb']:.0f} MB")
    for r in runs["trl"]:
        bad = [n for n in r["pairs_per_step"] if n != args.batch_size]
        if bad or len(r["pairs_per_step"]) != args.steps - args.warmup:
            raise RuntimeError(f"TRL trained on {r['pairs_per_step']} pairs in the timed steps, "
                               f"expected {args.batch_size} in each of {args.steps - args.warmup}")
    ours0, trl0 = runs["ours"][0], runs["trl"][0]
    if ours0["lora_targets"] is not None and ours0["lora_targets"] != trl0["lora_targets"]:
        raise RuntimeError(f"LoRA targets differ: ours {ours0['lora_targets']}, TRL {trl0['lora_targets']}")
    if ours0["trainable_parameters"] is not None and ours0["trainable_parameters"] != trl0["trainable_parameters"]:
        raise RuntimeError(f"trainable parameters differ: ours {ours0['trainable_parameters']}, "
                           f"TRL {trl0['trainable_parameters']}")
    return {
        "model": name, "path": str(folder), "note": note, "params": params,
        "lora_targets": trl0["lora_targets"], "trl_version": trl0["trl_version"],
        **compare_sides(runs, params, args.steps - args.warmup, "tokens_per_step"),
    }


def table(rows: list[dict]) -> str:
    header = ("side", "params", "steps timed", "pairs/s", "peak RSS MB", "tokens/step")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)
    return fmt_table(header, [(r["side"], fmt(r["params"], ","), str(r["steps_timed"]), fmt(r["samples_per_s"], ".2f"),
                               fmt(r["peak_rss_mb"], ".0f"), fmt(r["tokens_per_step"], ".0f")) for r in rows])


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="tiny,10x", help="comma-separated: tiny, 10x, qwen-vocab (default tiny,10x)")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per run (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the timing, at least 1 (default 2)")
    p.add_argument("--batch-size", type=int, default=32, help="preference pairs per step (default 32)")
    p.add_argument("--beta", type=float, default=0.1, help="DPO beta (default 0.1)")
    p.add_argument("--max-completion-length", type=int, default=16,
                   help="tokens per answer at most, EOS included; no answer of the data may exceed it (default 16)")
    p.add_argument("--learning-rate", type=float, default=5e-4, help="AdamW learning rate (default 5e-4, as the preset)")
    p.add_argument("--precompute-ref-log-probs", action="store_true",
                   help="both sides compute the reference logprobs of every pair once, before the first step "
                        "(outside the timed window); default: every step, on both sides")
    p.add_argument("--num-pairs", type=int, default=2000, help="preference pairs in the data file (default 2000)")
    add_run_options(p, child_paths=("--data-path",), trl_python=True)
    args = parse_timed_args(p, argv)
    if args.steps * args.batch_size > args.num_pairs:
        p.error("--num-pairs must be at least --steps x --batch-size (TRL would start a second epoch, ours not)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.side == "trl":
        return trl_child(args)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    import torch

    threads = args.threads or torch.get_num_threads()
    ref_when = "precomputed once before training" if args.precompute_ref_log_probs else "computed every step"
    print(f"DPO: ours vs TRL's DPOTrainer. batch {args.batch_size} preference pairs/step, beta {args.beta}, "
          f"loss {FIXED['loss_type']}, reference = adapter disabled, {ref_when}, {args.steps} steps "
          f"({args.warmup} warm-up), fp32 CPU, torch threads {threads}, repeats {args.repeats}, cpus {os.cpu_count()}")
    if args.ours_set:
        print(f"extra engine overrides: {args.ours_set}")
    load, line = load_average_line()
    if line:
        print(line)
    data_path, data = write_pairs(args.num_pairs, FIXED["seed"])
    if data["longest_answer_tokens"] > args.max_completion_length:
        raise SystemExit(f"an answer of {data_path} has {data['longest_answer_tokens']} tokens with EOS, more than "
                         f"--max-completion-length {args.max_completion_length}: our side would truncate it, TRL's "
                         "not; raise --max-completion-length")
    print(f"data: {data_path} ({data['pairs']} pairs; answers {data['mean_answer_tokens']:.1f} tokens on average "
          f"with EOS, {data['longest_answer_tokens']} at most: no truncation on either side)")
    report = {"benchmark": "dpo", "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                                               if k not in ("side", "model_path", "data_path", "work_dir")},
              "fixed": FIXED, "data": {"path": str(data_path), **data}, "load_average_at_start": load,
              "torch_threads": threads, "models": []}
    for name in names:
        result = bench_model(args, name, data_path)
        report["models"].append(result)
        print(f"\n== {name}: {result['path']} ({result['note']})")
        print(f"   {result['params']:,} parameters; LoRA r={FIXED['lora_r']} on {', '.join(result['lora_targets'])} "
              f"({result['trl']['trainable_parameters']:,} trainable); TRL {result['trl_version']}")
        print(table([result["ours"], result["trl"]]))
        print(f"ratio pairs/s (ours/TRL): {result['ratio_samples_per_s']:.2f}x   (target >= 1.5x)")
        print(f"ratio peak memory (ours/TRL): {result['ratio_peak_memory']:.2f}x   (target <= 1.0x)")
        if result["ours"]["in_step_fraction"] is not None:
            print(f"(ours: {1 - result['ours']['in_step_fraction']:.1%} of the timed window is outside its step "
                  "timer -- events, samples, trajectory records)", flush=True)
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
