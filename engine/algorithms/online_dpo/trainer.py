"""Online DPO (Guo et al. 2024): DPO on pairs the policy samples itself, ranked by the
preset's rewards.

One step: 2 completions of each of batch_size / 2 prompts; their scores (the rewards'
total, less missing_eos_penalty without EOS); the higher score is chosen, a tie goes to
the first sampled (ranking.py); DPO's loss (engine.rl.dpo_losses.dpo_loss, sigmoid or
ipo) on each pair's policy logprobs against the reference's (the adapter disabled); one
optimizer step. The passes the loss takes run at temperature 1, as TRL's
OnlineDPOTrainer's (sampling alone uses algorithm.temperature); its metric names are
TRL's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from engine.algorithms.base import Trainer
from engine.algorithms.declaration import ROLLOUT_PLOTS, plot
from engine.algorithms.online_dpo.config import PAIR
from engine.algorithms.online_dpo.ranking import PairRanking, penalised_scores, rank_pairs
from engine.algorithms.policy import set_update_mode
from engine.algorithms.step_metrics import rollout_metrics
from engine.algorithms.step_result import StepResult
from engine.model.rollout import Rollout
from engine.rl.dpo_losses import dpo_loss, length_averaged, sequence_logps
from engine.rl.kl import kl_k3
from engine.rl.masking import masked_mean
from engine.run.trajectories import token_fields


def chosen_and_rejected(values: torch.Tensor, first_wins: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each pair's chosen and rejected value, from rows [first_0, second_0, first_1, ...];
    differentiable. (2P,), (P,) bool -> (P,), (P,)

    e.g. values [-3, -5, -2, -1], first_wins [True, False] -> chosen [-3, -1], rejected [-5, -2]
    """
    first, second = values[0::PAIR], values[1::PAIR]
    return torch.where(first_wins, first, second), torch.where(first_wins, second, first)


def pair_losses(token_logps: torch.Tensor, ref_token_logps: torch.Tensor, mask: torch.Tensor,
                first_wins: torch.Tensor, *, beta: float, loss_type: str) -> torch.Tensor:
    """DPO's loss of each sampled pair (engine.rl.dpo_losses.dpo_loss), its rows laid out
    [first_0, second_0, ...]: on summed token logprobs, or token means where the loss
    type declares it (IPO). (2P, T) x 3, (P,) bool -> (P,)

    e.g. sequence logps [-3, -5], reference [-4, -4], first wins, beta 0.5, sigmoid:
         h = (-3 + 4) - (-5 + 4) = 2, loss log(1 + e^-1) = 0.31326 (second wins: h = -2, 1.31326)
    """
    average = length_averaged(loss_type)
    policy = chosen_and_rejected(sequence_logps(token_logps, mask, average), first_wins)
    reference = chosen_and_rejected(sequence_logps(ref_token_logps, mask, average), first_wins)
    losses, _, _ = dpo_loss(*policy, *reference, beta=beta, loss_type=loss_type)
    return losses


@dataclass
class OnlineDPOStepOutputs:
    """What an online DPO step keeps for `write_step_outputs`: the sampled rows
    [first_0, second_0, ...] with their prompts, texts, reward totals, components and
    scores; the pairs' ranking and implicit rewards (beta * (log pi - log ref), summed
    over each side's tokens); the per-token logprob, ref_logprob and entropy (2P, T); the
    recorded rows' top-5."""

    prompts: list[str]
    completions: list[str]
    totals: list[float]
    components: dict[str, list[float]]
    scores: list[float]
    ranking: PairRanking
    rollout: Rollout
    per_token: dict[str, torch.Tensor]
    implicit_chosen: list[float]
    implicit_rejected: list[float]
    top: tuple[torch.Tensor, torch.Tensor] | None


class OnlineDPOTrainer(Trainer):
    """Online DPO: two sampled completions a prompt, the rewards' preferred one chosen,
    DPO's loss against the adapter-free reference."""

    # Metric names as TRL's OnlineDPOTrainer logs them (the dpo_* and ppo_objective keys
    # are the plots DPO and PPO declare for the same metrics).
    PLOTS = ROLLOUT_PLOTS + (
        plot("dpo_margins", "Implicit reward margins", "rewards/margins", "rewards/chosen", "rewards/rejected"),
        plot("dpo_accuracy", "Preference accuracy", "rewards/accuracies"),
        plot("ppo_objective", "RLHF objective", "objective/rlhf_reward", "objective/scores",
             "objective/non_score_reward"),
        plot("scores_margin", "Score margin (chosen - rejected)", "objective/scores_margin"),
        plot("dpo_logps", "Sequence logprobs", "logps/chosen", "logps/rejected"),
        plot("zero_std", "Tied pairs", "frac_reward_zero_std"),
        plot("contain_eos", "Completions with EOS", "val/contain_eos_token"),
    )
    # One record per pair: its chosen and its rejected completion.
    RECORDS = {"layout": "pair", "sides": ["chosen", "rejected"],
               "token_values": ["implicit_reward", "logprob", "ref_logprob", "kl", "entropy"],
               "preferred": ["implicit_reward", "advantage"]}

    def __init__(self, preset, run_dir, stop=None, preset_dir=None, world=None):
        super().__init__(preset, run_dir, stop, preset_dir, world)
        # The loss's passes (policy and reference) at temperature 1, as TRL's online DPO
        # takes them: on the model's own distribution; sampling keeps algorithm.temperature.
        self.policy.pass_temperature = 1.0

    # ------------------------------------------------------------- passes

    def pair_micro_batches(self, batch: int) -> list[slice]:
        """This process's row slices of whole pairs: training.micro_batch_size counts
        completions (the schema keeps it even); `auto`'s halving rounds down to pairs.

        e.g. 8 rows, micro_batch_size 2 -> [0:2, 2:4, 4:6, 6:8]"""
        share = self.world.share(batch, PAIR)
        size = self.micro_batch_size.for_rows(share.stop - share.start)
        size = max(PAIR, size - size % PAIR)
        return [slice(i, min(i + size, share.stop)) for i in range(share.start, share.stop, size)]

    # --------------------------------------------------------------- update

    def update(self, rollout: Rollout, ranking: PairRanking, num_recorded: int) -> dict:
        """One optimizer step on DPO's loss over the batch's pairs (their mean,
        accumulated over micro-batches of whole pairs). Returns the loss, the gradient
        norm, whether the step was skipped, the per-token logprob, ref_logprob and
        entropy of every row (before the step) and the first `num_recorded` rows' top-5."""
        algo = self.algo
        batch = rollout.completion_ids.shape[0]
        pairs = batch // PAIR
        mask = rollout.completion_mask
        first_wins = torch.tensor(ranking.first_wins(), device=self.device)
        micro_batches = self.pair_micro_batches(batch)
        self.phase = "update"
        set_update_mode(self.model, True, lora_dropout=not algo.disable_dropout)  # no ratio: see set_update_mode
        per_token = {key: torch.zeros_like(mask) for key in ("logprob", "ref_logprob", "entropy")}
        for mb in micro_batches:
            per_token["ref_logprob"][mb] = self.reference_logprobs(rollout, mb)
        self.optimizer.zero_grad(set_to_none=True)
        tops, loss_total = [], 0.0
        for index, mb in enumerate(micro_batches):
            with self.synced(index, len(micro_batches)):
                logits = self.completion_logits(rollout, mb)  # TokenLogits (b, T, V)
                token_logps = logits.logprobs(rollout.completion_ids[mb])
                losses = pair_losses(token_logps, per_token["ref_logprob"][mb], mask[mb],
                                     first_wins[mb.start // PAIR: mb.stop // PAIR],
                                     beta=algo.beta, loss_type=algo.loss_type)
                loss = losses.sum() / pairs  # the mean over the batch's pairs, accumulated
                self.backward(loss)
                loss_total += loss.item()
                with torch.no_grad():
                    per_token["logprob"][mb] = token_logps.detach()
                    per_token["entropy"][mb] = logits.entropy()
                    top = self.recorded_top(logits, mb, num_recorded)
                    if top is not None:
                        tops.append(top)
        # Several processes: the loss shares summed, each row from the process that ran it.
        loss_total = self.world.sum_floats([loss_total])[0]
        mine = self.world.share(batch, PAIR)
        for values in per_token.values():
            self.world.combine_rows(values, mine)
        grad_norm, ok = self.clip_and_step(loss_total)
        top = (torch.cat([t[0] for t in tops]), torch.cat([t[1] for t in tops])) if tops else None
        return {"loss": loss_total if ok else None, "grad_norm": grad_norm, "skipped": not ok,
                "per_token": per_token, "top": top}

    # ----------------------------------------------------------------- step

    def train_step(self) -> StepResult[OnlineDPOStepOutputs]:
        """Sample the pairs, score and rank them, one DPO update: metrics and outputs."""
        algo = self.algo
        t0 = time.perf_counter()
        _, prompts, fields = self.take_examples()
        rollout, completions = self.sample_batch(prompts, PAIR)
        t1 = time.perf_counter()

        totals, components = self.score(prompts, completions, fields, PAIR)
        scores = penalised_scores(totals, rollout.truncated.tolist(), algo.missing_eos_penalty)
        ranking = rank_pairs(scores)
        t2 = time.perf_counter()

        update = self.update(rollout, ranking, self.num_recorded(len(prompts) // PAIR) * PAIR)
        t3 = time.perf_counter()
        if update["skipped"]:
            self.count_skipped_step()
        self.step += 1

        per_token, mask = update["per_token"], rollout.completion_mask
        logps = (per_token["logprob"] * mask).sum(-1)  # (2P,) each completion's summed logprob
        ref_logps = (per_token["ref_logprob"] * mask).sum(-1)
        chosen = torch.tensor(ranking.chosen, device=self.device)
        rejected = torch.tensor(ranking.rejected, device=self.device)
        # Implicit rewards from summed logprobs, as TRL logs them whatever the loss type.
        implicit = algo.beta * (logps - ref_logps)
        margins = implicit[chosen] - implicit[rejected]
        score_t = torch.tensor(scores, dtype=torch.float32, device=self.device)
        non_score = -algo.beta * (logps - ref_logps)  # per completion: -beta x its summed KL (k1)
        tokens = int(rollout.lengths.sum()) + int(rollout.prompt_mask.sum())
        metrics = rollout_metrics(rollout, torch.tensor(totals, dtype=torch.float32), components)
        metrics.update({
            "frac_reward_zero_std": sum(ranking.ties) / len(ranking.ties),  # tied pairs
            "loss": update["loss"],
            "kl": float(masked_mean(kl_k3(per_token["logprob"], per_token["ref_logprob"]), mask)),
            "entropy": float(masked_mean(per_token["entropy"], mask)),
            "objective/kl": float((logps - ref_logps).mean()),
            "objective/entropy": float(-logps.mean()),
            "objective/non_score_reward": float(non_score.mean()),
            "objective/rlhf_reward": float((score_t + non_score).mean()),
            "objective/scores": float(score_t.mean()),
            "objective/scores_margin": float((score_t[chosen] - score_t[rejected]).mean()),
            "rewards/chosen": float(implicit[chosen].mean()),
            "rewards/rejected": float(implicit[rejected].mean()),
            "rewards/margins": float(margins.mean()),
            "rewards/accuracies": float((margins > 0).float().mean()),
            "logps/chosen": float(logps[chosen].mean()),
            "logps/rejected": float(logps[rejected].mean()),
            "val/contain_eos_token": float((~rollout.truncated).float().mean()),
            "beta": algo.beta,
        })
        metrics.update(self.timing_metrics([t0, t1, t2, t3], len(prompts), tokens, int(rollout.lengths.sum())))
        metrics["grad_norm"] = update["grad_norm"]

        outputs = OnlineDPOStepOutputs(
            prompts=prompts, completions=completions, totals=totals, components=components, scores=scores,
            ranking=ranking, rollout=rollout, per_token=per_token, implicit_chosen=implicit[chosen].tolist(),
            implicit_rejected=implicit[rejected].tolist(), top=update["top"])
        return StepResult(metrics, outputs)

    # -------------------------------------------------------------- outputs

    def write_step_outputs(self, last: OnlineDPOStepOutputs) -> None:
        """samples events (one row a pair) and trajectory records (one a recorded pair)."""
        ranking, scores = last.ranking, last.scores
        self.emit_samples([
            {"index": p, "group": p, "prompt": last.prompts[c], "completion": last.completions[c],
             "rejected": last.completions[r], "reward": scores[c],
             "rewards": {"chosen": scores[c], "rejected": scores[r], "margin": scores[c] - scores[r]},
             "advantage": last.implicit_chosen[p] - last.implicit_rejected[p], "tie": ranking.ties[p]}
            for p, (c, r) in enumerate(zip(ranking.chosen[: self.cfg.log_completions], ranking.rejected))
        ])
        if last.top is None:
            return
        recorded_pairs = last.top[0].shape[0] // PAIR
        self.write_trajectories([self.pair_record(last, p) for p in range(recorded_pairs)])

    def pair_record(self, last: OnlineDPOStepOutputs, p: int) -> dict:
        """The trajectory record of pair `p` (docs/run-directory.md): each side's tokens and
        per-token values, its score and components; the implicit reward margin, the score
        margin and whether the scores tied."""
        ranking, rollout, per_token, beta = last.ranking, last.rollout, last.per_token, self.algo.beta
        c, r = ranking.chosen[p], ranking.rejected[p]
        record = {"step": self.step, "index": p, "group": p, "prompt": last.prompts[c], "beta": beta,
                  "margin": last.implicit_chosen[p] - last.implicit_rejected[p],
                  "score_margin": last.scores[c] - last.scores[r], "tie": ranking.ties[p]}
        for side, row in (("chosen", c), ("rejected", r)):
            n = int(rollout.lengths[row])
            lp, ref = per_token["logprob"][row], per_token["ref_logprob"][row]
            record[side] = {
                "completion": last.completions[row],
                **token_fields(self.tokenizer, rollout.completion_ids[row, :n].tolist(),
                               {"logprob": lp, "ref_logprob": ref, "implicit_reward": beta * (lp - ref),
                                "entropy": per_token["entropy"][row]}, (last.top[0][row], last.top[1][row])),
                "reward": last.scores[row],
                "rewards": {name: values[row] for name, values in last.components.items()},
            }
        return record
