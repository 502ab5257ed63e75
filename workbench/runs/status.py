"""A run's one status (judge_status, describe_run), shown alike by the run header,
the runs list and a comparison, and the cleaned engine output it quotes. No Qt."""

from __future__ import annotations

import re
from pathlib import Path

from engine.run.failures import can_restart, checkpoint_step, no_checkpoint_message
from engine.run.rundir import complete_checkpoints
from workbench.runs.process import (OUTPUT_FILE, STALE_AFTER_S, describe_exit, find_engine,
                                    read_exit_record, workbench_dir)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
_BAR = re.compile(r"\|[█▉▊▋▌▍▎▏ #]*\|")


def clean_output(text: str) -> str:
    """Terminal output as a person would have read it: ANSI escapes removed, and of a
    line redrawn with carriage returns (a progress bar) only its last state, with the
    bar's blocks left out; repeated lines once.

    >>> clean_output("\\rLoading weights:   0%|          | 0/52\\rLoading weights: 100%|\\u2588\\u2588| 52/52\\n\\x1b[31mboom\\x1b[0m\\nboom\\n")
    'Loading weights: 100% 52/52\\nboom'
    """
    lines: list[str] = []
    for line in _ANSI.sub("", text).replace("\r\n", "\n").split("\n"):
        if "\r" in line:  # a progress line: its last state, without the bar
            parts = [p for p in line.split("\r") if p.strip()]
            line = re.sub(r"  +", " ", _BAR.sub(" ", parts[-1] if parts else ""))
        line = line.replace("\x08", "").rstrip()
        if line.strip() and (not lines or lines[-1] != line):
            lines.append(line)
    return "\n".join(lines)


def output_excerpt(run_dir: Path, lines: int = 12, max_bytes: int = 8000) -> str:
    """The end of what the engine printed (the workbench's capture), cleaned."""
    path = workbench_dir(run_dir) / OUTPUT_FILE
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = clean_output(data.decode("utf-8", "replace"))
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------- status


_KILL_SIGNALS = {9, 15, 2, 1}  # SIGKILL, SIGTERM, SIGINT, SIGHUP: someone ended it (a crash is another signal)


def judge_status(events_status: str, has_events: bool, alive: bool | None, last_event_age: float | None,
                 exit: dict | None = None) -> tuple[str, str]:
    """(status, note): the one status of a run, shown alike by the run header, the runs
    list and a comparison.

    events_status is rundir.run_status of the events (running/done/stopped/failed); a
    run whose events end in running is checked against its process (`alive`, None when
    unknown) and how it ended (`exit`, the window's exit record, if any). A run whose
    engine ended without a final event is `killed` when a signal ended it (the Kill
    button, kill -9), else `interrupted`; `failed` when it ended before its first event.

    >>> judge_status("running", True, False, 5.0)[0]
    'interrupted'
    >>> judge_status("running", True, False, 5.0, {"code": -9})[0]
    'killed'
    >>> judge_status("running", True, None, 3600.0)[0]
    'stale'
    """
    if has_events and events_status != "running":
        return events_status, ""
    if alive is True:
        return ("running", "") if has_events else ("starting", "the engine is loading the model")
    if alive is False or exit is not None:
        code = exit.get("code") if exit else None
        killed = bool(exit and (exit.get("killed") or (isinstance(code, int) and -code in _KILL_SIGNALS)))
        how = describe_exit(code, bool(exit and exit.get("killed"))) if exit else None
        if killed:
            lost = "; the steps since its last checkpoint were lost" if has_events else ""
            return "killed", f"the engine {how} before it wrote a final event{lost}"
        if not has_events:
            return "failed", (f"the engine {how} before the run started" if how else
                              "the engine exited before the run started") + "; its output is in the Log tab"
        return "interrupted", (f"the engine {how} without writing run_finished or run_failed; "
                               if how else "the engine process ended without writing run_finished or run_failed "
                               "(killed, or the machine went down); ") + "engine.log may say more"
    if not has_events:
        return "starting", ""
    if last_event_age is not None and last_event_age > STALE_AFTER_S:
        return "stale", (f"no event for {int(last_event_age // 60)} min and no process id: the engine "
                         "may have died without a final event, or a step is very slow")
    return "running", ""


def describe_run(run_dir: Path, events_status: str, has_events: bool, last_event_age: float | None,
                 started: dict | None = None, alive: bool | None = None) -> tuple[str, str]:
    """judge_status for a run directory: its engine found from the events or the process
    record (`alive` given by a window that holds the process itself), its exit record,
    and, for an engine that failed without an event, the end of what it printed."""
    ref = find_engine(run_dir, started)
    if alive is None and ref is not None:
        alive = ref.alive()
    exit = read_exit_record(run_dir, ref.pid if ref is not None else None) if alive is not True else None
    status, note = judge_status(events_status, has_events, alive, last_event_age, exit)
    if status in ("failed", "interrupted") and not (has_events and events_status != "running"):
        excerpt = output_excerpt(run_dir)
        if excerpt:
            note = f"{note}\n{excerpt}"
    return status, note


# --------------------------------------------------------------------- resume

# The statuses whose run Resume may continue (`rl-engine resume RUN_DIR`): from its last
# checkpoint, or, when it has none but its preset.yaml, from step 0 in the same folder.
RESUMABLE = ("stopped", "killed", "interrupted", "failed")


def last_checkpoint(run_dir: Path) -> tuple[str, int] | None:
    """(folder name, step) of the run's newest complete checkpoint, the one resume
    continues from; None when there is none."""
    found = complete_checkpoints(run_dir)
    if not found:
        return None
    return found[-1].name, checkpoint_step(found[-1].name)


def resume_problem(run_dir: Path, status: str) -> str | None:
    """Why Resume cannot continue this run (its status as judge_status gives it), or
    None when it can."""
    if status in ("running", "starting"):
        return "the run is still training"
    if status == "stale":
        return "the run may still be training (no event for a while, and no process to ask)"
    if status == "done":
        return "the run is done: it trained all its max_steps (Fork from here trains on with more)"
    if last_checkpoint(run_dir) is None and not can_restart(run_dir):
        if not Path(run_dir).is_dir() or not any(Path(run_dir).iterdir()):
            return no_checkpoint_message(run_dir)  # not a folder, or holds no run: it says which
        # The banner says what happened to the run; this says only why Resume cannot go on.
        return "it has no complete checkpoint, and no preset.yaml to start it again from step 0"
    return None


def resume_note(run_dir: Path, problem: str | None) -> str:
    """One sentence for the banner of a run that ended early: where Resume continues
    from, or why it cannot (`problem`, as resume_problem gives it).

    A killed run's lost steps are trained again from the checkpoint, so say which; a run
    without a checkpoint is trained again from step 0 (`rl-engine resume` restarts it)."""
    if problem is not None:
        return f"Resume is not possible: {problem}"
    saved = last_checkpoint(run_dir)
    if saved is None:
        return "It has no checkpoint: Resume starts it again from step 0 in this folder."
    name, step = saved
    return f"Resume continues in this folder from its last checkpoint, {name} (step {step})."


# --------------------------------------------------------------------- summaries
