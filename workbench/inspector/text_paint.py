"""What the token text (text.py) paints besides the tokens' glyphs: each token's
colours (a scale's lookup table as QColors; an episode's tool tokens grey), a step's
score badge after its end token, and an episode's turn and tool tags before a token.

Each painter draws one box at (x, top), `w` wide, in a line `line_height` tall, with the
view's small tag font (`Fonts`), and leaves the painter's font as the view's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen

from workbench.inspector.colors import Scale, lut_indices, text_hex
from workbench.inspector.episodes import TOOL_HEX, TOOL_TEXT_HEX, TURN

STEP_BAR = QColor("#37474f")  # the boundary after a step's end token
TURN_TAG, TURN_RULE = QColor("#37474f"), QColor("#90a4ae")  # a turn's tag, the rule between turns
TOOL_BG, TOOL_FG = QColor(TOOL_HEX), QColor(TOOL_TEXT_HEX)

_LUTS: dict[tuple[str, str], tuple[list[QColor], list[QColor]]] = {}


def lut_colours(scale: Scale) -> tuple[list[QColor], list[QColor]]:
    """The scale's lookup table as QColors: backgrounds, and the readable text colour
    on each (made once per map: the table depends on the map, not on the numbers)."""
    key = (scale.kind, scale.stops if scale.kind == "sequential" else "")
    hit = _LUTS.get(key)
    if hit is None:
        table = scale.table()
        hit = _LUTS[key] = ([QColor(h) for h in table], [QColor(text_hex(h)) for h in table])
    return hit


def token_colours(values: np.ndarray, scale: Scale, tool_mask: np.ndarray | None = None
                  ) -> tuple[list[QColor], list[QColor]]:
    """Background and text colour of every token (a numpy mapping and two lookups); an
    episode's tool tokens (`tool_mask`, True per tool token) grey whatever their value."""
    backgrounds, texts = lut_colours(scale)
    idx = lut_indices(values, scale).tolist()
    bg, fg = [backgrounds[i] for i in idx], [texts[i] for i in idx]
    for i in np.flatnonzero(tool_mask) if tool_mask is not None and len(tool_mask) == len(bg) else ():
        bg[i], fg[i] = TOOL_BG, TOOL_FG
    return bg, fg


@dataclass
class Fonts:
    """The view's fonts: the text's and the smaller one of tags and badges."""

    text: QFont
    tag: QFont
    tag_metrics: QFontMetricsF


# A badge's room besides its text: the bar, the pill's edge, the score's dot and air.
BADGE_EXTRA = 20.0
BADGE_DOT = 9.0


def paint_badge(painter: QPainter, badge: tuple[str, QColor, QColor], x: float, top: float, w: float,
                line_height: float, fonts: Fonts) -> None:
    """A step's boundary (a bar the line's height) and its score: a white pill with a
    slate edge, a dot of the score's colour and the score in italics. Nothing like a
    token (a borderless box of colour, upright text): in a sort task the score "1"
    drawn as a token's would be read as the digit 1 of the answer."""
    text, bg, _fg = badge
    painter.setPen(QPen(STEP_BAR, 2))
    painter.drawLine(QPointF(x + 1, top + 1), QPointF(x + 1, top + line_height - 1))
    tag_h = fonts.tag_metrics.height()
    middle = top + line_height / 2
    pill = QRectF(x + 3, middle - tag_h / 2 - 1, w - 3, tag_h + 2)
    painter.setRenderHint(QPainter.Antialiasing, True)
    painter.setBrush(QColor("white"))
    painter.setPen(QPen(STEP_BAR, 1.2))
    painter.drawRoundedRect(pill, 5, 5)
    painter.setBrush(bg)
    painter.setPen(QPen(STEP_BAR, 0.6))
    painter.drawEllipse(QRectF(x + 4, middle - BADGE_DOT / 2, BADGE_DOT, BADGE_DOT))
    painter.setRenderHint(QPainter.Antialiasing, False)
    painter.setBrush(Qt.NoBrush)
    font = QFont(fonts.tag)
    font.setItalic(True)
    painter.setFont(font)
    painter.setPen(STEP_BAR)
    painter.drawText(QPointF(x + 4 + BADGE_DOT + 3, middle - tag_h / 2 + fonts.tag_metrics.ascent()), text)
    painter.setFont(fonts.text)


def paint_tag(painter: QPainter, tag: tuple[str, str], x: float, top: float, w: float, line_height: float,
              fonts: Fonts) -> None:
    """An episode's tag (episodes.Episode.text_tags): a turn's white on dark slate, a
    tool reply's on the tool grey."""
    text, kind = tag
    turn = kind == TURN
    tag_h = fonts.tag_metrics.height()
    pill = QRectF(x + 1, top + (line_height - tag_h) / 2 - 1, w - 3, tag_h + 2)
    painter.setBrush(TURN_TAG if turn else TOOL_BG)
    painter.setPen(QPen(TURN_TAG if turn else TOOL_FG, 0.8))
    painter.drawRoundedRect(pill, 4, 4)
    painter.setBrush(Qt.NoBrush)
    painter.setFont(fonts.tag)
    painter.setPen(QColor("white") if turn else TOOL_FG)
    painter.drawText(QPointF(x + 4, top + (line_height - tag_h) / 2 + fonts.tag_metrics.ascent()), text)
    painter.setFont(fonts.text)


def paint_rules(painter: QPainter, tops: list[float], left: float, right: float) -> None:
    """The rules between an episode's turns: a line across the text at each `top`."""
    painter.setPen(QPen(TURN_RULE, 1.5))
    for top in tops:
        painter.drawLine(QPointF(left, top), QPointF(right, top))
