"""An evaluation as the Evaluate page (evaluate_page.py) shows it: what was measured how,
the curves against k on a log2 axis (pass@k with where the curves cross, maj@k,
best-of-N as the reward model picks against the oracle), the summary table, and the
per-prompt section (evaluate_prompts.py; a click on a pass@k or maj@k point orders its prompts
by that model's pass@k there). Other runs' evaluations overlaid on it
(evaluation_compare.py) add their models to pass@k, maj@k and the summary, each in its
run's colour as the dashboard colours runs, a line style per model."""

from __future__ import annotations

import html
import math

import pyqtgraph as pg
import time
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView, QFrame, QLabel, QSplitter, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget,
)

from workbench.dashboard.curves import DASHES, run_colour
from workbench.runs.evaluate_prompts import PromptsSection
from workbench.runs.evaluation_compare import Comparison, ComparedModel
from workbench.runs.evaluations import Evaluation, fraction_text, short_name

BASE_COLOUR = "#757575"  # the base model in grey: the reference every checkpoint is read against
CHECKPOINT_COLOURS = ("#1565c0", "#e65100", "#2e7d32", "#6a1b9a", "#00838f", "#c62828", "#5d4037", "#ad1457")
CROSSING_COLOUR = "#b00020"


def model_colours(evaluation: Evaluation) -> dict[str, str]:
    """A colour per model of the evaluation, the same in every plot and table."""
    colours, others = {}, iter(CHECKPOINT_COLOURS * (1 + len(evaluation.models) // len(CHECKPOINT_COLOURS)))
    for model in evaluation.models:
        colours[model.name] = BASE_COLOUR if model.checkpoint is None else next(others)
    return colours


def compared_colours(comparison: Comparison) -> dict[str, str]:
    """A colour per model key: one evaluation's model_colours; with runs overlaid, each
    model in its run's colour (the dashboard's run_colour of the run's place)."""
    if not comparison.overlaid:
        return model_colours(comparison.evaluation)
    return {m.key: run_colour(m.position) for m in comparison.models()}


def line_style(comparison: Comparison, model: ComparedModel) -> Qt.PenStyle:
    """Solid for one evaluation; with runs overlaid, a style per model of a run (its
    first solid, its second dashed, ...), as the dashboard tells a run's curves apart."""
    return DASHES[model.order % len(DASHES)] if comparison.overlaid else Qt.SolidLine


def log2_ticks(ks: list[int]) -> list[tuple[float, str]]:
    """The x axis's ticks: each power of two up to the largest k, and the largest k.

    >>> [label for _x, label in log2_ticks([1, 2, 3, 4, 48])]
    ['1', '2', '4', '8', '16', '32', '48']
    """
    top = max(ks, default=1)
    marks = sorted({2 ** i for i in range(int(math.log2(top)) + 1)} | {top})
    return [(math.log2(k), str(k)) for k in marks]


class KCurvePlot(QWidget):
    """Curves of a value against k (or N), on a log2 x axis: a curve's x is log2(k), its
    ticks read k. `curves` maps a curve's name to its PlotDataItem."""

    # --- Signals
    sig_point_clicked = Signal(str, int)
    """A curve's point was clicked: (the curve's key, its k)."""

    def __init__(self, name: str, title: str, bottom: str, left: str, tip: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = title
        self.plot = pg.PlotWidget(background="w")
        self.plot.setObjectName(name)
        self.plot.setToolTip(tip)
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)  # a fixed frame: 0 to 1 over the ks measured
        self.plot.setMinimumHeight(200)
        for side, text in (("bottom", bottom), ("left", left)):
            axis = self.plot.getAxis(side)
            axis.setPen(pg.mkPen("#555"))
            axis.setTextPen(pg.mkPen("#333"))
            self.plot.setLabel(side, text, color="#333")
        self.plot.showGrid(x=True, y=True, alpha=0.15)
        self.legend = self.plot.addLegend(offset=(-6, -6), labelTextColor="#333", brush=pg.mkBrush("#ffffffd0"))
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.marks: list[pg.InfiniteLine] = []
        self.crowded = False
        self.plot.getViewBox().sigResized.connect(lambda _box: self.place_legend())
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot)

    def clear(self, why: str = "", crowded: bool = False) -> None:
        """No curves; `crowded`: those to come are of runs overlaid (smaller names)."""
        self.plot.clear()  # the curves, marks and the legend's entries
        self.legend.clear()
        self.crowded = crowded
        self.legend.setLabelTextSize("8pt" if crowded else "9pt")
        self.curves, self.marks = {}, []
        self.plot.setTitle(f"{self.title} ({why})" if why else self.title, color="#5f6368" if why else "#333",
                           size="10pt")

    def add_curve(self, key: str, name: str | None, points: dict[int, float], colour: str,
                  dashed: bool = False, style: Qt.PenStyle | None = None) -> None:
        """A curve; `name` None keeps it out of the legend."""
        ks = sorted(points)
        style = style if style is not None else Qt.DashLine if dashed else Qt.SolidLine
        item = self.plot.plot([math.log2(k) for k in ks], [points[k] for k in ks], name=name,
                              pen=pg.mkPen(colour, width=2, style=style), symbol=None if len(ks) > 12 else "o",
                              symbolSize=5, symbolBrush=colour, symbolPen=colour)
        item.sigPointsClicked.connect(lambda _item, points, _event: self._clicked(key, points))
        self.curves[key] = item

    def _clicked(self, key: str, points) -> None:
        if len(points):
            self.sig_point_clicked.emit(key, round(2 ** float(points[0].pos().x())))

    def add_key(self, name: str, dashed: bool) -> None:
        """A legend entry for a line style (in black: grey is the base's), not for a curve."""
        self.legend.addItem(pg.PlotDataItem(pen=pg.mkPen("#212121", width=2, style=Qt.DashLine if dashed
                                                         else Qt.SolidLine)), name)

    def mark_crossing(self, k: float, text: str, order: int, top: float) -> None:
        """A dashed line at k, labelled beside it: on its left when it lies in the right half
        of the plot (`top`: the largest log2 k), so that the label stays inside."""
        x = math.log2(k)
        side = 1 if x > top / 2 else 0
        line = pg.InfiniteLine(pos=x, angle=90, label=text, pen=pg.mkPen(CROSSING_COLOUR, width=1.2,
                                                                          style=Qt.DashLine),
                               labelOpts={"position": 0.95 - 0.09 * order, "color": CROSSING_COLOUR,
                                          "fill": pg.mkBrush("#ffffffd0"), "anchors": [(side, 0.5), (side, 0.5)]})
        self.plot.addItem(line)
        self.marks.append(line)

    def frame(self, ks: list[int]) -> None:
        """The axes over `ks`, and the legend where the curves are not (they rise with k):
        bottom right when they all end high, else top left when they all start low; when
        `crowded` (runs overlaid: more curves, longer names), the corner it covers least of
        them in, again as the plot is resized."""
        ticks = log2_ticks(ks)
        self.plot.getAxis("bottom").setTicks([ticks, []])
        self.plot.setXRange(0, ticks[-1][0] or 1, padding=0.04)
        self.plot.setYRange(0, 1, padding=0.03)
        self.place_legend()

    def place_legend(self) -> None:
        if self.crowded:
            corner = self.legend_corner()
            self.legend.anchor(corner, corner, offset=(6 - 12 * corner[0], 6 - 12 * corner[1]))
            return
        values = [item.getData()[1] for item in self.curves.values() if len(item.getData()[1])]
        starts, ends = [float(v[0]) for v in values], [float(v[-1]) for v in values]
        if min(ends, default=1.0) < 0.45 and max(starts, default=0.0) < 0.65:
            self.legend.anchor((0, 0), (0, 0), offset=(6, 6))
        else:
            self.legend.anchor((1, 1), (1, 1), offset=(-6, -6))

    CORNERS = ((1, 1), (0, 0), (1, 0), (0, 1))  # bottom right first, as the rule above

    def legend_corner(self) -> tuple[int, int]:
        """The corner ((0, 0): top left; (1, 1): bottom right) where the legend, at its
        size, would hide the fewest points of the curves (each sampled along its length)."""
        box = self.plot.getViewBox()
        view = box.viewRect()
        size = self.legend.boundingRect()
        across, up = box.width() if box.width() > 50 else 400.0, box.height() if box.height() > 50 else 200.0
        width = min(1.0, (size.width() + 8) / across) * view.width()
        height = min(1.0, (size.height() + 8) / up) * view.height()
        samples = []
        for item in self.curves.values():
            x, y = item.getData()
            for i in range(len(x) - 1):
                samples += [(x[i] + (x[i + 1] - x[i]) * t / 10, y[i] + (y[i + 1] - y[i]) * t / 10) for t in range(10)]
            samples += list(zip(x[-1:], y[-1:]))

        def covered(corner: tuple[int, int]) -> int:
            left = view.left() if corner[0] == 0 else view.right() - width
            bottom = view.bottom() - height if corner[1] == 0 else view.top()  # y grows upwards: top() is the least
            return sum(1 for x, y in samples if left <= x <= left + width and bottom <= y <= bottom + height)

        return min(self.CORNERS, key=covered)

    def points(self, key: str) -> list[tuple[float, float]]:
        """(k, value) of a curve as drawn: its x read back from the log2 axis."""
        x, y = self.curves[key].getData()
        return [(round(2 ** float(a), 6), float(b)) for a, b in zip(x, y)]


def show_metric(plot: KCurvePlot, comparison: Comparison, metric: str, missing: str) -> None:
    """One curve per model of `metric` (pass_at_k or maj_at_k), of every run overlaid,
    and where curves cross."""
    colours = compared_colours(comparison)
    drawn = [m for m in comparison.models() if getattr(m.model, metric)]
    plot.clear("" if drawn else missing, crowded=comparison.overlaid)
    for model in drawn:
        partial = " (stopped)" if model.evaluation.partial(model.model) else ""
        plot.add_curve(model.key, model.label + partial, getattr(model.model, metric), colours[model.key],
                       style=line_style(comparison, model))
    crossings = comparison.crossings(metric)
    standing = comparison.standing(metric) if metric == "pass_at_k" else ""
    if standing:
        plot.plot.setTitle(f"{plot.title}: {html.escape(standing)}", color="#333", size="10pt")
    elif not comparison.overlaid and len(drawn) == 2 and not crossings and metric == "pass_at_k":
        plot.plot.setTitle(f"{plot.title}: the curves do not cross", color="#333", size="10pt")  # of more: which?
    ks = sorted({*comparison.evaluation.ks, *(k for m in drawn for k in getattr(m.model, metric))}) or [1]
    for order, crossing in enumerate(crossings):
        plot.mark_crossing(crossing.k, crossing.text(alone=len(crossings) == 1), order, math.log2(max(ks)))
    plot.frame(ks)


def show_best_of_n(plot: KCurvePlot, evaluation: Evaluation) -> bool:
    """Per model, the reward model's pick among N (solid) against the oracle's (dashed);
    False (nothing drawn) when the evaluation had no reward model."""
    colours = model_colours(evaluation)
    drawn = [m for m in evaluation.models if m.best_of_n is not None]
    plot.clear()
    for model in drawn:  # the legend: a colour per model, then what solid and dashed mean
        plot.add_curve(f"{model.name}:reward_model", short_name(model), model.best_of_n.reward_model,
                       colours[model.name])
        if model.best_of_n.oracle:
            plot.add_curve(f"{model.name}:oracle", None, model.best_of_n.oracle, colours[model.name], dashed=True)
    if drawn:
        plot.add_key("reward model's pick", dashed=False)
        plot.add_key("oracle (pass@N)", dashed=True)
    plot.frame([n for m in drawn for n in m.best_of_n.reward_model] or [1])
    return bool(drawn)


# ------------------------------------------------------------------ the summary


def summary_columns(n: int | None) -> list[str]:
    big = "N" if n is None else str(n)
    return ["model", "prompts", "pass@1", f"pass@{big}", f"maj@{big}", f"pass^{big}", "mean reward", "samples/s"]


class SummaryTable(QTableWidget):
    """A row per model: its prompts done, pass@1, pass@N, maj@N, pass^N, mean reward, speed."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("eval-summary")
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.NoSelection)
        self.verticalHeader().hide()
        self.setFrameShape(QFrame.StyledPanel)
        self.horizontalHeader().setStretchLastSection(False)  # numbers stay by their names, the rest blank
        self.row_height = self.verticalHeader().defaultSectionSize()

    def show_evaluation(self, evaluation: Evaluation) -> None:
        self.show_comparison(Comparison("", evaluation))

    def show_comparison(self, comparison: Comparison) -> None:
        """A row per model of the evaluation on show, then per model of each overlaid one
        (named with its run); the N of the columns is the first evaluation's."""
        n = comparison.evaluation.n
        columns = summary_columns(n)
        self.setColumnCount(len(columns))
        self.setHorizontalHeaderLabels(columns)
        models = comparison.models()
        self.setRowCount(len(models))
        self.verticalHeader().setDefaultSectionSize(22 if comparison.overlaid else self.row_height)
        colours = compared_colours(comparison)
        for row, model in enumerate(models):
            for column, text in enumerate(self._cells(model, n)):
                item = QTableWidgetItem(text)
                if column == 0:
                    item.setData(Qt.DecorationRole, QColor(colours[model.key]))
                    item.setToolTip(model.model.checkpoint or "the run's starting model, no adapter")
                else:
                    item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                self.setItem(row, column, item)
        self.resizeColumnsToContents()
        self.setFixedHeight(self.horizontalHeader().height() + sum(self.rowHeight(r) for r in range(self.rowCount()))
                            + 2 * self.frameWidth() + 2)

    @staticmethod
    def _cells(compared: ComparedModel, n: int | None) -> list[str]:
        """A model's cells at the columns' N; a model of an evaluation with another N
        shows its values at its own, said in the cell ("0.812 at 16")."""
        evaluation, model = compared.evaluation, compared.model
        done = "—" if model.done_prompts is None else str(model.done_prompts)
        if evaluation.partial(model):
            done += f" of {evaluation.prompts} (stopped)"
        speed = "—" if model.samples_per_second is None else f"{model.samples_per_second:.1f}"
        own = evaluation.n

        def big(curve: dict[int, float] | None) -> str:
            if own is None or own == n or n is None:
                return fraction_text(_at(curve, n if n is not None else own))
            value = _at(curve, own)
            return fraction_text(value) if value is None else f"{fraction_text(value)} at {own}"

        return [compared.long_label, done, fraction_text(_at(model.pass_at_k, 1)), big(model.pass_at_k),
                big(model.maj_at_k), big(model.pass_hat_k), fraction_text(model.mean_reward), speed]

    def cell(self, row: int, column: str) -> str:
        """The text of `row` under the header `column` (as shown: pass@32, not pass@N)."""
        headers = [self.horizontalHeaderItem(c).text() for c in range(self.columnCount())]
        return self.item(row, headers.index(column)).text()


def _at(curve: dict[int, float] | None, k: int | None) -> float | None:
    return None if curve is None or k is None else curve.get(k)


# ------------------------------------------------------------------ the whole


def header_html(evaluation: Evaluation) -> str:
    """What was measured and how: prompts × samples, the verifier, sampling, reward model, when."""
    sampling = evaluation.sampling
    said = [f"{key.replace('_', ' ').replace('max completion length', 'max tokens')} {sampling[key]:g}"
            for key in ("temperature", "top_p", "top_k", "max_completion_length")
            if isinstance(sampling.get(key), (int, float)) and not isinstance(sampling.get(key), bool)]
    prompts = "?" if evaluation.prompts is None else evaluation.prompts
    parts = [f"{prompts} held-out prompts × {evaluation.n or '?'} samples",
             f"verifier <b>{html.escape(evaluation.verifier)}</b>" if evaluation.verifier else
             "<span style='color:#8a6d00'>no verifier: mean reward only</span>",
             ", ".join(said) or "sampling not recorded"]
    if evaluation.reward_model:
        parts.append(f"reward model {html.escape(Path(evaluation.reward_model).name)}")
    if evaluation.created is not None:
        parts.append(time.strftime("%Y-%m-%d %H:%M", time.localtime(evaluation.created)))
    parts.append("finished" if evaluation.finished else
                 "<span style='color:#8a6d00'>not finished (running, or stopped)</span>")
    return f"<span style='font-size:12pt'><b>{html.escape(evaluation.name)}</b></span> · " + " · ".join(parts)


def overlays_html(comparison: Comparison) -> str:
    """The evaluations overlaid, each in its run's colour, after the header ("" for none)."""
    said = [f"<span style='color:{run_colour(o.position)}'><b>{html.escape(o.run)}</b></span> "
            f"{html.escape(o.evaluation.name)} ({o.evaluation.prompts or '?'} × {o.evaluation.n or '?'}"
            f"{'' if o.evaluation.finished else ', not finished'})" for o in comparison.overlays]
    if not said:
        return ""
    first = f"<span style='color:{run_colour(0)}'><b>{html.escape(comparison.run)}</b></span>"
    twins = [f"{html.escape(model.label)} has the same curves as {html.escape(twin.label)}: drawn over it"
             for model, twin in comparison.identical()]
    return f"<br>{first} against " + ", ".join(said) + "".join(
        f" · <span style='color:#5f6368'>{twin}</span>" for twin in twins)


class EvaluationView(QWidget):
    """One evaluation: the header, the three plots, the summary table, the prompts."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.header = QLabel()
        self.header.setObjectName("eval-header")
        self.header.setWordWrap(True)
        self.header.setTextInteractionFlags(Qt.TextSelectableByMouse)
        click = " Click a point: that model's prompts below, the lowest pass@k at that k first."
        self.pass_plot = KCurvePlot("pass-at-k", "pass@k", "k (log scale)", "pass@k",
                                    "The chance that at least one of k samples is correct (unbiased, from N). "
                                    "Where two models' curves cross, the one below at small k solves more at large k."
                                    + click)
        self.maj_plot = KCurvePlot("maj-at-k", "maj@k", "k (log scale)", "maj@k",
                                   "The chance that the answer most of k samples give (the task's answer rule) "
                                   "is correct." + click)
        self.best_plot = KCurvePlot("best-of-n", "best-of-N", "N (log scale)", "verifier score of the pick",
                                    "The verifier's score of the sample the reward model scores highest among N "
                                    "(solid), against the verifier's own pick, the oracle (dashed, = pass@N): "
                                    "the gap is what the reward model misses.")
        self.summary = SummaryTable()
        self.prompts = PromptsSection()
        self.pass_plot.sig_point_clicked.connect(lambda key, k: self.prompts.show_model_at(key, k, "pass@k"))
        self.maj_plot.sig_point_clicked.connect(lambda key, k: self.prompts.show_model_at(key, k, "maj@k"))
        self.comparison: Comparison | None = None
        plots = QSplitter(Qt.Horizontal)
        for plot in (self.pass_plot, self.maj_plot, self.best_plot):
            plots.addWidget(plot)
        top = QWidget()
        column = QVBoxLayout(top)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.header)
        column.addWidget(plots, 1)
        column.addWidget(self.summary)
        split = QSplitter(Qt.Vertical)
        split.addWidget(top)
        split.addWidget(self.prompts)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 1)
        split.setSizes([500, 500])  # the prompts as tall as the curves: they are what one reads longest
        self.split = split
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    def show_evaluation(self, evaluation: Evaluation, comparison: Comparison | None = None) -> None:
        """Show `evaluation`; `comparison` (of it): other runs' evaluations overlaid on it."""
        comparison = comparison or Comparison("", evaluation)
        if comparison.overlaid != (self.comparison is not None and self.comparison.overlaid):
            # Runs overlaid: more curves and summary rows, so the curves get more of the height.
            self.split.setSizes([600, 400] if comparison.overlaid else [500, 500])
        self.comparison = comparison
        self.header.setText(header_html(evaluation) + overlays_html(comparison))
        show_metric(self.pass_plot, comparison, "pass_at_k", "no verifier: not measured")
        show_metric(self.maj_plot, comparison, "maj_at_k", "no answer rule: not measured")
        self.best_plot.setVisible(show_best_of_n(self.best_plot, evaluation))
        if comparison.overlaid:  # drawn in one evaluation's colours, as ever: only the first run's
            self.best_plot.plot.setTitle(f"best-of-N ({html.escape(comparison.run)})", color="#333", size="10pt")
        self.summary.show_comparison(comparison)
        self.prompts.show_comparison(comparison, compared_colours(comparison))
