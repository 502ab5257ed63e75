"""The rough edges a new user met in the dashboard and the inspector (issue 41): each
test failed before its fix."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QTextDocument
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from inspector_helpers import grpo_record, grpo_run, write_steps
from test_inspector_reward_tokens import pick
from window_fixtures import inspector, open_run  # noqa: F401 (fixtures)
from workbench.dashboard.info_mark import InfoMark
from workbench.dashboard.view import Dashboard
from workbench.inspector.text import TokenTextView
from workbench.inspector.text_paint import STEP_BAR
from workbench.inspector.view import HISTORY_PAGE
from workbench.runs.rundata import RunData
from workbench_helpers import write_run


def plain(rich: str) -> str:
    document = QTextDocument()
    document.setHtml(rich)
    return document.toPlainText()


def _dashboard(qtbot, tmp_path, **run) -> Dashboard:
    data = RunData(write_run(tmp_path, "r", **run))
    data.poll()
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.resize(1000, 640)
    dashboard.set_runs([data])
    dashboard.show()
    qtbot.waitExposed(dashboard)
    dashboard.draw_all()
    return dashboard


def _wheel(widget, modifiers=Qt.NoModifier, notches: int = -1) -> None:
    """One notch of the mouse wheel (down: -1) over the middle of `widget`, as the window
    system delivers it (a spontaneous event: a sent one would not travel up to the page)."""
    centre = widget.mapTo(widget.window(), QPoint(widget.width() // 2, widget.height() // 2))
    QTest.wheelEvent(widget.window().windowHandle(), QPointF(centre), QPoint(0, 120 * notches), QPoint(), modifiers)
    QApplication.processEvents()


def test_the_wheel_over_a_plot_scrolls_the_page_and_ctrl_wheel_zooms(qtbot, tmp_path):
    dashboard = _dashboard(qtbot, tmp_path)
    bar = dashboard.scroll.verticalScrollBar()
    assert bar.maximum() > 0  # more plots than fit: the page scrolls
    plot = dashboard.plots[0]
    view = plot.item.getViewBox()
    before = view.viewRange()
    _wheel(plot.widget.viewport())
    assert bar.value() > 0, "the wheel did not scroll the page"
    assert view.viewRange() == before, "the wheel zoomed the plot under the pointer"
    scrolled = bar.value()
    _wheel(plot.widget.viewport(), Qt.ControlModifier)
    assert view.viewRange() != before and bar.value() == scrolled  # Ctrl+wheel zooms, the page stays


def test_the_kl_plots_beta_0_note_wraps_within_the_plot(qtbot, tmp_path):
    dashboard = _dashboard(qtbot, tmp_path)  # kl logged, all null
    kl = dashboard.plot("kl")
    assert kl.note.isVisible() and "beta = 0" in kl.note.textItem.toPlainText()
    area = kl.item.getViewBox().sceneBoundingRect()

    def within() -> bool:  # (pyqtgraph places a text item once its view has been painted)
        note = kl.note.sceneBoundingRect()
        return area.left() <= note.left() and note.right() <= area.right()
    qtbot.waitUntil(within, timeout=3000)
    assert kl.note.sceneBoundingRect().height() > 2 * kl.fontMetrics().height()  # wrapped, not cut at the edges


def test_a_curve_label_with_a_less_than_sign_is_shown_literally(qtbot, tmp_path):
    dashboard = _dashboard(qtbot, tmp_path, extra_metrics={"rewards/len<64/mean": 0.5})
    reward = dashboard.plot("reward")
    shown = QTextDocument()
    shown.setHtml(reward.readout.text())
    assert "len<64" in shown.toPlainText()
    shown.setHtml(reward.readout_at(3))
    assert "len<64 = " in shown.toPlainText()


def test_every_plot_has_a_drawn_info_mark_with_its_help(qtbot, tmp_path):
    dashboard = _dashboard(qtbot, tmp_path, extra_metrics={"my/custom": 1.0})  # a metric for "Other metric"
    assert {p.spec.key for p in dashboard.plots} >= {"reward", "kl", "entropy", "loss", "lr", "other"}
    for plot in dashboard.plots:
        assert isinstance(plot.info, InfoMark) and plot.info.isVisible(), plot.spec.key
        assert plot.info.toolTip() and plot.info.toolTip() == plot.title.toolTip(), plot.spec.key
        assert "\u24d8" not in plot.title.text()  # the glyph stock fonts lack (a box under Xvfb)
    image = dashboard.plots[0].info.grab().toImage()
    inked = sum(1 for x in range(image.width()) for y in range(image.height())
                if image.pixelColor(x, y).lightness() < 160)
    assert inked > 10  # the circle and the "i" are drawn


# ================================================================ the inspector


def test_a_step_score_badge_is_not_drawn_like_a_token(qtbot):
    # A sort task's step scored 1 after the token " 1": drawn as a token (a box filled with
    # the score's colour, upright digits) the badge read as one more digit of the answer.
    view = TokenTextView()
    qtbot.addWidget(view)
    view.resize(420, 120)
    view.show()
    qtbot.waitExposed(view)
    pink = "#a9006b"
    view.set_content("", [" 1", " 3", "<eos>"], {0: [("1", pink)]}, [0, 1, -1])
    qtbot.waitUntil(lambda: view.badge_rects() and view.badge_rects()[0].width() > 0)
    image = view.viewport().grab().toImage()
    ratio = image.devicePixelRatio()
    rect = view.badge_rects()[0]
    colours = [image.pixelColor(int(x * ratio), int(y * ratio))
               for x in range(int(rect.left()) + 3, int(rect.right()) - 1) for y in range(int(rect.top()), int(rect.bottom()))]
    pixels = [c.name() for c in colours]
    assert pixels.count(pink) < 0.25 * len(pixels)  # the score's colour is a dot, not the badge's fill
    assert pixels.count("#ffffff") > 0.3 * len(pixels)  # a white pill ...

    def slate(c) -> bool:
        return abs(c.red() - STEP_BAR.red()) + abs(c.green() - STEP_BAR.green()) + abs(c.blue() - STEP_BAR.blue()) < 60
    assert sum(map(slate, colours)) > 10  # ... edged and lettered in slate, unlike any token's box


def test_the_inspector_pages_stay_put_when_the_quantity_changes(qtbot, tmp_path, inspector):  # noqa: F811
    inspector.resize(1000, 700)  # (a narrow window: a longer meaning took a third line)
    open_run(inspector, grpo_run(tmp_path))
    inspector.open_step(1, index=0)
    box = inspector.quantity_box
    keys = [box.itemData(i) for i in range(box.count())]
    assert len(keys) >= 5
    places = {}
    for key in keys:
        pick(qtbot, inspector, key)
        QApplication.processEvents()
        places[key] = (inspector.pages.geometry().getRect(), inspector.legend.bar.geometry().getRect())
    assert len(set(places.values())) == 1, places


def test_round_off_reads_as_0_and_one_step_is_one_step(qtbot, tmp_path, inspector):  # noqa: F811
    run_dir = write_run(tmp_path, "once", steps=1)
    write_steps(run_dir, {1: [grpo_record(1, 0, 0, 0.5, 4.440892098500626e-16, prompt="only once")]})
    open_run(inspector, run_dir)
    inspector.open_step(1, index=0)
    assert "advantage 0" in plain(inspector.summary.text()) and "e-16" not in inspector.summary.text()
    bar = inspector.pages.tabBar()
    qtbot.mouseClick(bar, Qt.LeftButton, pos=bar.tabRect(HISTORY_PAGE).center())
    inspector.history_view.scan_all()
    assert "1 completion of this prompt over 1 step:" in inspector.history_view.status.text()
