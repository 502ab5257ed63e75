"""The trajectory inspector tab: which tokens of a rollout the update pushes up or down,
and why.

A step and rollout picker (keys: ←/→ previous/next rollout, ↑/↓ previous/next step,
on the Trajectory and Group pages),
the quantity to colour by (only those the record has), the scale's scope, and three
pages:

- **Trajectory**: the completion as text, coloured, with the quantity plot under it
  (trajectory_page.py). DPO pairs show chosen and rejected side by side.
- **Group**: every completion of the shown rollout's GRPO group (group.py).
- **Prompt history**: the shown prompt followed across the run (history.py).

Export writes the shown trajectory as a self-contained HTML page or as its JSON record.
It reads only the run directory (TrajectoryIndex), so a live run and a past run look
the same; `poll()` (the window's timer, while the tab is shown) picks up new steps.
What is shown (step, rollout, quantity, scope) lives in a Qt-free `Navigation`
(navigation.py); this view asks it where each move goes and draws the answer.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.inspector.colors import Scale
from workbench.inspector.export import export_html, export_json, export_name, summary_html
from workbench.inspector.group import GroupView
from workbench.inspector.history import HistoryView
from workbench.inspector.index import TrajectoryIndex, no_records_reason, recorded_per_step, run_group, sample_group
from workbench.inspector.keys import ArrowKeys
from workbench.inspector.navigation import SCOPE_ROLLOUT, Navigation
from workbench.inspector.quantities import group_scale, quantity, step_scale, trajectory_scale
from workbench.run_declaration import PAIR, SINGLE
from workbench.inspector.records import Trajectory
from workbench.inspector.trajectory_page import TrajectoryPage
from workbench.inspector.update_effect import wants_advantage
from workbench.inspector.widgets import ControlBar, Legend, checked_box

TRAJECTORY_PAGE, GROUP_PAGE, HISTORY_PAGE = range(3)


class InspectorView(QWidget):
    """The Inspector tab. `trajectory_shown` fires after a trajectory is drawn."""

    trajectory_shown = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("inspector")
        self.run = None
        self.nav = Navigation()
        self.scale: Scale | None = None
        self._stale = False
        self._group_key: tuple | None = None
        self._group_quantity: tuple | None = None
        self._build_controls()
        self._build_header()
        self._build_pages()
        self._lay_out()
        self._wire()
        self._add_shortcuts()
        self._update_controls()

    # ================================================================ building

    def _build_controls(self) -> None:
        """The pickers' bar (step, rollout, quantity, scope), the check boxes and the
        export buttons."""
        self.controls = ControlBar()
        for name in ControlBar.PARTS:
            setattr(self, name, getattr(self.controls, name))
        self.prompt_check = checked_box("prompt", "Show the prompt (dimmed) before the completion")
        self.follow_check = checked_box("follow newest", "On a live run, move to each new step as it is recorded")
        self.export_html_button = QPushButton("Export HTML…")
        self.export_html_button.setToolTip("Save this trajectory as a self-contained coloured HTML page")
        self.export_json_button = QPushButton("Export JSON…")
        self.export_json_button.setToolTip("Save this trajectory's record as JSON")

    def _build_header(self) -> None:
        """The summary line, the message line and the legend."""
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

    def _build_pages(self) -> None:
        self.trajectory_page = TrajectoryPage()
        self.sides = self.trajectory_page.sides
        self.plot = self.trajectory_page.plot
        self.details = self.trajectory_page.details
        self.group_view = GroupView()
        self.history_view = HistoryView()
        self.pages = QTabWidget()
        self.pages.setObjectName("inspector-pages")
        self.pages.setDocumentMode(True)
        self.pages.addTab(self.trajectory_page, "Trajectory")
        self.pages.addTab(self.group_view, "Group")
        self.pages.addTab(self.history_view, "Prompt history")

    def _lay_out(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(4)
        legend_row = QHBoxLayout()
        legend_row.setSpacing(6)
        legend_row.addWidget(self.legend, 1)
        for widget in (self.prompt_check, self.follow_check, self.export_html_button, self.export_json_button):
            legend_row.addWidget(widget)
        layout.addWidget(self.controls)
        layout.addWidget(self.summary)
        layout.addLayout(legend_row)
        layout.addWidget(self.message)
        layout.addWidget(self.pages, 1)

    def _wire(self) -> None:
        self.step_box.valueChanged.connect(self._step_typed)
        self.prev_step_button.clicked.connect(self.prev_step)
        self.next_step_button.clicked.connect(self.next_step)
        self.rollout_box.currentIndexChanged.connect(self._rollout_picked)
        self.prev_rollout_button.clicked.connect(self.prev_rollout)
        self.next_rollout_button.clicked.connect(self.next_rollout)
        self.quantity_box.currentIndexChanged.connect(self._quantity_picked)
        self.scope_box.currentIndexChanged.connect(self._scope_picked)
        self.prompt_check.toggled.connect(self.trajectory_page.set_show_prompt)
        self.follow_check.clicked.connect(self._follow_clicked)
        self.export_html_button.clicked.connect(self.export_html_dialog)
        self.export_json_button.clicked.connect(self.export_json_dialog)
        self.group_view.rollout_chosen.connect(self.show_index)
        self.group_view.rollout_opened.connect(self._open_from_group)
        self.history_view.rollout_opened.connect(self._open_from_history)
        self.pages.currentChanged.connect(self._page_changed)

    def _add_shortcuts(self) -> None:
        """Arrow keys step through rollouts and steps wherever the focus is on the
        controls, the Trajectory page or the Group page (keys.py: not in an open list
        or a text field; the history table keeps its own arrow keys)."""
        self.arrow_keys = ArrowKeys([self.controls, self.trajectory_page, self.group_view],
                                    {Qt.Key_Right: self.next_rollout, Qt.Key_Left: self.prev_rollout,
                                     Qt.Key_Down: self.next_step, Qt.Key_Up: self.prev_step}, self)

    # ======================================================= the model's state

    index = property(lambda self: self.nav.index, doc="the run's step files (TrajectoryIndex)")
    step = property(lambda self: self.nav.step, doc="the shown step")
    records = property(lambda self: self.nav.records, doc="the shown step's records")
    position = property(lambda self: self.nav.position, doc="the shown record's position in them")
    key = property(lambda self: self.nav.key, doc="the quantity coloured by")
    scope = property(lambda self: self.nav.scope, doc="the scale's scope: SCOPE_STEP or SCOPE_ROLLOUT")
    current = property(lambda self: self.nav.current, doc="the shown record (None: none)")
    selected = property(lambda self: self.trajectory_page.selected, doc="the clicked token (-1: none)")

    # ================================================================ sources

    def set_run(self, run) -> None:
        """Show a run's trajectories (RunData, or None); nothing is read until shown."""
        self.run = run
        self.nav.reset(TrajectoryIndex.of_run(run))
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
            self._say(no_records_reason(self.run))
            return changed
        following = self.follow_check.isChecked()
        target, keep = self.nav.step_to_show_after_poll(changed, following)
        if target is not None:
            self.open_step(target, keep_position=keep)
        elif changed and self.nav.rewritten():  # rewritten (a resume)
            self.open_step(self.step, index=self.nav.current_index, follow=following)
        return changed

    def _update_steps_label(self) -> None:
        steps = self.nav.steps
        self.steps_label.setText(f"{len(steps):,} recorded ({steps[0]}–{steps[-1]})" if steps else "")

    # ============================================================ navigation

    def open_step(self, step: int, index: int | None = None, keep_position: bool = False,
                  follow: bool | None = None) -> bool:
        """Show a step's records: the rollout `index` if given and recorded, else the
        same position as before (keep_position) or the first. `follow`: whether to
        follow new steps from now on; by default, while the newest step is shown."""
        if not self.nav.open_step(step, index, keep_position):
            return False
        self.step_box.blockSignals(True)
        self.step_box.setValue(step)
        self.step_box.blockSignals(False)
        self.rollout_box.blockSignals(True)
        self.rollout_box.clear()
        for record in self.records:
            self.rollout_box.addItem(record.label(), record.index)
        self.rollout_box.setCurrentIndex(self.position)
        self.rollout_box.blockSignals(False)
        self.follow_check.setChecked(self.nav.is_newest(step) if follow is None else follow)
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
        target = self.nav.locate(step, index, sample_group(self.run, step, index), recorded_per_step(self.run))
        if target.step is not None:
            self.open_step(target.step, index=target.index, follow=False)
        self._say(target.message if target.step is not None or target.found else no_records_reason(self.run))
        if target.group_page:
            self.pages.setCurrentIndex(GROUP_PAGE)
        return target.found

    def show_index(self, index: int) -> None:
        """Make the rollout `index` of the shown step current (a group row clicked)."""
        position = self.nav.position_of(index)
        if position is not None and position != self.position:
            self.rollout_box.setCurrentIndex(position)

    def next_rollout(self) -> None:
        position = self.nav.next_position()
        if position is not None:
            self.rollout_box.setCurrentIndex(position)

    def prev_rollout(self) -> None:
        position = self.nav.prev_position()
        if position is not None:
            self.rollout_box.setCurrentIndex(position)

    def next_step(self) -> None:
        self._move_step(+1)

    def prev_step(self) -> None:
        self._move_step(-1)

    def _move_step(self, direction: int) -> None:
        target = self.nav.neighbour_step(direction)
        if target is not None:
            self.open_step(target, index=self.nav.current_index)

    def _step_typed(self, value: int) -> None:
        step = self.nav.typed_step(value)
        if step is None:
            return
        if step != self.step:
            self.open_step(step, index=self.nav.current_index)
        elif step != value:
            self.step_box.blockSignals(True)
            self.step_box.setValue(step)
            self.step_box.blockSignals(False)

    def _follow_clicked(self, checked: bool) -> None:
        newest = self.nav.newest_step_to_follow() if checked else None
        if newest is not None:
            self.open_step(newest, index=self.nav.current_index)

    def _rollout_picked(self, position: int) -> None:
        if self.nav.pick(position):
            self._show_current()

    def _open_from_group(self, index: int) -> None:
        self.show_index(index)
        self.pages.setCurrentIndex(TRAJECTORY_PAGE)

    def _open_from_history(self, step: int, index: int) -> None:
        self.open_step(step, index=index, follow=False)
        self.pages.setCurrentIndex(TRAJECTORY_PAGE)

    # ============================================================== drawing

    def _clear(self) -> None:
        self.trajectory_page.clear()
        self.summary.setText("")
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
        pair = trajectory.layout == PAIR
        self.summary.setText(summary_html(trajectory))
        # Step badges are coloured against the group's steps (the recorded ones and the samples').
        references = self.current_group().step_references if trajectory.steps else None
        self.trajectory_page.show_trajectory(trajectory, self.prompt_check.isChecked(), references)
        self._fill_quantities(trajectory)
        self.recolour()
        self.trajectory_page.show_details(-1)
        if self.pages.currentIndex() == GROUP_PAGE:
            self._update_group()
        self.pages.setTabEnabled(GROUP_PAGE, not pair)
        self.pages.setTabToolTip(GROUP_PAGE, "These records are pairs: their sides are side by side on the "
                                 "Trajectory page" if pair else "Every completion of this rollout's prompt group")
        self.history_view.follow_prompt(trajectory.prompt)
        self._update_controls()
        self.trajectory_shown.emit()

    def _fill_quantities(self, trajectory: Trajectory) -> None:
        keys = trajectory.quantities()
        self.nav.fit_quantity(keys, trajectory.preferred)
        current = [self.quantity_box.itemData(i) for i in range(self.quantity_box.count())]
        if current != keys:
            self.quantity_box.blockSignals(True)
            self.quantity_box.clear()
            for key in keys:
                self.quantity_box.addItem(quantity(key).label, key)
            self.quantity_box.blockSignals(False)
            self.legend.reserve([(key, quantity(key).label, quantity(key).meaning) for key in keys])
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
            self.nav.key = key
            self.recolour()

    def _scope_picked(self, i: int) -> None:
        self.nav.scope = self.scope_box.itemData(i)
        self.recolour()

    def current_scale(self, key: str | None = None) -> Scale | None:
        """The scale of quantity `key` (default: the one coloured by) over the chosen scope."""
        trajectory, key = self.current, key or self.key
        if trajectory is None or not key:
            return None
        if self.scope == SCOPE_ROLLOUT:
            return trajectory_scale(trajectory, key)
        return step_scale(self.records, key, self.step)

    def recolour(self) -> None:
        """Colour the tokens, the plot and the legend by the chosen quantity."""
        trajectory = self.current
        if trajectory is None:
            return
        if not self.key:  # a record with no per-token numbers (no tokens at all)
            self.scale = None
            self.trajectory_page.colour("", None)
            self.legend.set_scale("", None, "", "")
            return
        self.scale = scale = self.current_scale()
        beside = self.current_scale("advantage") if wants_advantage(self.key, trajectory) else None
        self.trajectory_page.colour(self.key, scale, beside)
        q = quantity(self.key, trajectory.values(self.key))
        self.legend.set_scale(self.key, scale, q.meaning, q.label,
                              trajectory.episode is not None and trajectory.episode.has_tool_tokens)
        if self.pages.currentIndex() == GROUP_PAGE:
            self._update_group()

    def select_token(self, i: int) -> None:
        """Select token i in the text and the plot (as a click does)."""
        self.trajectory_page.select_token(i)

    # ============================================================== group

    def _page_changed(self, page: int) -> None:
        if page == GROUP_PAGE:
            self._update_group()

    def _group_scale(self, group, key: str) -> Scale:
        """The step's scale, widened by every completion of the group for the advantage."""
        advantages = [r.advantage for r in group.rows if r.advantage is not None] if group else []
        return group_scale(self.records, key, self.step, advantages) if self.records else Scale("diverging")

    def current_group(self):
        trajectory = self.current
        if trajectory is None or trajectory.layout == PAIR:
            return None
        return run_group(self.run, self.records, self.step, trajectory.group)

    def _update_group(self) -> None:
        """Show the current rollout's group: rebuilt when the group changed (another
        step or group, or the step's file was re-read), else recoloured and the current
        row moved."""
        trajectory = self.current
        key = (self.step, trajectory.group if trajectory else None, id(self.records))
        if key != self._group_key:
            self._group_key = key
            group = self.current_group()
            adv = self._group_scale(group, "advantage").scale if self.records else None
            self.group_view.show_group(group, trajectory.index if trajectory else None, self.key,
                                       self._group_scale(group, self.key),
                                       bool(trajectory) and trajectory.layout == SINGLE, adv)
            self._group_quantity = (self.key, self.scope)
            return
        if self._group_quantity != (self.key, self.scope):
            self._group_quantity = (self.key, self.scope)
            self.group_view.recolour(self.key, self._group_scale(self.group_view.group, self.key))
        self.group_view.set_current(trajectory.index if trajectory else None)

    # ============================================================== export

    def export_html_to(self, path: str | Path) -> Path:
        if self.current is None or self.scale is None:
            raise ValueError("no trajectory shown")
        return _write(path, export_html(self.current, self.key, self.scale, self.run.name if self.run else ""))

    def export_json_to(self, path: str | Path) -> Path:
        if self.current is None:
            raise ValueError("no trajectory shown")
        return _write(path, export_json(self.current) + "\n")

    def _export_dialog(self, suffix: str, kind: str, write) -> None:
        if self.current is None:
            return
        name = export_name(self.run.name if self.run is not None else "", self.current, suffix)
        start = str((self.run.run_dir if self.run is not None else Path.cwd()) / name)
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
        for move, possible in self.nav.moves().items():
            getattr(self, f"{move}_button").setEnabled(possible)


def _write(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.write_text(text, encoding="utf-8")
    return path

