"""SFT: supervised fine-tuning on demonstrations, the first stage of the RLHF pipeline.

A step takes `batch_size` demonstrations as rows (prompt, completion), as DPO lays out
its answers, and minimises the completion tokens' negative log-likelihood: their sum over
the batch divided by their count (TRL's SFTTrainer, completion-only loss). Plain-text rows
(and every row with completion_only_loss false) train on every token but the first.
Metrics as TRL logs them: loss, mean_token_accuracy (the target is the model's top
token), entropy (over the target positions), num_tokens (every token trained on so far,
prompts included). A demonstration's record holds each target token's log-probability,
entropy, rank (1: the model's top choice) and top-5 alternatives: where the model
disagrees with the data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.algorithms.base import Trainer
from engine.algorithms.declaration import plot
from engine.algorithms.evaluation import MIN_EVAL_BATCH
from engine.algorithms.policy import set_update_mode
from engine.algorithms.step_result import StepResult
from engine.algorithms.update import MicroBatch, MicroLoss, StepBatch, UpdateResult
from engine.algorithms.update_effect import effect_per_token
from engine.data import Example
from engine.data.demonstrations import COMPLETION, load_demonstration_splits
from engine.model.rollout import Rollout
from engine.run.trajectories import token_fields


@dataclass
class SFTBatch(StepBatch):
    """A step's demonstrations as rows, the count of target tokens (the loss's
    denominator); filled by the update: each row's token logprobs, and the sums of the
    targets' entropy and of the targets the model ranks first."""

    examples: list[Example] = field(kw_only=True)
    target_tokens: torch.Tensor = field(kw_only=True)
    logps: torch.Tensor = field(kw_only=True)
    sums: dict[str, float] = field(default_factory=lambda: {"entropy": 0.0, "correct": 0.0}, kw_only=True)
    ranks: list = field(default_factory=list, kw_only=True)  # the recorded rows' target ranks, per micro-batch


@dataclass
class SFTStepOutputs:
    examples: list[Example]
    rows: Rollout
    logps: torch.Tensor
    top: tuple[torch.Tensor, torch.Tensor] | None
    entropy: torch.Tensor | None
    logprob_after: torch.Tensor | None
    rank: torch.Tensor | None = None  # (recorded rows, T): each target's rank, 1 = the model's top choice


def target_stats(logits, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """(entropy (b, T), the summed entropy over the targets, how many targets are the
    model's top token) of a micro-batch's TokenLogits."""
    entropy = logits.entropy()
    top1 = logits.top(ids.shape[0], k=1)[1][..., 0]
    return entropy, float((entropy * mask).sum()), float(((top1 == ids) * mask).sum())


def token_rank(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Each target's rank among the vocabulary, 1 + the number of entries with a strictly
    higher logit (1: the model's top choice; ties share the better rank). `logits` (..., V),
    `ids` (...) -> (...) long."""
    target = logits.gather(-1, ids.unsqueeze(-1))
    return 1 + (logits > target).sum(-1)


@torch.no_grad()
def recorded_ranks(logits, ids: torch.Tensor, rows: slice, num_recorded: int) -> torch.Tensor | None:
    """The ranks of the targets `ids` (b, T) of the recorded rows among a micro-batch's
    `rows` (TokenLogits `logits` of that micro-batch's pass), or None when none is
    recorded. The pass's hidden states through the output head, chunk by chunk, as the
    top-5 are taken (a temperature or a soft cap does not change an order)."""
    recorded = max(0, min(rows.stop, num_recorded) - rows.start)
    if not recorded:
        return None
    hidden = logits.hidden[:recorded].detach()
    targets = ids[:recorded]
    chunks = zip(hidden.reshape(-1, hidden.shape[-1]).split(logits.chunk_tokens),
                 targets.reshape(-1).split(logits.chunk_tokens))
    parts = [token_rank(logits.head(h).float(), t) for h, t in chunks]
    return torch.cat(parts).reshape(targets.shape)


class SFTTrainer(Trainer):
    MICRO_BATCH_UNIT = "demonstrations"
    SAMPLES = False  # it reads its demonstrations
    PLOTS = (
        plot("eval", "Held-out evaluation", eval=("accuracy", "reward")),
        plot("loss", "Loss (completion NLL)", "loss"),
        plot("sft_eval_loss", "Held-out loss", eval=("loss",)),
        plot("sft_eval_tokens", "Held-out token accuracy", eval=("mean_token_accuracy",)),
        plot("sft_accuracy", "Mean token accuracy", "mean_token_accuracy"),
        plot("sft_entropy", "Entropy", "entropy"),
        plot("grad_norm", "Gradient norm", "grad_norm"),
        plot("lr", "Learning rate", "learning_rate"),
        plot("sft_tokens", "Tokens trained on", "num_tokens"),
        plot("timing", "Step time", "step_time"),
    )
    # A record is a demonstration (the data's answer, not a sample): the inspector says so.
    RECORDS = {"layout": "single", "token_values": ["logprob", "entropy", "rank"],
               "preferred": ["probability", "logprob"], "demonstration": True}
    RECORDS_UPDATE_EFFECT = True  # every target token is pushed up (advantage +1)

    def load_examples(self, preset_dir: Path | None) -> tuple[list[Example], list[Example]]:
        return load_demonstration_splits(self.preset.data, self.cfg.seed, preset_dir)

    def template_data(self, examples: list[Example]) -> list[Example]:
        """Prompts through the chat template and completions as the text the template puts
        after them for an assistant turn (DPO's answers' way); plain-text rows unchanged."""
        return [e if e.prompt == "" else
                Example(self.chat.render(self.tokenizer, e.prompt),
                        {**e.fields, COMPLETION: self.chat.answer(self.tokenizer, e.prompt, e.fields[COMPLETION])})
                for e in examples]

    def setup_modules(self) -> None:
        self.num_tokens = 0  # TRL's num_tokens: every token of the rows trained on so far

    def extra_state(self) -> dict:
        return {"num_tokens": self.num_tokens}

    def load_extra_state(self, state: dict) -> None:
        self.num_tokens = int(state.get("num_tokens", 0))

    # -------------------------------------------------------------- batching

    def demonstration_rows(self, examples: list[Example]) -> Rollout:
        """Rows (prompt, completion) of token ids: the completion up to its first end token
        or with EOS added, cut to max_completion_length. A row that trains on every token
        (plain text, or completion_only_loss false) has its first token as the prompt; the
        cut then applies to the text (plain text) or to the answer alone (the prompt's
        tokens are all kept, so they never take the answer's room)."""
        tokenizer, cap = self.tokenizer, self.algo.max_completion_length
        prompts, completions = [], []
        for e in examples:
            if e.prompt == "":  # plain text: the tokenizer's own start (a BOS where it adds one), EOS at the end
                whole = tokenizer(e.fields[COMPLETION], add_special_tokens=True)["input_ids"]
                whole = whole + ([] if whole and whole[-1] in self.policy.loaded.eos_token_ids
                                 else [tokenizer.eos_token_id])
                whole = whole[:1 + cap]
            else:
                answer = self.policy.encode_answer(e.fields[COMPLETION], cap)
                prompt = tokenizer(e.prompt, add_special_tokens=False)["input_ids"]
                if self.algo.completion_only_loss:
                    prompts.append(prompt)
                    completions.append(answer)
                    continue
                whole = prompt + answer
            prompts.append(whole[:1])
            completions.append(whole[1:])
        return self.policy.id_rows(prompts, completions)

    # ------------------------------------------------------------------ step

    def prepare(self) -> SFTBatch:
        examples = self.stream.take(self.cfg.batch_size)
        rows = self.demonstration_rows(examples)
        self.rollout_done()
        mask = rows.completion_mask
        return SFTBatch(rows, self.num_recorded(len(examples)), len(examples), examples=examples,
                        target_tokens=mask.sum().clamp(min=1), logps=torch.zeros_like(mask))

    def loss(self, batch: SFTBatch, micro: MicroBatch) -> MicroLoss:
        """The micro-batch's share of the batch's mean NLL over every target token."""
        rows, mb = batch.rows, micro.rows
        ids, mask = rows.completion_ids[mb], rows.completion_mask[mb]
        logits = self.completion_logits(rows, mb, group_size=1)
        token_logps = logits.logprobs(ids)
        loss = -(token_logps * mask).sum() / batch.target_tokens
        with torch.no_grad():
            batch.logps[mb] = token_logps.detach()
            entropy, entropy_sum, correct = target_stats(logits, ids, mask)
            batch.sums["entropy"] += entropy_sum
            batch.sums["correct"] += correct
            batch.record_top(logits, mb, entropy=entropy)
            ranks = recorded_ranks(logits, ids, mb, batch.num_recorded)
            if ranks is not None:
                batch.ranks.append(ranks)
        return MicroLoss(loss, 1.0, {})

    def update_effect_inputs(self, batch: SFTBatch):
        # every target token is what the update pushes up
        return batch.logps, torch.ones(batch.size, device=self.device), batch.rows.completion_mask

    def finish(self, batch: SFTBatch, update: UpdateResult) -> StepResult[SFTStepOutputs]:
        entropy, correct = self.world.sum_floats([batch.sums["entropy"], batch.sums["correct"]])
        self.world.combine_rows(batch.logps, self.world.share(batch.size))
        targets = float(batch.target_tokens)
        self.num_tokens += batch.tokens
        metrics = {"mean_token_accuracy": correct / targets, "entropy": entropy / targets,
                   "num_tokens": self.num_tokens, "completions/mean_length": targets / batch.size}
        return StepResult(metrics, SFTStepOutputs(batch.examples, batch.rows, batch.logps, batch.top,
                                                  batch.recorded_entropy, batch.logprob_after,
                                                  torch.cat(batch.ranks) if batch.ranks else None))

    def write_step_outputs(self, last: SFTStepOutputs) -> None:
        examples = last.examples
        mean_logps = ((last.logps * last.rows.completion_mask).sum(-1)
                      / last.rows.completion_mask.sum(-1).clamp(min=1)).tolist()
        self.emit_samples([
            {"index": i, "group": i, "prompt": e.prompt, "completion": _text(e.fields[COMPLETION]),
             "reward": mean_logps[i]}
            for i, e in enumerate(examples[: self.cfg.log_completions])
        ])
        if last.top is None:
            return
        rows, top = last.rows, last.top
        effect = effect_per_token(last.logps, last.logprob_after)
        records = []
        for r in range(top[0].shape[0]):
            n = int(rows.completion_mask[r].sum())
            e = examples[r]
            records.append({
                "step": self.step, "index": r, "group": r, "prompt": e.prompt,
                "completion": _text(e.fields[COMPLETION]),
                **token_fields(self.tokenizer, rows.completion_ids[r, :n].tolist(),
                               {"logprob": last.logps[r], "entropy": last.entropy[r],
                                **{k: v[r] for k, v in effect.items()}},
                               (top[0][r], top[1][r])),
                # Whole numbers, not rounded to 4 digits as the floats are (a rank may pass 10,000).
                **({"rank": last.rank[r, :n].tolist()} if last.rank is not None else {}),
                "reward": mean_logps[r],
            })
        self.write_trajectories(records)

    # ------------------------------------------------------------------ eval

    @torch.no_grad()
    def evaluate(self) -> dict:
        """The held-out demonstrations' loss and mean token accuracy (TRL's eval_loss and
        eval_mean_token_accuracy); with answers to judge (a built-in task, a verifier among
        the rewards), greedy generation accuracy too."""
        if not self.eval_examples:
            return {}
        started = time.perf_counter()
        set_update_mode(self.model, False)
        nll = correct = targets = 0.0
        chunk = max(self.cfg.batch_size, MIN_EVAL_BATCH)
        for i in range(0, len(self.eval_examples), chunk):
            rows = self.demonstration_rows(self.eval_examples[i: i + chunk])
            whole = slice(0, rows.completion_ids.shape[0])
            logits = self.completion_logits(rows, whole, group_size=1)
            mask = rows.completion_mask
            nll -= float((logits.logprobs(rows.completion_ids) * mask).sum())
            correct += target_stats(logits, rows.completion_ids, mask)[2]
            targets += float(mask.sum())
        result = super().evaluate() if self.accuracy_reward else {}
        result.update({"loss": nll / max(targets, 1.0), "mean_token_accuracy": correct / max(targets, 1.0),
                       "num_demonstrations": len(self.eval_examples),
                       "eval_time": time.perf_counter() - started})
        result.setdefault("accuracy", None)
        return result


def _text(completion) -> str:
    """A completion as text (assistant messages joined)."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion if m.get("role") == "assistant")
