"""The run directory: the contract between the engine (writer) and the workbench (reader).

    RUN_DIR/
      preset.yaml        the resolved preset the run trains from
      events.jsonl       append-only event stream, one JSON object a line
      trajectories/      step_000001.jsonl: per-token records of a few rollouts a step
      checkpoints/       step_000100/: LoRA adapter (peft format) + trainer state
      engine.log         the engine's log

docs/run-directory.md documents every event and field. This module imports neither
torch nor Qt: the workbench reads runs through it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Iterator

from engine.foundation.run_files import CHECKPOINT_STATE, CHECKPOINTS_DIR, PRESET_FILE  # one definition, below

EVENTS_FILE = "events.jsonl"
LOG_FILE = "engine.log"
TRAJECTORIES_DIR = "trajectories"

EVENT_TYPES = (
    "run_started", "run_resumed", "metrics", "samples", "eval", "checkpoint", "micro_batch_size", "alarm",
    "run_finished", "run_failed",
)


def json_safe(value: Any) -> Any:
    """`value` with NaN and inf as null, in dicts, lists and tuples too."""
    # JSON has no NaN/inf; write them as null so every reader can parse the line.
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def dumps(record: dict) -> str:
    return json.dumps(json_safe(record), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def drop_torn_last_line(path: str | Path) -> int:
    """Cut a partly written last line (an engine killed while writing it) off the end
    of a JSON Lines file, so the next appended line starts on a line of its own.
    Returns the number of bytes dropped (0 when the file ends with a newline, is empty
    or missing). Readers never saw those bytes: read_jsonl stops at the last newline.

    input: b'{"a":1}\n{"b":'   ->  file b'{"a":1}\n', returns 5
    """
    try:
        f = open(path, "rb+")
    except FileNotFoundError:
        return 0
    with f:
        size = f.seek(0, os.SEEK_END)
        end = size
        while end > 0:
            start = max(0, end - 65536)
            f.seek(start)
            chunk = f.read(end - start)
            if end == size and chunk.endswith(b"\n"):
                return 0
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
        f.truncate(end)
        return size - end


def naming_the_file(exc: OSError, path: str | Path) -> OSError:
    """`exc` with `path` as its file: a write refused mid-file ("[Errno 28] No space left
    on device", from a flush) names none, and the message should say what was being written."""
    if exc.filename or exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


class EventWriter:
    """Appends events to events.jsonl; each line is flushed as it is written so a reader
    never waits on a buffer. A torn last line left by a killed engine is dropped first
    (drop_torn_last_line), so every line of the file parses. A line the disk refuses (full,
    say) is an OSError naming events.jsonl, and what of it reached the file is cut off."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / EVENTS_FILE
        self.dropped = drop_torn_last_line(self.path)
        self._file = open(self.path, "a", encoding="utf-8")

    def emit(self, type: str, step: int | None = None, **fields) -> dict:
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type!r}; known: {', '.join(EVENT_TYPES)}")
        event = {"type": type, "time": time.time()}
        if step is not None:
            event["step"] = step
        event.update(fields)
        line = dumps(event) + "\n"
        try:
            self._file.write(line)
            self._file.flush()
        except OSError as exc:
            self._abandon()
            raise self._refused(exc) from exc
        return event

    def _refused(self, exc: OSError) -> OSError:
        return naming_the_file(exc, self.path)

    def _abandon(self) -> None:
        """After a failed write: close (the rest of the line may fail to flush again) and
        cut the torn line off, so the file holds complete lines only; an events.jsonl left
        empty is removed, or the folder would look like a run (`run` refuses it)."""
        try:
            self._file.close()
        except OSError:
            pass
        try:
            drop_torn_last_line(self.path)
            if self.path.stat().st_size == 0:
                self.path.unlink()
        except OSError:
            pass

    def close(self) -> None:
        if not self._file.closed:
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
            except OSError as exc:
                self._abandon()
                raise self._refused(exc) from exc


class NullEventWriter:
    """The events of a process that does not write the run directory (ranks other than
    0 of a run in several processes): emitted nowhere."""

    dropped = 0

    def emit(self, type: str, step: int | None = None, **fields) -> dict:
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type!r}; known: {', '.join(EVENT_TYPES)}")
        return {"type": type, "step": step, **fields}

    def close(self) -> None:
        pass


def complete_lines(data: bytes) -> tuple[list[bytes], int]:
    """The non-blank complete lines of `data` and the bytes they span (through the last
    newline): a partly written last line is not a line yet.

    >>> complete_lines(b'{"a":1}\\n\\n{"b":')
    ([b'{"a":1}'], 9)
    """
    end = data.rfind(b"\n") + 1
    return [line for line in data[:end].splitlines() if line.strip()], end


def read_lines(path: str | Path, offset: int = 0) -> tuple[list[bytes], int]:
    """The complete lines of a JSON Lines file from byte `offset`, unparsed, and the
    offset after the last of them (`offset` again for a missing file)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    lines, end = complete_lines(data)
    return lines, offset + end


def parse_lines(lines: list[bytes], default: Any = None) -> list[Any]:
    """Each line parsed as JSON, `default` for one that is not (a torn line from a
    crashed writer: the rest of the stream is still good).

    >>> parse_lines([b'{"a":1}', b'{"b":', b'2'])
    [{'a': 1}, None, 2]
    """
    if not lines:
        return []
    try:
        # One parse of all the lines as a JSON array is a quarter faster than a parse a
        # line; a torn line spoils it, and then they are parsed one by one.
        parsed = json.loads(b"[" + b",".join(lines) + b"]")
        if len(parsed) == len(lines):  # else a line was not one JSON value
            return parsed
    except ValueError:
        pass
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append(default)
    return out


_TORN = object()


def read_jsonl(path: str | Path, offset: int = 0) -> tuple[list[dict], int]:
    """Read complete lines from byte `offset`; return (records, offset after the last
    complete line). A partly written last line is left for the next call, so a reader
    can tail a file that is still being written; a line that does not parse is skipped.

    input:  b'{"a":1}\\n{"b":'      output: ([{"a": 1}], 8)
    """
    lines, end = read_lines(path, offset)
    return [r for r in parse_lines(lines, _TORN) if r is not _TORN], end


def read_jsonl_tail(path: str | Path, max_bytes: int) -> list[dict]:
    """The records (JSON objects) in the last `max_bytes` of a JSON Lines file, the line
    cut by that boundary skipped: a long run's last events without reading it all."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return []
    if start:
        data = data[data.find(b"\n") + 1:]
    lines = [line for line in data.splitlines() if line.strip()]
    return [r for r in parse_lines(lines) if isinstance(r, dict)]


def read_first_record(path: str | Path) -> dict | None:
    """The first line of a JSON Lines file as a JSON object, or None."""
    try:
        with open(path, "rb") as f:
            line = f.readline()
    except OSError:
        return None
    value = parse_lines([line])[0] if line.strip() else None
    return value if isinstance(value, dict) else None


def read_events(run_dir: str | Path) -> list[dict]:
    return read_jsonl(Path(run_dir) / EVENTS_FILE)[0]


class EventTail:
    """Incremental reader of a (possibly live) events.jsonl."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / EVENTS_FILE
        self.offset = 0

    def poll(self) -> list[dict]:
        records, self.offset = read_jsonl(self.path, self.offset)
        return records


def trajectory_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / TRAJECTORIES_DIR / f"step_{step:06d}.jsonl"


def write_trajectories(run_dir: str | Path, step: int, records: list[dict]) -> Path:
    """Write one step's trajectory records (one rollout a line), atomically."""
    path = trajectory_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text("".join(dumps(r) + "\n" for r in records), encoding="utf-8")
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
        raise
    return path


def read_trajectories(run_dir: str | Path, step: int) -> list[dict]:
    return read_jsonl(trajectory_path(run_dir, step))[0]


def trajectory_steps(run_dir: str | Path) -> list[int]:
    folder = Path(run_dir) / TRAJECTORIES_DIR
    return sorted(int(p.stem.split("_")[1]) for p in folder.glob("step_*.jsonl"))


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR / f"step_{step:06d}"


def complete_checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoint folders that were completely written, oldest first. A checkpoint is
    written to `step_N.tmp` and renamed, and state.json is its last file, so a folder
    without it (or still named .tmp) is ignored."""
    folder = Path(run_dir) / CHECKPOINTS_DIR
    found = [
        p for p in folder.glob("step_*")
        if p.is_dir() and not p.name.endswith(".tmp") and (p / CHECKPOINT_STATE).exists()
    ]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


LIFECYCLE_EVENTS = ("run_started", "run_resumed", "run_finished", "run_failed")


def lifecycle_status(event: dict) -> str:
    """The status a lifecycle event leaves a run in: running | done | stopped | failed.

    >>> lifecycle_status({"type": "run_finished", "status": "stopped"})
    'stopped'
    """
    kind = event.get("type")
    if kind == "run_finished":
        return str(event.get("status", "done"))
    if kind == "run_failed":
        return "failed"
    return "running"


def run_status(events: list[dict]) -> str:
    """running | done | stopped | failed, from the event stream (the last lifecycle event)."""
    status = "running"
    for event in events:
        if event.get("type") in LIFECYCLE_EVENTS:
            status = lifecycle_status(event)
    return status


def iter_metrics(events: list[dict]) -> Iterator[dict]:
    return (e for e in events if e.get("type") == "metrics")
