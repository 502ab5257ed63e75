"""Training steps and short runs of bundled presets, in this process (`one_step`, imported:
the one-process reference) or in several under torchrun (run as a script), for
tests/test_distributed.py. Several presets in one launch, one after another in the same
process group, so the launch (imports, the group forming) is paid once:

- a step: one training step on a fixed rollout (GRPO, PPO) or on the step's pairs (DPO):
  the trainable parameters' gradients, their values after the step, the step's metrics
  and the adapter's tensor shapes, rank by rank, to OUT/NAME_rankN.pt;
- a run: Trainer.run to the preset's max_steps, into OUT/NAME/ (rank 0 writes it);
- a resume: OUT/FROM (an earlier job's run) copied to OUT/NAME as if killed right after
  its checkpoint of STEP (`cut_after_checkpoint`), then Trainer.run from that checkpoint
  to max_steps, as `rl-engine resume` runs it.

    torchrun --standalone --nproc-per-node 2 tests/distributed_step.py OUT JOBS.json
    JOBS.json: [{"kind": "step", "run" or "resume", "name": NAME, "preset": PATH, "sets": [KEY=VALUE, ...],
                 "from": FROM, "step": STEP (a resume's)}, ...]
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.commands.train import build_trainer  # noqa: E402
from engine.distributed.sharding import full_tensor  # noqa: E402
from engine.distributed.world import World, init_world  # noqa: E402
from engine.preset.schema import load_preset  # noqa: E402
from engine.run import rundir  # noqa: E402


def one_step(preset_path: str | Path, sets: list[str], run_dir: str | Path, world: World | None = None) -> dict:
    """One step of the preset with `sets` (in `world`; one process when None): the
    trainable parameters' gradients and values after it (whole tensors, FSDP2's shards
    gathered), the metrics, whether layers were sharded, and the adapter's shapes as a
    one-process checkpoint saves it."""
    from peft import get_peft_model_state_dict

    preset = load_preset(preset_path, sets)
    trainer = build_trainer(preset, run_dir, preset_dir=Path(preset_path).parent, world=world or World())
    if preset.algorithm.name != "dpo":
        # The same rollout on every rank and in one process: all of the step's prompts,
        # sampled with one seed (what the gradient comparison needs fed alike).
        def fixed_rollout(prompts, group_size, greedy=False, fields=None):
            trainer.random_states.sample_generator = torch.Generator().manual_seed(1234)
            rollout = trainer.generate(prompts, group_size=group_size)
            return rollout, trainer.policy.decode_completions(rollout)

        trainer.sample_batch = fixed_rollout
    metrics = trainer.train_step().metrics
    params = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    if hasattr(trainer, "value_head"):
        params.update({f"value_head.{n}": p for n, p in trainer.value_head.named_parameters()})
    whole = full_tensor  # FSDP2's shards (training.fsdp), gathered; other tensors as they are
    result = {"grads": {n: whole(p.grad.detach()).clone() for n, p in params.items()},
              "weights": {n: whole(p.detach()).clone() for n, p in params.items()},
              "metrics": metrics, "sharded": bool(trainer.sharded_layers)}
    if not trainer.sharded_layers:
        result["adapter_shapes"] = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(trainer.model).items()}
    return result


def one_run(preset_path: str | Path, sets: list[str], run_dir: str | Path, world: World,
            resume_from: Path | None = None) -> str:
    """The preset with `sets` trained to its max_steps in `world` (Trainer.run: run_started,
    evaluations, checkpoints, samples and trajectories, run_finished), from `resume_from`
    (a checkpoint in `run_dir`) when given; "done" or "stopped"."""
    preset = load_preset(preset_path, sets)
    return build_trainer(preset, run_dir, preset_dir=Path(preset_path).parent, world=world).run(
        resume_from=resume_from)


def cut_after_checkpoint(run_dir: Path, step: int) -> None:
    """`run_dir` as a run killed right after its checkpoint of `step`: later checkpoints
    and the events after that checkpoint's event gone."""
    for later in rundir.complete_checkpoints(run_dir):
        if int(later.name.split("_")[1]) > step:
            shutil.rmtree(later)
    lines = (run_dir / rundir.EVENTS_FILE).read_text(encoding="utf-8").splitlines(keepends=True)
    (end,) = [i for i, line in enumerate(lines)
              if json.loads(line)["type"] == "checkpoint" and json.loads(line)["step"] == step]
    (run_dir / rundir.EVENTS_FILE).write_text("".join(lines[:end + 1]), encoding="utf-8")


def main(out: Path, jobs: list[dict]) -> None:
    world = init_world("cpu")
    for job in jobs:
        if job["kind"] == "step":
            result = one_step(job["preset"], job["sets"], out / f"{job['name']}.scratch", world)
            torch.save(result, out / f"{job['name']}_rank{world.rank}.pt")
        elif job["kind"] == "resume":
            run_dir = out / job["name"]
            if world.is_main:
                shutil.copytree(out / job["from"], run_dir)
                cut_after_checkpoint(run_dir, job["step"])
            torch.distributed.barrier()  # the copy is there before any rank reads it
            one_run(job["preset"], job["sets"], run_dir, world, run_dir / "checkpoints" / f"step_{job['step']:06d}")
        else:
            one_run(job["preset"], job["sets"], out / job["name"], world)
    # Both ranks done before the group is torn down: under load, rank 1 closing while
    # rank 0 was still in its last collective ended rank 1 in std::terminate (exit -6)
    # after every job's results were written (seen once in a CI run with two workers).
    torch.distributed.barrier()
    world.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()))
