"""The Hub presets (presets/hub/*.yaml) at their real shapes on a GPU, with and without QLoRA.

No machine here can download Qwen2.5-0.5B-Instruct, GSM8K or UltraFeedback, so a temporary
Hugging Face cache holds stand-ins under the real ids: a model of Qwen2.5-0.5B's exact shape
(random bf16 weights, gpu_bench.build_model; the test tokenizer with Qwen2.5's chat template)
and data sets in the real formats (tests/hub_fixtures.py). Each preset then runs through the
CLI as a user would run it (`python -m engine run PRESET`), at its own batch, micro-batch and
completion length, for a few steps, once as written and once with model.load_in_4bit: true.

    python bench/gpu_hub_shapes.py --steps 4 --out bench/out/gpu

Prints, per preset and precision: seconds a step after the first, the peak GPU memory the
process allocated (torch.cuda.max_memory_allocated), the engine's own estimate (what
`rl-engine validate` prints) and their ratio. Random weights almost never sample EOS, so GRPO
completions run to max_completion_length: the heaviest step the preset can take.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from common import read_our_run, run_child  # noqa: E402
from gpu_bench import OURS_WRAPPER, build_model, peak_gib  # noqa: E402

PRESETS = sorted((ROOT / "presets" / "hub").glob("*.yaml"))
# Data sets but GSM8K read from a local folder (the fixture's cache layout declares train and
# test splits only, UltraFeedback has train_prefs and test_prefs): same rows, same format. The
# SFT and reward-model sets are saved under the real sets' split names (hub_fixtures.py).
DATA_SETS = {"dpo": lambda work: [f"data.dataset={work / 'prefs'}", "data.split=train", "data.eval_split=test"],
             "sft": lambda work: [f"data.dataset={work / 'chats'}"],
             "rm": lambda work: [f"data.dataset={work / 'ultrafeedback'}"]}


def fill_cache(hf_home: Path, work: Path, shape: str) -> None:
    """A model of `shape` (Qwen2.5-0.5B's) under the real id; GSM8K under its own, the
    preference and chat sets in a folder each (DATA_SETS)."""
    import hub_fixtures as hf

    model = build_model(shape, "cuda" if shape != "tiny" else "cpu")
    hf.cache_model(hf_home, "Qwen/Qwen2.5-0.5B-Instruct", model)
    hf.cache_dataset(hf_home, "openai/gsm8k", hf.make_gsm8k_parquet_pair(work / "gsm8k"), config_name="main")
    hf.make_preference_set(work / "prefs", "save_to_disk")  # DPO: read from disk (DATA_SETS)
    hf.make_chat_set(work / "chats", "save_to_disk")  # SFT and the reward model: from disk too
    hf.make_ultrafeedback_set(work / "ultrafeedback", "save_to_disk")


def estimate_gib(preset: Path, sets: list[str], env: dict) -> tuple[float | None, str]:
    """The engine's memory estimate, read from the line `rl-engine validate` prints."""
    cmd = [sys.executable, "-m", "engine", "validate", str(preset)] + [a for s in sets for a in ("--set", s)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    line = next((l.strip() for l in out.stdout.splitlines() if l.strip().startswith("memory:")), "")
    found = re.search(r"needs about ([0-9.]+) (GiB|MiB)", line)
    if not found:
        return None, line or (out.stdout + out.stderr)[-300:]
    return float(found.group(1)) / (1024 if found.group(2) == "MiB" else 1), line


def run_one(preset: Path, four_bit: bool, steps: int, work: Path, env: dict) -> dict:
    name = preset.stem + (" +4bit" if four_bit else "")
    run_dir = work / (preset.stem + ("-4bit" if four_bit else ""))
    sets = [f"training.max_steps={steps}", "training.eval_steps=0", "training.save_steps=0",
            "data.num_train=32", "data.num_eval=4", f"model.load_in_4bit={'true' if four_bit else 'false'}"]
    sets += DATA_SETS.get(preset.stem.split("-")[0], lambda _: [])(work)
    cmd = [sys.executable, "-c", OURS_WRAPPER, "run", str(preset), "--run-dir", str(run_dir), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    log = work / f"{run_dir.name}.log"
    rc, _rss, wall = run_child(cmd, log, env, timeout=3600)
    result = dict(preset=name, rc=rc, wall_s=wall, peak_gib=peak_gib(log))
    if rc != 0:
        result["error"] = log.read_text(errors="replace")[-1500:]
        return result
    run = read_our_run(run_dir, 1, steps)  # step 1 is warm-up: seconds a step after it
    metrics = run["metrics"]
    result.update(step_s=run["window"] / (steps - 1) if steps > 1 else None,
                  loss=[metrics[s].get("loss") for s in sorted(metrics)],
                  mean_length=[metrics[s].get("completions/mean_length") for s in sorted(metrics)])
    result["estimate_gib"], result["validate_line"] = estimate_gib(preset, sets, env)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--out", type=Path)
    p.add_argument("--no-4bit", action="store_true", help="skip the QLoRA runs")
    p.add_argument("--shape", choices=["qwen0.5b", "tiny"], default="qwen0.5b",
                   help="tiny: a CPU smoke test of this script (with --no-4bit)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpu-hub-"))
    env = dict(os.environ, HF_HOME=str(work / "hf_home"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    os.environ.update(HF_HOME=env["HF_HOME"], HF_HUB_OFFLINE="1")
    fill_cache(work / "hf_home", work, args.shape)
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    print(f"== hub presets at {args.shape}'s shape (random weights), {gpu}, {args.steps} steps, work {work}",
          flush=True)
    results = []
    for preset in PRESETS:
        for four_bit in (False,) if args.no_4bit else (False, True):
            r = run_one(preset, four_bit, args.steps, work, env)
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "error"}), flush=True)
            if r["rc"]:
                print(r["error"], flush=True)
    print("\npreset                                   s/step  peak GiB  estimate GiB  est/peak")
    for r in results:
        ratio = (r["estimate_gib"] / r["peak_gib"]) if r.get("estimate_gib") and r.get("peak_gib") else None
        fmt = lambda v, s: "n/a" if v is None else format(v, s)  # noqa: E731
        print(f"{r['preset']:<40} {fmt(r.get('step_s'), '6.2f')}  {fmt(r.get('peak_gib'), '8.2f')}  "
              f"{fmt(r.get('estimate_gib'), '12.2f')}  {fmt(ratio, '8.2f')}" + ("" if not r["rc"] else f"  FAILED rc={r['rc']}"))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_hub_shapes.json").write_text(json.dumps(dict(gpu=gpu, steps=args.steps, results=results),
                                                                 indent=2, default=str))
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
