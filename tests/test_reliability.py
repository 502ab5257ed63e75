"""The engine under stops, kills and misbehaving rewards, end to end through the CLI:
every way a run ends leaves a final event, every events.jsonl line parses, and no
complete checkpoint is lost or half-written.

Set-up and steps are made observable with custom reward files that write a marker
file and then wait (at import: the engine is setting up; in a call: a step is in
progress), so the tests poll files with a deadline instead of sleeping.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, small_preset_dict
from engine_runs import cli
from engine.run import rundir

DEADLINE = 180.0  # generous: the machine running the tests may be loaded


def wait_for(predicate, timeout=DEADLINE):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def write_preset(folder: Path, rewards: list[dict] | None = None, **training) -> Path:
    data = small_preset_dict(**training)
    if rewards is not None:
        data["rewards"] = rewards
    data["model"]["device"] = "cpu"
    path = folder / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def launch(args: list[str], folder: Path, env: dict, prefix: list[str] | None = None) -> subprocess.Popen:
    err = open(folder / f"stderr-{time.monotonic_ns()}.txt", "w")
    command = prefix or [sys.executable, "-m", "engine"]
    proc = subprocess.Popen([*command, *args, "--quiet"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=err, text=True, env=env, cwd=folder)
    proc.stderr_path = Path(err.name)
    err.close()
    return proc


def finish(proc: subprocess.Popen, timeout=DEADLINE) -> tuple[int, str]:
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, proc.stderr_path.read_text()


def run_here(*args, cwd: Path):
    """`rl-engine ARGS` in this process (tests/engine_runs.py's `cli`), on one thread as the
    engine processes of these tests (OMP_NUM_THREADS=1): the same numbers, bit for bit.
    For a run whose report or result is the subject, not its process."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return cli(*args, "--quiet", cwd=cwd)
    finally:
        torch.set_num_threads(threads)


def every_line_parses(run: Path) -> list[dict]:
    lines = (run / rundir.EVENTS_FILE).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]  # raises on any torn or corrupt line


def final_event(run: Path) -> dict:
    events = every_line_parses(run)
    assert events, "no event"
    return events[-1]


@pytest.fixture
def env(engine_env):
    return {**engine_env, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


# ----------------------------------------------------------------- set-up


SLOW_IMPORT = '''\
import pathlib
import time

pathlib.Path({marker!r}).write_text("setting up")
{body}


def score(prompts, completions, **fields):
    return [0.0 for _ in completions]
'''

WAIT = '''\
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    time.sleep(0.05)
'''


def slow_setup_preset(tmp_path: Path, body: str = WAIT) -> tuple[Path, Path]:
    """A preset whose custom reward file takes two minutes to import: set-up is observable
    (the marker file appears) and long (a stop that is not acted on at once times out)."""
    marker = tmp_path / "importing"
    (tmp_path / "slow_rewards.py").write_text(SLOW_IMPORT.format(marker=str(marker), body=body))
    preset = write_preset(tmp_path, [{"name": "exact_match"}, {"name": "slow_rewards.py:score"}])
    return preset, marker


@pytest.mark.parametrize("how", ["sigterm", "sigint", "stdin"])
def test_a_stop_during_setup_ends_the_run_at_once(tmp_path, env, how):
    preset, marker = slow_setup_preset(tmp_path)
    run = tmp_path / "run"
    proc = launch(["run", str(preset), "--run-dir", str(run)], tmp_path, env)
    assert wait_for(marker.exists), "set-up never reached the reward file"
    asked = time.monotonic()
    if how == "stdin":
        proc.stdin.write("stop\n")
        proc.stdin.flush()
    else:
        proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    code, err = finish(proc, timeout=60)
    assert code == 0, err
    assert time.monotonic() - asked < 30  # not after the two-minute import
    last = final_event(run)
    reason = {"sigterm": "SIGTERM", "sigint": "SIGINT", "stdin": "stop requested"}[how]
    assert last == {**last, "type": "run_finished", "status": "stopped", "step": 0, "reason": reason,
                    "during_setup": True, "checkpoint": None}
    assert "nothing to checkpoint" in last["message"]
    assert not rundir.complete_checkpoints(run)
    assert "Traceback" not in err and "stopped during set-up" in err
    assert (run / rundir.PRESET_FILE).exists()  # the folder still says what the run was
    if how == "sigterm":  # `resume` would start it again from step 0 (test_hardening_runs_restart.py), saying why
        from engine.run.failures import can_restart, no_checkpoint_message, restart_message

        assert can_restart(run)
        assert restart_message(run) == (f"{run} has no complete checkpoint: the run was stopped during set-up "
                                        "(SIGTERM), before its first step; starting it again from step 0 in the "
                                        "same folder")
        assert no_checkpoint_message(run).endswith(f"Start it again from step 0: rl-engine resume {run}")


SWALLOW = '''\
try:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.05)
except BaseException:  # library code that swallows everything, the stop included
    pass
pathlib.Path({marker!r}).write_text("swallowed")
''' + WAIT


@pytest.mark.parametrize("second", ["sigint", "sigterm"])
def test_a_second_signal_ends_a_setup_that_swallowed_the_first(tmp_path, env, second):
    swallowed = tmp_path / "swallowed"
    preset, marker = slow_setup_preset(tmp_path, SWALLOW.format(marker=str(swallowed)))
    run = tmp_path / "run"
    proc = launch(["run", str(preset), "--run-dir", str(run)], tmp_path, env)
    assert wait_for(marker.exists)
    proc.send_signal(signal.SIGINT)
    assert wait_for(swallowed.exists), "the first stop did not interrupt set-up"
    proc.send_signal(signal.SIGINT if second == "sigint" else signal.SIGTERM)
    code, err = finish(proc, timeout=60)
    last = final_event(run)
    if second == "sigint":  # a second Ctrl-C aborts
        assert code == 1, err
        assert last["type"] == "run_failed" and last["aborted"] is True
        assert last["error_type"] == "KeyboardInterrupt" and "second Ctrl-C during set-up" in last["message"]
    else:  # another SIGTERM stops again
        assert code == 0, err
        assert last["type"] == "run_finished" and last["status"] == "stopped" and last["during_setup"] is True
    assert "Traceback" not in err


def test_a_sigterm_in_the_first_moments_still_leaves_a_final_event(tmp_path, env):
    """The run folder appears before torch is imported: a SIGTERM then must not kill the
    engine silently (the handlers are installed first thing)."""
    preset = write_preset(tmp_path)
    run = tmp_path / "run"
    proc = launch(["run", str(preset), "--run-dir", str(run)], tmp_path, env)
    assert wait_for(run.exists)
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc, timeout=60)
    assert code == 0, err
    last = final_event(run)
    assert last["type"] == "run_finished" and last["status"] == "stopped" and last["during_setup"] is True


# ----------------------------------------------------------------- steps


GATE = '''\
import pathlib
import time

CALLS = [0]


def gate(prompts, completions, **fields):
    CALLS[0] += 1
    if CALLS[0] == 3:  # the step-0 evaluation, step 1, then step 2 waits here
        pathlib.Path({marker!r}).write_text("in step 2")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not pathlib.Path({go!r}).exists():
            time.sleep(0.05)
    return [0.0 for _ in completions]
'''


def gated_preset(tmp_path: Path, **training) -> tuple[Path, Path, Path]:
    marker, go = tmp_path / "in-step", tmp_path / "go"
    (tmp_path / "gate_rewards.py").write_text(GATE.format(marker=str(marker), go=str(go)))
    preset = write_preset(tmp_path, [{"name": "exact_match"}, {"name": "gate_rewards.py:gate"}], **training)
    return preset, marker, go


def test_a_stop_mid_step_finishes_the_step_and_saves_it(tmp_path, env):
    preset, marker, go = gated_preset(tmp_path, max_steps=50)
    run = tmp_path / "run"
    proc = launch(["run", str(preset), "--run-dir", str(run)], tmp_path, env)
    assert wait_for(marker.exists)
    proc.send_signal(signal.SIGTERM)
    assert wait_for(lambda: "stopping after the current step" in proc.stderr_path.read_text())
    go.write_text("go")
    code, err = finish(proc)
    assert code == 0, err
    last = final_event(run)
    assert last == {**last, "type": "run_finished", "status": "stopped", "step": 2, "reason": "SIGTERM",
                    "checkpoint": "checkpoints/step_000002"}
    assert [e["step"] for e in every_line_parses(run) if e["type"] == "metrics"] == [1, 2]
    (checkpoint,) = rundir.complete_checkpoints(run)
    assert json.loads((checkpoint / "state.json").read_text())["step"] == 2


def test_a_second_ctrl_c_mid_step_aborts_and_keeps_the_last_checkpoint(tmp_path, env):
    preset, marker, _go = gated_preset(tmp_path, max_steps=50, save_steps=1)
    run = tmp_path / "run"
    proc = launch(["run", str(preset), "--run-dir", str(run)], tmp_path, env)
    assert wait_for(marker.exists)
    proc.send_signal(signal.SIGINT)
    assert wait_for(lambda: "stopping after the current step" in proc.stderr_path.read_text())
    proc.send_signal(signal.SIGINT)  # the step waits for a file that never comes: only an abort ends it
    code, err = finish(proc, timeout=60)
    assert code == 1, err
    last = final_event(run)
    assert last["type"] == "run_failed" and last["aborted"] is True and last["error_type"] == "KeyboardInterrupt"
    assert [p.name for p in rundir.complete_checkpoints(run)] == ["step_000001"]


# ------------------------------------------------------- kill -9 in a checkpoint

BLOCK_IN_CHECKPOINT = '''\
import pathlib, sys, time
import torch

marker = pathlib.Path(sys.argv[1])
real_save = torch.save


def save(obj, f, *args, **kwargs):
    if str(f).endswith("step_000002.tmp/trainer_state.pt"):
        marker.write_text("writing the checkpoint of step 2")
        time.sleep(600)  # half-written: the adapter is there, the trainer state and state.json are not
    return real_save(obj, f, *args, **kwargs)


torch.save = save
from engine.cli import main

sys.exit(main(sys.argv[2:]))
'''


def test_kill_during_checkpoint_writing_then_resume_matches_an_uninterrupted_run(tmp_path, env):
    preset = write_preset(tmp_path, max_steps=3, save_steps=1)
    reference = tmp_path / "reference"  # uninterrupted, in this process: only its adapter is compared
    result = run_here("run", preset, "--run-dir", reference, cwd=tmp_path)
    assert result.code == 0, result.err

    (tmp_path / "block.py").write_text(BLOCK_IN_CHECKPOINT)
    marker = tmp_path / "writing"
    run = tmp_path / "run"
    proc = launch(["run", str(preset), "--run-dir", str(run)], tmp_path, env,
                  prefix=[sys.executable, str(tmp_path / "block.py"), str(marker)])
    assert wait_for(marker.exists)
    proc.kill()  # SIGKILL while step_000002.tmp is half-written
    proc.wait()
    partial = run / "checkpoints" / "step_000002.tmp"
    assert (partial / "adapter_model.safetensors").exists() and not (partial / "state.json").exists()
    assert [p.name for p in rundir.complete_checkpoints(run)] == ["step_000001"]
    every_line_parses(run)

    code, err = finish(launch(["resume", str(run)], tmp_path, env))
    assert code == 0, err
    events = every_line_parses(run)
    (resumed,) = [e for e in events if e["type"] == "run_resumed"]
    assert resumed["checkpoint"] == "step_000001"  # the half-written one is never used
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done"
    assert not list((run / "checkpoints").glob("*.tmp"))  # the next save cleared it
    from safetensors.torch import load_file

    ours = load_file(run / "checkpoints" / "step_000003" / "adapter_model.safetensors")
    theirs = load_file(reference / "checkpoints" / "step_000003" / "adapter_model.safetensors")
    assert ours.keys() == theirs.keys()
    assert all(ours[k].equal(theirs[k]) for k in ours)  # bit for bit


# ------------------------------------------------------- custom rewards that misbehave

BAD_REWARD = '''\
import math
import time

CALLS = [0]


def bad(prompts, completions, **fields):
    CALLS[0] += 1
    if CALLS[0] < 4:  # the step-0 evaluation, steps 1 and 2 score fine
        return [0.0 for _ in completions]
    {body}
'''

BODIES = {
    "raises": ('raise ValueError("cannot score this")', "failed with ValueError: cannot score this"),
    "nan": ("return [math.nan for _ in completions]", "returned nan at index 0"),
    "wrong_count": ("return [1.0]", "returned 1 values for 8 completions"),
    "sleeps": ("while True: time.sleep(0.05)", "did not return within 2 s"),
}


@pytest.mark.parametrize("kind", list(BODIES))
def test_a_misbehaving_reward_fails_the_run_clearly_and_loses_nothing(tmp_path, env, kind):
    body, expected = BODIES[kind]
    source = (tmp_path / "bad_rewards.py").resolve()
    source.write_text(BAD_REWARD.format(body=body))
    options = {"reward_timeout": 2} if kind == "sleeps" else {}
    preset = write_preset(tmp_path, [{"name": "exact_match"}, {"name": "bad_rewards.py:bad", "options": options}],
                          max_steps=6, save_steps=1)
    run = tmp_path / "run"
    if kind == "sleeps":  # its worker thread never returns: a process of its own, which ends it
        code, err = finish(launch(["run", str(preset), "--run-dir", str(run)], tmp_path, env))
    else:  # the run's report is the subject, not its process: in this process
        result = run_here("run", preset, "--run-dir", run, cwd=tmp_path)
        code, err = result.code, result.err
    assert code == 1, err
    last = final_event(run)
    assert last["type"] == "run_failed"
    assert last["message"].startswith(f"reward component 'bad' ({source}:bad)"), last["message"]
    assert expected in last["message"]
    lines = source.read_text().splitlines()
    line = {"raises": len(lines), "sleeps": len(lines)}.get(kind, lines.index("def bad(prompts, completions, **fields):") + 1)
    assert (last["file"], last["line"]) == (str(source), line)
    assert "Traceback" not in err and expected in err
    # nothing lost: the checkpoints of steps 1 and 2 are complete; step 3 never finished
    assert [p.name for p in rundir.complete_checkpoints(run)] == ["step_000001", "step_000002"]
    assert [e["step"] for e in every_line_parses(run) if e["type"] == "metrics"] == [1, 2]


# ------------------------------------------------------- random kills (bench/reliability.py)


def test_random_kills_leave_no_corruption_and_resume_exactly(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_reliability", ROOT / "bench" / "reliability.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # Three kills, one in each phase of bench/reliability.py's KILL_PLAN: set-up, training, checkpoint writing.
    figures = bench.measure(kills=3, seed=1, max_steps=10, save_steps=1, work=tmp_path, log=lambda *_: None)
    assert figures["problems"] == []
    assert figures["kills"] == 3 and figures["corrupt_checkpoints"] == 0
    assert figures["kills_during_setup"] == figures["kills_during_training"] == 1
    assert figures["kills_during_checkpoint_writing"] == 1
    assert figures["unreadable_lines"] == 0 and figures["resumed_from_partial_checkpoint"] == 0
    assert figures["max_adapter_abs_diff"] == 0.0 and figures["adapters_identical"]
    assert os.path.exists(tmp_path / "killed" / "checkpoints" / "step_000010")


def test_resume_without_a_checkpoint_says_what_happened(tmp_path):
    from engine.run.failures import no_checkpoint_message

    def folder(name, events, preset=True, partial=False):
        run = tmp_path / name
        run.mkdir()
        if preset:
            (run / rundir.PRESET_FILE).write_text("name: x\n")
        writer = rundir.EventWriter(run)
        for event in events:
            writer.emit(**event)
        writer.close()
        if partial:
            (run / "checkpoints" / "step_000004.tmp").mkdir(parents=True)
        return run

    started = {"type": "run_started", "step": 0}
    killed = folder("killed", [started, {"type": "metrics", "step": 1}, {"type": "metrics", "step": 3}], partial=True)
    message = no_checkpoint_message(killed)
    assert message.startswith(f"{killed} has no complete checkpoint to resume from: the engine was killed "
                              "(it wrote no final event) after step 3, before its first checkpoint; "
                              "step_000004.tmp is a checkpoint it did not finish writing (ignored).")
    assert message.endswith(f"Start it again from step 0: rl-engine resume {killed}")
    failed = folder("failed", [started, {"type": "run_failed", "message": "rewards[1] (x.py:f) did not return"}])
    assert "the run failed before its first checkpoint: rewards[1] (x.py:f) did not return" in no_checkpoint_message(failed)
    early = folder("early", [], preset=False)
    assert "killed (it wrote no event) while it was setting up" in no_checkpoint_message(early)
    assert "rl-engine run PRESET --run-dir" in no_checkpoint_message(early)  # no preset.yaml: nothing to restart
    assert no_checkpoint_message(tmp_path / "nowhere") == f"{tmp_path / 'nowhere'} is not a folder"
