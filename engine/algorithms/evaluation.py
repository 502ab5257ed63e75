"""Held-out evaluation by generation: greedy completions of the held-out prompts, their
rewards, and accuracy by the preset's first verifier. `self` is the Trainer
(engine/algorithms/base.py); DPO adds its preference accuracy (engine/algorithms/dpo/trainer.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from engine.rewards import build_reward, combine_rewards

if TYPE_CHECKING:
    from engine.algorithms.base import Trainer

__all__ = ["evaluate_generations"]


@torch.no_grad()
def evaluate_generations(self: "Trainer") -> dict:
    """Greedy decoding on the held-out split: accuracy and mean reward."""
    if not self.eval_examples:
        return {}
    t0 = time.perf_counter()
    batch = max(self.cfg.batch_size, 32)
    totals, comps, correct, samples = [], {}, [], []
    acc_fn = None
    if self.accuracy_reward:  # with the options the preset gives that reward, if it has it
        options = next((r.options for r in self.preset.rewards if r.name == self.accuracy_reward), {})
        acc_fn = build_reward(self.accuracy_reward, **options)
    for i in range(0, len(self.eval_examples), batch):
        chunk = self.eval_examples[i: i + batch]
        prompts = [e.prompt for e in chunk]
        fields = {k: [e.fields.get(k) for e in chunk] for k in sorted({k for e in chunk for k in e.fields})}
        completions = self.decode_completions(self.generate(prompts, greedy=True))
        t, c = combine_rewards(self.reward_components, prompts, completions, fields)
        totals += t
        for k, v in c.items():
            comps.setdefault(k, []).extend(v)
        if acc_fn is not None:
            correct += [float(v == 1.0) for v in acc_fn(prompts, completions, **fields)]
        if not samples:
            samples = [{"prompt": p, "completion": c_, "reward": r}
                       for p, c_, r in zip(prompts[:8], completions[:8], t[:8])]
    result = {
        "reward": sum(totals) / len(totals),
        "accuracy": (sum(correct) / len(correct)) if correct else None,
        "num_examples": len(totals),
        "eval_time": time.perf_counter() - t0,
        "samples": samples,
    }
    for k, v in comps.items():
        result[f"rewards/{k}/mean"] = sum(v) / len(v)
    return result
