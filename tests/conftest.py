import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


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


@pytest.fixture
def engine_env():
    """Environment for engine subprocesses: the repo importable, hub offline."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def python():
    return sys.executable


@pytest.fixture
def nan_grpo_loss(monkeypatch):
    """GRPO's loss made NaN (its info and token values kept), for the non-finite paths."""
    from engine.algorithms import grpo

    real = grpo.grpo_loss

    def nan_loss(*args, **kwargs):
        loss, info, tok = real(*args, **kwargs)
        return loss * float("nan"), info, tok

    monkeypatch.setattr(grpo, "grpo_loss", nan_loss)


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
