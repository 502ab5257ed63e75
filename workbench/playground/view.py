"""The Reward playground tab: score a run's logged completions (or typed ones) with
edited rewards, and see each component, the total and, for GRPO groups, the advantage
beside what the run had.

Left: where the completions come from (workbench/playground/source.py) and the set-up
form's rewards editor (workbench/setup/rewards_editor.py) on the playground's own copy
of the preset, given that document directly.
Right: Score, which runs `rl-engine score-rewards` in the background (scorer.py), and
the table (results.py). "Use these rewards in Set-up" writes the edited rewards into
the set-up form's preset and shows it.
"""

from __future__ import annotations

import copy
import linecache
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from engine.run import rundir
from workbench.playground.model import (Completion, ScoreError, ScoreResult, TypedInputError, build_request,
                                        rewards_for_setup, run_preset)
from workbench.playground.results import ResultsTable
from workbench.playground.scorer import RewardScorer
from workbench.playground.source import RUN, SourceBox
from workbench.setup.document import PresetDocument
from workbench.setup.rewards_editor import RewardsEditor

ERROR_STYLE = "color: #b00020;"
NOTE_STYLE = "color: #5f6368;"


def describe_error(error: ScoreError) -> str:
    """The error as the tab shows it: the message, then FILE:LINE and that line's code."""
    text = error.message
    if error.file:
        text += f"\n\nat {error.where}"
        code = linecache.getline(error.file, error.line or 0).strip() if error.line else ""
        if code:
            text += f"\n    {code}"
    return text


class FittingScroll(QScrollArea):
    """Scrolls up and down only, and asks for the width of what it holds: at 1024 px the
    rewards editor scrolled sideways, its Remove buttons cut at the pane's edge."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)

    def setWidget(self, widget: QWidget) -> None:
        super().setWidget(widget)
        widget.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        if watched is self.widget() and event.type() == QEvent.LayoutRequest:
            self.updateGeometry()  # a reward row added or removed: the width it needs changed
        return super().eventFilter(watched, event)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        if self.widget() is None:
            return hint
        width = self.widget().minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width() + \
            2 * self.frameWidth()
        return QSize(max(hint.width(), width), hint.height())


class PlaygroundView(QWidget):
    # --- Signals
    sig_scored = Signal(object)
    """A scoring ended and its outcome is shown: a ScoreResult or a ScoreError."""

    def __init__(self, setup_doc: PresetDocument, current_run: Callable[[], Path | None] = lambda: None,
                 runs_folder: Callable[[], Path | None] = lambda: None, show_setup: Callable[[], None] = lambda: None,
                 parent: QWidget | None = None, python: str | None = None):
        super().__init__(parent)
        self.setObjectName("reward-playground")
        self.setup_doc = setup_doc
        self.current_run, self.runs_folder, self.show_setup = current_run, runs_folder, show_setup
        self.doc = PresetDocument()  # the preset whose rewards are edited here
        self.result: ScoreResult | None = None
        self.error: ScoreError | None = None
        self._scored: list[Completion] = []  # the completions of the scoring in progress / shown
        self._loaded_once = False

        self.source = SourceBox(self)
        # The set-up form's rewards editor on this copy, with the schema's problems about
        # the rewards next to their rows; the set-up form's preset is untouched until
        # "Use these rewards in Set-up".
        self.rewards_pane = QWidget(self)
        self.rewards = RewardsEditor(self.doc, self.rewards_pane)
        pane_layout = QVBoxLayout(self.rewards_pane)
        pane_layout.setContentsMargins(0, 0, 0, 0)
        pane_layout.addWidget(self.rewards)
        pane_layout.addStretch(1)
        self.doc.changed.connect(lambda _path: self.refresh_rewards())
        self.doc.replaced.connect(self.refresh_rewards)
        self.refresh_rewards()
        self.from_run = QPushButton("Rewards of the run", self)
        self.from_run.setToolTip("Start again from the rewards the chosen run trained with")
        self.from_setup = QPushButton("Rewards of Set-up", self)
        self.from_setup.setToolTip("Start again from the rewards in the Set-up tab's preset")
        self.use_in_setup = QPushButton("Use these rewards in Set-up", self)
        self.use_in_setup.setObjectName("playground-use-in-setup")
        self.use_in_setup.setToolTip("Write these rewards into the Set-up tab's preset (unsaved) and show it")
        self.score_button = QPushButton("Score", self)
        self.score_button.setObjectName("playground-score")
        self.score_button.setToolTip("Score the completions with these rewards, in the engine (a few seconds)")
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setEnabled(False)
        self.busy = QProgressBar(self)
        self.busy.setRange(0, 0)  # indeterminate: the engine reports no progress
        self.busy.setMaximumWidth(140)
        self.busy.hide()
        self.status = QLabel(self)
        self.status.setObjectName("playground-status")
        self.status.setStyleSheet(NOTE_STYLE)
        self.status.setWordWrap(True)
        self.error_label = QLabel(self)
        self.error_label.setObjectName("playground-error")
        self.error_label.setStyleSheet(ERROR_STYLE)
        self.error_label.setWordWrap(True)
        self.error_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.error_label.hide()
        self.notes = QLabel(self)
        self.notes.setObjectName("playground-notes")
        self.notes.setStyleSheet(NOTE_STYLE)
        self.notes.setWordWrap(True)
        self.notes.hide()
        self.table = ResultsTable(self)
        self.scorer = RewardScorer(self, python=python)

        reload_line = QHBoxLayout()
        reload_line.addWidget(self.from_run)
        reload_line.addWidget(self.from_setup)
        reload_line.addStretch(1)
        left = QWidget(self)
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(self.source)
        rewards_scroll = FittingScroll(self)
        rewards_scroll.setWidget(self.rewards_pane)
        left_layout.addWidget(rewards_scroll, 1)
        left_layout.addLayout(reload_line)
        left_layout.addWidget(self.use_in_setup)
        score_line = QHBoxLayout()
        score_line.addWidget(self.score_button)
        score_line.addWidget(self.cancel_button)
        score_line.addWidget(self.busy)
        score_line.addWidget(self.status, 1)
        right = QWidget(self)
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addLayout(score_line)
        right_layout.addWidget(self.error_label)
        right_layout.addWidget(self.notes)
        right_layout.addWidget(self.table, 1)
        split = QSplitter(Qt.Horizontal, self)
        split.addWidget(left)
        split.addWidget(right)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        split.setSizes([560, 940])  # the table needs the room: a column per component
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(split)

        self.source.sig_run_chosen.connect(self._run_chosen)
        self.source.sig_changed.connect(self._completions_changed)
        self.doc.changed.connect(lambda _path: self._rewards_edited())
        self.from_run.clicked.connect(lambda: self.load_run_rewards())
        self.from_setup.clicked.connect(self.load_setup_rewards)
        self.use_in_setup.clicked.connect(self.use_rewards_in_setup)
        self.score_button.clicked.connect(self.score)
        self.cancel_button.clicked.connect(self.scorer.cancel)
        self.scorer.sig_finished.connect(self._scored_done)

    # --- Public API

    def refresh_rewards(self) -> None:
        """Redraw the rewards editor from the document, with its problems."""
        self.rewards.refresh()
        self.rewards.show_problems(self.doc.validate()[1])

    def refresh_runs(self) -> None:
        """List the runs again (the window's open run may have changed): called when the
        tab is shown. With no run anywhere, the rewards start from the set-up form's."""
        folder = self.runs_folder()
        self.source.set_runs(self.current_run(), Path(folder) if folder else None)
        if not self._loaded_once:
            self._loaded_once = True
            if self.source.run is None:
                self.load_setup_rewards()

    def load_run_rewards(self, run=None) -> None:
        """The rewards (and algorithm) of the chosen run's preset, to edit."""
        run = run or self.source.run
        if run is None:
            self._say("Choose a run first (or type completions and start from Set-up's rewards).")
            return
        path = run.run_dir / rundir.PRESET_FILE
        data = run_preset(run.run_dir, run.preset)
        self.doc.new(data, clean=True)
        self.doc.path = path  # custom reward files are found from the run's folder
        self.refresh_rewards()
        self._loaded_once = True
        self._say(f"Rewards of {run.name}: edit them and press Score.")

    def load_setup_rewards(self) -> None:
        """The set-up form's preset (rewards, algorithm), to edit."""
        self.doc.new(copy.deepcopy(self.setup_doc.data), clean=True)
        self.doc.path = self.setup_doc.path
        self.refresh_rewards()
        self._say("Rewards of the Set-up tab's preset: edit them and press Score.")

    def score(self) -> bool:
        """Score the completions with the edited rewards in the background. False when
        nothing started: a scoring is running, or there is nothing (valid) to score."""
        if self.scorer.running:
            self._say("Already scoring: wait for it, or Cancel.")
            return False
        try:
            completions = self.source.completions()
        except TypedInputError as exc:
            self._show_error(ScoreError(str(exc)))
            return False
        if not completions:
            self._show_error(ScoreError("Nothing to score: choose a run and a step with samples, or type "
                                        "completions in."))
            return False
        preset = copy.deepcopy(self.doc.data)
        request = build_request(preset, self.doc.base_dir, completions, self.source.group_size(preset),
                                fields_from_data=self.source.mode == RUN)
        self._scored = completions
        self.scorer.score(request)
        self.score_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.busy.show()
        self.error_label.hide()
        self._say(f"Scoring {len(completions)} completions in the engine…")
        return True

    def use_rewards_in_setup(self) -> None:
        """Write the edited rewards into the set-up form's preset and show it."""
        rewards = rewards_for_setup(self.doc.get("rewards") or [], self.doc.base_dir, self.setup_doc.base_dir)
        self.setup_doc.set("rewards", rewards)
        self._say("These rewards are now in the Set-up tab's preset (not saved yet).")
        self.show_setup()

    # --- Internals

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh_runs()

    def _say(self, text: str) -> None:
        self.status.setText(text)

    def _run_chosen(self, run) -> None:
        if run is not None:
            self.load_run_rewards(run)

    def _completions_changed(self) -> None:
        self.result = None
        try:
            completions = self.source.completions()
        except TypedInputError:
            completions = []
        self.table.show_completions(completions)
        self.notes.hide()

    def _rewards_edited(self) -> None:
        if self.result is not None and not self.scorer.running:
            self._say("The rewards changed since this score: press Score again.")

    def _show_error(self, error: ScoreError) -> None:
        self.error = error
        self.error_label.setText(describe_error(error))
        self.error_label.show()
        self._say("Scoring failed: see the message." if error.message != "cancelled" else "Cancelled.")

    def _scored_done(self, outcome) -> None:
        self.score_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.busy.hide()
        if isinstance(outcome, ScoreError):
            self._show_error(outcome)
        else:
            self.result, self.error = outcome, None
            self.error_label.hide()
            self.table.show_completions(self._scored, outcome)
            notes = list(outcome.notes)
            if not outcome.advantages_computed and outcome.advantages_reason:
                notes.insert(0, f"No advantages: {outcome.advantages_reason}.")
            self.notes.setText("\n".join(notes))
            self.notes.setVisible(bool(notes))
            self._say(f"Scored {len(self._scored)} completions.")
        self.sig_scored.emit(outcome)
