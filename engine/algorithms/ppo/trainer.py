"""PPO with a value head on the policy's LoRA backbone (actor-critic, token-level rewards).

One step: sample a batch; score it; one no-grad pass gives the old policy's logprobs,
the old values (a linear head on the last hidden state) and the entropy; a pass with the
adapter disabled gives the reference logprobs; per-token rewards are the KL penalty on
every token plus the score on the last; GAE gives advantages and returns; then
num_ppo_epochs x num_mini_batches clipped updates of policy and value together.
Names of the knobs and metrics follow TRL's PPO trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.rl.advantages import explained_variance, gae, masked_whiten, ppo_token_rewards
from engine.algorithms.step_rewards import StepRewards
from engine.algorithms.update import MicroBatch, MicroLoss, SampledBatch, UpdatePart, UpdateResult, recorded_top
from engine.algorithms.update_effect import effect_per_token
from engine.rl.catalog import KL_ESTIMATORS
from engine.rl.losses import clipped_value_loss, ppo_policy_loss
from engine.rl.masking import masked_mean
from engine.model.rollout import Rollout
from engine.algorithms.declaration import ROLLOUT_PLOTS, STEPS, plot
from engine.algorithms.base import Trainer
from engine.algorithms.episodes import StepEpisodes
from engine.algorithms.reward_tokens import reward_token_rows
from engine.algorithms.policy import set_update_mode
from engine.algorithms.step_metrics import rollout_metrics
from engine.algorithms.step_result import RolloutStepOutputs, StepResult
from engine.rewards.kinds import is_step_reward_entry
from engine.run.trajectories import trajectory_records


@dataclass
class PPOStepOutputs(RolloutStepOutputs):
    """A PPO step's old-policy pass (logprob, value, entropy, ref_logprob (B, T), top),
    per-token KL, KL reward and total reward, GAE returns, the scores (with the missing-EOS
    penalty), and the last epoch's per-token ratio and clip flags."""

    old: dict
    kl: torch.Tensor
    non_score: torch.Tensor
    token_rewards: torch.Tensor
    returns: torch.Tensor
    scores: list[float]
    ratio: torch.Tensor
    clipped: torch.Tensor


@dataclass
class PPOBatch(SampledBatch):
    """A PPO step's batch: the sampled rows' prompts, texts, rewards and scores; the old
    policy's pass (logprob, value, entropy, ref_logprob, top); per-token KL, KL reward,
    token rewards, GAE's advantages and returns. Filled by the update: the last epoch's
    per-token ratio and clip flags, and the rows this process ran in it."""

    scores: torch.Tensor = field(kw_only=True)
    old: dict = field(kw_only=True)
    kl: torch.Tensor = field(kw_only=True)
    token_rewards: torch.Tensor = field(kw_only=True)
    non_score: torch.Tensor = field(kw_only=True)
    advantages: torch.Tensor = field(kw_only=True)
    returns: torch.Tensor = field(kw_only=True)
    ratio: torch.Tensor = field(kw_only=True)
    clipped: torch.Tensor = field(kw_only=True)
    ran: torch.Tensor = field(kw_only=True)


class PPOTrainer(Trainer):
    # Metric names as TRL's PPO trainer logs them.
    PLOTS = ROLLOUT_PLOTS + (
        plot("ppo_objective", "RLHF objective", "objective/rlhf_reward", "objective/scores",
             "objective/non_score_reward"),
        plot("value_loss", "Value loss", "loss/value_avg", "loss/policy_avg"),
        plot("explained_variance", "Explained variance", "val/explained_variance"),
        plot("ppo_clip", "Clipped fraction", "policy/clipfrac_avg", "val/clipfrac_avg"),
        plot("ppo_approxkl", "Policy change per update", "policy/approxkl_avg", "val/ratio"),
    )
    # One record per completion (one per prompt by default), with the critic's numbers per token.
    RECORDS = {"layout": "single", "token_values": ["advantage", "logprob", "ref_logprob", "kl", "entropy", "ratio",
                                                    "value", "return", "kl_reward", "reward_per_token"],
               "preferred": ["advantage"]}
    RECORDS_UPDATE_EFFECT = True  # logprob_after / logprob_change of the recorded rows (update_effect.py)
    RECORDS_REWARD_TOKENS = True  # a reward model's rm_score on the recorded rows (reward_tokens.py)
    UPDATE_REDUCE = "mean"  # the step's loss and diagnostics: the mean over its updates, as TRL logs them

    def sample_fields(self) -> list[dict]:
        """The step rewards' steps, when the preset has a step reward."""
        stepped = any(is_step_reward_entry(r) for r in self.preset.rewards)
        return [*super().sample_fields(), *([dict(STEPS)] if stepped else [])]

    # ------------------------------------------------------------------ critic

    def setup_modules(self) -> None:
        hidden = self.model.get_base_model().config.get_text_config().hidden_size
        # fp32 whatever the backbone's dtype: values are regression targets, bf16's
        # 3 significant digits would make the value loss noise. Zero-initialised, so
        # the critic starts by predicting 0 rather than random numbers.
        self.value_head = torch.nn.Linear(hidden, 1, device=self.device, dtype=torch.float32)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    def values(self, hidden: torch.Tensor) -> torch.Tensor:
        """The critic's value at each position. (b, T, H) -> (b, T) float32"""
        return self.value_head(hidden.float()).squeeze(-1)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return super().trainable_parameters() + list(self.value_head.parameters())

    def trained_modules(self) -> list[torch.nn.Module]:
        return super().trained_modules() + [self.value_head]

    def updates_per_step(self) -> int:
        return self.algo.num_ppo_epochs * self.algo.num_mini_batches

    def extra_state(self) -> dict:
        return {"value_head": self.value_head.state_dict()}

    def load_extra_state(self, state: dict) -> None:
        self.value_head.load_state_dict(state["value_head"])

    # ------------------------------------------------------------------- step

    @torch.no_grad()
    def old_policy_pass(self, rollout: Rollout, num_recorded: int) -> dict:
        """Logprobs, values and entropy of the policy that sampled, and the reference
        logprobs; top-5 alternatives of the recorded rows. All (B, T)."""
        set_update_mode(self.model, False)
        B, G = rollout.completion_ids.shape[0], self.preset.group_size
        out = {k: torch.zeros_like(rollout.completion_mask) for k in ("logprob", "value", "entropy", "ref_logprob")}
        tops = []
        for mb in self.micro_batches(B, G):  # this process's rows (all of them in one)
            logits = self.completion_logits(rollout, mb)  # TokenLogits (b, T, V)
            out["logprob"][mb] = logits.logprobs(rollout.completion_ids[mb])
            out["value"][mb] = self.values(logits.hidden)
            out["entropy"][mb] = logits.entropy()
            top = recorded_top(logits, mb, num_recorded)
            if top is not None:
                tops.append(top)
            out["ref_logprob"][mb] = self.reference_logprobs(rollout, mb)
        for key in ("logprob", "value", "entropy", "ref_logprob"):  # each row from the process that ran it
            self.world.combine_rows(out[key], self.world.share(B, G))
        out["top"] = (torch.cat([t[0] for t in tops]), torch.cat([t[1] for t in tops])) if tops else None
        return out

    def prepare(self) -> PPOBatch:
        """The step's rollout and scores; the old policy's pass; token rewards, GAE's
        advantages and returns."""
        algo = self.algo
        _, prompts, fields = self.take_examples()
        rollout, completions = self.sample_batch(prompts, algo.num_generations, fields=fields)
        self.rollout_done()

        episodes = StepEpisodes(rollout, self.tokenizer)  # data.environment's (empty for single completions)
        totals, components, steps = self.score_with_steps(prompts, completions, episodes.reward_fields(fields),
                                                          algo.num_generations)
        steps = StepRewards.of(steps, completions, rollout, self.tokenizer, self.reward_components)
        rewards = torch.tensor(totals, dtype=torch.float32, device=self.device)
        # With step rewards the score on the last token is the outcome rewards' sum; each step
        # reward goes on the token that ends its step.
        scores = torch.tensor(steps.outcome_totals(components), dtype=torch.float32,
                              device=self.device) if steps else rewards.clone()
        if algo.missing_eos_penalty is not None:
            scores = scores - algo.missing_eos_penalty * rollout.truncated.float()
        self.rewards_done()

        mask = rollout.completion_mask
        num_recorded = self.num_recorded(len(prompts), algo.num_generations)
        old = self.old_policy_pass(rollout, num_recorded)
        kl = KL_ESTIMATORS[algo.kl_estimator](old["logprob"], old["ref_logprob"]) * mask
        token_rewards, non_score = ppo_token_rewards(
            scores, kl, mask, algo.kl_coef,
            steps.tensors(rollout.lengths, mask.shape[1], None, mask.device)[0] if steps else None)
        if algo.whiten_rewards:
            token_rewards = masked_whiten(token_rewards, mask, shift_mean=False)
        old["value"] = old["value"] * mask
        advantages, returns = gae(token_rewards, old["value"], mask, algo.gamma, algo.lam)
        advantages = masked_whiten(advantages, mask)
        return PPOBatch(rollout, num_recorded, len(prompts), generated=int(rollout.model_lengths.sum()),
                        unit=algo.num_generations, episodes=episodes, prompts=prompts, completions=completions,
                        totals=totals, components=components, steps=steps, rewards=rewards, scores=scores,
                        old=old, kl=kl, token_rewards=token_rewards, non_score=non_score, advantages=advantages,
                        returns=returns, ratio=torch.ones_like(mask), clipped=torch.zeros_like(mask),
                        ran=torch.zeros(len(prompts), dtype=torch.bool, device=mask.device))

    def update_epochs(self) -> int:
        return self.algo.num_ppo_epochs

    def update_parts(self, batch: PPOBatch, epoch: int) -> list[UpdatePart]:
        """num_mini_batches parts of the batch, an optimizer step each. One keeps the
        batch's order, so rows of a prompt stay together and share one prompt pass;
        several are drawn at random (as TRL), which breaks groups."""
        batch.ran.zero_()  # the rows this process ran in the last epoch
        n, B = self.algo.num_mini_batches, batch.size
        if n == 1:
            return [UpdatePart(B, self.preset.group_size, torch.arange(B, device=self.device))]
        generator = self.random_states.generator  # drawn alike on every rank
        order = torch.randperm(B, generator=generator, device=generator.device).to(self.device)
        return [UpdatePart(len(idx), 1, idx) for idx in order.chunk(n)]

    def loss(self, batch: PPOBatch, micro: MicroBatch) -> MicroLoss:
        """The clipped policy loss and the clipped value loss of one micro-batch of a part."""
        idx = micro.part.index
        part, part_mask = batch.rows.select(idx), batch.rows.completion_mask[idx]
        mb, rows, old = micro.rows, idx[micro.rows], batch.old
        batch.ran[rows] = True
        logits = self.completion_logits(part, mb, group_size=micro.part.unit)
        logprobs = logits.logprobs(part.completion_ids[mb])
        values = self.values(logits.hidden)
        m = part_mask[mb]
        pg_loss, pg_info, tok = ppo_policy_loss(logprobs, old["logprob"][rows], batch.advantages[rows], m,
                                                self.algo.cliprange)
        vf_loss, vf_info = clipped_value_loss(values, old["value"][rows], batch.returns[rows], m,
                                              self.algo.cliprange_value)
        loss = pg_loss + self.algo.vf_coef * vf_loss
        # Each micro-batch carries its share of the mini-batch's tokens, so the
        # accumulated gradient is that of the mini-batch's token mean.
        weight = float(m.sum() / part_mask.sum().clamp(min=1))
        batch.ratio[rows] = tok["ratio"]
        batch.clipped[rows] = tok["clipped"].float()
        return MicroLoss(loss, weight, {
            key: value * weight for key, value in (
                ("policy", pg_loss.item()), ("value", vf_loss.item()), ("approxkl", pg_info["approxkl"]),
                ("clipfrac", pg_info["clipfrac"]), ("ratio", pg_info["ratio"]), ("vf_clipfrac", vf_info["clipfrac"]))})

    def update_effect_inputs(self, batch: PPOBatch):
        return batch.old["logprob"], batch.advantages, batch.rows.completion_mask

    def finish(self, batch: PPOBatch, update: UpdateResult) -> StepResult[PPOStepOutputs]:
        algo, old, kl, mask, scores = self.algo, batch.old, batch.kl, batch.rows.completion_mask, batch.scores
        if self.world.distributed:  # each row from the process that ran it in the last epoch (1 where none did)
            self.world.combine_rows(batch.ratio.sub_(1.0), batch.ran).add_(1.0)
            self.world.combine_rows(batch.clipped, batch.ran)
        stats = update.metrics
        metrics = rollout_metrics(batch.rows, batch.rewards, batch.components)
        mean_non_score = float(batch.non_score.sum(1).mean())
        metrics.update({
            "objective/kl": float(kl.sum(1).mean()),
            "objective/entropy": float((-old["logprob"] * mask).sum(1).mean()),
            "objective/non_score_reward": mean_non_score,
            "objective/rlhf_reward": mean_non_score + float(scores.mean()),
            "objective/scores": float(scores.mean()),
            "policy/approxkl_avg": stats.get("approxkl"),
            "policy/clipfrac_avg": stats.get("clipfrac"),
            "loss/policy_avg": stats.get("policy"),
            "loss/value_avg": stats.get("value"),
            "val/clipfrac_avg": stats.get("vf_clipfrac"),
            "val/ratio": stats.get("ratio"),
            "val/explained_variance": explained_variance(old["value"], batch.returns, mask),
            "val/mean": float(masked_mean(old["value"], mask)),
            "kl": float(masked_mean(kl, mask)),
            "entropy": float(masked_mean(old["entropy"], mask)),
        })
        if batch.steps:
            metrics.update(batch.steps.metrics(algo.num_generations))
        episodes = batch.episodes
        outputs = PPOStepOutputs(prompts=episodes.shown_prompts(batch.prompts),
                                 completions=episodes.shown(batch.completions), totals=batch.totals,
                                 components=batch.components, rollout=batch.rows, old=old, kl=kl,
                                 non_score=batch.non_score, token_rewards=batch.token_rewards,
                                 advantages=batch.advantages, returns=batch.returns, scores=scores.tolist(),
                                 ratio=batch.ratio, clipped=batch.clipped,
                                 record_rows=list(range(batch.num_recorded)),
                                 row_extras={**batch.steps.row_extras(), **episodes.row_extras()},
                                 logprob_after=batch.logprob_after)
        return StepResult(metrics, outputs)

    def write_step_outputs(self, last: PPOStepOutputs) -> None:
        G = self.algo.num_generations
        self.emit_rollout_samples(last, last.advantages)
        rows = last.record_rows
        if not rows:
            return
        old = last.old
        # records only, not samples: a reward model's score token by token (reward_tokens.py)
        reward_tokens = reward_token_rows(self.reward_components, self.tokenizer,
                                          self.policy.loaded.eos_token_ids, last)
        self.write_trajectories(trajectory_records(
            self.tokenizer, step=self.step, rows=rows, num_generations=G,
            prompts=last.prompts, completions=last.completions, rollout=last.rollout,
            per_token={"logprob": old["logprob"], "ref_logprob": old["ref_logprob"], "kl": last.kl,
                       "entropy": old["entropy"], "advantage": last.advantages, "value": old["value"],
                       "return": last.returns, "kl_reward": last.non_score,
                       "reward_per_token": last.token_rewards, "ratio": last.ratio,
                       **effect_per_token(old["logprob"], last.logprob_after)},
            clipped=last.clipped, top=old["top"],
            totals=last.totals, components=last.components,
            extra={"score": last.scores, **last.row_extras, **reward_tokens},
        ))
