"""Per-token trajectory records for the inspector (one JSON object per rollout).

Values are rounded to 4 significant digits: the inspector colours tokens by them, and
the rounding keeps a 1,000-step run's trajectories to a few MB.
"""

from __future__ import annotations

from engine.losses import kl_k3


def _round(values) -> list:
    return [None if v != v else float(f"{v:.4g}") for v in values]  # v != v: NaN


def trajectory_records(tokenizer, *, step, rows, num_generations, prompts, completions, rollout,
                       logprob, ref_logprob, entropy, ratio, clipped, advantages, top,
                       totals, components) -> list[dict]:
    """One record per recorded row. `ref_logprob` and `top` hold only the recorded rows
    (in order); the other tensors are (B, T) for the whole batch.

    Each record has the completion's tokens (ids and text pieces) and, per token:
    logprob, ref_logprob, kl (k3), entropy, advantage, ratio, clipped, and the top-5
    alternatives (ids, text pieces, probabilities) at that position.
    """
    records = []
    for j, i in enumerate(rows):
        n = int(rollout.lengths[i])
        ids = rollout.completion_ids[i, :n].tolist()
        lp, ref = logprob[i, :n], ref_logprob[j, :n].float()
        record = {
            "step": step, "index": i, "group": i // num_generations,
            "prompt": prompts[i], "completion": completions[i],
            "token_ids": ids,
            "tokens": [tokenizer.decode([t]) for t in ids],
            "logprob": _round(lp.tolist()),
            "ref_logprob": _round(ref.tolist()),
            "kl": _round(kl_k3(lp, ref).tolist()),
            "entropy": _round(entropy[i, :n].tolist()),
            "advantage": _round([float(advantages[i])] * n),
            "ratio": _round(ratio[i, :n].tolist()),
            "clipped": [int(c) for c in clipped[i, :n].tolist()],
            "reward": totals[i],
            "rewards": {k: v[i] for k, v in components.items()},
            "truncated": bool(rollout.truncated[i]),
        }
        if top is not None and j < top[0].shape[0]:
            probs, top_ids = top[0][j, :n], top[1][j, :n]
            record["top_ids"] = top_ids.tolist()
            record["top_tokens"] = [[tokenizer.decode([t]) for t in row] for row in top_ids.tolist()]
            record["top_probs"] = [_round(row) for row in probs.tolist()]
        records.append(record)
    return records

