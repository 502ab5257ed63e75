"""The Dashboard tab as the window lays it out: the plots over the Alarms panel (folded
to its header while there are none), and between them, while runs are compared, the
preset fields that differ, across the tab's whole width so every run's column reads
whole (beside the plots, whose three columns keep their width, it had ~230 px at 1024)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSplitter, QVBoxLayout, QWidget

from workbench.alarms.panel import AlarmsPanel
from workbench.dashboard.curves import run_colour
from workbench.dashboard.view import Dashboard
from workbench.runs.labels import shown_labels
from workbench.runs.rundata import RunData
from workbench.runs.runs_view import DifferencesTable


class DashboardTab(QSplitter):
    """`dashboard`, `alarms` and `differences` (shown only while comparing), in
    `column`, a vertical splitter: plots, differences, alarms."""

    MAX_TABLE_SHARE = 0.4  # of the tab's height: the plots keep the rest

    def __init__(self, smoothing: float, parent: QWidget | None = None):
        super().__init__(Qt.Horizontal, parent)
        self.dashboard = Dashboard(smoothing)
        self.alarms = AlarmsPanel()
        self.differences = DifferencesTable()
        self.compare_box = QWidget()
        layout = QVBoxLayout(self.compare_box)
        layout.setContentsMargins(6, 2, 6, 2)
        layout.addWidget(QLabel("<b>Preset fields that differ</b>"))
        layout.addWidget(self.differences, 1)
        self.compare_box.hide()
        self.column = QSplitter(Qt.Vertical)
        self.column.addWidget(self.dashboard)
        self.column.addWidget(self.compare_box)
        self.column.addWidget(self.alarms)
        self.column.setStretchFactor(0, 2)
        self.column.setStretchFactor(2, 1)
        self.column.setCollapsible(2, False)
        self.addWidget(self.column)

    def show_runs(self, runs: list[RunData], compare: bool, width: int = 0) -> None:
        """The plots of `runs` and the alarms of the first; comparing, the preset fields
        that differ under them (`width`: the window's, while this is not laid out)."""
        self.dashboard.set_runs(runs)
        if not compare:
            self.compare_box.hide()
            self.alarms.set_run(runs[0])
            return
        self.differences.show_runs([r.name for r in runs], [r.preset for r in runs],
                                   [run_colour(i) for i in range(len(runs))], shown_labels(runs))
        self.compare_box.show()
        sizes = self.column.sizes()
        total = sum(sizes) or self.height() or 700
        table = min(self.differences.needed_height() + 30, int(total * self.MAX_TABLE_SHARE))
        alarms = sizes[2] if len(sizes) > 2 and sizes[2] else total // 4
        self.column.setSizes([max(200, total - table - alarms), table, alarms])
        self.alarms.set_run(runs[0], of_run=True)
