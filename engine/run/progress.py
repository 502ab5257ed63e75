"""What the CLI shows while a run trains: the progress bar (tqdm, on stderr) with the
metrics this algorithm logs, and each alarm's warning line above it."""

from __future__ import annotations

import sys

__all__ = ["print_alarm", "progress_callback", "progress_postfix"]


def progress_callback(max_steps: int, start_step: int, quiet: bool):
    if quiet:
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=max_steps, initial=start_step, desc="train", unit="step", dynamic_ncols=True, file=sys.stderr)

    def on_step(step, metrics):
        bar.update(step - bar.n)
        bar.set_description_str("train", refresh=False)
        bar.set_postfix(progress_postfix(metrics), refresh=False)

    # within a step of multi-turn episodes: each turn's line ("turn 2: 5 of 16 episodes still running, 3.1 s")
    on_step.within_step = lambda line: bar.set_description_str(f"train ({line})")

    def close():
        bar.set_description_str("train", refresh=False)  # not the last evaluation's turn line
        bar.close()

    return on_step, close


def print_alarm(alarm: dict) -> None:
    """An alarm's warning line on stderr, above the progress bar (--quiet too: it is not progress)."""
    from tqdm import tqdm

    from engine.alarms import alarm_line

    tqdm.write(f"warning: {alarm_line(alarm)}", file=sys.stderr)


# What the progress bar shows, first found first: GRPO and PPO log `reward`, DPO logs
# `loss` and `rewards/accuracies` (no reward: it samples nothing while training).
# Multi-turn episodes add their turns and tool calls per episode.
_POSTFIX = (("reward", "reward"), ("rewards/accuracies", "acc"), ("loss", "loss"),
            ("episodes/turns_mean", "turns"), ("tools/call_frequency", "calls"))


def progress_postfix(metrics: dict) -> dict[str, str]:
    """The progress bar's postfix: the metrics this algorithm logs, those that are
    numbers now (a skipped step logs loss None; a metric may be missing).

    >>> progress_postfix({"reward": 0.5, "loss": None})
    {'reward': '0.500'}
    >>> progress_postfix({"loss": 0.69, "rewards/accuracies": 0.75})
    {'acc': '0.750', 'loss': '0.690'}
    """
    shown = {}
    for key, label in _POSTFIX:
        value = metrics.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            shown[label] = f"{value:.3f}"
    return shown
