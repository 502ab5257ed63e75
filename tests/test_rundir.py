"""The run directory's readers: tolerant of a live, partly written stream."""

import json

from engine.run import rundir


def test_partial_last_line_is_left_for_the_next_read(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"type":"metrics","step":1}\n{"type":"met')
    records, offset = rundir.read_jsonl(path)
    assert records == [{"type": "metrics", "step": 1}]
    assert offset == len(b'{"type":"metrics","step":1}\n')
    with open(path, "ab") as f:
        f.write(b'rics","step":2}\n')
    more, offset2 = rundir.read_jsonl(path, offset)
    assert more == [{"type": "metrics", "step": 2}] and offset2 == path.stat().st_size


def test_event_writer_and_tail(tmp_path):
    writer = rundir.EventWriter(tmp_path)
    tail = rundir.EventTail(tmp_path)
    writer.emit("run_started", step=0, preset={})
    assert [e["type"] for e in tail.poll()] == ["run_started"]
    writer.emit("metrics", step=1, reward=float("nan"), loss=0.5)
    (event,) = tail.poll()
    assert event["reward"] is None and event["loss"] == 0.5 and event["step"] == 1
    assert isinstance(event["time"], float)
    assert tail.poll() == []
    writer.close()
    # every line is strict JSON (no NaN tokens)
    for line in (tmp_path / "events.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


def test_unknown_event_type_is_refused(tmp_path):
    writer = rundir.EventWriter(tmp_path)
    try:
        writer.emit("metricz", step=1)
    except ValueError as exc:
        assert "metricz" in str(exc)
    else:
        raise AssertionError("expected ValueError")
    finally:
        writer.close()


def test_run_status_follows_lifecycle_events():
    assert rundir.run_status([{"type": "run_started"}]) == "running"
    assert rundir.run_status([{"type": "run_started"}, {"type": "run_finished", "status": "stopped"}]) == "stopped"
    assert rundir.run_status([{"type": "run_started"}, {"type": "run_failed"}]) == "failed"
    events = [{"type": "run_started"}, {"type": "run_finished", "status": "stopped"}, {"type": "run_resumed"}]
    assert rundir.run_status(events) == "running"


def test_only_complete_checkpoints_count(tmp_path):
    for name, complete in [("step_000010", True), ("step_000020.tmp", True), ("step_000030", False), ("step_000005", True)]:
        folder = tmp_path / "checkpoints" / name
        folder.mkdir(parents=True)
        if complete:
            (folder / rundir.CHECKPOINT_STATE).write_text("{}")
    assert [p.name for p in rundir.complete_checkpoints(tmp_path)] == ["step_000005", "step_000010"]


def test_trajectories_round_trip(tmp_path):
    records = [{"step": 3, "index": 0, "tokens": ["a", " "], "logprob": [-0.1, -2.0]}]
    rundir.write_trajectories(tmp_path, 3, records)
    assert rundir.read_trajectories(tmp_path, 3) == records
    assert rundir.trajectory_steps(tmp_path) == [3]


def test_a_torn_last_line_is_dropped_before_appending(tmp_path):
    """An engine killed mid-write leaves a partial line; the next writer (a resumed
    engine) must not glue its first event onto it."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"type":"metrics","step":1}\n{"type":"met')
    writer = rundir.EventWriter(tmp_path)
    assert writer.dropped == len(b'{"type":"met')
    writer.emit("run_resumed", step=1)
    writer.close()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["metrics", "run_resumed"]
    assert rundir.drop_torn_last_line(path) == 0
    assert rundir.drop_torn_last_line(tmp_path / "missing.jsonl") == 0
    path.write_bytes(b'{"type":"met')  # nothing complete at all
    assert rundir.drop_torn_last_line(path) == len(b'{"type":"met') and path.read_bytes() == b""


def test_checkpoints_being_deleted_are_not_complete(tmp_path):
    folder = tmp_path / "checkpoints" / "step_000004.old.tmp"  # renamed before it is deleted
    folder.mkdir(parents=True)
    (folder / rundir.CHECKPOINT_STATE).write_text("{}")
    assert rundir.complete_checkpoints(tmp_path) == []


# The one tolerant JSONL reader (the workbench's RunData and runs list read through it).


def test_lines_are_split_at_the_last_newline_and_parsed_tolerantly(tmp_path):
    assert rundir.complete_lines(b'{"a":1}\n\n  \n{"b":') == ([b'{"a":1}'], 12)
    assert rundir.complete_lines(b'{"b":') == ([], 0)
    # A torn line in the middle (a crashed writer) spoils the one-parse fast path only.
    assert rundir.parse_lines([b'{"a":1}', b'{"b":', b'[2]']) == [{"a": 1}, None, [2]]
    assert rundir.parse_lines([b'1,2', b'3'], default="torn") == ["torn", 3]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":\n{"c":3}\n{"d":')
    lines, offset = rundir.read_lines(path, 0)
    assert lines == [b'{"a":1}', b'{"b":', b'{"c":3}'] and offset == len(b'{"a":1}\n{"b":\n{"c":3}\n')
    assert rundir.read_jsonl(path) == ([{"a": 1}, {"c": 3}], offset)
    assert rundir.read_lines(tmp_path / "missing.jsonl", 5) == ([], 5)


def test_tail_and_first_record(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"type":"run_started","n":1}\n{"step":1}\n{"step":22}\n{"step":3}')
    assert rundir.read_first_record(path) == {"type": "run_started", "n": 1}
    # The last 18 bytes cut {"step":22} in two: that part is skipped, the unended last line read.
    assert rundir.read_jsonl_tail(path, 18) == [{"step": 3}]
    assert rundir.read_jsonl_tail(path, 10_000)[0] == {"type": "run_started", "n": 1}
    assert rundir.read_jsonl_tail(tmp_path / "missing.jsonl", 10) == []
    assert rundir.read_first_record(tmp_path / "missing.jsonl") is None
    path.write_bytes(b'[1]\n')
    assert rundir.read_first_record(path) is None


def test_lifecycle_status_of_each_event():
    assert rundir.lifecycle_status({"type": "run_finished"}) == "done"
    assert rundir.lifecycle_status({"type": "run_finished", "status": "stopped"}) == "stopped"
    assert rundir.lifecycle_status({"type": "run_failed"}) == "failed"
    assert rundir.lifecycle_status({"type": "run_resumed"}) == "running"
    assert rundir.run_status([]) == "running"
