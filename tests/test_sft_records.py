"""SFT's records give each target token its rank among the vocabulary (issue 39): 1 + the
number of entries with a strictly higher logit, taken from the update's own pass on the
recorded rows only. Worked by hand on small logits tensors, in-process."""

from __future__ import annotations

import torch

from engine.algorithms.sft.trainer import SFTTrainer, recorded_ranks, token_rank
from engine.model.token_logits import TokenLogits


def test_the_rank_counts_the_entries_with_a_strictly_higher_logit():
    logits = torch.tensor([[0.5, 3.0, 2.0, -1.0, 2.5],   # token 1 is the top choice
                           [0.5, 3.0, 2.0, -1.0, 2.5],   # token 3 is last: 4 entries above it
                           [1.0, 4.0, 1.0, 1.0, 0.0],    # token 2 ties tokens 0 and 3: only 4.0 is above
                           [7.0, 7.0, 7.0, 7.0, 7.0]])   # all equal: every one is first
    ids = torch.tensor([1, 3, 2, 4])
    assert token_rank(logits, ids).tolist() == [1, 5, 2, 1]
    # (b, T, V): the same, position by position; a temperature does not change an order.
    batched = logits.reshape(2, 2, 5)
    assert token_rank(batched, ids.reshape(2, 2)).tolist() == [[1, 5], [2, 1]]
    assert token_rank(batched / 0.3, ids.reshape(2, 2)).tolist() == [[1, 5], [2, 1]]


def test_ranks_are_taken_for_the_recorded_rows_of_a_micro_batch_only():
    # Three rows of two positions over a vocabulary of 4; the head passes the "hidden"
    # states through as logits, and chunks of 3 tokens split the rows across chunks.
    hidden = torch.tensor([[[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]],
                           [[0.0, 0.0, 9.0, 0.0], [2.0, 1.0, 1.0, 3.0]],
                           [[5.0, 5.0, 5.0, 5.0], [1.0, 1.0, 1.0, 1.0]]])
    logits = TokenLogits(hidden, lambda h: h, vocab_size=4, temperature=0.7, chunk_elements=12)
    ids = torch.tensor([[3, 3], [1, 1], [0, 0]])
    # By hand: row 0: token 3 is last of 4, then first; row 1: token 1 has the 9 above it
    # (ties with 0 and 3), then has 2 and 3 above it (ties with 2).
    assert recorded_ranks(logits, ids, slice(0, 3), num_recorded=2).tolist() == [[4, 1], [2, 3]]
    # A micro-batch past the recorded rows gives none; one holding the second recorded row, its rows' first.
    assert recorded_ranks(logits, ids, slice(2, 5), num_recorded=2) is None
    assert recorded_ranks(logits, ids[1:], slice(1, 3), num_recorded=2).tolist() == [[2, 3]]


def test_sft_declares_the_rank_and_that_its_records_are_demonstrations():
    records = SFTTrainer.RECORDS
    assert "rank" in records["token_values"] and records["demonstration"] is True
    assert records["preferred"][0] == "probability"  # the inspector derives it from logprob
