"""Which of a prompt's two sampled completions online DPO prefers: the higher score, the
score being the rewards' total less `missing_eos_penalty` for a completion without EOS
(TRL's OnlineDPOTrainer). A tie goes to the first sampled, as TRL's `first >= second`.
Pure and torch-free.

A step's rows come as the rollout lays them out: [first_0, second_0, first_1, ...],
the two completions of prompt p at rows 2p and 2p + 1.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PairRanking", "penalised_scores", "rank_pairs"]


class PairRanking(NamedTuple):
    """Per pair: the row of its chosen and of its rejected completion, and whether the
    two scores were equal (the first sampled was chosen by the rule, not by the rewards)."""

    chosen: list[int]
    rejected: list[int]
    ties: list[bool]

    def first_wins(self) -> list[bool]:
        """Whether each pair's chosen completion is its first row.

        >>> rank_pairs([0.0, 1.0, 2.0, 2.0]).first_wins()
        [False, True]
        """
        return [c % 2 == 0 for c in self.chosen]


def penalised_scores(totals: list[float], truncated: list[bool], penalty: float | None) -> list[float]:
    """Each completion's score: its reward total, less `penalty` where it has no EOS
    (`truncated`); None: no penalty.

    >>> penalised_scores([1.0, 0.5, 0.5], [False, True, False], 1.0)
    [1.0, -0.5, 0.5]
    >>> penalised_scores([1.0, 0.5], [True, True], None)
    [1.0, 0.5]
    """
    if penalty is None:
        return list(totals)
    return [t - penalty if cut else t for t, cut in zip(totals, truncated)]


def rank_pairs(scores: list[float]) -> PairRanking:
    """The chosen and rejected row of each pair of rows [first_0, second_0, ...]: the
    higher score wins; on equal scores the first sampled wins and the pair is a tie.

    >>> rank_pairs([1.0, 0.0, 0.5, 0.5, 0.0, 2.0])
    PairRanking(chosen=[0, 2, 5], rejected=[1, 3, 4], ties=[False, True, False])
    """
    if len(scores) % 2:
        raise ValueError(f"online DPO ranks pairs: {len(scores)} scores is not a whole number of pairs")
    chosen, rejected, ties = [], [], []
    for first in range(0, len(scores), 2):
        second = first + 1
        first_wins = scores[first] >= scores[second]
        chosen.append(first if first_wins else second)
        rejected.append(second if first_wins else first)
        ties.append(scores[first] == scores[second])
    return PairRanking(chosen, rejected, ties)
