"""The evaluation's estimators, on one prompt's n graded samples: pure functions, no torch.

- pass@k, unbiased (Chen et al. 2021): the chance that at least one of k samples drawn
  without replacement from the n is correct, 1 - C(n-c, k) / C(n, k).
- pass^k: the chance that all k are correct, C(c, k) / C(n, k) (tau-bench's reliability).
- maj@k: the chance that the answer most of k samples give (a strict plurality: a tie for
  the top is no majority) is a correct one, averaged over k-subsets: exact at k = n, else
  over `MAJ_DRAWS` seeded draws (verl's bootstrap does the same).
- best-of-N as a reward model picks: the expected verifier score of the sample a reward
  model scores highest among N drawn from the n, exactly: the sample ranked i-th of n is
  the top of a random N-subset with probability C(n-1-i, N-1) / C(n, N). The verifier's
  own pick (the oracle) is pass@N.
- where two curves cross, on a log-k axis.

A prompt's numbers are averaged over the prompts for the run's curves (`mean_over`).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Hashable, Sequence

__all__ = ["pass_at_k", "pass_hat_k", "maj_at_k", "best_of_n", "powers_of_two", "mean_over", "crossings",
           "MAJ_DRAWS"]

MAJ_DRAWS = 200  # k-subsets drawn per prompt for maj@k below k = n


def _check(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k).

    >>> pass_at_k(4, 1, 2), pass_at_k(4, 0, 4), pass_at_k(4, 4, 1), pass_at_k(5, 2, 5)
    (0.5, 0.0, 1.0, 1.0)
    """
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k): every one of k samples correct.

    >>> pass_hat_k(4, 2, 2), pass_hat_k(4, 4, 4), pass_hat_k(4, 1, 2)
    (0.16666666666666666, 1.0, 0.0)
    """
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _majority(votes: Sequence[Hashable | None], correct: Sequence[bool]) -> bool:
    """Whether the strict plurality answer of these samples is correct (None votes, an
    answer the rule could not read, do not count; a tie for the top is no majority)."""
    counts = Counter(v for v in votes if v is not None)
    if not counts:
        return False
    (top, most), *rest = counts.most_common(2) + [(None, 0)]
    if rest[0][1] == most:
        return False
    return any(ok for v, ok in zip(votes, correct) if v == top)


def maj_at_k(votes: Sequence[Hashable | None], correct: Sequence[bool], k: int, seed: int = 0) -> float:
    """The chance that k samples' majority answer is correct: exact at k = n (one subset),
    else the share of MAJ_DRAWS seeded k-subsets whose majority is. `votes`: each sample's
    answer as the task's rule reads it (equal when the answers are equal, e.g. " 1 2" and
    "1 2"); `correct`: each sample's verdict.

    >>> maj_at_k(["a", "a", "b"], [True, True, False], 3), maj_at_k(["a", "b"], [True, False], 2)
    (1.0, 0.0)
    >>> maj_at_k(["a", None, None], [True, False, False], 3)  # one readable vote is a majority of one
    1.0
    """
    n = len(votes)
    _check(n, sum(map(bool, correct)), k)
    if k == n:
        return float(_majority(votes, correct))
    if k == 1:  # one sample: its own answer, when readable
        return sum(bool(ok) and v is not None for v, ok in zip(votes, correct)) / n
    rng = random.Random(seed)
    rows = range(n)
    wins = 0
    for _ in range(MAJ_DRAWS):
        pick = rng.sample(rows, k)
        wins += _majority([votes[i] for i in pick], [correct[i] for i in pick])
    return wins / MAJ_DRAWS


def best_of_n(scores: Sequence[float], correct: Sequence[bool], size: int) -> float:
    """The expected verifier score of the sample with the highest `scores` (a reward
    model's) among `size` drawn without replacement from the n; ties in score share their
    chance equally.

    e.g. scores [3, 2, 1], correct [False, True, True], size 2: the top of a random pair is
    sample 0 with chance C(2, 1)/C(3, 2) = 2/3 (wrong), sample 1 with C(1, 1)/3 = 1/3 (right).

    >>> round(best_of_n([3, 2, 1], [False, True, True], 2), 6), best_of_n([3, 2, 1], [False, True, True], 1)
    (0.333333, 0.6666666666666666)
    """
    n = len(scores)
    _check(n, sum(map(bool, correct)), size)
    order = sorted(range(n), key=lambda i: -scores[i])
    total = math.comb(n, size)
    expected, i = 0.0, 0
    while i < n:  # a run of equal scores: its members are the top with the run's chance, shared
        j = i
        while j + 1 < n and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        chance = sum(math.comb(n - 1 - r, size - 1) for r in range(i, j + 1)) / total
        expected += chance * sum(bool(correct[order[r]]) for r in range(i, j + 1)) / (j - i + 1)
        i = j + 1
    return expected


def powers_of_two(n: int) -> list[int]:
    """k = 1, 2, 4, ... up to n, and n itself.

    >>> powers_of_two(32), powers_of_two(12)
    ([1, 2, 4, 8, 16, 32], [1, 2, 4, 8, 12])
    """
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks if ks[-1] == n else ks + [n]


def mean_over(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def crossings(a: dict[int, float], b: dict[int, float]) -> list[float]:
    """The k where curve b crosses curve a (b - a changes sign between two k), linearly
    interpolated in log2 k; a touch (b = a at one k) is a crossing at that k.

    >>> crossings({1: 0.5, 2: 0.6, 4: 0.7}, {1: 0.6, 2: 0.6, 4: 0.6})
    [2.0]
    >>> round(crossings({1: 0.2, 4: 0.8}, {1: 0.4, 4: 0.6})[0], 3)  # equal at log2 k = 1
    2.0
    """
    ks = sorted(set(a) & set(b))
    out = []
    for k0, k1 in zip(ks, ks[1:]):
        d0, d1 = b[k0] - a[k0], b[k1] - a[k1]
        if d0 == 0 and (not out or out[-1] != k0):
            out.append(float(k0))
        elif d0 * d1 < 0:
            x0, x1 = math.log2(k0), math.log2(k1)
            out.append(2 ** (x0 + (x1 - x0) * d0 / (d0 - d1)))
    return out
