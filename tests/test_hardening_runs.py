"""Hardening round three, a user's own functions and the messages about them:

- a loss or estimator file that returns NaN/inf: the skipped step's warning, its alarm and
  the abort message name the function that first produced the non-finite value (not the
  learning rate or the rewards);
- an estimator that edits `rewards` in place cannot corrupt the logged reward (the engine
  hands user code copies);
- a loss that returns a numpy array is told to return a torch tensor, naming the type;
- no message says ".." (a failure message that ends with a period, then ". Start it again").

In-process runs of the built-in tiny model (tests/engine_runs.py's `cli`); the kill
before the first checkpoint, a process subject, is tests/test_hardening_runs_restart.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from conftest import small_preset_dict
from engine.rl.catalog import ESTIMATORS, POLICY_LOSSES
from engine.rl.user_code import UserFunctionError, resolve
from engine.run import rundir
from engine.run.failures import no_checkpoint_message
from engine_runs import cli

USER_PY = '''\
import math

import numpy as np
import torch


def nan_loss(logprobs, old_logprobs, advantages, mask):
    return -advantages * logprobs * math.nan


def numpy_loss(logprobs, old_logprobs, advantages, mask):
    return np.zeros(tuple(logprobs.shape))


def numpy_triple(logprobs, old_logprobs, advantages, mask):
    return np.zeros(tuple(logprobs.shape)), torch.ones_like(logprobs), {}


def inf_advantages(rewards, mask):
    return rewards / 0.0


def zeroes_rewards(rewards, mask, *, num_generations):
    grouped = rewards.view(-1, num_generations)
    advantages = (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)
    rewards.zero_()
    mask[:] = 0
    return advantages
'''


@pytest.fixture
def user_file(tmp_path) -> Path:
    path = tmp_path / "my_functions.py"
    path.write_text(USER_PY)
    return path


def write_preset(folder: Path, training: dict | None = None, **algorithm) -> Path:
    data = small_preset_dict(**(training or {}))
    data["algorithm"].update(algorithm)
    path = folder / "preset.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# ------------------------------------------------------------- a numpy loss


def test_a_loss_returning_a_numpy_array_is_told_to_return_a_torch_tensor(user_file):
    logprobs = torch.zeros(2, 3, requires_grad=True)
    args = (logprobs, torch.zeros(2, 3), torch.ones(2, 1), torch.ones(2, 3))
    for name in ("numpy_loss", "numpy_triple"):
        entry = resolve(POLICY_LOSSES, f"my_functions.py:{name}", user_file.parent)
        with pytest.raises(UserFunctionError) as caught:
            entry.call(*args, log_ratio=torch.zeros(2, 3))
        message = str(caught.value)
        assert "numpy.ndarray" in message and "torch tensor" in message, message
        assert "expected shape" not in message  # its shape is right: the type is what is wrong
        assert message.startswith(f"algorithm.loss_type: my_functions.py:{name} returned ")


# ------------------------------------------------------- in-place edits by user code


def test_an_estimator_gets_copies_of_the_rewards_and_mask(user_file):
    entry = resolve(ESTIMATORS, "my_functions.py:zeroes_rewards", user_file.parent)
    rewards, mask = torch.tensor([1.0, 0.0, 0.5, 0.5]), torch.ones(4, 3)
    advantages = entry.call(rewards, mask, num_generations=2)
    assert rewards.tolist() == [1.0, 0.0, 0.5, 0.5] and mask.eq(1).all()
    assert advantages.tolist() == [0.5, -0.5, 0.0, 0.0]


def test_an_estimator_that_zeroes_the_rewards_leaves_the_logged_reward_true(tmp_path, user_file):
    preset = write_preset(tmp_path, {"max_steps": 2, "record_rollouts": 8, "log_completions": 8},
                          advantage_estimator="my_functions.py:zeroes_rewards")
    run = tmp_path / "run"
    result = cli("run", preset, "--run-dir", run, "--quiet")
    assert result.code == 0, result.err
    metrics = [e for e in rundir.read_events(run) if e["type"] == "metrics"]
    assert len(metrics) == 2
    for event in metrics:
        records = rundir.read_trajectories(run, event["step"])
        assert len(records) == 8  # the whole batch
        true_mean = sum(r["reward"] for r in records) / len(records)
        assert event["reward"] == pytest.approx(true_mean, abs=1e-3)
    assert any(e["reward"] > 0 for e in metrics)  # the rewards checked are not all 0 anyway


# --------------------------------------------------- non-finite output of user code


def test_a_nan_loss_file_is_named_in_the_skip_warning_and_alarm(tmp_path, user_file):
    preset = write_preset(tmp_path, {"max_steps": 2, "max_nonfinite_steps": 5},
                          loss_type="my_functions.py:nan_loss")
    run = tmp_path / "run"
    result = cli("run", preset, "--run-dir", run, "--quiet")
    assert result.code == 0, result.err  # skipped, as any non-finite step: within max_nonfinite_steps
    alarms = [e for e in rundir.read_events(run) if e["type"] == "alarm" and e["kind"] == "nonfinite_steps"]
    assert [a["step"] for a in alarms] == [1, 2]
    value = f"{user_file}:nan_loss"
    for alarm in alarms:
        assert f"algorithm.loss_type: {value} returned a per-token loss with" in alarm["saw"], alarm["saw"]
        assert "nan" in alarm["saw"]
        assert [t["field"] for t in alarm["try"]] == ["algorithm.loss_type"]
        assert "learning_rate" not in alarm["saw"]
    assert f"algorithm.loss_type: {value} returned a per-token loss" in result.err  # the CLI's alarm line
    log = (run / rundir.LOG_FILE).read_text()
    assert f"step 1 skipped: algorithm.loss_type: {value} returned a per-token loss" in log


def _failed_run(tmp_path, training: dict, **algorithm) -> tuple:
    """A run of the preset that fails (exit 1): (the CLI's result, its run_failed event)."""
    preset = write_preset(tmp_path, training, **algorithm)
    run = tmp_path / "run"
    result = cli("run", preset, "--run-dir", run, "--quiet")
    assert result.code == 1, result.err
    (failed,) = [e for e in rundir.read_events(run) if e["type"] == "run_failed"]
    return result, failed


def test_a_nan_loss_file_is_named_in_the_abort_message(tmp_path, user_file):
    result, failed = _failed_run(tmp_path, {"max_steps": 3, "max_nonfinite_steps": 1},
                                 loss_type="my_functions.py:nan_loss")
    message = failed["message"]
    assert f"algorithm.loss_type: {user_file}:nan_loss returned a per-token loss with" in message, message
    assert "at step 1" in message
    assert "learning_rate" not in message and "rewards" not in message
    assert (failed["file"], failed["line"]) == (str(user_file), line_of(user_file, "def nan_loss"))
    assert "Traceback" not in result.err


def test_an_estimator_returning_inf_is_named_not_the_learning_rate(tmp_path, user_file):
    _, failed = _failed_run(tmp_path, {"max_steps": 2, "max_nonfinite_steps": 0},
                            advantage_estimator="my_functions.py:inf_advantages")
    assert f"algorithm.advantage_estimator: {user_file}:inf_advantages returned advantages with" in failed["message"]
    assert "learning_rate" not in failed["message"]


def test_a_builtin_nonfinite_step_still_gives_the_general_advice():
    from engine.alarms.config import AlarmsConfig
    from engine.alarms.watcher import AlarmWatcher

    watcher = AlarmWatcher(AlarmsConfig())
    (event,) = watcher.observe_metrics(3, {"skipped_steps": 1})
    assert "training.learning_rate" in [t["field"] for t in event["try"]]


# ------------------------------------------------------------------- messages


def test_no_message_ends_a_sentence_twice(tmp_path):
    run = tmp_path / "failed"
    run.mkdir()
    (run / rundir.PRESET_FILE).write_text("name: x\n")
    writer = rundir.EventWriter(run)
    writer.emit("run_started", step=0)
    writer.emit("run_failed", message="the model folder has no config.json; give a model folder.")
    writer.close()
    message = no_checkpoint_message(run)
    assert "give a model folder." in message
    assert ".." not in message.replace(str(tmp_path), ""), message
