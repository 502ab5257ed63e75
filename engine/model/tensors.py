"""Pure tensor helpers of the model's passes: the chosen tokens' log-probabilities
(`selective_log_softmax`), the entropy (`entropy_from_logits`) and the completion mask
(`completion_mask`). No registry, no model, no module state: engine/model/ and
engine/rl/ both use them.

Shapes used throughout:
    B = number of completions in the batch
    T = completion length (padded)
    V = vocabulary size
"""

import torch
import torch.nn.functional as F

__all__ = ["selective_log_softmax", "entropy_from_logits", "completion_mask"]


def selective_log_softmax(logits, index):
    """Log-probability of the chosen token at every position.

    Same result as ``log_softmax(logits).gather(-1, index)`` but never holds a
    second (B, T, V) tensor, which for a 150k vocabulary is gigabytes.

    input:  logits (B, T, V) float, index (B, T) long
    output: (B, T) log p(index)

    e.g. logits [[[0, ln 3]]], index [[1]] -> softmax [1/4, 3/4] -> [[ln 0.75]]
    """
    if logits.dtype in (torch.float32, torch.float64):
        chosen = torch.gather(logits, -1, index.unsqueeze(-1)).squeeze(-1)  # (B, T)
        # A few rows at a time so logsumexp's temporaries stay near 2**24 elements,
        # not (B, T, V): one chunk for a small vocabulary, a row for a 150k one.
        rows = max(1, (1 << 24) // max(1, logits.shape[1] * logits.shape[2]))
        log_norm = torch.cat([torch.logsumexp(chunk, dim=-1) for chunk in logits.split(rows)])  # (B, T)
        return chosen - log_norm
    # In bf16/fp16, "logit - logsumexp" loses the small differences that matter
    # (both terms are large and only ~3 significant digits survive), so let
    # log_softmax do the subtraction internally, still one row at a time.
    rows = [
        F.log_softmax(row, dim=-1).gather(-1, idx.unsqueeze(-1)).squeeze(-1)  # (T,)
        for row, idx in zip(logits, index)
    ]
    return torch.stack(rows)  # (B, T)


def entropy_from_logits(logits, chunk_size=128):
    """Entropy of softmax(logits) in nats, per position.

    Works on ``chunk_size`` token positions at a time (flattened over B and T),
    so peak extra memory is (chunk_size, V) in fp32 whatever the batch size.

    input:  logits (B, T, V)
    output: (B, T) float32, H = -sum_v p_v log p_v

    e.g. logits [[[0, ln 3]]] -> p [1/4, 3/4] -> [[0.5623]]; uniform over V -> ln V
    """
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)  # (B*T, V)
    parts = []
    for chunk in flat.split(chunk_size, dim=0):
        logp = F.log_softmax(chunk.float(), dim=-1)  # (chunk, V); fp32 for accuracy
        p = logp.exp()
        # A -inf logit (masked-out vocab entry) gives 0 * -inf = nan; its true
        # contribution to the entropy is 0.
        parts.append(-torch.where(p > 0, p * logp, 0.0).sum(-1))
    return torch.cat(parts).reshape(logits.shape[:-1])  # (B, T)


def completion_mask(completion_ids, eos_token_id):
    """1 for real completion tokens, 0 for everything after the first EOS.

    The EOS token itself is kept: the policy chose to stop there, and that
    choice must get credit like any other token. Rows with no EOS (truncated
    at max length) are all ones.

    input:  completion_ids (B, T) long, eos_token_id int or iterable of ints
    output: (B, T) int32

    e.g. ids [[5, 2, 7, 2], [5, 5, 5, 5]], eos 2 -> [[1, 1, 0, 0], [1, 1, 1, 1]]
    """
    eos_ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    eos_ids = torch.tensor(eos_ids, dtype=completion_ids.dtype, device=completion_ids.device)
    is_eos = torch.isin(completion_ids, eos_ids).int()  # (B, T)
    # Number of EOS strictly before each position; > 0 means we are past the first one.
    eos_before = is_eos.cumsum(dim=1) - is_eos  # (B, T)
    return (eos_before == 0).int()
