"""The tab positions and the answers of the window's questions (tests name them)."""

# Tab positions. (The inspector would sit best after Samples; it is last so that the
# positions of the first five stay as they were.)
SETUP, DASHBOARD, SAMPLES, INSPECTOR, RUNS, LOG = range(6)
SAVE, DISCARD, CANCEL = "Save", "Discard", "Cancel"
STOP_RUN, LEAVE_RUNNING = "Stop the run", "Leave it running"
CANCEL_EXPORT = "Cancel the export and close"
