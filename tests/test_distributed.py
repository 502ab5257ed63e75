"""Several processes (engine/distributed): the row shares and the rollout join, the
checks that refuse a preset for N processes, the launcher's stop line, and, end to end
on this CPU with gloo and 2 processes under torchrun: in one launch (DDP, then FSDP2 in
the same process group: tests/distributed_step.py; the one-process reference in this
process, while the launch runs) the same update as one process, a short run of each
bundled preset, and a resume that continues exactly; through `rl-engine ... --nproc-per-node
2`: a stop (a clean run folder), a kill -9 of rank 1 in a sharded run and its resume
(exactly the launch's uninterrupted run, whole adapter tensors), of rank 0 and of the
launcher. Each launch costs ~18 CPU-seconds before its first step (four interpreters
importing torch, transformers and peft): what a check needs is merged into the launches
here rather than given one of its own (docs/development.md, the suite's budget).
"""

from __future__ import annotations

import json
import os
import random
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

DEADLINE = 300.0  # the CLI's runs start together with the launch: on 2 cores a run waits its turn
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

STEP_SCRIPT = str(ROOT / "tests" / "distributed_step.py")
# Each process runs two micro-batches (gradient accumulation under DDP's no_sync).
STEPS = {
    "grpo-sort.yaml": ["training.batch_size=16", "training.micro_batch_size=4", "algorithm.num_generations=4",
                       "algorithm.beta=0.04", "algorithm.num_iterations=2"],
    "ppo-sort.yaml": ["training.batch_size=16", "training.micro_batch_size=2", "algorithm.num_mini_batches=2"],
    "dpo-sort.yaml": ["training.batch_size=8", "training.micro_batch_size=2", "algorithm.rpo_alpha=0.5",
                      "data.num_train=64"],  # DPO scores every training pair's reference first
}
# 16 rows a step (GRPO: 2 prompts, one a process), not the presets' 32 to 128, and the 32
# prompts (pairs) two steps use: what is checked is that each trains in 2 processes.
QUICK = ["training.max_steps=2", "training.eval_steps=0", "data.num_eval=8", "data.num_train=32",
         "training.batch_size=16"]
# The bundled presets run to step 2 in each mode (FSDP2: sampling of different lengths on
# each process and evaluation keep the processes in step, since every pass gathers
# sharded weights).
RUNS = {"ddp": ["grpo-sort.yaml", "grpo-arithmetic.yaml", "ppo-sort.yaml", "dpo-sort.yaml"],
        "fsdp2": ["grpo-sort.yaml", "dpo-sort.yaml"]}
# grpo-sort as small_run_preset makes it (the CLI tests' preset), a checkpoint every 2 steps.
SMALL = ["model.device=cpu", "algorithm.num_generations=4", "data.num_eval=8", "data.num_train=64",
         "training.batch_size=16", "training.eval_steps=0", "training.save_steps=2"]
# FSDP2 with PPO (value head under DDP, layers sharded), 4 steps, a checkpoint at 2 and 4.
SHARDED = ["training.fsdp=true", "training.batch_size=16", "training.eval_steps=0", "data.num_eval=8",
           "data.num_train=64", "training.save_steps=2", "training.lr_scheduler_type=constant",
           "training.micro_batch_size=4", "training.max_steps=4"]


def fsdp_set(mode: str) -> str:
    return f"training.fsdp={str(mode == 'fsdp2').lower()}"


def launch_jobs() -> list[dict]:
    """The launch's jobs, in order (tests/distributed_step.py): for each mode, STEPS's step
    of each preset and RUNS's runs; DDP's run of SMALL to step 4 and its resume from step 2;
    FSDP2's run of SHARDED (the uninterrupted run the CLI's killed run resumes to)."""
    def preset(name):
        return str(ROOT / "presets" / name)

    jobs = []
    for mode in ("ddp", "fsdp2"):
        jobs += [{"kind": "step", "name": f"{mode}/step-{name}", "preset": preset(name),
                  "sets": STEPS[name] + [fsdp_set(mode)]} for name in sorted(STEPS)]
        jobs += [{"kind": "run", "name": f"{mode}/run-{name}", "preset": preset(name),
                  "sets": QUICK + [fsdp_set(mode)]} for name in RUNS[mode]]
    small = SMALL + ["training.max_steps=4", fsdp_set("ddp")]
    jobs += [{"kind": "run", "name": "ddp/straight", "preset": preset("grpo-sort.yaml"), "sets": small},
             {"kind": "resume", "name": "ddp/resumed", "from": "ddp/straight", "step": 2,
              "preset": preset("grpo-sort.yaml"), "sets": small},
             {"kind": "run", "name": "fsdp2/sharded", "preset": preset("ppo-sort.yaml"), "sets": SHARDED}]
    return jobs


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


def assert_cli_outputs(run_dir: Path, err: str, status: str, step: int) -> None:
    """What the CLI's part of a run in 2 processes leaves: each rank's log, ranks.json,
    the checkpoint of its last step, samples and trajectories, and one line saying how the
    run ended (rank 0 alone reports)."""
    assert (run_dir / "engine.log").exists() and (run_dir / "engine.rank1.log").exists()
    assert [p["rank"] for p in json.loads((run_dir / "ranks.json").read_text())] == [0, 1]
    assert (run_dir / "checkpoints" / f"step_{step:06d}" / "adapter_model.safetensors").exists()
    assert sorted(p.name for p in (run_dir / "trajectories").iterdir())
    assert [e for e in events_of(run_dir) if e["type"] == "samples"]
    assert err.count(f"run {status} at step {step}") == 1, err[-3000:]


def small_run_preset(folder: Path, **training) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "grpo-sort.yaml").read_text())
    data["model"]["device"] = "cpu"
    data["algorithm"]["num_generations"] = 4
    data["data"].update({"num_eval": 8, "num_train": 64})  # not 5,000 prompts made and checked on every rank
    data["training"].update({"batch_size": 16, "eval_steps": 0, "save_steps": 2, **training})
    path = folder / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def metric_steps(run_dir: Path) -> int:
    return sum(1 for e in events_of(run_dir) if e["type"] == "metrics") if (run_dir / "events.jsonl").exists() else 0


def gone(pid: int) -> bool:
    """Whether process `pid` has exited (a zombie, not yet reaped, counts)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True


# The CLI's runs that a test stops or kills: each a function of a fresh folder and the list
# it adds its processes to, run in a thread of cli_runs, returning what the test checks.

def run_killed_at_rank_1(folder: Path, started: list) -> dict:
    """FSDP2 with PPO (SHARDED) through `rl-engine run --nproc-per-node 2`, rank 1 killed
    (kill -9) once the checkpoint of step 2 is written; then `rl-engine resume` without
    --nproc-per-node (a real process, refused before anything starts) and with 2. What the
    killed run left is read before the resume appends to it."""
    run_dir = folder / "killed"
    sets = [a for s in SHARDED for a in ("--set", s)]
    proc = engine(["run", str(ROOT / "presets" / "ppo-sort.yaml"), "--run-dir", str(run_dir), *sets,
                   "--nproc-per-node", "2"], folder)
    started.append(proc)
    assert wait_for(lambda: (run_dir / "checkpoints" / "step_000002").is_dir(), timeout=DEADLINE)
    os.kill(json.loads((run_dir / "ranks.json").read_text())[1]["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    _, err = proc.communicate(timeout=DEADLINE)
    killed = {"code": proc.returncode, "err": err, "exit_s": time.monotonic() - killed_at,
              "final": events_of(run_dir)[-1], "partial": list((run_dir / "checkpoints").glob("*.tmp"))}
    refused = engine(["resume", str(run_dir)], folder)
    started.append(refused)
    _, refused_err = refused.communicate(timeout=DEADLINE)
    resumed = engine(["resume", str(run_dir), "--nproc-per-node", "2"], folder)
    started.append(resumed)
    _, resumed_err = resumed.communicate(timeout=DEADLINE)
    return {"run_dir": run_dir, "killed": killed, "refused": (refused.returncode, refused_err),
            "resumed": (resumed.returncode, resumed_err)}


def run_stopped_by_sigterm(folder: Path, started: list) -> dict:
    """small_run_preset (DDP) through `rl-engine run --nproc-per-node 2`, SIGTERM to the
    launcher after step 2; which workers were still running when the launcher had exited."""
    preset = small_run_preset(folder, max_steps=500)
    run_dir = folder / "run"
    proc = engine(["run", str(preset), "--run-dir", str(run_dir), "--nproc-per-node", "2"], folder)
    started.append(proc)
    assert wait_for(lambda: metric_steps(run_dir) >= 2, timeout=DEADLINE)
    ranks = json.loads((run_dir / "ranks.json").read_text())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=DEADLINE)
    running = [entry for entry in ranks if not gone(entry["pid"])]
    return {"run_dir": run_dir, "code": proc.returncode, "err": err, "running": running}


def run_killed_at_rank_0(folder: Path, started: list) -> dict:
    """small_run_preset through the CLI, rank 0 killed (kill -9) after its first step."""
    preset = small_run_preset(folder, max_steps=500)
    run_dir = folder / "run"
    proc = engine(["run", str(preset), "--run-dir", str(run_dir), "--nproc-per-node", "2"], folder)
    started.append(proc)
    assert wait_for(lambda: metric_steps(run_dir) >= 1, timeout=DEADLINE)
    os.kill(json.loads((run_dir / "ranks.json").read_text())[0]["pid"], signal.SIGKILL)
    _, err = proc.communicate(timeout=DEADLINE)
    return {"run_dir": run_dir, "code": proc.returncode, "err": err}


def run_with_launcher_killed(folder: Path, started: list) -> dict:
    """small_run_preset through the CLI, the launcher killed (SIGKILL, the window's Kill)
    after the first step; whether every worker had exited within 30 s."""
    preset = small_run_preset(folder, max_steps=500)
    run_dir = folder / "run"
    proc = engine(["run", str(preset), "--run-dir", str(run_dir), "--nproc-per-node", "2"], folder)
    started.append(proc)
    assert wait_for(lambda: metric_steps(run_dir) >= 1, timeout=DEADLINE)
    pids = [e["pid"] for e in json.loads((run_dir / "ranks.json").read_text())]
    proc.kill()
    proc.communicate(timeout=DEADLINE)
    return {"pids": pids, "all_gone": wait_for(lambda: all(gone(pid) for pid in pids), timeout=30)}


CLI_RUNS = {"rank1": run_killed_at_rank_1, "sigterm": run_stopped_by_sigterm, "rank0": run_killed_at_rank_0,
            "launcher": run_with_launcher_killed}
# Two threads run them, each one run after another, beside the launch: at most three
# launches at a time (the longest, rank1's two, beside the other three).
CLI_CHAINS = (("rank1",), ("sigterm", "rank0", "launcher"))


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """CLI_RUNS in CLI_CHAINS's threads, started when the first test asking for one is set
    up (the launch's first test: `launches` asks), so that each run's ~18 CPU-seconds of
    imports before its first step, mostly one process at a time, overlap the launch's and
    each other's. `cli_runs(name)` waits for that run and gives what it returned, or
    raises what it raised (a failed wait_for, an assertion)."""
    started: list[subprocess.Popen] = []
    outcomes: dict[str, dict] = {}
    ended = {name: threading.Event() for name in CLI_RUNS}
    folders = {name: tmp_path_factory.mktemp(name) for name in CLI_RUNS}
    closing = threading.Event()

    def work(chain):
        for name in chain:
            if closing.is_set():  # the module is done (a test run stopped early): start no more
                outcomes[name] = {"error": RuntimeError("not started: the module was torn down")}
                ended[name].set()
                continue
            try:
                outcomes[name] = {"value": CLI_RUNS[name](folders[name], started)}
            except BaseException as exc:  # re-raised in the test that asks for it
                outcomes[name] = {"error": exc}
            ended[name].set()

    threads = [threading.Thread(target=work, args=(chain,), name=f"cli-runs-{i}", daemon=True)
               for i, chain in enumerate(CLI_CHAINS)]
    for thread in threads:
        thread.start()
    wait_s = len(CLI_RUNS) * 2 * DEADLINE

    def outcome(name: str) -> dict:
        if not ended[name].wait(wait_s):
            pytest.fail(f"the {name} run did not end")
        if "error" in outcomes[name]:
            raise outcomes[name]["error"]
        return outcomes[name]["value"]

    yield outcome
    closing.set()
    for proc in started:  # a run a failed check left running: its workers exit as orphans
        if proc.poll() is None:
            proc.kill()
    for thread in threads:
        thread.join(wait_s)
    for proc in started:
        proc.wait()


@pytest.fixture(scope="module")
def launches(tmp_path_factory, cli_runs):
    """One torchrun launch of 2 processes, started when the first test asking for it is
    set up, with the CLI's runs (cli_runs: their imports overlap its jobs) and so that the
    one-process reference is made in this process while it runs: for each mode (ddp, then
    fsdp2: training.fsdp is read per trainer, so one process group serves both)
    launch_jobs()'s jobs. `launches(mode)` waits for it and is the folder with that mode's
    results."""
    root = tmp_path_factory.mktemp("launch")
    for mode in ("ddp", "fsdp2"):
        (root / mode).mkdir()
    (root / "jobs.json").write_text(json.dumps(launch_jobs()))
    with open(root / "launch.log", "w") as log:  # a file, not a pipe nobody reads while it runs
        proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                 "--nproc-per-node=2", STEP_SCRIPT, str(root), str(root / "jobs.json")],
                                env=ENV, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    outcome: list[str] = []

    def launch(mode: str) -> Path:
        if not outcome:
            try:
                proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            tail = (root / "launch.log").read_text(errors="replace")[-3000:]
            outcome.append("" if proc.returncode == 0 else f"the launch failed ({proc.returncode}): {tail}")
        if outcome[0]:
            pytest.fail(outcome[0])
        return root / mode

    yield launch
    if proc.poll() is None:  # a test run that stopped early
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("preset", sorted(STEPS))
@pytest.mark.parametrize("mode", ["ddp", "fsdp2"])
def test_two_processes_take_the_same_update_as_one(mode, preset, launches, one_process):
    """The same rollout (GRPO, PPO) or pairs (DPO) through a 1-process and a 2-process
    step: the LoRA (and value head) gradients and the weights after it agree to 1e-5,
    with the base model whole on each process (DDP) or its layers sharded (FSDP2)."""
    single = one_process(preset)  # first: made here while the launch runs
    out = launches(mode)
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
    processes, its logs and ranks, is in the stop and the killed-rank tests.)"""
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


def comparable(events: list[dict]) -> dict[int, dict]:
    return {e["step"]: {k: v for k, v in e.items() if k not in ("time", "learning_rate") and not k.startswith(TIMING)}
            for e in events if e["type"] == "metrics"}


def assert_continues_exactly(events: list[dict], uninterrupted: dict[int, dict], last: int) -> None:
    """The metrics after the last run_resumed in `events` are the uninterrupted run's, step
    by step to `last`: the same keys, values equal to 1e-6."""
    resumed = [i for i, e in enumerate(events) if e["type"] == "run_resumed"][-1]
    after = comparable(events[resumed:])
    assert sorted(after) == list(range(events[resumed]["step"] + 1, last + 1))
    for step, metrics in after.items():
        assert metrics.keys() == uninterrupted[step].keys()
        for key, value in metrics.items():
            assert value == pytest.approx(uninterrupted[step][key], abs=1e-6), (step, key)


def test_a_resumed_run_continues_exactly_in_two_processes(launches):
    """DDP: the run's state at step 2 (a copy of the 4-step run, cut there) resumed to 4 by
    the same 2 processes equals the 4 straight steps. (FSDP2's resume, through the CLI after
    a killed rank, is test_a_killed_rank_fails_the_run_by_name_and_resume_continues_exactly.)"""
    out = launches("ddp")
    uninterrupted = comparable(rundir.read_events(out / "straight"))
    assert sorted(uninterrupted) == [1, 2, 3, 4]
    events = rundir.read_events(out / "resumed")
    assert [e["step"] for e in events if e["type"] == "run_resumed"] == [2]
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done", events[-1]
    assert_continues_exactly(events, uninterrupted, 4)


def test_a_killed_rank_fails_the_run_by_name_and_resume_continues_exactly(cli_runs, launches, one_process):
    """FSDP2 with PPO through the CLI (SHARDED: value head under DDP, layers sharded), rank 1
    killed after the checkpoint of step 2 (run_killed_at_rank_1): the run fails naming rank
    1 and the other process exits within seconds; a resume in another number of processes
    is refused; `rl-engine resume --nproc-per-node 2` ends the run as the launch's
    uninterrupted run of the same preset (steps 3 and 4 equal), with the CLI's outputs, and
    its checkpoint is an ordinary adapter of whole tensors, the shapes one process saves."""
    from peft.utils import load_peft_weights
    from safetensors import safe_open

    outcome = cli_runs("rank1")
    run_dir, killed = outcome["run_dir"], outcome["killed"]
    assert killed["exit_s"] < 30  # the others exit within seconds
    final = killed["final"]
    # docs/run-directory.md: a run that failed exits 1 and its last event is run_failed, with
    # `rank` naming the rank that ended it. Exit 1 after run_finished is an inconsistent state.
    assert (killed["code"], final["type"]) == (1, "run_failed"), (killed["code"], final, killed["err"][-3000:])
    assert final["rank"] == 1 and "rank 1" in final["message"], final
    assert not killed["partial"]  # no checkpoint left half-written

    # A different number of processes is refused, naming the one to use, before anything starts.
    code, err = outcome["refused"]
    assert code == 2 and "--nproc-per-node 2" in err, err

    code, err = outcome["resumed"]
    assert code == 0, err[-3000:]
    events = events_of(run_dir)
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done"
    assert [e["step"] for e in events if e["type"] == "run_resumed"] == [2]
    uninterrupted = comparable(events_of(launches("fsdp2") / "sharded"))  # the same preset, in the launch
    assert sorted(uninterrupted) == [1, 2, 3, 4]
    assert_continues_exactly(events, uninterrupted, 4)
    assert_cli_outputs(run_dir, err, "done", 4)
    # Whole tensors: the adapter of a sharded run has the shapes of a 1-process run's.
    whole = one_process("ppo-sort.yaml")["adapter_shapes"]
    sharded = load_peft_weights(str(run_dir / "checkpoints" / "step_000004"), device="cpu")
    assert sharded.keys() == whole.keys() and all(tuple(sharded[k].shape) == whole[k] for k in whole)
    with safe_open(str(run_dir / "checkpoints" / "step_000004" / "adapter_model.safetensors"), "pt") as f:
        assert set(f.keys()) == set(whole)


def test_sigterm_to_the_launcher_stops_every_process_after_the_step(cli_runs):
    """`rl-engine run --nproc-per-node 2` (DDP) stopped by SIGTERM to the launcher
    (run_stopped_by_sigterm): every process stops after the step, rank 0 checkpoints it,
    exit 0; and the CLI's part of a run in several processes: a clean run folder (each
    rank's log, no rank's failure), ranks.json, samples, trajectories, one line that the
    run stopped."""
    stopped = cli_runs("sigterm")
    run_dir, err = stopped["run_dir"], stopped["err"]
    assert stopped["code"] == 0, err[-3000:]
    final = events_of(run_dir)[-1]
    assert final["type"] == "run_finished" and final["status"] == "stopped" and final["reason"] == "SIGTERM"
    assert final["checkpoint"] == f"checkpoints/step_{final['step']:06d}"
    assert (run_dir / final["checkpoint"] / rundir.CHECKPOINT_STATE).exists()
    assert "Traceback" not in err
    assert stopped["running"] == []  # every worker had exited when the launcher did
    assert_clean_run_dir(run_dir, final["step"])
    assert_cli_outputs(run_dir, err, "stopped", final["step"])


def test_a_killed_rank_0_is_named_by_the_launcher(cli_runs):
    killed = cli_runs("rank0")
    assert killed["code"] == 1
    final = events_of(killed["run_dir"])[-1]
    assert final["type"] == "run_failed" and final["rank"] == 0 and "rank 0" in final["message"]
    assert "rank 0" in killed["err"]


def test_killing_the_launcher_leaves_no_process_behind(cli_runs):
    """The window's Kill is SIGKILL to the launcher (run_with_launcher_killed): torchrun
    dies with it and the workers, orphaned, exit too."""
    killed = cli_runs("launcher")
    assert killed["pids"] and killed["all_gone"], [pid for pid in killed["pids"] if not gone(pid)]


def test_validate_checks_the_process_count():
    ok = cli("validate", ROOT / "presets" / "dpo-sort.yaml", "--nproc-per-node", "2")
    assert ok.code == 0, ok.err
    bad = cli("validate", ROOT / "presets" / "dpo-sort.yaml", "--nproc-per-node", "64")
    assert bad.code == 2 and "at most 32 processes" in bad.err
