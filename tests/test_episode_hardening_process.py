"""Hardening round three, N6: a tool that never returns, in a real `rl-engine run` process
(the process is the subject: its threads, its step times, its exit) on the built-in tools
model, whose arithmetic prompts it answers with a `calculate` call in about a third of its
episodes from the first step.

* A tool that loops in Python forever is stopped at data.tool_timeout: the model reads
  that it was stopped, and the steps do not slow down (they used to: each hung call left a
  thread spinning, 20.6 -> 29.9 -> 37.2 s a step).
* A tool blocked outside Python cannot be stopped: the first such call is an alarm naming
  the tool (its line), and past a few of them alive at once the run fails naming the tool
  and data.tool_timeout, rather than piling up threads.
"""

from __future__ import annotations

import json

import yaml

from engine.run import rundir
from engine_runs import engine

TOOL = '''
import threading
from pathlib import Path

CALLS = {"n": 0}
THREADS = Path(__file__).with_name("threads.txt")  # the process's threads, as each episode starts


class Busy:
    def reset(self, **row):
        with open(THREADS, "a") as f:
            f.write(f"{threading.active_count()}\\n")

    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression with + - * / and parentheses.

        Args:
            expression: The arithmetic to evaluate, e.g. "(3 + 4) * 4".

        Returns:
            The value: an integer as its digits, a division's result to 6 decimal places.
        """
        CALLS["n"] += 1
        if HOW == "spin":
            while True:
                pass
        if HOW == "block" or CALLS["n"] == 1:
            threading.Event().wait()  # blocked in C: nothing can stop it
        return "0"
'''


def _preset(folder, how: str, max_steps: int) -> list[str]:
    (folder / "busy_env.py").write_text(f"HOW = {how!r}\n" + TOOL)
    preset = {"name": f"busy-{how}", "model": {"name_or_path": "builtin:tiny-tools"},
              "algorithm": {"name": "grpo", "num_generations": 8, "max_completion_length": 160, "beta": 0.0,
                            "loss_type": "dapo"},
              "data": {"task": "arithmetic", "num_train": 64, "num_eval": 0, "environment": "busy_env.py:Busy",
                       "max_turns": 2, "max_tool_calls": 1, "tool_timeout": 0.1},
              "rewards": [{"name": "exact_match"}],
              "training": {"max_steps": max_steps, "batch_size": 32, "learning_rate": 0.001, "eval_steps": 0,
                           "save_steps": 0, "record_rollouts": 32, "log_completions": 32}}
    (folder / "preset.yaml").write_text(yaml.safe_dump(preset))
    return ["run", folder / "preset.yaml", "--run-dir", folder / "run", "--quiet"]


def _calls(run_dir, step: int) -> list[dict]:
    return [c for r in rundir.read_trajectories(run_dir, step) for c in r["episode"]["tool_calls"]]


def test_a_tool_looping_in_python_is_stopped_and_the_steps_stay_fast(tmp_path):
    done = engine(*_preset(tmp_path, "spin", max_steps=3), cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    events = rundir.read_events(tmp_path / "run")
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done"
    calls = _calls(tmp_path / "run", 1)
    assert calls, "the tools model calls `calculate` in about a third of its episodes at step 0"
    stopped = str({"error": "tool calculate did not return within 0.1 s; it was stopped"})
    assert stopped in {c["result"] for c in calls} and all(c["error"] for c in calls)  # (or a malformed call)
    # no thread is left spinning: as many threads when the last episode starts as when the first did
    # (each hung call used to leave one, and every later step shared the interpreter with them all)
    counts = [int(n) for n in (tmp_path / "threads.txt").read_text().split()]
    assert len(counts) == 3 * 32 and max(counts) <= counts[0] + 1, counts[::32]
    # so the steps stay as fast as the first (loosely: the machine running the tests may be loaded)
    rollout = [e["timing/rollout"] for e in events if e["type"] == "metrics"]
    assert max(rollout[1:]) < 3 * rollout[0] + 10, rollout
    assert not [e for e in events if e["type"] == "alarm" and e.get("kind") == "tool_not_stopped"]


def test_a_blocked_tool_is_an_alarm_naming_it(tmp_path):
    done = engine(*_preset(tmp_path, "first", max_steps=2), cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    events = rundir.read_events(tmp_path / "run")
    (alarm,) = [e for e in events if e["type"] == "alarm" and e.get("kind") == "tool_not_stopped"]
    line = next(i for i, text in enumerate((tmp_path / "busy_env.py").read_text().splitlines(), 1)
                if "threading.Event().wait()" in text)
    assert alarm["step"] == 1 and alarm["tool"] == "calculate"
    assert "the tool Busy.calculate ran past data.tool_timeout (0.1 s) and could not be stopped (at " in alarm["saw"]
    assert f"busy_env.py, line {line})" in alarm["saw"]
    assert "warning: alarm at step 1: A tool could not be stopped" in done.stderr
    assert events[-1]["type"] == "run_finished"


def test_blocked_tools_piling_up_end_the_run_naming_the_tool(tmp_path):
    done = engine(*_preset(tmp_path, "block", max_steps=3), cwd=tmp_path, timeout=240)
    assert done.returncode == 1, done.stderr[-3000:]
    (failed,) = [e for e in rundir.read_events(tmp_path / "run") if e["type"] == "run_failed"]
    assert failed["message"].startswith("data.environment: 5 calls of the tool Busy.calculate are still running "
                                        "past data.tool_timeout (0.1 s) and could not be stopped (at ")
    assert "raise data.tool_timeout" in failed["message"]
    assert failed["file"] == str((tmp_path / "busy_env.py").resolve())  # where it was stuck, for the window
    assert "Traceback" not in done.stderr and failed["message"] in done.stderr
    json.dumps(failed)  # one plain event
