"""An example (a prompt plus the columns the rewards see) and the train/eval split of
generated examples.

Which split a prompt belongs to is decided by a stable hash of the prompt text, not by
the seed, so an eval prompt never shows up in the train split of *any* seed (the
built-in model was fine-tuned on a train split; evaluating it on an eval split is
always fair). Torch-free.

Example:
    >>> ex = Example("sort 2 1 =", {"answer": " 1 2"})
    >>> is_eval_prompt(ex.prompt) == is_eval_prompt("sort 2 1 =")
    True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Example", "EVAL_BUCKETS", "is_eval_prompt"]

# One prompt in EVAL_BUCKETS lands in the eval split.  Keeping a tenth of the
# prompt space for evaluation leaves plenty for training while giving even the
# smallest configurations (single-operation arithmetic: 300 prompts) a usable
# eval split.
EVAL_BUCKETS = 10


@dataclass(frozen=True)
class Example:
    """One prompt plus the columns reward functions may need.

    Example:
        >>> ex = Example("sort 2 1 =", {"answer": " 1 2"})
        >>> ex.prompt + ex.fields["answer"]
        'sort 2 1 = 1 2'
    """

    prompt: str | list[dict]  # text, or a conversation ({role, content} messages) before templating
    fields: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------
# Train / eval split
# ---------------------------------------------------------------------------


def is_eval_prompt(prompt: str) -> bool:
    """Return True when ``prompt`` belongs to the held-out eval split.

    The decision is a stable hash of the text (SHA-256, not Python's salted
    ``hash``), so it is the same on every machine, run and seed.

    Example:
        >>> is_eval_prompt("sort 3 1 2 =") == is_eval_prompt("sort 3 1 2 =")
        True
    """
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % EVAL_BUCKETS == 0


def _split_unique(
    draw: Callable[[], Example],
    *,
    num_train: int,
    num_eval: int,
    task_name: str,
) -> tuple[list[Example], list[Example]]:
    """Draw examples until both splits are full, skipping repeated prompts.

    ``draw`` returns one random example; the split it goes to is decided by
    :func:`is_eval_prompt`.  Raises ValueError when the option space is too
    small to yield that many distinct prompts.

    Example:
        >>> import random
        >>> rng = random.Random(0)
        >>> draw = lambda: Example(f"n{rng.randint(0, 999)}", {"answer": ""})
        >>> train, ev = _split_unique(draw, num_train=5, num_eval=2, task_name="demo")
        >>> {e.prompt for e in train} & {e.prompt for e in ev}
        set()
    """
    train: list[Example] = []
    evaluation: list[Example] = []
    seen: set[str] = set()
    # Generous budget: collisions only get frequent when the space is nearly
    # exhausted, and then we would rather fail loudly than loop forever.
    budget = 50 * (num_train + num_eval) + 10_000
    since_new = 0
    for _ in range(budget):
        if len(train) >= num_train and len(evaluation) >= num_eval:
            break
        example = draw()
        if example.prompt in seen:
            since_new += 1
            # An exhausted space shows as a long run of repeats. Waiting 10,000 + twice
            # the prompts found bounds the wasted work by the work already done, while a
            # space with even one unseen prompt in 2 x len(seen) rarely stalls that long.
            if since_new > 10_000 + 2 * len(seen):
                break
            continue
        since_new = 0
        seen.add(example.prompt)
        target, wanted = (
            (evaluation, num_eval) if is_eval_prompt(example.prompt) else (train, num_train)
        )
        if len(target) < wanted:
            target.append(example)
    if len(train) < num_train or len(evaluation) < num_eval:
        raise ValueError(
            f"task '{task_name}': could only find {len(train)} train and "
            f"{len(evaluation)} eval distinct prompts (asked for {num_train} and "
            f"{num_eval}); lower num_train/num_eval or widen the task options "
            f"(e.g. longer sequences or deeper expressions)."
        )
    return train, evaluation
