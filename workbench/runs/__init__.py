"""The runs: the runs folder and each run directory as Qt-free models (process,
status, summaries, rundata with its metric_table and samples_store) beside their
views (runs_view, run_header, log_view, samples_view) and the engine launcher.

Importing the package imports only the Qt-free models; `from workbench import runs`
gives the runs-folder API (`runs.summarize_run`, `runs.pid_alive`, ...).
"""

from workbench.runs.process import (EXIT_FILE, LAUNCH_PRESET, OUTPUT_FILE, PROCESS_FILE, STALE_AFTER_S, STATUSES,
                                    WORKBENCH_DIR, EngineRef, can_signal, describe_exit, engine_alive, find_engine,
                                    pid_alive, read_exit_record, read_process_record, workbench_dir,
                                    write_exit_record, write_process_record)
from workbench.runs.status import clean_output, describe_run, judge_status, output_excerpt
from workbench.runs.summaries import MISSING, RunIndex, RunSummary, differing_fields, flatten, summarize_run

__all__ = ["EXIT_FILE", "LAUNCH_PRESET", "OUTPUT_FILE", "PROCESS_FILE", "STALE_AFTER_S", "STATUSES", "WORKBENCH_DIR",
           "EngineRef", "can_signal", "describe_exit", "engine_alive", "find_engine", "pid_alive", "read_exit_record",
           "read_process_record", "workbench_dir", "write_exit_record", "write_process_record", "clean_output",
           "describe_run", "judge_status", "output_excerpt", "MISSING", "RunIndex", "RunSummary", "differing_fields",
           "flatten", "summarize_run"]
