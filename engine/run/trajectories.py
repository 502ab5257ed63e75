"""Per-token trajectory records for the inspector (one JSON object per rollout).

Values are rounded to 4 significant digits: the inspector colours tokens by them, and
the rounding keeps a 1,000-step run's trajectories to a few MB.
"""

from __future__ import annotations

from engine.rl.kl import kl_k3


def _round(values) -> list:
    return [None if v != v else float(f"{v:.4g}") for v in values]  # v != v: NaN


def token_fields(tokenizer, ids: list[int], per_token: dict, top=None) -> dict:
    """The per-token part of a record for one completion of len(ids) tokens.

    `per_token` maps a name (logprob, ref_logprob, entropy, advantage, value, ...) to
    that completion's row, a 1-d tensor at least len(ids) long. `kl` (k3) is added
    when logprob and ref_logprob are there and kl is not. `top` is (probs, ids) (n, 5)
    of the top-5 alternatives at each position.
    """
    n = len(ids)
    out = {"token_ids": ids, "tokens": [tokenizer.decode([t]) for t in ids]}
    for name, row in per_token.items():
        out[name] = _round(row[:n].float().tolist())
    if "kl" not in per_token and "logprob" in per_token and "ref_logprob" in per_token:
        out["kl"] = _round(kl_k3(per_token["logprob"][:n].float(), per_token["ref_logprob"][:n].float()).tolist())
    if top is not None:
        probs, top_ids = top[0][:n], top[1][:n]
        out["top_ids"] = top_ids.tolist()
        out["top_tokens"] = [[tokenizer.decode([t]) for t in row] for row in top_ids.tolist()]
        out["top_probs"] = [_round(row) for row in probs.tolist()]
    return out


def trajectory_records(tokenizer, *, step, rows, num_generations, prompts, completions, rollout,
                       per_token, clipped, top, totals, components, extra=None) -> list[dict]:
    """One record per recorded row. `rows` are the first rows of the batch (0..n-1);
    each tensor in `per_token` and `clipped` has those rows first, and `top` holds
    exactly them. `extra` maps a rollout-level key to a list over the batch (GRPO's
    `component_advantages` under GDPO, `baseline` under ReMax: the step outputs' `row_extras`).

    Each record has the completion's tokens (ids and text pieces), each per-token
    quantity, kl (k3, from logprob and ref_logprob), clipped flags, and the top-5
    alternatives (ids, text pieces, probabilities) at each position.
    """
    records = []
    for i in rows:
        n = int(rollout.lengths[i])
        ids = rollout.completion_ids[i, :n].tolist()
        row_top = None if top is None or i >= top[0].shape[0] else (top[0][i], top[1][i])
        row_values = {k: v[i] for k, v in per_token.items()}
        episode = {}
        if rollout.tool_mask is not None:
            # An episode: a tool's tokens were attended to, not trained; their values are null.
            tool = rollout.tool_mask[i].bool()
            row_values = {k: v.float().masked_fill(tool[: v.shape[0]], float("nan")) for k, v in row_values.items()}
            episode = {"tool_mask": [int(t) for t in rollout.tool_mask[i, :n].tolist()],
                       "turn": rollout.turns[i, :n].tolist()}
        record = {
            "step": step, "index": i, "group": i // num_generations,
            "prompt": prompts[i], "completion": completions[i],
            **token_fields(tokenizer, ids, row_values, row_top),
            **episode,
            "clipped": [int(c) for c in clipped[i, :n].tolist()],
            "reward": totals[i],
            "rewards": {k: v[i] for k, v in components.items()},
            "truncated": bool(rollout.truncated[i]),
        }
        for key, values in (extra or {}).items():
            record[key] = values[i]
        records.append(record)
    return records
