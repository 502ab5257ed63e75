"""Held-out accuracy against step for several runs, as one PNG (pyqtgraph, offscreen): the
README's curves. Each argument is a run's events (a run directory or an events .jsonl,
e.g. tests/data/bundled_runs/NAME.jsonl); the legend names each by its preset.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/accuracy_curves.py OUT.png RUN_OR_EVENTS...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyqtgraph as pg
from pyqtgraph.exporters import ImageExporter
from PySide6.QtWidgets import QApplication

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]


def accuracy_curve(source: Path) -> tuple[str, list[int], list[float]]:
    """(preset name, steps, accuracy in %) from a run's eval events."""
    path = source / "events.jsonl" if source.is_dir() else source
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    name = next(e["preset"]["name"] for e in events if e.get("type") == "run_started")
    evals = [e for e in events if e.get("type") == "eval" and e.get("accuracy") is not None]
    return name, [e["step"] for e in evals], [100 * e["accuracy"] for e in evals]


def main(out: str, *sources: str) -> None:
    app = QApplication.instance() or QApplication([])  # noqa: F841 (pyqtgraph needs one)
    pg.setConfigOptions(antialias=True, background="w", foreground="k")
    plot = pg.PlotWidget()
    plot.resize(760, 420)
    plot.setLabel("bottom", "step")
    plot.setLabel("left", "held-out accuracy (%)")
    plot.showGrid(x=True, y=True, alpha=0.25)
    plot.addLegend(offset=(-10, 10), labelTextSize="11pt")
    for colour, source in zip(COLOURS, sources):
        name, steps, accuracy = accuracy_curve(Path(source))
        plot.plot(steps, accuracy, pen=pg.mkPen(colour, width=2.5), symbol="o", symbolSize=6,
                  symbolBrush=colour, symbolPen=None, name=name)
    plot.show()
    app.processEvents()
    exporter = ImageExporter(plot.plotItem)
    exporter.parameters()["width"] = 1520
    exporter.export(out)
    print(out)


if __name__ == "__main__":
    main(*sys.argv[1:])
