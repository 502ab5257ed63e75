import logging
import os
import sys
import time
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_sessionstart(session):
    """Take the libraries' heap out of the garbage collector's reach, as the window does
    (workbench/app.py's freeze_startup_heap): the window fixtures collect garbage in the
    main thread before every window (tests/window_fixtures.py), and with torch,
    transformers, peft, Qt and pyqtgraph loaded a full collection walked ~480,000 objects,
    0.3 s each time. Imported here once, collected, frozen; what tests make later is
    collected as before. Not in pytest-xdist's controller, which runs no tests."""
    if getattr(session.config.option, "numprocesses", None) and not hasattr(session.config, "workerinput"):
        return
    import gc

    import numpy  # noqa: F401
    import peft  # noqa: F401
    import pyqtgraph  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from PySide6 import QtWidgets  # noqa: F401

    gc.collect()
    gc.freeze()


def repo_tool(name: str):
    """A script of tools/ (not a package) as a module, e.g. repo_tool("import_floors")."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def small_preset_dict(**training) -> dict:
    """A GRPO preset on the built-in model small enough for a unit test (seconds a step)."""
    return {
        "name": "test",
        "model": {"name_or_path": "builtin:tiny", "lora": {"r": 4, "alpha": 8.0}},
        "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 14,
                      "epsilon_high": 0.28},
        "data": {"task": "sort", "num_train": 200, "num_eval": 8},
        "rewards": [{"name": "exact_match"}, {"name": "sort_position", "weight": 0.5}],
        "training": {"max_steps": 3, "batch_size": 8, "learning_rate": 0.01, "eval_steps": 0,
                     "save_steps": 0, "record_rollouts": 2, "log_completions": 4, **training},
    }


def write_validate_preset(folder: Path, name: str = "inputs", **sections) -> Path:
    """preset.yaml in `folder`: a small GRPO preset on the built-in model for `rl-engine
    validate` (no run); `sections` replace its own."""
    import yaml

    preset = {"name": name, "model": {"name_or_path": "builtin:tiny"},
              "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 14},
              "data": {"task": "sort", "num_train": 50, "num_eval": 4},
              "rewards": [{"name": "exact_match"}], **sections}
    path = folder / "preset.yaml"
    path.write_text(yaml.safe_dump(preset))
    return path


@pytest.fixture
def engine_handlers():
    """The CLI's SIGINT/SIGTERM handlers, as during a run's training phase."""
    from engine.commands.train import install_stop_handlers, restore_handlers
    from engine.foundation.stopping import TRAINING, StopFlag

    stop = StopFlag(phase=TRAINING)
    previous = install_stop_handlers(stop)
    yield stop
    restore_handlers(previous)


@pytest.fixture
def engine_env():
    """Environment for engine subprocesses: the repo importable, hub offline (engine_runs.py)."""
    from engine_runs import subprocess_env

    return subprocess_env()


# The one trained run the tests share (the `trained_run` fixture): grpo-sort on the
# built-in model, 4 steps, a checkpoint at steps 2 and 4, TensorBoard files written live.
TRAINED_RUN_SETS = ["training.max_steps=4", "training.save_steps=2", "training.eval_steps=0", "data.num_eval=8",
                    "training.batch_size=16", "algorithm.num_generations=4", "training.report_to=tensorboard"]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Path:
    """A short run of presets/grpo-sort.yaml (TRAINED_RUN_SETS), trained once a session
    (under pytest-xdist, once a worker), in this process: the tests that use it check its
    files, not the process. Shared: read it only; a test that writes into a run (or must
    find it in its own runs folder) takes `trained_run_copy`."""
    from engine.run import rundir
    from engine_runs import cli

    folder = tmp_path_factory.mktemp("trained")
    run = folder / "sort-run"
    sets = [a for item in TRAINED_RUN_SETS for a in ("--set", item)]
    result = cli("run", ROOT / "presets" / "grpo-sort.yaml", "--run-dir", run, "--quiet", *sets, cwd=folder)
    assert result.code == 0, result.err
    assert [p.name for p in rundir.complete_checkpoints(run)] == ["step_000002", "step_000004"]
    return run


@pytest.fixture
def trained_run_copy(trained_run, tmp_path) -> Path:
    """This test's own copy of `trained_run`, at tmp_path/runs/<its name> (the window
    fixtures' runs folder)."""
    import shutil

    copy = tmp_path / "runs" / trained_run.name
    shutil.copytree(trained_run, copy)
    return copy


@pytest.fixture
def nan_grpo_loss(monkeypatch):
    """GRPO's loss made NaN (its info and token values kept), for the non-finite paths."""
    from engine.algorithms.grpo import trainer as grpo

    real = grpo.grpo_loss

    def nan_loss(*args, **kwargs):
        loss, info, tok = real(*args, **kwargs)
        return loss * float("nan"), info, tok

    monkeypatch.setattr(grpo, "grpo_loss", nan_loss)


@pytest.fixture(autouse=True)
def _engine_log_file_closed():
    """engine.cli.main called in this process (a test's own call; engine_runs.cli puts
    it back itself) gives the root logger the run's log file and level, and sends
    warnings to logging (setup_logging): undone after the test, so no later test logs
    into that file."""
    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    captured = logging._warnings_showwarning is not None  # noqa: SLF001 (logging keeps no public flag)
    yield
    for handler in [h for h in root.handlers if h not in before and isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    logging.captureWarnings(captured)


@pytest.fixture(autouse=True)
def _background_jobs_delivered():
    """A window's pre-launch check may still be in flight when its test ends; while it is,
    garbage collection is off (workbench.setup.background). Let it land before the next
    test, so no test starts with collection off because of the one before it."""
    yield
    background = sys.modules.get("workbench.setup.background")
    if background is None:
        return
    from PySide6.QtCore import QCoreApplication

    deadline = time.monotonic() + 30
    while background.pending_jobs() and time.monotonic() < deadline:
        QCoreApplication.processEvents()
        time.sleep(0.005)
    assert background.pending_jobs() == 0, "a background job still runs 30 s after its test"


# --- Deprecations raised through our code fail the test --------------------------------
# pytest's `error::FutureWarning:module` matches only the module that *issued* a warning,
# which is transformers or torch, never us. So this hook sees every warning that passes
# the filters (pyproject.toml lets FutureWarning and DeprecationWarning through) while its
# stack is still live, and raises it when our code called into a library that warns of a
# removal: the next release would break that call. Other warnings are recorded as before.
OUR_CODE = [ROOT / "engine", ROOT / "workbench"]
WATCHED_LIBRARIES = ("torch", "transformers", "peft", "datasets")
_show_warning = warnings._showwarnmsg


def _ours(filename: str) -> bool:
    return any(Path(filename).is_relative_to(root) for root in OUR_CODE)


def _watched_library(frame) -> bool:
    """A frame of torch, transformers, peft or datasets, or a `@deprecated` wrapper (PEP
    702: typing_extensions, warnings) around one of their functions or classes."""
    module = frame.f_globals.get("__name__", "")
    if module in ("typing_extensions", "warnings"):
        module = getattr(frame.f_locals.get("arg"), "__module__", None) or ""
    return module.split(".")[0] in WATCHED_LIBRARIES


def deprecation_caller(frame) -> str | None:
    """'file:line' of our frame that called into a watched library which then warned,
    walking out from `frame` (the one that called warnings.warn); None if there is none.
    An engine frame that warned itself counts too: torch's C++ deprecations have no
    library frame (the workbench's come from PySide6's C++, which this does not watch)."""
    library_below, innermost = False, True
    while frame is not None:
        filename = frame.f_code.co_filename
        if _ours(filename):
            from_compiled = innermost and Path(filename).is_relative_to(ROOT / "engine")
            return f"{filename}:{frame.f_lineno}" if library_below or from_compiled else None
        library_below = library_below or _watched_library(frame)
        innermost = False
        frame = frame.f_back
    return None


def _raise_our_deprecations(msg):
    if issubclass(msg.category, (FutureWarning, DeprecationWarning)):
        caller = deprecation_caller(sys._getframe(1))  # frame 1: where warnings.warn was called
        if caller is not None:
            raise msg.category(f"{msg.message} (raised through our call at {caller})")
    _show_warning(msg)


warnings._showwarnmsg = _raise_our_deprecations
