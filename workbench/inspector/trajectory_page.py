"""The inspector's Trajectory page: the completion as text after its dimmed prompt (DPO:
chosen and rejected side by side, headed by their implicit rewards and, for a sampled
pair, their scores; an unpaired completion headed by its desirable/undesirable label),
each token on the colour of its value; under it the quantity against token position,
linked both ways (hover or click a token and the plot marks it; hover or click the plot
and the token is marked and scrolled to); the selected token's numbers beside the plot.
A completion scored step by step shows each step's score after its end token (coloured
against its group's mean), underlines steps in turn and marks the step ends in the plot.
A multi-turn episode is drawn in turn blocks, its tool tokens grey and shaded in the plot
(episodes.py)."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QScrollArea, QSplitter

from workbench.inspector.colors import Scale
from workbench.inspector.export import tooltip_html
from workbench.inspector.quantities import _num, quantity
from workbench.run_declaration import PAIR
from workbench.inspector.records import Side, Trajectory
from workbench.inspector.episodes import tool_spans
from workbench.inspector.plot import QuantityPlot
from workbench.inspector.steps import Reference, badges, plot_marks, step_parity
from workbench.inspector.text_paint import token_colours
from workbench.inspector.update_effect import token_marks
from workbench.inspector.widgets import SidePanel


def side_header(trajectory: Trajectory, side: Side) -> str:
    """The line above a side's text: a pair's side (its score when the pair was
    sampled and scored, its implicit reward; a pair without implicit rewards, a reward
    model's, its reward); a demonstration, as the data's; an unpaired completion's
    label; else ''."""
    if trajectory.layout == PAIR:
        colour = "#2e7d32" if side is trajectory.sides[0] else "#b00020"
        score = ""
        if trajectory.scored:
            parts = ", ".join(f"{html.escape(str(k))} {_num(v)}" for k, v in (side.rewards or {}).items())
            score = f" · score <b>{_num(side.reward)}</b>" + (f" ({parts})" if parts else "")
        if "implicit_reward" not in side.numbers:  # a reward model's pair: its side's reward is its score
            return (f"<b style='color:{colour}'>{html.escape(side.name)}</b> · reward <b>{_num(side.reward)}</b>"
                    f" · {len(side)} tokens")
        return (f"<b style='color:{colour}'>{html.escape(side.name)}</b>{score} · implicit reward "
                f"<b>{_num(trajectory.side_implicit_reward(side))}</b> · {len(side)} tokens")
    if trajectory.demonstration:
        return ("<b style='color:#1565c0'>demonstration</b> · the data's answer, not a sample from the model: "
                "where a token is unlikely under the model, the model disagrees with the data")
    if trajectory.desirable is None:
        return ""
    if trajectory.desirable:
        return ("<b style='color:#2e7d32'>desirable</b> · labelled good: the update pushes this completion up "
                "(above the reference)")
    return ("<b style='color:#b00020'>undesirable</b> · labelled bad: the update pushes this completion down "
            "(below the reference)")


class TrajectoryPage(QSplitter):
    """The text panes above, the plot and the token's numbers below. `trajectory` is
    the shown record (None: nothing), `selected` the clicked token (-1: none)."""

    def __init__(self, parent=None):
        super().__init__(Qt.Vertical, parent)
        self.trajectory: Trajectory | None = None
        self.selected = -1
        self.sides = [SidePanel(), SidePanel()]
        side_split = QSplitter(Qt.Horizontal)
        for panel in self.sides:
            side_split.addWidget(panel)
        self.sides[1].hide()
        self.plot = QuantityPlot()
        self.details = self._build_details()
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
        self.addWidget(side_split)
        self.addWidget(lower)
        self.setStretchFactor(0, 1)
        self.setStretchFactor(1, 1)
        self._split_moved_by_user = False
        self.splitterMoved.connect(self._split_moved)
        self._wire()

    @staticmethod
    def _build_details() -> QLabel:
        details = QLabel()
        details.setObjectName("inspector-token-details")
        details.setTextFormat(Qt.RichText)
        details.setAlignment(Qt.AlignTop | Qt.AlignLeft)
        details.setWordWrap(True)
        details.setTextInteractionFlags(Qt.TextSelectableByMouse)
        details.setMargin(6)
        return details

    def _wire(self) -> None:
        for k, panel in enumerate(self.sides):
            panel.view.token_hovered.connect(lambda i, k=k: self._text_hovered(k, i))
            panel.view.token_clicked.connect(lambda i, k=k: self._text_clicked(k, i))
            panel.view.tooltip_for = lambda i, k=k: self._tooltip(k, i)
            panel.view.content_height_changed.connect(lambda _h: self.fit_text_pane())
        self.plot.point_hovered.connect(self._plot_hovered)
        self.plot.point_clicked.connect(self._plot_clicked)

    # ================================================================ drawing

    def clear(self) -> None:
        self.trajectory = None
        for panel in self.sides:
            panel.view.set_content("", [])
            panel.header.setText("")
        self.sides[1].hide()
        self.plot.set_series([], "", None)
        self.plot.set_step_ends([])
        self.plot.set_tool_spans([])
        self.details.setText("")

    def show_trajectory(self, trajectory: Trajectory, show_prompt: bool,
                        step_references: dict[str, Reference] | None = None) -> None:
        """Draw a record's text (uncoloured until `colour`), no token selected.
        `step_references`: each step reward's scores over the rollout's group, which its
        step badges are coloured against (default: the rollout's own)."""
        self.trajectory = trajectory
        pair = trajectory.layout == PAIR
        self.sides[1].setVisible(pair)
        steps, episode = trajectory.steps, trajectory.episode
        for k, panel in enumerate(self.sides):
            if k < len(trajectory.sides):
                side = trajectory.sides[k]
                panel.view.set_show_prompt(show_prompt)
                stepped = k == 0 and bool(steps)
                panel.view.set_content(trajectory.prompt, side.tokens,
                                       badges(steps, step_references or {}) if stepped else None,
                                       step_parity(steps, len(side)) if stepped else None,
                                       episode.text_tags() if k == 0 and episode is not None else None)
                header = side_header(trajectory, side)
                panel.header.setText(header)
                panel.header.setVisible(bool(header))
        self.plot.set_step_ends(plot_marks(steps))
        self.plot.set_tool_spans(tool_spans(episode.tool_mask) if episode is not None else [])
        self.fit_text_pane()
        self.selected = -1
        self.plot.mark(-1)
        self.plot.select(-1)

    def set_show_prompt(self, show: bool) -> None:
        for panel in self.sides:
            panel.view.set_show_prompt(show)

    def colour(self, key: str, scale: Scale | None, advantage_scale: Scale | None = None) -> None:
        """Colour the tokens and the plot by quantity `key` on `scale` (no key: none).
        Coloured by the update's change, the tokens that moved against their push are
        boxed, and with `advantage_scale` the plot draws the advantage on a right axis
        of that range (update_effect.wants_advantage says when)."""
        trajectory = self.trajectory
        if trajectory is None:
            return
        if not key:  # a record with no per-token numbers (no tokens at all)
            for panel in self.sides:
                panel.view.set_colours([], [])
            self.plot.set_series([], "", None)
            return
        values = trajectory.values(key)
        q = quantity(key, values)
        clipped = []
        colours = []
        for k, side in enumerate(trajectory.sides):
            view = self.sides[k].view
            tools = trajectory.episode.tool_mask if k == 0 and trajectory.episode is not None else None
            backgrounds, texts = token_colours(values[k], scale, tools)
            colours.append(backgrounds)
            view.set_colours(backgrounds, texts)
            c = token_marks(trajectory, k, key)
            clipped.append(c)
            view.set_marks([bool(x == 1) for x in c] if c is not None else None)
        y_range = (scale.low, scale.high) if scale is not None else None
        companion = None
        if advantage_scale is not None:
            companion = (trajectory.values("advantage")[0], "advantage", (advantage_scale.low, advantage_scale.high))
        self.plot.set_series(values, q.label, q.centre if q.kind == "diverging" else None, clipped,
                             [s.name for s in trajectory.sides], y_range, colours, companion)
        if self.selected >= 0:
            self.show_details(self.selected)

    def _split_moved(self, *_args) -> None:
        self._split_moved_by_user = True

    def fit_text_pane(self) -> None:
        """Give a short text only the height it needs (the plot gets the rest), a long
        one half, unless the user has moved the divider."""
        total = sum(self.sizes())
        if self._split_moved_by_user or total <= 0:
            return
        views = [p.view for p in self.sides if p.isVisible()] or [self.sides[0].view]
        header = self.sides[0].header.sizeHint().height() if self.sides[0].header.isVisible() else 0
        needed = max(v.content_height() for v in views) + 2 * views[0].frameWidth() + header + 4
        text = max(110, min(needed, total // 2))
        self.blockSignals(True)
        self.setSizes([text, total - text])
        self.blockSignals(False)

    # ================================================================ linking

    def _text_hovered(self, side: int, i: int) -> None:
        self.plot.mark(i)
        for k, panel in enumerate(self.sides):
            if k != side:
                panel.view.set_hovered(i)
        self.show_details(i if i >= 0 else self.selected)

    def _text_clicked(self, side: int, i: int) -> None:
        self.selected = i
        self.plot.select(i)
        for k, panel in enumerate(self.sides):
            if k != side:
                panel.view.set_selected(i, scroll=False)
        self.show_details(i)

    def _plot_hovered(self, i: int) -> None:
        for panel in self.sides:
            panel.view.set_hovered(i, scroll=True)
        self.show_details(i if i >= 0 else self.selected)

    def _plot_clicked(self, i: int) -> None:
        self.selected = i
        for panel in self.sides:
            panel.view.set_selected(i, scroll=True)
        self.show_details(i)

    def select_token(self, i: int) -> None:
        """Select token i in the text and the plot (as a click does)."""
        self._plot_clicked(i)
        self.plot.select(i)

    def _tooltip(self, side: int, i: int) -> str:
        trajectory = self.trajectory
        return tooltip_html(trajectory, side, i) if trajectory is not None and side < len(trajectory.sides) else ""

    def show_details(self, i: int) -> None:
        trajectory = self.trajectory
        if trajectory is None or i < 0:
            self.details.setText("<span style='color:#888'>Hover or click a token (in the text or the plot) "
                                 "to see its numbers and the top alternatives.</span>")
            return
        parts = []
        for k, side in enumerate(trajectory.sides):
            if i < len(side):
                parts.append(tooltip_html(trajectory, k, i))
        self.details.setText("<hr>".join(parts))
