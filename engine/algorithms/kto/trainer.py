"""KTO: offline optimisation on unpaired rows (a prompt, a completion, whether it is
desirable), Ethayarajh et al. 2024, as TRL 1.16's KTO trainer.

A step takes `batch_size` rows. With loss_type kto it first takes the KL reference point
(engine.rl.kto_losses.kl_reference_point): each row's prompt paired with the previous
row's completion (`mismatched_order`, TRL's rotation), policy and reference passes over
those pairs without gradient, the mean of their log ratios, clamped at 0. Then one pass
with gradient over the rows themselves, and engine.rl.kto_losses.kto_loss against the
reference (the same model with the adapter disabled: per step, or once before training
with precompute_ref_log_probs). Names of the knobs and metrics follow TRL's KTO trainer.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.algorithms.base import Trainer
from engine.algorithms.reference_chunks import reference_chunks
from engine.algorithms.declaration import LABEL as LABEL_FIELD, plot
from engine.algorithms.evaluation import MIN_EVAL_BATCH, accuracy_function, evaluate_generations
from engine.algorithms.policy import set_update_mode
from engine.algorithms.step_result import StepResult
from engine.algorithms.update import MicroBatch, MicroLoss, StepBatch, UpdateResult
from engine.algorithms.update_effect import effect_per_token
from engine.data import Example
from engine.data.unpaired import COMPLETION, LABEL, load_unpaired_splits
from engine.model.rollout import Rollout
from engine.data.location import prompt_location
from engine.rl.catalog import KTO_LOSSES
from engine.rl.dpo_losses import sequence_logps
from engine.rl.kto_losses import kl_reference_point, kto_loss, mismatched_order
from engine.run.trajectories import token_fields

log = logging.getLogger(__name__)


def side_means(values: list[float], desirable: list[bool]) -> tuple[float | None, float | None]:
    """The mean of `values` over the desirable rows and over the undesirable ones; None
    for a side the batch lacks (TRL then logs nothing for it).

    >>> side_means([0.2, -0.1, 0.4], [True, False, True])
    (0.30000000000000004, -0.1)
    >>> side_means([0.2], [True])
    (0.2, None)
    """
    chosen = [v for v, d in zip(values, desirable) if d]
    rejected = [v for v, d in zip(values, desirable) if not d]
    return (sum(chosen) / len(chosen) if chosen else None, sum(rejected) / len(rejected) if rejected else None)


def margin(chosen: float | None, rejected: float | None) -> float | None:
    """rewards/margins: chosen minus rejected, when the batch has both sides."""
    return None if chosen is None or rejected is None else chosen - rejected


def label_accuracy(rewards: list[float], desirable: list[bool]) -> float:
    """The share of rows whose implicit reward has their label's sign: above 0 for a
    desirable row, below 0 for an undesirable one (0 at the start, policy = reference).

    >>> label_accuracy([0.2, -0.1, -0.3, 0.0], [True, False, True, False])
    0.5
    """
    return sum((r > 0) if d else (r < 0) for r, d in zip(rewards, desirable)) / len(rewards)


def distinct_prompts(examples: list[Example]) -> list[Example]:
    """The first row of each prompt, in order: a built-in task's held-out prompts come
    twice (desirable and undesirable row), and greedy generation judges each once."""
    first: dict = {}
    for e in examples:
        first.setdefault(e.prompt, e)
    return list(first.values())


@dataclass
class KTOStepOutputs:
    """What a KTO step keeps for `write_step_outputs`: its rows, their rollout, the
    policy's token logprobs (B, T), the recorded rows' top-5 (probs, ids) and entropy
    (None when no row is recorded), each row's implicit reward, the step's KL reference
    point, and the recorded rows' reference logprobs (the step used sums)."""

    examples: list[Example]
    rows: Rollout
    logps: torch.Tensor
    top: tuple[torch.Tensor, torch.Tensor] | None
    entropy: torch.Tensor | None
    rewards: list[float]
    kl: float
    ref_recorded: torch.Tensor | None
    logprob_after: torch.Tensor | None = None  # the recorded rows after the update (update_effect.py)


@dataclass
class KTOBatch(StepBatch):
    """A KTO step's batch: its rows (`samples` of them) with their labels, the reference's
    logp sums and the step's KL reference point; filled by the update: the policy's token
    logprobs, each row's sequence logp, logit and entropy sums, the recorded rows' entropy
    and top-5."""

    examples: list[Example] = field(kw_only=True)
    labels: list[bool] = field(kw_only=True)
    desirable: torch.Tensor = field(kw_only=True)
    ref: torch.Tensor = field(kw_only=True)
    kl: torch.Tensor = field(kw_only=True)
    logps: torch.Tensor = field(kw_only=True)
    per_row: dict[str, torch.Tensor] = field(kw_only=True)


class KTOTrainer(Trainer):
    MICRO_BATCH_UNIT = "unpaired rows"
    SAMPLES = False  # it reads its rows
    # Metric names as TRL's KTO trainer logs them (count/* as TRL's older versions did).
    PLOTS = (
        plot("eval", "Held-out evaluation", eval=("accuracy", "reward")),
        plot("loss", "Loss", "loss"),
        plot("kl", "KL reference point (mismatched pairs)", "kl"),
        plot("kto_rewards", "Implicit rewards", "rewards/chosen", "rewards/rejected", "rewards/margins"),
        plot("kto_logps", "Sequence logprobs", "logps/chosen", "logps/rejected"),
        plot("kto_eval", "Held-out label accuracy", eval=("label_accuracy",)),
        plot("entropy", "Entropy", "entropy"),
        plot("kto_counts", "Desirable and undesirable rows", "count/chosen", "count/rejected"),
        plot("grad_norm", "Gradient norm", "grad_norm"),
        plot("lr", "Learning rate", "learning_rate"),
        plot("timing", "Step time", "step_time"),
    )
    # One record per row, marked with its label.
    RECORDS = {"layout": "single", "token_values": ["implicit_reward", "logprob", "ref_logprob", "entropy"],
               "preferred": ["implicit_reward"]}
    SAMPLE_FIELDS = (LABEL_FIELD,)
    RECORDS_UPDATE_EFFECT = True  # logprob_after / logprob_change of the recorded rows (update_effect.py)

    def load_examples(self, preset_dir: Path | None) -> tuple[list[Example], list[Example]]:
        data = self.preset.data
        where = None
        if data.path is not None:  # a file's bad row is named by its line
            where = lambda number, e: prompt_location(data, preset_dir, e)  # noqa: E731
        train, held_out = load_unpaired_splits(data, self.cfg.seed, preset_dir, where=where)
        desirable = sum(e.fields[LABEL] for e in train)
        warning = self.algo.balance_warning(desirable, len(train) - desirable)
        if warning:
            log.warning(warning)
        self.loaded_rows = (train, held_out)  # as loaded: setup_modules templates their completions
        return train, held_out

    def setup_modules(self) -> None:
        # The chat template applies to a completion as to DPO's answers: the text the
        # template puts after the prompt for an assistant turn holding it. The Trainer
        # templated the prompts; the completions are templated here from the rows as
        # loaded (same order), in place, so the prompt stream serves the templated rows.
        for templated, loaded in zip((self.train_examples, self.eval_examples), self.loaded_rows):
            templated[:] = [Example(t.prompt, {**t.fields, COMPLETION: self.chat.answer(
                self.tokenizer, raw.prompt, raw.fields[COMPLETION])}) for t, raw in zip(templated, loaded)]
        self.loss_options = self.algo.model_dump()  # kto_loss's: the loss type takes the options it names
        # (prompt, completion) -> reference logp sum, filled by the first step when
        # precompute_ref_log_probs is on (after run_started and the first evaluation).
        self.reference_cache: dict[tuple[str, str], float] = {}

    # -------------------------------------------------------------- batching

    def completion_rows(self, prompts: list[str], completions: list[str]) -> Rollout:
        """Rows (prompt i, completion i), as a sampled rollout would be (as DPO's answers:
        up to the first end token, or with EOS added)."""
        return self.policy.answer_rows(prompts, completions, self.algo.max_completion_length)

    def rows_of(self, examples: list[Example]) -> Rollout:
        return self.completion_rows([e.prompt for e in examples], [e.fields[COMPLETION] for e in examples])

    @torch.no_grad()
    def sequence_sums(self, rows: Rollout, reference: bool) -> torch.Tensor:
        """Each row's summed logprob (B,), without gradient, by the reference (adapter off)
        or the policy: each process runs its share in micro-batches, the rows combined."""
        sums = torch.zeros(rows.completion_ids.shape[0], device=self.device)
        for mb in self.micro_batches(len(sums)):
            if reference:
                token_logps = self.reference_logprobs(rows, mb, group_size=1)
            else:
                token_logps = self.completion_logits(rows, mb, group_size=1).logprobs(rows.completion_ids[mb])
            sums[mb] = sequence_logps(token_logps, rows.completion_mask[mb])
        return self.world.combine_rows(sums, self.world.share(len(sums)))

    # ------------------------------------------------------------- reference

    def _key(self, e: Example) -> tuple[str, str]:
        return (e.prompt, e.fields[COMPLETION])

    def precompute_reference(self, examples: list[Example]) -> None:
        """Reference logp sums of every training row, once."""
        for part, rows, ref in reference_chunks(self, examples, self.rows_of, 1, "rows"):
            for e, total in zip(part, sequence_logps(ref, rows.completion_mask).tolist()):
                self.reference_cache[self._key(e)] = total

    def reference_sums(self, examples: list[Example], rows: Rollout) -> torch.Tensor:
        if self.algo.precompute_ref_log_probs and all(self._key(e) in self.reference_cache for e in examples):
            return torch.tensor([self.reference_cache[self._key(e)] for e in examples], device=self.device)
        return self.sequence_sums(rows, reference=True)

    def kl_point(self, examples: list[Example]) -> torch.Tensor:
        """The step's KL reference point: row i's prompt with row i - 1's completion (row 0
        with the last row's; mismatched_order, as TRL rotates a batch's completions),
        policy minus reference logp sums, their mean over the batch, detached, clamped
        at 0. Every process's rows count (sequence_sums combines them)."""
        order = mismatched_order(len(examples))
        pairs = self.completion_rows([e.prompt for e in examples], [examples[j].fields[COMPLETION] for j in order])
        return kl_reference_point(self.sequence_sums(pairs, reference=False), self.sequence_sums(pairs, reference=True))

    # ------------------------------------------------------------------ step

    def prepare(self) -> KTOBatch:
        """The step's rows, the reference's logp sums and the KL reference point."""
        algo = self.algo
        if algo.precompute_ref_log_probs and not self.reference_cache:
            self.precompute_reference(self.train_examples)
            self.start_clock()  # the one-off precomputation is not the first step's time
        examples = self.stream.take(self.cfg.batch_size)
        B = len(examples)
        labels = [bool(e.fields[LABEL]) for e in examples]
        rows = self.rows_of(examples)
        # The passes without gradient in the mode of the update (dropout as it will be).
        set_update_mode(self.model, True, lora_dropout=self.lora_dropout_in_updates)
        ref = self.reference_sums(examples, rows)
        uses_kl = KTO_LOSSES.declares(algo.loss_type).uses_kl
        kl = self.kl_point(examples) if uses_kl else torch.zeros((), device=self.device)
        self.rollout_done()
        # Per row: the policy's sequence logp, and the sums over its tokens of the
        # vocabulary-summed logits and of the entropy (for TRL's logits/* and entropy).
        return KTOBatch(rows, self.num_recorded(B), B, pass_group=1, examples=examples, labels=labels,
                        desirable=torch.tensor(labels, dtype=torch.bool, device=self.device), ref=ref, kl=kl,
                        logps=torch.zeros_like(rows.completion_mask),
                        per_row={k: torch.zeros(B, device=self.device) for k in ("policy", "logits", "entropy")})

    def loss(self, batch: KTOBatch, micro: MicroBatch) -> MicroLoss:
        """KTO's loss of one micro-batch of rows (its share of the mean over the batch)."""
        rows, mb, mask = batch.rows, micro.rows, batch.rows.completion_mask
        logits = self.completion_logits(rows, mb, group_size=1)  # TokenLogits (b, T, V)
        token_logps = logits.logprobs(rows.completion_ids[mb])
        policy = sequence_logps(token_logps, mask[mb])
        losses, _ = kto_loss(policy, batch.ref[mb], batch.desirable[mb], batch.kl, **self.loss_options)
        with torch.no_grad():
            batch.logps[mb] = token_logps.detach()
            entropy = logits.entropy()
            batch.per_row["policy"][mb] = policy.detach()
            batch.per_row["logits"][mb] = (logits.sums() * mask[mb]).sum(-1)
            batch.per_row["entropy"][mb] = (entropy * mask[mb]).sum(-1)
            batch.record_top(logits, mb, entropy=entropy)
        return MicroLoss(losses.sum() / batch.samples)  # the mean over all rows, accumulated over micro-batches

    def update_effect_inputs(self, batch: KTOBatch):
        # a token's "advantage" in KTO: +1 in a desirable row (pushed up), -1 in an undesirable one
        return batch.logps, batch.desirable.float() * 2 - 1, batch.rows.completion_mask

    def finish(self, batch: KTOBatch, update: UpdateResult) -> StepResult[KTOStepOutputs]:
        mine = self.world.share(batch.samples)  # several processes: each row from its process
        for values in (batch.logps, *batch.per_row.values()):
            self.world.combine_rows(values, mine)
        rewards = (self.algo.beta * (batch.per_row["policy"] - batch.ref)).tolist()
        V = self.model.get_output_embeddings().weight.shape[0]
        metrics = {"kl": float(batch.kl)}
        metrics.update(self.side_metrics(rewards, batch.per_row, batch.rows.completion_mask.sum(-1), batch.labels, V))
        outputs = KTOStepOutputs(examples=batch.examples, rows=batch.rows, logps=batch.logps, top=batch.top,
                                 entropy=batch.recorded_entropy,
                                 rewards=rewards, kl=float(batch.kl),
                                 ref_recorded=self.recorded_reference(batch.rows, batch.num_recorded, group_size=1),
                                 logprob_after=batch.logprob_after)
        return StepResult(metrics, outputs)

    @staticmethod
    def side_metrics(rewards: list[float], per_row: dict[str, torch.Tensor], lengths: torch.Tensor,
                     labels: list[bool], vocab: int) -> dict:
        """TRL's per-side metrics of a step: rewards/chosen and rewards/rejected (mean
        implicit reward of the desirable and the undesirable rows), rewards/margins,
        logps/* (mean sequence logp), logits/* (mean logit over the vocabulary and the
        side's tokens), entropy (mean over every completion token), count/* (rows)."""
        chosen, rejected = side_means(rewards, labels)
        logp_chosen, logp_rejected = side_means(per_row["policy"].tolist(), labels)
        side = torch.tensor(labels, dtype=torch.bool, device=lengths.device)
        metrics = {"rewards/chosen": chosen, "rewards/rejected": rejected, "rewards/margins": margin(chosen, rejected),
                   "logps/chosen": logp_chosen, "logps/rejected": logp_rejected,
                   "entropy": float(per_row["entropy"].sum() / lengths.sum().clamp(min=1)),
                   "count/chosen": int(side.sum()), "count/rejected": int((~side).sum())}
        for name, rows in (("chosen", side), ("rejected", ~side)):
            tokens = lengths[rows].sum()
            metrics[f"logits/{name}"] = float(per_row["logits"][rows].sum() / (tokens * vocab)) if tokens else None
        return metrics

    def write_step_outputs(self, last: KTOStepOutputs) -> None:
        examples = last.examples
        self.emit_samples([
            {"index": i, "group": i, "prompt": e.prompt, "completion": e.fields[COMPLETION],
             "label": bool(e.fields[LABEL]), "reward": last.rewards[i]}
            for i, e in enumerate(examples[: self.cfg.log_completions])
        ])
        top, entropy = last.top, last.entropy
        if top is None:
            return
        rows, ref, beta = last.rows, last.ref_recorded, self.algo.beta  # ref: per token, recorded rows only
        effect = effect_per_token(last.logps, last.logprob_after)  # the recorded rows' change, if recorded
        records = []
        for r in range(top[0].shape[0]):
            e = examples[r]
            n = int(rows.completion_mask[r].sum())
            lp, rf = last.logps[r], ref[r]
            record = {"step": self.step, "index": r, "group": r, "prompt": e.prompt, "completion": e.fields[COMPLETION],
                      **token_fields(self.tokenizer, rows.completion_ids[r, :n].tolist(),
                                     {"logprob": lp, "ref_logprob": rf, "implicit_reward": beta * (lp - rf),
                                      "entropy": entropy[r], **{k: v[r] for k, v in effect.items()}},
                                     (top[0][r], top[1][r]))}
            # `kl` is the step's reference point (token_fields put the per-token k3 there).
            record.update({"label": bool(e.fields[LABEL]), "reward": last.rewards[r], "kl": last.kl, "beta": beta})
            records.append(record)
        self.write_trajectories(records)

    # ------------------------------------------------------------------ eval

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Held-out label accuracy (implicit reward of desirable rows above 0, undesirable
        below), the sides' mean implicit rewards; for data with answers (built-in tasks),
        greedy generation accuracy on each distinct prompt too."""
        if not self.eval_examples:
            return {}
        started = time.perf_counter()
        set_update_mode(self.model, False)
        rewards = []
        chunk = max(self.cfg.batch_size, MIN_EVAL_BATCH)
        for i in range(0, len(self.eval_examples), chunk):
            part = self.eval_examples[i: i + chunk]
            rows = self.rows_of(part)
            whole = slice(0, len(part))
            policy = self.completion_logits(rows, whole, group_size=1).logprobs(rows.completion_ids)
            ref = self.reference_logprobs(rows, whole, group_size=1)
            rewards += (self.algo.beta * (sequence_logps(policy, rows.completion_mask)
                                          - sequence_logps(ref, rows.completion_mask))).tolist()
        result = {}
        if self.accuracy_reward:
            result = evaluate_generations(distinct_prompts(self.eval_examples), self.greedy_completions,
                                          self.reward_components,
                                          accuracy_function(self.preset.rewards, self.accuracy_reward),
                                          batch=max(self.cfg.batch_size, MIN_EVAL_BATCH))
        labels = [bool(e.fields[LABEL]) for e in self.eval_examples]
        chosen, rejected = side_means(rewards, labels)
        result.update({
            "label_accuracy": label_accuracy(rewards, labels),
            "rewards/chosen": chosen, "rewards/rejected": rejected, "rewards/margins": margin(chosen, rejected),
            "num_rows": len(rewards),
            "eval_time": time.perf_counter() - started,
        })
        result.setdefault("accuracy", None)
        return result
