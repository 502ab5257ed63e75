"""The rough edges a new user met in the dashboard and the inspector (issue 41): each
test failed before its fix."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QTextDocument
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from workbench.dashboard.info_mark import InfoMark
from workbench.dashboard.view import Dashboard
from workbench.runs.rundata import RunData
from workbench_helpers import write_run


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
