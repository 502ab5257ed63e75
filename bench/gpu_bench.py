"""GPU benchmark (issue 13): our engine against TRL's GRPOTrainer and HF generate on
models of Qwen2.5's real shapes with random weights (nothing is downloaded).

    python bench/gpu_bench.py --shape qwen0.5b --device cuda --out bench/out/gpu
    python bench/gpu_bench.py --shape qwen1.5b --device cuda --out bench/out/gpu
    python bench/gpu_bench.py --shape qwen0.5b --ablations   # + each of our speed-ups alone (issue 42)
    python bench/gpu_bench.py --smoke                          # the whole script on a CPU, tiny shape, in minutes

Each side runs in its own child process, one after the other: `ours` (the engine's CLI
through a wrapper that prints torch.cuda.max_memory_allocated(); GRPO, plus PPO and DPO,
ours only: TRL 1.16 has no PPO trainer), `trl` (GRPOTrainer, use_vllm off, the same
config) and `generate` (HF model.generate against engine.model.rollout.sample with the plain
and the captured decode path, one process).
`--ablations` runs our GRPO twice more, each with one of our speed-ups off, the other on:
the captured decode step (model.decode: plain instead of auto) and the lean update
(RL_ENGINE_LEAN_UPDATE=0, engine/model/token_logits.py's switch); a speed-up's effect alone
is the figure with it off over the figure with both on.
What is held equal and how each figure is taken: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    MODELS_DIR, RUNS_DIR, _spec_is_current, child_env, clock_window, fmt_table, make_clock, parameter_count,
    print_child_result, read_child_result, read_our_run, run_child, tail,
)

SHAPES = {  # Qwen2.5's configs (tied embeddings on both); `tiny` only smoke-tests the script on a CPU
    "qwen0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                     intermediate_size=4864, vocab_size=151936),
    "qwen1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                     intermediate_size=8960, vocab_size=151936),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=None),  # None: the tokenizer's own (~500)
}
# Dense bf16 peak of the GPU, TFLOP/s (no sparsity), by a substring of its name; first match wins.
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.4), ("H200", 989.4), ("H800", 989.4), ("A100", 312.0),
                    ("L40S", 362.0), ("A10G", 70.0))
# Issue 42's GPU targets: GRPO samples/s >= 2x TRL's, peak <= TRL's, captured decode >= 5x the plain
# path's tokens/s (today's, 64 x 256); MFU is issue 13's.
GOALS = dict(samples_ratio=2.0, memory_ratio=1.0, decode_speedup=5.0, mfu=0.30)
PROMPTS_PER_STEP, GROUP, PROMPT_TOKENS, DPO_PAIRS = 8, 8, 64, 32
PEAK_TAG = "BENCH_PEAK_GPU_BYTES "
# Our side: the CLI, then the peak GPU memory the process allocated (the engine records none).
OURS_WRAPPER = ("import sys, torch\nfrom engine.cli import main\nrc = main(sys.argv[1:])\n"
                f"print({PEAK_TAG!r}, torch.cuda.max_memory_allocated() if torch.cuda.is_available() else -1, "
                "flush=True)\nsys.exit(rc)")
# A pseudo-random score in [0, 1) from the text: costs nothing, yet not constant (advantages != 0).
REWARD_SOURCE = ("import hashlib\n\n\ndef hash_reward(prompts, completions, **fields):\n"
                 "    return [int(hashlib.md5(c.encode()).hexdigest()[:8], 16) / 2**32 for c in completions]\n")


# ------------------------------------------------------------------------ model and data


def build_model(shape: str, device: str) -> Path:
    """bench/out/models/gpu-bench-SHAPE: make_tiny_chat_model's tokenizer, chat specials
    and generation config, with the model replaced by a random one of the shape (bf16 for
    CUDA runs, so loading is quick). Rebuilt only when the spec changed."""
    spec = dict(SHAPES[shape], seed=0, dtype="bfloat16" if device == "cuda" else "float32")
    folder = MODELS_DIR / f"gpu-bench-{shape}"
    if _spec_is_current(folder, spec):
        return folder
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from tests.hub_fixtures import make_tiny_chat_model

    print(f"building {folder} ...", file=sys.stderr, flush=True)
    make_tiny_chat_model(folder, seed=0)
    config = AutoConfig.from_pretrained(folder)
    shape_fields = {k: v for k, v in SHAPES[shape].items() if v is not None}
    config.update(dict(shape_fields, max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
                       tie_word_embeddings=True))
    if getattr(config, "layer_types", None) is not None:  # transformers 5 lists one per layer: resize it
        config.layer_types = ["full_attention"] * config.num_hidden_layers
    assert config.vocab_size >= len(AutoTokenizer.from_pretrained(folder))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, spec["dtype"]))
    model.generation_config = AutoModelForCausalLM.from_pretrained(folder).generation_config
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "bench_spec.json").write_text(json.dumps(spec))
    return folder


def token_windows(tokenizer, n: int, length: int, start: int = 0) -> list[str]:
    """n texts of about `length` tokens: windows of the fixtures' GSM8K-like text, decoded
    (re-encoding may differ by a token or two at the edges)."""
    from tests.hub_fixtures import GSM8K_ROWS

    text = " ".join(r["question"] + " " + r["answer"] for r in GSM8K_ROWS)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    while len(ids) < start + n * length + length:
        ids = ids + ids
    return [tokenizer.decode(ids[start + i * length: start + (i + 1) * length]) for i in range(n)]


def write_data(folder: Path, work: Path) -> dict:
    """prompts.jsonl (128 prompts of ~64 tokens), pairs.jsonl (DPO: prompt, chosen,
    rejected of ~300 tokens, cut to 256) and the reward file, in `work`."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, model_max_length=10**9)  # whole text at once, no warning
    prompts = token_windows(tok, 128, PROMPT_TOKENS)
    answers = token_windows(tok, 2 * 128, 300, start=7)
    (work / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    pairs = [{"prompt": p, "chosen": " " + answers[2 * i], "rejected": " " + answers[2 * i + 1]}
             for i, p in enumerate(prompts)]
    (work / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    (work / "bench_reward.py").write_text(REWARD_SOURCE)
    lengths = [len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    return {"prompts": work / "prompts.jsonl", "pairs": work / "pairs.jsonl", "reward": work / "bench_reward.py",
            "prompt_tokens": statistics.fmean(lengths), "tokenizer_size": len(tok)}


# ------------------------------------------------------------------------------ our side


def write_preset(args, algo: str, model: Path, data: dict, dest: Path, decode: str = "auto") -> Path:
    import yaml

    algorithm = {
        "grpo": dict(name="grpo", num_generations=GROUP, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo",
                     scale_rewards="group", num_iterations=1, mask_truncated_completions=False),
        "ppo": dict(name="ppo", num_generations=1, num_ppo_epochs=4, num_mini_batches=1, kl_coef=0.05),
        "dpo": dict(name="dpo", beta=0.1, loss_type="sigmoid", precompute_ref_log_probs=True),
    }[algo]
    if algo != "dpo":
        algorithm.update(temperature=1.0, top_p=1.0, top_k=0)
    algorithm["max_completion_length"] = args.completion_length
    preset = {
        "name": f"gpu-bench-{algo}", "description": "written by bench/gpu_bench.py",
        "model": {"name_or_path": str(model), "dtype": "bfloat16" if args.device == "cuda" else "float32",
                  "device": args.device, "chat_template": "none", "decode": decode,
                  "lora": {"r": 16, "alpha": 32.0, "dropout": 0.0, "target_modules": "auto"}},
        "algorithm": algorithm,
        "data": {"task": None, "path": str(data["pairs" if algo == "dpo" else "prompts"]), "num_train": 128,
                 "num_eval": 0},
        "rewards": [{"name": f"{data['reward']}:hash_reward", "weight": 1.0, "options": {}}],
        "training": {"max_steps": args.steps, "batch_size": DPO_PAIRS if algo == "dpo" else PROMPTS_PER_STEP * GROUP,
                     "micro_batch_size": args.micro_batch_size, "gradient_checkpointing": args.gradient_checkpointing,
                     "learning_rate": args.learning_rate, "lr_scheduler_type": "constant", "warmup_steps": 0,
                     "max_grad_norm": 1.0, "seed": 0, "eval_steps": 0, "save_steps": 0, "logging_steps": 1,
                     "log_completions": 0, "record_rollouts": 0},
    }
    dest.write_text(yaml.safe_dump(preset, sort_keys=False))
    return dest


def peak_gib(log: Path) -> float | None:
    """The peak GPU memory a child printed (GiB), None on the CPU."""
    lines = [l for l in log.read_text(errors="replace").splitlines() if l.startswith(PEAK_TAG)]
    value = int(lines[-1][len(PEAK_TAG):]) if lines else -1
    return value / 2**30 if value >= 0 else None


# Our side with one speed-up off (--ablations): the side's name, model.decode, the environment it adds.
VARIANTS = {"ours": ("auto", {}), "ours decode=plain": ("plain", {}),
            "ours lean update off": ("auto", {"RL_ENGINE_LEAN_UPDATE": "0"})}


def run_ours(args, algo: str, model: Path, data: dict, work: Path, variant: str = "ours") -> dict:
    decode, env = VARIANTS[variant]
    tag = algo + ("" if variant == "ours" else "-" + variant.split(" ", 1)[1].replace(" ", "-").replace("=", "-"))
    preset = write_preset(args, algo, model, data, work / f"preset-{tag}.yaml", decode=decode)
    run_dir, log = work / f"run-{tag}", work / f"ours-{tag}.log"
    cmd = [sys.executable, "-c", OURS_WRAPPER, "run", str(preset), "--run-dir", str(run_dir), "--quiet"]
    rc, rss_mb, wall = run_child(cmd, log, {**child_env(), **env}, args.timeout)
    if rc != 0:
        raise RuntimeError(f"our {algo} run exited with {rc}; log {log}:\n{tail(log)}\n{tail(run_dir / 'engine.log')}")
    run = read_our_run(run_dir, 1, args.steps)
    timed = run["timed"]
    batch = DPO_PAIRS if algo == "dpo" else PROMPTS_PER_STEP * GROUP
    mean = lambda key: statistics.fmean(m[key] for m in timed)  # noqa: E731
    rollout = mean("timing/rollout") if algo != "dpo" else None  # DPO samples nothing
    result = dict(side=variant, algorithm=algo, samples_per_s=(args.steps - 1) * batch / run["window"],
                  tokens_per_s=sum(m["num_tokens"] for m in timed) / run["window"], rollout_s=rollout,
                  update_s=mean("timing/update"), peak_gib=peak_gib(log), peak_rss_mb=rss_mb, process_s=wall,
                  trainable=run["started"]["model"]["trainable_parameters"], num_tokens=mean("num_tokens"))
    if algo != "dpo":
        result.update(mean_length=mean("completions/mean_length"),
                      decode_tokens_per_s=mean("throughput/rollout_tokens_per_second"))
    return result


# ------------------------------------------------------------------------------ TRL side


def child_flags(args) -> list[str]:
    flags = ["--shape", args.shape, "--device", args.device, "--steps", str(args.steps),
             "--completion-length", str(args.completion_length), "--learning-rate", repr(args.learning_rate),
             "--micro-batch-size", str(args.micro_batch_size)]
    return flags + (["--gradient-checkpointing"] if args.gradient_checkpointing else [])


def run_internal(args, kind: str, model: Path, work: Path) -> dict:
    """This script again as `--internal KIND`, in its own process; its RESULT line."""
    log = work / f"{kind}.log"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--internal", kind, "--model-path", str(model),
           "--work-dir", str(work), *child_flags(args)]
    rc, rss_mb, wall = run_child(cmd, log, child_env(), args.timeout)
    if rc != 0:
        raise RuntimeError(f"the {kind} side exited with {rc}; log {log}:\n{tail(log)}")
    return dict(read_child_result(log), peak_rss_mb=rss_mb, process_s=wall)


def trl_child(args) -> int:
    """TRL's GRPOTrainer with our GRPO settings; prints one RESULT line."""
    import importlib.util

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from engine.model.loading import find_lora_targets, load_tokenizer

    work, cuda = Path(args.work_dir), args.device == "cuda"
    spec = importlib.util.spec_from_file_location("bench_reward", work / "bench_reward.py")
    reward_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward_module)
    tokenizer = load_tokenizer(args.model_path)
    model = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.bfloat16 if cuda else torch.float32)
    targets = find_lora_targets(model)
    rows = [json.loads(l) for l in (work / "prompts.jsonl").read_text().splitlines()]
    micro = args.micro_batch_size
    config = GRPOConfig(
        output_dir=str(work / "trl-output"), max_steps=args.steps, seed=0,
        # 64 completions an optimizer step, generated at once (8 prompts x 8), trained in micro-batches
        per_device_train_batch_size=micro, gradient_accumulation_steps=PROMPTS_PER_STEP * GROUP // micro,
        steps_per_generation=PROMPTS_PER_STEP * GROUP // micro, num_generations=GROUP,
        max_completion_length=args.completion_length, temperature=1.0, top_p=1.0, top_k=0, use_vllm=False,
        beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo", scale_rewards="group", num_iterations=1,
        mask_truncated_completions=False,
        learning_rate=args.learning_rate, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        max_grad_norm=1.0, bf16=cuda, fp16=False, use_cpu=not cuda, gradient_checkpointing=args.gradient_checkpointing,
        eval_strategy="no", save_strategy="no", report_to="none", logging_steps=1, log_completions=False,
        disable_tqdm=True, dataloader_num_workers=0, remove_unused_columns=False,
    )
    peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")
    clock = make_clock()
    trainer = GRPOTrainer(model=model, reward_funcs=[reward_module.hash_reward], args=config,
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          peft_config=peft_config, callbacks=[clock])
    # TRL logs no rollout time of its own: time the generation-and-scoring call of each step.
    rollout_times: list[float] = []
    inner = trainer._generate_and_score_completions

    def timed_generation(*a, **kw):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = inner(*a, **kw)
        if cuda:
            torch.cuda.synchronize()
        rollout_times.append(time.perf_counter() - t0)
        return out

    trainer._generate_and_score_completions = timed_generation
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    trainer.train()
    N = args.steps
    window = clock_window(clock, 1, N)
    durations = [clock.ends[s] - clock.ends[s - 1] for s in range(2, N + 1)]
    logs = [clock.logs.get(s, {}) for s in range(2, N + 1)]
    mean_length = statistics.fmean(l["completions/mean_length"] for l in logs)
    batch = PROMPTS_PER_STEP * GROUP
    prompt_tokens = statistics.fmean(len(tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]) for r in rows)
    rollout = rollout_times[1:N]
    print_child_result(dict(
        side="trl", algorithm="grpo", samples_per_s=(N - 1) * batch / window,
        tokens_per_s=(N - 1) * batch * (mean_length + prompt_tokens) / window,
        rollout_s=statistics.fmean(rollout), update_s=statistics.fmean(d - r for d, r in zip(durations, rollout)),
        mean_length=mean_length, decode_tokens_per_s=batch * mean_length / statistics.fmean(rollout),
        peak_gib=torch.cuda.max_memory_allocated() / 2**30 if cuda else None, trainable=trainable,
        generations=len(rollout_times), trl_version=__import__("trl").__version__))
    return 0


# ---------------------------------------------------------------------- generate side


def generate_child(args) -> int:
    """Decoding tokens/s: HF model.generate against engine.model.rollout.sample (plain and
    captured), on the same LoRA-wrapped model and the same 64-row batch, each as its trainer
    decodes: HF generate through peft (TRL), ours with the adapter merged (our Policy)."""
    import torch

    from engine.model.loading import load_model
    from engine.model.config import ModelConfig
    from engine.model.merged_lora import merged_lora
    from engine.model.rollout import sample

    cuda = args.device == "cuda"
    loaded = load_model(ModelConfig(name_or_path=args.model_path, device=args.device,
                                    dtype="bfloat16" if cuda else "float32"))
    model, tok, T = loaded.model, loaded.tokenizer, args.completion_length
    model.eval()
    rows = [json.loads(l)["prompt"] for l in (Path(args.work_dir) / "prompts.jsonl").read_text().splitlines()]
    prompts = [p for p in rows[:PROMPTS_PER_STEP] for _ in range(GROUP)]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(loaded.device)
    gen = torch.Generator(device=loaded.device).manual_seed(0)

    def hf():
        out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=T,
                             min_new_tokens=T, pad_token_id=tok.pad_token_id)
        return (out.shape[1] - enc["input_ids"].shape[1]) * out.shape[0]

    def ours(decode="plain"):
        # as the engine samples (Policy._sample): the adapter merged into new weights each rollout, which a
        # captured step may have to record again (docs/gpu.md)
        with merged_lora(model):
            r = sample(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=T,
                       eos_token_ids=loaded.eos_token_ids, pad_token_id=tok.pad_token_id, generator=gen,
                       group_size=GROUP, decode=decode)
        return int(r.lengths.sum())

    result = dict(side="generate", batch=len(prompts), new_tokens=T)
    # `captured`: the step compiled and recorded as a CUDA graph (on a CPU the same step uncaptured)
    for name, fn in (("hf_generate", hf), ("ours", ours), ("ours_captured", lambda: ours("captured"))):
        with torch.no_grad():
            t0 = time.perf_counter()
            fn()  # warm-up: kernels, allocator; the captured path's compile and capture
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            warmup = time.perf_counter() - t0
            tokens, t0 = 0, time.perf_counter()
            for _ in range(max(1, args.steps - 1)):
                tokens += fn()
            if cuda:
                torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        result[name] = dict(tokens_per_s=tokens / seconds, tokens=tokens, seconds=seconds, warmup_s=warmup,
                            peak_gib=torch.cuda.max_memory_allocated() / 2**30 if cuda else None)
    result["ratio"] = result["ours"]["tokens_per_s"] / result["hf_generate"]["tokens_per_s"]
    result["captured_ratio"] = result["ours_captured"]["tokens_per_s"] / result["hf_generate"]["tokens_per_s"]
    print_child_result(result)
    return 0


# ---------------------------------------------------------------------------- figures


def gpu_peak_tflops(args) -> tuple[float | None, str]:
    """(dense bf16 peak in TFLOP/s, the GPU's name); --peak-tflops overrides."""
    if args.device != "cuda":
        return None, "cpu"
    import torch

    name = torch.cuda.get_device_name(0)
    if args.peak_tflops:
        return args.peak_tflops, name
    return next((v for key, v in PEAK_BF16_TFLOPS if key in name), None), name


def update_flops(algo: str, params: int, r: dict, prompt_tokens: float) -> float:
    """Model FLOPs of one step's update at 4N a token: forward 2N, activation gradients 2N.
    Frozen base weights get no weight gradients (6N would read 1.5x high); LoRA's FLOPs
    and attention scores (a few %) are left out, so the figure errs low. GRPO: completions
    plus each distinct prompt once, on both sides. PPO: the no-grad policy and reference
    passes (2 x 2N) and 4 epochs of 4N. DPO (reference precomputed): 4N on every token."""
    if algo == "grpo":
        return 4 * params * PROMPTS_PER_STEP * GROUP * (r["mean_length"] + prompt_tokens / GROUP)
    if algo == "ppo":
        return (4 + 4 * 4) * params * r["num_tokens"]
    return 4 * params * r["num_tokens"]


def add_mfu(rows: list[dict], algo: str, params: int, prompt_tokens: float, peak: float | None) -> None:
    for r in rows:
        r["mfu"] = update_flops(algo, params, r, prompt_tokens) / r["update_s"] / (peak * 1e12) if peak else None


def fmt(value, spec: str) -> str:  # noqa: E704
    return "n/a" if value is None else format(value, spec)


def table(rows: list[dict]) -> str:
    header = ("side", "samples/s", "tokens/s", "decode tok/s", "rollout s/step", "update s/step", "peak GiB", "MFU")
    return fmt_table(header, [(r["side"], fmt(r["samples_per_s"], ".2f"), fmt(r["tokens_per_s"], ".0f"),
                               fmt(r.get("decode_tokens_per_s"), ".0f"), fmt(r["rollout_s"], ".2f"),
                               fmt(r["update_s"], ".2f"), fmt(r["peak_gib"], ".2f"), fmt(r.get("mfu"), ".1%"))
                              for r in rows])


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FALLS SHORT")


def goal_lines(results: dict) -> list[str]:
    lines, ours, trl, gen = [], results.get("grpo_ours"), results.get("grpo_trl"), results.get("generate")
    if ours and trl:
        ratio = ours["samples_per_s"] / trl["samples_per_s"]
        lines.append(f"GRPO samples/s ours/TRL: {ratio:.2f}x (goal >= {GOALS['samples_ratio']}x): "
                     f"{verdict(ratio >= GOALS['samples_ratio'])}")
        mem = ours["peak_gib"] / trl["peak_gib"] if ours["peak_gib"] and trl["peak_gib"] else None
        lines.append(f"GRPO peak GPU memory ours/TRL: {fmt(mem, '.2f')}{'x' if mem else ''} (goal <= 1x): "
                     f"{verdict(None if mem is None else mem <= GOALS['memory_ratio'])}")
        if ours["trainable"] != trl["trainable"]:
            lines.append(f"WARNING: LoRA differs: ours trains {ours['trainable']:,} parameters, TRL {trl['trainable']:,}")
    if gen:
        speedup = gen["ours_captured"]["tokens_per_s"] / gen["ours"]["tokens_per_s"]
        lines.append(f"decoding tokens/s, captured/plain: {speedup:.2f}x (goal >= {GOALS['decode_speedup']}x): "
                     f"{verdict(speedup >= GOALS['decode_speedup'])}; ours/HF generate: plain {gen['ratio']:.2f}x, "
                     f"captured {gen['captured_ratio']:.2f}x")
    if ours:
        lines.append(f"GRPO update MFU (ours): {fmt(ours.get('mfu'), '.1%')} (goal >= {GOALS['mfu']:.0%}): "
                     f"{verdict(None if ours.get('mfu') is None else ours['mfu'] >= GOALS['mfu'])}")
    return lines


def speedup_lines(results: dict, device: str) -> list[str]:
    """Each of our speed-ups alone (--ablations): the run with it off against the run with
    every one on, on the figure it is for."""
    ours, lines = results.get("grpo_ours"), []
    if ours and device != "cuda":
        lines.append("(on a CPU model.decode auto decodes plainly: both decode runs take the plain path)")
    off_decode, off_lean = results.get("grpo_ours decode=plain"), results.get("grpo_ours lean update off")
    if ours and off_decode:
        lines.append(f"captured decode alone: rollout {off_decode['rollout_s']:.2f} -> {ours['rollout_s']:.2f} s/step "
                     f"({off_decode['rollout_s'] / ours['rollout_s']:.2f}x), decode "
                     f"{fmt(off_decode.get('decode_tokens_per_s'), '.0f')} -> "
                     f"{fmt(ours.get('decode_tokens_per_s'), '.0f')} tok/s, "
                     f"samples/s {off_decode['samples_per_s']:.2f} -> {ours['samples_per_s']:.2f}")
    if ours and off_lean:
        peaks = (f", peak {off_lean['peak_gib']:.2f} -> {ours['peak_gib']:.2f} GiB"
                 if ours["peak_gib"] and off_lean["peak_gib"] else "")
        lines.append(f"lean update alone: update {off_lean['update_s']:.2f} -> {ours['update_s']:.2f} s/step "
                     f"({off_lean['update_s'] / ours['update_s']:.2f}x){peaks}, samples/s "
                     f"{off_lean['samples_per_s']:.2f} -> {ours['samples_per_s']:.2f}")
    return lines


# -------------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen0.5b")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--steps", type=int, default=5, help="steps a run; the first is warm-up (default 5)")
    p.add_argument("--side", default="all", help="ours, trl, generate, a comma-separated list of them, or all")
    p.add_argument("--ablations", action="store_true",
                   help="our GRPO again with each speed-up off alone: decode plain, lean update off (issue 42)")
    p.add_argument("--smoke", action="store_true",
                   help="the tiny shape on the CPU, 2 steps of 8 tokens, GRPO with --ablations: tests the script")
    p.add_argument("--algorithms", help="ours: comma-separated of grpo,ppo,dpo (default all three; grpo "
                                        "only for qwen1.5b)")
    p.add_argument("--completion-length", type=int, help="max completion tokens (default 256; tiny: 32)")
    p.add_argument("--micro-batch-size", type=int, default=16,
                   help="rows a forward/backward pass, both sides (TRL: per_device_train_batch_size; default 16)")
    p.add_argument("--gradient-checkpointing", action="store_true", help="on for both sides (default off)")
    p.add_argument("--learning-rate", type=float, default=1e-5)
    p.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak, when its name is not known")
    p.add_argument("--timeout", type=float, default=900, help="seconds one child may take (default 900)")
    p.add_argument("--out", type=Path, help="folder for gpu_bench-SHAPE.json")
    p.add_argument("--internal", choices=["trl", "generate"], help=argparse.SUPPRESS)
    p.add_argument("--model-path", help=argparse.SUPPRESS)
    p.add_argument("--work-dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.smoke:
        args.shape, args.device, args.steps, args.ablations = "tiny", "cpu", 2, True
        args.completion_length, args.algorithms = args.completion_length or 8, args.algorithms or "grpo"
    sides = ["ours", "trl", "generate"] if args.side == "all" else [x.strip() for x in args.side.split(",")]
    if not sides or any(x not in ("ours", "trl", "generate") for x in sides):
        p.error(f"--side: {args.side!r}: expected ours, trl, generate, a comma-separated list of them, or all")
    args.sides = sides
    if args.steps < 2:
        p.error("--steps must be at least 2 (the first is warm-up)")
    if (PROMPTS_PER_STEP * GROUP) % args.micro_batch_size or DPO_PAIRS % args.micro_batch_size:
        p.error(f"--micro-batch-size must divide {PROMPTS_PER_STEP * GROUP} and {DPO_PAIRS}")
    args.completion_length = args.completion_length or (32 if args.shape == "tiny" else 256)
    default = "grpo" if args.shape == "qwen1.5b" else "grpo,ppo,dpo"
    args.algorithms = [a.strip() for a in (args.algorithms or default).split(",") if a.strip()]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.internal:
        return {"trl": trl_child, "generate": generate_child}[args.internal](args)
    model = build_model(args.shape, args.device)
    params = parameter_count(model)
    work = RUNS_DIR / f"gpu-bench-{args.shape}-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True, exist_ok=True)
    data = write_data(model, work)
    peak, gpu = gpu_peak_tflops(args)
    print(f"== {args.shape}: {params:,} parameters (tied embeddings counted once), random weights, seed 0; "
          f"{args.device} ({gpu}), {'bf16' if args.device == 'cuda' else 'fp32'}; work folder {work}")
    print(f"   vocabulary {SHAPES[args.shape]['vocab_size'] or data['tokenizer_size']:,} in the model, tokenizer of "
          f"{data['tokenizer_size']} ids (prompts use only those); prompts ~{data['prompt_tokens']:.0f} tokens; "
          + ("the small vocabulary makes EOS likely: completion lengths differ by chance" if args.shape == "tiny" else
             f"random weights almost never sample EOS: completions run to {args.completion_length} tokens on both "
             "sides (the same work)"))
    print(f"   {args.steps} steps, step 1 warm-up; micro-batch {args.micro_batch_size}; gradient checkpointing "
          f"{'on' if args.gradient_checkpointing else 'off'}; MFU = 4N FLOPs/token over update time and "
          + (f"peak {peak:g} TFLOP/s dense bf16" if peak else "no known peak (n/a)"), flush=True)
    results: dict[str, dict] = {}
    for side in args.sides:
        jobs = [("ours", a) for a in args.algorithms] if side == "ours" else [(side, "grpo")]
        if side == "ours" and args.ablations and "grpo" in args.algorithms:
            jobs += [(variant, "grpo") for variant in VARIANTS if variant != "ours"]
        for kind, algo in jobs:
            print(f"[{args.shape}] {kind} {algo if kind != 'generate' else ''} ...", file=sys.stderr, flush=True)
            if kind.startswith("ours"):
                r = run_ours(args, algo, model, data, work, variant=kind)
            else:
                r = run_internal(args, kind, model, work)
            results["generate" if kind == "generate" else f"{algo}_{kind}"] = r
    for algo in ("grpo", "ppo", "dpo"):
        keys = [f"{algo}_{variant}" for variant in VARIANTS] + [f"{algo}_trl"]
        rows = [results[k] for k in keys if k in results]
        if rows:
            add_mfu(rows, algo, params, data["prompt_tokens"], peak)
            lengths = ", ".join(f"{r['side']} {r['mean_length']:.1f}" for r in rows if "mean_length" in r)
            print(f"\n{algo.upper()} ({'pairs' if algo == 'dpo' else 'completions'}/s; tokens/s: prompt + completion "
                  f"tokens a second of wall time" + (f"; mean completion length {lengths})" if lengths else ")"))
            print(table(rows))
    if "generate" in results:
        g = results["generate"]
        print(f"\ndecoding, batch {g['batch']} x {g['new_tokens']} new tokens, sampling, tok/s (peak GiB; warm-up s):")
        for name, label in (("hf_generate", "HF generate"), ("ours", "ours, plain"),
                            ("ours_captured", "ours, captured" if args.device == "cuda" else "ours, static")):
            print(f"  {label:16s} {g[name]['tokens_per_s']:8.0f}  ({fmt(g[name]['peak_gib'], '.2f')}; "
                  f"{g[name]['warmup_s']:.1f})")
    speedups = speedup_lines(results, args.device)
    if speedups:
        print("\nspeed-ups, each alone (GRPO; off -> on):\n  " + "\n  ".join(speedups))
    lines = goal_lines(results)
    if lines:
        print("\ngoals:\n  " + "\n  ".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"gpu_bench-{args.shape}.json"
        path.write_text(json.dumps(dict(shape=args.shape, device=args.device, gpu=gpu, peak_tflops=peak,
                                        params=params, steps=args.steps, results=results, goals=lines,
                                        speedups=speedups), indent=2,
                                   default=str))
        print(f"figures written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
