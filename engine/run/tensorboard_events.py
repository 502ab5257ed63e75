"""A run's events as TensorBoard event files, written with the tensorboard package's own
writer: for `rl-engine export RUN_DIR --tensorboard OUT` (a past run) and for
`training.report_to: tensorboard` (RUN_DIR/tensorboard/, as the events are logged).

    metrics      every number as a scalar under its own name (TRL's: reward, kl, loss,
                 rewards/<name>/mean, ...) at the event's step
    eval         every number as a scalar eval/<name>; its samples as text eval/samples
    samples      a markdown table per step, text `samples`
    run_started  the resolved preset as text `preset` (step 0)
    run_resumed  a SessionLog START at the step after the checkpoint: TensorBoard then
                 drops what a killed engine logged past the checkpoint (resume logs those
                 steps again); a restart (`restarted`: no checkpoint, trained again from
                 step 0) at step 0, and its preset
    micro_batch_size  scalar `micro_batch_size`

The wall time of each TensorBoard event is the run event's `time`. Torch-free.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

INSTALL_HINT = "the tensorboard package is not installed: pip install tensorboard"
LIVE_DIR = "tensorboard"  # RUN_DIR/tensorboard/ with training.report_to: tensorboard


class TensorBoardMissing(RuntimeError):
    """tensorboard is not installed; the message says how to install it."""


def _import_tensorboard():
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.text.summary_v2 import text_pb
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as exc:
        raise TensorBoardMissing(INSTALL_HINT) from exc
    return event_pb2, summary_pb2, text_pb, EventFileWriter


def finite_number(value: Any) -> float | None:
    """A finite int or float as a float; None for anything else (bools, null, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _cell(value: Any) -> str:
    """A value as one markdown table cell: pipes escaped, newlines shown as ⏎."""
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif value is None:
        text = ""
    else:
        text = str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", "").replace("\n", " ⏎ ")


def samples_table(samples: list[dict]) -> str:
    """Samples as a markdown table: a column for each key (in order of appearance), a
    mapping such as `rewards` flattened to rewards/<name>.

    >>> print(samples_table([{"prompt": "a|b", "reward": 0.5, "rewards": {"x": 1.0}}]))
    | prompt | reward | rewards/x |
    |---|---|---|
    | a\\|b | 0.5 | 1 |
    """
    rows = []
    for sample in samples:
        row = {}
        for key, value in (sample.items() if isinstance(sample, dict) else [("value", sample)]):
            if isinstance(value, dict):
                row.update({f"{key}/{k}": v for k, v in value.items()})
            else:
                row[key] = value
        rows.append(row)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


class TensorBoardEvents:
    """Writes run events (the dicts of events.jsonl) into `logdir` as TensorBoard event
    files. TensorBoardMissing when the tensorboard package is not installed."""

    def __init__(self, logdir: str | Path, flush_each: bool = False):
        self._event_pb2, self._summary_pb2, self._text_pb, writer_class = _import_tensorboard()
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._writer = writer_class(str(self.logdir))
        self._flush_each = flush_each
        self.written = 0  # TensorBoard events written (scalars and texts)

    def write(self, event: dict) -> None:
        """One run event; events of other types (checkpoint, run_finished, ...) are skipped."""
        kind, step, wall = event.get("type"), event.get("step"), event.get("time")
        step = step if isinstance(step, int) and not isinstance(step, bool) else 0
        wall = float(wall) if finite_number(wall) is not None else None
        if kind == "metrics":
            self._scalars("", event, step, wall)
        elif kind == "eval":
            self._scalars("eval/", event, step, wall)
            if event.get("samples"):
                self._text("eval/samples", samples_table(event["samples"]), step, wall)
        elif kind == "samples" and event.get("samples"):
            self._text("samples", samples_table(event["samples"]), step, wall)
        elif kind == "micro_batch_size":
            self._scalars("", {"micro_batch_size": event.get("new")}, step, wall)
        elif kind == "run_started" and isinstance(event.get("preset"), dict):
            import yaml

            text = yaml.safe_dump(event["preset"], sort_keys=False, allow_unicode=True)
            self._text("preset", "```yaml\n" + text + "```", 0, wall)
        elif kind == "alarm" and isinstance(event.get("title"), str):
            fields = ", ".join(t.get("field", "") for t in event.get("try") or [] if isinstance(t, dict))
            self._text("alarms", f"**{event['title']}** (steps {event.get('steps')}): {event.get('saw', '')}. "
                       f"{event.get('why', '')} Try: {fields}", step, wall)
        elif kind == "run_resumed":
            # From the step after the checkpoint; a restart (no checkpoint) from step 0,
            # whose evaluation it logs again, with its preset.
            restarted = bool(event.get("restarted"))
            log_pb = self._event_pb2.SessionLog(status=self._event_pb2.SessionLog.START)
            self._emit(self._event_pb2.Event(step=0 if restarted else step + 1, session_log=log_pb), wall)
            if restarted and isinstance(event.get("preset"), dict):
                import yaml

                text = yaml.safe_dump(event["preset"], sort_keys=False, allow_unicode=True)
                self._text("preset", "```yaml\n" + text + "```", 0, wall)
        else:
            return
        if self._flush_each:
            self._writer.flush()

    _SKIP = frozenset({"type", "time", "step", "samples"})

    def _scalars(self, prefix: str, fields: dict, step: int, wall: float | None) -> None:
        values = [(prefix + key, finite_number(value)) for key, value in fields.items() if key not in self._SKIP]
        values = [self._summary_pb2.Summary.Value(tag=tag, simple_value=v) for tag, v in values if v is not None]
        if values:
            self._emit(self._event_pb2.Event(step=step, summary=self._summary_pb2.Summary(value=values)), wall)

    def _text(self, tag: str, markdown: str, step: int, wall: float | None) -> None:
        self._emit(self._event_pb2.Event(step=step, summary=self._text_pb(tag, markdown)), wall)

    def _emit(self, event, wall: float | None) -> None:
        if wall is not None:
            event.wall_time = wall
        self._writer.add_event(event)
        self.written += 1

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
