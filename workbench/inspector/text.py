"""The token text of the trajectory inspector: a completion drawn as text after its
(dimmed) prompt, each token on a background of its own colour.

A custom-painted scroll area rather than a rich-text document: the layout (token boxes
flowing into lines) is computed once per text and width, recolouring is a list of
colours and a repaint, only the lines in view are painted, and hit-testing a point is
a lookup in its line. So 2,000 tokens lay out and recolour in milliseconds, and the
hover and selection marks that link the text to the plot are drawn, not re-laid out.

Whitespace is visible (space ·, tab →, newline ↵ then a real line break, other
control characters as control pictures, a token that decodes to nothing ∅) and
special tokens (<eos>, <|im_end|>) are drawn as tags.

A completion scored step by step (a process reward) gets, after each step's end token,
a bar and a badge with the step's score (a box of its own in the flow, so nothing is
drawn over the text), and a thin underline that alternates shade from one step to the
next; a record without steps is laid out exactly as before.

A multi-turn episode (workbench/inspector/episodes.py) is drawn in turn blocks: each
turn starts a line with a `turn k` tag (a rule above it from the second turn on), each
tool reply starts a line with a tag naming the tools it answers, and the tool tokens
are grey whatever the quantity (text_paint.token_colours' `tool_mask`). The colours, badges
and tags are painted by text_paint.py.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontDatabase, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import QAbstractScrollArea, QFrame, QToolTip

from workbench.inspector.colors import text_hex
from workbench.inspector.episodes import TURN
from workbench.inspector.records import BREAK, MARK, SPECIAL, prompt_segments, token_segments
from workbench.inspector.text_paint import BADGE_EXTRA, Fonts, paint_badge, paint_rules, paint_tag

PROMPT_COLOUR = QColor("#8a8a8a")
HOVER_PEN = QColor("#111111")
SELECT_PEN = QColor("#1565c0")
MARK_PEN = QColor("#d50000")
PAD_X = 2.0  # inside a token box, each side
GAP = 1.0  # between token boxes: the boundary shows even between equal colours
MARGIN = 8.0
STEP_UNDERLINES = (QColor("#607d8b"), QColor("#cfd8dc"))  # alternate steps' underlines
BADGE = "badge"  # a step's score drawn after its end token (a box kind of its own)
TAG = "tag"  # an episode's turn or tool tag drawn before a token (a box kind of its own)


def inspector_font(point_size: float = 11.0) -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.FixedFont)
    font.setPointSizeF(point_size)
    return font


class TokenTextView(QAbstractScrollArea):
    """Tokens (and the prompt before them) as wrapped, coloured text.

    Signals: `token_hovered(i)` (-1 when the pointer leaves the tokens),
    `token_clicked(i)`, `token_double_clicked(i)`. `tooltip_for(i)` (set by the
    owner) gives a token's tooltip HTML.
    """

    token_hovered = Signal(int)
    token_clicked = Signal(int)
    token_double_clicked = Signal(int)
    content_height_changed = Signal(int)

    def __init__(self, parent=None, compact: bool = False, max_lines: int = 10):
        super().__init__(parent)
        self.compact = compact  # a group row: as tall as its text, up to max_lines
        self.max_lines = max_lines
        self._ready = False
        self.setFont(inspector_font(10.0 if compact else 11.0))
        self.viewport().setMouseTracking(True)
        self.setFocusPolicy(Qt.ClickFocus)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.setFrameShape(QFrame.StyledPanel)
        self.viewport().setAutoFillBackground(True)
        pal = self.viewport().palette()
        pal.setColor(self.viewport().backgroundRole(), QColor("white"))
        self.viewport().setPalette(pal)
        self.tooltip_for: Callable[[int], str] | None = None
        self.prompt = ""
        self.show_prompt = True
        self.tokens: list[str] = []
        self._segments: list[list[tuple[str, str]]] = []
        self.background: list[QColor] = []
        self.foreground: list[QColor] = []
        self.marks: list[bool] | None = None
        # Step rewards: {end token: [(badge text, background, text colour)]}, and each
        # token's step parity for the underline (-1: in no step).
        self.step_badges: dict[int, list[tuple[str, QColor, QColor]]] = {}
        self.step_parity: list[int] | None = None
        self.tags: dict[int, tuple[str, str]] = {}  # an episode's: {token: (text, TURN or TOOL)} drawn before it
        self.hovered = -1
        self.selected = -1
        # Layout: one entry per drawn box (a token, a piece of a token cut by a newline,
        # or a word of the prompt), in reading order.
        self._box_line: list[int] = []
        self._box_x: list[float] = []
        self._box_w: list[float] = []
        self._box_token: list[int] = []  # -1: prompt text; a badge's box: its step's end token
        self._box_badge: dict[int, tuple[str, QColor, QColor]] = {}  # box -> the step badge it draws
        self._box_tag: dict[int, tuple[str, str]] = {}  # box -> the episode tag it draws
        self._rule_lines: list[int] = []  # lines with a rule above them (a turn after the first)
        self._box_parts: list[list[tuple[float, str, str]]] = []  # (dx, text, kind)
        self._line_start: list[int] = [0]  # first box of each line
        self._token_boxes: dict[int, list[int]] = {}
        self._laid_out_width = -1.0
        self._widths: dict[tuple[str, bool], float] = {}
        self._set_metrics()
        self._ready = True

    # ------------------------------------------------------------------ content

    def _set_metrics(self) -> None:
        self._fm = QFontMetricsF(self.font())
        self._tag_font = QFont(self.font())
        self._tag_font.setPointSizeF(max(6.0, self.font().pointSizeF() - 2))
        self._tag_fm = QFontMetricsF(self._tag_font)
        self.line_height = round(self._fm.height() + 8)
        self._widths.clear()

    def set_content(self, prompt: str, tokens: list[str], step_badges: dict[int, list[tuple[str, str]]] | None = None,
                    step_parity: list[int] | None = None, tags: dict[int, tuple[str, str]] | None = None) -> None:
        """The prompt and the tokens; `step_badges` {end token: [(text, background hex)]}
        and `step_parity` (each token's step, 0/1 alternating, -1 none) for a completion
        scored step by step (workbench/inspector/steps.py); `tags` {token: (text, kind)}
        for an episode's turns and tool replies (episodes.Episode.text_tags)."""
        self.tags = dict(tags or {})
        self.prompt = prompt
        self.tokens = list(tokens)
        self._segments = [token_segments(t) for t in self.tokens]
        self.step_badges = {i: [(text, QColor(bg), QColor(text_hex(bg))) for text, bg in items]
                            for i, items in (step_badges or {}).items()}
        self.step_parity = step_parity if step_parity is not None and len(step_parity) == len(self.tokens) else None
        self.hovered = self.selected = -1
        if len(self.background) != len(self.tokens):
            self.background = [QColor("#f7f7f7")] * len(self.tokens)
            self.foreground = [QColor("black")] * len(self.tokens)
        self.marks = None
        self.relayout()

    def set_show_prompt(self, show: bool) -> None:
        if show != self.show_prompt:
            self.show_prompt = show
            self.relayout()

    def set_colours(self, background: list[QColor], foreground: list[QColor]) -> None:
        self.background = background
        self.foreground = foreground
        self.viewport().update()

    def set_marks(self, marks: list[bool] | None) -> None:
        """Tokens to box in red (clipped tokens, when the ratio is shown)."""
        self.marks = marks
        self.viewport().update()

    def set_hovered(self, i: int, scroll: bool = False) -> None:
        """Highlight token i (-1: none) without emitting token_hovered."""
        if i != self.hovered:
            self.hovered = i
            self.viewport().update()
        if scroll and i >= 0:
            self.ensure_visible(i)

    def set_selected(self, i: int, scroll: bool = True) -> None:
        if i != self.selected:
            self.selected = i
            self.viewport().update()
        if scroll and i >= 0:
            self.ensure_visible(i)

    # ------------------------------------------------------------------- layout

    def _width(self, text: str, tag: bool) -> float:
        key = (text, tag)
        w = self._widths.get(key)
        if w is None:
            w = self._widths[key] = (self._tag_fm if tag else self._fm).horizontalAdvance(text) + (8.0 if tag else 0.0)
        return w

    def _layout_width(self) -> float:
        """The width the text flows in: the viewport's with the scroll bar shown, so
        the bar appearing or going (a long text after a short one) does not make the
        text flow again."""
        bar = self.verticalScrollBar()
        width = self.viewport().width()
        if not bar.isVisible():
            width -= bar.sizeHint().width()
        return float(max(1, width))

    def relayout(self) -> None:
        """Flow the boxes into lines for the viewport's width."""
        width = self._layout_width()
        self._laid_out_width = width
        right = max(MARGIN + 40.0, width - MARGIN)
        lines, xs, ws, toks, parts = [], [], [], [], []
        line_start = [0]
        token_boxes: dict[int, list[int]] = {}
        box_badge: dict[int, tuple[str, QColor, QColor]] = {}
        box_tag: dict[int, tuple[str, str]] = {}
        rule_lines: list[int] = []
        line, x = 0, MARGIN
        measure = self._width
        step_badges, tags = self.step_badges, self.tags

        def place(w: float, token: int, box_parts: list, badge: tuple | None = None, tag: tuple | None = None) -> None:
            nonlocal line, x
            if x + w > right and x > MARGIN:
                line += 1
                x = MARGIN
                line_start.append(len(lines))
            lines.append(line)
            xs.append(x)
            ws.append(w)
            toks.append(token)
            parts.append(box_parts)
            if badge is not None:
                box_badge[len(lines) - 1] = badge
            elif tag is not None:
                box_tag[len(lines) - 1] = tag
            elif token >= 0:
                token_boxes.setdefault(token, []).append(len(lines) - 1)
            x += w + GAP

        def new_line() -> None:
            nonlocal line, x
            line += 1
            x = MARGIN
            line_start.append(len(lines))

        if self.show_prompt and self.prompt:
            for text, kind in prompt_segments(self.prompt):
                if kind == BREAK:
                    new_line()
                    continue
                w = measure(text, kind == SPECIAL)
                place(w, -1, [(0.0, text, kind)])
            x += 4.0  # a little air between prompt and completion
        for i, segments in enumerate(self._segments):
            tag = tags.get(i) if tags else None
            if tag is not None:  # an episode's turn or tool reply begins: a line of its own
                if x > MARGIN:
                    new_line()
                if tag[1] == TURN and i > 0:
                    rule_lines.append(line)
                place(measure(tag[0], True) + 6.0, i, [(3.0, tag[0], TAG)], tag=tag)
            # The token's pieces (a newline ends one), each with whether a line break follows.
            pieces: list[tuple[list, float, bool]] = []
            box: list[tuple[float, str, str]] = []
            dx = PAD_X
            for text, kind in segments:
                if kind == BREAK:
                    pieces.append((box, dx + PAD_X, True))
                    box, dx = [], PAD_X
                    continue
                box.append((dx, text, kind))
                dx += measure(text, kind == SPECIAL)
            if box or not segments:
                pieces.append((box, dx + PAD_X, False))
            badges = step_badges.get(i) if step_badges else None
            for k, (box, w, breaks) in enumerate(pieces):
                place(w, i, box)
                if badges and k == len(pieces) - 1:  # after the step's last piece, before its line break
                    for badge in badges:
                        place(measure(badge[0], True) + BADGE_EXTRA, i, [(4.0, badge[0], BADGE)], badge)
                if breaks:
                    new_line()
        self._box_line, self._box_x, self._box_w, self._box_token, self._box_parts = lines, xs, ws, toks, parts
        self._box_badge, self._box_tag, self._rule_lines = box_badge, box_tag, rule_lines
        self._line_start = line_start
        self._token_boxes = token_boxes
        self._update_scroll()
        self.viewport().update()
        height = self.content_height()
        if height != getattr(self, "_last_height", None):
            self._last_height = height
            self.content_height_changed.emit(height)

    def drawn_boxes(self) -> list[tuple[str, int, str]]:
        """The completion's boxes in reading order: ("token", i, "") for a token's box,
        ("badge", end token, text) for a step's score after its end token and ("tag", i,
        text) for an episode's tag before token i."""
        out = []
        for box, token in enumerate(self._box_token):
            if box in self._box_badge:
                out.append(("badge", token, self._box_badge[box][0]))
            elif box in self._box_tag:
                out.append(("tag", token, self._box_tag[box][0]))
            elif token >= 0:
                out.append(("token", token, ""))
        return out

    def badge_rects(self) -> list[QRectF]:
        """Each step badge's box in viewport coordinates, in reading order."""
        offset = self.verticalScrollBar().value()
        return [self.box_rect(box).translated(0, -offset) for box in sorted(self._box_badge)]

    @property
    def line_count(self) -> int:
        return (self._box_line[-1] + 1) if self._box_line else 0

    def content_height(self) -> int:
        return int(self.line_count * self.line_height + 2 * MARGIN)

    def _update_scroll(self) -> None:
        height = self.content_height()
        if self.compact:
            frame = 2 * self.frameWidth()
            target = min(height, int(self.max_lines * self.line_height + 2 * MARGIN)) + frame
            if self.height() != target:
                self.setFixedHeight(target)
        bar = self.verticalScrollBar()
        page = self.viewport().height()
        bar.setRange(0, max(0, height - page))
        bar.setPageStep(max(1, page))
        bar.setSingleStep(self.line_height)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self._layout_width() != self._laid_out_width:
            self.relayout()
        else:
            self._update_scroll()

    def _line_top(self, line: int) -> float:
        return MARGIN + line * self.line_height

    def box_rect(self, box: int) -> QRectF:
        """A box in content coordinates (the background drawn behind a token)."""
        top = self._line_top(self._box_line[box]) + 2
        return QRectF(self._box_x[box], top, self._box_w[box], self.line_height - 4)

    def token_rect(self, i: int) -> QRectF:
        """Token i's first box in viewport coordinates (empty when it has none)."""
        boxes = self._token_boxes.get(i)
        if not boxes:
            return QRectF()
        return self.box_rect(boxes[0]).translated(0, -self.verticalScrollBar().value())

    def ensure_visible(self, i: int) -> None:
        boxes = self._token_boxes.get(i)
        if not boxes:
            return
        rect = self.box_rect(boxes[0])
        bar = self.verticalScrollBar()
        top, bottom = bar.value(), bar.value() + self.viewport().height()
        if rect.top() < top or rect.bottom() > bottom:
            bar.setValue(int(rect.center().y() - self.viewport().height() / 2))

    def token_at(self, pos) -> int:
        """The token under a viewport point, or -1."""
        y = pos.y() + self.verticalScrollBar().value() - MARGIN
        if y < 0:
            return -1
        line = int(y // self.line_height)
        if line >= len(self._line_start):
            return -1
        start = self._line_start[line]
        end = self._line_start[line + 1] if line + 1 < len(self._line_start) else len(self._box_line)
        x = pos.x()
        for box in range(start, end):
            if self._box_x[box] <= x < self._box_x[box] + self._box_w[box] + GAP:
                return self._box_token[box]
        return -1

    # -------------------------------------------------------------------- paint

    def paintEvent(self, event) -> None:
        painter = QPainter(self.viewport())
        offset = self.verticalScrollBar().value()
        painter.translate(0, -offset)
        exposed = event.rect().translated(0, offset)
        first = max(0, int((exposed.top() - MARGIN) // self.line_height))
        last = int((exposed.bottom() - MARGIN) // self.line_height) + 1
        if first >= len(self._line_start):
            return
        start = self._line_start[first]
        end = self._line_start[last] if last < len(self._line_start) else len(self._box_line)
        font, tag_font = self.font(), self._tag_font
        ascent = self._fm.ascent()
        text_top = (self.line_height - self._fm.height()) / 2
        tag_ascent = self._tag_fm.ascent()
        tag_h = self._tag_fm.height()
        bgs, fgs = self.background, self.foreground
        marks = self.marks
        box_badge, box_tag, parity = self._box_badge, self._box_tag, self.step_parity
        painter.setFont(font)
        paint_rules(painter, [self._line_top(line) for line in self._rule_lines if first <= line <= last],
                    MARGIN, self.viewport().width() - MARGIN)
        fonts = Fonts(font, tag_font, self._tag_fm)
        for box in range(start, end):
            token = self._box_token[box]
            x = self._box_x[box]
            top = self._line_top(self._box_line[box])
            badge = box_badge.get(box) if box_badge else None
            if badge is not None:
                paint_badge(painter, badge, x, top, self._box_w[box], self.line_height, fonts)
                continue
            if box_tag and box in box_tag:
                paint_tag(painter, box_tag[box], x, top, self._box_w[box], self.line_height, fonts)
                continue
            if parity is not None and 0 <= token < len(parity) and parity[token] >= 0:
                painter.fillRect(QRectF(x, top + self.line_height - 2, self._box_w[box] + GAP, 2),
                                 STEP_UNDERLINES[parity[token] % 2])
            if token >= 0:
                fg = fgs[token] if token < len(fgs) else QColor("black")
                painter.fillRect(QRectF(x, top + 2, self._box_w[box], self.line_height - 4),
                                 bgs[token] if token < len(bgs) else QColor("#f7f7f7"))
            else:
                fg = PROMPT_COLOUR
            baseline = top + text_top + ascent
            for dx, text, kind in self._box_parts[box]:
                if kind == SPECIAL:
                    w = self._width(text, True)
                    tag = QRectF(x + dx + 1, top + (self.line_height - tag_h) / 2 - 1, w - 2, tag_h + 2)
                    painter.setPen(QPen(fg, 1))
                    painter.drawRoundedRect(tag, 3, 3)
                    painter.setFont(tag_font)
                    painter.drawText(QPointF(x + dx + 4, top + (self.line_height - tag_h) / 2 + tag_ascent), text)
                    painter.setFont(font)
                    continue
                if kind == MARK:
                    faded = QColor(fg)
                    faded.setAlpha(120)
                    painter.setPen(faded)
                else:
                    painter.setPen(fg)
                painter.drawText(QPointF(x + dx, baseline), text)
        # Marks on top: clipped tokens, the selected and the hovered token.
        if marks is not None:
            painter.setPen(QPen(MARK_PEN, 1.5, Qt.DashLine))
            painter.setBrush(Qt.NoBrush)
            for box in range(start, end):
                token = self._box_token[box]
                if 0 <= token < len(marks) and marks[token]:
                    painter.drawRect(self.box_rect(box).adjusted(0.5, 0.5, -0.5, -0.5))
        painter.setBrush(Qt.NoBrush)
        for token, colour, width in ((self.selected, SELECT_PEN, 2.5), (self.hovered, HOVER_PEN, 2.0)):
            if token < 0:
                continue
            painter.setPen(QPen(colour, width))
            for box in self._token_boxes.get(token, []):
                painter.drawRect(self.box_rect(box).adjusted(-1, -1, 1, 1))
        painter.end()

    # ------------------------------------------------------------------- events

    def mouseMoveEvent(self, event) -> None:
        i = self.token_at(event.position())
        if i != self.hovered:
            self.hovered = i
            self.viewport().update()
            self.token_hovered.emit(i)
        super().mouseMoveEvent(event)

    def leaveEvent(self, event) -> None:
        if self.hovered != -1:
            self.hovered = -1
            self.viewport().update()
            self.token_hovered.emit(-1)
        super().leaveEvent(event)

    def mousePressEvent(self, event) -> None:
        if event.button() == Qt.LeftButton:
            i = self.token_at(event.position())
            if i >= 0:
                self.set_selected(i, scroll=False)
                self.token_clicked.emit(i)
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event) -> None:
        i = self.token_at(event.position())
        if i >= 0:
            self.token_double_clicked.emit(i)
        super().mouseDoubleClickEvent(event)

    def viewportEvent(self, event) -> bool:
        if event.type() == QEvent.ToolTip:
            i = self.token_at(event.pos())
            if i >= 0 and self.tooltip_for is not None:
                rect = self.token_rect(i).toAlignedRect()
                QToolTip.showText(event.globalPos(), self.tooltip_for(i), self.viewport(), rect)
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        if event.type() == QEvent.Leave:
            self.leaveEvent(event)
        return super().viewportEvent(event)

    def sizeHint(self):
        hint = super().sizeHint()
        if self.compact:
            hint.setHeight(self.height())
        return hint

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.FontChange and self._ready:
            self._set_metrics()
            self.relayout()
