"""The tab positions and the answers of the window's questions (tests name them)."""

# Tab positions. (The inspector would sit best after Samples; it is last so that the
# positions of the first five stay as they were.)
SETUP, DASHBOARD, SAMPLES, INSPECTOR, RUNS, LOG = range(6)
SAVE, DISCARD, CANCEL = "Save", "Discard", "Cancel"
STOP_RUN, LEAVE_RUNNING = "Stop the run", "Leave it running"
CANCEL_EXPORT = "Cancel the export and close"


class DefaultChoice(str):
    """An answer that is the question's default button (Return picks it): the harmless
    one where the other loses work, as Kill's Cancel. It equals its plain text.

    >>> DefaultChoice(CANCEL) == CANCEL, isinstance(DefaultChoice(CANCEL), DefaultChoice)
    (True, True)
    """
