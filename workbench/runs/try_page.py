"""The Try tab of a run: type a prompt (or pick a held-out one), and read the answers of the
run's base model and of one of its checkpoints side by side, each token coloured by its
logprob or by log p_checkpoint - log p_base, so one sees *where* training changed the model.

*Try* runs `rl-engine try RUN --json` in the background (engine_job.py's QProcess, as the
Evaluate tab runs `rl-engine eval`): its `progress DONE/4 WHAT` lines move a bar, *Cancel*
kills it (it writes nothing), and its `error:` line is shown when it fails. The answers are
read by try_answers.py and drawn with the inspector's token text and colour maps (one scale
over both sides, so a colour means one number left and right).

`start_given` scores a given answer instead (the Evaluate tab's sample: `--completion`):
both sides show the same tokens, each under its own model, until *Sample instead*.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Callable

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDoubleSpinBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QSpinBox, QSplitter,
    QVBoxLayout, QWidget,
)

from workbench.inspector.text import TokenTextView
from workbench.inspector.text_paint import token_colours
from workbench.inspector.widgets import Legend
from workbench.runs.engine_job import EngineJob
from workbench.runs.evaluations import run_checkpoints
from workbench.runs.job_page import JobPage
from workbench.runs.lineage import is_reward_model_run
from workbench.runs.try_answers import (
    QUANTITIES, Answer, GivenAnswer, TryReport, TryReportError, load_report, progress_of, run_defaults,
    shared_scale, token_tooltip, try_command,
)

INTRO = ("Type a prompt (or tick <i>held-out</i> and pick one of the run's held-out prompts), then <b>Try</b>: the "
         "run's base model and the checkpoint answer it side by side, with the preset's chat template and system "
         "prompt as in training. Colour by <b>log-ratio</b> to see where training changed the model: green tokens "
         "the checkpoint finds more likely than the base did, pink less.")


class TryJob(EngineJob):
    """One `rl-engine try` in the background."""

    # --- Signals
    sig_progress = Signal(int, int, str)
    """(done, total, what) from the `progress DONE/TOTAL WHAT` lines."""
    sig_finished = Signal(str, str, object)
    """(outcome: done | cancelled | failed, why it failed or "", the TryReport or None).
    *Cancel* kills it (EngineJob.cancel): it writes nothing, so nothing is lost."""

    def stderr_read(self) -> None:
        count = progress_of(self.last_line)
        if count is not None:
            self.sig_progress.emit(*count)

    def process_ended(self, code: int, crashed: bool) -> None:
        if self.cancelled:
            self.finish("cancelled", "", None)
        elif crashed or code != 0:
            self.finish("failed", self.why_failed(code, crashed), None)
        else:
            try:
                self.finish("done", "", load_report(self.stdout))
            except TryReportError as error:
                self.finish("failed", str(error), None)


class AnswerPanel(QWidget):
    """One model's answer: a header (the model, the answer's totals) and its tokens after
    the (dimmed) prompt, each with a tooltip."""

    def __init__(self, name: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.header = QLabel()
        self.header.setObjectName(f"try-header-{name}")
        self.header.setTextFormat(Qt.RichText)
        self.header.setWordWrap(True)
        self.view = TokenTextView()
        self.view.setObjectName(f"try-text-{name}")
        self.answer: Answer | None = None
        self.labels = ("", "")
        self.view.tooltip_for = self._tooltip
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.header)
        layout.addWidget(self.view, 1)

    def show_answer(self, answer: Answer, prompt: str, own: str, other: str) -> None:
        self.answer, self.labels = answer, (own, other)
        ratio = answer.mean_log_ratio
        self.header.setText(
            f"<b>{html.escape(own)}</b> · {len(answer.tokens)} tokens · sum log p {answer.sum_logprob:.3f} · mean "
            f"log-ratio {'—' if ratio is None else f'{ratio:+.4f}'}{' · cut at the length limit' * answer.truncated}"
            f"<br><span style='color:#333'>{html.escape(answer.text)}</span>")
        self.view.set_content(prompt, answer.tokens)

    def colour(self, key: str, scale) -> None:
        if self.answer is not None:
            self.view.set_colours(*token_colours(self.answer.values(key), scale, self.answer.tool))

    def _tooltip(self, i: int) -> str:
        if self.answer is None or not 0 <= i < len(self.answer.tokens):
            return ""
        return token_tooltip(self.answer, i, *self.labels)


class TryPage(JobPage):
    """Try a checkpoint of one run (`set_run`); job_page.py's JobPage runs the TryJob."""

    # --- Signals
    sig_finished = Signal(str, str)
    """A try ended: (done | cancelled | failed, why it failed or "")."""

    def __init__(self, command_for: Callable[..., list[str]] = try_command, parent: QWidget | None = None):
        super().__init__(parent)
        self.command_for = command_for  # try_command's arguments -> argv; tests give a stand-in
        self.report: TryReport | None = None
        self.given: GivenAnswer | None = None  # an answer to score instead of sampling
        self.held_out_count = 0  # the run's held-out prompts, as its preset says
        self._build()

    # --- Public API

    def set_run(self, run_dir: Path | None) -> None:
        """The run whose base and checkpoints are tried; its preset's sampling settings as
        the form's defaults."""
        same = run_dir is not None and self.run_dir is not None and Path(run_dir) == self.run_dir
        if not same and self.running:
            self.job.cancel()  # its answers would be another run's
        self.run_dir = None if run_dir is None else Path(run_dir)
        if not same:
            self.given = None
            defaults = run_defaults(self.run_dir) if self.run_dir else run_defaults(Path("/nowhere"))
            self.temperature_spin.setValue(defaults.temperature)
            self.max_tokens_spin.setValue(max(1, defaults.max_new_tokens))
            self.held_out_count = defaults.held_out
            self.held_out_spin.setRange(0, max(0, defaults.held_out - 1))
            self.held_out_box.setChecked(False)
            self.tools_note.setText(
                f"This run's episodes use tools ({html.escape(defaults.tools)}): the answers run the same episode "
                "code with the same tools as training; the tools' tokens are grey (no model wrote them, so they "
                "have no logprob)." if defaults.tools else "")
            self.tools_note.setVisible(bool(defaults.tools))
            self.report = None
            self._show_answers()
            self._show_message("")
        self._fill_checkpoints()
        self._show_given()

    def start_given(self, given: GivenAnswer) -> bool:
        """Score `given` (its held-out prompt, its text) under the base and its checkpoint
        (False, nothing started: a try is running, or the checkpoint is not in the run)."""
        if self.running:
            self._show_message("A try is running: cancel it, then open the sample's tokens again.")
            return False
        if self.run_dir is None or Path(given.run_dir).resolve() != self.run_dir.resolve():
            self.set_run(given.run_dir)
        checkpoint = self.checkpoint_box.findData(given.checkpoint) if given.checkpoint else 0
        if checkpoint < 0 or self.checkpoint_box.count() == 0:
            self._show_message(f"{given.checkpoint or 'A checkpoint'} is not in this run's complete checkpoints "
                               "any more: nothing to score the sample under.")
            return False
        self.checkpoint_box.setCurrentIndex(checkpoint)
        self.held_out_spin.setMaximum(max(self.held_out_spin.maximum(), given.held_out))  # the evaluation had it
        self.held_out_spin.setValue(given.held_out)
        self.held_out_box.setChecked(True)
        if given.max_new_tokens:
            self.max_tokens_spin.setValue(given.max_new_tokens)
        self.given = given
        self._show_given()
        return self.start()

    def sample_instead(self) -> None:
        """Drop the given answer: Try samples again."""
        self.given = None
        self.held_out_spin.setMaximum(max(0, self.held_out_count - 1))
        self.held_out_box.setChecked(self.held_out_box.isChecked() and self.held_out_count > 0)
        self._show_given()

    def start(self) -> bool:
        """Try the checkpoint picked on the prompt typed or held out (False, nothing started:
        no run, no checkpoint, no prompt, or one is running)."""
        if self.run_dir is None or self.running or self.checkpoint_box.count() == 0:
            return False
        held_out = self.held_out_spin.value() if self.held_out_box.isChecked() else None
        prompt = self.prompt_edit.text()
        if held_out is None and not prompt.strip():
            self._show_message("Type a prompt first, or tick held-out and pick one of the run's held-out prompts.")
            return False
        greedy = self.decoding_box.currentData() == "greedy"
        extra = {"completion": self.given.completion} if self.given is not None else {}  # only when given
        command = self.command_for(
            self.run_dir, self.checkpoint_box.currentData(), prompt=None if held_out is not None else prompt,
            held_out=held_out, greedy=greedy, samples=self.samples_spin.value(),
            temperature=None if greedy else self.temperature_spin.value(),
            seed=None if greedy else self.seed_spin.value(), max_new_tokens=self.max_tokens_spin.value(), **extra)
        return self._start_job(TryJob(command, self.run_dir, self))

    @property
    def quantity(self) -> str:
        return self.quantity_box.currentData()

    # --- The page

    def _build(self) -> None:
        self.checkpoint_box = QComboBox()
        self.checkpoint_box.setObjectName("try-checkpoint")
        self.checkpoint_box.setToolTip("The checkpoint that answers beside the base model (no adapter)")
        self.prompt_edit = QLineEdit()
        self.prompt_edit.setObjectName("try-prompt")
        self.prompt_edit.setPlaceholderText("a prompt, as the data's (it goes through the chat template)")
        self.held_out_box = QCheckBox("held-out #")
        self.held_out_box.setObjectName("try-held-out")
        self.held_out_box.setToolTip("Use one of the run's held-out prompts (never trained on) instead of a typed one")
        self.held_out_spin = QSpinBox()
        self.held_out_spin.setObjectName("try-held-out-index")
        self.decoding_box = QComboBox()
        self.decoding_box.setObjectName("try-decoding")
        self.decoding_box.addItem("greedy", "greedy")
        self.decoding_box.addItem("sampled", "sampled")
        self.decoding_box.setToolTip("greedy: the most likely token each time (one answer); sampled: K answers at "
                                     "the temperature, both models with the same seed")
        self.samples_spin = QSpinBox()
        self.samples_spin.setObjectName("try-samples")
        self.samples_spin.setRange(1, 16)
        self.samples_spin.setValue(4)
        self.samples_spin.setPrefix("K ")
        self.temperature_spin = QDoubleSpinBox()
        self.temperature_spin.setObjectName("try-temperature")
        self.temperature_spin.setRange(0.05, 5.0)
        self.temperature_spin.setSingleStep(0.1)
        self.temperature_spin.setPrefix("T ")
        self.seed_spin = QSpinBox()
        self.seed_spin.setObjectName("try-seed")
        self.seed_spin.setRange(0, 2**31 - 1)
        self.seed_spin.setPrefix("seed ")
        self.max_tokens_spin = QSpinBox()
        self.max_tokens_spin.setObjectName("try-max-tokens")
        self.max_tokens_spin.setRange(1, 8192)
        self.max_tokens_spin.setToolTip("An answer's length limit in tokens (the preset's max_completion_length)")
        self.try_button = QPushButton("Try")
        self.try_button.setObjectName("try-run")
        self.try_button.setToolTip("rl-engine try RUN --checkpoint … in the background")
        self.try_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setObjectName("try-cancel")
        self._build_job_widgets("try", self.cancel_button, 140)
        first = QHBoxLayout()
        for widget in (QLabel("<b>Try</b> the base and"), self.checkpoint_box, QLabel("on"), self.prompt_edit,
                       self.held_out_box, self.held_out_spin):
            first.addWidget(widget)
        first.setStretchFactor(self.prompt_edit, 1)
        second = QHBoxLayout()
        for widget in (self.decoding_box, self.samples_spin, self.temperature_spin, self.seed_spin,
                       QLabel("max tokens"), self.max_tokens_spin, self.try_button, self.progress,
                       self.progress_line, self.cancel_button):
            second.addWidget(widget)
        second.addStretch(1)
        self.intro = QLabel(INTRO)
        self.intro.setWordWrap(True)
        self.intro.setStyleSheet("color:#444")
        self.tools_note = QLabel()
        self.tools_note.setObjectName("try-tools-note")
        self.tools_note.setWordWrap(True)
        self.tools_note.setStyleSheet("QLabel { color: #5c4400; background: #fff8e1; padding: 3px 6px; }")
        self.given_note = QLabel()
        self.given_note.setObjectName("try-given-note")
        self.given_note.setWordWrap(True)
        self.given_note.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.sample_button = QPushButton("Sample instead")
        self.sample_button.setObjectName("try-sample-instead")
        self.sample_button.setToolTip("Drop the given answer: Try samples the prompt again")
        given_row = QHBoxLayout()
        given_row.addWidget(self.given_note, 1)
        given_row.addWidget(self.sample_button)
        self.quantity_box = QComboBox()
        self.quantity_box.setObjectName("try-quantity")
        self.quantity_box.addItem("log-ratio (checkpoint − base)", "log_ratio")
        self.quantity_box.addItem("logprob (the answering model's)", "logprob")
        self.quantity_box.setToolTip("What the token colours show; one scale over both answers")
        self.answer_spin = QSpinBox()
        self.answer_spin.setObjectName("try-answer")
        self.answer_spin.setPrefix("answer ")
        self.answer_spin.setToolTip("Which of the K sampled answers each side shows")
        self.legend = Legend()
        third = QHBoxLayout()
        third.addWidget(QLabel("Colour by"))
        third.addWidget(self.quantity_box)
        third.addWidget(self.answer_spin)
        third.addWidget(self.legend, 1)
        self.prompt_line = QLabel()
        self.prompt_line.setObjectName("try-prompt-line")
        self.prompt_line.setWordWrap(True)
        self.prompt_line.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.base_panel, self.checkpoint_panel = AnswerPanel("base"), AnswerPanel("checkpoint")
        self.sides = QSplitter(Qt.Horizontal)
        self.sides.addWidget(self.base_panel)
        self.sides.addWidget(self.checkpoint_panel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(first)
        layout.addLayout(second)
        layout.addLayout(given_row)
        for widget in (self.intro, self.tools_note, self.message):
            layout.addWidget(widget)
        layout.addLayout(third)
        layout.addWidget(self.prompt_line)
        layout.addWidget(self.sides, 1)
        self.try_button.clicked.connect(self.start)
        self.prompt_edit.returnPressed.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.sample_button.clicked.connect(self.sample_instead)
        self.prompt_edit.textChanged.connect(lambda _text: self._update_buttons())
        self.held_out_box.toggled.connect(lambda _on: self._update_buttons())
        self.decoding_box.currentIndexChanged.connect(lambda _i: self._update_buttons())
        self.quantity_box.currentIndexChanged.connect(lambda _i: self._colour())
        self.answer_spin.valueChanged.connect(lambda _v: self._show_answers())
        self._set_busy(False)
        self._show_message("")
        self._show_given()
        self._show_answers()

    def _fill_checkpoints(self) -> None:
        """The run's complete checkpoints, the newest first (the one picked kept)."""
        kept = self.checkpoint_box.currentData()
        names = [name for name, _step in reversed(run_checkpoints(self.run_dir))] if self.run_dir else []
        self.checkpoint_box.blockSignals(True)
        self.checkpoint_box.clear()
        for name in names:
            self.checkpoint_box.addItem(f"step {int(name.split('_')[-1])}", name)
        self.checkpoint_box.setCurrentIndex(names.index(kept) if kept in names else 0)
        self.checkpoint_box.blockSignals(False)
        if self.run_dir is not None and is_reward_model_run(self.run_dir):
            self.checkpoint_box.clear()  # nothing to try: Try stays off
            self._show_message("This run trains a reward model, which scores answers and writes none: see its "
                               "Report card tab.", "#5f6368")
        elif self.run_dir is not None and not names:
            self._show_message("This run has no complete checkpoint yet: Try needs one (training.save_steps).",
                               "#5f6368")

    # --- Reactions

    def _progressed(self, done: int, total: int, what: str) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.progress_line.setText(what)

    def _job_finished(self, outcome: str, message: str, report) -> None:
        if self._job_ended() is not None:
            if outcome == "done":
                self.report = report
                self.answer_spin.setValue(1)
                self._show_answers()
            elif outcome == "failed":
                self._show_message(f"Try failed: {message}")
            else:
                self._show_message("Cancelled.", "#5f6368")
        self.sig_finished.emit(outcome, message)

    def _show_answers(self) -> None:
        report = self.report
        shown = report is not None
        self.intro.setVisible(not shown)
        for widget in (self.sides, self.legend, self.prompt_line, self.answer_spin, self.quantity_box):
            widget.setVisible(shown)
        if not shown:
            return
        count = max(len(m.answers) for m in report.models)
        self.answer_spin.blockSignals(True)
        self.answer_spin.setRange(1, count)
        self.answer_spin.setSuffix(f" of {count}")
        self.answer_spin.blockSignals(False)
        self.answer_spin.setVisible(count > 1)
        s = report.sampling
        how = "greedy" if s.get("greedy") else f"sampled at temperature {s.get('temperature')}, seed {s.get('seed')}"
        how = "the answer given, scored by both models (not sampled)" if report.given else how
        where = f"held-out prompt #{report.held_out}" if report.held_out is not None else "typed prompt"
        expected = f" · expected: {html.escape(report.expected)}" if report.expected else ""
        self.prompt_line.setText(f"<span style='color:#5f6368'>{where} · {how}{expected}</span><br>"
                                 f"<code>{html.escape(report.templated_prompt)}</code>")
        base, checkpoint = report.models
        for panel, model, other in ((self.base_panel, base, checkpoint), (self.checkpoint_panel, checkpoint, base)):
            answer = model.answers[min(self.answer_spin.value(), len(model.answers)) - 1]
            panel.show_answer(answer, report.templated_prompt, model.label, other.label)
        self._colour()

    def _colour(self) -> None:
        if self.report is None:
            return
        key = self.quantity
        answers = [p.answer for p in (self.base_panel, self.checkpoint_panel) if p.answer is not None]
        scale = shared_scale(key, answers)
        for panel in (self.base_panel, self.checkpoint_panel):
            panel.colour(key, scale)
        q = QUANTITIES[key]
        self.legend.set_scale(key, scale, q.meaning, q.label,
                              tool=any(a.tool is not None and bool(np.any(a.tool)) for a in answers))

    def _update_buttons(self, busy: bool | None = None) -> None:
        busy = self.running if busy is None else busy
        ready = self.run_dir is not None and self.checkpoint_box.count() > 0
        held_out = self.held_out_box.isChecked()
        given = self.given is not None  # the answer's prompt is fixed, and nothing is sampled
        self.try_button.setEnabled(ready and not busy and (held_out or bool(self.prompt_edit.text().strip())))
        self.try_button.setText("Score" if given else "Try")
        self.prompt_edit.setEnabled(not held_out and not busy and not given)
        self.held_out_box.setEnabled(self.held_out_count > 0 and not given)
        self.held_out_spin.setEnabled(held_out and not busy and not given)
        sampled = self.decoding_box.currentData() == "sampled"
        for widget in (self.samples_spin, self.temperature_spin, self.seed_spin):
            widget.setEnabled(sampled and not busy and not given)
        self.decoding_box.setEnabled(ready and not busy and not given)
        self.sample_button.setEnabled(not busy)
        for widget in (self.checkpoint_box, self.max_tokens_spin):
            widget.setEnabled(ready and not busy)

    def _show_given(self) -> None:
        given = self.given
        self.given_note.setText("" if given is None else
                                f"Scoring a given answer, {html.escape(given.source)}: <code>"
                                f"{html.escape(given.completion)}</code>")
        for widget in (self.given_note, self.sample_button):
            widget.setVisible(given is not None)
        self._update_buttons()

    def _catch_up(self) -> None:
        self._fill_checkpoints()  # checkpoints saved since
        self._update_buttons()
