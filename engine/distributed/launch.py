"""Starting a run in several processes: torchrun does it; this module builds its command
and watches it. No torch import (the window and `rl-engine validate` use the checks).

`rl-engine run PRESET --nproc-per-node N` is this launcher: it checks the preset for N
processes, starts `python -m torch.distributed.run --standalone --nproc-per-node N
-m engine run PRESET ...`, passes a stop (SIGTERM, SIGINT, a `stop` line on stdin)
to torchrun, which sends SIGTERM to every worker (each finishes the step, rank 0
checkpoints), and when torchrun ends without the run's final event (rank 0 was killed)
writes run_failed naming the rank that died first. Clusters run the same worker command
under their own `torchrun --nnodes ... --rdzv-endpoint ...` (README, "Several processes").
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine.run import rundir

__all__ = ["launched_by_torchrun", "launched_rank", "world_size_problems", "torchrun_command", "run_launcher", "alive", "read_ranks", "RANKS_FILE",
           "launch_from_cli", "checkpoint_world_size_problem"]

# Written by rank 0 as the group forms: which process each rank is (host, pid).
RANKS_FILE = "ranks.json"
# How long torchrun lets the workers finish their step after a stop before it kills them.
SHUTDOWN_TIMEOUT_S = 3600


def launched_by_torchrun(environ=os.environ) -> bool:
    """Whether this process is a worker started by torchrun (or a launcher like it)."""
    return all(k in environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def launched_rank(environ=os.environ) -> int:
    """This worker's rank (0 outside torchrun): known before the process group forms."""
    return int(environ.get("RANK", "0")) if launched_by_torchrun(environ) else 0


def exit_when_orphaned(interval_s: float = 0.5) -> None:
    """In a worker: exit at once (status 1, as if killed) when torchrun is gone. torchrun
    starts workers in sessions of their own, so a launcher or torchrun killed with
    SIGKILL (the window's Kill) would otherwise leave them training with no one to stop
    them. A daemon thread watches the parent process."""
    parent = os.getppid()

    def watch():
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _die_with_parent() -> None:  # pragma: no cover (runs in the child between fork and exec)
    """Linux: the child gets SIGKILL when the launcher dies (prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def world_size_problems(preset, size: int) -> list[str]:
    """What keeps `preset` from running in `size` processes, as messages naming the
    field and the fix; empty when it can. What a step shares and any rule of its own
    come from the algorithm's declarations (engine/algorithms/config_base.py)."""
    if size <= 1:
        return []
    problems = []
    cfg, algo = preset.training, preset.algorithm
    units, what = algo.step_shares(cfg)  # the algorithm says what its step is made of
    if units < size:
        problems.append(f"--nproc-per-node {size}: a step has {units} {what}, so at most {units} processes can "
                        f"share it; use at most {units} or a larger training.batch_size")
    problems += algo.world_size_problems(cfg, size)  # its own rules (PPO's mini-batches)
    if cfg.fsdp and preset.model.load_in_4bit:
        problems.append("training.fsdp: FSDP2 does not shard 4-bit weights; set model.load_in_4bit: false "
                        "(sharding already divides the base model's memory by the process count)")
    if cfg.fsdp and preset.model.dtype == "float16":
        problems.append("training.fsdp: fp16 needs loss scaling, which the engine does not do on shards; "
                        "use model.dtype: bfloat16 (or auto)")
    if preset.data.environment:
        problems.append(f"data.environment: multi-turn episodes run in one process for now; drop --nproc-per-node "
                        f"{size} (or set data.environment: null)")
    if cfg.micro_batch_size == "auto":
        problems.append(f"training.micro_batch_size: `auto` works in one process only (an out-of-memory on one "
                        f"process would change the step on that one alone); give a number for --nproc-per-node {size}")
    return problems


def torchrun_command(engine_args: list[str], nproc: int) -> list[str]:
    """torchrun on this machine, starting `python -m engine ENGINE_ARGS` `nproc` times.
    --standalone: a local rendezvous on a free port (several runs can share a machine)."""
    return [sys.executable, "-m", "engine.distributed.torchrun", "--standalone", f"--nproc-per-node={nproc}",
            f"--shutdown-timeout={SHUTDOWN_TIMEOUT_S}", "-m", "engine", *engine_args]


def _final_event_written(run_dir: Path, since: int) -> bool:
    events = rundir.read_events(run_dir)[since:]
    return any(e.get("type") in ("run_finished", "run_failed") for e in events)


def alive(pid: int) -> bool:
    """Whether process `pid` on this machine runs (a zombie, dead but not yet reaped by
    torchrun, counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def read_ranks(run_dir: Path) -> list[dict]:
    try:
        return json.loads((run_dir / RANKS_FILE).read_text())
    except (OSError, ValueError):
        return []


def run_launcher(run_dir: Path, engine_args: list[str], nproc: int, env: dict | None = None) -> int:
    """Start torchrun and wait for it. A stop (SIGTERM, SIGINT, a `stop` line on stdin)
    is passed to torchrun as SIGTERM, which passes it to every worker. Returns 0 when the
    run wrote run_finished, 1 otherwise; writes run_failed when no process could."""
    since = len(rundir.read_events(run_dir)) if (run_dir / rundir.EVENTS_FILE).exists() else 0
    # Its own session: a Ctrl-C in the terminal reaches this launcher only, which passes
    # one SIGTERM on (two signals would cut torchrun's wait for the workers short).
    # The launcher killed (the window's Kill): torchrun dies with it, and its workers, seeing
    # their parent gone, too (exit_when_orphaned).
    proc = subprocess.Popen(torchrun_command(engine_args, nproc), env=env, stdin=subprocess.DEVNULL,
                            start_new_session=True,
                            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    stopping = threading.Event()

    def stop(signum=None, _frame=None):
        if stopping.is_set():
            if signum == signal.SIGINT:  # a second Ctrl-C: abort every worker at once
                for entry in read_ranks(run_dir):
                    try:
                        os.kill(entry["pid"], signal.SIGINT)
                    except (ProcessLookupError, KeyError):
                        pass
            return
        stopping.set()
        sys.stderr.write("\nstopping every process after the current step (Ctrl-C again to abort)…\n")
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}

    def read_stdin():
        try:
            for line in sys.stdin:
                if line.strip().lower() == "stop":
                    stop()
                    return
        except (OSError, ValueError):
            return

    if sys.stdin is not None and not sys.stdin.closed:
        threading.Thread(target=read_stdin, name="stdin-stop", daemon=True).start()
    first_dead = None
    try:
        while proc.poll() is None:
            if first_dead is None:
                for entry in read_ranks(run_dir):
                    if entry.get("host") == socket.gethostname() and not alive(entry["pid"]):
                        first_dead = entry
                        break
            time.sleep(0.2)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if _final_event_written(run_dir, since):
        final = [e for e in rundir.read_events(run_dir)[since:] if e.get("type") in ("run_finished", "run_failed")]
        return 0 if final[-1]["type"] == "run_finished" else 1
    # No process wrote the final event: rank 0 died (or never started).
    if first_dead is not None:
        message = (f"rank {first_dead['rank']} (pid {first_dead['pid']}) died without a word (killed, or out of "
                   "host memory); the other processes were stopped. Resume from the last checkpoint with "
                   f"--nproc-per-node {nproc}")
        fields = {"rank": first_dead["rank"]}
    else:
        message = (f"torchrun ended with exit status {proc.returncode} before the run wrote its final event; "
                   f"see {run_dir / rundir.LOG_FILE} and the output above")
        fields = {}
    events = rundir.EventWriter(run_dir)
    try:
        events.emit("run_failed", message=message, error_type="ProcessDied", **fields)
    finally:
        events.close()
    print(f"error: {message}", file=sys.stderr)
    return 1


def launch_from_cli(args, preset, run_dir: Path, engine_args: list[str]) -> int:
    """`--nproc-per-node N`: start the run's N processes under torchrun and wait for them
    (engine/distributed/launch.py). Exit 2 when the preset cannot run in N processes."""
    problems = world_size_problems(preset, args.nproc_per_node)
    if problems:
        print("error: " + "\n  ".join(problems), file=sys.stderr)
        return 2
    env = dict(os.environ)
    if args.gpus:
        env["CUDA_VISIBLE_DEVICES"] = args.gpus
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # one line naming the folder, as a run in one process says it
        from engine.run.failures import storage_error, storage_message

        print(f"error: {storage_message(storage_error(exc) or exc, run_dir, ' or choose another --run-dir')}",
              file=sys.stderr)
        return 2
    engine_args = engine_args + [a for s in args.set for a in ("--set", s)] + (["--quiet"] if args.quiet else [])
    return run_launcher(run_dir, engine_args, args.nproc_per_node, env)


def checkpoint_world_size_problem(checkpoint: Path, size: int) -> str | None:
    """Why a checkpoint cannot be resumed by `size` processes (it was written by another
    number), or None. A run resumes in as many processes as it was trained in."""
    try:
        saved = json.loads((checkpoint / rundir.CHECKPOINT_STATE).read_text()).get("world_size", 1)
    except (OSError, ValueError):
        return None
    if saved == size:
        return None
    how = f"--nproc-per-node {saved}" if saved > 1 else "no --nproc-per-node"
    return (f"{checkpoint.name} was written by a run in {saved} process{'es' if saved > 1 else ''}; "
            f"this resume would have {size}. Resume it with {how}: the processes' sampling streams and "
            "shares of each batch continue only in the same number")
