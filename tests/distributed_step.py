"""One training step of a bundled preset on a fixed rollout, in one process (run with
python) or several (run under torchrun): writes the trainable parameters' gradients,
their values after the step and the step's metrics, rank by rank, to OUT_rankN.pt.
tests/test_distributed.py compares a 1-process and a 2-process step.

    python tests/distributed_step.py PRESET OUT [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.algorithms import build_trainer  # noqa: E402
from engine.distributed.sharding import full_tensor  # noqa: E402
from engine.distributed.world import init_world  # noqa: E402
from engine.preset.schema import load_preset  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("preset")
    parser.add_argument("out")
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()
    preset = load_preset(args.preset, args.set)
    world = init_world("cpu")
    trainer = build_trainer(preset, tempfile.mkdtemp(), preset_dir=Path(args.preset).parent, world=world)
    if preset.algorithm.name != "dpo":
        # The same rollout on every rank and in one process: all of the step's prompts,
        # sampled with one seed (what the gradient comparison needs fed alike).
        def fixed_rollout(prompts, group_size):
            trainer.sample_generator = torch.Generator().manual_seed(1234)
            rollout = trainer.generate(prompts, group_size=group_size)
            return rollout, trainer.decode_completions(rollout)

        trainer.sample_batch = fixed_rollout
    metrics = trainer.train_step()
    params = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    if hasattr(trainer, "value_head"):
        params.update({f"value_head.{n}": p for n, p in trainer.value_head.named_parameters()})
    whole = full_tensor  # FSDP2's shards (training.fsdp), gathered; other tensors as they are
    torch.save({"grads": {n: whole(p.grad.detach()).clone() for n, p in params.items()},
                "weights": {n: whole(p.detach()).clone() for n, p in params.items()},
                "metrics": metrics, "sharded": bool(trainer.sharded_layers)}, f"{args.out}_rank{world.rank}.pt")
    world.close()


if __name__ == "__main__":
    main()
