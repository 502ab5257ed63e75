"""Where a run's events go besides events.jsonl, as they are logged
(`training.report_to`): TensorBoard files in RUN_DIR/tensorboard/
(engine/run/tensorboard_events.py), or a wandb or trackio run (engine/run/trackers.py).

events.jsonl stays the record: each event is written there first, then to the
reporter, and a fault in the reporter is logged once and ends only the reporting,
never the run. Torch-free.
"""

from __future__ import annotations

import logging
from pathlib import Path

from engine.run.tensorboard_events import LIVE_DIR, TensorBoardEvents, TensorBoardMissing
from engine.run.trackers import TrackerMissing, TrackerRun

log = logging.getLogger(__name__)


class TeeEventWriter:
    """An EventWriter whose events also go to a reporter (anything with write(event),
    close()): emit() writes events.jsonl first, then the reporter."""

    def __init__(self, events, reporter, label: str):
        self.events = events
        self.reporter = reporter
        self.label = label

    def __getattr__(self, name):  # path, dropped, ...: the wrapped writer's
        if name == "events":
            raise AttributeError(name)
        return getattr(self.events, name)

    def emit(self, type: str, step: int | None = None, **fields) -> dict:
        event = self.events.emit(type, step, **fields)
        if self.reporter is not None:
            try:
                self.reporter.write(event)
            except Exception:  # noqa: BLE001 (the run goes on; the log says why the reporting stops)
                log.warning("reporting to %s failed; nothing more is sent there", self.label, exc_info=True)
                self._close_reporter()
        return event

    def _close_reporter(self) -> None:
        reporter, self.reporter = self.reporter, None
        if reporter is not None:
            try:
                reporter.close()
            except Exception:  # noqa: BLE001
                log.warning("closing the %s reporter failed", self.label, exc_info=True)

    def close(self) -> None:
        try:
            self._close_reporter()
        finally:
            self.events.close()


def missing_reporter(report_to: str) -> str | None:
    """Why `report_to` cannot report here (its package is not installed), without
    importing it; None when it can. For the set-up form, before Run.

    >>> missing_reporter("none") is None
    True
    """
    import importlib.util

    if report_to == "none" or importlib.util.find_spec(report_to) is not None:  # each is its package's name
        return None
    return f"the {report_to} package is not installed: pip install {report_to} (or set report_to: none)"


def tee_for(events, run_dir: str | Path, report_to: str):
    """`events` wrapped to also report to `report_to` (training.report_to: tensorboard,
    wandb or trackio); `events` itself for `none`. A reporter whose package is missing
    is refused naming the field and the install line (TensorBoardMissing, TrackerMissing)."""
    if report_to == "none":
        return events
    try:
        if report_to == "tensorboard":
            reporter = TensorBoardEvents(Path(run_dir) / LIVE_DIR, flush_each=True)
        else:
            reporter = TrackerRun(report_to, run_dir)
    except (TensorBoardMissing, TrackerMissing) as exc:
        events.close()
        raise type(exc)(f"training.report_to: {report_to}: {exc} (or set report_to: none)") from None
    return TeeEventWriter(events, reporter, report_to)
