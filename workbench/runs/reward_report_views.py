"""The parts of a reward-model run's report card page (reward_report_page.py): the verdict
lines and preflight checks coloured by status, the margin histogram, the reliability
diagram, the length check in words, and the table of scored pairs."""

from __future__ import annotations

import html

import pyqtgraph as pg
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QFrame, QHeaderView, QLabel, QTableView, QVBoxLayout, QWidget

from workbench.runs.reward_report import (
    Calibration, CalibrationBin, Finding, LengthCheck, Margin, Pair, number, percent,
)

# status -> (text colour, background tint, symbol); the text colours are the runs list's
# done / stopped / failed, so "good" looks the same across the window.
STATUS_STYLE = {
    "good": ("#1e7e34", "#e6f4ea", "✓"),
    "worrying": ("#8a6d00", "#fef7e0", "!"),
    "bad": ("#b00020", "#fce8e6", "✗"),
    "skipped": ("#757575", "#f1f3f4", "–"),
}
WRONG_WAY = "#c62828"  # pairs ranked the wrong way round (margin below 0)
RIGHT_WAY = "#2e7d32"
OBSERVED = "#1565c0"


def status_style(status: str) -> tuple[str, str, str]:
    return STATUS_STYLE.get(status, STATUS_STYLE["worrying"])


def finding_html(finding: Finding) -> str:
    """A verdict line or preflight check as rich text: symbol and title in its status's
    colour, what was seen, and what to try."""
    colour, _tint, symbol = status_style(finding.status)
    text = (f"<span style='color:{colour}'><b>{symbol} {html.escape(finding.title)}</b> "
            f"<small>({html.escape(finding.status)})</small></span>")
    if finding.saw:
        text += f"<br>{html.escape(finding.saw)}"
    if finding.try_:
        text += f"<br><i>Try:</i> {html.escape(finding.try_)}"
    return text


FIT_ROWS = 50  # rows a table's columns are fitted to (Qt's resize-contents precision)


class FindingsList(QWidget):
    """A column of findings, each a label on its status's tint (`labels`: in order)."""

    def __init__(self, name: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName(name)
        self.labels: list[QLabel] = []
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(4)

    def show_findings(self, findings: list[Finding], empty: str) -> None:
        for label in self.labels:
            label.deleteLater()
        self.labels = [self._label(f) for f in findings] or [self._empty(empty)]
        for label in self.labels:
            self._layout.addWidget(label)

    def _label(self, finding: Finding) -> QLabel:
        colour, tint, _symbol = status_style(finding.status)
        label = QLabel(finding_html(finding))
        label.setObjectName(f"{self.objectName()}-{finding.key}")
        label.setProperty("status", finding.status)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        # A coloured edge as well as the tint: the status reads even where the tints look alike.
        label.setStyleSheet(f"QLabel {{ background:{tint}; border-left:4px solid {colour}; padding:4px 6px; }}")
        return label

    def _empty(self, text: str) -> QLabel:
        label = QLabel(text)
        label.setStyleSheet("color:#5f6368")
        label.setWordWrap(True)
        return label


def _white_plot(title: str, bottom: str, left: str) -> pg.PlotWidget:
    plot = pg.PlotWidget(background="w")
    plot.setTitle(title, color="#333", size="10pt")
    for side, text in (("bottom", bottom), ("left", left)):
        axis = plot.getAxis(side)
        axis.setPen(pg.mkPen("#555"))
        axis.setTextPen(pg.mkPen("#333"))
        plot.setLabel(side, text, color="#333")
    plot.setMenuEnabled(False)
    plot.setMinimumHeight(200)
    return plot


class MarginPlot(QWidget):
    """The histogram of r(chosen) − r(rejected) over the scored pairs, bars left of the
    line at 0 (the pairs ranked the wrong way round) in red."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.plot = _white_plot("Margin", "r(chosen) − r(rejected)", "pairs")
        self.plot.setObjectName("margin-plot")
        self.plot.setToolTip("How far apart the reward model puts each pair's chosen and rejected answers. "
                             "Left of the line at 0: pairs it ranks the wrong way round.")
        self.bars: pg.BarGraphItem | None = None
        self.zero = pg.InfiniteLine(pos=0.0, angle=90, pen=pg.mkPen("#424242", width=1.5, style=Qt.DashLine))
        self.plot.addItem(self.zero)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot)

    def show_margin(self, margin: Margin | None) -> None:
        if self.bars is not None:
            self.plot.removeItem(self.bars)
            self.bars = None
        if margin is None or not margin.counts:
            self.plot.setTitle("Margin (not in this report)", color="#5f6368", size="10pt")
            return
        left, right = margin.edges[:-1], margin.edges[1:]
        brushes = [pg.mkBrush(WRONG_WAY if (a + b) / 2 < 0 else RIGHT_WAY) for a, b in zip(left, right)]
        self.bars = pg.BarGraphItem(x0=left, x1=right, height=margin.counts, brushes=brushes,
                                    pen=pg.mkPen("w", width=0.5))
        self.plot.addItem(self.bars)
        self.plot.setTitle(f"Margin: mean {number(margin.mean)}, median {number(margin.median)}",
                           color="#333", size="10pt")
        self.plot.setXRange(min(margin.edges[0], 0.0), max(margin.edges[-1], 0.0), padding=0.03)
        self.plot.setYRange(0, max(margin.counts) or 1, padding=0.05)


def bin_tip(bin_: CalibrationBin) -> str:
    """A reliability bin in words (the diagram's tooltip).

    >>> bin_tip(CalibrationBin(0.9, 1.0, 40, 0.95, 0.9))
    'σ(r_a − r_b) in 0.9–1: 40 pairs\\npredicted 0.95, observed 0.9'
    """
    head = f"σ(r_a − r_b) in {bin_.low:g}–{bin_.high:g}: {bin_.count} pair{'' if bin_.count == 1 else 's'}"
    if bin_.count == 0 or bin_.predicted is None or bin_.observed is None:
        return head
    return f"{head}\npredicted {bin_.predicted:.3g}, observed {bin_.observed:.3g}"


class CalibrationPlot(QWidget):
    """The reliability diagram: per bin of the predicted probability σ(r_a − r_b), how often
    a was in fact the chosen answer (a bar over the bin, a point at the bin's mean
    prediction), against the diagonal of a calibrated model."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.plot = _white_plot("Calibration", "predicted P(a is chosen)", "observed win rate of a")
        self.plot.setObjectName("calibration-plot")
        self.plot.setXRange(0, 1, padding=0.02)
        self.plot.setYRange(0, 1, padding=0.02)
        diagonal = pg.PlotDataItem([0, 1], [0, 1], pen=pg.mkPen("#9e9e9e", width=1.5, style=Qt.DashLine))
        self.plot.addItem(diagonal)
        self.bars: pg.BarGraphItem | None = None
        self.points = pg.ScatterPlotItem(size=9, pen=pg.mkPen(OBSERVED, width=1.5), brush=pg.mkBrush("w"),
                                         hoverable=True, tip=lambda x, y, data: data)
        self.plot.addItem(self.points)
        self.tips: list[str] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot)

    def show_calibration(self, calibration: Calibration | None) -> None:
        if self.bars is not None:
            self.plot.removeItem(self.bars)
            self.bars = None
        self.points.clear()
        if calibration is None:
            self.tips = []
            self.plot.setTitle("Calibration (not in this report)", color="#5f6368", size="10pt")
            return
        self.tips = [bin_tip(b) for b in calibration.bins]
        filled = [b for b in calibration.bins if b.count and b.observed is not None]
        if filled:
            self.bars = pg.BarGraphItem(x0=[b.low for b in filled], x1=[b.high for b in filled],
                                        height=[b.observed for b in filled], brush=pg.mkBrush(OBSERVED + "40"),
                                        pen=pg.mkPen(OBSERVED + "80"))
            self.plot.addItem(self.bars)
            self.bars.setZValue(-1)
            self.points.setData([b.predicted for b in filled], [b.observed for b in filled],
                                data=[bin_tip(b) for b in filled])
        interval = calibration.ece_interval
        sure = f" (90%: {interval[0]:.3f}-{interval[1]:.3f})" if interval else ""
        self.plot.setTitle(f"Calibration: ECE {number(calibration.ece)}{sure}", color="#333", size="10pt")
        self.plot.setToolTip("Each bin: how often answer a was the chosen one (bar and point) against the "
                             "probability the model gave it (point's x); on the dashed diagonal it is calibrated.\n\n"
                             + "\n".join(t.replace("\n", "; ") for t in self.tips))


LENGTH_MEANINGS = {
    "longer_accuracy": "what always picking the longer answer would score: the model's accuracy should be well "
                       "above it, or length alone explains what it learned.",
    "ties": "pairs whose two answers are equally long: the longer-answer rule cannot choose, so each counts half "
            "above, as a coin would.",
    "correlation": "between an answer's reward and its length: near 0, the reward does not follow length; "
                   "near 1, longer answers score higher whatever they say.",
    "matched_accuracy": "the model's accuracy on pairs whose answers are about as long as each other: "
                        "what it ranks right when length cannot help.",
}


def length_rows(length: LengthCheck) -> list[tuple[str, str, str]]:
    """(name, value, meaning) of each number of the length check.

    >>> length_rows(LengthCheck("tokens", 0.55, 120, 0.12, 0.81, 130))[3][:2]
    ('Length-matched accuracy', '81.0 % on 130 pairs')
    """
    matched = percent(length.matched_accuracy)
    if length.matched_pairs is not None:
        matched += f" on {length.matched_pairs} pairs"
    return [("Longer-answer accuracy", percent(length.longer_accuracy), LENGTH_MEANINGS["longer_accuracy"]),
            ("Ties", "—" if length.ties is None else str(length.ties), LENGTH_MEANINGS["ties"]),
            (f"Reward–length correlation ({length.unit})", number(length.correlation, 2),
             LENGTH_MEANINGS["correlation"]),
            ("Length-matched accuracy", matched, LENGTH_MEANINGS["matched_accuracy"])]


def length_html(length: LengthCheck | None) -> str:
    if length is None:
        return "<span style='color:#5f6368'>This report has no length check.</span>"
    return "".join(f"<p style='margin:0 0 6px 0'><b>{html.escape(name)}: {html.escape(value)}</b><br>"
                   f"<span style='color:#5f6368'>{html.escape(meaning[:1].upper() + meaning[1:])}</span></p>"
                   for name, value, meaning in length_rows(length))


# ------------------------------------------------------------------ the pairs

PAIR_COLUMNS = ("margin", "r chosen", "r rejected", "len chosen", "len rejected", "prompt", "chosen", "rejected")
SORT_ROLE = Qt.UserRole + 1
_LAST = float("inf")  # a pair with no margin sorts after every scored one


def _one_line(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class PairsModel(QAbstractTableModel):
    """The report's scored pairs, a row each; SORT_ROLE gives numbers to sort by."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.pairs: list[Pair] = []

    def set_pairs(self, pairs: list[Pair]) -> None:
        self.beginResetModel()
        self.pairs = list(pairs)
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.pairs)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(PAIR_COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):
        if orientation == Qt.Horizontal and role == Qt.DisplayRole:
            return PAIR_COLUMNS[section]
        return None

    def value(self, pair: Pair, column: str):
        return {"margin": pair.margin, "r chosen": pair.reward_chosen, "r rejected": pair.reward_rejected,
                "len chosen": pair.length_chosen, "len rejected": pair.length_rejected, "prompt": pair.prompt,
                "chosen": pair.chosen, "rejected": pair.rejected}[column]

    def data(self, index: QModelIndex, role=Qt.DisplayRole):
        if not index.isValid() or index.row() >= len(self.pairs):
            return None
        pair, column = self.pairs[index.row()], PAIR_COLUMNS[index.column()]
        value = self.value(pair, column)
        if role == Qt.DisplayRole:
            if isinstance(value, str):
                return _one_line(value)
            return "" if value is None else (f"{value:+.3f}" if column == "margin" else
                                             f"{value:.3f}" if isinstance(value, float) else str(value))
        if role == SORT_ROLE:
            return (_LAST if value is None else float(value)) if index.column() < 5 else value
        if role == Qt.ForegroundRole and column == "margin" and value is not None:
            return QColor(WRONG_WAY if value < 0 else RIGHT_WAY)
        if role == Qt.ToolTipRole and isinstance(value, str):
            return value
        if role == Qt.TextAlignmentRole and index.column() < 5:
            return int(Qt.AlignRight | Qt.AlignVCenter)
        return None


class PairsTable(QTableView):
    """The pairs, sortable by any column; sorted by margin, lowest first (the pairs the
    model gets most wrong on top), whenever a report is shown."""

    TEXT_WIDTH = 260

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("pairs-table")
        self.pairs = PairsModel(self)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.pairs)
        self.proxy.setSortRole(SORT_ROLE)
        self.setModel(self.proxy)
        self.setSortingEnabled(True)
        self.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)
        self.verticalHeader().hide()
        self.setFrameShape(QFrame.StyledPanel)
        header = self.horizontalHeader()
        for column in range(5):
            header.setSectionResizeMode(column, QHeaderView.ResizeToContents)
        header.setStretchLastSection(True)
        # Columns fitted to the first rows only: fitting to every pair cost the window a
        # second for 200 pairs, and grew with a preference file's size.
        header.setResizeContentsPrecision(FIT_ROWS)

    def show_pairs(self, pairs: list[Pair]) -> None:
        self.pairs.set_pairs(pairs)
        self.sortByColumn(0, Qt.AscendingOrder)
        for column in (5, 6):  # the texts as wide as they are, up to a limit: the rejected answer stays in view
            self.resizeColumnToContents(column)
            self.setColumnWidth(column, min(self.columnWidth(column), self.TEXT_WIDTH))

    def shown_margins(self) -> list[float | None]:
        """The margin of each row as shown, top to bottom."""
        return [self.pairs.pairs[self.proxy.mapToSource(self.proxy.index(row, 0)).row()].margin
                for row in range(self.proxy.rowCount())]
