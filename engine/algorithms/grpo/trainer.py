"""GRPO and its variants: group-relative (or RLOO / REINFORCE++ / ReMax) advantages on
whole completions, or GDPO's per-reward normalisation, a clipped token- or sequence-level
(GSPO) surrogate, optional k3 KL.

One step: sample num_generations completions per prompt (and, for an estimator that
declares greedy_baseline, ReMax's, one greedy completion per prompt); score them;
advantages by the preset's estimator (engine.rl.catalog.ESTIMATORS), or by its
multi_objective_aggregation when that computes them itself (REWARD_AGGREGATIONS);
num_iterations clipped updates, the first pass of which gives the old policy's logprobs.
Names of the knobs and metrics follow TRL's GRPO trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.rl.advantages import estimate_advantages, group_reward_std, repeat_per_group
from engine.rl.catalog import (ESTIMATORS, IMPORTANCE_LEVELS, REWARD_AGGREGATIONS, micro_batch_weight,
                               surrogate_options, wants_greedy_baseline)
from engine.algorithms.declaration import BASELINE, COMPONENT_ADVANTAGES, ROLLOUT_PLOTS, STEPS, plot
from engine.algorithms.base import Trainer
from engine.algorithms.episodes import StepEpisodes
from engine.algorithms.reward_tokens import reward_token_rows
from engine.algorithms.step_metrics import rollout_metrics
from engine.algorithms.step_result import RolloutStepOutputs, StepResult
from engine.algorithms.step_rewards import StepRewards
from engine.algorithms.update import MicroBatch, MicroLoss, SampledBatch, UpdateResult
from engine.algorithms.update_effect import effect_per_token
from engine.rewards.base import RewardError
from engine.rl.losses import grpo_loss
from engine.rl.user_code import resolve
from engine.rl.user_files import user_function_fields
from engine.model.rollout import Rollout
from engine.run.trajectories import trajectory_records


@dataclass
class GRPOStepOutputs(RolloutStepOutputs):
    """A GRPO step's per-token values (logprob, entropy, ratio, clipped; (B, T) each),
    the recorded rows' top-5 (probs, ids) and the reference logprobs (None at beta 0)."""

    per_token: dict[str, torch.Tensor]
    top: tuple[torch.Tensor, torch.Tensor] | None
    ref_all: torch.Tensor | None
    ref_recorded: torch.Tensor | None


@dataclass
class GRPOBatch(SampledBatch):
    """A GRPO step's batch: the sampled rows' prompts, texts, rewards (totals, components,
    step rewards), loss mask and advantages (and GDPO's per component, ReMax's baseline);
    filled by the update: the first pass's logprobs (the old policy's), per-token values
    and the recorded rows' top-5, and the reference's logprobs (None at beta 0)."""

    mask: torch.Tensor = field(kw_only=True)
    advantages: torch.Tensor = field(kw_only=True)
    component_advantages: torch.Tensor | None = field(kw_only=True)
    baseline: GreedyBaseline | None = field(kw_only=True)
    per_token: dict[str, torch.Tensor] = field(default_factory=dict, kw_only=True)
    old_logprobs: dict[int, torch.Tensor] = field(default_factory=dict, kw_only=True)
    ref_all: torch.Tensor | None = field(default=None, kw_only=True)
    seq_weights: list[float] = field(default_factory=list, kw_only=True)


@dataclass
class GreedyBaseline:
    """ReMax's baseline for a step: each prompt's greedy completion, its total reward and
    components (P each, P = the step's prompts), and the tokens generated for them."""

    completions: list[str]
    totals: list[float]
    components: dict[str, list[float]]
    tokens: int

    def rows(self, group_size: int) -> list[dict]:
        """What each row of the batch records: its prompt's greedy completion and rewards.

        e.g. completions [" 1 2", " 3"], totals [1, 0], group_size 2
             -> [{"completion": " 1 2", "reward": 1, ...}] * 2 + [{"completion": " 3", "reward": 0, ...}] * 2
        """
        per_prompt = [{"completion": completion, "reward": total,
                       "rewards": {name: values[p] for name, values in self.components.items()}}
                      for p, (completion, total) in enumerate(zip(self.completions, self.totals))]
        return [row for row in per_prompt for _ in range(group_size)]


def component_rows(names: list[str], component_advantages: torch.Tensor) -> list[dict]:
    """Each row's advantage per reward component (GDPO's), as samples and records carry it.

    e.g. names ["exact_match", "sort"], [[0.7, -0.7]] -> [{"exact_match": 0.7, "sort": -0.7}]
    """
    return [dict(zip(names, row)) for row in component_advantages.tolist()]


class GRPOTrainer(Trainer):
    """GRPO and its variants: group-relative (or RLOO / REINFORCE++) advantages on whole
    completions, a clipped token- or sequence-level (GSPO) surrogate, optional k3 KL."""

    PLOTS = ROLLOUT_PLOTS + (
        plot("clip", "Clip ratio", "clip_ratio/region_mean"),
        plot("truncated", "Truncated completions", "completions/clipped_ratio"),
        plot("zero_std", "Groups with no signal", "frac_reward_zero_std"),
        plot("throughput", "Throughput", "throughput/tokens_per_second"),
    )
    # One record per completion; the completions of a prompt form a group.
    RECORDS = {"layout": "group", "token_values": ["advantage", "logprob", "ref_logprob", "kl", "entropy", "ratio"],
               "preferred": ["advantage"]}
    RECORDS_UPDATE_EFFECT = True  # logprob_after / logprob_change of the recorded rows (update_effect.py)
    RECORDS_REWARD_TOKENS = True  # a reward model's rm_score on the recorded rows (reward_tokens.py)

    def __init__(self, preset, run_dir, stop=None, preset_dir=None, world=None):
        # The user's own loss or estimator (FILE.py:FUNCTION, engine/rl/user_code.py) loaded
        # first: a signature that does not fit fails the set-up, naming the field.
        for _field, value, registry in user_function_fields(preset.algorithm):
            resolve(registry, value, preset_dir)
        # ReMax (an estimator declaring greedy_baseline): a greedy completion of each prompt a step.
        self.preset_dir = preset_dir  # a FILE.py:FUNCTION estimator is found next to the preset
        estimator = resolve(ESTIMATORS, preset.algorithm.advantage_estimator, preset_dir)
        self.greedy_baseline = wants_greedy_baseline(estimator)
        # Process supervision (an estimator declaring step_rewards, engine/rl/process.py)
        self.reads_steps = bool(getattr(estimator.declares, "step_rewards", False))
        super().__init__(preset, run_dir, stop, preset_dir, world)
        # from the section as set up (a default max_completion_length cut to the context: context_fit.py)
        self.section_options = self.algo.model_dump()  # the options an estimator may name
        # grpo_loss's options: the section's fields and the clip range, as validate's dry run gives them
        self.loss_options = {**surrogate_options(self.algo), "base_dir": preset_dir}

    def declaration(self) -> dict:
        """GRPO's plots; with a greedy baseline, its mean reward beside the reward."""
        declared = super().declaration()
        if self.greedy_baseline:
            for entry in declared["plots"]:
                if entry["key"] == "reward":
                    entry["metrics"] = [*entry["metrics"], "baseline/reward_mean"]
        return declared

    def sample_fields(self) -> list[dict]:
        """GDPO's advantage per reward, ReMax's baseline, the step rewards' steps: as the preset has them."""
        own = REWARD_AGGREGATIONS.declares(self.algo.multi_objective_aggregation).own_advantages
        extra = [f for f, on in ((COMPONENT_ADVANTAGES, own), (BASELINE, self.greedy_baseline),
                                 (STEPS, self.reads_steps)) if on]
        return [*super().sample_fields(), *(dict(f) for f in extra)]

    def updates_per_step(self) -> int:
        return self.algo.num_iterations

    def advantages(self, rewards: torch.Tensor, mask: torch.Tensor, components: dict[str, list[float]],
                   baseline_rewards: torch.Tensor | None = None, steps: StepRewards | None = None,
                   lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Advantages, (B,) per completion or (B, T) per token, and the per-component ones
        (B, K) where the multi_objective_aggregation computes them itself (GDPO; None
        otherwise, when the preset's estimator gets the weighted sum `rewards`).
        `baseline_rewards` (B,): each row's prompt's greedy reward (ReMax), else None.
        `steps`: the step components' steps on tokens, which an estimator declaring
        step_rewards reads with the outcome components' sum as a step on the last token."""
        step_rewards = step_ends = None
        if steps and not self.reads_steps:
            raise RewardError(
                f"reward component {next(iter(steps.per_component))!r} returned steps, and advantage_estimator "
                f"{self.algo.advantage_estimator} gives each completion one advantage from one reward; set "
                "advantage_estimator: grpo_process (process supervision), or make the reward return one number "
                "per completion")
        if self.reads_steps:
            steps = steps or StepRewards({}, {})
            outcome = steps.outcome_totals(components) if steps else rewards.tolist()
            step_rewards, step_ends = steps.tensors(lengths, mask.shape[1], outcome, mask.device)
        aggregation = REWARD_AGGREGATIONS.entry(self.algo.multi_objective_aggregation)
        if aggregation.declares.own_advantages:
            weights = {label: weight for label, weight, _ in self.reward_components}
            names = list(components)
            values = torch.tensor([components[name] for name in names], dtype=torch.float64,
                                  device=rewards.device).T  # (B, K)
            return aggregation.call(values, [weights[name] for name in names], self.algo.num_generations)
        return estimate_advantages(self.algo.advantage_estimator, rewards, mask, baseline_rewards=baseline_rewards,
                                   step_rewards=step_rewards, step_ends=step_ends, base_dir=self.preset_dir,
                                   **self.section_options), None

    def score_greedy(self, prompts: list[str], fields: dict[str, list], greedy: tuple[Rollout, list[str]],
                     group_size: int) -> GreedyBaseline:
        """The greedy completions of the step's prompts (one per group) scored by the same
        rewards, with each prompt's data fields."""
        rollout, completions = greedy
        fields = StepEpisodes(rollout, self.tokenizer).reward_fields({k: v[::group_size] for k, v in fields.items()})
        totals, components = self.score(prompts[::group_size], completions, fields, 1)
        return GreedyBaseline(completions, totals, components, int(rollout.model_lengths.sum()))

    # ------------------------------------------------------------------- step

    def prepare(self) -> GRPOBatch:
        """The step's rollout (and ReMax's greedy completions), its rewards and advantages."""
        G = self.algo.num_generations
        _, prompts, fields = self.take_examples()
        rollout, completions = self.sample_batch(prompts, G, fields=fields)
        # ReMax: one greedy completion of each prompt (its group's baseline), in the rollout's time
        greedy = self.sample_batch(prompts[::G], 1, greedy=True, fields={k: v[::G] for k, v in fields.items()}) \
            if self.greedy_baseline else None
        self.rollout_done()

        episodes = StepEpisodes(rollout, self.tokenizer)  # data.environment's (empty for single completions)
        totals, components, steps = self.score_with_steps(prompts, completions, episodes.reward_fields(fields), G)
        steps = StepRewards.of(steps, completions, rollout, self.tokenizer, self.reward_components)
        rewards = torch.tensor(totals, dtype=torch.float32, device=self.device)
        mask = rollout.completion_mask
        if self.algo.mask_truncated_completions:
            mask = mask * (~rollout.truncated).float()[:, None]
        baseline = self.score_greedy(prompts, fields, greedy, G) if greedy is not None else None
        baseline_rewards = None if baseline is None else repeat_per_group(
            torch.tensor(baseline.totals, dtype=torch.float32, device=self.device), G)
        advantages, component_advantages = self.advantages(rewards, mask, components, baseline_rewards, steps,
                                                           rollout.lengths)
        generated = int(rollout.model_lengths.sum()) + (baseline.tokens if baseline is not None else 0)
        return GRPOBatch(rollout, self.num_recorded(len(prompts), G), len(prompts), generated=generated, unit=G,
                         episodes=episodes, prompts=prompts, completions=completions, totals=totals,
                         components=components, steps=steps, rewards=rewards, mask=mask, advantages=advantages,
                         component_advantages=component_advantages, baseline=baseline)

    def update_epochs(self) -> int:
        return self.algo.num_iterations

    def before_update(self, batch: GRPOBatch) -> None:
        """The reference's logprobs of the batch (beta > 0), and GSPO's micro-batch shares."""
        mask, micro_batches = batch.mask, self.part_micro_batches(self.update_parts(batch, 0)[0])
        batch.per_token = {"logprob": torch.zeros_like(mask), "entropy": torch.zeros_like(mask),
                           "ratio": torch.ones_like(mask), "clipped": torch.zeros_like(mask)}
        if self.algo.beta > 0:
            batch.ref_all = torch.zeros_like(mask)
            for mb in micro_batches:
                batch.ref_all[mb] = self.reference_logprobs(batch.rows, mb)
            self.world.combine_rows(batch.ref_all, self.world.share(batch.size, batch.unit))
        if IMPORTANCE_LEVELS.declares(self.algo.importance_sampling_level).counts == "sequences":
            # GSPO's clip ratios are means over sequences (engine.rl.importance.clip_fraction): a
            # micro-batch's share is its share of the batch's non-empty sequences.
            present = mask.bool().any(-1)
            batch.seq_weights = [float(present[mb].sum() / present.sum().clamp(min=1)) for mb in micro_batches]

    def loss(self, batch: GRPOBatch, micro: MicroBatch) -> MicroLoss:
        """The clipped surrogate (+ KL) of one micro-batch; the first epoch's pass gives
        the old policy's logprobs and what the inspector records."""
        mb, rollout, mask, per_token = micro.rows, batch.rows, batch.mask, batch.per_token
        logits = self.completion_logits(rollout, mb)  # TokenLogits (b, T, V)
        logprobs = logits.logprobs(rollout.completion_ids[mb])
        if micro.epoch == 0:
            # The first pass sees the weights that sampled the batch: its logprobs
            # are the old policy's, exactly, with no extra forward pass.
            batch.old_logprobs[micro.number] = logprobs.detach()
            with torch.no_grad():
                per_token["entropy"][mb] = logits.entropy()
                per_token["logprob"][mb] = logprobs.detach()
            batch.record_top(logits, mb)
        loss, info, tok = grpo_loss(
            logprobs, batch.old_logprobs[micro.number], None if batch.ref_all is None else batch.ref_all[mb],
            batch.advantages[mb], mask[mb], **self.loss_options)
        weight = micro_batch_weight(self.algo.loss_type, mask[mb], mask, self.algo.loss_aggregation)
        # every key but kl is a share of flagged tokens (sequences, in GSPO)
        share = batch.seq_weights[micro.number] if batch.seq_weights else weight
        if micro.epoch == self.algo.num_iterations - 1:
            per_token["ratio"][mb] = tok["ratio"]
            per_token["clipped"][mb] = tok["clipped"].float()
        return MicroLoss(loss, weight, {key: value * (share if key != "kl" else weight) for key, value in info.items()})

    def update_effect_inputs(self, batch: GRPOBatch):
        return batch.per_token["logprob"], batch.advantages, batch.mask

    def finish(self, batch: GRPOBatch, update: UpdateResult) -> StepResult[GRPOStepOutputs]:
        """The step's metrics and outputs."""
        G = self.algo.num_generations
        rollout, rewards, per_token, advantages = batch.rows, batch.rewards, batch.per_token, batch.advantages
        mine = self.world.share(batch.size, G)
        for values in per_token.values():  # every row from the process that ran it
            self.world.combine_rows(values, mine)
        # beta 0 skips the reference pass; the inspector still gets reference logprobs for
        # the few recorded rows.
        ref_recorded = self.recorded_reference(rollout, batch.num_recorded) if batch.ref_all is None else None
        info = update.metrics
        metrics = rollout_metrics(rollout, rewards, batch.components)
        # A group with no learning signal: equal rewards (exact: group_reward_std is exactly 0
        # for a group of equal values, and their group-relative advantages are exactly 0). Under
        # GDPO, ReMax and step rewards the totals alone do not say: a group of equal totals can
        # differ in its components, from its greedy completion or in its steps; there it is a
        # group whose advantages are all 0.
        if batch.component_advantages is None and batch.baseline is None and not batch.steps:
            no_signal = group_reward_std(rewards, G) == 0
        else:
            no_signal = (advantages.reshape(batch.samples // G, -1) == 0).all(dim=1)  # (B,) or (B, T) per group
        metrics.update({
            "frac_reward_zero_std": float(no_signal.float().mean()),
            "kl": info.get("kl") if batch.ref_all is not None else None,
            "entropy": float((per_token["entropy"] * rollout.completion_mask).sum()
                             / rollout.completion_mask.sum().clamp(min=1)),
            "clip_ratio/low_mean": info.get("clip_ratio/low_mean"),
            "clip_ratio/high_mean": info.get("clip_ratio/high_mean"),
            "clip_ratio/region_mean": info.get("clip_ratio/region_mean"),
        })
        # and whatever other metrics the loss type's surrogate declares (engine.rl.catalog.Surrogate)
        metrics.update({key: value for key, value in info.items() if key != "kl"})
        if batch.baseline is not None:
            metrics["baseline/reward_mean"] = sum(batch.baseline.totals) / len(batch.baseline.totals)
        if batch.steps:
            metrics.update(batch.steps.metrics(G))

        episodes = batch.episodes
        row_extras = episodes.row_extras()
        if batch.component_advantages is not None:
            row_extras["component_advantages"] = component_rows(list(batch.components), batch.component_advantages)
        if batch.baseline is not None:
            row_extras["baseline"] = batch.baseline.rows(G)
        row_extras.update(batch.steps.row_extras())
        outputs = GRPOStepOutputs(prompts=episodes.shown_prompts(batch.prompts),
                                  completions=episodes.shown(batch.completions), totals=batch.totals,
                                  components=batch.components, advantages=advantages, rollout=rollout,
                                  per_token=per_token, top=batch.top, record_rows=list(range(batch.num_recorded)),
                                  ref_all=batch.ref_all, ref_recorded=ref_recorded,
                                  row_extras=row_extras, logprob_after=batch.logprob_after)
        return StepResult(metrics, outputs)

    def write_step_outputs(self, last: GRPOStepOutputs) -> None:
        """samples events and trajectory records for the step just taken."""
        G = self.algo.num_generations
        advantages = last.advantages
        self.emit_rollout_samples(last, advantages)
        rows = last.record_rows
        if not rows:
            return
        rollout, per_token = last.rollout, last.per_token
        ref = last.ref_all[: len(rows)] if last.ref_all is not None else last.ref_recorded
        token_advantages = advantages[:, None].expand_as(rollout.completion_mask) if advantages.dim() == 1 else advantages
        # records only, not samples: a reward model's score token by token (reward_tokens.py)
        reward_tokens = reward_token_rows(self.reward_components, self.tokenizer,
                                          self.policy.loaded.eos_token_ids, last)
        self.write_trajectories(trajectory_records(
            self.tokenizer, step=self.step, rows=rows, num_generations=G,
            prompts=last.prompts, completions=last.completions, rollout=rollout,
            per_token={"logprob": per_token["logprob"], "ref_logprob": ref, "entropy": per_token["entropy"],
                       "advantage": token_advantages, "ratio": per_token["ratio"],
                       **effect_per_token(per_token["logprob"], last.logprob_after)},
            clipped=per_token["clipped"], top=last.top,
            totals=last.totals, components=last.components, extra={**last.row_extras, **reward_tokens},
        ))

