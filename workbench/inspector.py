"""The trajectory inspector tab: which tokens of a rollout the update pushes up or down,
and why.

A step and rollout picker (keys: ←/→ previous/next rollout, ↑/↓ previous/next step,
on the Trajectory and Group pages),
the quantity to colour by (only those the record has), the scale's scope, and three
pages:

- **Trajectory**: the completion as text after its dimmed prompt, each token on the
  colour of its value, with a legend; under it the quantity against token position,
  linked both ways (hover or click a token and the plot marks it; hover or click the
  plot and the token is marked and scrolled to); the selected token's numbers beside
  the plot. DPO pairs show chosen and rejected side by side.
- **Group**: every completion of the shown rollout's GRPO group (inspector_group).
- **Prompt history**: the shown prompt followed across the run (inspector_group).

Export writes the shown trajectory as a self-contained HTML page or as its JSON record.
It reads only the run directory (TrajectoryIndex), so a live run and a past run look
the same; `poll()` (the window's timer, while the tab is shown) picks up new steps.
"""

from __future__ import annotations

from workbench import qt_compat  # noqa: F401  (first: guards a PySide6 refcount bug)

import html
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QKeySequence, QLinearGradient, QPainter, QPen, QShortcut
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from workbench.inspector_colors import NULL_HEX, Scale
from workbench.inspector_data import (
    DPO,
    Trajectory,
    TrajectoryIndex,
    _num,
    build_group,
    export_html,
    export_json,
    quantity,
    step_scale,
    tooltip_html,
    trajectory_scale,
)
from workbench.inspector_group import GroupView, HistoryView
from workbench.inspector_plot import QuantityPlot
from workbench.inspector_text import TokenTextView, token_colours

TRAJECTORY_PAGE, GROUP_PAGE, HISTORY_PAGE = range(3)
SCOPE_STEP, SCOPE_ROLLOUT = "step", "rollout"


# ===================================================================== legend


class GradientBar(QWidget):
    """The colour ramp of a scale with its end values (and centre, when diverging)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.scale: Scale | None = None
        self.setFixedSize(250, 34)

    def set_scale(self, scale: Scale | None) -> None:
        self.scale = scale
        self.update()

    def paintEvent(self, event) -> None:
        if self.scale is None:
            return
        painter = QPainter(self)
        bar = QRectF(4, 2, self.width() - 8, 13)
        gradient = QLinearGradient(bar.topLeft(), bar.topRight())
        colours = self.scale.gradient(21)
        for i, colour in enumerate(colours):
            gradient.setColorAt(i / (len(colours) - 1), QColor(colour))
        painter.fillRect(bar, gradient)
        painter.setPen(QPen(QColor("#888"), 1))
        painter.drawRect(bar)
        font = painter.font()
        font.setPointSizeF(max(7.0, font.pointSizeF() - 1))
        painter.setFont(font)
        painter.setPen(QColor("#333"))
        ticks = [(0.0, self.scale.low, Qt.AlignLeft), (1.0, self.scale.high, Qt.AlignRight)]
        if self.scale.kind == "diverging":
            ticks.append((0.5, self.scale.centre, Qt.AlignHCenter))
        for t, value, align in ticks:
            x = bar.left() + t * bar.width()
            painter.drawLine(QPointF(x, bar.bottom()), QPointF(x, bar.bottom() + 3))
            text = f"{value:.3g}"
            box = QRectF(x - 60, bar.bottom() + 3, 120, 16)
            if align == Qt.AlignLeft:
                box = QRectF(bar.left(), bar.bottom() + 3, 120, 16)
            elif align == Qt.AlignRight:
                box = QRectF(bar.right() - 120, bar.bottom() + 3, 120, 16)
            painter.drawText(box, int(align | Qt.AlignTop), text)
        painter.end()


class Legend(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("inspector-legend")
        self.name = QLabel()
        self.bar = GradientBar()
        self.text = QLabel()
        self.text.setTextFormat(Qt.RichText)
        self.text.setWordWrap(True)
        self.text.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Preferred)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.name)
        layout.addWidget(self.bar)
        layout.addWidget(self.text, 1)

    def set_scale(self, key: str, scale: Scale | None, meaning: str, label: str) -> None:
        self.name.setText(f"<b>{html.escape(label)}</b>")
        self.bar.set_scale(scale)
        if scale is None:
            self.text.setText("")
            return
        self.text.setText(
            f"{html.escape(meaning)}<br><span style='color:#555'>scale: {html.escape(scale.how)} · "
            f"<span style='background:{NULL_HEX}'>&nbsp;&nbsp;&nbsp;</span> null</span>")

    def plain_text(self) -> str:
        from PySide6.QtGui import QTextDocument

        doc = QTextDocument()
        doc.setHtml(self.text.text())
        return doc.toPlainText()


# ================================================================ small parts


class StepBox(QSpinBox):
    """A step number that moves between the steps that have records."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.steps: list[int] = []
        self.setKeyboardTracking(False)
        self.setRange(0, 0)
        self.setMinimumWidth(80)

    def set_steps(self, steps: list[int]) -> None:
        self.steps = steps
        self.blockSignals(True)
        self.setRange(steps[0] if steps else 0, steps[-1] if steps else 0)
        self.blockSignals(False)

    def stepBy(self, n: int) -> None:
        import bisect

        if not self.steps:
            return
        value = self.value()
        if n > 0:
            i = bisect.bisect_right(self.steps, value) + n - 1
        else:
            i = bisect.bisect_left(self.steps, value) + n
        self.setValue(self.steps[max(0, min(len(self.steps) - 1, i))])


class SidePanel(QWidget):
    """A header and the token text of one side (the completion, or chosen/rejected)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.header = QLabel()
        self.header.setTextFormat(Qt.RichText)
        self.view = TokenTextView()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.header)
        layout.addWidget(self.view, 1)


def _button(text: str, tip: str) -> QToolButton:
    button = QToolButton()
    button.setText(text)
    button.setToolTip(tip)
    button.setAutoRaise(True)
    return button


# ================================================================== the view


class InspectorView(QWidget):
    """The Inspector tab. `trajectory_shown` fires after a trajectory is drawn."""

    trajectory_shown = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("inspector")
        self.run = None
        self.index: TrajectoryIndex | None = None
        self.step: int | None = None
        self.records: list[Trajectory] = []
        self.position = -1
        self.key = "advantage"
        self.scope = SCOPE_STEP
        self.scale: Scale | None = None
        self.selected = -1
        self._stale = False
        self._group_key: tuple | None = None
        self._group_quantity: tuple | None = None

        # ---------------------------------------------------------- controls
        self.step_box = StepBox()
        self.step_box.setObjectName("inspector-step")
        self.step_box.setToolTip("Step (only steps with token-level records)")
        self.prev_step_button = _button("▲", "Previous step (↑)")
        self.next_step_button = _button("▼", "Next step (↓)")
        self.steps_label = QLabel()
        self.steps_label.setStyleSheet("QLabel { color: #666; }")
        self.rollout_box = QComboBox()
        self.rollout_box.setObjectName("inspector-rollout")
        self.rollout_box.setMinimumContentsLength(30)
        self.rollout_box.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.prev_rollout_button = _button("◀", "Previous rollout (←)")
        self.next_rollout_button = _button("▶", "Next rollout (→)")
        self.quantity_box = QComboBox()
        self.quantity_box.setObjectName("inspector-quantity")
        self.quantity_box.setMinimumContentsLength(15)
        self.quantity_box.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.quantity_box.setToolTip("The per-token quantity the colours and the plot show (those this record has)")
        self.scope_box = QComboBox()
        self.scope_box.addItem("scale over the step", SCOPE_STEP)
        self.scope_box.addItem("scale over the rollout", SCOPE_ROLLOUT)
        self.scope_box.setToolTip("Over which tokens the colour scale is taken: all recorded rollouts of the step "
                                  "(colours compare across rollouts) or the shown rollout alone")
        self.prompt_check = QCheckBox("prompt")
        self.prompt_check.setChecked(True)
        self.prompt_check.setToolTip("Show the prompt (dimmed) before the completion")
        self.follow_check = QCheckBox("follow newest")
        self.follow_check.setChecked(True)
        self.follow_check.setToolTip("On a live run, move to each new step as it is recorded")
        self.export_html_button = QPushButton("Export HTML…")
        self.export_html_button.setToolTip("Save this trajectory as a self-contained coloured HTML page")
        self.export_json_button = QPushButton("Export JSON…")
        self.export_json_button.setToolTip("Save this trajectory's record as JSON")
        self.controls = QWidget()
        bar = QHBoxLayout(self.controls)
        bar.setContentsMargins(0, 0, 0, 0)
        bar.setSpacing(4)
        bar.addWidget(QLabel("Step"))
        bar.addWidget(self.step_box)
        bar.addWidget(self.prev_step_button)
        bar.addWidget(self.next_step_button)
        bar.addWidget(self.steps_label)
        bar.addSpacing(12)
        bar.addWidget(QLabel("Rollout"))
        bar.addWidget(self.rollout_box, 1)
        bar.addWidget(self.prev_rollout_button)
        bar.addWidget(self.next_rollout_button)
        bar.addSpacing(12)
        bar.addWidget(QLabel("Colour by"))
        bar.addWidget(self.quantity_box)
        bar.addWidget(self.scope_box)

        self.summary = QLabel()
        self.summary.setObjectName("inspector-summary")
        self.summary.setTextFormat(Qt.RichText)
        self.summary.setWordWrap(True)
        self.message = QLabel()
        self.message.setObjectName("inspector-message")
        self.message.setWordWrap(True)
        self.message.setStyleSheet("QLabel { color: #5c4400; background: #fff8e1; padding: 4px; }")
        self.message.hide()
        self.legend = Legend()

        # ------------------------------------------------------------- pages
        self.sides = [SidePanel(), SidePanel()]
        side_split = QSplitter(Qt.Horizontal)
        for panel in self.sides:
            side_split.addWidget(panel)
        self.sides[1].hide()
        self.plot = QuantityPlot()
        self.details = QLabel()
        self.details.setObjectName("inspector-token-details")
        self.details.setTextFormat(Qt.RichText)
        self.details.setAlignment(Qt.AlignTop | Qt.AlignLeft)
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.details.setMargin(6)
        details_scroll = QScrollArea()
        details_scroll.setWidget(self.details)
        details_scroll.setWidgetResizable(True)
        details_scroll.setMinimumWidth(230)
        details_scroll.setStyleSheet("QScrollArea { background: white; }")
        lower = QSplitter(Qt.Horizontal)
        lower.addWidget(self.plot)
        lower.addWidget(details_scroll)
        lower.setStretchFactor(0, 4)
        lower.setStretchFactor(1, 1)
        trajectory_page = QSplitter(Qt.Vertical)
        trajectory_page.addWidget(side_split)
        trajectory_page.addWidget(lower)
        trajectory_page.setStretchFactor(0, 1)
        trajectory_page.setStretchFactor(1, 1)
        self.trajectory_split = trajectory_page
        self._split_moved_by_user = False
        trajectory_page.splitterMoved.connect(self._split_moved)
        self.group_view = GroupView()
        self.history_view = HistoryView()
        self.pages = QTabWidget()
        self.pages.setObjectName("inspector-pages")
        self.pages.setDocumentMode(True)
        self.pages.addTab(trajectory_page, "Trajectory")
        self.pages.addTab(self.group_view, "Group")
        self.pages.addTab(self.history_view, "Prompt history")

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(4)
        legend_row = QHBoxLayout()
        legend_row.setSpacing(6)
        legend_row.addWidget(self.legend, 1)
        legend_row.addWidget(self.prompt_check)
        legend_row.addWidget(self.follow_check)
        legend_row.addWidget(self.export_html_button)
        legend_row.addWidget(self.export_json_button)
        layout.addWidget(self.controls)
        layout.addWidget(self.summary)
        layout.addLayout(legend_row)
        layout.addWidget(self.message)
        layout.addWidget(self.pages, 1)

        # ------------------------------------------------------------ wiring
        self.step_box.valueChanged.connect(self._step_typed)
        self.prev_step_button.clicked.connect(self.prev_step)
        self.next_step_button.clicked.connect(self.next_step)
        self.rollout_box.currentIndexChanged.connect(self._rollout_picked)
        self.prev_rollout_button.clicked.connect(self.prev_rollout)
        self.next_rollout_button.clicked.connect(self.next_rollout)
        self.quantity_box.currentIndexChanged.connect(self._quantity_picked)
        self.scope_box.currentIndexChanged.connect(self._scope_picked)
        self.prompt_check.toggled.connect(self._prompt_toggled)
        self.follow_check.clicked.connect(self._follow_clicked)
        self.export_html_button.clicked.connect(self.export_html_dialog)
        self.export_json_button.clicked.connect(self.export_json_dialog)
        for k, panel in enumerate(self.sides):
            panel.view.token_hovered.connect(lambda i, k=k: self._text_hovered(k, i))
            panel.view.token_clicked.connect(lambda i, k=k: self._text_clicked(k, i))
            panel.view.tooltip_for = lambda i, k=k: self._tooltip(k, i)
            panel.view.content_height_changed.connect(lambda _h: self._fit_text_pane())
        self.plot.point_hovered.connect(self._plot_hovered)
        self.plot.point_clicked.connect(self._plot_clicked)
        self.group_view.rollout_chosen.connect(self.show_index)
        self.group_view.rollout_opened.connect(self._open_from_group)
        self.history_view.rollout_opened.connect(self._open_from_history)
        self.pages.currentChanged.connect(self._page_changed)
        # Arrow keys step through rollouts and steps wherever the focus is on the
        # controls, the Trajectory page or the Group page (the history table keeps its
        # own arrow keys).
        self.shortcuts = []
        for owner in (self.controls, trajectory_page, self.group_view):
            for key, slot in ((Qt.Key_Right, self.next_rollout), (Qt.Key_Left, self.prev_rollout),
                              (Qt.Key_Down, self.next_step), (Qt.Key_Up, self.prev_step)):
                shortcut = QShortcut(QKeySequence(key), owner)
                shortcut.setContext(Qt.WidgetWithChildrenShortcut)
                shortcut.activated.connect(slot)
                self.shortcuts.append(shortcut)
        self._update_controls()

    # ================================================================ sources

    def set_run(self, run) -> None:
        """Show a run's trajectories (RunData, or None); nothing is read until shown."""
        self.run = run
        self.index = TrajectoryIndex(run.run_dir) if run is not None else None
        self.step = None
        self.records = []
        self.position = -1
        self.follow_check.setChecked(True)
        self.history_view.set_sources(self.index, run)
        self._clear()
        self._stale = True
        if self.isVisible():
            self.poll()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._stale:
            self.poll()

    def poll(self) -> bool:
        """Look for new steps (cheap when nothing changed); on a live run, follow the
        newest when asked. True when the steps on disk changed."""
        self._stale = False
        if self.index is None:
            return False
        changed = self.index.poll()
        steps = self.index.steps
        if changed or self.step is None:
            self.step_box.set_steps(steps)
            self._update_steps_label()
        if changed and self.pages.currentIndex() == HISTORY_PAGE:
            self.history_view.refresh()  # reads the new step files for the prompt
        if not steps:
            self._clear()
            self._say(self._no_records_reason())
            return changed
        following = self.follow_check.isChecked()
        if self.step is None or self.step not in steps:
            self.open_step(steps[-1])
        elif changed and following and steps[-1] != self.step:
            self.open_step(steps[-1], keep_position=True)
        elif changed and self.index.records(self.step) is not self.records:  # rewritten (a resume)
            self.open_step(self.step, index=self.current.index if self.current else None, follow=following)
        return changed

    def _no_records_reason(self) -> str:
        preset = getattr(self.run, "preset", None) or {}
        recorded = (preset.get("training") or {}).get("record_rollouts")
        if recorded == 0:
            return "This run records no trajectories (training.record_rollouts is 0)."
        status = getattr(self.run, "status", "")
        if status in ("running", "empty"):
            return ("No trajectory records yet: the engine writes trajectories/step_N.jsonl after each step "
                    f"({'training.record_rollouts = ' + str(recorded) if recorded else 'a few rollouts a step'}).")
        return "This run has no trajectory records (no trajectories/ folder)."

    def _update_steps_label(self) -> None:
        steps = self.index.steps if self.index else []
        if not steps:
            self.steps_label.setText("")
            return
        self.steps_label.setText(f"{len(steps):,} recorded ({steps[0]}–{steps[-1]})")

    # ============================================================ navigation

    @property
    def current(self) -> Trajectory | None:
        return self.records[self.position] if 0 <= self.position < len(self.records) else None

    def open_step(self, step: int, index: int | None = None, keep_position: bool = False,
                  follow: bool | None = None) -> bool:
        """Show a step's records: the rollout `index` if given and recorded, else the
        same position as before (keep_position) or the first. `follow`: whether to
        follow new steps from now on; by default, while the newest step is shown."""
        if self.index is None:
            return False
        records = self.index.records(step)
        if not records:
            return False
        old_position = self.position
        self.step = step
        self.records = records
        position = 0
        if index is not None:
            position = next((k for k, r in enumerate(records) if r.index == index), 0)
        elif keep_position and old_position >= 0:
            position = min(old_position, len(records) - 1)
        self.position = position
        self.step_box.blockSignals(True)
        self.step_box.setValue(step)
        self.step_box.blockSignals(False)
        self.rollout_box.blockSignals(True)
        self.rollout_box.clear()
        for record in records:
            self.rollout_box.addItem(record.label(), record.index)
        self.rollout_box.setCurrentIndex(position)
        self.rollout_box.blockSignals(False)
        if follow is None:
            follow = bool(self.index.steps) and step == self.index.steps[-1]  # looking back: stay there
        self.follow_check.setChecked(follow)
        self._show_current()
        return True

    def open_trajectory(self, step: int, index: int) -> bool:
        """Show one rollout (the samples table's double-click). When that rollout has no
        token-level record, say so and show what there is (its group, or the nearest
        recorded step). Returns whether it was found."""
        if self.index is None:
            return False
        self.index.poll()
        self.step_box.set_steps(self.index.steps)
        self._update_steps_label()
        if self.index.find(step, index) is not None:
            self.open_step(step, index=index, follow=False)
            self._say("")
            return True
        recorded = (((getattr(self.run, "preset", None) or {}).get("training") or {}).get("record_rollouts"))
        rule = f" (training.record_rollouts = {recorded}: the first {recorded} of each step)" if recorded else ""
        if step in self.index.steps:
            records = self.index.records(step)
            group = next((r.index for r in records if self._group_of(step, index) == r.group), None)
            self.open_step(step, index=group, follow=False)
            self._say(f"Rollout {index} of step {step} was not recorded token by token{rule}. "
                      + ("Its group is on the Group page, its text among them." if group is not None
                         else "Showing the step's recorded rollouts."))
            if group is not None:
                self.pages.setCurrentIndex(GROUP_PAGE)
            return False
        nearest = self.index.nearest_step(step)
        if nearest is None:
            self._say(self._no_records_reason())
            return False
        self.open_step(nearest, follow=False)
        self._say(f"Step {step} has no token-level records{rule}; showing step {nearest}, the nearest that has.")
        return False

    def _group_of(self, step: int, index: int) -> int | None:
        if self.run is None:
            return None
        store = self.run.samples
        if not len(store):
            return None
        rows = np.flatnonzero((store.numbers("step") == step) & (store.numbers("index") == index))
        return store.row(int(rows[0])).group if rows.size else None

    def show_index(self, index: int) -> None:
        """Make the rollout `index` of the shown step current (a group row clicked)."""
        position = next((k for k, r in enumerate(self.records) if r.index == index), None)
        if position is not None and position != self.position:
            self.rollout_box.setCurrentIndex(position)

    def next_rollout(self) -> None:
        if self.position + 1 < len(self.records):
            self.rollout_box.setCurrentIndex(self.position + 1)

    def prev_rollout(self) -> None:
        if self.position > 0:
            self.rollout_box.setCurrentIndex(self.position - 1)

    def next_step(self) -> None:
        self._move_step(+1)

    def prev_step(self) -> None:
        self._move_step(-1)

    def _move_step(self, direction: int) -> None:
        if self.index is None or self.step is None:
            return
        target = self.index.neighbour_step(self.step, direction)
        if target is not None:
            current = self.current
            self.open_step(target, index=current.index if current else None)

    def _step_typed(self, value: int) -> None:
        if self.index is None or not self.index.steps:
            return
        step = value if value in self.index.steps else self.index.nearest_step(value)
        if step != self.step:
            current = self.current
            self.open_step(step, index=current.index if current else None)
        elif step != value:
            self.step_box.blockSignals(True)
            self.step_box.setValue(step)
            self.step_box.blockSignals(False)

    def _follow_clicked(self, checked: bool) -> None:
        if checked and self.index is not None and self.index.steps and self.step != self.index.steps[-1]:
            current = self.current
            self.open_step(self.index.steps[-1], index=current.index if current else None)

    def _rollout_picked(self, position: int) -> None:
        if 0 <= position < len(self.records) and position != self.position:
            self.position = position
            self._show_current()

    def _open_from_group(self, index: int) -> None:
        self.show_index(index)
        self.pages.setCurrentIndex(TRAJECTORY_PAGE)

    def _open_from_history(self, step: int, index: int) -> None:
        self.open_step(step, index=index, follow=False)
        self.pages.setCurrentIndex(TRAJECTORY_PAGE)

    # ============================================================== drawing

    def _clear(self) -> None:
        for panel in self.sides:
            panel.view.set_content("", [])
            panel.header.setText("")
        self.sides[1].hide()
        self.plot.set_series([], "", None)
        self.summary.setText("")
        self.details.setText("")
        self.legend.set_scale("", None, "", "")
        self.rollout_box.clear()
        self.quantity_box.clear()
        self.group_view.show_group(None, None, self.key, Scale("diverging"))
        self._group_key = None
        self._update_controls()

    def _say(self, text: str) -> None:
        self.message.setText(text)
        self.message.setVisible(bool(text))

    def _show_current(self) -> None:
        trajectory = self.current
        if trajectory is None:
            self._clear()
            return
        self._say("")
        pair = trajectory.algorithm == DPO
        self.sides[1].setVisible(pair)
        for k, panel in enumerate(self.sides):
            if k < len(trajectory.sides):
                side = trajectory.sides[k]
                panel.view.set_show_prompt(self.prompt_check.isChecked())
                panel.view.set_content(trajectory.prompt, side.tokens)
                if pair:
                    colour = "#2e7d32" if side.name == "chosen" else "#b00020"
                    panel.header.setText(f"<b style='color:{colour}'>{side.name}</b> · implicit reward "
                                         f"<b>{_num(side.reward)}</b> · {len(side)} tokens")
                    panel.header.show()
                else:
                    panel.header.hide()
        self.summary.setText(trajectory.summary_html())
        self._fit_text_pane()
        self.selected = -1
        self.plot.mark(-1)
        self.plot.select(-1)
        self._fill_quantities(trajectory)
        self.recolour()
        self._show_details(-1)
        if self.pages.currentIndex() == GROUP_PAGE:
            self._update_group()
        self.pages.setTabEnabled(GROUP_PAGE, not pair)
        self.pages.setTabToolTip(GROUP_PAGE, "DPO records are pairs: chosen and rejected are side by side on the "
                                 "Trajectory page" if pair else "Every completion of this rollout's prompt group")
        self.history_view.follow_prompt(trajectory.prompt)
        self._update_controls()
        self.trajectory_shown.emit()

    def _split_moved(self, *_args) -> None:
        self._split_moved_by_user = True

    def _fit_text_pane(self) -> None:
        """Give a short text only the height it needs (the plot gets the rest), a long
        one half, unless the user has moved the divider."""
        total = sum(self.trajectory_split.sizes())
        if self._split_moved_by_user or total <= 0:
            return
        views = [p.view for p in self.sides if p.isVisible()] or [self.sides[0].view]
        header = self.sides[0].header.sizeHint().height() if self.sides[0].header.isVisible() else 0
        needed = max(v.content_height() for v in views) + 2 * views[0].frameWidth() + header + 4
        text = max(110, min(needed, total // 2))
        self.trajectory_split.blockSignals(True)
        self.trajectory_split.setSizes([text, total - text])
        self.trajectory_split.blockSignals(False)

    def _fill_quantities(self, trajectory: Trajectory) -> None:
        keys = trajectory.quantities()
        if self.key not in keys:
            preferred = ("implicit_reward", "advantage") if trajectory.algorithm == DPO else ("advantage",)
            self.key = next((k for k in preferred if k in keys), keys[0] if keys else "")
        current = [self.quantity_box.itemData(i) for i in range(self.quantity_box.count())]
        if current != keys:
            self.quantity_box.blockSignals(True)
            self.quantity_box.clear()
            for key in keys:
                self.quantity_box.addItem(quantity(key).label, key)
            self.quantity_box.blockSignals(False)
        self.quantity_box.blockSignals(True)
        self.quantity_box.setCurrentIndex(keys.index(self.key) if self.key in keys else -1)
        self.quantity_box.blockSignals(False)

    def set_quantity(self, key: str) -> None:
        i = self.quantity_box.findData(key)
        if i >= 0:
            self.quantity_box.setCurrentIndex(i)

    def _quantity_picked(self, i: int) -> None:
        key = self.quantity_box.itemData(i)
        if key and key != self.key:
            self.key = key
            self.recolour()

    def _scope_picked(self, i: int) -> None:
        self.scope = self.scope_box.itemData(i)
        self.recolour()

    def _prompt_toggled(self, show: bool) -> None:
        for panel in self.sides:
            panel.view.set_show_prompt(show)

    def current_scale(self) -> Scale | None:
        trajectory = self.current
        if trajectory is None or not self.key:
            return None
        if self.scope == SCOPE_ROLLOUT:
            return trajectory_scale(trajectory, self.key)
        return step_scale(self.records, self.key, self.step)

    def recolour(self) -> None:
        """Colour the tokens, the plot and the legend by the chosen quantity."""
        trajectory = self.current
        if trajectory is None:
            return
        if not self.key:  # a record with no per-token numbers (no tokens at all)
            self.scale = None
            for panel in self.sides:
                panel.view.set_colours([], [])
            self.plot.set_series([], "", None)
            self.legend.set_scale("", None, "", "")
            return
        scale = self.current_scale()
        self.scale = scale
        values = trajectory.values(self.key)
        q = quantity(self.key, values)
        marks_on = self.key == "ratio"
        clipped = []
        colours = []
        for k, side in enumerate(trajectory.sides):
            view = self.sides[k].view
            backgrounds, texts = token_colours(values[k], scale)
            colours.append(backgrounds)
            view.set_colours(backgrounds, texts)
            c = side.clipped
            clipped.append(c if marks_on else None)
            view.set_marks([bool(x == 1) for x in c] if marks_on and c is not None else None)
        y_range = (scale.low, scale.high) if scale is not None else None
        self.plot.set_series(values, q.label, q.centre if q.kind == "diverging" else None, clipped,
                             [s.name for s in trajectory.sides], y_range, colours)
        self.legend.set_scale(self.key, scale, q.meaning, q.label)
        if self.pages.currentIndex() == GROUP_PAGE:
            self._update_group()
        if self.selected >= 0:
            self._show_details(self.selected)

    # ============================================================ linking

    def _text_hovered(self, side: int, i: int) -> None:
        self.plot.mark(i)
        for k, panel in enumerate(self.sides):
            if k != side:
                panel.view.set_hovered(i)
        self._show_details(i if i >= 0 else self.selected)

    def _text_clicked(self, side: int, i: int) -> None:
        self.selected = i
        self.plot.select(i)
        for k, panel in enumerate(self.sides):
            if k != side:
                panel.view.set_selected(i, scroll=False)
        self._show_details(i)

    def _plot_hovered(self, i: int) -> None:
        for panel in self.sides:
            panel.view.set_hovered(i, scroll=True)
        self._show_details(i if i >= 0 else self.selected)

    def _plot_clicked(self, i: int) -> None:
        self.selected = i
        for panel in self.sides:
            panel.view.set_selected(i, scroll=True)
        self._show_details(i)

    def select_token(self, i: int) -> None:
        """Select token i in the text and the plot (as a click does)."""
        self._plot_clicked(i)
        self.plot.select(i)

    def _tooltip(self, side: int, i: int) -> str:
        trajectory = self.current
        return tooltip_html(trajectory, side, i) if trajectory is not None and side < len(trajectory.sides) else ""

    def _show_details(self, i: int) -> None:
        trajectory = self.current
        if trajectory is None or i < 0:
            self.details.setText("<span style='color:#888'>Hover or click a token (in the text or the plot) "
                                 "to see its numbers and the top alternatives.</span>")
            return
        parts = []
        for k, side in enumerate(trajectory.sides):
            if i < len(side):
                parts.append(tooltip_html(trajectory, k, i))
        self.details.setText("<hr>".join(parts))

    # ============================================================== group

    def _page_changed(self, page: int) -> None:
        if page == GROUP_PAGE:
            self._update_group()

    def _group_scale(self) -> Scale:
        return step_scale(self.records, self.key, self.step) if self.records else Scale("diverging")

    def current_group(self):
        trajectory = self.current
        if trajectory is None or trajectory.algorithm == DPO:
            return None
        samples = []
        if self.run is not None and len(self.run.samples):
            store = self.run.samples
            for r in np.flatnonzero(store.numbers("step") == self.step):
                s = store.row(int(r))
                samples.append({"index": s.index, "group": s.group, "prompt": s.prompt, "completion": s.completion,
                                "reward": s.reward, "rewards": s.rewards, "advantage": s.advantage})
        size = ((getattr(self.run, "preset", None) or {}).get("algorithm") or {}).get("num_generations")
        return build_group(self.records, samples, self.step, trajectory.group,
                           size if isinstance(size, int) else None)

    def _update_group(self) -> None:
        """Show the current rollout's group: rebuilt when the group changed (another
        step or group, or the step's file was re-read), else recoloured and the current
        row moved."""
        trajectory = self.current
        key = (self.step, trajectory.group if trajectory else None, id(self.records))
        if key != self._group_key:
            self._group_key = key
            adv = step_scale(self.records, "advantage", self.step).scale if self.records else None
            self.group_view.show_group(self.current_group(), trajectory.index if trajectory else None, self.key,
                                       self._group_scale(), trajectory.algorithm if trajectory else "", adv)
            self._group_quantity = (self.key, self.scope)
            return
        if self._group_quantity != (self.key, self.scope):
            self._group_quantity = (self.key, self.scope)
            self.group_view.recolour(self.key, self._group_scale())
        self.group_view.set_current(trajectory.index if trajectory else None)

    # ============================================================== export

    def _export_name(self, suffix: str) -> str:
        trajectory = self.current
        run = self.run.name if self.run is not None else "run"
        what = "pair" if trajectory and trajectory.algorithm == DPO else "rollout"
        return f"{run}-step{self.step}-{what}{trajectory.index if trajectory else 0}.{suffix}"

    def export_html_to(self, path: str | Path) -> Path:
        trajectory = self.current
        if trajectory is None or self.scale is None:
            raise ValueError("no trajectory shown")
        path = Path(path)
        path.write_text(export_html(trajectory, self.key, self.scale, self.run.name if self.run else ""),
                        encoding="utf-8")
        return path

    def export_json_to(self, path: str | Path) -> Path:
        trajectory = self.current
        if trajectory is None:
            raise ValueError("no trajectory shown")
        path = Path(path)
        path.write_text(export_json(trajectory) + "\n", encoding="utf-8")
        return path

    def _export_dialog(self, suffix: str, kind: str, write) -> None:
        if self.current is None:
            return
        start = str((self.run.run_dir if self.run is not None else Path.cwd()) / self._export_name(suffix))
        path, _ = QFileDialog.getSaveFileName(self, f"Export trajectory as {kind}", start, f"{kind} (*.{suffix})")
        if not path:
            return
        try:
            write(path)
        except OSError as exc:
            self._say(f"Cannot write {path}: {exc.strerror or exc}")
            return
        self._say(f"Saved {path}")

    def export_html_dialog(self) -> None:
        self._export_dialog("html", "HTML", self.export_html_to)

    def export_json_dialog(self) -> None:
        self._export_dialog("json", "JSON", self.export_json_to)

    # ============================================================== state

    def _update_controls(self) -> None:
        has = self.current is not None
        for widget in (self.export_html_button, self.export_json_button, self.quantity_box, self.scope_box):
            widget.setEnabled(has)
        steps = self.index.steps if self.index else []
        self.prev_step_button.setEnabled(bool(steps) and self.step is not None and self.step > steps[0])
        self.next_step_button.setEnabled(bool(steps) and self.step is not None and self.step < steps[-1])
        self.prev_rollout_button.setEnabled(self.position > 0)
        self.next_rollout_button.setEnabled(0 <= self.position < len(self.records) - 1)
