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

from dataclasses import dataclass, field

import torch

from engine.algorithms.base import Trainer
from engine.algorithms.declaration import REJECTED, ROLLOUT_PLOTS, TIE, plot
from engine.algorithms.online_dpo.config import PAIR
from engine.algorithms.online_dpo.ranking import PairRanking, penalised_scores, rank_pairs
from engine.algorithms.step_metrics import rollout_metrics
from engine.algorithms.step_result import StepResult
from engine.algorithms.update import MicroBatch, MicroLoss, SampledBatch, UpdatePart, UpdateResult
from engine.algorithms.update_effect import effect_per_token
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
                first_wins: torch.Tensor, *, beta: float, loss_type: str, **options) -> torch.Tensor:
    """DPO's loss of each sampled pair (engine.rl.dpo_losses.dpo_loss), its rows laid out
    [first_0, second_0, ...]: on summed token logprobs, or token means where the loss
    type declares it (IPO); `options`, what the loss type may name besides beta.
    (2P, T) x 3, (P,) bool -> (P,)

    e.g. sequence logps [-3, -5], reference [-4, -4], first wins, beta 0.5, sigmoid:
         h = (-3 + 4) - (-5 + 4) = 2, loss log(1 + e^-1) = 0.31326 (second wins: h = -2, 1.31326)
    """
    average = length_averaged(loss_type)
    policy = chosen_and_rejected(sequence_logps(token_logps, mask, average), first_wins)
    reference = chosen_and_rejected(sequence_logps(ref_token_logps, mask, average), first_wins)
    losses, _, _ = dpo_loss(*policy, *reference, beta=beta, loss_type=loss_type, **options)
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
    logprob_after: torch.Tensor | None = None  # the recorded rows after the update (update_effect.py)


@dataclass
class OnlineDPOBatch(SampledBatch):
    """An online DPO step's batch: the sampled rows [first_0, second_0, ...] with their
    prompts, texts, reward totals, components, scores and the pairs' ranking; filled by
    the update: per-token logprob, ref_logprob and entropy (2P, T), the recorded rows' top-5."""

    scores: list[float] = field(kw_only=True)
    ranking: PairRanking = field(kw_only=True)
    first_wins: torch.Tensor = field(kw_only=True)
    per_token: dict[str, torch.Tensor] = field(kw_only=True)


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
    SAMPLE_FIELDS = (REJECTED, TIE)
    RECORDS_UPDATE_EFFECT = True  # logprob_after / logprob_change of the recorded rows (update_effect.py)

    def __init__(self, preset, run_dir, stop=None, preset_dir=None, world=None):
        super().__init__(preset, run_dir, stop, preset_dir, world)
        self.loss_options = self.algo.model_dump()  # pair_losses': the loss type takes the options it names
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

    # ----------------------------------------------------------------- step

    def prepare(self) -> OnlineDPOBatch:
        """Sample two completions a prompt, score and rank each pair."""
        algo = self.algo
        _, prompts, fields = self.take_examples()
        rollout, completions = self.sample_batch(prompts, PAIR)
        self.rollout_done()
        totals, components = self.score(prompts, completions, fields, PAIR)
        scores = penalised_scores(totals, rollout.truncated.tolist(), algo.missing_eos_penalty)
        ranking = rank_pairs(scores)
        self.rewards_done()
        mask = rollout.completion_mask
        return OnlineDPOBatch(rollout, self.num_recorded(len(prompts) // PAIR) * PAIR, len(prompts),
                              generated=int(rollout.lengths.sum()), unit=PAIR, prompts=prompts,
                              completions=completions, totals=totals, components=components, scores=scores,
                              ranking=ranking, first_wins=torch.tensor(ranking.first_wins(), device=self.device),
                              per_token={key: torch.zeros_like(mask) for key in ("logprob", "ref_logprob", "entropy")})

    def part_micro_batches(self, part: UpdatePart) -> list[slice]:
        return self.pair_micro_batches(part.size)

    def before_update(self, batch: OnlineDPOBatch) -> None:
        """The reference's logprobs of every row."""
        for mb in self.pair_micro_batches(batch.size):
            batch.per_token["ref_logprob"][mb] = self.reference_logprobs(batch.rows, mb)

    def loss(self, batch: OnlineDPOBatch, micro: MicroBatch) -> MicroLoss:
        """DPO's loss of one micro-batch of whole pairs (its share of the mean over the
        batch's pairs)."""
        rollout, mb, per_token = batch.rows, micro.rows, batch.per_token
        logits = self.completion_logits(rollout, mb)  # TokenLogits (b, T, V)
        token_logps = logits.logprobs(rollout.completion_ids[mb])
        losses = pair_losses(token_logps, per_token["ref_logprob"][mb], rollout.completion_mask[mb],
                             batch.first_wins[mb.start // PAIR: mb.stop // PAIR], **self.loss_options)
        with torch.no_grad():
            per_token["logprob"][mb] = token_logps.detach()
            per_token["entropy"][mb] = logits.entropy()
            batch.record_top(logits, mb)
        return MicroLoss(losses.sum() / (batch.size // PAIR))  # the mean over the batch's pairs, accumulated

    def update_effect_inputs(self, batch: OnlineDPOBatch):
        # a token's "advantage": +1 in the pair's chosen completion (pushed up), -1 in its rejected one
        sign = torch.ones(batch.size, device=self.device)
        sign[batch.ranking.rejected] = -1.0
        return batch.per_token["logprob"], sign, batch.rows.completion_mask

    def finish(self, batch: OnlineDPOBatch, update: UpdateResult) -> StepResult[OnlineDPOStepOutputs]:
        """The pairs' implicit rewards, scores and TRL's metrics; the outputs."""
        algo, rollout, per_token, ranking, scores = self.algo, batch.rows, batch.per_token, batch.ranking, batch.scores
        mine = self.world.share(batch.size, PAIR)  # several processes: each row from the process that ran it
        for values in per_token.values():
            self.world.combine_rows(values, mine)
        mask = rollout.completion_mask
        logps = (per_token["logprob"] * mask).sum(-1)  # (2P,) each completion's summed logprob
        ref_logps = (per_token["ref_logprob"] * mask).sum(-1)
        chosen = torch.tensor(ranking.chosen, device=self.device)
        rejected = torch.tensor(ranking.rejected, device=self.device)
        # Implicit rewards from summed logprobs, as TRL logs them whatever the loss type.
        implicit = algo.beta * (logps - ref_logps)
        margins = implicit[chosen] - implicit[rejected]
        score_t = torch.tensor(scores, dtype=torch.float32, device=self.device)
        non_score = -algo.beta * (logps - ref_logps)  # per completion: -beta x its summed KL (k1)
        metrics = rollout_metrics(rollout, torch.tensor(batch.totals, dtype=torch.float32), batch.components)
        metrics.update({
            "frac_reward_zero_std": sum(ranking.ties) / len(ranking.ties),  # tied pairs
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
        outputs = OnlineDPOStepOutputs(
            prompts=batch.prompts, completions=batch.completions, totals=batch.totals, components=batch.components,
            scores=scores, ranking=ranking, rollout=rollout, per_token=per_token,
            implicit_chosen=implicit[chosen].tolist(), implicit_rejected=implicit[rejected].tolist(), top=batch.top,
            logprob_after=batch.logprob_after)
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
        effect = effect_per_token(per_token["logprob"], last.logprob_after)  # the recorded rows' change, if recorded
        for side, row in (("chosen", c), ("rejected", r)):
            n = int(rollout.lengths[row])
            lp, ref = per_token["logprob"][row], per_token["ref_logprob"][row]
            record[side] = {
                "completion": last.completions[row],
                **token_fields(self.tokenizer, rollout.completion_ids[row, :n].tolist(),
                               {"logprob": lp, "ref_logprob": ref, "implicit_reward": beta * (lp - ref),
                                "entropy": per_token["entropy"][row], **{k: v[row] for k, v in effect.items()}},
                               (last.top[0][row], last.top[1][row])),
                "reward": last.scores[row],
                "rewards": {name: values[row] for name, values in last.components.items()},
            }
        return record
