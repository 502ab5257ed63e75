"""A score model's pass: the texts it scores as token rows, and its score head at every
position, read at each text's last token.

A reward-model run trains this (engine/algorithms/reward_model/) and the `reward_model`
reward scores with it (engine/rewards/model.py): one encoding and one reading, so a
pair scores the same in the run's evaluation and as an RL reward. The reading is
AutoModelForSequenceClassification's own: the score at the last token that is not
padding, so an exported reward model scores as the run did. A text is never given an end
token (an RL reward scores a completion with its end token cut), so when the pad token
is the end token the score is still read at the answer's last token.
"""

from __future__ import annotations

import torch

__all__ = ["encode_texts", "text_limit", "last_token_positions", "position_scores"]

# A tokenizer's model_max_length is a huge sentinel when the tokenizer does not know it.
_NO_LIMIT = 1_000_000


def text_limit(context: int | None, tokenizer) -> int | None:
    """The most tokens of a text scored: the model's context and the tokenizer's limit,
    the smaller that is known."""
    limits = [n for n in (context, getattr(tokenizer, "model_max_length", None))
              if isinstance(n, int) and 0 < n < _NO_LIMIT]
    return min(limits) if limits else None


def encode_texts(tokenizer, texts: list[str], max_length: int | None, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (B, L), attention mask (B, L)) of `texts` as the tokenizer encodes a text
    (its special tokens added), right-padded with its pad token; a text longer than
    `max_length` tokens loses its beginning, so the answer is always scored (the
    tokenizer's own truncation, which keeps its special tokens: a classifier's [CLS])."""
    rows = tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"]
    if max_length is not None and any(len(row) > max_length for row in rows):
        side = tokenizer.truncation_side
        tokenizer.truncation_side = "left"
        try:
            rows = tokenizer(texts, add_special_tokens=True, truncation=True, max_length=max_length,
                             verbose=False)["input_ids"]
        finally:
            tokenizer.truncation_side = side
    width = max(len(row) for row in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([row + [pad] * (width - len(row)) for row in rows], device=device)
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows], device=device)
    return ids, mask


def last_token_positions(ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """Each row's last position holding a token other than padding (B,), as
    transformers' sequence classifiers find it.

    >>> last_token_positions(torch.tensor([[5, 6, 0, 0], [5, 0, 7, 0], [0, 0, 0, 0]]), 0)
    tensor([1, 2, 0])
    """
    positions = torch.arange(ids.shape[-1], device=ids.device)
    return (positions * (ids != pad_token_id)).argmax(-1)


def position_scores(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The score head at every position of every row (B, L) fp32, in one pass: `model`
    is a (peft-wrapped) sequence-classification model; its body's last hidden states go
    through its `score` head (the trained copy, under peft)."""
    classifier = model.get_base_model() if hasattr(model, "get_base_model") else model
    body = getattr(classifier, classifier.base_model_prefix)
    hidden = body(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    return classifier.score(hidden).squeeze(-1).float()
