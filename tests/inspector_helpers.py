"""Synthetic trajectory records for the inspector tests, in the formats of
docs/run-directory.md: GRPO (today's engine), and PPO and DPO as the engine adds them
(`algorithm`, per-token value/return/kl_reward/reward_per_token, DPO pairs). Written
with the engine's own writers, so the files follow the contract."""

from __future__ import annotations

import math
import random
from pathlib import Path

from engine.run import rundir
from workbench_helpers import write_run

VOCAB = [" ", "1", "2", "3", "4", "5", "the", " cat", "\n", "\t", "<eos>", "  ", "é"]


def _r(x: float) -> float:
    return float(f"{x:.4g}")


def _tokens(rng: random.Random, n: int) -> list[str]:
    tokens = [rng.choice(VOCAB[:-3]) for _ in range(n - 1)]
    return tokens + ["<eos>"]


def _top(rng: random.Random, token: str, token_id: int) -> tuple[list[int], list[str], list[float]]:
    """The sampled token first among 5 alternatives (ids 7-10 for the others)."""
    others = [t for t in ("1", "2", " ", "x", "y", "z") if t != token][:4]
    probs = sorted((rng.random() for _ in range(5)), reverse=True)
    total = sum(probs) * 1.2
    return [token_id, 7, 8, 9, 10], [token] + others, [_r(p / total) for p in probs]


def grpo_record(step: int, index: int, group: int, reward: float, advantage: float, n: int = 12,
                seed: int = 0, prompt: str = "sort 3 1 2 =", tokens: list[str] | None = None) -> dict:
    rng = random.Random(seed * 1000 + step * 100 + index)
    tokens = tokens or _tokens(rng, n)
    n = len(tokens)
    logprob = [_r(-rng.random() * 3) for _ in range(n)]
    ref = [_r(lp - rng.random() * 0.3) for lp in logprob]
    ratio = [_r(1 + (rng.random() - 0.5) * 0.6) for _ in range(n)]
    clipped = [int(abs(r - 1) > 0.2) for r in ratio]
    tops = [_top(rng, t, 100 + i) for i, t in enumerate(tokens)]
    return {
        "step": step, "index": index, "group": group, "prompt": prompt, "completion": "".join(tokens[:-1]),
        "token_ids": [100 + i for i in range(n)], "tokens": tokens, "logprob": logprob, "ref_logprob": ref,
        "kl": [_r(math.exp(r - lp) - (r - lp) - 1) for lp, r in zip(logprob, ref)],
        "entropy": [_r(rng.random() * 2) for _ in range(n)], "advantage": [_r(advantage)] * n,
        "ratio": ratio, "clipped": clipped, "reward": reward, "rewards": {"exact_match": reward},
        "truncated": False, "top_ids": [t[0] for t in tops], "top_tokens": [t[1] for t in tops],
        "top_probs": [t[2] for t in tops],
    }


def ppo_record(step: int, index: int, n: int = 20, seed: int = 0, score: float = 1.0, kl_coef: float = 0.05,
               prompt: str = "sort 5 4 =") -> dict:
    """A PPO record: per-token GAE advantages (whitened), values, returns, KL rewards."""
    record = grpo_record(step, index, index, score, 0.0, n=n, seed=seed, prompt=prompt)
    rng = random.Random(seed + index + 7 * step)
    n = len(record["tokens"])
    value = [_r(0.2 + 0.6 * i / n + rng.random() * 0.1) for i in range(n)]
    kl_reward = [_r(-kl_coef * k) for k in record["kl"]]
    reward_per_token = kl_reward[:-1] + [_r(kl_reward[-1] + score)]
    ret = [_r(sum(reward_per_token[i:])) for i in range(n)]
    raw = [r - v for r, v in zip(ret, value)]
    mean = sum(raw) / n
    std = (sum((a - mean) ** 2 for a in raw) / n) ** 0.5 or 1.0
    record.update({"algorithm": "ppo", "advantage": [_r((a - mean) / std) for a in raw], "value": value,
                   "return": ret, "kl_reward": kl_reward, "reward_per_token": reward_per_token, "score": score})
    return record


def dpo_side(rng: random.Random, beta: float, n: int) -> dict:
    tokens = _tokens(rng, n)
    logprob = [_r(-rng.random() * 3) for _ in range(n)]
    ref = [_r(lp + (rng.random() - 0.5)) for lp in logprob]
    implicit = [_r(beta * (lp - r)) for lp, r in zip(logprob, ref)]
    tops = [_top(rng, t, i) for i, t in enumerate(tokens)]
    return {"completion": "".join(tokens[:-1]), "token_ids": list(range(n)), "tokens": tokens,
            "logprob": logprob, "ref_logprob": ref, "implicit_reward": implicit,
            "entropy": [_r(rng.random()) for _ in range(n)], "top_ids": [t[0] for t in tops],
            "top_tokens": [t[1] for t in tops], "top_probs": [t[2] for t in tops], "reward": _r(sum(implicit))}


def dpo_record(step: int, index: int, beta: float = 0.1, seed: int = 0) -> dict:
    rng = random.Random(seed + 31 * step + index)
    chosen, rejected = dpo_side(rng, beta, 10), dpo_side(rng, beta, 14)
    return {"algorithm": "dpo", "step": step, "index": index, "prompt": f"Question {index}?", "beta": beta,
            "margin": _r(chosen["reward"] - rejected["reward"]), "chosen": chosen, "rejected": rejected}


def write_steps(run_dir: Path, records_by_step: dict[int, list[dict]]) -> None:
    for step, records in records_by_step.items():
        rundir.write_trajectories(run_dir, step, records)


def grpo_run(folder: Path, name: str = "grpo-inspect", steps: int = 3, group_size: int = 4,
             zero_spread_step: int | None = None) -> Path:
    """A run (write_run's events) with GRPO trajectories: each step one group of
    `group_size`; at `zero_spread_step` every reward is equal (advantages 0)."""
    run_dir = write_run(folder, name, steps=steps, samples_per_step=group_size)
    by_step = {}
    for step in range(1, steps + 1):
        records = []
        for i in range(group_size):
            if step == zero_spread_step:
                reward, adv = 0.5, 0.0
            else:
                reward, adv = i / group_size, (i - (group_size - 1) / 2) / group_size * 2
            records.append(grpo_record(step, i, 0, reward, adv, seed=step, prompt=f"sort {step} =",
                                       n=8 + i))
        by_step[step] = records
    write_steps(run_dir, by_step)
    return run_dir
