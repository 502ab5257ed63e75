"""One dashboard plot (`MetricPlot`): its curves for one run or several, the ± bands,
the hover readout, the x axis and the alarm markers (workbench/dashboard/markers.py);
the run colours and line styles shared with the view.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPainterPath, QTextOption
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsItem,
    QGraphicsPathItem,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from workbench.dashboard.info_mark import InfoMark, help_tooltip
from workbench.dashboard.markers import AlarmMarker, Mark
from workbench.dashboard.plotspec import EVAL, CurveSpec, PlotSpec, plot_help
from workbench.dashboard.smoothing import SmoothedSeries
from workbench.runs.labels import shown_labels
from workbench.runs.metric_table import MetricTable
from workbench.runs.rundata import RunData

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f"]
DASHES = [Qt.SolidLine, Qt.DashLine, Qt.DotLine, Qt.DashDotLine, Qt.DashDotDotLine]
STEP, TIME = "step", "time"
COLUMNS = 3
BAND_POINTS = 600
PLOT_HEIGHT = 270
SHORT_SERIES = 12  # a curve with at most this many points also gets a marker per point
BAND_ALPHA, COMPARE_BAND_ALPHA = 45, 28

pg.setConfigOptions(antialias=False, background="w", foreground="#333")


def run_colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _same_table(a: MetricTable, b: MetricTable) -> bool:
    if a.size != b.size or sorted(a.names()) != sorted(b.names()) or not np.array_equal(a.steps, b.steps):
        return False
    return all(np.array_equal(a.column(n), b.column(n), equal_nan=True) for n in a.names())


def identical_runs(runs: list[RunData]) -> dict[int, int]:
    """{run: the earlier run it is identical to} for runs whose every metric and
    evaluation value equals an earlier run's (their curves coincide)."""
    out: dict[int, int] = {}
    for r, run in enumerate(runs):
        if not run.metrics.size:
            continue
        for t in range(r):
            if t not in out and _same_table(run.metrics, runs[t].metrics) and _same_table(run.evals, runs[t].evals):
                out[r] = t
                break
    return out


class ElapsedAxis(pg.AxisItem):
    """Seconds since the run started, written as m:ss or h:mm:ss."""

    def tickStrings(self, values, scale, spacing):
        out = []
        for value in values:
            seconds = int(round(value * scale))
            sign = "-" if seconds < 0 else ""
            seconds = abs(seconds)
            h, rest = divmod(seconds, 3600)
            m, s = divmod(rest, 60)
            out.append(f"{sign}{h}:{m:02d}:{s:02d}" if h else f"{sign}{m}:{s:02d}")
        return out


class BandItem(QGraphicsPathItem):
    """The mean ± std band: one filled polygon (lower edge out, upper edge back), built
    with pyqtgraph's vectorised path maker. (pg.FillBetweenItem rebuilds its polygon
    from two curve paths on every change, several times slower.)"""

    def __init__(self, colour: QColor, edge: QColor | None = None):
        super().__init__()
        self.setBrush(colour)
        self.setPen(pg.mkPen(None))
        # The upper and lower edges as thin lines (a comparison: overlapping fills alone
        # blend into one colour, the edges keep each run's band apart).
        self.edges: QGraphicsPathItem | None = None
        if edge is not None:
            self.edges = QGraphicsPathItem(self)
            pen = pg.mkPen(edge, width=1, style=Qt.DashLine)
            pen.setCosmetic(True)
            self.edges.setPen(pen)

    def set_band(self, x: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
        if len(x) < 2:
            self.setPath(QPainterPath())
            if self.edges is not None:
                self.edges.setPath(QPainterPath())
            return
        xs = np.concatenate([x, x[::-1]])
        ys = np.concatenate([low, high[::-1]])
        path = pg.arrayToQPath(xs, ys, connect="all")
        path.closeSubpath()
        self.setPath(path)
        if self.edges is not None:
            connect = np.ones(len(xs), dtype=np.int32)
            connect[len(x) - 1] = 0  # no segment from the lower edge's end to the upper's
            self.edges.setPath(pg.arrayToQPath(xs, ys, connect=connect))


@dataclass
class CurveItems:
    run: int
    spec: CurveSpec
    line: pg.PlotDataItem
    smooth: SmoothedSeries
    band: tuple | None = None  # (BandItem, SmoothedSeries of the std)
    twin: int | None = None  # an earlier run whose curve is identical (drawn over each other)


def _table(run: RunData, source: str) -> MetricTable:
    return run.evals if source == EVAL else run.metrics


def _x(run: RunData, table: MetricTable, mode: str) -> np.ndarray:
    if mode == TIME:
        start = run.first_time if run.first_time is not None else 0.0
        return table.times - start
    return table.steps


class PlotWidget(pg.PlotWidget):
    """A dashboard plot's canvas. The wheel belongs to the page: a user scrolling down the
    dashboard must not zoom every plot the pointer passes over. Ctrl+wheel zooms."""

    def wheelEvent(self, event) -> None:
        if event.modifiers() & Qt.ControlModifier:
            super().wheelEvent(event)
        else:
            event.ignore()  # on to the scroll area around the plots


class MetricPlot(QFrame):
    """One plot: its curves (per run), a hover readout of exact values, a note when a
    metric is logged but has no values."""

    def __init__(self, spec: PlotSpec, curves: list[CurveSpec], runs: list[RunData], x_mode: str, parent=None,
                 header: QWidget | None = None):
        super().__init__(parent)
        self.spec = spec
        self.runs = runs
        self.x_mode = x_mode
        self.stale = True
        self.setObjectName(f"plot:{spec.key}")
        self.setFrameShape(QFrame.StyledPanel)
        axis = {"bottom": ElapsedAxis("bottom")} if x_mode == TIME else {}
        self.widget = PlotWidget(axisItems=axis)
        self.setFixedHeight(PLOT_HEIGHT)
        self.item = self.widget.getPlotItem()
        self.item.showGrid(x=True, y=True, alpha=0.15)
        # On the plot, not the curves: PlotItem.addItem imposes its own settings on
        # each curve. Peak downsampling draws ~2 points a pixel column whatever the
        # length of the run, keeping spikes visible.
        self.item.setDownsampling(auto=True, mode="peak")
        self.item.setClipToView(True)
        # Ranges are kept by `_keep_in_view` (they only move when the data leaves them),
        # and the axes are cached as pixmaps: with unchanged ranges a redraw repaints the
        # curves only. Redrawing axis text on every update is what made live plots slow.
        self.item.disableAutoRange()
        for name in ("left", "bottom"):
            self.item.getAxis(name).setCacheMode(QGraphicsItem.DeviceCoordinateCache)
        self.auto_y = True
        self.item.getViewBox().sigRangeChangedManually.connect(self._range_changed_by_user)
        self.x_extent: tuple[float, float] | None = None  # set by the dashboard (shared by all plots)
        self.x_leader = False
        self.item.setLabel("bottom", "wall time (h:mm:ss)" if x_mode == TIME else "step")
        if spec.unit:
            self.item.setLabel("left", units=None, text=spec.unit)
        self.item.getAxis("left").enableAutoSIPrefix(False)  # 0.3 nats, not "300 (x0.001)"
        self.item.setMenuEnabled(True)
        self.help = plot_help(spec, curves)
        self.title = QLabel(f"<b>{html.escape(spec.title)}</b>")
        tip = help_tooltip(self.help) if self.help else ""
        self.title.setToolTip(tip)
        self.info = InfoMark(tip) if tip else None  # drawn: the ⓘ character is a box in stock fonts
        self.readout = QLabel()
        self.readout.setObjectName("readout")
        self.readout.setTextFormat(Qt.RichText)
        self.readout.setWordWrap(True)
        self.readout.setMinimumHeight(18)
        self.readout.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        top = QHBoxLayout()
        top.addWidget(header or self.title)
        if self.info is not None:
            top.addWidget(self.info)
        top.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(self.widget, 1)
        layout.addWidget(self.readout)
        self.note = pg.TextItem("", color="#888", anchor=(0.5, 0.5))
        # A long note (the KL plot's "beta = 0 ...") wraps within the plot, centred.
        self.note.textItem.document().setDefaultTextOption(QTextOption(Qt.AlignHCenter))
        self.note.setZValue(10)
        self.item.addItem(self.note, ignoreBounds=True)
        self.note.hide()
        self.item.getViewBox().sigRangeChanged.connect(self._place_note)  # it stays in the middle
        self.cursor = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#999", width=1, style=Qt.DashLine))
        self.item.addItem(self.cursor, ignoreBounds=True)
        self.cursor.hide()
        self.curves: list[CurveItems] = []
        self.markers: list[AlarmMarker] = []
        self._build(curves)
        self._legend = self._legend_html()
        self.readout.setText(self._legend)
        self.readout.setToolTip(self.title.toolTip())  # the curves' legend: what each means
        self._hover = pg.SignalProxy(self.widget.scene().sigMouseMoved, rateLimit=30, slot=self._mouse_moved)

    # ------------------------------------------------------------------ curves

    def _build(self, curves: list[CurveSpec]) -> None:
        compare = len(self.runs) > 1
        for r, run in enumerate(self.runs):
            for c, curve in enumerate(curves):
                # one metric drawn in training and held out keeps one colour (the held-out one has markers)
                same = next(i for i, other in enumerate(curves) if other.metric == curve.metric)
                colour = run_colour(r) if compare else run_colour(same)
                style = DASHES[c % len(DASHES)] if compare else Qt.SolidLine
                width = 2 if c == 0 else 1.3
                pen = pg.mkPen(colour, width=width, style=style)
                symbol = "o" if curve.source == EVAL else None
                line = pg.PlotDataItem(pen=pen, symbol=symbol, symbolSize=7, symbolBrush=colour, symbolPen=None,
                                       connect="finite", name=curve.label)
                # ~1.5 samples a pixel (pyqtgraph's default is 5): with peak mode the
                # extremes survive, and a 10,000-step curve draws ~1,000 segments.
                line.opts["autoDownsampleFactor"] = 1.5
                band = None
                if curve.std:
                    fill_colour = QColor(colour)
                    fill_colour.setAlpha(COMPARE_BAND_ALPHA if compare else BAND_ALPHA)
                    fill = BandItem(fill_colour, QColor(colour) if compare else None)
                    self.item.addItem(fill, ignoreBounds=True)
                    band = (fill, SmoothedSeries())
                self.item.addItem(line)
                self.curves.append(CurveItems(r, curve, line, SmoothedSeries(), band))

    def _legend_html(self) -> str:
        """Which line is which: colours for one run; line styles when comparing (the
        colours are the runs', shown above the plots), and which runs' curves are
        identical (one hides the other)."""
        compare = len(self.runs) > 1
        glyphs = ["━━", "╍╍", "┅┅", "━·", "━··"]
        parts = []
        for c, item in enumerate(i for i in self.curves if i.run == 0):
            colour = "#444" if compare else item.line.opts["pen"].color().name()
            glyph = glyphs[c % len(glyphs)] if compare else "━━"
            parts.append(f"<span style='color:{colour}'>{glyph} {html.escape(item.spec.label)}</span>")
        text = "&nbsp;&nbsp;".join(parts)
        twins = self.identical()
        if twins:
            names = shown_labels(self.runs)
            text += "<br>" + "&nbsp; ".join(
                f"<span style='color:{run_colour(r)}'>{html.escape(names[r])}</span> = "
                f"<span style='color:{run_colour(t)}'>{html.escape(names[t])}</span>"
                f"{f' ({html.escape(label)})' if label else ''}: identical, drawn over each other"
                for (r, t, label) in twins)
        return text

    def identical(self) -> list[tuple[int, int, str]]:
        """(run, earlier run, curve label or "" for all) for each curve identical to an
        earlier run's, as of the last update_data."""
        out = []
        by_run: dict[tuple[int, int], list[CurveItems]] = {}
        for item in self.curves:
            if item.twin is not None:
                by_run.setdefault((item.run, item.twin), []).append(item)
        for (r, t), items in by_run.items():
            every = len(items) == sum(1 for i in self.curves if i.run == r)
            out.extend([(r, t, "")] if every else [(r, t, i.spec.label) for i in items])
        return out

    user_zoomed = Signal()
    alarm_clicked = Signal(object)  # the Alarm of a marker clicked

    # ----------------------------------------------------------------- alarms

    def set_marks(self, marks: list[Mark]) -> None:
        """Draw these alarm markers (replacing those drawn). Labels of markers near
        each other are staggered down the plot so they do not cover each other."""
        for marker in self.markers:
            self.item.removeItem(marker)
        self.markers = []
        for k, mark in enumerate(sorted(marks, key=lambda m: m.x)):
            marker = AlarmMarker(mark, position=0.92 - 0.14 * (k % 5))
            marker.sigClicked.connect(self._marker_clicked)
            self.item.addItem(marker, ignoreBounds=True)
            self.markers.append(marker)

    def _marker_clicked(self, marker: AlarmMarker, _event=None) -> None:
        self.readout.setText(self._marker_html([marker]))
        self.alarm_clicked.emit(marker.alarm)

    def markers_near(self, scene_x: float, pixels: float = 6.0) -> list[AlarmMarker]:
        """The markers within `pixels` of a scene x position (what the mouse is over)."""
        box = self.item.getViewBox()
        out = []
        for marker in self.markers:
            x = box.mapViewToScene(pg.Point(marker.value(), 0)).x()
            if abs(x - scene_x) <= pixels:
                out.append(marker)
        return out

    @staticmethod
    def _marker_html(markers: list[AlarmMarker]) -> str:
        return "&nbsp; ".join(f"<span style='color:{m.alarm.colour}'><b>⚠ {html.escape(m.mark.tooltip.splitlines()[0])}"
                              f"</b> ({html.escape(m.alarm.steps_text)})</span>" for m in markers)

    def update_data(self, smoothing: float) -> None:
        any_values = False
        low_y, high_y = math.inf, -math.inf
        twins_before = [i.twin for i in self.curves]
        drawn: dict[tuple, list[tuple[int, np.ndarray, np.ndarray]]] = {}
        for item in self.curves:
            run = self.runs[item.run]
            table = _table(run, item.spec.source)
            x = _x(run, table, self.x_mode)
            raw = table.column(item.spec.metric)
            # Eval points are few and already averages: drawn as they are.
            weight = 0.0 if item.spec.source == EVAL else smoothing
            y = item.smooth.update(raw, weight)
            finite = np.isfinite(y)
            count = int(finite.sum())
            any_values = any_values or count > 0
            item.twin = None
            if len(self.runs) > 1 and count:
                key = (item.spec.source, item.spec.metric)
                for other, ox, oraw in drawn.get(key, []):
                    if len(ox) == len(x) and np.array_equal(ox, x) and np.array_equal(oraw, raw, equal_nan=True):
                        item.twin = other
                        break
                drawn.setdefault(key, []).append((item.run, x, raw))
            # A single point has no line to draw: short curves get a marker per point.
            symbol = "o" if item.spec.source == EVAL or 0 < count <= SHORT_SERIES else None
            if item.line.opts["symbol"] != symbol:
                item.line.setSymbol(symbol)
            if count:
                item.line.setData(x, y)
                low_y, high_y = min(low_y, float(np.nanmin(y))), max(high_y, float(np.nanmax(y)))
            else:
                item.line.setData([], [])
            if item.band is not None:
                fill, smooth_std = item.band
                std = smooth_std.update(table.column(item.spec.std), weight)
                rows = np.flatnonzero(finite & np.isfinite(std))
                # The band is a soft shape: a few hundred points draw it, and the
                # fill is not built from 10,000 (nor across gaps, which it cannot do).
                if len(rows) > BAND_POINTS:
                    rows = rows[:: math.ceil(len(rows) / BAND_POINTS)]
                fill.set_band(x[rows], (y - std)[rows], (y + std)[rows])
                if len(rows):
                    low_y = min(low_y, float(np.min((y - std)[rows])))
                    high_y = max(high_y, float(np.max((y + std)[rows])))
        if [i.twin for i in self.curves] != twins_before:
            self._legend = self._legend_html()
            if not self.cursor.isVisible():
                self.readout.setText(self._legend)
        if any_values:
            self.note.hide()
            self._keep_in_view(low_y, high_y)
        else:
            logged = any(table.size for table in (_table(self.runs[i.run], i.spec.source) for i in self.curves))
            self.note.setText(self.spec.note_when_empty if logged else "waiting for data…")
            self.note.show()
            self._place_note()
        self.stale = False

    def _place_note(self, *_args) -> None:
        """The note in the middle of the plot, wrapped to its width (a note wider than the
        plot was cut at both ends)."""
        if not self.note.isVisible():
            return
        box = self.item.getViewBox()
        width = box.width() - 16
        if width > 40 and self.note.textItem.textWidth() != width:
            self.note.setTextWidth(width)
        (x0, x1), (y0, y1) = box.viewRange()
        self.note.setPos((x0 + x1) / 2, (y0 + y1) / 2)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._place_note()

    # ------------------------------------------------------------------ hover

    def _mouse_moved(self, event) -> None:
        pos = event[0]
        box = self.item.getViewBox()
        if not self.item.sceneBoundingRect().contains(pos):
            self.cursor.hide()
            self.readout.setText(self._legend)
            return
        x = box.mapSceneToView(pos).x()
        near = self.markers_near(pos.x())
        # Over a marker: its alarm's title first, then the values there.
        self.readout.setText((self._marker_html(near) + "<br>" if near else "") + self.readout_at(x))
        self.cursor.setPos(x)
        self.cursor.show()

    def readout_at(self, x: float) -> str:
        """The exact (unsmoothed) values of every curve at the point nearest to x."""
        parts = []
        names = shown_labels(self.runs) if len(self.runs) > 1 else []
        for item in self.curves:
            run = self.runs[item.run]
            table = _table(run, item.spec.source)
            xs = _x(run, table, self.x_mode)
            if not table.size:
                continue
            i = int(np.clip(np.searchsorted(xs, x), 0, table.size - 1))
            if i > 0 and abs(xs[i - 1] - x) < abs(xs[i] - x):
                i -= 1
            value = table.column(item.spec.metric)[i]
            text = "null" if not math.isfinite(value) else f"{value:.5g}"
            if item.spec.std:
                std = table.column(item.spec.std)[i]
                if math.isfinite(std):
                    text += f" ± {std:.3g}"
            colour = item.line.opts["pen"].color().name()
            where = f"step {int(table.steps[i])}" if self.x_mode == STEP else f"{xs[i]:.0f} s"
            prefix = f"{html.escape(names[item.run])} " if names else ""
            if item.twin is not None:
                text += f" (= {html.escape(names[item.twin])})"
            parts.append(f"<span style='color:{colour}'>{prefix}{html.escape(item.spec.label)}</span> = <b>{text}</b> "
                         f"<span style='color:#888'>({where})</span>")
        return "&nbsp; ".join(parts)

    def _keep_in_view(self, low: float, high: float) -> None:
        """Move the view only when the data leaves it (or fills under a third of it):
        an unchanged range means the cached axes are reused."""
        box = self.item.getViewBox()
        (x0, x1), (y0, y1) = box.viewRange()
        if self.auto_y and math.isfinite(low):
            span = high - low
            if span < 1e-9 * max(abs(high), abs(low)):
                span = 0.0  # a constant, up to the smoothing's rounding: not a range of 1e-15
            if low < y0 or high > y1 or span < (y1 - y0) / 3 or self._fit_y:
                self._fit_y = False
                pad = 0.08 * span if span > 0 else max(abs(high) * 0.1, 1e-3)
                box.setYRange(low - pad, high + pad, padding=0)
        # Only the first plot sets x; the others are linked to it.
        if self.x_extent is not None and self.x_leader and \
                not (math.isclose(x0, self.x_extent[0], abs_tol=1e-9) and math.isclose(x1, self.x_extent[1], rel_tol=1e-9)):
            box.setXRange(*self.x_extent, padding=0)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        # A plot just built (or scrolled to) is laid out only now: draw it once it is.
        parent = self.parent()
        while parent is not None and not hasattr(parent, "_draw_visible"):  # the Dashboard
            parent = parent.parent()
        if parent is not None and self.stale:
            QTimer.singleShot(0, parent, parent._draw_visible)

    def _range_changed_by_user(self, *_args) -> None:
        self.auto_y = False
        self.user_zoomed.emit()

    _fit_y = False  # Reset view: the next update fits y to the data, whatever the range was

    def reset_view(self) -> None:
        self.auto_y = True
        self._fit_y = True
        self.stale = True
