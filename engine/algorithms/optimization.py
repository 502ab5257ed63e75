"""The optimizer part of a trainer: AdamW over the trained parameters, its learning-rate
schedule (warmup, then constant, linear or cosine) and the loss scaler of an fp16 model,
built from the preset's `training` section in one place (`adamw_settings`), so a fresh
run and a resumed or forked one train with the same settings.

A step whose loss or gradient is not finite is skipped (`clip_and_step`); `SkippedSteps`
counts such steps, says why each was skipped and stops the run past
training.max_nonfinite_steps (`RunAborted`).

It knows nothing of models or data: the trainer gives it the parameters and the losses.
"""

from __future__ import annotations

import logging
import math

import torch

__all__ = ["Optimization", "RunAborted", "SkippedSteps", "adamw_settings", "lr_factor"]

log = logging.getLogger(__name__)


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


def adamw_settings(cfg) -> dict:
    """AdamW's keyword arguments from the preset's training section (`cfg`).

    input:  learning_rate 1e-4, adam_beta1 0.9, adam_beta2 0.999, weight_decay 0.0
    output: {"lr": 1e-4, "betas": (0.9, 0.999), "weight_decay": 0.0}
    """
    return {"lr": cfg.learning_rate, "betas": (cfg.adam_beta1, cfg.adam_beta2), "weight_decay": cfg.weight_decay}


class Optimization:
    """AdamW, its LambdaLR schedule over `total_updates` optimizer steps and the loss
    scaler (on for an fp16 model only: bf16 and fp32 gradients do not underflow).

    Example:
        >>> import types
        >>> cfg = types.SimpleNamespace(learning_rate=1.0, adam_beta1=0.9, adam_beta2=0.999, weight_decay=0.0,
        ...                             warmup_steps=2, lr_scheduler_type="linear", max_grad_norm=1.0)
        >>> parts = Optimization([torch.nn.Parameter(torch.zeros(2))], cfg, total_updates=6)
        >>> parts.learning_rate
        0.5
    """

    def __init__(self, parameters: list[torch.nn.Parameter], cfg, total_updates: int,
                 device_type: str = "cpu", fp16: bool = False):
        self.cfg = cfg  # the preset's training section
        self.parameters = list(parameters)
        self.optimizer = torch.optim.AdamW(self.parameters, **adamw_settings(cfg))
        # A plain function (not a partial): LambdaLR leaves functions out of its state_dict.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, cfg.warmup_steps, total_updates, cfg.lr_scheduler_type))
        self.scaler = torch.amp.GradScaler(device_type, enabled=fp16)

    @property
    def learning_rate(self) -> float:
        """The learning rate of the next optimizer step."""
        return self.scheduler.get_last_lr()[0]

    @property
    def loss_scale(self) -> float | None:
        """The fp16 loss scale; None when the scaler is off."""
        return self.scaler.get_scale() if self.scaler.is_enabled() else None

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor, processes: int = 1) -> None:
        """Backpropagate a (micro-batch's) loss, scaled first for an fp16 model, whose small
        gradients would otherwise underflow to zero. DDP and FSDP2 average gradients over
        the `processes`; the losses are shares of the whole batch's, so they are multiplied
        by the number of processes to sum instead."""
        if processes > 1:
            loss = loss * processes
        self.scaler.scale(loss).backward()

    def clip_and_step(self, loss_total: float, clip_grad_norm=None) -> tuple[float, bool]:
        """Clip the gradient and take an optimizer and scheduler step, unless the loss or
        the gradient is not finite (then the gradient is dropped). Returns (grad norm, ok).
        In fp16 an infinite gradient with a finite loss is the loss scale overflowing: the
        step is skipped and the scale lowered (as torch.amp does), not counted as a fault.
        `clip_grad_norm(parameters, max_norm)`: torch's, unless the parameters are sharded."""
        self.scaler.unscale_(self.optimizer)
        if clip_grad_norm is None:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.parameters, self.cfg.max_grad_norm))
        else:
            grad_norm = clip_grad_norm(self.parameters, self.cfg.max_grad_norm)
        overflow = self.scaler.is_enabled() and math.isfinite(loss_total) and not math.isfinite(grad_norm)
        if not overflow and not (math.isfinite(loss_total) and math.isfinite(grad_norm)):
            self.zero_grad()
            self.scaler.update()
            return grad_norm, False
        self.scaler.step(self.optimizer)  # skipped by the scaler itself on an overflow
        self.scaler.update()
        if not overflow:
            self.scheduler.step()
        return grad_norm, True

    # ---------------------------------------------------------------- state

    def state_dict(self, optimizer: dict | None = None) -> dict:
        """What a checkpoint keeps of this part, under the keys trainer_state.pt has always
        used; `optimizer`: the whole optimizer state gathered from shards, if sharded."""
        return {"optimizer": self.optimizer.state_dict() if optimizer is None else optimizer,
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict, *, with_optimizer: bool = True) -> None:
        """A checkpoint's schedule and scaler (and optimizer, unless a sharded load put it
        in place already), then the preset's AdamW settings over the loaded ones."""
        if with_optimizer:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.apply_preset_settings()
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])

    def apply_preset_settings(self) -> None:
        """The preset's AdamW settings over those the loaded optimizer and scheduler states
        carry, at the schedule's position: a fork (or a resume) with --set
        training.learning_rate (weight_decay, adam_beta1/2) trains with the new value. With
        the same settings these are the very values the checkpoint had (LambdaLR's formula)."""
        settings = adamw_settings(self.cfg)
        self.scheduler.base_lrs = [settings["lr"] for _ in self.optimizer.param_groups]
        step = self.scheduler.last_epoch
        lrs = [base * rule(step) for rule, base in zip(self.scheduler.lr_lambdas, self.scheduler.base_lrs)]
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group.update(settings, lr=lr, initial_lr=settings["lr"])
        self.scheduler._last_lr = lrs

    def snapshot(self) -> dict:
        """The optimizer, scheduler and scaler states with every tensor copied to the CPU
        (the live state's tensors are updated in place), for `restore`."""
        return {"optimizer": _on_cpu(self.optimizer.state_dict()), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict()}

    def restore(self, snapshot: dict) -> None:
        """Back to a `snapshot` (the optimizer's state moves to the weights' device)."""
        self.optimizer.load_state_dict(snapshot["optimizer"])
        self.scheduler.load_state_dict(snapshot["scheduler"])
        self.scaler.load_state_dict(snapshot["scaler"])


class RunAborted(RuntimeError):
    """The run cannot go on (for example too many non-finite steps)."""


class SkippedSteps:
    """The steps skipped for a NaN or inf loss or gradient: a warning for each, and
    RunAborted once more than `limit` (training.max_nonfinite_steps) were. Where a user's
    loss or estimator (FILE.py:FUNCTION) returned the NaN or inf (noted by its guard:
    engine.rl.user_code.first_nonfinite), the warning, the step's alarm and the abort name it,
    not the learning rate, and the abort's file and line (run_failed's) are its def's."""

    def __init__(self, limit: int):
        self.limit = limit
        self.first = None  # (step, NonFinite): the first step a user's function made non-finite

    @staticmethod
    def new_step() -> None:
        """A step begins: a NaN or inf a user's function returned before it is not its."""
        from engine.rl.user_code import forget_nonfinite

        forget_nonfinite()

    def skip(self, step: int, count: int, watcher) -> None:
        """Step `step` was skipped, the `count`-th so far; `watcher`: the run's AlarmWatcher
        (the step's alarm names the user's function that returned the NaN or inf, if one did)."""
        from engine.rl.user_code import first_nonfinite

        cause = first_nonfinite()
        if cause is not None:
            self.first = self.first or (step, cause)
            watcher.explain_nonfinite(step, cause.field, cause.message)
            log.warning("step %d skipped: %s (%d skipped so far)", step, cause.message, count)
        else:
            log.warning("step %d: non-finite loss or gradient; step skipped (%d so far)", step, count)
        if count <= self.limit:
            return
        counted = (f"{count} step{'s' if count != 1 else ''} had a NaN or inf loss or gradient "
                   f"(training.max_nonfinite_steps = {self.limit})")
        if self.first is None:
            raise RunAborted(f"{counted}; lower training.learning_rate or check the rewards for extreme values")
        at, first = self.first
        error = RunAborted(f"{first.message}, at step {at}; {counted}: fix the function (`rl-engine validate` runs "
                           "it on a synthetic batch and says what it returns)")
        error.user_location = first.location
        raise error


def _on_cpu(value):
    """A copy of an optimizer state_dict with every tensor on the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value
