"""The inspector's line plot: the chosen quantity against token position, linked both
ways to the token text (the inspector connects the signals).

Hovering the plot emits `point_hovered(i)` for the token position under the pointer
(-1 outside the plot); clicking emits `point_clicked(i)`. `mark(i)` and `select(i)` draw
the hovered and the selected position (a vertical line and a dot on each curve), so the
text and the plot show the same token. `set_step_ends` draws a dashed vertical line
after each step's end token of a completion scored step by step, labelled with the
step's score. Coloured by the update's change, `set_series(companion=...)` draws the
advantage dashed on a right axis of its own, both axes centred alike, so where the change
and the push part ways shows at a glance (update_effect.py). `set_tool_spans` shades an
episode's tool replies (light grey, their values null: no curve there).
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QGraphicsItem

from workbench.inspector.colors import DIVERGING_STOPS
from workbench.inspector.episodes import TOOL_SPAN_HEX

SERIES_COLOURS = {"completion": "#37474f", "chosen": "#2e7d32", "rejected": "#b00020"}
COMPANION_COLOUR = "#e65100"  # the quantity drawn beside the coloured one (the advantage), on the right axis
HOVER_COLOUR = "#111111"
SELECT_COLOUR = "#1565c0"
STEP_LINE_COLOUR = "#607d8b"


class IntegerAxis(pg.AxisItem):
    """An axis of whole numbers (token positions, steps): no ticks at 0.5."""

    def tickValues(self, minVal, maxVal, size):
        levels = [(spacing, [v for v in values if float(v).is_integer()])
                  for spacing, values in super().tickValues(minVal, maxVal, size) if spacing >= 1]
        if not levels:
            low, high = math.ceil(minVal), math.floor(maxVal)
            levels = [(1.0, [float(v) for v in range(low, high + 1)])] if high - low < 50 else []
        return levels


class QuantityPlot(pg.PlotWidget):
    point_hovered = Signal(int)
    point_clicked = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent, background="w", axisItems={"bottom": IntegerAxis("bottom")})
        self.setObjectName("inspector-plot")
        item = self.getPlotItem()
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setLabel("bottom", "token position")
        item.setMenuEnabled(False)
        item.hideButtons()
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setCacheMode(QGraphicsItem.DeviceCoordinateCache)
            axis.enableAutoSIPrefix(False)
            axis.setPen(pg.mkPen("#555"))
            axis.setTextPen(pg.mkPen("#333"))
        # About two points a pixel column however long the trajectory (spikes kept).
        item.setDownsampling(auto=True, mode="peak")
        item.setClipToView(True)
        self.item = item
        self.setMinimumHeight(150)
        self.series: list[np.ndarray] = []
        self.curves: list[pg.PlotDataItem] = []
        self.centre_line = pg.InfiniteLine(angle=0, pen=pg.mkPen("#9e9e9e", style=Qt.DashLine))
        self.centre_line.setZValue(-5)
        item.addItem(self.centre_line, ignoreBounds=True)
        # The area between the curve and the centre, by sign (one side shown).
        self.sign_fills = []
        for colour in (DIVERGING_STOPS[-2], DIVERGING_STOPS[1]):
            brush = QColor(colour)
            brush.setAlpha(70)
            fill = pg.PlotDataItem(connect="finite", pen=None, fillBrush=brush)
            fill.setZValue(-4)
            item.addItem(fill)
            self.sign_fills.append(fill)
        self.points = pg.ScatterPlotItem(size=8)
        self.points.setZValue(5)
        item.addItem(self.points)
        self.clip_marks = pg.ScatterPlotItem(symbol="x", size=9, pen=pg.mkPen("#d50000", width=1.5), brush=None)
        self.clip_marks.setZValue(8)
        item.addItem(self.clip_marks)
        self.hover_line = pg.InfiniteLine(angle=90, pen=pg.mkPen(HOVER_COLOUR, width=1))
        self.select_line = pg.InfiniteLine(angle=90, pen=pg.mkPen(SELECT_COLOUR, width=2))
        self.hover_dots = pg.ScatterPlotItem(size=9, pen=pg.mkPen(HOVER_COLOUR, width=1.5), brush=pg.mkBrush("w"))
        self.select_dots = pg.ScatterPlotItem(size=10, pen=pg.mkPen(SELECT_COLOUR, width=2),
                                              brush=pg.mkBrush(SELECT_COLOUR))
        for marker in (self.hover_line, self.select_line):
            marker.setZValue(9)
            marker.hide()
            item.addItem(marker, ignoreBounds=True)
        for dots in (self.hover_dots, self.select_dots):
            dots.setZValue(10)
            item.addItem(dots)
        self.hovered = -1
        self.selected = -1
        self.step_lines: list[pg.InfiniteLine] = []  # shown: the first len(step_ends)
        self.step_ends: list[int] = []
        self.tool_regions: list[pg.LinearRegionItem] = []  # shown: the first len(tool_spans)
        self.tool_spans: list[tuple[int, int]] = []
        self.legend = None
        self._build_companion()
        self.scene().sigMouseMoved.connect(self._mouse_moved)
        self.scene().sigMouseClicked.connect(self._mouse_clicked)

    def _build_companion(self) -> None:
        """A second view on the right axis, x linked to the main one, for a quantity drawn
        beside the coloured one in its own units (the advantage beside the change)."""
        item = self.item
        self.companion_box = pg.ViewBox(enableMenu=False)
        self.companion_box.setMouseEnabled(False, False)
        # Under the main view (which has no background): its mouse events stay the main view's.
        self.companion_box.setZValue(-10)
        item.scene().addItem(self.companion_box)
        axis = item.getAxis("right")
        axis.linkToView(self.companion_box)
        axis.enableAutoSIPrefix(False)
        axis.setPen(pg.mkPen(COMPANION_COLOUR))
        axis.setTextPen(pg.mkPen(COMPANION_COLOUR))
        self.companion_box.setXLink(item)
        self.companion = pg.PlotDataItem(connect="finite", pen=pg.mkPen(COMPANION_COLOUR, width=2, style=Qt.DashLine))
        self.companion_box.addItem(self.companion)
        self.companion_label = ""
        item.hideAxis("right")
        item.getViewBox().sigResized.connect(self._place_companion)

    def _place_companion(self) -> None:
        box = self.item.getViewBox()
        self.companion_box.setGeometry(box.sceneBoundingRect())
        self.companion_box.linkedViewChanged(box, self.companion_box.XAxis)

    def _set_companion(self, companion: tuple[np.ndarray, str, tuple[float, float]] | None) -> None:
        """Draw (values, label, (low, high)) on the right axis, or nothing (None)."""
        if companion is None:
            self.companion.setData([], [])
            self.companion_label = ""
            self.item.hideAxis("right")
            return
        values, label, (low, high) = companion
        y = np.asarray(values, dtype=float)
        self.companion.setData(np.arange(len(y), dtype=float), y)
        self.companion_label = label
        self.item.showAxis("right")
        self.item.setLabel("right", f"{label} (dashed)", color=COMPANION_COLOUR)
        if not (np.isfinite(low) and np.isfinite(high)) or high <= low:
            low, high = low - 1.0 if np.isfinite(low) else -1.0, high + 1.0 if np.isfinite(high) else 1.0
        self.companion_box.setYRange(low, high, padding=0.06)  # the main axis' padding: centres line up
        self._place_companion()

    def _set_legend(self, names: list[str] | None, label: str) -> None:
        """Which curve is which, when there is more than one (the sides, the companion);
        one side's curve is named by its quantity (`label`)."""
        wanted = len(self.series) > 1 or bool(self.companion_label)
        if wanted and self.legend is None:
            # See-through white: readable over a curve (the advantage's dashed line may run along
            # the top), and the points under it still show.
            self.legend = self.item.addLegend(offset=(-10, 10), brush=pg.mkBrush(255, 255, 255, 150),
                                              pen=pg.mkPen("#bbbbbb"), labelTextColor="#333333")
        if self.legend is None:
            return
        self.legend.clear()
        if wanted:
            if len(self.series) == 1:
                names = [label]
            for k in range(len(self.series)):
                self.legend.addItem(self.curves[k], names[k] if names and k < len(names) else f"series {k}")
            if self.companion_label:
                self.legend.addItem(self.companion, f"{self.companion_label} (right axis)")
        self.legend.setVisible(wanted)

    @property
    def length(self) -> int:
        return max((len(s) for s in self.series), default=0)

    def set_series(self, series: list[np.ndarray], label: str, centre: float | None,
                   clipped: list[np.ndarray | None] | None = None, names: list[str] | None = None,
                   y_range: tuple[float, float] | None = None, colours: list[list] | None = None,
                   companion: tuple[np.ndarray, str, tuple[float, float]] | None = None) -> None:
        """One curve per side; `centre` draws a dashed line (diverging quantities) and
        fills towards it (one side: green above, pink below, as the tokens); `clipped`
        marks clipped positions with a red x; `y_range` (the colour scale's ends) fixes
        the y axis, so the plot and the colours read alike and rollouts of a step
        compare at a glance; `colours` (the tokens' backgrounds) colour the points
        when there are few enough to draw; `companion` (values, label, (low, high))
        draws another quantity dashed on a right axis of its own (the advantage beside
        the update's change: where the push landed)."""
        self.series = [np.asarray(s, dtype=float) for s in series]
        single = len(self.series) == 1 and centre is not None
        for fill, sign in zip(self.sign_fills, (1, -1)):
            if single:
                y = self.series[0]
                part = np.where(sign * (y - centre) > 0, y, centre)
                part[~np.isfinite(y)] = np.nan
                fill.setData(np.arange(len(y), dtype=float), part, fillLevel=centre)
                fill.show()
            else:
                fill.setData([], [])
                fill.hide()
        while len(self.curves) < len(self.series):
            curve = pg.PlotDataItem(connect="finite")
            self.item.addItem(curve)
            self.curves.append(curve)
        points_x, points_y, points_pen, points_brush = [], [], [], []
        for k, curve in enumerate(self.curves):
            if k >= len(self.series):
                curve.setData([], [])
                curve.hide()
                continue
            y = self.series[k]
            x = np.arange(len(y), dtype=float)
            name = names[k] if names and k < len(names) else "completion"
            colour = QColor(SERIES_COLOURS.get(name, "#37474f"))
            fill = QColor(colour)
            fill.setAlpha(40)
            filled = centre is not None and not single
            curve.setData(x, y, pen=pg.mkPen(colour, width=1.5),
                          fillLevel=centre if filled else None, fillBrush=fill if filled else None,
                          name=name)
            if len(y) <= 150:  # few enough to see: a dot per token, in the token's colour
                finite = np.isfinite(y)
                brushes = colours[k] if colours and k < len(colours) and len(colours[k]) == len(y) else None
                points_x.append(x[finite])
                points_y.append(y[finite])
                points_pen += [pg.mkPen(colour, width=1)] * int(finite.sum())
                points_brush += [b for b, f in zip(brushes, finite) if f] if brushes is not None \
                    else [pg.mkBrush(colour)] * int(finite.sum())
            curve.show()
        if points_x:
            self.points.setData(np.concatenate(points_x), np.concatenate(points_y), pen=points_pen,
                                brush=points_brush)
        else:
            self.points.setData([], [])
        self._set_companion(companion)
        self._set_legend(names, label)
        if centre is not None:
            self.centre_line.setValue(centre)
            self.centre_line.show()
        else:
            self.centre_line.hide()
        xs, ys = [], []
        for y, marks in zip(self.series, clipped or []):
            if marks is not None:
                where = np.flatnonzero(marks == 1)
                xs.append(where.astype(float))
                ys.append(y[where])
        if xs:
            self.clip_marks.setData(np.concatenate(xs), np.concatenate(ys))
        else:
            self.clip_marks.setData([], [])
        self.item.setLabel("left", label)
        n = self.length
        if y_range is not None and all(np.isfinite(y_range)):
            low, high = y_range
            if high <= low:
                low, high = low - 1.0, high + 1.0
            self.item.disableAutoRange()
            self.item.setXRange(-0.5, max(n - 0.5, 0.5), padding=0.01)
            self.item.setYRange(low, high, padding=0.06)
        else:
            self.item.enableAutoRange()
        self._draw_marker(self.hovered, self.hover_line, self.hover_dots)
        self._draw_marker(self.selected, self.select_line, self.select_dots)

    def set_step_ends(self, marks: list[tuple[int, str]]) -> None:
        """A dashed line between each step's end token and the next token, labelled
        with its score (workbench/inspector/steps.py `plot_marks`); [] removes them."""
        self.step_ends = [end for end, _ in marks]
        while len(self.step_lines) < len(marks):
            line = pg.InfiniteLine(angle=90, pen=pg.mkPen(STEP_LINE_COLOUR, width=1, style=Qt.DashLine),
                                   label="", labelOpts={"position": 0.94, "color": "#37474f",
                                                        "fill": (255, 255, 255, 200), "anchors": [(0, 0), (0, 0)]})
            line.setZValue(-3)
            self.item.addItem(line, ignoreBounds=True)
            self.step_lines.append(line)
        for k, line in enumerate(self.step_lines):
            if k < len(marks):
                end, text = marks[k]
                line.setValue(end + 0.5)
                line.label.setFormat(text)
                line.show()
                line.label.show()
            else:
                line.hide()
                line.label.hide()

    def set_tool_spans(self, spans: list[tuple[int, int]]) -> None:
        """A light grey region under each of an episode's tool spans ((first, last)
        token, inclusive: episodes.tool_spans); [] removes them."""
        self.tool_spans = list(spans)
        while len(self.tool_regions) < len(spans):
            brush = QColor(TOOL_SPAN_HEX)
            brush.setAlpha(60)
            edge = QColor(TOOL_SPAN_HEX)
            edge.setAlpha(120)
            region = pg.LinearRegionItem(movable=False, brush=brush, pen=pg.mkPen(edge, width=1))
            region.setZValue(-6)  # under the fills and the curves
            self.item.addItem(region, ignoreBounds=True)
            self.tool_regions.append(region)
        for k, region in enumerate(self.tool_regions):
            if k < len(spans):
                first, last = spans[k]
                region.setRegion((first - 0.5, last + 0.5))
                region.show()
            else:
                region.hide()

    # ------------------------------------------------------------------ markers

    def _draw_marker(self, i: int, line: pg.InfiniteLine, dots: pg.ScatterPlotItem) -> None:
        if i < 0 or i >= self.length:
            line.hide()
            dots.setData([], [])
            return
        line.setValue(i)
        line.show()
        xs = [float(i) for s in self.series if i < len(s) and np.isfinite(s[i])]
        ys = [float(s[i]) for s in self.series if i < len(s) and np.isfinite(s[i])]
        dots.setData(xs, ys)

    def mark(self, i: int) -> None:
        """Show the hovered position (-1: none); no signal."""
        if i != self.hovered:
            self.hovered = i
            self._draw_marker(i, self.hover_line, self.hover_dots)

    def select(self, i: int) -> None:
        if i != self.selected:
            self.selected = i
            self._draw_marker(i, self.select_line, self.select_dots)

    # ------------------------------------------------------------------- mouse

    def index_at(self, scene_pos) -> int:
        """The token position under a scene point, or -1 outside the plot area."""
        box = self.item.getViewBox()
        if not self.length or not box.sceneBoundingRect().contains(scene_pos):
            return -1
        x = box.mapSceneToView(scene_pos).x()
        return int(min(self.length - 1, max(0, round(x))))

    def _mouse_moved(self, scene_pos) -> None:
        i = self.index_at(scene_pos)
        if i != self.hovered:
            self.mark(i)
            self.point_hovered.emit(i)

    def _mouse_clicked(self, event) -> None:
        if event.button() != Qt.LeftButton:
            return
        i = self.index_at(event.scenePos())
        if i >= 0:
            self.select(i)
            self.point_clicked.emit(i)

    def scene_pos_of(self, i: int):
        """The scene point of position i on the first curve (tests hover there)."""
        y = self.series[0][i] if self.series and i < len(self.series[0]) and np.isfinite(self.series[0][i]) else 0.0
        return self.item.getViewBox().mapViewToScene(pg.Point(float(i), float(y)))

    def leaveEvent(self, event) -> None:
        if self.hovered != -1:
            self.mark(-1)
            self.point_hovered.emit(-1)
        super().leaveEvent(event)
