"""The Evaluate page's overlay bar, shown while several runs are on show: for each other
run with evaluations, a picker of the one to draw over the evaluation on show (its newest
finished one at first, or none), in the run's colour as the dashboard draws it; a note
names the runs that have none, and a chosen evaluation that cannot be read."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget

from workbench.dashboard.curves import run_colour
from workbench.runs.evaluation_compare import Overlay, default_evaluation, unique_names
from workbench.runs.evaluations import EVAL_FILE, Evaluation, EvaluationError, list_evaluations, load_evaluation

NOT_OVERLAID = "not overlaid"


class OverlayBar(QWidget):
    """Which evaluation of each other run on show is overlaid (`overlays()`)."""

    # --- Signals
    sig_changed = Signal()
    """The evaluations overlaid changed (a picker was moved, or the runs re-listed)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.first = ""  # the name of the run whose evaluation is on show
        self.runs: list[tuple[Path, str, int]] = []  # (folder, name, place among the runs on show) of the others
        self.pickers: dict[int, QComboBox] = {}  # by the run's place
        self.listed: list[list[str]] = []  # each other run's evaluations as the pickers list them
        self._said: list[tuple] = []  # _signature() when sig_changed was last emitted
        self._loaded: dict[Path, tuple[float, Evaluation | str]] = {}  # folder -> (eval.json's time, it or why not)
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.title = QLabel()
        self.note = QLabel()
        self.note.setObjectName("eval-overlay-note")
        self.note.setStyleSheet("color:#5f6368")
        self.setVisible(False)

    # --- Public API

    def set_runs(self, first: Path | None, others: list[Path]) -> None:
        """The run on show first and the others (their place after it gives their colour);
        the same runs again keep what was picked."""
        others = [Path(o) for o in others] if first is not None else []
        names = unique_names([Path(first).name] + [o.name for o in others]) if first is not None else [""]
        runs = [(folder, name, place + 1) for place, (folder, name) in enumerate(zip(others, names[1:]))]
        if runs == self.runs and names[0] == self.first:
            self.refresh()
            return
        self.first, self.runs = names[0], runs
        self._rebuild({})
        self._changed(always=True)

    def refresh(self) -> None:
        """Re-list the other runs' evaluations (one written since), keeping the ones picked;
        sig_changed when what is overlaid changed (or was written again)."""
        if self._listing() != self.listed:
            self._rebuild({place: picker.currentText() for place, picker in self.pickers.items()})
        self._changed()

    def overlays(self) -> list[Overlay]:
        """The evaluations picked that can be read, in the runs' order."""
        out = []
        for folder, name, place in self.runs:
            picker = self.pickers.get(place)
            chosen = picker.currentData() if picker is not None else None
            loaded = self._load(Path(chosen)) if chosen else None
            if isinstance(loaded, Evaluation):
                out.append(Overlay(name, place, loaded))
        return out

    def notes(self) -> list[str]:
        """The runs not overlaid, and why: no evaluation, or the one picked unreadable."""
        out = []
        for folder, name, place in self.runs:
            picker = self.pickers.get(place)
            if picker is None:
                out.append(f"{name} has no evaluation: not overlaid.")
                continue
            loaded = self._load(Path(picker.currentData())) if picker.currentData() else None
            if isinstance(loaded, str):
                out.append(f"{name}'s {picker.currentText()} cannot be overlaid: {loaded}.")
        return out

    # --- The bar

    def _listing(self) -> list[list[str]]:
        return [[e.name for e in list_evaluations(folder)] for folder, _name, _place in self.runs]

    def _signature(self) -> list[tuple]:
        """What is overlaid: each evaluation's folder and when its eval.json was written."""
        return [(o.position, o.evaluation.folder, self._loaded[o.evaluation.folder][0]) for o in self.overlays()]

    def _rebuild(self, kept: dict[int, str]) -> None:
        """A picker per other run with evaluations; `kept`: the evaluation (or none) each
        had picked, picked again where it is still there."""
        while self.row.count():
            widget = self.row.takeAt(0).widget()
            if widget is not None and widget not in (self.title, self.note):
                widget.deleteLater()
        self.pickers = {}
        self.listed = self._listing()
        self.setVisible(bool(self.runs))
        if not self.runs:
            return
        self.title.setText(f"<b>Compare</b> <span style='color:{run_colour(0)}'>━━ {html.escape(self.first)}</span>"
                           " with")
        self.row.addWidget(self.title)
        for folder, name, place in self.runs:
            entries = list_evaluations(folder)
            if not entries:
                continue
            picker = QComboBox()
            picker.setObjectName(f"eval-overlay-{place}")
            picker.setToolTip(f"{name}'s evaluations, the newest first: the one drawn over this run's")
            for entry in entries:
                picker.addItem(entry.name, str(entry.folder))
            picker.addItem(NOT_OVERLAID, None)
            wanted = kept.get(place)
            if wanted is None:
                found = default_evaluation(entries, self._load_or_raise)
                wanted = found.name if found is not None else NOT_OVERLAID
            picker.setCurrentIndex(max(0, picker.findText(wanted)))
            picker.currentIndexChanged.connect(self._picked)
            label = QLabel(f"<span style='color:{run_colour(place)}'>━━ <b>{html.escape(name)}</b></span>")
            label.setBuddy(picker)
            self.row.addWidget(label)
            self.row.addWidget(picker)
            self.pickers[place] = picker
        self.row.addWidget(self.note, 1)
        self._say_notes()

    def _picked(self, _index: int) -> None:
        self._changed(always=True)

    def _changed(self, always: bool = False) -> None:
        """sig_changed when what is overlaid is not what was last said (or `always`)."""
        self._say_notes()
        signature = self._signature()
        if always or signature != self._said:
            self._said = signature
            self.sig_changed.emit()

    def _say_notes(self) -> None:
        notes = self.notes()
        self.note.setText(" ".join(notes))

    def _load(self, folder: Path) -> Evaluation | str:
        """The evaluation in `folder`, or why it cannot be read; read again only when its
        eval.json was written since."""
        try:
            written = (folder / EVAL_FILE).stat().st_mtime
        except OSError:
            written = -1.0
        cached = self._loaded.get(folder)
        if cached is not None and cached[0] == written:
            return cached[1]
        try:
            loaded: Evaluation | str = load_evaluation(folder)
        except EvaluationError as error:
            loaded = str(error)
        self._loaded[folder] = (written, loaded)
        return loaded

    def _load_or_raise(self, folder: Path) -> Evaluation:
        loaded = self._load(folder)
        if isinstance(loaded, str):
            raise EvaluationError(loaded)
        return loaded
