"""The Dashboard tab: the metric plots of one run or several.

Models (no Qt; tests/test_import_graph.py holds them to it):
  plotspec   which plots a run gets: its metric names and the plots its run_started
             declared (workbench/run_declaration.py reads the declaration)
  smoothing  the exponential moving average behind the smoothing slider
Views (Qt): view (`Dashboard`: the controls over a grid of plots), curves (`MetricPlot`:
one plot's curves, bands and readout; the run colours), markers (`AlarmMarker`: an
alarm's line on the plot of its metric), info_mark (`InfoMark`: the drawn ⓘ holding a plot's help).
Import the views from their modules (workbench.dashboard.<module>): the package names none, so
importing a model pulls in no Qt.
"""
