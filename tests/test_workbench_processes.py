"""The set-up form's launch controls, Processes and GPUs, driven key by key (pytest-qt,
offscreen): what Run's engine command becomes, and the problems that block Run.

- Processes 1 launches exactly the command of old (no new flag); Processes 2 adds
  `--nproc-per-node 2`, and GPUs `0,1` adds `--gpus 0,1`;
- a preset with fewer prompts a step than processes shows the engine's own
  world-size problem (naming `--nproc-per-node`) and Run is refused;
- a GPUs text that is not a list of GPU numbers is a problem naming the field.

No training run starts: EngineProcess.start is replaced by one that records the command,
or (Stop in two processes) by one that launches the stand-in engine (tests/stand_in_engine.py).
"""

from __future__ import annotations

import doctest
import os
import sys

import pytest
import yaml
from PySide6.QtCore import Qt

from engine.preset.schema import preset_from_dict
from workbench.runs import launcher
from workbench.runs.process import LAUNCH_PRESET, read_process_record, workbench_dir
from workbench.runs.launcher import EngineProcess, engine_command
from workbench.setup import checks
from workbench.setup.checks import GPUS, PROCESSES, launch_problems
from workbench_helpers import small_preset
from window_fixtures import click, make_window, panel, stand_in, window  # noqa: F401 (fixtures)


def type_processes(qtbot, spin, text: str) -> None:
    """Click into the Processes box, select what is there, type `text` key by key."""
    qtbot.mouseClick(spin.lineEdit(), Qt.LeftButton)
    qtbot.keyClick(spin, Qt.Key_A, Qt.ControlModifier)
    qtbot.keyClicks(spin, text)
    qtbot.keyClick(spin, Qt.Key_Tab)
    assert spin.text() == text


def type_gpus(qtbot, line, text: str) -> None:
    qtbot.mouseClick(line, Qt.LeftButton)
    if line.text():
        qtbot.keyClick(line, Qt.Key_A, Qt.ControlModifier)
        qtbot.keyClick(line, Qt.Key_Backspace)
    qtbot.keyClicks(line, text)
    assert line.text() == text


@pytest.fixture
def launched(monkeypatch):
    """Run's EngineProcess objects, started without starting an engine."""
    made: list[EngineProcess] = []

    def start(self):
        workbench_dir(self.run_dir).mkdir(parents=True, exist_ok=True)
        made.append(self)

    monkeypatch.setattr(EngineProcess, "start", start)
    return made


def run_once(qtbot, window, launched) -> tuple[EngineProcess, str]:
    """Click Run; the engine it made and the status bar's message about it."""
    with qtbot.waitSignal(window.run_launched, timeout=30_000):
        click(qtbot, window, window.run_control.act_run)
    engine, message = launched[-1], window.run_message.text()
    engine.poll()  # no process behind it: marked ended, so Run is enabled again
    return engine, message


# ---------------------------------------------------------------- the command


def test_one_process_launches_the_command_of_old(window, qtbot, launched):
    window.doc.new(small_preset())
    launch = window.setup.launch
    assert launch.process_count() == 1 and launch.gpu_text() == ""
    dirty = window.doc.dirty
    type_processes(qtbot, launch.processes, "1")
    assert window.doc.dirty == dirty  # how to launch is no edit of the preset
    engine, message = run_once(qtbot, window, launched)
    assert "processes" not in message
    preset_path = workbench_dir(engine.run_dir) / LAUNCH_PRESET
    assert engine.command == [sys.executable, "-m", "engine", "run", str(preset_path), "--run-dir",
                              str(engine.run_dir), "--quiet"]
    assert engine.env.get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")  # untouched
    # The launch controls are not preset fields: nothing of them in the launched preset.
    launched_preset = yaml.safe_load(preset_path.read_text())
    assert launched_preset == yaml.safe_load(yaml.safe_dump(window.doc.validate()[0].model_dump(mode="json")))


def test_processes_and_gpus_go_into_the_command(window, qtbot, launched):
    window.doc.new(small_preset())
    launch = window.setup.launch
    type_processes(qtbot, launch.processes, "2")
    assert launch.process_count() == 2
    engine, message = run_once(qtbot, window, launched)
    command = engine.command
    assert command[command.index("--nproc-per-node") + 1] == "2" and "--gpus" not in command
    assert "in 2 processes" in message

    type_gpus(qtbot, launch.gpus, "0,1")
    engine, _ = run_once(qtbot, window, launched)
    command = engine.command
    assert command[-4:] == ["--nproc-per-node", "2", "--gpus", "0,1"]
    assert command[:8] == engine_command(engine.preset_path, engine.run_dir)

    type_processes(qtbot, launch.processes, "1")  # one process: no new flag; the GPUs by the environment
    engine, _ = run_once(qtbot, window, launched)
    assert engine.command == engine_command(engine.preset_path, engine.run_dir)
    assert engine.env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_engine_command_flags():
    plain = engine_command("p.yaml", "run", "py")
    assert plain == ["py", "-m", "engine", "run", "p.yaml", "--run-dir", "run", "--quiet"]
    assert engine_command("p.yaml", "run", "py", 1, "0,1") == plain
    assert engine_command("p.yaml", "run", "py", 4) == plain + ["--nproc-per-node", "4"]
    assert engine_command("p.yaml", "run", "py", 2, "3,5") == plain + ["--nproc-per-node", "2", "--gpus", "3,5"]


# ---------------------------------------------------------------- problems


def test_more_processes_than_prompts_a_step_is_a_problem(panel, qtbot):
    # The small preset: batch_size 8 / num_generations 4 = 2 prompts a step.
    type_processes(qtbot, panel.launch.processes, "2")
    assert panel.validate_now() == []
    type_processes(qtbot, panel.launch.processes, "3")
    problems = panel.validate_now()
    [message] = [m for p, m in problems if p == PROCESSES]
    assert "--nproc-per-node 3" in message and "2 prompts" in message
    assert "--nproc-per-node 3" in panel.summary.text()
    assert "b00020" in panel.launch.processes_label.styleSheet()
    assert "--nproc-per-node 3" in panel.launch.processes.toolTip()
    panel.focus_field(PROCESSES)
    assert panel.launch.processes.hasFocus()
    type_processes(qtbot, panel.launch.processes, "1")
    assert panel.validate_now() == []
    assert panel.launch.processes_label.styleSheet() == ""


def test_the_memory_note_is_per_process(panel, qtbot):
    # Each process trains its share of the batch: the form's estimate said what one
    # process alone would need, whatever the process count.
    def memory_note():
        panel.validate_now()
        return dict(panel.notes)["training.micro_batch_size"]

    alone = memory_note()
    assert alone.startswith("needs about")
    type_processes(qtbot, panel.launch.processes, "2")
    assert memory_note().startswith("each of 2 processes needs about")


def test_run_is_refused_while_the_processes_do_not_fit(window, qtbot, launched):
    window.doc.new(small_preset())
    type_processes(qtbot, window.setup.launch.processes, "4")
    window.run_control.run()
    assert launched == [] and "--nproc-per-node 4" in window.run_message.text()
    qtbot.waitUntil(lambda: "--nproc-per-node 4" in window.run_control.act_run.toolTip(), timeout=5000)


def test_micro_batch_auto_is_a_problem_at_its_field_with_several_processes(panel, qtbot):
    panel.doc.set("training.micro_batch_size", "auto")
    assert [p for p, _ in panel.validate_now()] == []
    type_processes(qtbot, panel.launch.processes, "2")
    problems = panel.validate_now()
    assert [p for p, _ in problems] == ["training.micro_batch_size"]
    assert "--nproc-per-node 2" in problems[0][1]
    assert "--nproc-per-node 2" in panel.rows()["training.micro_batch_size"].error.text()


@pytest.mark.parametrize("typed", ["0;1", "a", "0,,1", "-1", "0,1,", "0,0"])
def test_a_gpus_text_that_is_not_a_list_is_a_problem(panel, qtbot, typed):
    type_gpus(qtbot, panel.launch.gpus, typed)
    problems = panel.validate_now()
    [message] = [m for p, m in problems if p == GPUS]
    assert "e.g. 0,1" in message
    assert f"{GPUS}</a>: " in panel.summary.text()  # the field named, a link to it
    assert "b00020" in panel.launch.gpus_label.styleSheet()
    type_gpus(qtbot, panel.launch.gpus, "0, 1")
    assert panel.validate_now() == [] and panel.launch.gpu_list() == "0,1"


def test_the_launch_checks_without_a_window():
    preset = preset_from_dict(small_preset())
    assert launch_problems(preset, 1, "") == [] and launch_problems(preset, 2, "1,2") == []
    assert [p for p, _ in launch_problems(preset, 3, "")] == [PROCESSES]
    assert [p for p, _ in launch_problems(None, 3, "x")] == [GPUS]  # schema refused the preset
    # On CUDA one process a GPU: fewer GPUs listed than processes is a problem, not on a CPU.
    [(path, message)] = launch_problems(preset, 2, "0")
    assert path == GPUS and "1 GPU listed for 2 processes" in message
    on_cpu = preset_from_dict({**small_preset(), "model": {**small_preset()["model"], "device": "cpu"}})
    assert launch_problems(on_cpu, 2, "0") == []
    result = doctest.testmod(checks)
    assert result.failed == 0 and result.attempted > 0


# ------------------------------------------------------------- a run and its stop


def test_a_run_in_two_processes_from_the_window_stops_cleanly(window, qtbot, stand_in):
    """Processes 2, Run, Stop: the window launches the engine with `--nproc-per-node 2`
    and Stop's line ends the run, stopped, with a checkpoint. The engine here is the
    stand-in (tests/stand_in_engine.py), which reports the world size it was given; the
    launcher's part is tests/test_distributed.py's: the stop line relayed to torchrun
    as SIGTERM (test_a_stop_line_reaches_torchrun_as_sigterm) and torchrun's SIGTERM
    ending every rank after its step (test_sigterm_to_the_launcher_stops_every_process_after_the_step)."""
    from engine.run import rundir
    from window_fixtures import click_run

    window.doc.new(small_preset(max_steps=400))
    type_processes(qtbot, window.setup.launch.processes, "2")
    run_dir = click_run(qtbot, window)
    assert read_process_record(run_dir)["command"][-2:] == ["--nproc-per-node", "2"]
    qtbot.waitUntil(lambda: window.shown[0].metrics.size >= 2, timeout=30_000)
    with qtbot.waitSignal(window.engine_finished, timeout=30_000) as finished:
        click(qtbot, window, window.run_control.act_stop)
    assert finished.args == [0]
    window.tick()
    assert window.shown[0].status == "stopped"
    events = rundir.read_events(run_dir)
    started = next(e for e in events if e["type"] == "run_started")
    assert started["world_size"] == 2 and started["backend"] == "gloo"
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "stopped"
    assert events[-1]["reason"] == "stop requested"  # the stop line, not a signal
    assert rundir.complete_checkpoints(run_dir)
