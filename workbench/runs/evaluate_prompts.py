"""The "what did RL teach" part of the Evaluate page (evaluate_page.py): per prompt, how
many of each model's samples are correct and which of two models solves it, filtered by
that category, and beside it each model's samples of the prompt picked, each with a
"tokens ▸" link that opens it token by token in the Try tab (`sig_open_tokens`). A click on
a curve's point (`show_model_at`) picks its model and orders the prompts by that model's
pass@k there, the lowest first. With other runs' evaluations overlaid
(evaluation_compare.py), the models of those made on the same held-out prompts are offered
too; a note says why another is not."""

from __future__ import annotations

import html
import math
from pathlib import Path

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt, QUrl, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView, QComboBox, QFrame, QHBoxLayout, QHeaderView, QLabel, QSplitter, QTableView, QTextBrowser,
    QVBoxLayout, QWidget,
)

from workbench.runs.evaluation_compare import Comparison, ComparedModel
from workbench.runs.reward_report_views import FIT_ROWS
from workbench.runs.evaluations import (
    BOTH, CATEGORIES, FIRST_ONLY, NEITHER, SAMPLES_FILE, SECOND_ONLY, Evaluation, PromptRow, SampleRow, SamplesFile,
    category, category_counts,
)
from workbench.runs.try_answers import GivenAnswer, run_defaults

# A prompt's category in colour: what the checkpoint learned in green, what it lost in red.
CATEGORY_COLOURS = {SECOND_ONLY: "#1e7e34", FIRST_ONLY: "#b00020", BOTH: "#5f6368", NEITHER: "#9e9e9e"}
SORT_ROLE = Qt.UserRole + 1

# ------------------------------------------------------------------ the prompts


class PromptsModel(QAbstractTableModel):
    """A row per prompt: its index, text, correct samples per model and its category for
    the pair of models compared. SORT_ROLE gives numbers to sort by."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[PromptRow] = []
        self.models: list[tuple[str, str]] = []  # (name, short name) per count column
        self.n: int | None = None
        self.pair: tuple[str, str] = ("", "")
        self.labels: dict[str, str] = {}  # category -> how the column says it

    def set_rows(self, rows: list[PromptRow], models: list[tuple[str, str]], n: int | None) -> None:
        self.beginResetModel()
        self.rows, self.models, self.n = list(rows), list(models), n
        self.endResetModel()

    def set_pair(self, first: str, second: str, labels: dict[str, str]) -> None:
        self.beginResetModel()
        self.pair, self.labels = (first, second), dict(labels)
        self.endResetModel()

    def category(self, row: int) -> str | None:
        return category(self.rows[row], *self.pair)

    def columns(self) -> list[str]:
        return ["#", "prompt"] + [short for _name, short in self.models] + ["solved by"]

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.models) + 3

    def headerData(self, section, orientation, role=Qt.DisplayRole):
        if orientation != Qt.Horizontal:
            return None
        if role == Qt.DisplayRole:
            return self.columns()[section]
        if role == Qt.ToolTipRole and 2 <= section < 2 + len(self.models):
            return f"correct samples of {self.n or 'N'}"
        return None

    def data(self, index: QModelIndex, role=Qt.DisplayRole):
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        row, column = self.rows[index.row()], index.column()
        if column == 0:
            return row.index if role in (Qt.DisplayRole, SORT_ROLE) else None
        if column == 1:
            return " ".join(row.prompt.split()) if role in (Qt.DisplayRole, SORT_ROLE) else \
                row.prompt if role == Qt.ToolTipRole else None
        if column < 2 + len(self.models):
            return self._count(row.correct.get(self.models[column - 2][0]), role)
        return self._category(self.category(index.row()), role)

    def _count(self, count: int | None, role):
        if role == Qt.DisplayRole:
            return "" if count is None else str(count)
        if role == SORT_ROLE:
            return -1 if count is None else count
        if role == Qt.TextAlignmentRole:
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role == Qt.ForegroundRole and count == 0:
            return QColor("#9e9e9e")  # unsolved reads quieter than solved
        return None

    def _category(self, found: str | None, role):
        if role in (Qt.DisplayRole, SORT_ROLE):
            return "not sampled yet" if found is None else self.labels.get(found, found)
        if role == Qt.ForegroundRole and found is not None:
            return QColor(CATEGORY_COLOURS[found])
        return None


class CategoryFilter(QSortFilterProxyModel):
    """The prompts of one category (None: all)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.wanted: str | None = None
        self.setSortRole(SORT_ROLE)

    def set_category(self, wanted: str | None) -> None:
        self.beginFilterChange()  # Qt 6.10's way; invalidateFilter() is deprecated
        self.wanted = wanted
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, row: int, parent: QModelIndex) -> bool:
        return self.wanted is None or self.sourceModel().category(row) == self.wanted


class PromptsTable(QTableView):
    """The per-prompt table: sortable, a row selected at a time."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("eval-prompts")
        self.prompts = PromptsModel(self)
        self.proxy = CategoryFilter(self)
        self.proxy.setSourceModel(self.prompts)
        self.setModel(self.proxy)
        self.setSortingEnabled(True)
        self.sortByColumn(0, Qt.AscendingOrder)
        self.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.setSelectionMode(QAbstractItemView.SingleSelection)
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)
        self.verticalHeader().hide()
        self.verticalHeader().setDefaultSectionSize(22)
        self.setFrameShape(QFrame.StyledPanel)
        # Columns fitted to the first rows only (the report card's rule): a held-out set of
        # thousands of prompts must not stall the window.
        self.horizontalHeader().setResizeContentsPrecision(FIT_ROWS)

    def fit_columns(self) -> None:
        header = self.horizontalHeader()
        for column in range(self.prompts.columnCount()):
            header.setSectionResizeMode(column, QHeaderView.Stretch if column == 1 else QHeaderView.ResizeToContents)

    def shown_indices(self) -> list[int]:
        """The prompt index of each row as shown, top to bottom."""
        return [self.prompts.rows[self.proxy.mapToSource(self.proxy.index(r, 0)).row()].index
                for r in range(self.proxy.rowCount())]

    def row_of(self, proxy_row: int) -> PromptRow:
        return self.prompts.rows[self.proxy.mapToSource(self.proxy.index(proxy_row, 0)).row()]


# ------------------------------------------------------------------ the samples


def samples_html(prompt: PromptRow, blocks: list[tuple[str, str, str | None, list[SampleRow] | None]],
                 linked: set[int] = frozenset()) -> str:
    """A prompt and, per model (its short name, colour, the reference answer, its samples
    or None when they cannot be read), a table of its samples; the samples of a block in
    `linked` each with a link `tokens:BLOCK/SAMPLE`, and each block an anchor `model-BLOCK`."""
    parts = [f"<p><b>Prompt {prompt.index}</b><br><span style='font-family:monospace'>"
             f"{_visible(prompt.prompt)}</span></p>"]
    answer = next((block[2] for block in blocks if block[2] is not None), None)
    if answer is not None:
        parts.append(f"<p>Reference answer: <span style='font-family:monospace'>{_visible(answer)}</span></p>")
    for number, (name, colour, _answer, rows) in enumerate(blocks):
        parts.append(f"<a name='model-{number}'></a>" + _model_block(name, colour, rows, number if number in linked
                                                                      else None))
    return "".join(parts)


def _model_block(name: str, colour: str, rows: list[SampleRow] | None, link: int | None = None) -> str:
    if rows is None:
        return (f"<h4 style='color:{colour}'>{html.escape(name)}</h4>"
                "<p style='color:#5f6368'>No samples of this prompt in samples.jsonl (not sampled yet?)</p>")
    solved = sum(1 for r in rows if r.correct)
    scored = any(r.rm_score is not None for r in rows)
    head = ("<tr style='background:#f1f3f4'><th align='right'>#</th><th align='left'>completion</th><th>✓</th>"
            "<th align='left'>vote</th><th align='right'>reward</th>" + ("<th align='right'>rm</th>" if scored else "")
            + ("<th></th>" if link is not None else "") + "</tr>")
    lines = [head] + [_sample_row(i, r, scored, None if link is None else f"tokens:{link}/{i}")
                      for i, r in enumerate(rows)]
    return (f"<h4 style='color:{colour}; margin-bottom:2px'>{html.escape(name)}: {solved} of {len(rows)} correct</h4>"
            f"<table cellspacing='0' cellpadding='2' width='100%'>{''.join(lines)}</table>")


def _sample_row(i: int, row: SampleRow, scored: bool, link: str | None = None) -> str:
    mark = {True: "<span style='color:#1e7e34'>✓</span>", False: "<span style='color:#b00020'>✗</span>",
            None: "–"}[row.correct]
    reward = "—" if row.reward is None else f"{row.reward:.3g}"
    cells = [f"<td align='right' style='color:#9e9e9e'>{i}</td>",
             f"<td style='font-family:monospace'>{_visible(row.completion)}</td>", f"<td align='center'>{mark}</td>",
             f"<td style='font-family:monospace'>{'—' if row.vote is None else html.escape(row.vote)}</td>",
             f"<td align='right'>{reward}</td>"]
    if scored:
        cells.append(f"<td align='right'>{'—' if row.rm_score is None else f'{row.rm_score:.3g}'}</td>")
    if link is not None:  # an empty completion has no token to show
        cells.append(f"<td><a href='{link}'>tokens ▸</a></td>" if row.completion else "<td></td>")
    return f"<tr>{''.join(cells)}</tr>"


def _visible(text: str, limit: int = 600) -> str:
    """Text as the table shows it: escaped, cut at `limit` characters, a leading or
    trailing space shown as · (a completion's " 1 3" and "1 3" grade differently)."""
    cut = text if len(text) <= limit else text[:limit] + "…"
    body = html.escape(cut.strip(" "))
    lead, trail = len(cut) - len(cut.lstrip(" ")), len(cut) - len(cut.rstrip(" ")) if cut.strip(" ") else 0
    dot = "<span style='color:#bbb'>·</span>"
    return (dot * lead + body + dot * trail).replace("\n", "↵<br>") or "<span style='color:#bbb'>(empty)</span>"


class SamplesPanel(QTextBrowser):
    """The samples of the prompt picked in the per-prompt table, for each model (its links
    are PromptsSection's to follow: anchorClicked)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("eval-samples")
        self.setOpenLinks(False)
        # The tables are as wide as the panel and their completions wrap: a sideways bar
        # would only ever scroll the pixel a 100 % wide table overshoots.
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.show_hint()

    def show_hint(self, text: str = "Click a prompt to see each model's samples of it.") -> None:
        self.setHtml(f"<p style='color:#5f6368'>{html.escape(text)}</p>")


# ------------------------------------------------------------------ the section


def default_pair(evaluation: Evaluation) -> tuple[str, str]:
    """The base (else the first model) against the last checkpoint evaluated (else the last model).

    >>> from pathlib import Path
    >>> from workbench.runs.evaluations import ModelResult
    >>> models = [ModelResult(n, n, None if n == "base" else "/c", 0, 1, *[None] * 6) for n in ("s1", "base", "s2")]
    >>> default_pair(Evaluation(Path("e"), models=models))
    ('base', 's2')
    """
    names = [m.name for m in evaluation.models]
    if not names:
        return "", ""
    first = "base" if "base" in names else names[0]
    checkpoints = [m.name for m in evaluation.models if m.checkpoint is not None and m.name != first]
    others = [name for name in names if name != first]
    return first, (checkpoints or others or [first])[-1]


def pass_at(n: int, correct: int, k: int) -> float:
    """One prompt's unbiased pass@k from `correct` of its `n` samples (1 - C(n-c, k) / C(n, k)),
    the number a pass@k curve's point is the mean of over the prompts.

    >>> pass_at(32, 0, 4), pass_at(32, 30, 4), round(pass_at(4, 1, 2), 3)
    (0.0, 1.0, 0.5)
    """
    k = min(k, n)
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k) if n > 0 else 0.0


def category_labels(first: str, second: str) -> dict[str, str]:
    return {FIRST_ONLY: f"{first} only", SECOND_ONLY: f"{second} only", BOTH: "both", NEITHER: "neither"}


def pair_summary(first: str, second: str, counts: dict[str, int], n: int | None) -> str:
    """What the second model learned and lost against the first, in a sentence.

    >>> pair_summary("base", "step 400", {"first only": 4, "second only": 37, "both": 120, "neither": 39}, 32)
    'step 400 solves 37 prompts that base never solved in 32 samples, and misses 4 that base solved; both solve \
120, neither 39.'
    """
    tries = f" in {n} samples" if n else ""
    return (f"{second} solves {counts[SECOND_ONLY]} prompts that {first} never solved{tries}, and misses "
            f"{counts[FIRST_ONLY]} that {first} solved; both solve {counts[BOTH]}, neither {counts[NEITHER]}.")


class PromptsSection(QWidget):
    """Per prompt, which of two models (two combos) solves it, filtered by that category;
    the samples of the prompt picked beside the table."""

    # --- Signals
    sig_prompt_shown = Signal(int)
    """The samples of this prompt (its index) are on show."""
    sig_open_tokens = Signal(object)
    """A sample's "tokens ▸" was clicked: the GivenAnswer to score token by token (the Try tab)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.evaluation: Evaluation | None = None  # the first run's, on show
        self.models: list[ComparedModel] = []  # the models offered: its own and those of overlays on its prompts
        self.rows: list[PromptRow] = []  # its prompts, with every offered model's correct samples (by key)
        self.samples_files: dict[Path, SamplesFile] = {}  # by evaluation folder
        self.colours: dict[str, str] = {}
        self.shown: list[tuple[ComparedModel, list[SampleRow] | None]] = []  # the samples on show, by block
        self.shown_row: PromptRow | None = None
        # The Try tab cannot score a run of tool episodes (its answers hold the tools' tokens):
        # its samples get no "tokens ▸" link. Read from the run's preset when an evaluation is shown.
        self.tools: str | None = None
        self.first, self.second, self.filter = QComboBox(), QComboBox(), QComboBox()
        for combo, name in ((self.first, "eval-first"), (self.second, "eval-second"), (self.filter, "eval-filter")):
            combo.setObjectName(name)
        self.first.setToolTip("The model compared against (the base, before RL)")
        self.second.setToolTip("The model compared (a checkpoint, after RL)")
        self.filter.setToolTip("Show the prompts solved (a correct sample among N) by one model only, both or neither")
        self.order_note = QLabel()  # how a curve's point ordered the prompts
        self.order_note.setObjectName("eval-order-note")
        self.order_note.setWordWrap(True)
        self.order_note.hide()
        self.summary = QLabel()
        self.summary.setObjectName("eval-pair-summary")
        self.summary.setWordWrap(True)
        self.note = QLabel()  # why an overlaid evaluation's models are not offered
        self.note.setObjectName("eval-prompts-note")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color:#8a6d00")
        self.note.hide()
        self.table = PromptsTable()
        self.samples = SamplesPanel()
        self._layout()
        self.first.currentIndexChanged.connect(self._pair_changed)
        self.second.currentIndexChanged.connect(self._pair_changed)
        self.filter.currentIndexChanged.connect(self._filter_changed)
        self.table.selectionModel().currentRowChanged.connect(self._row_changed)
        self.samples.anchorClicked.connect(self._link_clicked)

    def _layout(self) -> None:
        controls = QHBoxLayout()
        for widget in (QLabel("<b>Per prompt</b>: compare"), self.first, QLabel("with"), self.second,
                       QLabel("  show"), self.filter):
            controls.addWidget(widget)
        controls.addStretch(1)
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 0, 0)
        column.addLayout(controls)
        column.addWidget(self.note)
        column.addWidget(self.summary)
        column.addWidget(self.order_note)
        column.addWidget(self.table, 1)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(left)
        split.addWidget(self.samples)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    def show_evaluation(self, evaluation: Evaluation, colours: dict[str, str]) -> None:
        self.show_comparison(Comparison("", evaluation), colours)

    def show_comparison(self, comparison: Comparison, colours: dict[str, str]) -> None:
        """The prompts of the evaluation on show; the models offered in the combos are its
        own and those of each overlaid evaluation on the same prompts (a note for the rest)."""
        evaluation = comparison.evaluation
        shown = self.evaluation.folder if self.evaluation else None
        self.evaluation, self.colours = evaluation, colours
        self.tools = run_defaults(Path(evaluation.run)).tools if evaluation.run else None
        self.models, notes = comparison.prompt_models()
        # A rewritten eval.json keeps the reader's index of samples.jsonl.
        folders = {m.evaluation.folder for m in self.models}
        self.samples_files = {f: self.samples_files.get(f) or SamplesFile(f / SAMPLES_FILE) for f in folders}
        if shown != evaluation.folder:
            self.samples.show_hint()
        self.note.setText(" ".join(notes))
        self.note.setVisible(bool(notes))
        pair = (self.first.currentData(), self.second.currentData()) if shown == evaluation.folder else None
        names = [(m.key, m.label) for m in self.models]
        self.rows = comparison.prompt_rows(self.models)
        self.table.prompts.set_rows(self.rows, names, evaluation.n)
        self.table.fit_columns()
        for combo in (self.first, self.second):
            combo.blockSignals(True)
            combo.clear()
            for name, short in names:
                combo.addItem(short, name)
        valid = pair is not None and all(p in dict(names) for p in pair)
        for combo, name in zip((self.first, self.second), pair if valid else default_pair(evaluation)):
            combo.setCurrentIndex(max(0, combo.findData(name)))
            combo.blockSignals(False)
        self._pair_changed()

    def show_samples(self, row: PromptRow) -> None:
        """Each model's samples of the prompt; with another run's models offered, the two
        compared first (the rest below them)."""
        blocks, models, self.shown, self.shown_row = [], self.models, [], row
        if any(m.position for m in models):
            pair = (self.first.currentData(), self.second.currentData())
            models = sorted(models, key=lambda m: pair.index(m.key) if m.key in pair else 2)
        for model in models:
            reader = self.samples_files.get(model.evaluation.folder)
            found = reader.samples(model.model.name, row.index) if reader else None
            answer, rows = found if found is not None else (None, None)
            blocks.append((model.label, self.colours.get(model.key, "#333"), answer, rows))
            self.shown.append((model, rows))
        # The Try tab tries the first run's models: an overlaid run's samples get no link, nor
        # a run of tool episodes.
        linked = {i for i, (model, _rows) in enumerate(self.shown) if model.position == 0 and not self.tools}
        self.samples.setHtml(samples_html(row, blocks, linked))
        self.sig_prompt_shown.emit(row.index)

    def show_model_at(self, key: str, k: int, what: str = "pass@k") -> bool:
        """A curve's point (model `key` at k) clicked: that model picked (as the second of
        the pair, unless it is the first), every prompt listed, ordered by its correct
        samples, which is by its pass@k at k, the lowest first (those that pull the point
        down), and the first one's samples shown. False when the model is not offered here."""
        model = next((m for m in self.models if m.key == key), None)
        if model is None or self.evaluation is None:
            return False
        if key not in (self.first.currentData(), self.second.currentData()):
            self.second.setCurrentIndex(self.second.findData(key))
        self.filter.setCurrentIndex(0)
        column = 2 + [m.key for m in self.models].index(key)
        self.table.sortByColumn(0, Qt.AscendingOrder)  # ties by index
        self.table.sortByColumn(column, Qt.AscendingOrder)
        n = model.evaluation.n
        values = [pass_at(n, r.correct[key], k) for r in self.rows if key in r.correct] if n else []
        low = sum(1 for v in values if v < 0.5)
        self.order_note.setText(
            f"Prompts ordered by {html.escape(model.label)}'s pass@{k} per prompt, the lowest first (its {what} "
            f"point at k = {k}): {low} of {len(values)} below 0.5." + (" A prompt it has not sampled yet is first."
                                                                         if len(values) < len(self.rows) else ""))
        self.order_note.show()
        self.table.scrollToTop()
        self.table.setCurrentIndex(QModelIndex())
        self.table.setCurrentIndex(self.table.model().index(0, 1))  # its samples shown (_row_changed)
        block = next((i for i, (m, _rows) in enumerate(self.shown) if m.key == key), None)
        if block is not None:
            self.samples.scrollToAnchor(f"model-{block}")
        return True

    def given_answer(self, block: int, sample: int) -> GivenAnswer | None:
        """The sample on show (block `block`, row `sample`) as an answer to score: a
        checkpoint's under that checkpoint, the base's under the evaluation's last checkpoint."""
        if self.shown_row is None or not 0 <= block < len(self.shown):
            return None
        model, rows = self.shown[block]
        if rows is None or not 0 <= sample < len(rows) or model.position != 0:
            return None
        evaluation = model.evaluation
        checkpoints = [m.name for m in evaluation.models if m.checkpoint is not None]
        checkpoint = model.model.name if model.model.checkpoint is not None else (checkpoints or [None])[-1]
        limit = evaluation.sampling.get("max_completion_length")
        run_dir = evaluation.folder.parent.parent  # RUN/evals/NAME
        return GivenAnswer(run_dir, self.shown_row.index, rows[sample].completion, checkpoint,
                           f"sample {sample} of {model.label} on held-out prompt {self.shown_row.index} in "
                           f"{evaluation.name}", limit if isinstance(limit, int) and limit > 0 else None)

    def _pair_changed(self) -> None:
        first, second = self.first.currentData(), self.second.currentData()
        names = self.first.currentText(), self.second.currentText()
        self.table.prompts.set_pair(first or "", second or "", category_labels(*names))
        counts = category_counts(self.rows, first, second) if self.evaluation else {}
        wanted = self.filter.currentIndex()
        self.filter.blockSignals(True)
        self.filter.clear()
        self.filter.addItem(f"all prompts ({len(self.rows) if self.evaluation else 0})", None)
        for found in CATEGORIES:
            label = category_labels(*names)[found]
            self.filter.addItem(f"solved by {label} ({counts.get(found, 0)})", found)
        self.filter.setCurrentIndex(max(0, wanted))
        self.filter.blockSignals(False)
        self._filter_changed(self.filter.currentIndex())
        self.summary.setVisible(first != second and bool(counts))
        if counts:
            self.summary.setText(pair_summary(*names, counts, self._pair_n(first, second)))

    def _pair_n(self, first: str, second: str) -> int | None:
        """The samples per prompt both models had (None when their evaluations differ)."""
        ns = {m.evaluation.n for m in self.models if m.key in (first, second)}
        return ns.pop() if len(ns) == 1 else None

    def _filter_changed(self, index: int) -> None:
        self.table.proxy.set_category(self.filter.itemData(index) if index >= 0 else None)

    def _row_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if current.isValid() and self.evaluation is not None:
            self.show_samples(self.table.row_of(current.row()))

    def _link_clicked(self, url: QUrl) -> None:
        link = url.toString()
        if link.startswith("tokens:"):
            block, _, sample = link.removeprefix("tokens:").partition("/")
            given = self.given_answer(int(block), int(sample)) if block.isdigit() and sample.isdigit() else None
            if given is not None:
                self.sig_open_tokens.emit(given)
