"""The window's Export (workbench/runs/export_dialog.py, workbench/window/export.py): the
Runs tab's "Export…" button, a run's context menu and File ▸ Export Run… open the dialog;
Export runs `python -m engine export ... --progress` in the background and the dialog
shows its progress and result; refusals, the engine's own failure message, Cancel.

The session's trained run (tests/conftest.py: 4 steps, checkpoints at 2 and 4) serves
every test; each test exports from its own copy in the window's runs folder.
"""

from __future__ import annotations

import doctest
import os
import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QProcess, Qt
from PySide6.QtGui import QGuiApplication

from engine.run import rundir
from workbench.runs import export_dialog
from workbench.runs.export_dialog import ExportDialog
from workbench.window import export as window_export
from workbench.window.export import staged_folder
from workbench.window.names import CANCEL, CANCEL_EXPORT, RUNS
from workbench_helpers import type_text as type_and_finish
from window_fixtures import make_window, window  # noqa: F401 (fixtures)

WAIT_MS = 180_000  # an export loads the engine's libraries first: seconds, more on a busy machine


@pytest.fixture
def run(trained_run_copy) -> Path:
    """This test's copy of the session's trained run, in the window's runs folder."""
    return trained_run_copy


def open_from_runs_tab(qtbot, window, run: Path) -> ExportDialog:
    """Select the run in the Runs tab and click Export…: the dialog it opens."""
    window.tabs.setCurrentIndex(RUNS)
    window.runs_view.refresh()
    window.runs_view.select_paths([run])
    assert window.runs_view.export_button.isEnabled()
    qtbot.mouseClick(window.runs_view.export_button, Qt.LeftButton)
    dialog = window.export.dialog
    assert dialog is not None and dialog.run_dir == run.resolve()
    qtbot.waitExposed(dialog)
    return dialog


def type_text(qtbot, line, text: str) -> None:
    """Typed key by key, without the closing Return (in a dialog, Return presses Export)."""
    type_and_finish(qtbot, line, text, finish=False)


def click_box(qtbot, box) -> None:
    """A click on a check box's indicator, as a user ticks it."""
    was = box.isChecked()
    qtbot.mouseClick(box, Qt.LeftButton, pos=QPoint(8, box.height() // 2))
    assert box.isChecked() != was, box.text()


def start(qtbot, window, dialog):
    """Click Export; the export job it started."""
    assert dialog.export_button.isEnabled(), dialog.problem.text()
    qtbot.mouseClick(dialog.export_button, Qt.LeftButton)
    job = window.export.job
    assert job is not None and job.running and dialog.running
    assert not dialog.export_button.isEnabled() and dialog.cancel_button.isVisible()
    return job


def wait_done(qtbot, job) -> None:
    qtbot.waitUntil(lambda: not job.running, timeout=WAIT_MS)


def test_the_export_button_writes_the_adapter_of_the_chosen_checkpoint_with_progress(window, qtbot, run,
                                                                                    tmp_path):
    dialog = open_from_runs_tab(qtbot, window, run)
    assert dialog.boxes["adapter"].isChecked() and not dialog.boxes["merged"].isChecked()
    assert dialog.checkpoint_name() == "step_000004"  # the newest by default
    default = Path(dialog.folders["adapter"].text())
    assert default == run.parent / "exports" / f"{run.name}-step4-adapter"
    qtbot.keyClick(dialog.checkpoint, Qt.Key_Up)  # the older one
    assert dialog.checkpoint_name() == "step_000002"
    assert Path(dialog.folders["adapter"].text()).name == f"{run.name}-step2-adapter"  # follows the checkpoint
    out = tmp_path / "out" / "my-adapter"
    type_text(qtbot, dialog.folders["adapter"], str(out))
    assert dialog.problem.text() == ""

    values: list[int] = []
    dialog.progress.valueChanged.connect(values.append)
    job = start(qtbot, window, dialog)
    assert job.command[3:5] == ["export", str(run.resolve())]
    assert job.command[job.command.index("--checkpoint") + 1] == "step_000002"
    seen: list[tuple[int, int, str]] = []
    messages: list[str] = []
    job.progressed.connect(lambda done, total, what: (seen.append((done, total, what)),
                                                      messages.append(window.run_message.text())))
    wait_done(qtbot, job)

    assert job.ok, job.message
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", "tokenizer_config.json"} <= {
        p.name for p in out.iterdir()}
    assert "step_000002" in (out / "README.md").read_text()
    checkpoint = run / "checkpoints" / "step_000002" / "adapter_model.safetensors"
    assert (out / "adapter_model.safetensors").read_bytes() == checkpoint.read_bytes()
    # The progress moved stage by stage, to its end, in the dialog and the status bar.
    assert len(seen) >= 3 and any("adapter: saving the tokenizer" == what for _, _, what in seen)
    assert len(set(values)) >= 3 and values == sorted(values)
    assert dialog.progress.value() == dialog.progress.maximum() == seen[-1][1]
    assert any("adapter: saving the tokenizer" in m for m in messages)
    # The result: where it went, and the path to copy.
    assert str(out) in dialog.status.text() and "step_000002" in dialog.status.text()
    assert "Exported" in window.run_message.text() and str(out) in window.run_message.text()
    assert not dialog.running and not dialog.cancel_button.isVisible() and dialog.copy_button.isVisible()
    assert dialog.result_folder() == out
    qtbot.mouseClick(dialog.copy_button, Qt.LeftButton)
    assert QGuiApplication.clipboard().text() == str(out)
    assert dialog.problem.text().endswith("choose a new folder, or empty it)")  # the folder is taken now


def test_file_menu_exports_several_at_once_into_the_default_folders(window, qtbot, run):
    window.open_run(run)
    window.export.act_export.trigger()
    dialog = window.export.dialog
    assert dialog is not None and dialog.run_dir == run.resolve()
    qtbot.waitExposed(dialog)
    click_box(qtbot, dialog.boxes["tensorboard"])
    adapter, board = Path(dialog.folders["adapter"].text()), Path(dialog.folders["tensorboard"].text())
    assert board == run.parent / "exports" / f"{run.name}-tensorboard"
    job = start(qtbot, window, dialog)
    wait_done(qtbot, job)
    assert job.ok, job.message
    assert (adapter / "adapter_config.json").is_file()
    assert any(p.name.startswith("events.out.tfevents.") for p in board.iterdir())
    assert str(adapter) in dialog.status.text() and str(board) in dialog.status.text()
    assert dialog.result_folder() == run.parent / "exports"
    # The next export gets new default folders; the exports folder is not listed as a run.
    assert Path(dialog.folders["adapter"].text()).name == f"{adapter.name}-2"
    assert dialog.problem.text() == "" and dialog.export_button.isEnabled()
    window.runs_view.refresh()
    assert [r.name for r in window.runs_view.model.runs] == [run.name]


def test_an_output_folder_that_is_not_empty_or_is_a_file_is_refused(window, qtbot, run, tmp_path):
    dialog = open_from_runs_tab(qtbot, window, run)
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    type_text(qtbot, dialog.folders["adapter"], str(full))
    assert "exists and is not empty" in dialog.problem.text() and "LoRA adapter" in dialog.problem.text()
    assert not dialog.export_button.isEnabled()
    qtbot.mouseClick(dialog.export_button, Qt.LeftButton)
    assert window.export.job is None
    type_text(qtbot, dialog.folders["adapter"], str(full / "keep.txt"))
    assert "is a file" in dialog.problem.text() and not dialog.export_button.isEnabled()
    type_text(qtbot, dialog.folders["adapter"], str(tmp_path / "new"))
    assert dialog.problem.text() == "" and dialog.export_button.isEnabled()
    click_box(qtbot, dialog.boxes["adapter"])
    assert dialog.problem.text().startswith("choose what to export") and not dialog.export_button.isEnabled()
    click_box(qtbot, dialog.boxes["merged"])
    type_text(qtbot, dialog.folders["merged"], "")
    assert "Merged model: give an output folder" == dialog.problem.text()
    assert [p.name for p in full.iterdir()] == ["keep.txt"]


def test_a_run_without_a_checkpoint_gives_only_its_events(window, qtbot, run, tmp_path):
    shutil.rmtree(run / rundir.CHECKPOINTS_DIR)
    window.tabs.setCurrentIndex(RUNS)
    window.runs_view.refresh()
    row = [r.path.resolve() for r in window.runs_view.model.runs].index(run.resolve())
    menu = window.runs_view.context_menu(row)
    action = next(a for a in menu.actions() if a.text() == "Export…")
    action.trigger()
    dialog = window.export.dialog
    assert dialog is not None and dialog.run_dir == run.resolve()
    assert not dialog.checkpoint.isEnabled() and dialog.boxes["tensorboard"].isChecked()
    assert not dialog.boxes["adapter"].isChecked() and dialog.problem.text() == ""
    click_box(qtbot, dialog.boxes["adapter"])
    assert "has no complete checkpoint to export" in dialog.problem.text()
    assert "only its TensorBoard events" in dialog.problem.text() and not dialog.export_button.isEnabled()
    dialog.close()
    # A folder with neither a checkpoint nor events: refused before any dialog.
    bare = tmp_path / "runs" / "bare"
    bare.mkdir()
    (bare / rundir.PRESET_FILE).write_text((run / rundir.PRESET_FILE).read_text())
    window.export.dialog = None
    assert window.export.export_run(bare) is None and window.export.dialog is None
    assert "bare has nothing to export" in window.run_message.text()


def test_a_failed_export_shows_the_engines_message_not_a_traceback(window, qtbot, run, tmp_path):
    (run / "checkpoints" / "step_000004" / "adapter_model.safetensors").write_bytes(b"not safetensors at all")
    dialog = open_from_runs_tab(qtbot, window, run)
    click_box(qtbot, dialog.boxes["adapter"])
    click_box(qtbot, dialog.boxes["merged"])
    out = tmp_path / "merged"
    type_text(qtbot, dialog.folders["merged"], str(out))
    job = start(qtbot, window, dialog)
    wait_done(qtbot, job)
    assert not job.ok and not job.cancelled
    text = dialog.status.text()
    assert "SafetensorError" in text and "Traceback" not in text and "File \"" not in text
    assert text == job.message and "error: " + text in job.stderr  # the engine's own line
    assert "Export of" in window.run_message.text() and "failed" in window.run_message.text()
    assert "b00020" in window.run_message.text()  # shown as an error
    assert not out.exists() and not staged_folder(out).exists()
    assert dialog.progress.isHidden() and not dialog.copy_button.isVisible() and dialog.export_button.isEnabled()


def test_cancel_stops_the_engine_and_leaves_no_folder(window, qtbot, run, tmp_path):
    dialog = open_from_runs_tab(qtbot, window, run)
    click_box(qtbot, dialog.boxes["merged"])
    click_box(qtbot, dialog.boxes["tensorboard"])
    outs = [Path(dialog.folders[k].text()) for k in ("adapter", "merged", "tensorboard")]
    job = start(qtbot, window, dialog)
    qtbot.waitUntil(lambda: dialog.progress.maximum() > 0 or not job.running, timeout=WAIT_MS)  # the first stage
    assert job.running, job.message
    pid = job.process.processId()
    assert pid > 0
    qtbot.mouseClick(dialog.cancel_button, Qt.LeftButton)
    assert job.cancelled
    wait_done(qtbot, job)
    assert not job.ok and job.process.state() == QProcess.ProcessState.NotRunning
    assert "cancelled" in dialog.status.text() and "cancelled" in window.run_message.text()
    assert "error: export cancelled" in job.stderr  # the engine's SIGTERM handling, not a kill
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    for out in outs:
        assert not out.exists() and not staged_folder(out).exists(), out
    assert not dialog.running and dialog.export_button.isEnabled()


def test_closing_the_window_during_an_export_asks_then_cancels_it_cleanly(window, qtbot, run):
    # Closed mid-export, the window used to kill the engine outright (QProcess's
    # destructor), leaving its hidden half-written folders behind.
    dialog = open_from_runs_tab(qtbot, window, run)
    click_box(qtbot, dialog.boxes["merged"])
    outs = [Path(dialog.folders[k].text()) for k in ("adapter", "merged")]
    job = start(qtbot, window, dialog)
    qtbot.waitUntil(lambda: dialog.progress.maximum() > 0 or not job.running, timeout=WAIT_MS)
    assert job.running, job.message
    asked = []
    window.ask = lambda title, text, choices: asked.append((title, choices)) or CANCEL
    assert not window.close()  # kept open: the export goes on
    assert asked == [("An export is in progress", [CANCEL_EXPORT, CANCEL])] and job.running
    window.ask = lambda title, text, choices: CANCEL_EXPORT
    pid = job.process.processId()
    assert window.close()
    assert not job.running and job.cancelled and not job.ok
    assert "error: export cancelled" in job.stderr  # the engine tidied up after its SIGTERM
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    for out in outs:
        assert not out.exists() and not staged_folder(out).exists(), out


def test_examples_in_the_docstrings():
    for module in (export_dialog, window_export):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
