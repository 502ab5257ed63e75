"""What every algorithm shares. `Trainer` holds data, model, optimizer, sampling,
evaluation, checkpoints, the run loop and its events; each algorithm in
engine.algorithms (grpo, ppo, dpo) subclasses it and adds a step. This module imports
no algorithm: engine.algorithms.TRAINERS maps a preset's algorithm name to its class.

The loops stay thin: the math is in engine.rl.losses / engine.rl.advantages, sampling in
engine.model.rollout, per-token records in engine.run.trajectories and the on-disk contract in
engine.run.rundir.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.run import rundir
from engine.alarms import AlarmWatcher, alarm_line
from engine.algorithms.checkpoints import load_checkpoint, save_checkpoint
from engine.algorithms.declaration import Declares
from engine.algorithms.evaluation import evaluate_generations
from engine.algorithms.step_metrics import rollout_metrics, timing_metrics
from engine.algorithms.memory import OutOfMemory, is_out_of_memory, out_of_memory_message, train_step_that_fits
from engine.model.chat import chat_format, template_examples
from engine.data import Example, PromptStream, accuracy_reward_name, load_splits
from engine.distributed.launch import world_size_problems
from engine.distributed.rollouts import gather_rollout
from engine.distributed.world import TrainedModules, World
from engine.model.forward import completion_logits
from engine.preset.input_checks import reward_field_problems
from engine.model.loading import LoadedModel, check_context_fits, load_model, parameter_counts, reference_mode
from engine.preset.schema import Preset
from engine.preset.io import preset_to_dict, save_preset
from engine.rewards import build_reward_components, combine_rewards
from engine.model.rollout import Rollout, sample
from engine.model.token_logits import TokenLogits
from engine.run.stopping import StopFlag
from engine.run.reporting import tee_for

log = logging.getLogger(__name__)


@dataclass
class RolloutStepOutputs:
    """What an online step (GRPO, PPO) keeps for `write_step_outputs`: the sampled batch,
    its rewards and advantages, (B,) per completion or (B, T) per token, and the rows
    the inspector records."""

    prompts: list[str]
    completions: list[str]
    totals: list[float]
    components: dict[str, list[float]]
    rollout: Rollout
    advantages: torch.Tensor
    record_rows: list[int]


SMALL_GROUP = 8  # num_generations up to which a group is recorded whole (num_recorded)


class RunAborted(RuntimeError):
    """The run cannot go on (for example too many non-finite steps)."""


def lr_factor(step: int, warmup_steps: int, total_steps: int, kind: str) -> float:
    """Learning-rate multiplier at optimizer step `step` (0-based).

    input:  warmup 2, total 6, linear, steps 0..5
    output: [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if kind == "constant":
        return 1.0
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return {"linear": 1.0 - progress, "cosine": 0.5 * (1.0 + math.cos(math.pi * progress))}[kind]


def micro_batch_weight(loss_type: str, micro_mask: torch.Tensor, batch_mask: torch.Tensor) -> float:
    """Share of the whole batch's loss normaliser that one micro-batch carries, so that
    gradient accumulation gives the gradient of the full-batch loss.

    dapo normalises by the batch's token count; grpo and dr_grpo by its row count.
    input:  dapo, micro mask with 3 tokens, batch mask with 12 tokens   output: 0.25
    """
    if loss_type == "dapo":
        return float(micro_mask.sum() / batch_mask.sum().clamp(min=1))
    return micro_mask.shape[0] / batch_mask.shape[0]


def set_update_mode(model, updating: bool, lora_dropout: bool = False) -> None:
    """Every dropout stays off, the base model's and the adapter's, in sampling, in the
    passes that give old logprobs and in the updates, as TRL's `disable_dropout`: a pass
    whose logprobs feed an importance ratio (GRPO, PPO) must be dropout-free, or at
    identical weights the ratio is not 1 but noise (up to 0.19 in logprob with LoRA
    dropout 0.05). With `lora_dropout` (DPO with `disable_dropout` false only: it has no
    ratio, it compares with a reference pass that has the adapter off) the adapter's
    dropout is on in updates.
    Under gradient checkpointing the decoder layers' own flags are on in updates."""
    model.eval()
    if updating and lora_dropout:
        for name, module in model.named_modules():
            if name.endswith("lora_dropout"):
                module.train()
    if updating:
        # Gradient checkpointing acts only on layers in training mode: their own flag
        # is set (not their children's, so dropout stays off).
        for module in model.modules():
            if getattr(module, "gradient_checkpointing", False) is True and hasattr(module, "_gradient_checkpointing_func"):
                module.training = True


class Trainer(Declares):
    """What every algorithm shares. A subclass implements `train_step` (returns the step's
    metrics) and `write_step_outputs` (samples events and trajectory records)."""

    TEMPLATED_PAIRS = False  # DPO: chosen/rejected answers go through the chat template too
    MICRO_BATCH_UNIT = "completions"  # what training.micro_batch_size counts (DPO: pairs)

    def __init__(self, preset: Preset, run_dir: str | Path, stop: StopFlag | None = None,
                 preset_dir: Path | None = None, world: World | None = None):
        self.preset = preset
        self.world = world or World()
        problems = world_size_problems(preset, self.world.size)
        if problems:
            raise ValueError("; ".join(problems))
        self.algo = preset.algorithm
        self.cfg = preset.training
        self.run_dir = Path(run_dir)
        self.stop = stop or StopFlag()
        self.step = 0
        self.nonfinite_steps = 0
        self.watcher = AlarmWatcher(preset.alarms)
        self.on_alarm = None  # called with each alarm event written (the CLI prints a line)
        self.events: rundir.EventWriter | None = None
        self._saved_step: int | None = None  # the step of the checkpoint saved last

        torch.manual_seed(self.cfg.seed)
        random.seed(self.cfg.seed)
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
        self.loaded: LoadedModel = load_model(preset.model, self.cfg.gradient_checkpointing)
        self.checkpointing = self.loaded.gradient_checkpointing
        self.model = self.loaded.model
        self.tokenizer = self.loaded.tokenizer
        self.device = self.loaded.device
        # Prompts as the model sees them: through its chat template (engine/model/chat.py).
        self.chat = chat_format(preset.model.chat_template, self.loaded.tokenizer_chat_template,
                                preset.data.system_prompt, preset_dir)
        self.train_examples, self.eval_examples = (
            template_examples(examples, self.chat, self.tokenizer, pairs=self.TEMPLATED_PAIRS)
            for examples in (train, held_out))
        self.stream = PromptStream(self.train_examples, self.cfg.seed)
        self.stop.check_setup()
        self.reward_components = build_reward_components(preset.rewards, device=self.device, base_dir=preset_dir)
        self.stop.check_setup()
        check_context_fits(self.tokenizer, [e.prompt for e in self.train_examples + self.eval_examples],
                           self.algo.max_completion_length, self.loaded.context_length)

        self.setup_modules()
        # training.fsdp with several processes: the decoder layers sharded (FSDP2), before
        # the optimizer sees their parameters (engine/distributed/sharding.py).
        self.sharded_layers: list[torch.nn.Module] = []
        if self.cfg.fsdp and self.world.distributed:
            from engine.distributed.sharding import shard_layers

            self.sharded_layers = shard_layers(self.model, self.world)
        self.optimizer = torch.optim.AdamW(
            self.trainable_parameters(),
            lr=self.cfg.learning_rate, betas=(self.cfg.adam_beta1, self.cfg.adam_beta2),
            weight_decay=self.cfg.weight_decay,
        )
        total_updates = self.cfg.max_steps * self.updates_per_step()
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: lr_factor(s, self.cfg.warmup_steps, total_updates, self.cfg.lr_scheduler_type),
        )
        # `generator` draws what every rank must draw alike (PPO's mini-batch order);
        # `sample_generator` samples completions, and differs between ranks (one process:
        # the same generator, as before there were several).
        self.generator = torch.Generator(device=self.device).manual_seed(self.cfg.seed)
        self.sample_generator = self.generator
        if self.world.size > 1:
            self.sample_generator = torch.Generator(device=self.device).manual_seed(
                self.cfg.seed + 1_000_003 * self.world.rank)
        # Several processes: DDP averages the trained modules' gradients (world.py).
        self.ddp = self.world.data_parallel(self.trained_modules())
        # micro_batch_size `auto` starts with the whole batch and halves on out-of-memory.
        self.auto_micro_batch = self.cfg.batch_size
        self.phase = "rollout"  # the part of a step running: "rollout" or "update" (messages)
        # Loss scaling for an fp16 model only (a no-op otherwise); its scale is in checkpoints.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.loaded.dtype == torch.float16)

    # ------------------------------------------------------- subclass hooks

    def load_examples(self, preset_dir: Path | None) -> tuple[list[Example], list[Example]]:
        return load_splits(self.preset.data, self.cfg.seed, preset_dir)

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

    def train_step(self) -> dict:
        raise NotImplementedError

    def write_step_outputs(self) -> None:
        raise NotImplementedError

    # --------------------------------------------------------------- rollouts

    def encode_prompts(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        return enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)

    def decode_completions(self, rollout: Rollout) -> list[str]:
        """The completions' text for the rewards: the end token that stopped one is cut,
        whether or not the tokenizer calls it special (`<|im_end|>` and the like)."""
        eos = set(self.loaded.eos_token_ids)
        ids = [row[: int(n)].tolist() for row, n in zip(rollout.completion_ids, rollout.lengths)]
        ids = [row[:-1] if row and row[-1] in eos else row for row in ids]
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def generate(self, prompts: list[str], greedy: bool = False, group_size: int = 1) -> Rollout:
        ids, mask = self.encode_prompts(prompts)
        set_update_mode(self.model, False)
        return sample(
            self.model, ids, mask,
            max_new_tokens=self.algo.max_completion_length,
            eos_token_ids=self.loaded.eos_token_ids, pad_token_id=self.tokenizer.pad_token_id,
            temperature=self.temperature, top_p=getattr(self.algo, "top_p", 1.0),
            top_k=getattr(self.algo, "top_k", 0),
            greedy=greedy, generator=self.sample_generator, group_size=group_size,
            # A sharded model's passes are collectives: every process decodes as long as any.
            finished_everywhere=(lambda finished: not self.world.any(not finished)) if self.sharded_layers else None,
        )

    def sample_batch(self, prompts: list[str], group_size: int) -> tuple[Rollout, list[str]]:
        """The step's rollout over all `prompts` and the completions' text. With several
        processes each samples its share of the prompt groups and the parts are gathered:
        every process gets the whole batch, in the order one process would have it."""
        rows = self.world.share(len(prompts), group_size)
        rollout = self.generate(prompts[rows], group_size=group_size)
        if self.world.distributed:
            rollout = gather_rollout(self.world, rollout, self.tokenizer.pad_token_id)
        return rollout, self.decode_completions(rollout)

    def score(self, prompts: list[str], completions: list[str], fields: dict[str, list],
              group_size: int) -> tuple[list[float], dict[str, list[float]]]:
        """Total rewards and their components for the whole batch; with several processes
        each scores its share (a reward model runs once a completion) and they are gathered."""
        rows = self.world.share(len(prompts), group_size)
        totals, components = combine_rewards(self.reward_components, prompts[rows], completions[rows],
                                             {k: v[rows] for k, v in fields.items()})
        if self.world.distributed:
            parts = self.world.gather_objects((totals, components))
            totals = [t for part in parts for t in part[0]]
            components = {k: [v for part in parts for v in part[1][k]] for k in components}
        return totals, components

    @property
    def temperature(self) -> float:
        """Sampling temperature; the update scores tokens at the same temperature, so its
        logprobs are those of the policy that sampled. DPO samples only greedily (eval)."""
        return getattr(self.algo, "temperature", 1.0)

    def completion_logits(self, rollout: Rollout, rows: slice, group_size: int | None = None) -> TokenLogits:
        """Temperature-scaled logits that predict each completion token, as a TokenLogits
        (b, T, V) computed in chunks (its `hidden`, (b, T, H), is what a value head reads).
        Rows come in groups of `group_size` identical prompts (default: the preset's)."""
        group_size = self.preset.group_size if group_size is None else group_size
        args = (self.model, rollout, rows, group_size)
        kwargs = {"temperature": self.temperature, "shared_prefix": not self.checkpointing}
        if self.ddp is not None and torch.is_grad_enabled():
            # A pass whose backward follows: through DDP, which then reduces the gradients.
            return self.ddp(completion_logits, *args, **kwargs)
        return completion_logits(*args, **kwargs)

    @torch.no_grad()
    def reference_logprobs(self, rollout: Rollout, rows: slice, group_size: int | None = None) -> torch.Tensor:
        with reference_mode(self.model):
            logits = self.completion_logits(rollout, rows, group_size=group_size)
            return logits.logprobs(rollout.completion_ids[rows])

    def recorded_reference(self, rollout: Rollout, rows: int, group_size: int | None = None) -> torch.Tensor | None:
        """Reference logprobs of the first `rows` rows, for the inspector's records (rank 0
        writes them). A sharded model's passes take every process, so then all run it."""
        if rows and (self.world.is_main or self.sharded_layers):
            return self.reference_logprobs(rollout, slice(0, rows), group_size=group_size)
        return None

    def micro_batches(self, batch: int, unit: int = 1) -> list[slice]:
        """This process's micro-batches of a batch of `batch` rows: all of them with one
        process; with several, those of its share (World.share, in whole `unit`s)."""
        share = self.world.share(batch, unit)
        rows = share.stop - share.start
        size = self.cfg.micro_batch_size if isinstance(self.cfg.micro_batch_size, int) else rows
        if self.cfg.micro_batch_size == "auto":
            size = min(rows, self.auto_micro_batch)
        size = max(size, 1)
        return [slice(i, min(i + size, share.stop)) for i in range(share.start, share.stop, size)]

    @contextlib.contextmanager
    def synced(self, index: int, count: int):
        """The context of micro-batch `index` of `count` in one optimizer step: with
        several processes, gradients are reduced on the last one only."""
        sync = index == count - 1
        if self.sharded_layers:
            from engine.distributed.sharding import set_layers_sync

            set_layers_sync(self.sharded_layers, sync)
        with self.world.no_sync(self.ddp, sync):
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

    def train_step_that_fits(self) -> dict:
        """train_step, taken again with half the micro-batch on GPU out-of-memory when
        micro_batch_size is `auto`, else failing with the fields to change (memory.py)."""
        return train_step_that_fits(self)

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate a (micro-batch's) loss; scaled first for an fp16 model, whose
        small gradients would otherwise underflow to zero (bf16 and fp32 need no scaling).
        DDP averages gradients over the processes; the losses are shares of the whole
        batch's, so they are multiplied by the number of processes to sum instead."""
        if self.world.distributed:  # DDP and FSDP2 both average
            loss = loss * self.world.size
        self.scaler.scale(loss).backward()

    def clip_and_step(self, loss_total: float) -> tuple[float, bool]:
        """Clip the gradient and take an optimizer and scheduler step, unless the loss or
        the gradient is not finite (then the gradient is dropped). Returns (grad norm, ok).
        In fp16 an infinite gradient with a finite loss is the loss scale overflowing: the
        step is skipped and the scale lowered (as torch.amp does), not counted as a fault."""
        self.scaler.unscale_(self.optimizer)
        if self.sharded_layers:  # the norm over every process's shards
            from engine.distributed.sharding import clip_grad_norm

            grad_norm = clip_grad_norm(self.trainable_parameters(), self.cfg.max_grad_norm)
        else:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), self.cfg.max_grad_norm))
        overflow = self.scaler.is_enabled() and math.isfinite(loss_total) and not math.isfinite(grad_norm)
        if not overflow and not (math.isfinite(loss_total) and math.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.update()
            return grad_norm, False
        self.scaler.step(self.optimizer)  # skipped by the scaler itself on an overflow
        self.scaler.update()
        if not overflow:
            self.scheduler.step()
        return grad_norm, True

    def count_skipped_step(self) -> None:
        self.nonfinite_steps += 1
        log.warning("step %d: non-finite loss or gradient; step skipped (%d so far)",
                    self.step + 1, self.nonfinite_steps)
        if self.nonfinite_steps > self.cfg.max_nonfinite_steps:
            raise RunAborted(
                f"{self.nonfinite_steps} steps had a NaN or inf loss or gradient "
                f"(training.max_nonfinite_steps = {self.cfg.max_nonfinite_steps}); lower "
                "training.learning_rate or check the rewards for extreme values"
            )

    def rollout_metrics(self, rollout: Rollout, rewards: torch.Tensor, components: dict) -> dict:
        """Metrics of a sampled batch that every online algorithm logs (step_metrics.py)."""
        return rollout_metrics(rollout, rewards, components)

    def timing_metrics(self, times: list[float], samples: int, tokens: int, generated: int | None = None) -> dict:
        """times: perf_counter at the start, after the rollout, after rewards, at the end."""
        return timing_metrics(self, times, samples, tokens, generated)

    def emit_samples(self, samples: list[dict]) -> None:
        if samples:
            self.events.emit("samples", step=self.step, samples=samples)

    def emit_rollout_samples(self, last: RolloutStepOutputs, advantages: torch.Tensor) -> None:
        """The first log_completions sampled completions of an online step. `advantages`
        is (B,) per completion or (B, T) per token; a per-token one is shown by its first
        token's (for GAE and REINFORCE++ that token carries the whole return)."""
        per_sample = advantages if advantages.dim() == 1 else advantages[:, 0]
        G = self.preset.group_size
        self.emit_samples([
            {"index": i, "group": i // G,
             "prompt": last.prompts[i], "completion": last.completions[i],
             "reward": last.totals[i],
             "rewards": {k: v[i] for k, v in last.components.items()},
             "advantage": float(per_sample[i])}
            for i in range(min(self.cfg.log_completions, len(last.prompts)))
        ])

    def write_trajectories(self, records: list[dict]) -> None:
        for record in records:
            record["algorithm"] = self.algo.name
        if records:
            rundir.write_trajectories(self.run_dir, self.step, records)

    def recorded_top(self, logits: TokenLogits, rows: slice, num_recorded: int):
        """Top-5 (probs, ids) of the recorded rows among `rows` (the first num_recorded of
        the batch), or None when none of them is in this micro-batch."""
        recorded = max(0, min(rows.stop, num_recorded) - rows.start)
        return logits.top(recorded) if recorded else None

    # ------------------------------------------------------------------- eval

    def evaluate(self) -> dict:
        """Greedy decoding on the held-out split: accuracy and mean reward (evaluation.py)."""
        return evaluate_generations(self)

    # ------------------------------------------------------------- checkpoints

    def save_checkpoint(self) -> Path:
        """Adapter, optimizer, scheduler, RNG, step and data position, written so that a
        checkpoint on disk is always complete (engine/algorithms/checkpoints.py)."""
        return save_checkpoint(self)

    def load_checkpoint(self, folder: Path) -> None:
        load_checkpoint(self, folder)

    # -------------------------------------------------------------------- run

    def run_started_fields(self) -> dict:
        counts = parameter_counts(self.model)
        return {
            "preset": preset_to_dict(self.preset),
            "model": {"name_or_path": self.preset.model.name_or_path,
                      "architecture": type(self.model.get_base_model()).__name__,
                      "parameters": counts["total"], "trainable_parameters": counts["trainable"],
                      "lora_targets": self.loaded.target_modules,
                      "context_length": self.loaded.context_length,
                      "chat_template": self.chat.source, "eos_token_ids": self.loaded.eos_token_ids},
            "device": str(self.device), "dtype": str(self.loaded.dtype).removeprefix("torch."),
            "algorithm": self.algo.name, "max_steps": self.cfg.max_steps, "pid": os.getpid(),
            "num_train": len(self.train_examples), "num_eval": len(self.eval_examples), **self.declaration(),
            "world_size": self.world.size, "backend": self.world.backend,
            **({"processes": [{"rank": r, "host": h, "pid": p} for r, (h, p) in enumerate(self.world.processes)]}
               if self.world.distributed else {}),
        }

    def run(self, on_step=None, resume_from: Path | None = None, fork_of: dict | None = None) -> str:
        """Train to max_steps or until stopped. Returns "done" or "stopped"; raises on failure
        (the caller writes run_failed), and StopDuringSetup, before writing anything, when a
        stop came during set-up.

        A checkpoint is saved every save_steps and at the end, unless no step was trained
        (stopped before the first step: nothing new to save) or this step is saved already.
        `fork_of` (with resume_from, a checkpoint of another run): a new run, a fork, whose
        run_started carries `parent` (engine/commands/fork.py)."""
        self.stop.enter_training()  # from here on a stop is cooperative
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # Rank 0 alone writes the run directory; the other ranks' events go nowhere.
        self.events = rundir.EventWriter(self.run_dir) if self.world.is_main else rundir.NullEventWriter()
        if self.world.is_main:  # training.report_to: tensorboard also writes RUN_DIR/tensorboard/
            self.events = tee_for(self.events, self.run_dir, self.cfg.report_to)
        self._saved_step = None
        try:
            if resume_from is None:
                if self.world.is_main:
                    save_preset(self.preset, self.run_dir / rundir.PRESET_FILE)
                self.events.emit("run_started", step=0, **self.run_started_fields())
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
                    self.watcher.replay(rundir.read_events(self.run_dir), until_step=self.step)
                    self.events.emit("run_resumed", step=self.step, checkpoint=str(resume_from.name),
                                     data_position=self.stream.position, **self.run_started_fields())
            first_step = self.step
            while self.step < self.cfg.max_steps and not self.stop_agreed():
                metrics = self.train_step_that_fits()
                if self.step % self.cfg.logging_steps == 0 or self.step == self.cfg.max_steps:
                    self.events.emit("metrics", step=self.step, **metrics)
                self.raise_alarms(self.watcher.observe_metrics(self.step, metrics))
                if self.world.is_main:
                    self.write_step_outputs()
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
            raise OutOfMemory(out_of_memory_message("evaluation", batch=max(self.cfg.batch_size, 32), micro_batch=0,
                                                    unit="", max_tokens=self.algo.max_completion_length, auto=False,
                                                    checkpointing=self.checkpointing)) from exc
        if result:
            self.events.emit("eval", step=self.step, **result)
            self.raise_alarms(self.watcher.observe_eval(self.step, result))
            shown = ", ".join(f"{k} {v:.4g}" for k, v in result.items()
                              if k in ("accuracy", "reward", "preference_accuracy") and v is not None)
            log.info("eval at step %d: %s", self.step, shown or "no scores")

    def raise_alarms(self, alarms: list[dict]) -> None:
        """Write the watcher's alarms (engine/alarms), rank 0 alone."""
        for alarm in alarms if self.world.is_main else ():
            self.events.emit("alarm", **alarm)
            log.warning(alarm_line(alarm))
            if self.on_alarm is not None:
                self.on_alarm(alarm)

    def _save_and_emit(self) -> None:
        path = self.save_checkpoint()  # every rank gives its random states; rank 0 writes
        self._saved_step = self.step
        self.events.emit("checkpoint", step=self.step, path=str(path.relative_to(self.run_dir)))

