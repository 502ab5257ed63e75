"""What a run writes besides its checkpoints and trajectory records: its events
(events.jsonl, and the reporter `training.report_to` names: engine/run/reporting.py) and
the alarms its watcher raises (engine/alarms), rank 0 alone; and `run_started_fields`,
what run_started and run_resumed tell a reader about the run.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

from engine.alarms import AlarmWatcher, alarm_line
from engine.model.loading import parameter_counts
from engine.foundation.io import preset_to_dict
from engine.run import rundir
from engine.run.reporting import tee_for

__all__ = ["RunEvents", "run_started_fields"]

log = logging.getLogger(__name__)

# What an eval event's log line shows.
SHOWN_SCORES = ("accuracy", "reward", "preference_accuracy")


class RunEvents:
    """A run's event stream and its alarm watcher (fed on every rank, so that the ranks
    agree; written by rank 0). `open` before the first event, `close` after the last."""

    def __init__(self, watcher: AlarmWatcher):
        self.watcher = watcher
        self.writer: rundir.EventWriter | rundir.NullEventWriter | None = None
        self.is_main = True
        self.on_alarm: Callable[[dict], None] | None = None

    def open(self, run_dir: Path, report_to, is_main: bool, on_alarm: Callable[[dict], None] | None = None) -> None:
        """Rank 0 writes RUN_DIR/events.jsonl (and, with training.report_to, its reporter:
        tensorboard also writes RUN_DIR/tensorboard/); the other ranks' events go nowhere.
        `on_alarm`: called with each alarm event written (the CLI prints a line)."""
        self.is_main, self.on_alarm = is_main, on_alarm
        self.writer = rundir.EventWriter(run_dir) if is_main else rundir.NullEventWriter()
        if is_main:
            self.writer = tee_for(self.writer, run_dir, report_to)

    def close(self) -> None:
        self.writer.close()

    def emit(self, event_type: str, /, **fields) -> None:
        """One event (rundir.EVENT_TYPES); positional, as its fields may hold a `kind`."""
        self.writer.emit(event_type, **fields)

    def metrics(self, step: int, metrics: dict, logged: bool) -> None:
        """A step's metrics: watched always, written when `logged` (training.logging_steps)."""
        if logged:
            self.emit("metrics", step=step, **metrics)
        self.alarms(self.watcher.observe_metrics(step, metrics))

    def evaluation(self, step: int, result: dict) -> None:
        """An evaluation's result as an eval event (nothing without one), watched."""
        if not result:
            return
        self.emit("eval", step=step, **result)
        self.alarms(self.watcher.observe_eval(step, result))
        shown = ", ".join(f"{k} {v:.4g}" for k, v in result.items() if k in SHOWN_SCORES and v is not None)
        log.info("eval at step %d: %s", step, shown or "no scores")

    def alarms(self, alarms: list[dict]) -> None:
        """Write the watcher's alarms, rank 0 alone."""
        for alarm in alarms if self.is_main else ():
            self.emit("alarm", **alarm)
            log.warning(alarm_line(alarm))
            if self.on_alarm is not None:
                self.on_alarm(alarm)


def run_started_fields(preset, policy, chat_source: str, world, declaration: dict,
                       num_train: int, num_eval: int) -> dict:
    """What run_started (and run_resumed) carry: the preset, the model (its parameters,
    adapter targets, context, chat template and end tokens), device and dtype, the data's
    size, the algorithm's declaration (plots and records) and the processes."""
    model, loaded = policy.model, policy.loaded
    counts = parameter_counts(model)
    return {
        "preset": preset_to_dict(preset),
        "model": {"name_or_path": preset.model.name_or_path,
                  "architecture": type(model.get_base_model()).__name__,
                  "parameters": counts["total"], "trainable_parameters": counts["trainable"],
                  "lora_targets": loaded.target_modules,
                  "context_length": loaded.context_length,
                  "chat_template": chat_source, "eos_token_ids": loaded.eos_token_ids, "head": loaded.head},
        "device": str(policy.device), "dtype": str(loaded.dtype).removeprefix("torch."),
        "algorithm": preset.algorithm.name, "max_steps": preset.training.max_steps, "pid": os.getpid(),
        "num_train": num_train, "num_eval": num_eval, **declaration,
        "world_size": world.size, "backend": world.backend,
        **({"processes": [{"rank": r, "host": h, "pid": p} for r, (h, p) in enumerate(world.processes)]}
           if world.distributed else {}),
    }
