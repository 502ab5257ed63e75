"""A stand-in for `python -m engine run | resume`, for the window's tests whose subject is
the window and not training (attach, kill, a run left running, Resume's button): it
writes a run folder as the engine does, at a pace, from a recorded run of the tests' small
preset (tests/data/stand_in_events.jsonl), and starts in a fraction of a second where the
real engine spends most of a minute importing torch and loading a model on a busy machine.

    python tests/stand_in_engine.py run PRESET --run-dir DIR [--set K=V] [--quiet] [--nproc-per-node N]
    python tests/stand_in_engine.py resume DIR [--set K=V] [--quiet] [--nproc-per-node N]

The window launches it through `stand_in_command` (tests/window_fixtures.py's `stand_in`
fixture puts it in front of EngineProcess.start). What it keeps of the engine's contract
(docs/run-directory.md, engine/cli.py, engine/foundation/stopping.py):

- preset.yaml, engine.log and events.jsonl (written with the engine's own EventWriter):
  run_started (the recording's, with this process's pid, the preset, max_steps and the
  world size), the step-0 eval, then a step every STAND_IN_STEP_S seconds (0.2 unless
  set): metrics and samples (the recording's, renumbered), a checkpoint every save_steps
  (step_N.tmp renamed, state.json last) and when the run ends, the final eval, run_finished;
- `resume DIR`: from the newest complete checkpoint, run_resumed, then the steps after it;
  no complete checkpoint: from step 0 again (run_resumed with `restarted`, checkpoint null,
  the step-0 eval), with a line saying so, as the engine; no preset.yaml either: one line
  and exit 2;
- a `stop` line on stdin, SIGTERM or SIGINT: during set-up (the STAND_IN_SETUP_S seconds
  before run_started) the run ends at once, stopped during set-up; while training the step
  finishes, a checkpoint is saved, run_finished (stopped, with the reason), exit 0; a second
  SIGINT aborts: run_failed (aborted), exit 1;
- a progress bar with carriage returns on stderr (model loading, the steps), as the engine
  prints one even with --quiet;
- exit status: 0 after run_finished, 1 after run_failed, 2 for input it cannot use (a
  preset that is not YAML, a run folder that already holds a run).

No torch, no model, no rewards: nothing a test could learn about training from it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.run import rundir  # noqa: E402 (torch-free: the engine's own event writer)

RECORDING = Path(__file__).resolve().parent / "data" / "stand_in_events.jsonl"
THIS = str(Path(__file__).resolve())


def stand_in_command(command: list[str]) -> list[str]:
    """An engine command line the window built (`PYTHON -m engine ARGS`) as this stand-in's
    (`PYTHON tests/stand_in_engine.py ARGS`); any other command as it is.

    >>> stand_in_command(["py", "-m", "engine", "run", "p.yaml", "--run-dir", "r"])[2:]
    ['run', 'p.yaml', '--run-dir', 'r']
    """
    if command[1:3] == ["-m", "engine"]:
        return [command[0], THIS, *command[3:]]
    return list(command)


class Stop:
    """The engine's stop flag, in small: the first stop's reason; SIGINTs counted."""

    def __init__(self):
        self.reason = ""
        self.sigints = 0
        self.training = False

    def request(self, reason: str) -> None:
        self.reason = self.reason or reason

    def on_signal(self, signum, _frame) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGINT:
            self.sigints += 1
            if self.sigints > 1:
                raise KeyboardInterrupt  # a second Ctrl-C aborts, in set-up or mid-step
        self.request(name)

    def read_stdin(self) -> None:
        try:
            for line in sys.stdin:
                if line.strip().lower() == "stop":
                    self.request("stop requested")
                    return
        except (OSError, ValueError):
            return


class StandIn:
    def __init__(self, run_dir: Path, preset: dict, world_size: int, stop: Stop):
        self.run_dir, self.preset, self.world_size, self.stop = run_dir, preset, world_size, stop
        training = preset.setdefault("training", {})
        self.max_steps = int(training.get("max_steps", 100))
        self.save_steps = int(training.get("save_steps") or 0)
        self.pace = float(os.environ.get("STAND_IN_STEP_S", "0.2"))
        recorded = [json.loads(line) for line in RECORDING.read_text(encoding="utf-8").splitlines()]
        self.started = next(e for e in recorded if e["type"] == "run_started")
        self.evals = [e for e in recorded if e["type"] == "eval"]
        self.metrics = [e for e in recorded if e["type"] == "metrics"]
        self.samples = [e for e in recorded if e["type"] == "samples"]
        self.events: rundir.EventWriter | None = None
        self.step = 0

    def emit(self, event: dict, **fields) -> None:
        fields = {k: v for k, v in {**event, **fields}.items() if k not in ("type", "time", "step")}
        self.events.emit(event["type"], step=self.step, **fields)

    def started_fields(self) -> dict:
        fields = {k: v for k, v in self.started.items() if k not in ("type", "time", "step")}
        fields.update(preset=self.preset, max_steps=self.max_steps, pid=os.getpid(), world_size=self.world_size,
                      backend="gloo" if self.world_size > 1 else None)
        if self.world_size > 1:
            fields["processes"] = [{"rank": r, "host": socket.gethostname(), "pid": os.getpid()}
                                   for r in range(self.world_size)]
        return fields

    def save_checkpoint(self) -> str:
        folder = self.run_dir / rundir.CHECKPOINTS_DIR / f"step_{self.step:06d}"
        partial = folder.with_name(folder.name + ".tmp")
        partial.mkdir(parents=True, exist_ok=True)
        (partial / "stand-in.txt").write_text("written by tests/stand_in_engine.py: no weights\n")
        (partial / rundir.CHECKPOINT_STATE).write_text(json.dumps(
            {"step": self.step, "data_position": self.step * 2, "nonfinite_steps": 0, "time": time.time(),
             "world_size": self.world_size}))
        partial.rename(folder)
        path = f"{rundir.CHECKPOINTS_DIR}/{folder.name}"
        self.events.emit("checkpoint", step=self.step, path=path)
        return path

    def wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.02)

    def run(self, resume_from: Path | None, restart: bool = False) -> int:
        print("\rLoading weights:   0%|          | 0/52 [00:00<?, ?it/s]", end="", file=sys.stderr, flush=True)
        deadline = time.monotonic() + float(os.environ.get("STAND_IN_SETUP_S", "0.3"))
        while time.monotonic() < deadline and not self.stop.reason:  # set-up: a stop ends the run at once
            time.sleep(0.02)
        print("\rLoading weights: 100%|##########| 52/52 [00:00<00:00]", file=sys.stderr, flush=True)
        self.events = rundir.EventWriter(self.run_dir)
        if resume_from is not None:
            self.step = json.loads((resume_from / rundir.CHECKPOINT_STATE).read_text())["step"]
        if self.stop.reason:
            self.events.emit("run_finished", step=self.step, status="stopped", reason=self.stop.reason,
                             during_setup=True, checkpoint=None if resume_from is None else
                             f"{rundir.CHECKPOINTS_DIR}/{resume_from.name}",
                             message="stopped during set-up: nothing to checkpoint")
            print(f"stopped during set-up ({self.stop.reason})", file=sys.stderr)
            return 0
        self.stop.training = True
        if resume_from is None:
            if restart:
                self.events.emit("run_resumed", step=0, checkpoint=None, restarted=True, data_position=0,
                                 **self.started_fields())
            else:
                self.events.emit("run_started", step=0, **self.started_fields())
            self.emit(self.evals[0])
        else:
            self.events.emit("run_resumed", step=self.step, checkpoint=resume_from.name,
                             data_position=self.step * 2, **self.started_fields())
        first, saved = self.step, None
        while self.step < self.max_steps and not self.stop.reason:
            self.wait(self.pace)
            self.step += 1
            self.emit(self.metrics[(self.step - 1) % len(self.metrics)])
            self.emit(self.samples[(self.step - 1) % len(self.samples)])
            print(f"\rtrain: {self.step}/{self.max_steps} [{self.pace:.2f}s/step]", end="", file=sys.stderr,
                  flush=True)
            if self.save_steps and self.step % self.save_steps == 0 and self.step < self.max_steps:
                self.save_checkpoint()
                saved = self.step
        status = "done" if self.step >= self.max_steps else "stopped"
        if status == "done" and self.step > first:
            self.emit(self.evals[-1])
        if self.step > first and saved != self.step:
            self.save_checkpoint()
        newest = rundir.complete_checkpoints(self.run_dir)
        self.events.emit("run_finished", step=self.step, status=status,
                         reason="max_steps reached" if status == "done" else self.stop.reason,
                         checkpoint=str(newest[-1].relative_to(self.run_dir)) if newest else None)
        print(f"\nrun {status} at step {self.step}: {self.run_dir}", file=sys.stderr)
        return 0


def apply_sets(preset: dict, sets: list[str]) -> dict:
    for item in sets:
        key, _, value = item.partition("=")
        *parents, leaf = key.split(".")
        node = preset
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = yaml.safe_load(value)
    return preset


def main(argv: list[str]) -> int:
    if argv[:1] == ["try"]:  # the Try tab's `rl-engine try`: tests/stand_in_try.py
        from stand_in_try import main as try_main

        return try_main(argv[1:])
    stop = Stop()  # first thing, as the engine: a stop in the first moments is not lost
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop.on_signal)
    threading.Thread(target=stop.read_stdin, name="stdin-stop", daemon=True).start()
    parser = argparse.ArgumentParser(prog="stand_in_engine")
    parser.add_argument("command", choices=["run", "resume"])
    parser.add_argument("target")
    parser.add_argument("--run-dir")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--nproc-per-node", type=int, default=0)
    parser.add_argument("--gpus", default="")
    args = parser.parse_args(argv)
    resume_from, restart = None, False
    if args.command == "run":
        try:
            preset = yaml.safe_load(Path(args.target).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            print(f"error: {args.target} is invalid: {exc}", file=sys.stderr)
            return 2
        if not isinstance(preset, dict):
            print(f"error: {args.target} is invalid: not a mapping", file=sys.stderr)
            return 2
        run_dir = Path(args.run_dir or f"runs/{preset.get('name', 'run')}-{time.strftime('%Y%m%d-%H%M%S')}")
        if (run_dir / rundir.EVENTS_FILE).exists():
            print(f"error: {run_dir} already holds a run; resume it or choose another --run-dir", file=sys.stderr)
            return 2
        run_dir.mkdir(parents=True, exist_ok=True)
        apply_sets(preset, args.set)
        (run_dir / rundir.PRESET_FILE).write_text(yaml.safe_dump(preset, sort_keys=False), encoding="utf-8")
    else:
        run_dir = Path(args.target)
        checkpoints = rundir.complete_checkpoints(run_dir)
        if not checkpoints and not (run_dir / rundir.PRESET_FILE).is_file():
            print(f"error: {run_dir} has no complete checkpoint to resume from", file=sys.stderr)
            return 2
        if not checkpoints:
            print(f"{run_dir} has no complete checkpoint: starting it again from step 0 in the same folder",
                  file=sys.stderr)
        resume_from, restart = (checkpoints[-1] if checkpoints else None), not checkpoints
        preset = apply_sets(yaml.safe_load((run_dir / rundir.PRESET_FILE).read_text(encoding="utf-8")), args.set)
    (run_dir / rundir.LOG_FILE).open("a", encoding="utf-8").write(
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} INFO stand-in engine ({args.command}), pid {os.getpid()}\n")
    standin = StandIn(run_dir.resolve(), preset, max(args.nproc_per_node, 1), stop)
    try:
        return standin.run(resume_from, restart)
    except KeyboardInterrupt:
        if standin.events is None:
            standin.events = rundir.EventWriter(run_dir)
        standin.events.emit("run_failed", step=standin.step, message="aborted: a second Ctrl-C",
                            error_type="KeyboardInterrupt", aborted=True)
        print("aborted: a second Ctrl-C", file=sys.stderr)
        return 1
    finally:
        if standin.events is not None:
            standin.events.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
