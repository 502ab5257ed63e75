"""What every algorithm's preset section declares besides its fields, so that the modules
outside engine/algorithms/ (the memory estimate, the world-size checks, the preset's
batch rules, the input checks, the reward playground) ask the algorithm instead of
comparing its name. Torch-free: the schema and the workbench's set-up form read them.

An algorithm's config class (engine/algorithms/NAME/config.py) derives from
`AlgorithmSection` (or `OnlineAlgorithm`, which already declares what sampling groups
of `num_generations` completions per prompt means) and fills in:

- `update_batch(training)`: one update pass over a step's rows (the memory estimate);
- `step_shares(training)`: what a step's processes share (the world-size check);
- optionally `trains_value_head`, `trains_on_pairs`, `trains_on_unpaired`,
  `trains_on_demonstrations`, `trains_score_head`, `batch_problems`,
  `world_size_problems` and `playground_reason`, whose defaults are "no".

`unread_fields()` follows from those declarations: the fields of other sections that the
algorithm does not read (READ_ONLY_WHEN), which the set-up form hides.

A class that leaves an abstract declaration out cannot be instantiated (pydantic's
models are ABCs), and engine/algorithms/__init__.py refuses to register it.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, NamedTuple

from engine.foundation.section import SamplingFields, Section

__all__ = ["AlgorithmSection", "OnlineAlgorithm", "READ_ONLY_WHEN", "UpdateBatch"]

# Fields of other sections that only an algorithm making a declaration reads: the data's
# pair columns only where it trains on pairs, the episodes' settings only where it trains
# on episodes. A new such field goes here, beside the declaration that reads it.
READ_ONLY_WHEN: dict[str, tuple[str, ...]] = {
    "trains_on_pairs": ("data.chosen_field", "data.rejected_field"),
    "trains_episodes": ("data.environment", "data.max_turns", "data.max_tool_calls", "data.tool_timeout",
                        "data.tool_call_format"),
}


class UpdateBatch(NamedTuple):
    """One update pass over a step's rows (before micro-batching), as the memory estimate
    counts it: `units` that stay whole on one process (a prompt's group of completions,
    a preference pair), each `rows` sequences of one prompt; `micro_rows`: the rows one
    unit of training.micro_batch_size stands for (1 where it counts completions, 2 where
    it counts pairs).

    >>> UpdateBatch(units=8, rows=8)  # 64 completions, 8 per prompt
    UpdateBatch(units=8, rows=8, micro_rows=1)
    """

    units: int
    rows: int
    micro_rows: int = 1


class AlgorithmSection(Section):
    """Base of an algorithm's preset section: its declarations, no fields (each algorithm
    has its own `name: Literal[...]`)."""

    # Trains a value head (a critic) beside the adapter: its fp32 weights, gradients and
    # AdamW states count in the memory estimate.
    trains_value_head: ClassVar[bool] = False
    # Trains on (prompt, chosen, rejected) pairs from the data, not on completions the
    # rewards score: the rewards' data columns are not checked against the training data,
    # and a data file's prompts are templated as pairs.
    trains_on_pairs: ClassVar[bool] = False
    # Trains on (prompt, completion, label) rows from the data (KTO's unpaired preferences),
    # not on completions the rewards score: as with pairs, the rewards' data columns are not
    # checked against the training data.
    trains_on_unpaired: ClassVar[bool] = False
    # Trains on demonstrations from the data (SFT: a prompt and the completion to imitate,
    # engine/data/demonstrations.py): the data is read as demonstrations, a conversation's
    # last (assistant) message being the completion.
    trains_on_demonstrations: ClassVar[bool] = False
    # Trains a one-output score head with the adapter (a reward model): the model is the base
    # as a sequence classifier, exported as one, and its runs are rewards, not policies.
    trains_score_head: ClassVar[bool] = False
    # Trains on multi-turn episodes (data.environment, engine/episodes/): its passes attend to
    # the tools' tokens and train on the model's. False: the field is refused, with `episodes_reason`.
    trains_episodes: ClassVar[bool] = False
    episodes_reason: ClassVar[str] = "it trains on answers given in the data, not on episodes it samples"

    @classmethod
    def unread_fields(cls) -> tuple[str, ...]:
        """The preset fields outside its own section that this algorithm never reads (dotted
        paths), from its declarations and READ_ONLY_WHEN.

        >>> from engine.algorithms.kto.config import KTOConfig
        >>> KTOConfig.unread_fields()[:3]
        ('data.chosen_field', 'data.rejected_field', 'data.environment')
        """
        return tuple(path for flag, paths in READ_ONLY_WHEN.items() if not getattr(cls, flag) for path in paths)

    @abstractmethod
    def update_batch(self, training) -> UpdateBatch:
        """One update pass over a step's rows (`training`: the preset's training section)."""

    @abstractmethod
    def step_shares(self, training) -> tuple[int, str]:
        """What several processes share in a step: how many, and what they are (naming the
        fields), for the message when there are fewer of them than processes."""

    def batch_problems(self, training) -> list[str]:
        """training.batch_size's rules beyond the group's (which the schema checks for every
        algorithm): messages naming the fields; empty when it fits."""
        return []

    def world_size_problems(self, training, size: int) -> list[str]:
        """What keeps this algorithm's step from being shared by `size` processes, beyond
        `step_shares`: messages naming the fields and the fix."""
        return []

    def step_rewards_problem(self) -> str:
        """Why a step reward (engine/rewards/steps.py) cannot train this algorithm as
        configured, naming the field and the fix; "" when it can, or when the rewards only
        judge held-out generations (DPO, KTO), where a step reward counts as its steps' mean."""
        return ""

    def playground_reason(self) -> str:
        """Why the reward playground shows no advantages for this algorithm; "" when it
        recomputes them from the texts' rewards (group-relative estimators named by the
        section's `advantage_estimator` and `scale_rewards`, as GRPO's)."""
        return (f"{self.name.upper()} computes no advantages the playground can recompute from texts; "
                "only the rewards are shown")


class OnlineAlgorithm(SamplingFields, AlgorithmSection):
    """An algorithm that samples `num_generations` completions of each prompt (a group,
    kept on one process and in one update pass) and scores them with the rewards. The
    subclass declares `num_generations` with its own bounds.

    >>> from engine.algorithms.grpo.config import GRPOConfig
    >>> from engine.preset.schema import TrainingConfig
    >>> GRPOConfig(num_generations=4).step_shares(TrainingConfig(batch_size=8))[0]
    2
    """

    def update_batch(self, training) -> UpdateBatch:
        return UpdateBatch(units=training.batch_size // self.num_generations, rows=self.num_generations)

    def step_shares(self, training) -> tuple[int, str]:
        return training.batch_size // self.num_generations, (
            f"prompts (training.batch_size {training.batch_size} / algorithm.num_generations "
            f"{self.num_generations}), and a prompt's completions stay on one process")
