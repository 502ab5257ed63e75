"""Running the engine from a test: in this process (`cli`, the default: no torch import to
pay again) or as a real process (`engine`, `start_engine`: where the process itself is
under test, its signals, stdin, exit status or environment), the environment engine
processes get, and waiting for something a process writes.

    result = cli("validate", preset)                   # in-process: exit status and printed text
    assert result.code == 2 and "rewards" in result.err
    done = engine("run", preset, "--run-dir", run)       # a real `python -m engine` process
    proc = start_engine(["run", preset, ...], env, cwd)  # one left running: signal it, stop it
    assert wait_for(lambda: (run / "events.jsonl").exists())
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEADLINE = 180.0  # generous: the machine running the tests may be loaded


def subprocess_env(**extra) -> dict:
    """Environment for engine subprocesses: the repo importable, the hub offline,
    unbuffered output; `extra` on top (values str)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1", **extra)
    return env


def rl_engine() -> list[str]:
    """The console script the README uses, from the venv running the tests."""
    script = Path(sys.executable).with_name("rl-engine")
    return [str(script)] if script.exists() else [sys.executable, "-m", "engine.cli"]


def engine(*args, env: dict | None = None, cwd: Path | str | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m engine ARGS` as a real process, to the end; output captured as text."""
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], capture_output=True, text=True,
                          env=env or subprocess_env(), cwd=cwd or ROOT, timeout=timeout)


def start_engine(args: list, env: dict | None = None, cwd: Path | str | None = None, **kw) -> subprocess.Popen:
    """`python -m engine ARGS` started and left running (stdin closed unless `stdin=` is
    given; stdout and stderr piped as text unless given)."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "engine", *map(str, args)], env=env or subprocess_env(),
                            cwd=cwd or ROOT, text=True, **kw)


def wait_for(predicate, timeout: float = DEADLINE, interval: float = 0.05) -> bool:
    """True as soon as predicate() is; False after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


@dataclass
class CliResult:
    """What an in-process `rl-engine` call gave: its exit status and printed text. The
    names of subprocess.CompletedProcess's fields too, so a check reads the same."""
    code: int
    out: str
    err: str

    @property
    def returncode(self) -> int:
        return self.code

    @property
    def stdout(self) -> str:
        return self.out

    @property
    def stderr(self) -> str:
        return self.err


@contextlib.contextmanager
def _process_state_kept(cwd):
    """What engine.cli.main changes in its process, put back afterwards: the environment
    (the hub's offline switches), the working folder, the root logger (setup_logging
    gives it the run's log file) and warnings capture, the signal handlers, stdin (the
    stop reader's thread reads it: here an empty one) and the global random states."""
    environ = dict(os.environ)
    folder = os.getcwd()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    captured = logging._warnings_showwarning is not None  # noqa: SLF001 (logging keeps no public flag)
    handlers_before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    stdin = sys.stdin
    random_state = random.getstate()
    torch = sys.modules.get("torch")
    torch_state = torch.get_rng_state() if torch is not None else None
    try:
        if cwd is not None:
            os.chdir(cwd)
        sys.stdin = io.StringIO("")
        yield
    finally:
        sys.stdin = stdin
        os.chdir(folder)
        os.environ.clear()
        os.environ.update(environ)
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.captureWarnings(captured)
        for signum, handler in handlers_before.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        random.setstate(random_state)
        if torch_state is not None:
            torch.set_rng_state(torch_state)


def cli(*args, cwd: Path | str | None = None) -> CliResult:
    """`rl-engine ARGS` in this process (engine.cli.main): its exit status (argparse's
    own exit, a SystemExit, gives its code) and what it printed on stdout and stderr.
    For every check where no signal, process boundary or real exit of a process is the
    subject; what main changes in the process is put back (_process_state_kept)."""
    from engine.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _process_state_kept(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return CliResult(code, out.getvalue(), err.getvalue())
