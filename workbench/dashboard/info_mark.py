"""The ⓘ beside a plot's title, drawn rather than typed: U+24D8 is in none of the fonts
a bare Linux desktop (or Xvfb) has, and falls back to an empty box. A circle and an
"i" in the label's own font render everywhere. Hovering it shows the plot's help.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QWidget

MARK_COLOUR = "#5f6368"


class InfoMark(QWidget):
    """A small circled "i" whose tooltip is `tip` (rich text or plain)."""

    def __init__(self, tip: str, parent=None):
        super().__init__(parent)
        self.setObjectName("info-mark")
        self.setToolTip(tip)
        self.setCursor(Qt.WhatsThisCursor)
        side = max(12, self.fontMetrics().height() - 2)
        self.setFixedSize(QSize(side, side))

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.Antialiasing)
        colour = QColor(MARK_COLOUR)
        box = QRectF(self.rect()).adjusted(1, 1, -1, -1)
        painter.setPen(QPen(colour, 1.2))
        painter.drawEllipse(box)
        font = self.font()
        font.setBold(True)
        font.setPixelSize(max(8, int(box.height() * 0.72)))
        painter.setFont(font)
        painter.drawText(box, Qt.AlignCenter, "i")
        painter.end()


def help_tooltip(help_text: str) -> str:
    """A plot's help as its tooltip: one paragraph a line, escaped (rich text, so Qt
    wraps the long lines).

    >>> help_tooltip("a < b\\nc")
    '<p>a &lt; b</p><p>c</p>'
    """
    return "<p>" + "</p><p>".join(html.escape(line) for line in help_text.splitlines()) + "</p>"
