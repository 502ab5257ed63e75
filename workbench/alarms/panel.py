"""The Alarms panel under the dashboard: a header with the count ("Alarms (2)"), the
list of the shown run's alarms and the selected one's details, with two ways into its
steps: *Show samples* (the Samples tab filtered to them) and *Open in inspector* (the
first rollout recorded at one of them).

It follows its run (RunData.updated), like the other views: alarms that arrive on a live
run are appended and announced (`alarms_arrived`). With no alarms it folds to its header,
so the plots keep the room.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from workbench.alarms.details import AlarmDetails
from workbench.alarms.list_view import AlarmList
from workbench.alarms.model import Alarm, alarm_from_event, first_recorded, no_records_note
from workbench.inspector.index import TrajectoryIndex, recorded_per_step
from workbench.runs.rundata import RunData

# Heights of the unfolded panel: what it asks for when its first alarm arrives, and the
# least the list and the details need to be of use.
OPEN_HEIGHT, MIN_BODY = 300, 150


class AlarmsPanel(QFrame):
    """The alarms of one run (the first of a comparison, as the Samples tab)."""

    # --- Signals
    samples_requested = Signal(int, int)
    """(first step, last step): show the samples of these steps."""
    inspect_requested = Signal(int, int)
    """(step, rollout index): open this recorded rollout in the inspector."""
    alarms_arrived = Signal(list)
    """[Alarm, ...]: alarms read while the run was shown (a live run), not those it had."""
    alarm_selected = Signal(object)
    """Alarm: the one selected in the list (the dashboard brings its plot into view)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("alarms-panel")
        self.setFrameShape(QFrame.StyledPanel)
        self.run: RunData | None = None
        self._index: TrajectoryIndex | None = None
        self._target: tuple[int, int] | None = None  # the selected alarm's rollout for the inspector
        self._of_run = False

        self.title = QLabel()
        self.title.setObjectName("alarms-title")
        self.summary = QLabel()
        self.summary.setObjectName("alarms-summary")
        self.summary.setStyleSheet("color:#5f6368")
        self.list = AlarmList()
        self.details = AlarmDetails()
        self.show_samples = QPushButton("Show samples")
        self.show_samples.setObjectName("alarm-show-samples")
        self.show_samples.setToolTip("The Samples tab, filtered to the steps of this alarm's evidence")
        self.open_inspector = QPushButton("Open in inspector")
        self.open_inspector.setObjectName("alarm-open-inspector")
        self.open_inspector.setToolTip("The first rollout recorded token by token at one of this alarm's steps")
        self.note = QLabel()
        self.note.setObjectName("alarm-note")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color:#5f6368")

        header = QHBoxLayout()
        header.setContentsMargins(6, 4, 6, 2)
        header.addWidget(self.title)
        header.addWidget(self.summary, 1)
        buttons = QHBoxLayout()
        buttons.addWidget(self.show_samples)
        buttons.addWidget(self.open_inspector)
        buttons.addWidget(self.note, 1)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.details, 1)
        right_layout.addLayout(buttons)
        self.body = QSplitter(Qt.Horizontal)
        self.body.addWidget(self.list)
        self.body.addWidget(right)
        self.body.setStretchFactor(0, 1)
        self.body.setStretchFactor(1, 3)
        self.body.setMinimumHeight(MIN_BODY)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 4)
        layout.setSpacing(2)
        layout.addLayout(header)
        layout.addWidget(self.body, 1)

        self.list.currentRowChanged.connect(lambda _row: self._show_current())
        self.show_samples.clicked.connect(self._samples_clicked)
        self.open_inspector.clicked.connect(self._inspector_clicked)
        self._update_header()
        self._fold(True)
        self._show_current()
        self.hide()  # until a run is shown

    # --- Public API

    @property
    def alarms(self) -> list[Alarm]:
        return self.list.alarms

    @property
    def current(self) -> Alarm | None:
        return self.list.current_alarm()

    def set_run(self, run: RunData | None, of_run: bool = False) -> None:
        """Show this run's alarms, then follow it. `of_run`: name the run in the title
        (a comparison, whose other runs' alarms are on the plots only)."""
        if self.run is not None:
            self.run.updated.disconnect(self._run_updated)
        self.run = run
        self._of_run = of_run
        self.setVisible(run is not None)
        self._index = TrajectoryIndex.of_run(run)
        if run is not None:
            run.updated.connect(self._run_updated)
        self.list.clear()
        self.list.alarms = []
        self._take_alarms()
        if self.alarms:
            self.list.setCurrentRow(len(self.alarms) - 1)  # the newest
        self._show_current()

    def select_event(self, event: dict) -> bool:
        """Select the alarm of this event (a marker clicked on a plot)."""
        row = next((i for i, a in enumerate(self.alarms) if a.event is event), None)
        if row is None:
            return False
        self.list.setCurrentRow(row)
        return True

    # --- Following the run

    def _run_updated(self, update) -> None:
        if update.lifecycle:
            # run_started declares the record layout the index reads.
            self._index = TrajectoryIndex.of_run(self.run)
        if update.alarms or update.rewound:
            added = self._take_alarms()
            if self.list.currentRow() < 0 and self.alarms:
                self.list.setCurrentRow(len(self.alarms) - 1)
            if added:
                self.alarms_arrived.emit(self.alarms[-added:])
        if self._target is None and self.current is not None:
            self._update_links()  # a live run's trajectories may have reached the alarm's steps

    def _take_alarms(self) -> int:
        events = self.run.alarms if self.run is not None else []
        known = {id(a.event): a for a in self.alarms}
        added = self.list.set_alarms([known.get(id(e)) or alarm_from_event(e) for e in events])
        self._update_header()
        return added

    def _update_header(self) -> None:
        count = len(self.alarms)
        name = f" of {html.escape(self.run.name)}" if self._of_run and self.run is not None else ""
        colour = "#b00020" if count else "#333"
        self.title.setText(f"<b style='color:{colour}'>{'⚠ ' if count else ''}Alarms{name} ({count})</b>")
        if self.run is None:
            self.summary.setText("")
        elif count:
            newest = self.alarms[-1]
            self.summary.setText(f"newest: {newest.row_text}")
        else:
            self.summary.setText("none raised: the engine writes an alarm when the run stops learning or goes wrong")
        self._fold(count == 0)

    def _fold(self, folded: bool) -> None:
        """With no alarms, only the header shows; the first alarm unfolds the panel and
        takes room from the plots above it (the splitter it sits in)."""
        was_folded = not self.body.isVisibleTo(self)
        self.body.setVisible(not folded)
        self.setMaximumHeight(self.sizeHint().height() if folded else 16_777_215)
        splitter = self.parent()
        if was_folded and not folded and isinstance(splitter, QSplitter):
            sizes = splitter.sizes()
            i = splitter.indexOf(self)
            total = sum(sizes)
            if i >= 0 and total and sizes[i] < OPEN_HEIGHT:
                mine = min(OPEN_HEIGHT, total // 2)
                sizes = [max(0, s * (total - mine) // max(1, total - sizes[i])) for s in sizes]
                sizes[i] = mine
                splitter.setSizes(sizes)

    # --- The selected alarm

    def _show_current(self) -> None:
        alarm = self.current
        self.details.show_alarm(alarm)
        self.show_samples.setEnabled(alarm is not None)
        self._update_links()
        if alarm is not None:
            self.alarm_selected.emit(alarm)

    def _update_links(self) -> None:
        alarm = self.current
        self._target = first_recorded(self._index, alarm.first, alarm.last) if alarm is not None else None
        self.open_inspector.setEnabled(self._target is not None)
        if alarm is None:
            self.note.setText("")
        elif self._target is None:
            self.note.setText(no_records_note(alarm, recorded_per_step(self.run)))
        else:
            step, index = self._target
            self.note.setText(f"rollout {index} of step {step}")

    def _samples_clicked(self) -> None:
        alarm = self.current
        if alarm is not None:
            self.samples_requested.emit(alarm.first, alarm.last)

    def _inspector_clicked(self) -> None:
        self._update_links()  # the files may have changed since the alarm was selected
        if self._target is not None:
            self.inspect_requested.emit(*self._target)
