"""Alarm markers on the dashboard's plots: a vertical line at the step where an alarm's
evidence began, in the alarm's colour, with its title as a short label. Hovering the
line (or its label) highlights it and shows the title in the plot's readout, clicking
it selects the alarm in the Alarms panel; the tooltip has what it saw.

Which plot gets a marker: those that draw the alarm's metric (an evaluation's metric
is written `eval/<key>`), else the first plot (the label then names the metric), so no
alarm goes unmarked. The dashboard places them (`place_markers`) whenever the alarms,
the plots or the x axis change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from pyqtgraph.graphicsItems.InfiniteLine import InfLineLabel

from workbench.alarms.model import Alarm
from workbench.dashboard.plotspec import EVAL, METRICS, CurveSpec, PlotSpec
from workbench.runs.rundata import RunData

LABEL_CHARS = 28  # a longer title is cut on the plot (the tooltip and readout have it whole)
DASHES = [Qt.SolidLine, Qt.DashLine, Qt.DotLine, Qt.DashDotLine, Qt.DashDotDotLine]


@dataclass
class Mark:
    """One marker to draw: where, which alarm, of which run, the label."""

    x: float
    alarm: Alarm
    run: int
    label: str
    tooltip: str


def metric_curve(metric: str) -> tuple[str, str]:
    """(source, name) of an alarm's metric: `eval/accuracy` is the evaluations' accuracy.

    >>> metric_curve("eval/accuracy"), metric_curve("kl")
    (('eval', 'accuracy'), ('metrics', 'kl'))
    """
    return (EVAL, metric.removeprefix("eval/")) if metric.startswith("eval/") else (METRICS, metric)


def plots_showing(entries: list[tuple[PlotSpec, list[CurveSpec]]], metric: str) -> list[str]:
    """The keys of the plots that draw `metric` (its mean, or its ± band)."""
    source, name = metric_curve(metric)
    return [spec.key for spec, curves in entries
            if any(c.source == source and (c.metric == name or c.std == name) for c in curves)]


def alarm_x(run: RunData, alarm: Alarm, mode: str) -> float | None:
    """Where the marker of `alarm` goes on an x axis of steps ("step") or of seconds
    since the run began ("time": when the step `began` was logged)."""
    if mode == "step":
        return float(alarm.began)
    start = run.first_time if run.first_time is not None else 0.0
    table = run.metrics
    if table.size:
        i = int(np.searchsorted(table.steps, alarm.began))
        if i < table.size:
            return float(table.times[i] - start)
    time = alarm.event.get("time")
    return float(time - start) if isinstance(time, (int, float)) and math.isfinite(time) else None


def short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def mark_for(run: RunData, r: int, alarm: Alarm, mode: str, compare: bool, on_own_plot: bool) -> Mark | None:
    x = alarm_x(run, alarm, mode)
    if x is None:
        return None
    label = alarm.title if on_own_plot or not alarm.metric else f"{alarm.title} ({alarm.metric})"
    label = f"{run.name}: {label}" if compare else label
    tooltip = f"{label}\nstep {alarm.step}, evidence from {alarm.steps_text}" + (f"\n{alarm.saw}" if alarm.saw else "")
    return Mark(x, alarm, r, short(label), tooltip)


class _MarkerLabel(InfLineLabel):
    """The label: a click or hover on it is one on its line."""

    def mouseClickEvent(self, ev) -> None:
        self.line.mouseClickEvent(ev)

    def hoverEvent(self, ev) -> None:
        self.line.hoverEvent(ev)


class AlarmMarker(pg.InfiniteLine):
    """One alarm's line on one plot. `sigClicked(marker, event)` on a left click."""

    def __init__(self, mark: Mark, position: float = 0.92):
        colour = QColor(mark.alarm.colour)
        pen = pg.mkPen(colour, width=1.5, style=DASHES[mark.run % len(DASHES)])
        pen.setCosmetic(True)
        # The hover pen is wide: the line's hit area follows the wider of the two pens.
        super().__init__(pos=mark.x, angle=90, movable=False, pen=pen, hoverPen=pg.mkPen(colour, width=5))
        self.mark = mark
        self.setAcceptHoverEvents(True)  # movable=False turns hovering off
        self.setZValue(20)
        self.label = _MarkerLabel(self, text=mark.label, position=position, color=colour,
                                  fill=pg.mkBrush(255, 255, 255, 215), anchors=[(0, 0.5), (0, 0.5)])
        self.label.setAcceptHoverEvents(True)
        self.label.setZValue(21)
        self.setToolTip(mark.tooltip)
        self.label.setToolTip(mark.tooltip)

    @property
    def alarm(self) -> Alarm:
        return self.mark.alarm

    def mouseClickEvent(self, ev) -> None:
        if ev.button() == Qt.LeftButton:
            ev.accept()
            self.sigClicked.emit(self, ev)

    def hoverEvent(self, ev) -> None:
        self.setMouseHover(not ev.isExit())
