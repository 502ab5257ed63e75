"""A run's events sent to wandb or trackio as they are logged (`training.report_to:
wandb` or `trackio`), for users who keep their runs there. Both are optional: the
package is imported only when a preset asks for it, and a missing one is refused at
start with the line that installs it.

The two share the calls used here: `init(project=, name=, config=, resume=)`,
`log(dict, step=)`, `Table(columns=, data=)` and `finish()`. What goes where:

    metrics      every number under its own name (TRL's: reward, kl, loss, ...)
    eval         every number as eval/<name>, its samples as a table eval/samples
    samples      a table `samples` per logged step
    alarm        a one-row table `alarms` (title, steps, what was seen, what to try)
    run_started  the resolved preset as the run's config

The project is $WANDB_PROJECT / $TRACKIO_PROJECT, else `rl-workbench`; the run is named
after the run folder. Its id is kept in RUN_DIR/report_to.json, so `rl-engine resume`
continues the same tracked run (`resume="allow"`); a restart (a resume without a
checkpoint, from step 0 again) starts a new one. Torch-free.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from engine.run.tensorboard_events import finite_number

log = logging.getLogger(__name__)

TRACKERS = ("wandb", "trackio")
PROJECT_VARIABLES = {"wandb": "WANDB_PROJECT", "trackio": "TRACKIO_PROJECT"}
DEFAULT_PROJECT = "rl-workbench"
STATE_FILE = "report_to.json"  # RUN_DIR/report_to.json: which tracked run this run writes


class TrackerMissing(RuntimeError):
    """The tracker's package is not installed; the message says how to install it."""


def sample_rows(samples: list[dict]) -> tuple[list[str], list[list[Any]]]:
    """A table of samples: the columns whose values are text or numbers in the first
    sample (nested values, e.g. each reward's part, left out), and a row per sample.

    >>> sample_rows([{"prompt": "2 1", "completion": "1 2", "reward": 1.0, "rewards": {"a": 1}}])
    (['prompt', 'completion', 'reward'], [['2 1', '1 2', 1.0]])
    """
    if not samples:
        return [], []
    columns = [k for k, v in samples[0].items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
    return columns, [[s.get(c) for c in columns] for s in samples]


class TrackerRun:
    """One run in wandb or trackio, fed run events by `write` (TeeEventWriter)."""

    def __init__(self, name: str, run_dir: str | Path):
        if name not in TRACKERS:
            raise ValueError(f"unknown tracker {name!r}; one of {', '.join(TRACKERS)}")
        try:
            self.module = importlib.import_module(name)
        except ImportError:
            raise TrackerMissing(f"the {name} package is not installed: pip install {name}") from None
        self.name, self.run_dir = name, Path(run_dir)
        self.run = None

    # ------------------------------------------------------------ the tracked run

    def _start(self, config: dict | None, resuming: bool) -> None:
        state_path = self.run_dir / STATE_FILE
        saved = {}
        if resuming and state_path.is_file():
            try:
                saved = json.loads(state_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                saved = {}
        project = saved.get("project") or os.environ.get(PROJECT_VARIABLES[self.name]) or DEFAULT_PROJECT
        kwargs: dict[str, Any] = {"project": project, "name": saved.get("name") or self.run_dir.name}
        if config is not None:
            kwargs["config"] = config
        if self.name == "wandb":
            kwargs["dir"] = str(self.run_dir)  # wandb's own files beside the run's
            if saved.get("id"):
                kwargs.update(id=saved["id"], resume="allow")
        elif saved:
            kwargs["resume"] = "allow"  # trackio finds the run by project and name
        self.run = self.module.init(**kwargs)
        run_id = getattr(self.run, "id", None)
        state = {"tracker": self.name, "project": project, "name": kwargs["name"],
                 **({"id": run_id} if isinstance(run_id, str) else {})}
        state_path.write_text(json.dumps(state), encoding="utf-8")

    def _log(self, values: dict, step: int) -> None:
        if values:
            self.module.log(values, step=step)

    def _table(self, columns: list[str], rows: list[list[Any]]):
        return self.module.Table(columns=columns, data=rows)

    # ------------------------------------------------------------ events

    _SKIP = frozenset({"type", "time", "step", "samples"})

    def write(self, event: dict) -> None:
        """One run event; events of other types (checkpoint, run_finished, ...) are skipped."""
        kind, step = event.get("type"), event.get("step")
        step = step if isinstance(step, int) and not isinstance(step, bool) else 0
        if self.run is None:
            if kind not in ("run_started", "run_resumed"):
                return
            preset = event.get("preset") if isinstance(event.get("preset"), dict) else None
            # a restart (no checkpoint: from step 0 again) is a new tracked run, its steps logged anew
            self._start(preset, resuming=kind == "run_resumed" and not event.get("restarted"))
            return
        if kind in ("metrics", "eval"):
            prefix = "eval/" if kind == "eval" else ""
            values = {prefix + k: n for k, v in event.items() if k not in self._SKIP
                      for n in [finite_number(v)] if n is not None}
            if kind == "eval" and event.get("samples"):
                values["eval/samples"] = self._table(*sample_rows(event["samples"]))
            self._log(values, step)
        elif kind == "samples" and event.get("samples"):
            self._log({"samples": self._table(*sample_rows(event["samples"]))}, step)
        elif kind == "micro_batch_size" and finite_number(event.get("new")) is not None:
            self._log({"micro_batch_size": finite_number(event["new"])}, step)
        elif kind == "alarm" and isinstance(event.get("title"), str):
            fields = ", ".join(t.get("field", "") for t in event.get("try") or [] if isinstance(t, dict))
            row = [event["title"], str(event.get("steps", "")), str(event.get("saw", "")), fields]
            self._log({"alarms": self._table(["alarm", "steps", "saw", "try"], [row])}, step)

    def close(self) -> None:
        if self.run is not None:
            self.module.finish()
            self.run = None
