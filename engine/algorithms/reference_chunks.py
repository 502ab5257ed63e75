"""The reference's logprobs over given data (DPO's pairs, KTO's rows), in chunks, for a
cache an algorithm fills once before training (`precompute_ref_log_probs`), with its
progress in the log.
"""

from __future__ import annotations

import logging
import time

import torch

__all__ = ["reference_chunks"]

log = logging.getLogger(__name__)


@torch.no_grad()
def reference_chunks(trainer, examples: list, rows_of, group_size: int, what: str):
    """Yields (a chunk's examples, their rows `rows_of(chunk)`, the reference logprobs of
    every row) over `examples`, in chunks of a batch or 32, through the trainer's
    reference pass. `what` names an example in the log ("pairs", "rows")."""
    started = time.perf_counter()
    chunk = max(trainer.cfg.batch_size, 32)
    log.info("precomputing reference logprobs of %d %s", len(examples), what)
    for i in range(0, len(examples), chunk):
        if i and i % (chunk * 50) == 0:
            log.info("reference logprobs: %d / %d %s", i, len(examples), what)
        part = examples[i: i + chunk]
        rows = rows_of(part)
        yield part, rows, trainer.reference_logprobs(rows, slice(0, rows.completion_ids.shape[0]), group_size)
    log.info("reference logprobs of %d %s in %.1f s", len(examples), what, time.perf_counter() - started)
