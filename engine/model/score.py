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

__all__ = ["encode_texts", "text_limit", "last_token_positions", "position_scores", "has_position_scores",
           "token_ends"]

# A tokenizer's model_max_length is a huge sentinel when the tokenizer does not know it.
_NO_LIMIT = 1_000_000


def text_limit(context: int | None, tokenizer) -> int | None:
    """The most tokens of a text scored: the model's context and the tokenizer's limit,
    the smaller that is known."""
    limits = [n for n in (context, getattr(tokenizer, "model_max_length", None))
              if isinstance(n, int) and 0 < n < _NO_LIMIT]
    return min(limits) if limits else None


def _encoded(tokenizer, texts: list[str], max_length: int | None, **options):
    """The tokenizer's encoding of `texts` (its special tokens added), each cut from the
    left to `max_length` tokens: encode_texts' rows, and token_ends' (`options`:
    return_offsets_mapping)."""
    encoded = tokenizer(texts, add_special_tokens=True, verbose=False, **options)
    if max_length is not None and any(len(row) > max_length for row in encoded["input_ids"]):
        side = tokenizer.truncation_side
        tokenizer.truncation_side = "left"
        try:
            encoded = tokenizer(texts, add_special_tokens=True, truncation=True, max_length=max_length,
                                verbose=False, **options)
        finally:
            tokenizer.truncation_side = side
    return encoded


def encode_texts(tokenizer, texts: list[str], max_length: int | None, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (B, L), attention mask (B, L)) of `texts` as the tokenizer encodes a text
    (its special tokens added), right-padded with its pad token; a text longer than
    `max_length` tokens loses its beginning, so the answer is always scored (the
    tokenizer's own truncation, which keeps its special tokens: a classifier's [CLS])."""
    rows = _encoded(tokenizer, texts, max_length)["input_ids"]
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
    through its `score` head (the trained copy, under peft). A plain transformers classifier
    works alike; has_position_scores says whether a model has such a head."""
    classifier = model.get_base_model() if hasattr(model, "get_base_model") else model
    body = getattr(classifier, classifier.base_model_prefix)
    hidden = body(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    return classifier.score(hidden).squeeze(-1).float()


def has_position_scores(model) -> bool:
    """Whether `model` (a (peft-wrapped) sequence classifier) has a score head read at
    every position: a decoder's `score` layer (GPT-2, Llama, Qwen, ... and a reward-model
    run's), whose reading at a position is the reward of the text ending there. An
    encoder's classifier (BERT, DeBERTa: `classifier`, read at [CLS] over the whole text)
    has none."""
    classifier = model.get_base_model() if hasattr(model, "get_base_model") else model
    body = getattr(classifier, "base_model_prefix", "")
    return bool(body) and hasattr(classifier, body) and isinstance(getattr(classifier, "score", None),
                                                                   torch.nn.Module)


def token_ends(tokenizer, texts: list[str], max_length: int | None) -> list[list[int]]:
    """The exclusive end character offset in its text of each token of each text, as
    encode_texts encodes it (special tokens added, a long text cut from the left). A special
    token, which has no characters, ends where the token before it ends (0 at the start):
    the ends never decrease. A fast tokenizer gives offsets; a slow one's are the lengths of
    its decoded prefixes, counted from where the kept text begins.

    e.g. GPT-2's tokenizer, ["sort 2 1"] ("sort", " 2", " 1") -> [[4, 6, 8]]
    """
    if getattr(tokenizer, "is_fast", False):
        encoded = _encoded(tokenizer, texts, max_length, return_offsets_mapping=True)
        per_text = [[end for _, end in offsets] for offsets in encoded["offset_mapping"]]
    else:
        def length(ids: list[int]) -> int:
            return len(tokenizer.decode(ids, skip_special_tokens=True))

        per_text = []
        for text, row in zip(texts, _encoded(tokenizer, texts, max_length)["input_ids"]):
            start = max(0, len(text) - length(row))  # a text cut from the left keeps its end
            per_text.append([start + length(row[:k + 1]) for k in range(len(row))])
    out = []
    for text, ends in zip(texts, per_text):
        kept, last = [], 0
        for end in ends:
            last = min(max(last, end), len(text))
            kept.append(last)
        out.append(kept)
    return out
