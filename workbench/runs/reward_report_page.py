"""A reward-model run's report card page: how well its scores rank held-out (or a file's)
preference pairs, how calibrated they are, whether they follow length, and what the
engine checked before scoring, as `rl-engine reward-report` wrote it into the run's
`reports/` folder (workbench/runs/reward_report.py reads it).

*Compute report card* and *On a preference file…* run that command in the background.
A QProcess, as the playground's scorer (playground/scorer.py): a report has no reason to
outlive the window, its progress is read line by line as it comes, and its end arrives
as a signal, so the window never waits on it. The command is `command_for(run_dir,
pairs)`; tests give a stand-in.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox, QFileDialog, QHBoxLayout, QLabel, QPushButton, QScrollArea, QSplitter, QStackedWidget, QVBoxLayout,
    QWidget,
)

from workbench.runs.engine_job import EngineJob
from workbench.runs.job_page import JobPage
from workbench.runs.reward_report import (
    ReportError, RewardReport, created_text, list_reports, load_report, percent, progress_count, report_path,
    reward_report_command, source_text, written_file,
)
from workbench.runs.reward_report_views import CalibrationPlot, FindingsList, MarginPlot, PairsTable, length_html

PAIRS_FILTER = "Preference pairs (*.jsonl *.json *.csv *.parquet);;All files (*)"
INTRO = ("<h3>The reward model's report card</h3>"
         "<p>Before a policy is trained against this reward model, see how it scores pairs it was not trained on: "
         "how often it ranks the chosen answer first (accuracy), how far apart it puts them (the margin), "
         "whether its confidence matches how often it is right (calibration), and whether it simply prefers "
         "the longer answer. The engine scores the run's held-out pairs, or a preference file of yours, with "
         "the run's last checkpoint, and says in a line each what it saw and what to try.</p>"
         "<p>Nothing has been computed for this run yet.</p>")


class ReportJob(EngineJob):
    """One `rl-engine reward-report` in the background."""

    # --- Signals
    sig_progress = Signal(str)
    """The process's last progress line (its stderr), as it comes."""
    sig_finished = Signal(bool, str, object)
    """(ok, why it failed or "", the report file written or None). *Cancel* kills it
    (EngineJob.cancel): the engine writes the report only at the end."""

    FAILED = False

    def __init__(self, command: list[str], run_dir: Path, expected: Path, parent: QObject | None = None):
        super().__init__(command, run_dir, parent)
        self.expected = Path(expected)

    # --- EngineJob

    def stderr_read(self) -> None:
        line = self.last_line
        if line and not line.startswith("error: "):
            self.sig_progress.emit(line)

    def process_ended(self, code: int, crashed: bool) -> None:
        if self.cancelled:
            self.finish(False, "cancelled", None)
        elif not crashed and code == 0:
            written = written_file(self.stdout) or self.expected
            if written.is_file():
                self.finish(True, "", written)
            else:
                self.finish(False, f"the engine ended without writing a report (no {written})", None)
        else:
            self.finish(False, self.why_failed(code, crashed), None)


class RewardReportPage(JobPage):
    """The report cards of one reward-model run (`set_run`); job_page.py's JobPage runs the ReportJob."""

    # --- Signals
    sig_report_shown = Signal(object)
    """A report card is on show (its path)."""
    sig_compute_finished = Signal(bool, str)
    """A computation ended: (ok, why it failed or "")."""

    def __init__(self, command_for: Callable[[Path, Path | None], list[str]] = reward_report_command,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.command_for = command_for
        # Replaced in tests: asks for a preference file (None: the user cancelled).
        self.ask_pairs_file: Callable[[], Path | None] = self._ask_pairs_file
        self.report: RewardReport | None = None
        self._build()

    # --- Public API

    def set_run(self, run_dir: Path | None) -> None:
        """Show `run_dir`'s report cards (its held-out pairs' first), or the introduction."""
        if run_dir is not None and self.run_dir is not None and Path(run_dir) == self.run_dir:
            self.refresh_reports()
            return
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.report = None
        self._show_message("")
        self.refresh_reports()

    def refresh_reports(self, select: Path | None = None) -> None:
        """Re-list the run's report files (keeping the one on show, or selecting `select`)."""
        keep = select or (self.report.path if self.report else None)
        entries = list_reports(self.run_dir) if self.run_dir else []
        self.picker.blockSignals(True)
        self.picker.clear()
        for entry in entries:
            self.picker.addItem(entry.label, str(entry.path))
        paths = [e.path for e in entries]
        index = paths.index(keep) if keep in paths else 0
        self.picker.setCurrentIndex(index)
        self.picker.blockSignals(False)
        self.picker.setVisible(bool(entries))  # nothing to pick before a first report
        self.picker_label.setVisible(bool(entries))
        self._update_buttons()
        if not entries:
            self.report = None
            self.body.setCurrentWidget(self.intro)
        elif self.report is None or paths[index] != self.report.path or select is not None:
            self.show_report(paths[index])

    def show_report(self, path: Path) -> bool:
        """Load and show the report card in `path`; a file that cannot be read says why in the page."""
        try:
            report = load_report(path)
        except ReportError as error:
            self.report = None
            self._show_message(f"Cannot show this report card: {error}")
            self.body.setCurrentWidget(self.intro if self.picker.count() == 0 else self.unreadable)
            return False
        self.report = report
        problems = "; ".join(report.problems)
        self._show_message(problems[:1].upper() + problems[1:] + "." if problems else "", "#8a6d00")
        self._fill(report)
        self.body.setCurrentWidget(self.content)
        self.sig_report_shown.emit(report.path)
        return True

    def compute(self, pairs: Path | None = None) -> bool:
        """Start the report card of the held-out pairs, or of the preference file `pairs`
        (False, nothing started: no run, or one is being computed)."""
        if self.run_dir is None or self.running:
            return False
        command = self.command_for(self.run_dir, pairs)
        return self._start_job(ReportJob(command, self.run_dir, report_path(self.run_dir, pairs), self))

    def compute_on_file(self) -> bool:
        path = self.ask_pairs_file()
        return self.compute(Path(path)) if path else False

    # --- The page

    def _build(self) -> None:
        self.picker = QComboBox()
        self.picker.setObjectName("report-picker")
        self.picker.setMinimumContentsLength(18)
        self.picker.setToolTip("The report cards computed for this run: its held-out pairs, and each preference file")
        self.compute_button = QPushButton("Compute report card")
        self.compute_button.setObjectName("compute-report")
        self.compute_button.setToolTip("Score the run's held-out pairs with its last checkpoint "
                                       "(rl-engine reward-report), in the background")
        self.file_button = QPushButton("On a preference file…")
        self.file_button.setObjectName("compute-report-file")
        self.file_button.setToolTip("Score the pairs of a preference file (.jsonl, .json, .csv, .parquet: prompt, "
                                    "chosen, rejected) with the run's last checkpoint")
        self.cancel_button = QPushButton("Cancel")
        self._build_job_widgets("report", self.cancel_button, 160)
        self.progress.setTextVisible(False)
        self.progress_line.setObjectName("report-progress")
        top = QHBoxLayout()
        self.picker_label = QLabel("Report card:")
        top.addWidget(self.picker_label)
        top.addWidget(self.picker)
        top.addWidget(self.compute_button)
        top.addWidget(self.file_button)
        top.addWidget(self.progress)
        top.addWidget(self.progress_line)
        top.addWidget(self.cancel_button)
        top.addStretch(1)
        self.body = QStackedWidget()
        self.intro = self._build_intro()
        self.unreadable = QLabel("Compute the report card again to replace this file.")
        self.unreadable.setAlignment(Qt.AlignCenter)
        self.content = self._build_content()
        for page in (self.intro, self.unreadable, self.content):
            self.body.addWidget(page)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(top)
        layout.addWidget(self.message)
        layout.addWidget(self.body, 1)
        self.picker.currentIndexChanged.connect(self._picked)
        self.compute_button.clicked.connect(lambda: self.compute())
        self.file_button.clicked.connect(self.compute_on_file)
        self.cancel_button.clicked.connect(self.cancel)
        self._set_busy(False)
        self._show_message("")
        self.body.setCurrentWidget(self.intro)

    def _build_intro(self) -> QWidget:
        intro = QWidget()
        text = QLabel(INTRO)
        text.setObjectName("report-intro")
        text.setWordWrap(True)
        # A wrapped label centred by alignment is given its one-line height: ask for the wrapped one.
        text.setFixedWidth(680)
        text.setMinimumHeight(text.heightForWidth(680))
        self.intro_button = QPushButton("Compute report card")
        self.intro_button.setObjectName("intro-compute-report")
        self.intro_button.clicked.connect(lambda: self.compute())
        layout = QVBoxLayout(intro)
        layout.addStretch(1)
        layout.addWidget(text, 0, Qt.AlignHCenter)
        layout.addWidget(self.intro_button, 0, Qt.AlignHCenter)
        layout.addStretch(2)
        return intro

    def _build_content(self) -> QWidget:
        self.header = QLabel()
        self.header.setObjectName("report-header")
        self.header.setWordWrap(True)
        self.header.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.verdicts = FindingsList("verdict")
        self.length = QLabel()
        self.length.setObjectName("report-length")
        self.length.setWordWrap(True)
        self.preflight = FindingsList("preflight")
        column = QWidget()
        left = QVBoxLayout(column)
        left.setContentsMargins(0, 0, 6, 0)
        for title, widget in ((None, self.header), ("Verdict", self.verdicts), ("Length", self.length),
                              ("Checked before scoring", self.preflight)):
            if title:
                heading = QLabel(f"<b>{title}</b>")
                heading.setStyleSheet("margin-top:8px; font-size:11pt")
                left.addWidget(heading)
            left.addWidget(widget)
        left.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(column)
        self.margin_plot = MarginPlot()
        self.calibration_plot = CalibrationPlot()
        self.pairs = PairsTable()
        plots = QSplitter(Qt.Horizontal)
        plots.addWidget(self.margin_plot)
        plots.addWidget(self.calibration_plot)
        right = QSplitter(Qt.Vertical)
        right.addWidget(plots)
        right.addWidget(self.pairs)
        right.setStretchFactor(0, 1)
        right.setStretchFactor(1, 1)
        content = QSplitter(Qt.Horizontal)
        content.addWidget(scroll)
        content.addWidget(right)
        content.setStretchFactor(0, 2)
        content.setStretchFactor(1, 3)
        content.setSizes([560, 900])
        return content

    def _fill(self, report: RewardReport) -> None:
        self.header.setText(header_html(report))
        self.verdicts.show_findings(report.lines, "This report has no verdict lines.")
        self.length.setText(length_html(report.length))
        self.preflight.show_findings(report.preflight, "This report lists no checks made before scoring.")
        self.margin_plot.show_margin(report.margin)
        self.calibration_plot.show_calibration(report.calibration)
        self.pairs.show_pairs(report.pairs)

    # --- Reactions

    def _picked(self, index: int) -> None:
        if index >= 0:
            self.show_report(Path(self.picker.itemData(index)))

    def _progressed(self, line: str) -> None:
        self.progress_line.setText(line)
        count = progress_count(line)
        if count is not None:
            self.progress.setRange(0, count[1])
            self.progress.setValue(count[0])

    def _job_finished(self, ok: bool, message: str, written) -> None:
        job = self._job_ended()
        if job is not None:
            if ok:
                self.refresh_reports(select=Path(written))
            elif job.cancelled:
                self._show_message("Cancelled; no report card was written.", "#5f6368")
            else:
                self._show_message(f"The report card could not be computed: {message}")
        self.sig_compute_finished.emit(ok, message)

    def _update_buttons(self, busy: bool | None = None) -> None:
        busy = self.running if busy is None else busy
        for button in (self.compute_button, self.file_button, self.intro_button):
            button.setEnabled(self.run_dir is not None and not busy)
        self.compute_button.setText("Compute again" if self.picker.count() else "Compute report card")

    def _ask_pairs_file(self) -> Path | None:
        start = str(self.run_dir) if self.run_dir else ""
        path, _ = QFileDialog.getOpenFileName(self, "Score a preference file", start, PAIRS_FILTER)
        return Path(path) if path else None

    def _catch_up(self) -> None:
        self.refresh_reports()  # a report written from a terminal since


def header_html(report: RewardReport) -> str:
    """The report's accuracy, checkpoint, step, the pairs it scored and when."""
    checkpoint = Path(report.checkpoint).name if report.checkpoint else "—"
    step = "" if report.step is None else f" (step {report.step})"
    headline = f"Accuracy {percent(report.accuracy)}" if report.accuracy is not None else "No pairs scored"
    source = f"on {html.escape(source_text(report))}" if report.accuracy is not None else \
        "the checks below say why"
    return (f"<span style='font-size:16pt'><b>{headline}</b></span><br>{source}<br>"
            f"<span style='color:#5f6368'>checkpoint <b>{html.escape(checkpoint)}</b>{step} · computed "
            f"{created_text(report.created)}</span>")
