"""Held-out evaluation by generation: greedy completions of the held-out prompts, their
rewards, and accuracy by the preset's first verifier. Given the examples, a function that
completes prompts and the rewards, not the trainer; DPO adds its preference accuracy
(engine/algorithms/dpo/trainer.py).
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from engine.data import Example
from engine.rewards import build_reward, combine_rewards

__all__ = ["accuracy_function", "evaluate_generations"]

# Held-out prompts decoded at once: at least this many, or training.batch_size.
MIN_EVAL_BATCH = 32


def accuracy_function(rewards: list, name: str | None):
    """The reward that judges accuracy (`name`, from engine.data.accuracy_reward_name),
    built with the options the preset's `rewards` give it, if they list it; None
    without one."""
    if not name:
        return None
    options = next((r.options for r in rewards if r.name == name), {})
    return build_reward(name, **options)


@torch.no_grad()
def evaluate_generations(examples: list[Example], complete: Callable[[list[str]], list[str]],
                         reward_components: list, accuracy, batch: int) -> dict:
    """Greedy decoding on the held-out split: accuracy and mean reward.

    `complete(prompts, fields)`: the greedy completions' text (or, for episodes, the texts,
    the fields their rewards receive besides the data's and the prompts as the model saw
    them: what the samples show); `accuracy`: the reward whose 1.0
    counts as correct (None: no accuracy); `batch`: prompts decoded at once. Returns
    {} without examples, else reward, accuracy, num_examples, eval_time, the first
    samples and each reward component's mean (`rewards/NAME/mean`)."""
    if not examples:
        return {}
    t0 = time.perf_counter()
    totals, comps, correct, samples = [], {}, [], []
    for i in range(0, len(examples), batch):
        chunk = examples[i: i + batch]
        prompts = [e.prompt for e in chunk]
        fields = {k: [e.fields.get(k) for e in chunk] for k in sorted({k for e in chunk for k in e.fields})}
        completions = complete(prompts, fields)
        shown = prompts
        if isinstance(completions, tuple):  # episodes: their answers, what rewards receive of them, their prompts
            completions, extra, shown = completions
            fields = {**fields, **extra}
        t, c = combine_rewards(reward_components, prompts, completions, fields)
        totals += t
        for k, v in c.items():
            comps.setdefault(k, []).extend(v)
        if accuracy is not None:
            correct += [float(v == 1.0) for v in accuracy(prompts, completions, **fields)]
        if not samples:
            samples = [{"prompt": p, "completion": c_, "reward": r}
                       for p, c_, r in zip(shown[:8], completions[:8], t[:8])]
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
