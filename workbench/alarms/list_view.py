"""The list of a run's alarms: one row each (the step it fired at and its title, with a
swatch of the colour of its marker on the plots), in the order they fired, newest last."""

from __future__ import annotations

from PySide6.QtGui import QColor, QIcon, QPixmap
from PySide6.QtWidgets import QAbstractItemView, QListWidget, QListWidgetItem

from workbench.alarms.model import Alarm


def swatch(colour: str, size: int = 12) -> QIcon:
    pixmap = QPixmap(size, size)
    pixmap.fill(QColor(colour))
    return QIcon(pixmap)


class AlarmList(QListWidget):
    """Rows follow `set_alarms`; alarms that arrive are appended (the selection stays)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("alarm-list")
        self.setSelectionMode(QAbstractItemView.SingleSelection)
        self.setUniformItemSizes(True)
        self.alarms: list[Alarm] = []

    def set_alarms(self, alarms: list[Alarm]) -> int:
        """Show these alarms; returns how many were not shown before (the list is
        rebuilt when the earlier alarms are not the ones shown, e.g. after a resume
        dropped some; the rest then keep their place, and the selection if they can)."""
        before = {id(a.event) for a in self.alarms}
        new = sum(1 for a in alarms if id(a.event) not in before)
        shown = len(self.alarms)
        if len(alarms) < shown or any(a.event is not b.event for a, b in zip(alarms, self.alarms)):
            current = self.current_alarm()
            self.clear()
            self.alarms = []
            shown = 0
            for alarm in alarms:
                self._add(alarm)
            self.alarms = list(alarms)
            if current is not None and current in alarms:
                self.setCurrentRow(alarms.index(current))
            return new
        for alarm in alarms[shown:]:
            self._add(alarm)
        self.alarms = list(alarms)
        return new

    def _add(self, alarm: Alarm) -> None:
        item = QListWidgetItem(swatch(alarm.colour), alarm.row_text)
        item.setToolTip(alarm.saw or alarm.title)
        self.addItem(item)

    def current_alarm(self) -> Alarm | None:
        row = self.currentRow()
        return self.alarms[row] if 0 <= row < len(self.alarms) else None

    def row_texts(self) -> list[str]:
        return [self.item(i).text() for i in range(self.count())]
