"""The live dashboard: one pyqtgraph plot per kind of metric the run logs.

Plots and curves are created once (when the set of metrics changes) and then only fed
new arrays: `refresh()` (run whenever a run on show announces new events through
RunData.updated) takes each curve's column from the run's MetricTable, smooths
the part that is new, and hands it to the existing curve. Plots scrolled out of view
or on a hidden tab are marked stale and redrawn when they are shown, so a dashboard
with 10,000-step runs keeps the event loop free.

With several runs (a comparison) each run has its own colour and each metric of a plot
its own line style; ± bands are drawn faint with their edges outlined in the run's colour
(two filled bands would blend into one muddy colour), and a run whose curve is identical
to another's (so hidden under it) is named in the legend ("B = A"). A curve of a few
points is drawn with markers: a single point has no line to show.

Each alarm of a run on show gets a marker line where its evidence began, on the plot of
its metric (workbench/dashboard/markers.py); in a comparison every run's alarms are
drawn, labelled with the run's name and in the run's line style.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from workbench.dashboard.curves import (
    COLUMNS, SHORT_SERIES, STEP, TIME, MetricPlot, identical_runs, run_colour,
)
from workbench.alarms.model import alarm_from_event
from workbench.dashboard.markers import mark_for, plots_showing
from workbench.dashboard.plotspec import EVAL, METRICS, CurveSpec, PlotSpec, choose_plots, expected_names
from workbench.run_declaration import declaration_of
from workbench.runs.labels import shown_labels
from workbench.runs.rundata import RunData


OTHER_HELP = ("Any metric the run logged that no plot above draws (its bookkeeping, a reward's std, a "
              "custom reward's extra numbers): choose it in the list. Held-out ones are named eval:<name>.")


class Dashboard(QWidget):
    """Controls (smoothing, x axis, reset view) over a grid of plots for one run or an
    overlay of several."""

    layout_changed = Signal()
    alarm_clicked = Signal(object)  # the Alarm of a marker clicked on a plot

    def __init__(self, smoothing: float = 0.6, parent=None):
        super().__init__(parent)
        self.runs: list[RunData] = []
        self.plots: list[MetricPlot] = []
        self.x_mode = STEP
        self._layout_key: tuple = ()
        self._other_metric = ""
        self.auto_x = True  # off once the user zooms or pans; Reset view turns it back on
        self._slice_pending = False
        self._entries: list = []  # (PlotSpec, curves) of each plot, in order
        self._marks_key: tuple | None = None

        self.smoothing = QSlider(Qt.Horizontal)
        self.smoothing.setObjectName("smoothing")
        self.smoothing.setRange(0, 99)
        self.smoothing.setValue(int(round(smoothing * 100)))
        self.smoothing.setFixedWidth(160)
        self.smoothing.setToolTip("Exponential moving average of the curves (the hover readout shows exact values)")
        self.smoothing_label = QLabel()
        self.x_axis = QComboBox()
        self.x_axis.setObjectName("x-axis")
        self.x_axis.addItem("x: step", STEP)
        self.x_axis.addItem("x: wall time", TIME)
        self.reset = QPushButton("Reset view")
        self.reset.setToolTip("Zoom back out to all the data (drag to pan, Ctrl+wheel to zoom, right-drag to stretch; "
                              "the wheel alone scrolls the page)")
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.RichText)
        self.legend.setObjectName("run-legend")
        self.legend.setWordWrap(True)  # several long run names wrap rather than run off the edge
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Smoothing"))
        controls.addWidget(self.smoothing)
        controls.addWidget(self.smoothing_label)
        controls.addSpacing(16)
        controls.addWidget(self.x_axis)
        controls.addWidget(self.reset)
        controls.addSpacing(16)
        controls.addWidget(self.legend, 1)

        self.grid = QGridLayout()
        self.grid.setSpacing(6)
        inner = QWidget()
        inner.setLayout(self.grid)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setWidget(inner)
        self.scroll.setFrameShape(QFrame.NoFrame)
        # A scroll bar that appears once the plots are in would resize (and repaint)
        # every plot a second time.
        self.scroll.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOn)
        self.placeholder = QLabel("No run open. Press Run, or open a run from the Runs tab.")
        self.placeholder.setAlignment(Qt.AlignCenter)
        self.placeholder.setStyleSheet("color:#888; font-size:14px;")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(controls)
        layout.addWidget(self.placeholder, 1)
        layout.addWidget(self.scroll, 10)
        self.scroll.hide()

        self.smoothing.valueChanged.connect(self._smoothing_changed)
        self.x_axis.currentIndexChanged.connect(self._x_changed)
        self.reset.clicked.connect(self.reset_view)
        self.scroll.verticalScrollBar().valueChanged.connect(lambda _v: self._draw_visible())
        self._smoothing_changed()

    # ------------------------------------------------------------------ state

    @property
    def smoothing_weight(self) -> float:
        return self.smoothing.value() / 100.0

    def set_runs(self, runs: list[RunData]) -> None:
        """Show these runs; the dashboard then follows them (their `updated` signal)."""
        for run in self.runs:
            run.updated.disconnect(self._run_updated)
        self.runs = list(runs)
        for run in self.runs:
            run.updated.connect(self._run_updated)
        self._layout_key = ()
        self._marks_key = None
        self.placeholder.setVisible(not self.runs)
        self.scroll.setVisible(bool(self.runs))
        self._legend_key = None
        self._update_legend()
        self.refresh()

    def _run_updated(self, _update) -> None:
        self.refresh()

    def _update_legend(self) -> None:
        """The runs' colours (a comparison), with "= A" after a run identical to run A."""
        if len(self.runs) < 2:
            self.legend.setText("")
            self.legend.setToolTip("")
            return
        key = tuple((r.metrics.size, r.evals.size) for r in self.runs)
        if key == getattr(self, "_legend_key", None):
            return
        self._legend_key = key
        twins = identical_runs(self.runs)
        names = shown_labels(self.runs)  # each run's preset and what differs (runs/labels.py)
        parts = []
        for i, run in enumerate(self.runs):
            same = (f" <span style='color:#5f6368'>(= {html.escape(names[twins[i]])}: identical "
                    "curves, drawn over each other)</span>" if i in twins else "")
            parts.append(f"<span style='color:{run_colour(i)}'>━━ <b>{html.escape(names[i])}</b></span>{same}")
        self.legend.setText("&nbsp;&nbsp;".join(parts))
        self.legend.setToolTip("\n".join([f"{names[i]}: {run.name}" for i, run in enumerate(self.runs)] + [
            f"{names[i]} has the same values as {names[t]}: its curves are hidden under them"
            for i, t in twins.items()]))

    def _names(self) -> tuple[dict[str, set[str]], list[dict]]:
        """The metric names the runs logged, and the plots they declared (the union)."""
        names: dict[str, set[str]] = {METRICS: set(), EVAL: set()}
        declared: dict[str, dict] = {}
        for run in self.runs:
            names[METRICS].update(run.metrics.names())
            names[EVAL].update(run.evals.names())
            for entry in declaration_of(run.started, run.algorithm)["plots"]:
                declared.setdefault(str(entry["key"]), entry)
        plots = list(declared.values())
        if not names[METRICS] and self.runs:
            # Before the first metrics arrive: the plots the runs will need.
            names = expected_names(plots)
        return names, plots

    def refresh(self) -> None:
        """Bring plots up to date with the runs' data; rebuild only when the set of
        plots or curves changed."""
        self._update_legend()
        names, plots = self._names()
        layout = choose_plots(names, plots) if self.runs else None
        if layout is not None and layout.other and self._other_metric not in layout.other:
            self._other_metric = layout.other[0]
        key = (self.x_mode, tuple(id(r) for r in self.runs),
               tuple((spec.key, tuple((c.source, c.metric) for c in curves)) for spec, curves in layout.plots)
               if layout else (), tuple(layout.other) if layout else (), self._other_metric)
        if key != self._layout_key:
            self._layout_key = key
            self._rebuild(layout)  # draws every new plot
            return
        self._update_x_extent()
        self.place_markers()
        for plot in self.plots:
            plot.stale = True
        self._draw_visible()

    def show_metric(self, metric: str) -> bool:
        """Scroll the first plot that draws `metric` (an alarm's) into view; False when none does."""
        keys = plots_showing(self._entries, metric) if metric else []
        plot = next((p for p in self.plots if p.spec.key in keys), None)
        if plot is None:
            return False
        self.scroll.ensureWidgetVisible(plot, 0, 0)
        return True

    def place_markers(self) -> None:
        """Put each alarm's marker on the plots of its metric (else on the first plot);
        only when the alarms, the plots or the x axis changed."""
        key = (self.x_mode, tuple(id(p) for p in self.plots), tuple((id(r), len(r.alarms)) for r in self.runs))
        if key == self._marks_key:
            return
        self._marks_key = key
        marks: dict[str, list] = {plot.spec.key: [] for plot in self.plots}
        compare = len(self.runs) > 1
        for r, run in enumerate(self.runs):
            for event in run.alarms:
                alarm = alarm_from_event(event)
                keys = plots_showing(self._entries, alarm.metric) if alarm.metric else []
                for plot_key in keys or [p.spec.key for p in self.plots[:1]]:
                    mark = mark_for(run, r, alarm, self.x_mode, compare, on_own_plot=bool(keys))
                    if mark is not None:
                        marks[plot_key].append(mark)
        for plot in self.plots:
            plot.set_marks(marks[plot.spec.key])

    def _update_x_extent(self) -> None:
        """The x range every plot shows: 0 to max_steps while a run still training is short of
        it (the curve grows across a fixed axis), else the data, extended in steps of a tenth, so
        the range, and the axes, change rarely."""
        extent = None
        planned = 0.0
        if self.auto_x and self.runs:
            if self.x_mode == STEP:
                last = max((float(r.metrics.steps[-1]) if r.metrics.size else 0.0) for r in self.runs)
                last = max([last] + [float(r.evals.steps[-1]) for r in self.runs if r.evals.size])
                # Only a run still training grows towards its max_steps; a stopped one is its data.
                planned = max([(r.max_steps or 0) for r in self.runs if r.status in ("running", "empty")] + [0])
                end = planned if planned >= last else last
            else:
                end = max(((r.last_time or 0) - (r.first_time or 0)) for r in self.runs)
            end = max(end, 1.0)
            previous = self.plots[0].x_extent if self.plots else None
            if previous is not None and previous[1] >= end and previous[1] <= end * 1.25:
                extent = previous
            else:
                extent = (0.0, end if self.x_mode == STEP and end == planned else end * 1.1)
                if self.x_mode == STEP and end <= SHORT_SERIES:
                    # A short run's points carry markers: half a step of room on each side,
                    # so the first and last are not cut in half by the plot's edge.
                    extent = (-0.5, extent[1] + 0.5)
        for plot in self.plots:
            plot.x_extent = extent

    def _rebuild(self, layout) -> None:
        for plot in self.plots:
            self.grid.removeWidget(plot)
            # Off the window now: deleteLater waits for the event loop, and until then
            # the old plot would still be drawn under the new one.
            plot.hide()
            plot.setParent(None)
            plot.deleteLater()
        self.plots = []
        self._entries = []
        if layout is None:
            return
        entries = list(layout.plots)
        other_header = None
        if layout.other:
            other_header = QWidget()
            row = QHBoxLayout(other_header)
            row.setContentsMargins(0, 0, 0, 0)
            row.addWidget(QLabel("<b>Other metric</b>"))
            combo = QComboBox()
            combo.setObjectName("other-metric")
            combo.addItems(layout.other)
            combo.setCurrentText(self._other_metric)
            combo.currentTextChanged.connect(self._other_chosen)
            row.addWidget(combo)
            name = self._other_metric
            source = EVAL if name.startswith("eval:") else METRICS
            metric = name.removeprefix("eval:")
            curve = CurveSpec(metric, name, source)
            entries.append((PlotSpec("other", "Other metric", (curve,), help=OTHER_HELP), [curve]))
        first = None
        for index, (spec, curves) in enumerate(entries):
            plot = MetricPlot(spec, curves, self.runs, self.x_mode, header=other_header if spec.key == "other" else None)
            plot.user_zoomed.connect(self._user_zoomed)
            plot.alarm_clicked.connect(self.alarm_clicked)
            if first is None:
                first = plot
                plot.x_leader = True
            # Zoom one, all follow: the same x range in every plot. (pyqtgraph's setXLink
            # lines linked views up on screen, which shifts the range of a plot whose
            # y axis is wider than the first's and hid the first steps of a short run.)
            plot.item.getViewBox().sigXRangeChanged.connect(self._x_range_changed)
            self.grid.addWidget(plot, index // COLUMNS, index % COLUMNS)
            self.plots.append(plot)
            self._entries.append((spec, curves))
        for col in range(COLUMNS):
            self.grid.setColumnStretch(col, 1)
        # Lay the new plots out now, so the ones in view can be drawn before the first
        # paint (otherwise each is painted empty, then again with its data).
        self.scroll.widget().layout().activate()
        self._update_x_extent()
        self.place_markers()
        weight = self.smoothing_weight
        for plot in self.plots:
            plot.show()
            # Data and ranges in place before the first paint: each new plot is painted
            # once, not empty and then again (painting, axis text above all, is the cost).
            plot.update_data(weight)
        self.layout_changed.emit()

    def _other_chosen(self, name: str) -> None:
        if name and name != self._other_metric:
            self._other_metric = name
            QTimer.singleShot(0, self, self.refresh)  # not while the combo is emitting

    PLOTS_PER_SLICE = 3

    def _draw_visible(self) -> None:
        """Redraw stale plots that can be seen, a few at a time: each slice (its curve
        updates and its repaint) is a separate turn of the event loop, so the window
        never stalls for the whole dashboard. Plots out of view wait until they are
        scrolled to or the tab is shown (showEvent)."""
        self._slice_pending = False
        if not self.isVisible():
            return
        weight = self.smoothing_weight
        todo = [p for p in self.plots if p.stale and not p.visibleRegion().isEmpty()]
        for plot in todo[: self.PLOTS_PER_SLICE]:
            plot.update_data(weight)
        if len(todo) > self.PLOTS_PER_SLICE and not self._slice_pending:
            self._slice_pending = True
            QTimer.singleShot(15, self, self._draw_visible)  # after this slice is painted

    def draw_all(self) -> None:
        """Redraw every plot, seen or not (screenshots, tests)."""
        weight = self.smoothing_weight
        for plot in self.plots:
            plot.update_data(weight)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        QTimer.singleShot(0, self, self._draw_visible)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        QTimer.singleShot(0, self, self._draw_visible)

    # --------------------------------------------------------------- controls

    def _smoothing_changed(self) -> None:
        self.smoothing_label.setText(f"{self.smoothing_weight:.2f}")
        for plot in self.plots:
            plot.stale = True
        self._draw_visible()

    def _x_changed(self) -> None:
        self.x_mode = self.x_axis.currentData()
        self.refresh()

    _syncing_x = False

    def _x_range_changed(self, box, x_range) -> None:
        if self._syncing_x:
            return
        self._syncing_x = True
        try:
            for plot in self.plots:
                other = plot.item.getViewBox()
                if other is not box:
                    (x0, x1), _ = other.viewRange()
                    if (x0, x1) != tuple(x_range):
                        other.setXRange(*x_range, padding=0)
        finally:
            self._syncing_x = False

    def _user_zoomed(self) -> None:
        self.auto_x = False
        for plot in self.plots:
            plot.x_extent = None

    def reset_view(self) -> None:
        self.auto_x = True
        for plot in self.plots:
            plot.reset_view()
        self._update_x_extent()
        self._draw_visible()
        QTimer.singleShot(0, self, self._draw_visible)  # plots not laid out yet draw next pass

    def plot(self, key: str) -> MetricPlot | None:
        return next((p for p in self.plots if p.spec.key == key), None)
