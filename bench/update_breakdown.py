"""Where a GRPO update's time goes, ours (lean update on and off) next to TRL's, in one process.

    python bench/update_breakdown.py                        # Qwen-vocabulary model, 16 completions a step
    python bench/update_breakdown.py --model 10x --batch-size 64 --steps 4 --threads 2

The configuration is bench/grpo_vs_trl.py's (same preset fields, TRL's GRPOTrainer built
by the same function). Our trainer and TRL's are built once each; the sides take turns,
a step each, for `--steps` steps after one untimed step each (`ours` with the lean update
on, `plain` with it off: engine.model.token_logits.LEAN_UPDATE), so that they share the
machine's noise. Each part is timed by wrapping the function that does it, as self time
(a wrapped call inside another is not counted twice):

- backbone forward: the decoder under the LM head (ours: engine/model/forward.py's passes;
  TRL: its fused forward less its LM-head function);
- LM head forward: logits and log-probabilities, chunk by chunk (ours: _FusedLinearLogprob
  or _LinearLogprob; TRL: trl.kernels' ChunkedLogProbFunction, whose forward also gives the
  entropy), entropy and top-5 in a pass of their own where one runs (ours, lean off);
- LM head backward (TRL's recomputes the logits); backbone backward (the rest of backward);
- loss maths (ours: grpo_loss; TRL: compute_loss less its forward);
- optimizer: clipping and the AdamW step;
- inspector passes (ours: the recorded rows' reference pass and the after-update look);
- host syncs: calls that read a tensor on the host (Tensor.item / .tolist / .cpu, float(),
  int(), bool() of a tensor) in the update's own work (not its rollout, the inspector's
  passes or the optimizer step), counted, not timed: on the CPU they cost nothing, on a GPU
  each waits for the queue.

Printed: a table of milliseconds a step (median over the timed steps) per part and side.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, fmt_table, prepare_model  # noqa: E402

PARTS = ("backbone forward", "LM head forward", "entropy (own pass)", "top-5 (own pass)", "LM head backward",
         "backbone backward", "loss maths", "optimizer", "inspector passes", "other")


class Clock:
    """Self times of named parts: a part's time less that of the parts timed inside it."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.stack: list[list] = []  # [name, started, inner seconds]
        self.syncs = 0

    @property
    def counting(self) -> bool:
        """Host syncs count inside the update's own work: under "other" (our update, TRL's
        training_step), outside the rollout, the inspector's passes and the optimizer."""
        names = [entry[0] for entry in self.stack]
        return bool(names) and names[0] == "other" and not {"rollout", "inspector passes", "optimizer"} & set(names)

    @contextlib.contextmanager
    def part(self, name: str):
        self.stack.append([name, time.perf_counter(), 0.0])
        try:
            yield
        finally:
            name, started, inner = self.stack.pop()
            total = time.perf_counter() - started
            self.seconds[name] += total - inner
            if self.stack:
                self.stack[-1][2] += total

    def wrap(self, owner, attribute: str, name: str) -> None:
        """Time every call of owner.attribute as `name` (a function, method or staticmethod)."""
        original = getattr(owner, attribute)
        raw = owner.__dict__.get(attribute) if isinstance(owner, type) else None
        clock = self

        def timed(*a, **kw):
            with clock.part(name):
                return original(*a, **kw)

        setattr(owner, attribute, staticmethod(timed) if isinstance(raw, staticmethod) else timed)

    def take(self) -> dict[str, float]:
        taken, self.seconds = dict(self.seconds), defaultdict(float)
        return taken


def count_syncs(clock: Clock) -> None:
    """Count the calls that read a tensor on the host (Tensor.item / tolist / cpu, float(),
    int(), bool() of a tensor) while clock.counting is set."""
    import torch

    for attribute in ("item", "tolist", "cpu", "__float__", "__int__", "__bool__"):
        original = getattr(torch.Tensor, attribute)

        def counted(self, *a, _original=original, **kw):
            if clock.counting:
                clock.syncs += 1
            return _original(self, *a, **kw)

        setattr(torch.Tensor, attribute, counted)


def our_trainer(args, folder: Path, clock: Clock):
    """Our GRPO trainer in grpo_vs_trl's configuration, its parts wrapped by `clock`:
    a function that takes one step and returns {part: seconds}."""
    import engine.algorithms.grpo.trainer as grpo_module
    import engine.algorithms.step as step_module
    import engine.model.forward as forward_module
    import engine.model.token_logits as token_logits
    import grpo_vs_trl
    from engine.commands.train import build_trainer
    from engine.preset.schema import load_preset

    work = OUT / "runs" / "update-breakdown"
    shutil.rmtree(work, ignore_errors=True)
    preset = load_preset(grpo_vs_trl.write_preset(args, folder, work / "preset.yaml"),
                         ["training.eval_steps=0", "training.save_steps=0"])
    trainer = build_trainer(preset, work / "run", preset_dir=work)
    trainer.run_dir.mkdir(parents=True, exist_ok=True)
    trainer.events.open(trainer.run_dir, trainer.cfg.report_to, True, on_alarm=lambda *a, **k: None)

    clock.wrap(forward_module, "plain_completion_hidden", "backbone forward")
    clock.wrap(forward_module, "shared_prefix_completion_hidden", "backbone forward")
    for function in (token_logits._FusedLinearLogprob, token_logits._LinearLogprob):
        clock.wrap(function, "forward", "LM head forward")
        clock.wrap(function, "backward", "LM head backward")
    clock.wrap(token_logits.TokenLogits, "entropy", "entropy (own pass)")
    clock.wrap(token_logits.TokenLogits, "top", "top-5 (own pass)")
    clock.wrap(grpo_module, "grpo_loss", "loss maths")
    clock.wrap(step_module, "logprobs_after_update", "inspector passes")
    clock.wrap(trainer.policy, "reference_logprobs", "inspector passes")
    clock.wrap(trainer, "backward", "backbone backward")
    clock.wrap(trainer, "clip_and_step", "optimizer")
    update = trainer.update

    def timed_update(batch):
        with clock.part("other"):
            return update(batch)

    trainer.update = timed_update

    def step(lean: bool) -> dict[str, float]:
        token_logits.LEAN_UPDATE = lean
        clock.take()
        clock.syncs = 0
        result = trainer.train_step()
        trainer.events.metrics(trainer.step, result.metrics, True)
        trainer.write_step_outputs(result.outputs)
        return {**clock.take(), "host syncs": clock.syncs}

    return step


def trl_step_function(args, folder: Path, clock: Clock):
    """TRL's GRPOTrainer in grpo_vs_trl's configuration, its parts wrapped by `clock`: a
    function that trains one more step and returns {part: seconds}."""
    import trl.kernels.chunked_logprob as kernels
    import grpo_vs_trl
    from transformers import TrainerCallback

    work = OUT / "runs" / "update-breakdown-trl"
    shutil.rmtree(work, ignore_errors=True)
    steps: list[dict] = []

    class Recorder(TrainerCallback):
        """Each step's parts; the optimizer's is from the end of training_step (the
        forward and backward passes) to the end of the step: clipping and AdamW."""

        def on_step_begin(self, _args, state, control, **kw):
            clock.take()
            clock.syncs = 0

        def on_step_end(self, _args, state, control, **kw):
            parts = clock.take()
            parts.pop("rollout", None)
            parts["optimizer"] = time.perf_counter() - clock.training_step_end
            steps.append({**parts, "host syncs": clock.syncs})

    trainer, *_ = grpo_vs_trl.trl_trainer(args, folder, work, [Recorder()])
    clock.wrap(kernels.ChunkedLogProbFunction, "forward", "LM head forward")
    clock.wrap(kernels.ChunkedLogProbFunction, "backward", "LM head backward")
    clock.wrap(trainer, "_get_per_token_logps_and_entropies", "backbone forward")
    clock.wrap(trainer, "compute_loss", "loss maths")
    clock.wrap(trainer.accelerator, "backward", "backbone backward")
    clock.wrap(trainer, "_generate_and_score_completions", "rollout")
    training_step = trainer.training_step

    def timed_training_step(*a, **kw):
        with clock.part("other"):
            out = training_step(*a, **kw)
        clock.training_step_end = time.perf_counter()
        return out

    trainer.training_step = timed_training_step
    return trainer, steps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen-vocab", help="tiny, 10x or qwen-vocab (default)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--max-completion-length", type=int, default=16)
    p.add_argument("--steps", type=int, default=3, help="timed steps a side (default 3)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--sides", default="ours,plain,trl")
    args = p.parse_args(argv)
    args.learning_rate, args.num_train, args.warmup = 2e-3, 2000, 1
    args.steps_total = args.steps + 1
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    folder, note = prepare_model(args.model)
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    clock = Clock()
    count_syncs(clock)
    results: dict[str, list[dict]] = {side: [] for side in sides}
    ours = None
    if {"ours", "plain"} & set(sides):
        args.steps = 10_000  # our trainer's max_steps: it is stepped by hand
        ours = our_trainer(args, folder, clock)
    trl = None
    if "trl" in sides:
        args.steps = args.steps_total  # TRL's max_steps: it trains them in one train() call
        trl = trl_step_function(args, folder, clock)
    # ours: one untimed step a side, then the sides take turns a step each
    for side in (s for s in sides if s != "trl"):
        ours(side == "ours")
    for _ in range(args.steps_total - 1):
        for side in (s for s in sides if s != "trl"):
            results[side].append(ours(side == "ours"))
    if trl is not None:
        trainer, steps = trl
        trainer.train()  # TRL's steps run in one go (its loop cannot be paused); the first is untimed
        results["trl"] = steps[1:]
    rows = []
    names = [*PARTS, "host syncs"]
    for name in names:
        cells = [name]
        for side in sides:
            values = [r.get(name, 0.0) for r in results[side]]
            median = statistics.median(values) if values else 0.0
            cells.append(f"{median:.0f}" if name == "host syncs" else f"{median * 1e3:.0f}")
        rows.append(tuple(cells))
    totals = ["update total"]
    for side in sides:
        total = statistics.median(sum(v for k, v in r.items() if k in PARTS) for r in results[side])
        totals.append(f"{total * 1e3:.0f}")
    rows.append(tuple(totals))
    print(f"{args.model}: {folder} ({note}); {args.batch_size} completions a step "
          f"({args.batch_size // args.num_generations} x {args.num_generations}), up to {args.max_completion_length} "
          f"tokens; torch threads {torch.get_num_threads()}; median of {len(results[sides[0]])} steps a side; "
          "ms a step")
    print("ours = lean update on, plain = off (RL_ENGINE_LEAN_UPDATE=0); 'other': the rest of our update "
          "(TRL: of its training_step, its rollout left out)")
    print(fmt_table(("part", *sides), rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
