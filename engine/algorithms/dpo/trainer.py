"""DPO: offline preference optimisation on (prompt, chosen, rejected) pairs.

A step takes `batch_size` pairs, lays them out as rows [chosen_0, rejected_0, chosen_1,
...] so that each prompt is encoded once for both answers (the shared-prefix pass), and
minimises the DPO loss of engine.rl.dpo_losses.dpo_loss against the reference, which is the
same model with the adapter disabled: per step, or once before training with
precompute_ref_log_probs. Names of the knobs and metrics follow TRL's DPO trainer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.data import Example
from engine.data.preference import load_preference_splits
from engine.rl.dpo_losses import dpo_loss, length_averaged, sequence_logps
from engine.model.rollout import Rollout
from engine.algorithms.update import MicroBatch, MicroLoss, StepBatch, UpdatePart, UpdateResult
from engine.algorithms.update_effect import effect_per_token
from engine.algorithms.base import Trainer
from engine.algorithms.reference_chunks import reference_chunks
from engine.algorithms.policy import set_update_mode
from engine.algorithms.step_result import StepResult
from engine.algorithms.declaration import REJECTED, plot
from engine.run.trajectories import token_fields

PAIR = 2  # rows per preference pair: chosen, rejected


@dataclass
class DPOStepOutputs:
    """What a DPO step keeps for `write_step_outputs`: its pairs, their rows
    [chosen_0, rejected_0, ...], the policy's token logprobs (2B, T), the recorded rows'
    top-5 (probs, ids) and entropy (None when no row is recorded), each pair's implicit
    rewards, and the recorded rows' reference logprobs (the step used sums)."""

    examples: list[Example]
    rows: Rollout
    logps: torch.Tensor
    top: tuple[torch.Tensor, torch.Tensor] | None
    entropy: torch.Tensor | None
    r_chosen: list[float]
    r_rejected: list[float]
    ref_recorded: torch.Tensor | None
    logprob_after: torch.Tensor | None = None  # the recorded rows after the update (update_effect.py)


@dataclass
class DPOBatch(StepBatch):
    """A DPO step's batch: its pairs (`samples` of them) as rows [chosen_0, rejected_0, ...],
    the reference's logps of each side (and per token, None from the cache), the chosen
    tokens' count (RPO's NLL); filled by the update: the policy's token logprobs and
    logit sums of every row, each pair's implicit rewards and sequence logps, the
    recorded rows' entropy and top-5."""

    examples: list[Example] = field(kw_only=True)
    ref_chosen: torch.Tensor = field(kw_only=True)
    ref_rejected: torch.Tensor = field(kw_only=True)
    ref_tokens: torch.Tensor | None = field(kw_only=True)
    chosen_tokens: torch.Tensor = field(kw_only=True)
    logps: torch.Tensor = field(kw_only=True)
    logit_sums: torch.Tensor = field(kw_only=True)
    per_pair: dict[str, torch.Tensor] = field(kw_only=True)


class DPOTrainer(Trainer):
    TEMPLATED_PAIRS = True
    MICRO_BATCH_UNIT = "preference pairs"
    SAMPLES = False  # it reads its pairs
    # Metric names as TRL's DPO trainer logs them.
    PLOTS = (
        plot("eval", "Held-out evaluation", eval=("accuracy", "reward")),
        plot("loss", "Loss", "loss"),
        plot("grad_norm", "Gradient norm", "grad_norm"),
        plot("lr", "Learning rate", "learning_rate"),
        plot("timing", "Step time", "step_time"),
        plot("dpo_margins", "Reward margins", "rewards/margins", "rewards/chosen", "rewards/rejected"),
        plot("dpo_logps", "Sequence logprobs", "logps/chosen", "logps/rejected"),
        plot("dpo_eval", "Held-out preference accuracy", eval=("preference_accuracy",)),
        plot("dpo_accuracy", "Preference accuracy", "rewards/accuracies"),
    )
    # One record per preference pair: a chosen and a rejected side.
    RECORDS = {"layout": "pair", "sides": ["chosen", "rejected"],
               "token_values": ["implicit_reward", "logprob", "ref_logprob"],
               "preferred": ["implicit_reward", "advantage"]}
    SAMPLE_FIELDS = (REJECTED,)
    RECORDS_UPDATE_EFFECT = True  # logprob_after / logprob_change of the recorded rows (update_effect.py)

    def load_examples(self, preset_dir: Path | None) -> tuple[list[Example], list[Example]]:
        return load_preference_splits(self.preset.data, self.cfg.seed, preset_dir)

    def setup_modules(self) -> None:
        self.loss_options = self.algo.model_dump()  # dpo_loss's: the loss type takes the options it names
        # Filled by the first step when precompute_ref_log_probs is on (after run_started
        # and the first evaluation, so a reader sees the run begin at once).
        self.reference_cache: dict[tuple[str, str, str], tuple[float, float, int, int]] = {}

    # -------------------------------------------------------------- batching

    def pair_rows(self, examples: list[Example]) -> Rollout:
        """Rows [chosen_0, rejected_0, chosen_1, ...], as a sampled rollout would be."""
        prompts = [e.prompt for e in examples for _ in range(PAIR)]
        answers = [e.fields[side] for e in examples for side in ("chosen", "rejected")]
        return self.policy.answer_rows(prompts, answers, self.algo.max_completion_length)

    def pair_micro_batches(self, pairs: int) -> list[slice]:
        """Row slices of whole pairs (this process's); training.micro_batch_size counts pairs."""
        return [slice(mb.start * PAIR, mb.stop * PAIR) for mb in self.micro_batches(pairs)]

    def pair_share(self, pairs: int) -> tuple[slice, slice]:
        """This process's share of a batch of `pairs`: (its pairs, their rows)."""
        mine = self.world.share(pairs)
        return mine, slice(mine.start * PAIR, mine.stop * PAIR)

    def side_logps(self, token_logps: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(chosen, rejected) sequence logps from interleaved rows; length-averaged where the
        loss type declares it (IPO)."""
        seq = sequence_logps(token_logps, mask, average=length_averaged(self.algo.loss_type))
        return seq[0::PAIR], seq[1::PAIR]

    # ------------------------------------------------------------- reference

    def _key(self, e: Example) -> tuple[str, str, str]:
        return (e.prompt, e.fields["chosen"], e.fields["rejected"])

    def precompute_reference(self, examples: list[Example]) -> None:
        """Reference logps of every pair, once (sums and lengths, so IPO's averages follow)."""
        for part, rows, ref in reference_chunks(self, examples, self.pair_rows, PAIR, "pairs"):
            sums = (ref * rows.completion_mask).sum(-1).tolist()
            lengths = rows.completion_mask.sum(-1).long().tolist()
            for j, e in enumerate(part):
                self.reference_cache[self._key(e)] = (sums[2 * j], sums[2 * j + 1], lengths[2 * j], lengths[2 * j + 1])

    def reference_side_logps(self, examples: list[Example], rows: Rollout
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The reference's summed (or length-averaged) logps of each pair's chosen and
        rejected answer (B each), and its per-token logprobs of every row (2B, T) when a
        pass computed them (None from the precomputed cache): the recorded rows' share is
        what the inspector shows, with no second pass over them."""
        if self.algo.precompute_ref_log_probs and all(self._key(e) in self.reference_cache for e in examples):
            cached = [self.reference_cache[self._key(e)] for e in examples]
            chosen = torch.tensor([c[0] for c in cached], device=self.device)
            rejected = torch.tensor([c[1] for c in cached], device=self.device)
            if length_averaged(self.algo.loss_type):
                chosen = chosen / torch.tensor([c[2] for c in cached], device=self.device)
                rejected = rejected / torch.tensor([c[3] for c in cached], device=self.device)
            return chosen, rejected, None
        ref = torch.zeros_like(rows.completion_mask)
        for mb in self.pair_micro_batches(len(examples)):
            ref[mb] = self.reference_logprobs(rows, mb, group_size=PAIR)
        self.world.combine_rows(ref, self.pair_share(len(examples))[1])  # each row from the process that ran it
        return (*self.side_logps(ref, rows.completion_mask), ref)

    # ------------------------------------------------------------------ step

    def prepare(self) -> DPOBatch:
        """The step's pairs as rows and the reference's logps of each side."""
        if self.algo.precompute_ref_log_probs and not self.reference_cache:
            self.precompute_reference(self.train_examples)
            self.start_clock()  # the one-off precomputation is not the first step's time
        examples = self.stream.take(self.cfg.batch_size)
        rows = self.pair_rows(examples)
        ref_chosen, ref_rejected, ref_tokens = self.reference_side_logps(examples, rows)
        self.rollout_done()
        B, mask = len(examples), rows.completion_mask
        return DPOBatch(rows, self.num_recorded(B) * PAIR, B, unit=PAIR, pass_group=PAIR, examples=examples,
                        ref_chosen=ref_chosen, ref_rejected=ref_rejected, ref_tokens=ref_tokens,
                        chosen_tokens=mask[0::PAIR].sum().clamp(min=1), logps=torch.zeros_like(mask),
                        logit_sums=torch.zeros(B * PAIR, device=self.device),
                        per_pair={k: torch.zeros(B, device=self.device)
                                  for k in ("r_chosen", "r_rejected", "chosen", "rejected")})

    def part_micro_batches(self, part: UpdatePart) -> list[slice]:
        return self.pair_micro_batches(part.size // PAIR)

    def loss(self, batch: DPOBatch, micro: MicroBatch) -> MicroLoss:
        """DPO's loss of one micro-batch of pairs (its share of the mean over the batch's
        pairs), with RPO's NLL of the chosen answers."""
        algo, rows, mb, B = self.algo, batch.rows, micro.rows, batch.samples
        mask = rows.completion_mask
        logits = self.completion_logits(rows, mb, group_size=PAIR)  # TokenLogits (b, T, V)
        token_logps = logits.logprobs(rows.completion_ids[mb])
        chosen, rejected = self.side_logps(token_logps, mask[mb])
        pairs = slice(mb.start // PAIR, mb.stop // PAIR)
        losses, r_chosen, r_rejected = dpo_loss(chosen, rejected, batch.ref_chosen[pairs], batch.ref_rejected[pairs],
                                                **self.loss_options)
        loss = losses.sum() / B  # the mean over all pairs, accumulated over micro-batches
        metrics = {}
        if algo.rpo_alpha is not None:
            # the chosen answers' NLL, a mean over every chosen token of the batch
            nll = -(token_logps[0::PAIR] * mask[mb][0::PAIR]).sum() / batch.chosen_tokens
            loss = loss + algo.rpo_alpha * nll
            metrics["nll_loss"] = nll.item()
        with torch.no_grad():
            batch.logps[mb] = token_logps.detach()
            batch.logit_sums[mb] = (logits.sums() * mask[mb]).sum(-1)
            batch.record_top(logits, mb, entropy=True)
        for key, value in (("r_chosen", r_chosen), ("r_rejected", r_rejected), ("chosen", chosen),
                           ("rejected", rejected)):
            batch.per_pair[key][pairs] = value.detach()
        return MicroLoss(loss, 1.0, metrics)

    def update_effect_inputs(self, batch: DPOBatch):
        # a token's "advantage" in DPO: +1 on the chosen side (pushed up), -1 on the rejected
        side_sign = torch.tensor([1.0, -1.0], device=self.device).repeat(batch.samples)
        return batch.logps, side_sign, batch.rows.completion_mask

    def finish(self, batch: DPOBatch, update: UpdateResult) -> StepResult[DPOStepOutputs]:
        B, rows, per_pair = batch.samples, batch.rows, batch.per_pair
        mine_pairs, mine_rows = self.pair_share(B)  # several processes: each row and pair from its process
        for values in per_pair.values():
            self.world.combine_rows(values, mine_pairs)
        for values in (batch.logps, batch.logit_sums):
            self.world.combine_rows(values, mine_rows)
        r_chosen, r_rejected = per_pair["r_chosen"], per_pair["r_rejected"]
        V = self.model.get_output_embeddings().weight.shape[0]
        lengths = rows.completion_mask.sum(-1)
        metrics = {
            "rewards/chosen": float(r_chosen.mean()),
            "rewards/rejected": float(r_rejected.mean()),
            "rewards/margins": float((r_chosen - r_rejected).mean()),
            "rewards/accuracies": float((r_chosen > r_rejected).float().mean()),
            "logps/chosen": float(per_pair["chosen"].mean()),
            "logps/rejected": float(per_pair["rejected"].mean()),
            # Mean logit over the vocabulary and the side's tokens, as TRL logs it.
            "logits/chosen": float(batch.logit_sums[0::PAIR].sum() / (lengths[0::PAIR].sum() * V)),
            "logits/rejected": float(batch.logit_sums[1::PAIR].sum() / (lengths[1::PAIR].sum() * V)),
        }
        if self.algo.rpo_alpha is not None:
            metrics["nll_loss"] = update.metrics.get("nll_loss")
        outputs = DPOStepOutputs(examples=batch.examples, rows=rows, logps=batch.logps, top=batch.top,
                                 entropy=batch.recorded_entropy,
                                 r_chosen=r_chosen.tolist(), r_rejected=r_rejected.tolist(),
                                 ref_recorded=self.recorded_reference(rows, batch.num_recorded, group_size=PAIR)
                                 if batch.ref_tokens is None else batch.ref_tokens[:batch.num_recorded],
                                 logprob_after=batch.logprob_after)
        return StepResult(metrics, outputs)

    def write_step_outputs(self, last: DPOStepOutputs) -> None:
        examples = last.examples
        self.emit_samples([
            {"index": i, "group": i, "prompt": e.prompt, "completion": e.fields["chosen"],
             "rejected": e.fields["rejected"], "reward": last.r_chosen[i],
             "rewards": {"chosen": last.r_chosen[i], "rejected": last.r_rejected[i],
                         "margin": last.r_chosen[i] - last.r_rejected[i]},
             "advantage": last.r_chosen[i] - last.r_rejected[i]}
            for i, e in enumerate(examples[: self.cfg.log_completions])
        ])
        top, entropy = last.top, last.entropy
        if top is None:
            return
        n_rows = top[0].shape[0]
        rows = last.rows
        ref = last.ref_recorded  # per token, for the few recorded rows only
        beta = self.algo.beta
        records = []
        effect = effect_per_token(last.logps, last.logprob_after)  # the recorded rows' change, if recorded
        for p in range(n_rows // PAIR):
            e = examples[p]
            record = {"step": self.step, "index": p, "group": p, "prompt": e.prompt, "beta": beta,
                      "margin": last.r_chosen[p] - last.r_rejected[p]}
            for offset, side in enumerate(("chosen", "rejected")):
                r = PAIR * p + offset
                n = int(rows.completion_mask[r].sum())
                lp, rf = last.logps[r], ref[r]
                record[side] = {
                    "completion": e.fields[side],
                    **token_fields(self.tokenizer, rows.completion_ids[r, :n].tolist(),
                                   {"logprob": lp, "ref_logprob": rf, "implicit_reward": beta * (lp - rf),
                                    "entropy": entropy[r], **{k: v[r] for k, v in effect.items()}},
                                   (top[0][r], top[1][r])),
                    "reward": last.r_chosen[p] if side == "chosen" else last.r_rejected[p],
                }
            records.append(record)
        self.write_trajectories(records)

    # ------------------------------------------------------------------ eval

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Held-out preference accuracy (implicit reward of chosen above rejected) and
        margins; for data with answers (built-in tasks), greedy generation accuracy too."""
        if not self.eval_examples:
            return {}
        started = time.perf_counter()
        set_update_mode(self.model, False)
        margins = []
        chunk = max(self.cfg.batch_size, 32)
        for i in range(0, len(self.eval_examples), chunk):
            part = self.eval_examples[i: i + chunk]
            rows = self.pair_rows(part)
            whole = slice(0, rows.completion_ids.shape[0])
            policy = self.completion_logits(rows, whole, group_size=PAIR).logprobs(rows.completion_ids)
            ref = self.reference_logprobs(rows, whole, group_size=PAIR)
            (pc, pr), (rc, rr) = self.side_logps(policy, rows.completion_mask), self.side_logps(ref, rows.completion_mask)
            margins += (self.algo.beta * ((pc - rc) - (pr - rr))).tolist()
        result = super().evaluate() if self.accuracy_reward else {}
        result.update({
            "preference_accuracy": sum(m > 0 for m in margins) / len(margins),
            "rewards/margins": sum(margins) / len(margins),
            "num_pairs": len(margins),
            "eval_time": time.perf_counter() - started,
        })
        result.setdefault("accuracy", None)
        return result
