"""The metrics every online step logs: of the sampled batch (rewards, lengths) and of
the step's time and throughput. With several processes every rank holds the whole
batch (engine/distributed), so these are the whole batch's; rank 0's clock times it.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

from engine.model.rollout import Rollout

__all__ = ["PassClock", "rollout_metrics", "timing_metrics"]


def rollout_metrics(rollout: Rollout, rewards: torch.Tensor, components: dict) -> dict:
    """Metrics of a sampled batch that every online algorithm logs."""
    lengths = rollout.model_lengths  # an episode's tokens the model wrote (as TRL counts them)
    metrics = {
        "reward": float(rewards.mean()),
        "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": float(rollout.truncated.float().mean()),
    }
    for name, values in components.items():
        t = torch.tensor(values, dtype=torch.float32)
        metrics[f"rewards/{name}/mean"] = float(t.mean())
        metrics[f"rewards/{name}/std"] = float(t.std()) if len(values) > 1 else 0.0
    return metrics


def timing_metrics(times: list[float], samples: int, tokens: int, generated: int | None = None, *,
                   learning_rate: float, skipped_steps: int, loss_scale: float | None = None) -> dict:
    """times: perf_counter at the start, after the rollout, after rewards, at the end.
    `samples` and `tokens` are the whole step's (every process's); `generated`: the
    rollout's tokens; `loss_scale`: an fp16 run's (None otherwise).

    input:  times [0, 1, 1.5, 2], 4 samples, 100 tokens, 60 generated
    output: step_time 2, timing/rollout 1, timing/reward 0.5, timing/update 0.5,
            tokens_per_second 50, samples_per_second 2, rollout_tokens_per_second 60
    """
    t0, t1, t2, t3 = times
    metrics = {
        "learning_rate": learning_rate,
        "step_time": t3 - t0,
        "timing/rollout": t1 - t0,
        "timing/reward": t2 - t1,
        "timing/update": t3 - t2,
        "throughput/tokens_per_second": tokens / max(t3 - t0, 1e-9),
        "throughput/samples_per_second": samples / max(t3 - t0, 1e-9),
        "num_tokens": tokens,
        "skipped_steps": skipped_steps,
    }
    if loss_scale is not None:
        metrics["loss_scale"] = loss_scale
    if generated is not None:
        metrics["throughput/rollout_tokens_per_second"] = generated / max(t1 - t0, 1e-9)
    return metrics


class PassClock:
    """Seconds a step spends in named passes that sit inside its phases (the reference
    passes, the after-update look at the recorded rows), so that a reader of the timings
    sees what is left of `timing/update` and `timing/rollout` without them.

    >>> clock = PassClock()
    >>> with clock.timed("reference"): pass
    >>> sorted(clock.take())
    ['timing/reference']
    >>> clock.take()
    {}
    """

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timed(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def take(self) -> dict[str, float]:
        """The timings so far as `timing/NAME` metrics; the clock starts again from zero."""
        taken, self.seconds = {f"timing/{name}": value for name, value in self.seconds.items()}, {}
        return taken
