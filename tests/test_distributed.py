"""Several processes (engine/distributed): the row shares and the rollout join, the
checks that refuse a preset for N processes, the launcher's stop line, and, end to end
on this CPU with gloo and 2 processes under torchrun: the same update as one process
and a short run of each bundled preset (one launch per mode, DDP and FSDP2, steps every
preset in turn: tests/distributed_step.py; the one-process reference in this process),
a run through `rl-engine run --nproc-per-node 2` per mode, a stop, a kill -9 of a rank,
of rank 0 and of the launcher, and resumes that continue exactly.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from conftest import ROOT
from engine_runs import cli, start_engine, subprocess_env, wait_for
from engine.run import rundir
from engine.distributed.launch import torchrun_command, world_size_problems
from engine.distributed.rollouts import join_rollouts
from engine.distributed.world import World
from engine.preset.schema import load_preset
from engine.model.rollout import Rollout

DEADLINE = 300.0
TIMING = ("timing/", "throughput/", "step_time", "eval_time")


# ------------------------------------------------------------------ pure parts


def test_shares_cover_the_batch_in_whole_units_rank_0_first():
    shares = [World(rank=r, size=2).share(12, unit=3) for r in range(2)]
    assert shares == [slice(0, 6), slice(6, 12)]
    uneven = [World(rank=r, size=3).share(10) for r in range(3)]  # 3 + 3 + 4 rows
    assert [s.stop - s.start for s in uneven] == [3, 3, 4]
    assert uneven[0].start == 0 and uneven[-1].stop == 10
    assert all(a.stop == b.start for a, b in zip(uneven, uneven[1:]))
    assert World(rank=2, size=3).share(10, rank=0) == uneven[0]  # another rank's share, asked by name


def test_one_process_collectives_change_nothing():
    world = World()
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert world.combine_rows(t, slice(0, 1)) is t and t.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert world.sum_floats([0.5, 2.0]) == [0.5, 2.0]
    assert world.any(False) is False and world.gather_objects("x") == ["x"]
    assert world.data_parallel([torch.nn.Linear(2, 2)]) is None


def test_joined_rollouts_pad_prompts_left_and_completions_right():
    def part(prompt, completion, truncated):
        P, T = len(prompt), len(completion)
        return Rollout(torch.tensor([prompt]), torch.ones(1, P, dtype=torch.long), torch.tensor([completion]),
                       torch.ones(1, T), torch.full((1, T), -0.5), torch.tensor([truncated]))

    joined = join_rollouts([part([5, 6], [7], False), part([8], [9, 10, 11], True)], pad_token_id=0)
    assert joined.prompt_ids.tolist() == [[5, 6], [0, 8]]
    assert joined.prompt_mask.tolist() == [[1, 1], [0, 1]]
    assert joined.completion_ids.tolist() == [[7, 0, 0], [9, 10, 11]]
    assert joined.completion_mask.tolist() == [[1, 0, 0], [1, 1, 1]]
    assert joined.sampling_logprobs.tolist() == [[-0.5, 0, 0], [-0.5, -0.5, -0.5]]
    assert joined.truncated.tolist() == [False, True]


def test_presets_that_cannot_share_a_step_are_refused_with_the_fix():
    grpo = load_preset(ROOT / "presets" / "grpo-sort.yaml", ["training.batch_size=16", "algorithm.num_generations=8"])
    assert world_size_problems(grpo, 1) == [] and world_size_problems(grpo, 2) == []
    (problem,) = world_size_problems(grpo, 4)
    assert "--nproc-per-node 4" in problem and "a step has 2 prompts" in problem and "at most 2 processes" in problem
    auto = load_preset(ROOT / "presets" / "dpo-sort.yaml", ["training.micro_batch_size=auto"])
    assert any("micro_batch_size" in p and "auto" in p for p in world_size_problems(auto, 2))
    ppo = load_preset(ROOT / "presets" / "ppo-sort.yaml", ["training.batch_size=8", "algorithm.num_mini_batches=4"])
    assert any("mini-batch of 2" in p for p in world_size_problems(ppo, 4))


def test_the_launcher_runs_the_engine_under_torchrun():
    command = torchrun_command(["run", "p.yaml", "--run-dir", "r"], 2)
    assert command[1:3] == ["-m", "engine.distributed.torchrun"]
    assert "--nproc-per-node=2" in command and "--standalone" in command
    assert command[-5:] == ["engine", "run", "p.yaml", "--run-dir", "r"]


def test_an_option_torchrun_lacks_is_left_out_not_refused():
    """torch 2.11's torchrun refused --shutdown-timeout (exit 2, seen on a GPU machine);
    the wrapper drops it there and keeps it where torchrun has it."""
    from engine.distributed.torchrun import known_arguments

    command = torchrun_command(["run", "p.yaml"], 1)[3:]
    assert any(a.startswith("--shutdown-timeout=") for a in command)
    older = known_arguments(command, {"--standalone", "--nproc-per-node"})
    assert not any(a.startswith("--shutdown-timeout") for a in older)
    assert older == [a for a in command if not a.startswith("--shutdown-timeout")]
    assert known_arguments(command, {"--standalone", "--nproc-per-node", "--shutdown-timeout"}) == command
    from torch.distributed.run import get_args_parser  # this torch's own parser accepts what is left

    get_args_parser().parse_args(known_arguments(command, {s for a in get_args_parser()._actions
                                                           for s in a.option_strings}))


# ------------------------------------------------------------- the launcher

FAKE_TORCHRUN = """\
import pathlib, signal, sys, time
sys.path.insert(0, {root!r})
from engine.run import rundir

run_dir = pathlib.Path(sys.argv[1])
terms = []
signal.signal(signal.SIGTERM, lambda signum, frame: terms.append(signum))
(run_dir / "ready").write_text("waiting for SIGTERM")
deadline = time.monotonic() + 60
while not terms and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(0.3)  # long enough for a second SIGTERM to arrive, were one sent
events = rundir.EventWriter(run_dir)
events.emit("run_finished", step=3, status="stopped", reason=f"{{len(terms)}} SIGTERM", checkpoint=None)
events.close()
"""


def test_a_stop_line_reaches_torchrun_as_sigterm(tmp_path, monkeypatch, capsys):
    """The window's Stop is a `stop` line on the launcher's stdin: the launcher passes it
    to torchrun as one SIGTERM (torchrun passes that to every rank: the SIGTERM test
    below) and exits 0 on the run_finished rank 0 writes. torchrun here is a script that
    waits for SIGTERM and writes what rank 0 would."""
    from engine.distributed import launch

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    fake = tmp_path / "fake_torchrun.py"
    fake.write_text(FAKE_TORCHRUN.format(root=str(ROOT)))
    monkeypatch.setattr(launch, "torchrun_command", lambda args, nproc: [sys.executable, str(fake), str(run_dir)])
    read_end, write_end = os.pipe()
    monkeypatch.setattr(sys, "stdin", os.fdopen(read_end, "r"))

    def type_stop():  # the window writes its line once the engine runs
        if wait_for(lambda: (run_dir / "ready").exists(), timeout=60):
            os.write(write_end, b"stop\n")
        os.close(write_end)

    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    typist = threading.Thread(target=type_stop)
    typist.start()
    try:
        code = launch.run_launcher(run_dir, ["run", "p.yaml"], 2)
    finally:
        typist.join(70)
        sys.stdin.close()
    assert code == 0
    final = rundir.read_events(run_dir)[-1]
    assert final["type"] == "run_finished" and final["reason"] == "1 SIGTERM"  # one stop passed on, once
    assert "stopping every process after the current step" in capsys.readouterr().err
    assert {s: signal.getsignal(s) for s in handlers} == handlers  # the launcher's handlers are gone


# ------------------------------------------------------------- end to end

# Each launch and run takes one thread a process (as torchrun sets it).
ENV = subprocess_env(OMP_NUM_THREADS="1")


def torchrun(args: list[str], nproc: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                           *args], env=ENV, capture_output=True, text=True, timeout=DEADLINE)


STEP_SCRIPT = str(ROOT / "tests" / "distributed_step.py")
# Each process runs two micro-batches (gradient accumulation under DDP's no_sync).
STEPS = {
    "grpo-sort.yaml": ["training.batch_size=16", "training.micro_batch_size=4", "algorithm.num_generations=4",
                       "algorithm.beta=0.04", "algorithm.num_iterations=2"],
    "ppo-sort.yaml": ["training.batch_size=16", "training.micro_batch_size=2", "algorithm.num_mini_batches=2"],
    "dpo-sort.yaml": ["training.batch_size=8", "training.micro_batch_size=2", "algorithm.rpo_alpha=0.5",
                      "data.num_train=64"],  # DPO scores every training pair's reference first
}
QUICK = ["training.max_steps=2", "training.eval_steps=0", "data.num_eval=8", "data.num_train=64"]
# The bundled presets run to step 2 in each mode's launch (FSDP2: sampling of different
# lengths on each process and evaluation keep the processes in step, since every pass
# gathers sharded weights).
RUNS = {"ddp": ["grpo-sort.yaml", "grpo-arithmetic.yaml", "ppo-sort.yaml", "dpo-sort.yaml"],
        "fsdp2": ["grpo-sort.yaml", "dpo-sort.yaml"]}


def fsdp_set(mode: str) -> str:
    return f"training.fsdp={str(mode == 'fsdp2').lower()}"


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The one-process reference: STEPS[preset]'s step in this process (one thread, as
    the ranks have), each preset once a module; the random states are put back after."""
    from distributed_step import one_step

    done = {}

    def reference(preset: str) -> dict:
        if preset not in done:
            threads, torch_state, python_state = torch.get_num_threads(), torch.get_rng_state(), random.getstate()
            torch.set_num_threads(1)
            try:
                done[preset] = one_step(ROOT / "presets" / preset, STEPS[preset], tmp_path_factory.mktemp("one"))
            finally:
                torch.set_num_threads(threads)
                torch.set_rng_state(torch_state)
                random.setstate(python_state)
        return done[preset]

    return reference


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """One torchrun launch of 2 processes, made the first time a test asks for it: for each
    mode (ddp, then fsdp2: training.fsdp is read per trainer, so one process group serves
    both), STEPS's step of each preset, then RUNS's presets each run to step 2
    (tests/distributed_step.py). `launches(mode)` is the folder with that mode's results."""
    made: dict[str, Path | str] = {}

    def launch(mode: str) -> Path:
        if not made:
            root = tmp_path_factory.mktemp("launch")
            jobs = []
            for each in ("ddp", "fsdp2"):
                (root / each).mkdir()
                jobs += [{"kind": "step", "name": f"{each}/step-{preset}", "preset": str(ROOT / "presets" / preset),
                          "sets": STEPS[preset] + [fsdp_set(each)]} for preset in sorted(STEPS)]
                jobs += [{"kind": "run", "name": f"{each}/run-{preset}", "preset": str(ROOT / "presets" / preset),
                          "sets": QUICK + [fsdp_set(each)]} for preset in RUNS[each]]
            (root / "jobs.json").write_text(json.dumps(jobs))
            done = torchrun([STEP_SCRIPT, str(root), str(root / "jobs.json")])
            for each in ("ddp", "fsdp2"):
                made[each] = root / each if done.returncode == 0 else f"the launch failed: {done.stderr[-3000:]}"
        if isinstance(made[mode], str):
            pytest.fail(made[mode])
        return made[mode]

    return launch


@pytest.mark.parametrize("preset", sorted(STEPS))
@pytest.mark.parametrize("mode", ["ddp", "fsdp2"])
def test_two_processes_take_the_same_update_as_one(mode, preset, launches, one_process):
    """The same rollout (GRPO, PPO) or pairs (DPO) through a 1-process and a 2-process
    step: the LoRA (and value head) gradients and the weights after it agree to 1e-5,
    with the base model whole on each process (DDP) or its layers sharded (FSDP2)."""
    out = launches(mode)
    single = one_process(preset)
    assert single["grads"] and any(float(g.abs().max()) > 1e-4 for g in single["grads"].values())
    for rank in (0, 1):
        shared = torch.load(out / f"step-{preset}_rank{rank}.pt")
        assert shared["sharded"] is (mode == "fsdp2")
        for kind in ("grads", "weights"):
            assert shared[kind].keys() == single[kind].keys()
            for name, value in single[kind].items():
                torch.testing.assert_close(shared[kind][name], value, atol=1e-5, rtol=0, msg=f"{kind} {name}")
        for key, value in single["metrics"].items():
            if isinstance(value, float) and not key.startswith(TIMING):
                assert shared["metrics"][key] == pytest.approx(value, abs=1e-5), key


@pytest.mark.parametrize("mode,preset", [(mode, preset) for mode in RUNS for preset in RUNS[mode]])
def test_each_bundled_preset_trains_in_two_processes(mode, preset, launches):
    """Trainer.run of each bundled preset in 2 processes, to step 2: one run_started with
    the world, a metrics event a step, evaluations, samples, trajectories, a checkpoint
    of whole adapter tensors, run_finished done. (The CLI's own part of a run in several
    processes, its logs and ranks, is test_a_run_in_two_processes_through_the_cli.)"""
    run_dir = launches(mode) / f"run-{preset}"
    events = rundir.read_events(run_dir)
    started = [e for e in events if e["type"] == "run_started"]
    assert len(started) == 1 and started[0]["world_size"] == 2 and started[0]["backend"] == "gloo"
    assert [e["step"] for e in events if e["type"] == "metrics"] == [1, 2]
    assert [e["step"] for e in events if e["type"] == "eval"] == [0, 2]
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done", events[-1]
    assert (run_dir / "checkpoints" / "step_000002" / "adapter_model.safetensors").exists()
    assert sorted(p.name for p in (run_dir / "trajectories").iterdir())
    assert [e for e in events if e["type"] == "samples"]


def engine(args: list[str], cwd: Path) -> subprocess.Popen:
    return start_engine(args, ENV, cwd)


def events_of(run_dir: Path) -> list[dict]:
    return rundir.read_events(run_dir)


def assert_clean_run_dir(run_dir: Path, steps: int, world_size: int = 2) -> list[dict]:
    """One run's events, no line twice: one run_started with the world, one metrics
    event a step, a final run_finished; no rank's failure left behind."""
    events = events_of(run_dir)
    started = [e for e in events if e["type"] == "run_started"]
    assert len(started) == 1 and started[0]["world_size"] == world_size and started[0]["backend"] == "gloo"
    assert [e["step"] for e in events if e["type"] == "metrics"] == list(range(1, steps + 1))
    assert events[-1]["type"] == "run_finished", events[-1]
    assert not list(run_dir.glob("rank_*.failed.json"))
    assert (run_dir / "engine.log").exists() and (run_dir / "engine.rank1.log").exists()
    return events


def small_run_preset(folder: Path, **training) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "grpo-sort.yaml").read_text())
    data["model"]["device"] = "cpu"
    data["algorithm"]["num_generations"] = 4
    data["data"].update({"num_eval": 8, "num_train": 64})  # not 5,000 prompts made and checked on every rank
    data["training"].update({"batch_size": 16, "eval_steps": 0, "save_steps": 2, **training})
    path = folder / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# FSDP2 with PPO (value head under DDP, layers sharded), 4 steps, a checkpoint at 2 and 4.
SHARDED = ["training.fsdp=true", "training.batch_size=16", "training.eval_steps=0", "data.num_eval=8",
           "data.num_train=64",
           "training.save_steps=2", "training.lr_scheduler_type=constant", "training.micro_batch_size=4",
           "training.max_steps=4"]


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """`rl-engine run --nproc-per-node 2` to the end, once a module per mode, made the first
    time a test asks: ddp, grpo-sort (small_run_preset) for 6 steps; fsdp2, ppo-sort
    (SHARDED) for 4. Each is (run folder, preset, stderr, steps); read them, never write:
    the uninterrupted runs the resume tests compare with."""
    made: dict[str, tuple | str] = {}

    def run(mode: str) -> tuple[Path, Path, str, int]:
        if mode not in made:
            folder = tmp_path_factory.mktemp(f"cli-{mode}")
            if mode == "ddp":
                preset, sets, steps = small_run_preset(folder, max_steps=6), [], 6
            else:
                preset, sets, steps = ROOT / "presets" / "ppo-sort.yaml", SHARDED, 4
            run_dir = folder / "run"
            proc = engine(["run", str(preset), "--run-dir", str(run_dir), *[a for s in sets for a in ("--set", s)],
                           "--nproc-per-node", "2"], folder)
            _, err = proc.communicate(timeout=DEADLINE)
            made[mode] = (run_dir, preset, err, steps) if proc.returncode == 0 else \
                f"the {mode} run failed ({proc.returncode}): {err[-3000:]}"
        if isinstance(made[mode], str):
            pytest.fail(made[mode])
        return made[mode]

    return run


def test_a_run_in_two_processes_through_the_cli_ddp(cli_runs):
    assert_run_through_the_cli(*cli_runs("ddp"))


def test_a_run_in_two_processes_through_the_cli_fsdp2(cli_runs):
    assert_run_through_the_cli(*cli_runs("fsdp2"))


def assert_run_through_the_cli(run_dir: Path, preset: Path, err: str, steps: int) -> None:
    """The launcher, torchrun and the workers of `rl-engine run --nproc-per-node 2`: a
    clean run folder (each rank's log, no rank's failure), the last checkpoint, samples
    and trajectories, and one line that the run is done (rank 0 alone reports)."""
    events = assert_clean_run_dir(run_dir, steps)
    assert events[-1]["status"] == "done"
    assert (run_dir / "checkpoints" / f"step_{steps:06d}" / "adapter_model.safetensors").exists()
    assert [p["rank"] for p in json.loads((run_dir / "ranks.json").read_text())] == [0, 1]
    assert sorted(p.name for p in (run_dir / "trajectories").iterdir())
    assert [e for e in events if e["type"] == "samples"]
    assert err.count(f"run done at step {steps}") == 1


def metric_steps(run_dir: Path) -> int:
    return sum(1 for e in events_of(run_dir) if e["type"] == "metrics") if (run_dir / "events.jsonl").exists() else 0


def test_sigterm_to_the_launcher_stops_every_process_after_the_step(tmp_path):
    preset = small_run_preset(tmp_path, max_steps=500)
    run_dir = tmp_path / "run"
    proc = engine(["run", str(preset), "--run-dir", str(run_dir), "--nproc-per-node", "2"], tmp_path)
    assert wait_for(lambda: metric_steps(run_dir) >= 2)
    ranks = json.loads((run_dir / "ranks.json").read_text())
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, err[-3000:]
    events = events_of(run_dir)
    final = events[-1]
    assert final["type"] == "run_finished" and final["status"] == "stopped" and final["reason"] == "SIGTERM"
    assert final["checkpoint"] == f"checkpoints/step_{final['step']:06d}"
    assert (run_dir / final["checkpoint"] / rundir.CHECKPOINT_STATE).exists()
    assert "Traceback" not in err
    for entry in ranks:  # every worker has exited
        assert not Path(f"/proc/{entry['pid']}").exists() or "Z" in Path(f"/proc/{entry['pid']}/stat").read_text().split(")")[-1][:3]


def comparable(events: list[dict]) -> dict[int, dict]:
    return {e["step"]: {k: v for k, v in e.items() if k not in ("time", "learning_rate") and not k.startswith(TIMING)}
            for e in events if e["type"] == "metrics"}


def test_a_killed_rank_fails_the_run_by_name_and_resume_continues_exactly(tmp_path, cli_runs):
    whole, preset, _, _ = cli_runs("ddp")  # the same preset, uninterrupted
    uninterrupted = comparable(events_of(whole))
    assert sorted(uninterrupted) == [1, 2, 3, 4, 5, 6]

    run_dir = tmp_path / "killed"
    proc = engine(["run", str(preset), "--run-dir", str(run_dir), "--nproc-per-node", "2"], tmp_path)
    assert wait_for(lambda: (run_dir / "checkpoints" / "step_000002").is_dir())
    rank1 = json.loads((run_dir / "ranks.json").read_text())[1]["pid"]
    os.kill(rank1, signal.SIGKILL)
    killed_at = time.monotonic()
    out, err = proc.communicate(timeout=DEADLINE)
    assert time.monotonic() - killed_at < 30  # the others exit within seconds
    final = events_of(run_dir)[-1]
    # docs/run-directory.md: a run that failed exits 1 and its last event is run_failed, with
    # `rank` naming the rank that ended it. Exit 1 after run_finished is an inconsistent state.
    assert (proc.returncode, final["type"]) == (1, "run_failed"), (proc.returncode, final, err[-3000:])
    assert final["rank"] == 1 and "rank 1" in final["message"], final
    assert not list((run_dir / "checkpoints").glob("*.tmp"))

    # A different number of processes is refused, naming the one to use (before anything
    # starts: in this process).
    refused = cli("resume", run_dir, cwd=tmp_path)
    assert refused.code == 2 and "--nproc-per-node 2" in refused.err

    resumed = engine(["resume", str(run_dir), "--nproc-per-node", "2"], tmp_path)
    _, err = resumed.communicate(timeout=DEADLINE)
    assert resumed.returncode == 0, err[-3000:]
    events = events_of(run_dir)
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done"
    resumed_from = [e for e in events if e["type"] == "run_resumed"][-1]["step"]
    after = {step: m for step, m in comparable(events[events.index(
        [e for e in events if e["type"] == "run_resumed"][-1]):]).items()}
    assert sorted(after) == list(range(resumed_from + 1, 7))
    for step, metrics in after.items():
        assert metrics.keys() == uninterrupted[step].keys()
        for key, value in metrics.items():
            assert value == pytest.approx(uninterrupted[step][key], abs=1e-6), (step, key)


def test_a_killed_rank_0_is_named_by_the_launcher(tmp_path):
    preset = small_run_preset(tmp_path, max_steps=500)
    run_dir = tmp_path / "run"
    proc = engine(["run", str(preset), "--run-dir", str(run_dir), "--nproc-per-node", "2"], tmp_path)
    assert wait_for(lambda: metric_steps(run_dir) >= 1)
    os.kill(json.loads((run_dir / "ranks.json").read_text())[0]["pid"], signal.SIGKILL)
    _, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 1
    final = events_of(run_dir)[-1]
    assert final["type"] == "run_failed" and final["rank"] == 0 and "rank 0" in final["message"]
    assert "rank 0" in err


def cut_after_checkpoint(run_dir: Path, step: int) -> None:
    """`run_dir` as a run killed right after its checkpoint of `step`: later checkpoints
    and the events after that checkpoint's event gone."""
    for later in rundir.complete_checkpoints(run_dir):
        if int(later.name.split("_")[1]) > step:
            shutil.rmtree(later)
    lines = (run_dir / rundir.EVENTS_FILE).read_text(encoding="utf-8").splitlines(keepends=True)
    (end,) = [i for i, line in enumerate(lines)
              if json.loads(line)["type"] == "checkpoint" and json.loads(line)["step"] == step]
    (run_dir / rundir.EVENTS_FILE).write_text("".join(lines[:end + 1]), encoding="utf-8")


def test_a_sharded_run_checkpoints_whole_adapters_and_resumes_exactly(tmp_path, cli_runs, one_process):
    """FSDP2 with PPO (value head under DDP, layers sharded): the run's state at step 2
    (a copy of the 4-step run, cut there) resumed to 4 equals the 4 straight steps; the
    checkpoint is an ordinary adapter of whole tensors, the shapes one process saves."""
    from peft.utils import load_peft_weights
    from safetensors import safe_open

    straight, _, _, _ = cli_runs("fsdp2")
    split = tmp_path / "split"
    shutil.copytree(straight, split)
    cut_after_checkpoint(split, 2)
    proc = engine(["resume", str(split), "--nproc-per-node", "2"], tmp_path)
    _, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, err[-3000:]
    events = events_of(split)
    assert [e["step"] for e in events if e["type"] == "run_resumed"] == [2]
    a, b = comparable(events_of(straight)), comparable(events)
    for step in (3, 4):
        for key, value in a[step].items():
            assert b[step][key] == pytest.approx(value, abs=1e-6), (step, key)
    # Whole tensors: the adapter of a sharded run has the shapes of a 1-process run's.
    whole = one_process("ppo-sort.yaml")["adapter_shapes"]
    sharded = load_peft_weights(str(split / "checkpoints" / "step_000004"), device="cpu")
    assert sharded.keys() == whole.keys() and all(tuple(sharded[k].shape) == whole[k] for k in whole)
    with safe_open(str(split / "checkpoints" / "step_000004" / "adapter_model.safetensors"), "pt") as f:
        assert set(f.keys()) == set(whole)


def test_killing_the_launcher_leaves_no_process_behind(tmp_path):
    """The window's Kill is SIGKILL to the launcher: torchrun dies with it and the
    workers, orphaned, exit too."""
    preset = small_run_preset(tmp_path, max_steps=500)
    run_dir = tmp_path / "run"
    proc = engine(["run", str(preset), "--run-dir", str(run_dir), "--nproc-per-node", "2"], tmp_path)
    assert wait_for(lambda: metric_steps(run_dir) >= 1)
    pids = [e["pid"] for e in json.loads((run_dir / "ranks.json").read_text())]
    proc.kill()
    proc.communicate(timeout=DEADLINE)

    def gone(pid):
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
        except OSError:
            return True

    assert wait_for(lambda: all(gone(pid) for pid in pids), timeout=30)


def test_validate_checks_the_process_count():
    ok = cli("validate", ROOT / "presets" / "dpo-sort.yaml", "--nproc-per-node", "2")
    assert ok.code == 0, ok.err
    bad = cli("validate", ROOT / "presets" / "dpo-sort.yaml", "--nproc-per-node", "64")
    assert bad.code == 2 and "at most 32 processes" in bad.err
