"""A look at a run's dashboard as a user sees it under Xvfb with the stock fonts: every plot
has its ⓘ, one plot's help shown as its tooltip, and a wheel notch over a plot (the page
scrolls, the plot keeps its range) then Ctrl+wheel (the plot zooms, the page stays). Writes
dashboard.png, tooltip.png (the whole screen, tooltip included) and prints what it saw.

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python bench/dashboard_check.py runs/check-grpo-sort /tmp/shots
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QPoint, QPointF, Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from PySide6.QtWidgets import QApplication, QToolTip  # noqa: E402

from bench.camera import Camera  # noqa: E402
from workbench.dashboard.view import Dashboard  # noqa: E402
from workbench.runs.rundata import RunData  # noqa: E402


def wheel(dashboard: Dashboard, widget, modifiers=Qt.NoModifier) -> None:
    """One notch down over the middle of `widget`, as the window system delivers it."""
    centre = widget.mapTo(dashboard.window(), QPoint(widget.width() // 2, widget.height() // 2))
    QTest.wheelEvent(dashboard.windowHandle(), QPointF(centre), QPoint(0, -120), QPoint(), modifiers)


def main(run_dir: Path, out: Path, tip_plot: int = 2) -> None:
    app = QApplication.instance() or QApplication([])
    out.mkdir(parents=True, exist_ok=True)
    camera = Camera(app, out)
    run = RunData(run_dir)
    run.poll()
    dashboard = Dashboard()
    dashboard.resize(1000, 760)
    dashboard.set_runs([run])
    dashboard.show()
    camera.settle(1.0)
    dashboard.draw_all()
    camera.shot(dashboard, "dashboard.png")
    marked = [p.spec.key for p in dashboard.plots if p.info is not None]
    print(f"{len(dashboard.plots)} plots, {len(marked)} with an ⓘ;"
          f" without: {[p.spec.key for p in dashboard.plots if p.info is None]}")
    page = dashboard.scroll.verticalScrollBar()
    plot = dashboard.plots[1]
    view = plot.item.getViewBox()
    before = view.viewRange()
    wheel(dashboard, plot.widget.viewport())
    camera.settle(0.3)
    print(f"wheel: page scrolled to {page.value()}, plot range kept: {view.viewRange() == before}")
    scrolled = page.value()
    wheel(dashboard, plot.widget.viewport(), Qt.ControlModifier)
    camera.settle(0.3)
    print(f"Ctrl+wheel: page kept: {page.value() == scrolled}, plot zoomed: {view.viewRange() != before}")
    page.setValue(0)
    camera.settle(0.3)
    mark = dashboard.plots[tip_plot].info
    QToolTip.showText(mark.mapToGlobal(QPoint(mark.width() // 2, mark.height())), mark.toolTip(), mark)
    camera.settle(0.5)
    QGuiApplication.primaryScreen().grabWindow(0).save(str(out / "tooltip.png"))
    print(f"{out / 'tooltip.png'}: the help of {dashboard.plots[tip_plot].spec.title!r}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2] if len(sys.argv) > 2 else "bench/out/dashboard_check"))
