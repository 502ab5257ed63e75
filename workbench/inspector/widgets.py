"""Small parts of the Inspector tab: the legend (a gradient bar and the scale's words),
the step box that steps through recorded steps only, a side's panel, a tool button."""

from __future__ import annotations

import html

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QLinearGradient, QPainter, QPen
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from workbench.inspector.colors import NULL_HEX, Scale
from workbench.inspector.episodes import TOOL_HEX, TOOL_LEGEND
from workbench.inspector.navigation import SCOPE_ROLLOUT, SCOPE_STEP
from workbench.inspector.quantities import quantity_note
from workbench.inspector.text import TokenTextView

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
    """The quantity's name, its colour bar and what the colours mean; under them, for a
    quantity that has one (a reward model's score read at every token), its note."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("inspector-legend")
        self.name = QLabel()
        self.bar = GradientBar()
        self.text = QLabel()
        self.text.setTextFormat(Qt.RichText)
        self.text.setWordWrap(True)
        self.text.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Preferred)
        self.note = QLabel()
        self.note.setObjectName("inspector-quantity-note")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("QLabel { color: #5c4400; background: #fff8e1; padding: 3px 6px; }")
        self.note.hide()
        # The name over its bar, at the top: they stay put whatever the text beside them.
        column = QVBoxLayout()
        column.setSpacing(0)
        column.addWidget(self.name)
        column.addWidget(self.bar)
        column.addStretch(1)
        row = self._row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addLayout(column)
        row.addWidget(self.text, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(row)
        layout.addWidget(self.note)
        layout.addStretch(1)  # a legend shorter than its reserved room sits at the top
        # Room for the tallest legend of the quantities on offer (`reserve`), so the pages
        # under it do not jump when the quantity changes; measured on hidden twins.
        self._offered: list[tuple[str, str]] = []
        self._scale_line = ""
        self._probe, self._note_probe = QLabel(), QLabel()
        self._probe.setTextFormat(Qt.RichText)
        for probe, like in ((self._probe, self.text), (self._note_probe, self.note)):
            probe.setWordWrap(True)
            probe.setStyleSheet(like.styleSheet())

    def set_scale(self, key: str, scale: Scale | None, meaning: str, label: str, tool: bool = False) -> None:
        """`tool`: the record is an episode with tool tokens, drawn grey (their own entry)."""
        self.name.setText(f"<b>{html.escape(label)}</b>")
        self.bar.set_scale(scale)
        note = quantity_note(key) if scale is not None else ""
        self.note.setText(note)
        self.note.setVisible(bool(note))
        if scale is None:
            self.text.setText("")
            return
        tools = (f" · <span style='background:{TOOL_HEX}'>&nbsp;&nbsp;&nbsp;</span> {html.escape(TOOL_LEGEND)}"
                 if tool else "")
        self._scale_line = (f"<span style='color:#555'>scale: {html.escape(scale.how)} · "
                            f"<span style='background:{NULL_HEX}'>&nbsp;&nbsp;&nbsp;</span> null{tools}</span>")
        self.text.setText(f"{html.escape(meaning)}<br>{self._scale_line}")
        self._fit_height()

    def reserve(self, offered: list[tuple[str, str, str]]) -> None:
        """Keep room for the legend of each quantity on offer ((key, label, meaning)
        each): the longest label (or the bar) sets the name's width and the tallest
        legend the height, so switching quantity leaves the text beside them, and the
        pages under the legend, where they are (a longer meaning or a note moved the pages)."""
        if offered != self._offered:
            self._offered = list(offered)
            bold = QFont(self.name.font())
            bold.setBold(True)
            metrics = QFontMetrics(bold)
            longest = max((metrics.horizontalAdvance(label) + 2 for _, label, _ in offered), default=0)
            self.name.setMinimumWidth(max(longest, self.bar.width()))
            self.setMinimumHeight(0)
            self._fit_height()

    def _fit_height(self) -> None:
        # The text's width as laid out (name and bar fixed): not text.width(), which lags a layout pass.
        width = self.width() - max(self.name.minimumWidth(), self.bar.width()) - self._row.spacing()
        note_width = self.width()
        if not self._offered or width < 60:
            return
        tallest = 0
        for key, _label, meaning in self._offered:
            self._probe.setText(f"{html.escape(meaning)}<br>{self._scale_line}")
            height = max(self._probe.heightForWidth(width), self.bar.height() + self.name.sizeHint().height())
            note = quantity_note(key)
            if note:
                self._note_probe.setText(note)
                height += self.layout().spacing() + self._note_probe.heightForWidth(note_width)
            tallest = max(tallest, height)
        # Only ever up while the same quantities are on offer: a scale's words differ a little.
        if tallest > self.minimumHeight():
            self.setMinimumHeight(tallest)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self.setMinimumHeight(0)
            self._fit_height()

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


def checked_box(text: str, tip: str) -> QCheckBox:
    box = QCheckBox(text)
    box.setChecked(True)
    box.setToolTip(tip)
    return box


class ControlBar(QWidget):
    """The bar of pickers: step (with ↑/↓ buttons and how many are recorded), rollout
    (←/→), the quantity to colour by and the scale's scope."""

    PARTS = ("step_box", "prev_step_button", "next_step_button", "steps_label", "rollout_box",
             "prev_rollout_button", "next_rollout_button", "quantity_box", "scope_box")

    def __init__(self, parent=None):
        super().__init__(parent)
        self.step_box = StepBox()
        self.step_box.setObjectName("inspector-step")
        self.step_box.setToolTip("Step (only steps with token-level records)")
        self.prev_step_button = _button("▲", "Previous step (↑)")
        self.next_step_button = _button("▼", "Next step (↓)")
        self.steps_label = QLabel()
        self.steps_label.setStyleSheet("QLabel { color: #666; }")
        self.rollout_box = QComboBox()
        self.rollout_box.setObjectName("inspector-rollout")
        self.rollout_box.setMinimumContentsLength(12)  # it stretches; 18 made the bar (with 400 steps) 1,036 px
        self.rollout_box.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.prev_rollout_button = _button("◀", "Previous rollout (←)")
        self.next_rollout_button = _button("▶", "Next rollout (→)")
        self.quantity_box = QComboBox()
        self.quantity_box.setObjectName("inspector-quantity")
        self.quantity_box.setMinimumContentsLength(12)
        self.quantity_box.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.quantity_box.setToolTip("The per-token quantity the colours and the plot show (those this record has)")
        self.scope_box = QComboBox()
        self.scope_box.addItem("scale over the step", SCOPE_STEP)
        self.scope_box.addItem("scale over the rollout", SCOPE_ROLLOUT)
        self.scope_box.setToolTip("Over which tokens the colour scale is taken: all recorded rollouts of the step "
                                  "(colours compare across rollouts) or the shown rollout alone")
        bar = QHBoxLayout(self)
        bar.setContentsMargins(0, 0, 0, 0)
        bar.setSpacing(4)
        for item in (QLabel("Step"), self.step_box, self.prev_step_button, self.next_step_button,
                     self.steps_label, 12, QLabel("Rollout"), (self.rollout_box, 1), self.prev_rollout_button,
                     self.next_rollout_button, 12, QLabel("Colour by"), self.quantity_box, self.scope_box):
            if isinstance(item, int):
                bar.addSpacing(item)
            elif isinstance(item, tuple):
                bar.addWidget(*item)
            else:
                bar.addWidget(item)

