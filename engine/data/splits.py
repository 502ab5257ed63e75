"""Training and held-out prompts, and the order in which training prompts are served.

Torch-free: the workbench previews prompts through it.
"""

from __future__ import annotations

import random
from pathlib import Path

from engine.data.columns import Columns
from engine.data.examples import Example
from engine.data.files import load_prompt_file
from engine.data.hf_datasets import load_dataset_splits
from engine.data.tasks import ACCURACY_REWARD, make_task
from engine.data.config import DataConfig
from engine.foundation.paths import link_problem, resolve_data_path

__all__ = ["load_splits", "accuracy_reward_name", "PromptStream"]


def load_splits(cfg: DataConfig, seed: int, base_dir: Path | None = None) -> tuple[list[Example], list[Example]]:
    """(train, eval) examples for the preset's data section.

    A prompt file is split deterministically by the seed: its last `num_eval` prompts
    after a seeded shuffle are held out. A Hugging Face data set: see
    engine/data/hf_datasets.py.
    """
    if cfg.task is not None:
        return make_task(cfg.task, seed=seed, num_train=cfg.num_train, num_eval=cfg.num_eval, **cfg.task_options)
    if cfg.dataset is not None:
        return load_dataset_splits(cfg, seed, base_dir)
    path = resolve_data_path(cfg.path, base_dir)
    link = link_problem(path)
    if link is not None:
        raise ValueError(f"data.path: {path} is {link}; point the link at the prompt file, or give the file's own path")
    examples = load_prompt_file(path, columns=Columns.from_config(cfg))
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    num_eval = min(cfg.num_eval, len(examples) - 1)
    if num_eval < cfg.num_eval:
        raise ValueError(
            f"data.num_eval: {cfg.num_eval} held-out prompts asked for, but {path} has only "
            f"{len(examples)} prompts; lower num_eval to leave some for training"
        )
    held = set(order[len(order) - num_eval:]) if num_eval else set()
    train = [e for i, e in enumerate(examples) if i not in held]
    held_out = [examples[i] for i in order[len(order) - num_eval:]] if num_eval else []
    return train, held_out


# Registry rewards that verify an answer, best judge first: the held-out accuracy of a
# run whose rewards include one is judged by it.
VERIFIERS = ("math_answer", "numeric_match", "exact_match")


def accuracy_reward_name(cfg: DataConfig, eval_examples: list[Example], reward_names=()) -> str | None:
    """The reward that judges held-out accuracy: the task's own (registered with it); for
    a file or data set with an `answer` column, the first verifier among the preset's
    rewards (`reward_names`) in VERIFIERS' order, else exact match; else None."""
    if cfg.task is not None:
        return ACCURACY_REWARD[cfg.task]
    if eval_examples and all("answer" in e.fields for e in eval_examples):
        return next((name for name in VERIFIERS if name in reward_names), "exact_match")
    return None


class PromptStream:
    """Serves training prompts in seeded, reshuffled epochs.

    The whole state is `position` (prompts served so far): a resumed run that restores
    it gets exactly the prompts the interrupted run would have had next.
    """

    def __init__(self, examples: list[Example], seed: int, position: int = 0):
        if not examples:
            raise ValueError("no training prompts")
        self.examples = examples
        self.seed = seed
        self.position = position
        self._epoch = -1
        self._order: list[int] = []

    def _order_of_epoch(self, epoch: int) -> list[int]:
        if epoch != self._epoch:
            self._order = list(range(len(self.examples)))
            random.Random(f"{self.seed}:{epoch}").shuffle(self._order)
            self._epoch = epoch
        return self._order

    def take(self, n: int) -> list[Example]:
        out = []
        for _ in range(n):
            epoch, index = divmod(self.position, len(self.examples))
            out.append(self.examples[self._order_of_epoch(epoch)[index]])
            self.position += 1
        return out
