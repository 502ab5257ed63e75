"""The runs: the runs folder and each run directory as Qt-free models (process,
status, summaries, rundata with its metric_table and samples_store) beside their
views (runs_view, run_header, log_view, samples_view) and the engine launcher.

The runs-folder API lives in process (the engine's process record, its exit, the
workbench folder in a run), status (a run's status in words) and summaries (the runs
list); import names from those modules.
"""
