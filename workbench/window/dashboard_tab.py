"""The Dashboard tab as the window lays it out: the plots over the Alarms panel (folded
to its header while there are none), and beside them, while runs are compared, the
preset fields that differ."""

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
    """`dashboard`, `alarms` and `differences` (shown only while comparing)."""

    COMPARE_WIDTH = 430

    def __init__(self, smoothing: float, parent: QWidget | None = None):
        super().__init__(Qt.Horizontal, parent)
        self.dashboard = Dashboard(smoothing)
        self.alarms = AlarmsPanel()
        self.differences = DifferencesTable()
        self.column = QSplitter(Qt.Vertical)
        self.column.addWidget(self.dashboard)
        self.column.addWidget(self.alarms)
        self.column.setStretchFactor(0, 2)
        self.column.setStretchFactor(1, 1)
        self.column.setCollapsible(1, False)
        self.addWidget(self.column)
        self.compare_box = QWidget()
        layout = QVBoxLayout(self.compare_box)
        layout.setContentsMargins(0, 6, 6, 6)
        layout.addWidget(QLabel("<b>Preset fields that differ</b>"))
        layout.addWidget(self.differences, 1)
        self.compare_box.hide()
        self.addWidget(self.compare_box)
        self.setStretchFactor(0, 4)
        self.setStretchFactor(1, 1)

    def show_runs(self, runs: list[RunData], compare: bool, width: int = 0) -> None:
        """The plots of `runs` and the alarms of the first; comparing, the preset fields
        that differ beside them (`width`: the window's, while this is not laid out)."""
        self.dashboard.set_runs(runs)
        if not compare:
            self.compare_box.hide()
            self.alarms.set_run(runs[0])
            return
        self.differences.show_runs([r.name for r in runs], [r.preset for r in runs],
                                   [run_colour(i) for i in range(len(runs))], shown_labels(runs))
        self.compare_box.show()
        width = self.width() or width
        # The table whole (each run's column and the field names), up to half the tab;
        # never narrower than before.
        table = min(max(self.COMPARE_WIDTH, self.differences.needed_width() + 6), max(self.COMPARE_WIDTH, width // 2))
        self.setSizes([max(400, width - table), table])
        self.alarms.set_run(runs[0], of_run=True)
