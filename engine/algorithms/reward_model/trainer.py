"""Reward-model training, the RLHF pipeline's second stage: Bradley-Terry on preference
pairs, as TRL 1.16's RewardTrainer.

The model is the base with a LoRA adapter and a one-output score head (engine/model/
loading.py's `score` head: trained whole and saved with the adapter, so every checkpoint
and export scores as the run did). A pair's two texts are its prompt, as the chat template
renders it, followed by each answer's text with no end token: what an RL run's
`reward_model` reward scores (engine/rewards/model.py, through the same engine/model/
score.py). One pass gives the score head's output at every position; a text's reward is
the one at its last token (engine.rl.bradley_terry has the loss). Metrics as TRL logs
them (accuracy, margin, min/mean/max reward, num_tokens) and each side's mean reward; the
held-out evaluation gives the same on held-out pairs. A pair's record holds each side's
score and the score at every token of its answer, for the inspector.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.algorithms.base import Trainer
from engine.algorithms.declaration import REJECTED, plot
from engine.algorithms.evaluation import MIN_EVAL_BATCH
from engine.algorithms.policy import set_update_mode
from engine.algorithms.step_result import StepResult
from engine.algorithms.update import MicroBatch, MicroLoss, StepBatch, UpdatePart, UpdateResult
from engine.data import Example
from engine.data.preference import load_preference_splits
from engine.model.chat import answer_text
from engine.model.loading import load_model
from engine.model.rollout import Rollout
from engine.model.score import encode_texts, last_token_positions, position_scores, text_limit
from engine.rl.bradley_terry import bradley_terry_loss
from engine.run.trajectories import token_fields

PAIR = 2  # texts per preference pair: chosen, rejected


@dataclass
class PairTexts:
    """A batch of pairs as scored texts, [chosen_0, rejected_0, chosen_1, ...]: token ids
    and mask (2B, L), and where each text's score is read."""

    ids: torch.Tensor
    mask: torch.Tensor
    last: torch.Tensor


@dataclass
class RewardModelBatch(StepBatch):
    examples: list[Example] = field(kw_only=True)
    texts: PairTexts = field(kw_only=True)
    margins: torch.Tensor | None = field(kw_only=True)
    rewards: torch.Tensor = field(kw_only=True)  # (2B,) each text's score, filled by the update
    recorded: list[torch.Tensor] = field(default_factory=list, kw_only=True)  # the recorded texts' scores per position


@dataclass
class RewardModelStepOutputs:
    examples: list[Example]
    texts: PairTexts
    rewards: list[float]
    positions: torch.Tensor | None


def pair_margins(examples: list[Example], device) -> torch.Tensor | None:
    """The pairs' `margin` column (TRL's), or None when the data has none. ValueError for a
    row without one when others have it (the loss would mix two objectives silently)."""
    have = [e.fields.get("margin") is not None for e in examples]
    if not any(have):
        return None
    if not all(have):
        number = have.index(False)
        raise ValueError(f"data: preference pair {number} ({str(examples[number].prompt)[:40]!r}) has no `margin` "
                         "while other pairs have one; give every pair a margin, or none")
    return torch.tensor([float(e.fields["margin"]) for e in examples], device=device)


class RewardModelTrainer(Trainer):
    MICRO_BATCH_UNIT = "preference pairs"
    SAMPLES = False  # it reads its pairs
    PLOTS = (
        plot("eval", "Held-out accuracy (pairs)", eval=("accuracy",)),
        plot("loss", "Loss (Bradley-Terry)", "loss"),
        plot("rm_accuracy", "Accuracy (chosen scored above rejected)", "accuracy"),
        plot("rm_rewards", "Rewards", "rewards/chosen", "rewards/rejected", "margin"),
        plot("rm_range", "Reward range", "min_reward", "mean_reward", "max_reward"),
        plot("rm_eval_margin", "Held-out margin", eval=("margin",)),
        plot("grad_norm", "Gradient norm", "grad_norm"),
        plot("lr", "Learning rate", "learning_rate"),
        plot("timing", "Step time", "step_time"),
    )
    RECORDS = {"layout": "pair", "sides": ["chosen", "rejected"], "token_values": ["score", "score_change"],
               "preferred": ["score"]}
    SAMPLE_FIELDS = (REJECTED,)

    def load_examples(self, preset_dir: Path | None) -> tuple[list[Example], list[Example]]:
        return load_preference_splits(self.preset.data, self.cfg.seed, preset_dir, who="a reward model")

    def load_model(self):
        return load_model(self.preset.model, self.cfg.gradient_checkpointing, head="score")

    def setup_modules(self) -> None:
        self.num_tokens = 0

    def extra_state(self) -> dict:
        return {"num_tokens": self.num_tokens}

    def load_extra_state(self, state: dict) -> None:
        self.num_tokens = int(state.get("num_tokens", 0))

    # -------------------------------------------------------------- batching

    def pair_texts(self, examples: list[Example]) -> PairTexts:
        """The pairs' texts as the score model reads them (engine/model/score.py)."""
        texts = [e.prompt + answer_text(e.fields[side]) for e in examples for side in ("chosen", "rejected")]
        limit = text_limit(self.policy.loaded.context_length, self.tokenizer)  # as the reward reads them
        ids, mask = encode_texts(self.tokenizer, texts, limit, self.device)
        return PairTexts(ids, mask, last_token_positions(ids, self.tokenizer.pad_token_id))

    def scores(self, texts: PairTexts, rows: slice) -> torch.Tensor:
        """The score head at every position of `rows` (b, L): through DDP when it trains
        with several processes."""
        args = (self.model, texts.ids[rows], texts.mask[rows])
        if self.policy.ddp is not None and torch.is_grad_enabled():
            return self.policy.ddp(position_scores, *args)
        return position_scores(*args)

    # ------------------------------------------------------------------ step

    def prepare(self) -> RewardModelBatch:
        examples = self.stream.take(self.cfg.batch_size)
        texts = self.pair_texts(examples)
        self.rollout_done()
        B = len(examples)
        ids = texts.ids
        # the base counts rows' tokens: the texts stand in a rollout's place (all their tokens a "completion")
        rows = Rollout(ids[:, :0], texts.mask[:, :0], ids, texts.mask.float(),
                       torch.zeros(ids.shape, device=self.device), torch.zeros(2 * B, dtype=torch.bool,
                                                                              device=self.device))
        return RewardModelBatch(rows, self.num_recorded(B) * PAIR, B, unit=PAIR, examples=examples, texts=texts,
                                margins=pair_margins(examples, self.device),
                                rewards=torch.zeros(2 * B, device=self.device))

    def part_micro_batches(self, part: UpdatePart) -> list[slice]:
        return [slice(mb.start * PAIR, mb.stop * PAIR) for mb in self.micro_batches(part.size // PAIR)]

    def loss(self, batch: RewardModelBatch, micro: MicroBatch) -> MicroLoss:
        """Bradley-Terry on one micro-batch of pairs: its share of the mean over the batch."""
        mb = micro.rows
        per_position = self.scores(batch.texts, mb)
        rewards = per_position.gather(1, batch.texts.last[mb, None]).squeeze(1)
        pairs = slice(mb.start // PAIR, mb.stop // PAIR)
        margin = batch.margins[pairs] if batch.margins is not None else None
        losses = bradley_terry_loss(rewards[0::PAIR], rewards[1::PAIR], margin,
                                    self.algo.center_rewards_coefficient)
        batch.rewards[mb] = rewards.detach()
        recorded = max(0, min(mb.stop, batch.num_recorded) - mb.start)
        if recorded:
            batch.recorded.append(per_position[:recorded].detach())
        return MicroLoss(losses.sum() / batch.samples, 1.0, {})

    def finish(self, batch: RewardModelBatch, update: UpdateResult) -> StepResult[RewardModelStepOutputs]:
        self.world.combine_rows(batch.rewards, self.pair_share(batch.samples))
        self.num_tokens += int(batch.texts.mask.sum())
        metrics = {**pair_metrics(batch.rewards), "num_tokens": self.num_tokens}
        positions = torch.cat(batch.recorded) if batch.recorded else None
        return StepResult(metrics, RewardModelStepOutputs(batch.examples, batch.texts, batch.rewards.tolist(),
                                                          positions))

    def pair_share(self, pairs: int) -> slice:
        mine = self.world.share(pairs)
        return slice(mine.start * PAIR, mine.stop * PAIR)

    def write_step_outputs(self, last: RewardModelStepOutputs) -> None:
        examples, rewards = last.examples, last.rewards
        self.emit_samples([
            {"index": i, "group": i, "prompt": e.prompt, "completion": answer_text(e.fields["chosen"]),
             "rejected": answer_text(e.fields["rejected"]), "reward": rewards[PAIR * i],
             "rewards": {"chosen": rewards[PAIR * i], "rejected": rewards[PAIR * i + 1],
                         "margin": rewards[PAIR * i] - rewards[PAIR * i + 1]},
             "advantage": rewards[PAIR * i] - rewards[PAIR * i + 1]}
            for i, e in enumerate(examples[: self.cfg.log_completions])])
        if last.positions is not None:
            self.write_trajectories(pair_records(self.tokenizer, self.step, examples, last.texts, last.positions,
                                                 rewards))

    # ------------------------------------------------------------------ eval

    @torch.no_grad()
    def score_pairs(self, examples: list[Example]) -> torch.Tensor:
        """Each held-out text's score, [chosen_0, rejected_0, ...], in chunks."""
        set_update_mode(self.model, False)
        out = []
        chunk = max(self.cfg.batch_size, MIN_EVAL_BATCH)
        for i in range(0, len(examples), chunk):
            texts = self.pair_texts(examples[i: i + chunk])
            whole = slice(0, texts.ids.shape[0])
            out.append(self.scores(texts, whole).gather(1, texts.last[:, None]).squeeze(1))
        return torch.cat(out)

    def evaluate(self) -> dict:
        """Held-out pairs: accuracy (chosen scored above rejected), margin and the rewards'
        range, as the training metrics (TRL's eval_accuracy, eval_margin)."""
        if not self.eval_examples:
            return {}
        started = time.perf_counter()
        result = pair_metrics(self.score_pairs(self.eval_examples))
        result.update({"num_pairs": len(self.eval_examples), "eval_time": time.perf_counter() - started})
        return result


def pair_metrics(rewards: torch.Tensor) -> dict:
    """TRL's reward-model metrics of interleaved scores [chosen_0, rejected_0, ...].

    >>> pair_metrics(torch.tensor([2.0, 1.0, 0.0, 0.5]))["accuracy"]
    0.5
    """
    chosen, rejected = rewards[0::PAIR], rewards[1::PAIR]
    return {"accuracy": float((chosen > rejected).float().mean()), "margin": float((chosen - rejected).mean()),
            "min_reward": float(rewards.min()), "mean_reward": float(rewards.mean()),
            "max_reward": float(rewards.max()), "rewards/chosen": float(chosen.mean()),
            "rewards/rejected": float(rejected.mean())}


def pair_records(tokenizer, step: int, examples: list[Example], texts: PairTexts, positions: torch.Tensor,
                 rewards: list[float]) -> list[dict]:
    """One record per recorded pair: each side's answer tokens with the score read at
    each of them (the reward of the text ending there) and its change from the token
    before, and the side's reward (its score at the last token)."""
    records = []
    for p in range(positions.shape[0] // PAIR):
        e = examples[p]
        record = {"step": step, "index": p, "group": p, "prompt": e.prompt,
                  "margin": rewards[PAIR * p] - rewards[PAIR * p + 1]}
        start = len(tokenizer(e.prompt, add_special_tokens=True)["input_ids"])  # the answer's first token
        for offset, side in enumerate(("chosen", "rejected")):
            r = PAIR * p + offset
            end = int(texts.last[r]) + 1
            scores = positions[r]
            change = scores - torch.cat([scores[:1], scores[:-1]])
            record[side] = {"completion": answer_text(e.fields[side]),
                            **token_fields(tokenizer, texts.ids[r, start:end].tolist(),
                                           {"score": scores[start:end], "score_change": change[start:end]}),
                            "reward": rewards[r]}
        records.append(record)
    return records
