"""What every algorithm shares. `Trainer` is composed of parts, each its own module and
testable alone: the policy (model, tokenizer and passes: policy.py), the optimizer part
(AdamW, schedule, loss scaler: optimization.py), the random states (random_states.py),
checkpoints (checkpoints.py), the out-of-memory retry (memory.py), the held-out
evaluation (evaluation.py), the run's events (run_events.py) and, with data.environment,
the episodes (episodes.py). The Trainer loads the data and the model, builds the parts and
runs the run loop; its one training step is step.py's (`TrainingStep`), and a step's
`StepResult` (step_result.py) goes to `write_step_outputs`. Each algorithm subclasses it
and adds what step.py names (prepare, loss, finish, records); this module imports none of them
(engine.algorithms.ALGORITHMS maps a preset's algorithm name to its class). The loops stay
thin: the maths is in engine.rl, sampling in engine.model.rollout and engine.episodes,
per-token records in engine.run.trajectories, the on-disk contract in engine.run.rundir.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from pathlib import Path

import torch

from engine.run import rundir
from engine.run.lineage import pin_run_references
from engine.alarms import AlarmWatcher
from engine.algorithms.checkpoints import CheckpointParts, Progress, load_checkpoint, save_checkpoint
from engine.algorithms.declaration import Declares
from engine.algorithms.context_fit import fit_trainer
from engine.algorithms.episodes import EpisodeRunner
from engine.algorithms.evaluation import MIN_EVAL_BATCH, accuracy_function, evaluate_generations
from engine.algorithms.step_metrics import timing_metrics
from engine.algorithms.memory import (MemoryFields, MicroBatchSize, OutOfMemory, StepStart, is_out_of_memory,
                                      out_of_memory_message, step_that_fits)
from engine.algorithms.optimization import Optimization, SkippedSteps
from engine.algorithms.policy import Policy, Sampling
from engine.algorithms.random_states import RandomStates, seed_process
from engine.algorithms.run_events import RunEvents, run_started_fields
from engine.algorithms.step_result import RolloutStepOutputs, StepResult
from engine.algorithms.step import TrainingStep
from engine.model.chat import chat_format, template_examples
from engine.data import Example, PromptStream, accuracy_reward_name, load_splits
from engine.distributed.launch import world_size_problems
from engine.distributed.rollouts import gather_rollout
from engine.distributed.world import TrainedModules, World
from engine.rewards.input_checks import reward_field_problems
from engine.model.loading import LoadedModel, load_model
from engine.foundation.io import save_preset
from engine.rewards import build_reward_components
from engine.rewards.combine import score_rewards_with_steps
from engine.model.rollout import Rollout
from engine.model.token_logits import TokenLogits
from engine.foundation.stopping import StopFlag

if TYPE_CHECKING:  # the preset's assembly is a floor above (docs/architecture.md)
    from engine.preset.schema import Preset


log = logging.getLogger(__name__)


SMALL_GROUP = 8  # num_generations up to which a group is recorded whole (num_recorded)


class Trainer(TrainingStep, Declares):
    """What every algorithm shares: the data, the model and the parts, the run loop (`run`)
    and the one training step (`TrainingStep`, step.py: what an algorithm implements is
    there)."""

    TEMPLATED_PAIRS = False  # DPO: chosen/rejected answers go through the chat template too
    MICRO_BATCH_UNIT = "completions"  # what training.micro_batch_size counts (DPO: pairs)

    def __init__(self, preset: Preset, run_dir: str | Path, stop: StopFlag | None = None,
                 preset_dir: Path | None = None, world: World | None = None):
        self.run_dir = Path(run_dir)
        # Runs this one stands on (model.start_from, a reward-model run as a reward): checked
        # and pinned to their checkpoints before anything loads (engine/run/lineage.py).
        preset, self.lineage = pin_run_references(preset, self.run_dir.parent, preset_dir)
        self.preset = preset
        self.world = world or World()
        problems = world_size_problems(preset, self.world.size)
        if problems:
            raise ValueError("; ".join(problems))
        self.algo = preset.algorithm
        self.cfg = preset.training
        self.stop = stop or StopFlag()
        self.step = 0
        self.nonfinite_steps = 0
        self.skipped_steps = SkippedSteps(self.cfg.max_nonfinite_steps)
        # the alarms' advice names only fields of this run's algorithm section
        self.events = RunEvents(AlarmWatcher.for_preset(preset))
        self.on_alarm = None  # called with each alarm event written (the CLI prints a line)
        self._saved_step: int | None = None  # the step of the checkpoint saved last

        seed_process(self.cfg.seed)
        # Set-up milestones: a stop requested while setting up ends the run here (the CLI's
        # signal handler also raises at once; this catches a stop from stdin and one that
        # library code swallowed).
        self.stop.check_setup()
        train, held_out = self.load_examples(preset_dir)
        missing = reward_field_problems(preset, train)
        if missing:  # before the model loads, in validate's words (it would stop at step 1)
            raise ValueError("; ".join(f"{field}: {message}" for field, message in missing))
        self.accuracy_reward = accuracy_reward_name(preset.data, held_out, [r.name for r in preset.rewards])
        self.stop.check_setup()
        loaded: LoadedModel = self.load_model()
        self.policy = Policy(loaded, Sampling.of(self.algo), preset.group_size)
        # Prompts as the model sees them: through its chat template (engine/model/chat.py).
        self.chat = chat_format(preset.model.chat_template, loaded.tokenizer_chat_template,
                                preset.data.system_prompt, preset_dir)
        # data.environment: multi-turn episodes with tools, the prompts templated with them
        self.episodes = EpisodeRunner.of(preset, self.chat, loaded, preset_dir)
        self.train_examples, self.eval_examples = (
            self.episodes.template(examples) if self.episodes else self.template_data(examples)
            for examples in (train, held_out))
        self.stream = PromptStream(self.train_examples, self.cfg.seed)
        self.stop.check_setup()
        self.reward_components = build_reward_components(preset.rewards, device=self.device, base_dir=preset_dir)
        self.reward_components += self.episodes.reward_components() if self.episodes else []  # get_reward(), as TRL adds it
        self.stop.check_setup()
        # the prompts against the context; a default max_completion_length cut to fit (notes say so)
        self.setup_notes = fit_trainer(self, train + held_out, preset_dir, loaded.context_length)

        self.setup_modules()
        # training.fsdp with several processes: the decoder layers sharded (FSDP2), before
        # the optimizer sees their parameters (engine/distributed/sharding.py).
        self.sharded_layers: list[torch.nn.Module] = []
        if self.cfg.fsdp and self.world.distributed:
            from engine.distributed.sharding import shard_layers

            self.sharded_layers = shard_layers(self.model, self.world)
        self.optimization = Optimization(self.trainable_parameters(), self.cfg,
                                         total_updates=self.cfg.max_steps * self.updates_per_step(),
                                         device_type=self.device.type, fp16=loaded.dtype == torch.float16)
        self.random_states = RandomStates(self.cfg.seed, self.device, self.world.rank, self.world.size)
        # Several processes: DDP averages the trained modules' gradients (world.py); a
        # sharded model's passes are collectives, so every process decodes as long as any.
        self.policy.ddp = self.world.data_parallel(self.trained_modules())
        if self.sharded_layers:
            self.policy.finished_everywhere = lambda finished: not self.world.any(not finished)
        # micro_batch_size `auto` starts with the whole batch and halves on out-of-memory.
        batch_share = self.world.share(self.cfg.batch_size)
        self.micro_batch_size = MicroBatchSize(self.cfg.micro_batch_size, self.cfg.batch_size,
                                               batch_share.stop - batch_share.start)
        self.phase = "rollout"  # the part of a step running: "rollout" or "update" (messages)

    # ------------------------------------------------------------ the parts
    # What the algorithms and tests reach through the trainer; each lives in its part.

    @property
    def model(self) -> torch.nn.Module:
        return self.policy.model

    @property
    def tokenizer(self):
        return self.policy.tokenizer

    @property
    def device(self) -> torch.device:
        return self.policy.device

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.optimization.optimizer

    @property
    def scheduler(self) -> torch.optim.lr_scheduler.LambdaLR:
        return self.optimization.scheduler


    # ------------------------------------------------------- subclass hooks

    def load_examples(self, preset_dir: Path | None) -> tuple[list[Example], list[Example]]:
        return load_splits(self.preset.data, self.cfg.seed, preset_dir)

    def load_model(self) -> LoadedModel:
        """The model and its tokenizer (engine/model/loading.py): a causal LM with a fresh adapter."""
        return load_model(self.preset.model, self.cfg.gradient_checkpointing)

    def template_data(self, examples: list[Example]) -> list[Example]:
        """The examples as the model sees them: the prompts through the chat template (with
        TEMPLATED_PAIRS, DPO's answers too)."""
        return template_examples(examples, self.chat, self.tokenizer, pairs=self.TEMPLATED_PAIRS)

    def setup_modules(self) -> None:
        """Build modules trained besides the LoRA adapter (PPO's value head)."""

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def trained_modules(self) -> list[torch.nn.Module]:
        """The modules holding trainable_parameters (DDP reduces their gradients)."""
        return [self.model]

    def trained_holder(self) -> torch.nn.Module:
        """One module holding every trained module (names a sharded optimizer state)."""
        return TrainedModules(self.trained_modules())

    def updates_per_step(self) -> int:
        """Optimizer steps per training step (for the learning-rate schedule)."""
        return 1

    def extra_state(self) -> dict:
        """Tensors a checkpoint keeps besides the adapter and the optimizer."""
        return {}

    def load_extra_state(self, state: dict) -> None:
        pass

    # --------------------------------------------------------------- rollouts

    def generate(self, prompts: list[str], greedy: bool = False, group_size: int = 1) -> Rollout:
        """Completions of `prompts`, sampled with this process's sampling generator."""
        return self.policy.generate(prompts, self.random_states.sample_generator, greedy=greedy, group_size=group_size)

    def sample_batch(self, prompts: list[str], group_size: int, greedy: bool = False,
                     fields: dict[str, list] | None = None) -> tuple[Rollout, list[str]]:
        """The step's rollout over all `prompts` and the completions' text. With several
        processes each samples its share of the prompt groups and the parts are gathered:
        every process gets the whole batch, in the order one process would have it.
        `greedy`: argmax decoding (ReMax's baseline: one completion of each prompt, with
        `group_size` 1 the same shares of prompts as the sampled groups'). With data.environment:
        episodes (reset with their rows of `fields`), their answers, the rollout carrying them."""
        if self.episodes is not None:
            return self.episodes.sample(self.policy, prompts, fields or {}, group_size,
                                        self.random_states.sample_generator, greedy=greedy)
        rows = self.world.share(len(prompts), group_size)
        rollout = self.generate(prompts[rows], greedy=greedy, group_size=group_size)
        if self.world.distributed:
            rollout = gather_rollout(self.world, rollout, self.tokenizer.pad_token_id)
        return rollout, self.policy.decode_completions(rollout)

    def score(self, prompts: list[str], completions: list[str], fields: dict[str, list],
              group_size: int) -> tuple[list[float], dict[str, list[float]]]:
        """Total rewards and their components for the whole batch (score_with_steps)."""
        return self.score_with_steps(prompts, completions, fields, group_size)[:2]

    def score_with_steps(self, prompts: list[str], completions: list[str], fields: dict[str, list], group_size: int):
        """Total rewards, their components and the step components' steps (label -> the
        (end character, score) pairs of each completion) for the whole batch; with several
        processes each scores its share (a reward model runs once a completion), gathered."""
        rows = self.world.share(len(prompts), group_size)
        scored = score_rewards_with_steps(self.reward_components, prompts[rows], completions[rows],
                                          {k: v[rows] for k, v in fields.items()})
        if self.world.distributed:
            parts = self.world.gather_objects(scored)
            scored = ([t for part in parts for t in part[0]],
                      *({k: [v for part in parts for v in part[i][k]] for k in scored[i]} for i in (1, 2)))
        return scored

    def completion_logits(self, rollout: Rollout, rows: slice, group_size: int | None = None) -> TokenLogits:
        """The policy's pass over `rows` (Policy.completion_logits): every pass of a step
        goes through here, the one place a subclass or a test intercepts them."""
        return self.policy.completion_logits(rollout, rows, group_size)

    def reference_logprobs(self, rollout: Rollout, rows: slice, group_size: int | None = None) -> torch.Tensor:
        """The reference's logprobs (the adapter disabled) of `rows`' completion tokens."""
        return self.policy.reference_logprobs(rollout, rows, group_size)

    def recorded_reference(self, rollout: Rollout, rows: int, group_size: int | None = None) -> torch.Tensor | None:
        """Reference logprobs of the first `rows` rows, for the inspector's records (rank 0
        writes them). A sharded model's passes take every process, so then all run it."""
        if rows and (self.world.is_main or self.sharded_layers):
            return self.reference_logprobs(rollout, slice(0, rows), group_size=group_size)
        return None

    def micro_batches(self, batch: int, unit: int = 1) -> list[slice]:
        """This process's micro-batches of a batch of `batch` rows: all of them with one
        process; with several, those of its share (World.share, in whole `unit`s). Passes
        in micro-batches are the step's update phase (what an out-of-memory error says)."""
        self.phase = "update"
        return self.micro_batch_size.slices(self.world.share(batch, unit))

    @contextlib.contextmanager
    def synced(self, index: int, count: int):
        """The context of micro-batch `index` of `count` in one optimizer step: with
        several processes, gradients are reduced on the last one only."""
        sync = index == count - 1
        if self.sharded_layers:
            from engine.distributed.sharding import set_layers_sync

            set_layers_sync(self.sharded_layers, sync)
        with self.world.no_sync(self.policy.ddp, sync):
            yield

    def num_recorded(self, batch: int, unit: int = 1) -> int:
        """How many of the batch's first rows the inspector records: training.record_rollouts,
        at most rank 0's share (rank 0 writes the records, from the passes it ran). Fewer
        than a small group (`unit` <= SMALL_GROUP) records the whole first group instead:
        a part of a group hides the completions its advantages are relative to."""
        first = self.world.share(batch, unit, rank=0)
        wanted = self.cfg.record_rollouts
        if 0 < wanted < unit <= SMALL_GROUP:
            wanted = unit
        return min(wanted, first.stop)

    def take_examples(self) -> tuple[list[Example], list[str], dict[str, list]]:
        """The step's prompts, each repeated for its group, and their fields."""
        G = self.preset.group_size
        examples = self.stream.take(self.preset.prompts_per_step)
        prompts = [e.prompt for e in examples for _ in range(G)]
        names = sorted({k for e in examples for k in e.fields})
        fields = {k: [e.fields.get(k) for e in examples for _ in range(G)] for k in names}
        return examples, prompts, fields

    def train_step_that_fits(self) -> StepResult:
        """train_step, taken again with half the micro-batch on GPU out-of-memory when
        micro_batch_size is `auto`, else failing with the fields to change (memory.py)."""
        sizes = self.micro_batch_size
        # A step that updates more than once may fail after an update: its weights and
        # optimizer states are kept too (only when it can be retried).
        start = StepStart(self.stream, self.random_states, self.optimization,
                          updates=sizes.auto and self.updates_per_step() > 1)
        fields = MemoryFields(self.cfg.batch_size, self.MICRO_BATCH_UNIT, self.algo.max_completion_length,
                              self.policy.checkpointing)

        def attempt() -> StepResult:
            self.phase, _ = "rollout", self.policy.clock.take()  # passes before the step (a cache) are not its
            self.skipped_steps.new_step()  # a user's function that returns NaN/inf is named for its step alone
            return self.train_step()

        def halved(old: int, new: int) -> None:
            log.warning("step %d: out of GPU memory with micro-batches of %d; trying %d", self.step + 1, old, new)
            self.events.emit("micro_batch_size", step=self.step, old=old, new=new, reason="out of GPU memory")

        return step_that_fits(attempt, sizes, start, fields, phase=lambda: self.phase, on_halved=halved)

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate a (micro-batch's) loss (Optimization.backward): with several
        processes the losses are shares of the batch's, summed rather than averaged."""
        self.optimization.backward(loss, self.world.size if self.world.distributed else 1)

    def clip_and_step(self, loss_total: float) -> tuple[float, bool]:
        """Clip and step (Optimization.clip_and_step); a sharded model's gradient norm is
        taken over every process's shards. Returns (grad norm, ok)."""
        clip = None
        if self.sharded_layers:
            from engine.distributed.sharding import clip_grad_norm as clip
        return self.optimization.clip_and_step(loss_total, clip)

    def count_skipped_step(self) -> None:
        """A NaN or inf loss or gradient skipped this step: counted and said (SkippedSteps.skip)."""
        self.nonfinite_steps += 1
        self.skipped_steps.skip(self.step + 1, self.nonfinite_steps, self.events.watcher)

    def timing_metrics(self, times: list[float], samples: int, tokens: int, generated: int | None = None) -> dict:
        """times: perf_counter at the start, after the rollout, after rewards, at the end
        (step_metrics.timing_metrics, with the learning rate and the skipped steps)."""
        return {**timing_metrics(times, samples, tokens, generated, learning_rate=self.optimization.learning_rate,
                                 skipped_steps=self.nonfinite_steps, loss_scale=self.optimization.loss_scale),
                **self.policy.clock.take()}  # timing/reference, timing/after_update: parts of the phases

    def emit_samples(self, samples: list[dict]) -> None:
        if samples:
            self.events.emit("samples", step=self.step, samples=samples)

    def emit_rollout_samples(self, last: RolloutStepOutputs, advantages: torch.Tensor) -> None:
        """The first log_completions sampled completions of an online step."""
        self.emit_samples(last.samples(advantages, self.preset.group_size, self.cfg.log_completions))

    def write_trajectories(self, records: list[dict]) -> None:
        for record in records:
            record["algorithm"] = self.algo.name
        if records:
            rundir.write_trajectories(self.run_dir, self.step, records)

    # ------------------------------------------------------------------- eval

    def evaluate(self) -> dict:
        """Greedy decoding on the held-out split: accuracy and mean reward (evaluation.py)."""
        if not self.eval_examples:
            return {}
        return evaluate_generations(self.eval_examples, self.greedy_completions, self.reward_components,
                                    accuracy_function(self.preset.rewards, self.accuracy_reward),
                                    batch=max(self.cfg.batch_size, MIN_EVAL_BATCH))

    def greedy_completions(self, prompts: list[str], fields: dict[str, list] | None = None):
        """Greedy completions' texts; with data.environment, greedy episodes' answers, fields and prompts."""
        if self.episodes is not None:  # what the rewards receive of them, and the prompts the model saw
            return self.episodes.greedy_outputs(self.sample_batch(prompts, 1, greedy=True, fields=fields))
        return self.policy.decode_completions(self.generate(prompts, greedy=True))

    # ------------------------------------------------------------- checkpoints

    def checkpoint_parts(self) -> CheckpointParts:
        """The parts a checkpoint holds (engine/algorithms/checkpoints.py)."""
        return CheckpointParts(self.model, self.optimization, self.random_states, self.world,
                               sharded=self.trained_holder() if self.sharded_layers else None)

    def save_checkpoint(self) -> Path:
        """Adapter, optimizer, scheduler, RNG, step and data position, written so that a
        checkpoint on disk is always complete (engine/algorithms/checkpoints.py)."""
        progress = Progress(self.step, self.stream.position, self.nonfinite_steps)
        return save_checkpoint(self.checkpoint_parts(), self.run_dir, progress, self.extra_state(),
                               keep=self.cfg.save_total_limit)

    def load_checkpoint(self, folder: Path) -> None:
        progress, extra = load_checkpoint(self.checkpoint_parts(), folder, self.device)
        self.load_extra_state(extra)
        self.step, self.stream.position, self.nonfinite_steps = (
            progress.step, progress.data_position, progress.nonfinite_steps)

    # -------------------------------------------------------------------- run

    def run_started_fields(self) -> dict:
        fields = run_started_fields(self.preset, self.policy, self.chat.source, self.world, self.declaration(),
                                    len(self.train_examples), len(self.eval_examples))
        return {**fields, "lineage": self.lineage} if self.lineage else fields

    def run(self, on_step=None, resume_from: Path | None = None, fork_of: dict | None = None, restart=False) -> str:
        """Train to max_steps or until stopped. Returns "done" or "stopped"; raises on failure
        (the caller writes run_failed), and StopDuringSetup, before writing anything, when a
        stop came during set-up.

        A checkpoint is saved every save_steps and at the end, unless no step was trained
        (stopped before the first step: nothing new to save) or this step is saved already.
        `fork_of` (with resume_from, a checkpoint of another run): a new run, a fork, whose
        run_started carries `parent` (engine/commands/fork.py). `restart`: `resume` of a run
        without a checkpoint, from step 0 again (run_resumed with `restarted`: run-directory.md)."""
        self.stop.enter_training()  # from here on a stop is cooperative
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # Rank 0 alone writes the run directory; the other ranks' events go nowhere.
        self.events.open(self.run_dir, self.cfg.report_to, self.world.is_main, on_alarm=self.on_alarm)
        self._saved_step = None
        try:
            if resume_from is None:
                if self.world.is_main:
                    save_preset(self.preset, self.run_dir / rundir.PRESET_FILE)
                redo = {"checkpoint": None, "restarted": True, "data_position": 0} if restart else {}  # no checkpoint
                self.events.emit("run_resumed" if redo else "run_started", step=0, **redo, **self.run_started_fields())
                if not self.stop_agreed():
                    self._evaluate_and_emit()
            else:
                self.load_checkpoint(resume_from)
                self._saved_step = self.step
                if fork_of is not None:  # a new run from another run's checkpoint
                    self._saved_step = None
                    if self.world.is_main:
                        save_preset(self.preset, self.run_dir / rundir.PRESET_FILE)
                    self.events.emit("run_started", step=self.step, parent=fork_of, **self.run_started_fields())
                else:
                    self.events.watcher.replay(rundir.read_events(self.run_dir), until_step=self.step)
                    self.events.emit("run_resumed", step=self.step, checkpoint=str(resume_from.name),
                                     data_position=self.stream.position, **self.run_started_fields())
            first_step = self.step
            while self.step < self.cfg.max_steps and not self.stop_agreed():
                result = self.train_step_that_fits()
                metrics = result.metrics
                logged = self.step % self.cfg.logging_steps == 0 or self.step == self.cfg.max_steps
                self.events.metrics(self.step, metrics, logged)
                self.events.alarms(self.episodes.take_alarms(self.step) if self.episodes else [])
                if self.world.is_main:
                    self.write_step_outputs(result.outputs)
                if self.cfg.eval_steps and self.step % self.cfg.eval_steps == 0 and self.step < self.cfg.max_steps:
                    self._evaluate_and_emit()
                if self.cfg.save_steps and self.step % self.cfg.save_steps == 0 and self.step < self.cfg.max_steps:
                    self._save_and_emit()
                if on_step is not None:
                    on_step(self.step, metrics)
            status = "stopped" if self.step < self.cfg.max_steps else "done"
            if status == "done" and self.step > first_step:
                self._evaluate_and_emit()
            if self.step > first_step and self._saved_step != self.step:
                self._save_and_emit()
            fields = {}
            if self.step == first_step and status == "stopped":
                fields["message"] = ("stopped before the first step: nothing new to checkpoint"
                                     + ("" if resume_from is None or fork_of
                                        else f"; resume continues from {resume_from.name}"))
            newest = rundir.complete_checkpoints(self.run_dir)
            reason = "max_steps reached"
            if status == "stopped":
                reason = self.stop.reason or "a stop reached another process of the run"
            self.events.emit("run_finished", step=self.step, status=status, reason=reason,
                             checkpoint=str(newest[-1].relative_to(self.run_dir)) if newest else None, **fields)
            return status
        finally:
            self.events.close()

    def stop_agreed(self) -> bool:
        """Whether the run stops before the next step: a stop that reached any process
        stops every one at the same step (one small all-reduce a step)."""
        return self.world.any(self.stop.requested)

    def _evaluate_and_emit(self) -> None:
        if not self.world.is_main and not self.sharded_layers:
            return  # evaluation runs once, on rank 0 (all run it when the model is sharded: its passes are collectives)
        try:
            result = self.evaluate()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            raise OutOfMemory(out_of_memory_message("evaluation", batch=max(self.cfg.batch_size, MIN_EVAL_BATCH), micro_batch=0,
                                                    unit="", max_tokens=self.algo.max_completion_length, auto=False,
                                                    checkpointing=self.policy.checkpointing)) from exc
        self.events.evaluation(self.step, result)

    def _save_and_emit(self) -> None:
        path = self.save_checkpoint()  # every rank gives its random states; rank 0 writes
        self._saved_step = self.step
        self.events.emit("checkpoint", step=self.step, path=str(path.relative_to(self.run_dir)))

