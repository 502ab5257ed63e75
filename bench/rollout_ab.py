"""Each of the engine's speed-ups on and off, in one process: the before/after of each change.

    python bench/rollout_ab.py                       # built-in model, every change alone and all
    python bench/rollout_ab.py --model 10x --rounds 4 --per 2

The configuration is `bench/grpo_vs_trl.py`'s (64 completions a step as 8 x 8, 16 tokens
at most, fp32 CPU). One trainer is built; the configurations take turns, `--per` steps each,
for `--rounds` rounds (after one untimed step each), so that they share the machine's
state and its noise; each step is `train_step` plus writing its events, samples and
records. The figure is each configuration's median step time and its speed-up over
`none`. Switched with the engine's own parts, put back or replaced in this process only:

- `merge`: sampling with the LoRA adapter merged into copies of its weights
  (engine/model/merged_lora.py); off: sampling through peft's layers.
- `cache`: the decoding KV cache written in place (engine/model/kv_cache.py); off:
  transformers' cache, grown by `torch.cat` every token.
- `gelu`: `gelu_new` as one fused kernel (engine/model/activations.py); off: transformers'
  eight-op `NewGELUActivation` (on models that use it: GPT-2's family, the built-in model).
- `ref`: the reference mode that switches the adapter's layers itself
  (engine/model/loading.reference_mode); off: peft's `disable_adapter()`.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, prepare_model  # noqa: E402

CHANGES = ("merge", "cache", "gelu", "ref")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny", choices=("tiny", "10x"))
    p.add_argument("--configs", default="none,merge,cache,gelu,ref,all",
                   help="comma-separated: none, all, or changes joined with + (e.g. merge+cache)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--per", type=int, default=3, help="steps of a configuration in a round")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    return p.parse_args(argv)


def changes_of(config: str) -> set[str]:
    """e.g. "none" -> set(), "all" -> every change, "merge+gelu" -> {"merge", "gelu"}"""
    if config == "all":
        return set(CHANGES)
    named = set(config.split("+")) - {"none"}
    unknown = named - set(CHANGES)
    if unknown:
        raise SystemExit(f"--configs: unknown change(s) {sorted(unknown)}; known: none, all, {', '.join(CHANGES)}")
    return named


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers.activations import GELUTanh, NewGELUActivation

    import engine.algorithms.policy as policy_module
    import engine.model.rollout as rollout_module
    import grpo_vs_trl
    from engine.commands.train import build_trainer
    from engine.preset.schema import load_preset

    path, note = prepare_model(args.model)
    work = OUT / "runs" / "rollout-ab"
    shutil.rmtree(work, ignore_errors=True)
    settings = argparse.Namespace(num_generations=8, max_completion_length=16, num_train=4000, steps=10_000,
                                  batch_size=64, learning_rate=2e-3)
    preset = load_preset(grpo_vs_trl.write_preset(settings, path, work / "preset.yaml"),
                         ["training.eval_steps=0", "training.save_steps=0"])
    trainer = build_trainer(preset, work / "run", preset_dir=work)
    trainer.run_dir.mkdir(parents=True, exist_ok=True)
    trainer.events.open(trainer.run_dir, trainer.cfg.report_to, True, on_alarm=lambda *a, **k: None)

    on_parts = {"merge": policy_module.merged_lora, "cache": rollout_module.preallocate,
                "ref": policy_module.reference_mode}

    @contextlib.contextmanager
    def unmerged(model, *_):
        yield 0

    @contextlib.contextmanager
    def peft_reference(model):
        with model.disable_adapter():
            yield model

    off_parts = {"merge": unmerged, "cache": lambda cache, room: cache, "ref": peft_reference}
    homes = {"merge": (policy_module, "merged_lora"), "cache": (rollout_module, "preallocate"),
             "ref": (policy_module, "reference_mode")}

    def configure(changes: set[str]) -> None:
        for name, (module, attribute) in homes.items():
            setattr(module, attribute, on_parts[name] if name in changes else off_parts[name])
        activation = GELUTanh if "gelu" in changes else NewGELUActivation
        for parent in list(trainer.model.modules()):
            for child_name, child in list(parent.named_children()):
                if type(child) in (GELUTanh, NewGELUActivation):
                    setattr(parent, child_name, activation())

    def step() -> tuple[float, float]:
        started = time.perf_counter()
        result = trainer.train_step()
        trainer.events.metrics(trainer.step, result.metrics, True)
        trainer.write_step_outputs(result.outputs)
        return time.perf_counter() - started, result.metrics["completions/mean_length"]

    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    times: dict[str, list[float]] = {c: [] for c in configs}
    lengths: dict[str, list[float]] = {c: [] for c in configs}
    for config in configs:  # one untimed step each
        configure(changes_of(config))
        step()
    for _ in range(args.rounds):
        for config in configs:
            configure(changes_of(config))
            for _ in range(args.per):
                seconds, length = step()
                times[config].append(seconds)
                lengths[config].append(length)
    configure(set(CHANGES))
    print(f"{args.model}: {path} ({note}); {args.rounds} rounds x {args.per} steps a configuration, "
          f"torch threads {torch.get_num_threads()}")
    first = statistics.median(times[configs[0]])
    print(f"{'configuration':16s} {'median step ms':>15s} {'speed-up':>9s} {'mean compl. len':>16s}")
    for config in configs:
        median = statistics.median(times[config])
        print(f"{config:16s} {median * 1e3:15.1f} {first / median:8.3f}x {statistics.fmean(lengths[config]):16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
