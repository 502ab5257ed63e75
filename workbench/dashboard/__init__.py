"""The Dashboard tab: the metric plots of one run or several.

Models (no Qt; tests/test_import_graph.py holds them to it):
  plotspec   which plots a run gets: its metric names and the plots its run_started
             declared (workbench/run_declaration.py reads the declaration)
  smoothing  the exponential moving average behind the smoothing slider
Views (Qt): view (`Dashboard`: the controls over a grid of plots), curves (`MetricPlot`:
one plot's curves, bands and readout; the run colours), markers (`AlarmMarker`: an
alarm's line on the plot of its metric).

The view names below load on first use, so importing a model pulls in no Qt.
"""

from __future__ import annotations

_VIEW_NAMES = {"Dashboard": "view", "MetricPlot": "curves", "run_colour": "curves"}

__all__ = sorted(_VIEW_NAMES)


def __getattr__(name: str):
    if name in _VIEW_NAMES:
        import importlib

        return getattr(importlib.import_module(f"workbench.dashboard.{_VIEW_NAMES[name]}"), name)
    raise AttributeError(f"module 'workbench.dashboard' has no attribute {name!r}")
