"""Helpers for the workbench tests: synthetic run directories (written with the engine's
own EventWriter, so they follow the contract), the small preset the GUI tests launch, and
typing into a field as a user does."""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path

import yaml

from engine.run import rundir
from engine.preset.schema import preset_from_dict
from engine.foundation.io import preset_to_dict



def type_text(qtbot, line, text: str, finish: bool = True) -> None:
    """Text typed into a line edit as a user types it: a click in the field, Ctrl+A and
    Backspace to clear what is there, the new text key by key, then Tab to the next
    field (focus leaves the field: editingFinished fires; Return where the platform
    gave the field no focus). Every key goes through the widget's own key handling, so
    whatever the form does while the user types (and after) is what the test sees."""
    from PySide6.QtCore import Qt

    window = line.window()
    if not window.isVisible():
        window.show()
    qtbot.waitExposed(window)
    window.activateWindow()
    qtbot.mouseClick(line, Qt.LeftButton)
    if line.text():
        qtbot.keyClick(line, Qt.Key_A, Qt.ControlModifier)
        qtbot.keyClick(line, Qt.Key_Backspace)
        assert line.text() == "", f"Ctrl+A, Backspace left {line.text()!r}"
    qtbot.keyClicks(line, text)
    if not finish:
        return
    key = Qt.Key_Tab if line.hasFocus() else Qt.Key_Return
    if line.isModified():
        with qtbot.waitSignal(line.editingFinished, timeout=2000):
            qtbot.keyClick(line, key)
    else:
        qtbot.keyClick(line, key)


def small_preset(**training) -> dict:
    """The engine tests' small GRPO preset on the built-in model (tests/conftest.py)."""
    from conftest import small_preset_dict

    return copy.deepcopy(small_preset_dict(**training))


def write_run(folder: Path, name: str, steps: int = 20, learning_rate: float = 0.01, status: str = "done",
              algorithm: str = "grpo", samples_per_step: int = 4, start: float | None = None,
              extra_metrics: dict | None = None, step_seconds: float = 1.0) -> Path:
    """A complete-looking run directory: run_started with the resolved preset, metrics,
    samples and eval events, and a final lifecycle event (`status` done, stopped or
    failed; "running" writes none)."""
    run_dir = Path(folder) / name
    run_dir.mkdir(parents=True)
    preset = preset_to_dict(preset_from_dict({"name": name, "training": {"learning_rate": learning_rate,
                                                                           "max_steps": steps}}))
    (run_dir / rundir.PRESET_FILE).write_text(yaml.safe_dump(preset, sort_keys=False))
    (run_dir / rundir.LOG_FILE).write_text("2026-01-01 INFO engine: synthetic run\n")
    events = rundir.EventWriter(run_dir)
    start = time.time() - steps * step_seconds - 5 if start is None else start
    emit = events.emit  # stamps the current time; the file is re-timed below
    emit("run_started", step=0, preset=preset, algorithm=algorithm, max_steps=steps,
         model={"name_or_path": "builtin:tiny", "architecture": "GPT2LMHeadModel", "parameters": 1,
                "trainable_parameters": 1, "lora_targets": ["c_attn"], "context_length": 128},
         device="cpu", dtype="float32", num_train=100, num_eval=10)
    emit("eval", step=0, accuracy=0.1, reward=0.2, num_examples=10, eval_time=0.1, samples=[])
    for step in range(1, steps + 1):
        reward = 1 - math.exp(-step * learning_rate * 10)
        metrics = {"reward": reward, "reward_std": 0.1, "rewards/exact_match/mean": reward,
                   "rewards/exact_match/std": 0.1, "kl": None, "entropy": 2.0 - reward, "loss": 0.01 * step,
                   "learning_rate": learning_rate, "grad_norm": 0.5, "step_time": step_seconds,
                   "completions/mean_length": 10.0, "num_tokens": 100}
        metrics.update(extra_metrics or {})
        emit("metrics", step=step, **metrics)
        emit("samples", step=step, samples=[
            {"index": i, "group": i // 2, "prompt": f"sort {step} {i} =", "completion": f" {i} {step}\nend",
             "reward": reward + i, "rewards": {"exact_match": float(i % 2)}, "advantage": i - 1.5}
            for i in range(samples_per_step)])
    if status in ("done", "stopped"):
        emit("eval", step=steps, accuracy=0.5, reward=0.6, num_examples=10, eval_time=0.1, samples=[])
        emit("checkpoint", step=steps, path=f"checkpoints/step_{steps:06d}")
        emit("run_finished", step=steps, status=status, reason="test")
    elif status == "failed":
        emit("run_failed", message="model.name_or_path: synthetic failure", error_type="ValueError")
    events.close()
    # Re-time the events: one step every step_seconds from `start`.
    records = rundir.read_events(run_dir)
    with open(run_dir / rundir.EVENTS_FILE, "w", encoding="utf-8") as f:
        for record in records:
            record["time"] = start + record.get("step", 0) * step_seconds
            f.write(json.dumps(record) + "\n")
    return run_dir
