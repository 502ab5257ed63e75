"""The set-up form shows what matters (issue 41), driven as a user drives it: the
essentials first, the rest in folded groups that remember their state, fields the
chosen algorithm does not read hidden, values kept across an algorithm switch, a
changed-from-the-preset marker with Reset, and memory notes for the device the run uses.
"""

from __future__ import annotations

from PySide6.QtCore import Qt

from workbench.setup.document import PresetDocument
from workbench_helpers import type_text
from window_fixtures import panel, show_setup_panel, unfold  # noqa: F401 (fixture)


def choose_algorithm(qtbot, panel, label: str) -> None:
    """Pick the algorithm in the closed chooser by keyboard: Home, then Down to it (each
    key a choice, as the user's arrow keys are)."""
    chooser = panel.algorithm.chooser
    index = chooser.findText(label)
    assert index >= 0, label
    chooser.setFocus(Qt.OtherFocusReason)
    qtbot.keyClick(chooser, Qt.Key_Home)
    for _ in range(index):
        qtbot.keyClick(chooser, Qt.Key_Down)
    assert chooser.currentText() == label


def test_dpo_on_the_builtin_model_gets_a_completion_length_that_fits(panel, qtbot):
    """The schema's DPO default (256) plus the sort prompts overflows the built-in model's
    128 positions: switching must not put an error in a field the user never touched."""
    choose_algorithm(qtbot, panel, "DPO")
    panel.validate_now()
    assert not [p for p in panel.problems if p[0] == "algorithm.max_completion_length"], panel.problems
    assert panel.doc.get("algorithm.max_completion_length") <= 128


def test_a_switch_made_before_the_prompts_are_counted_is_fitted_once_they_are(panel, qtbot, monkeypatch):
    """The window never counts prompts on a switch (a big data set would freeze it): DPO's
    default waits for the checks' count, then is cut to the room it leaves."""
    from workbench.setup import checks

    monkeypatch.setattr(checks, "_rooms", {})  # nothing counted yet
    panel.doc.set("algorithm.max_completion_length", 256)  # GRPO's default: nothing of the user's to keep
    choose_algorithm(qtbot, panel, "DPO")
    assert panel.doc.get("algorithm.max_completion_length") == 256  # not known yet
    panel.validate_now()
    room = next(iter(checks._rooms.values()))
    assert 1 <= room < 256 and panel.doc.get("algorithm.max_completion_length") == room
    assert not [p for p in panel.problems if p[0] == "algorithm.max_completion_length"], panel.problems


def test_a_default_that_does_not_fit_is_clamped_to_the_room_left():
    """PPO's max_completion_length at its default (53) is not the user's: DPO gets its own
    default, 256, cut to the room the prompts leave (context 128 - longest prompt 18 = 110)."""
    doc = PresetDocument()
    doc.switch_algorithm("ppo")
    assert doc.get("algorithm.max_completion_length") == 32  # the new preset's own 32 kept
    doc.set("algorithm.max_completion_length", 53)  # PPO's default: nothing of the user's to keep
    doc.switch_algorithm("dpo", room=110)
    assert doc.get("algorithm.max_completion_length") == 110


def shown(panel, path: str) -> bool:
    return panel.rows()[path].isVisible()


def test_the_essentials_are_shown_and_the_rest_is_folded(panel):
    for path in ("model.name_or_path", "data.task", "training.max_steps", "training.learning_rate"):
        assert shown(panel, path), path
    for path in ("model.dtype", "data.num_eval", "training.batch_size", "algorithm.beta"):
        assert not shown(panel, path), path
    assert panel.algorithm.chooser.isVisible() and panel.rewards.isVisible()


def test_a_field_the_algorithm_does_not_read_is_hidden_and_comes_back(panel, qtbot):
    unfold(qtbot, panel, "data")
    assert not shown(panel, "data.chosen_field") and shown(panel, "data.environment")  # GRPO: no pairs
    choose_algorithm(qtbot, panel, "KTO")  # unpaired rows, no episodes
    assert not shown(panel, "data.chosen_field") and not shown(panel, "data.max_turns")
    choose_algorithm(qtbot, panel, "DPO")
    assert shown(panel, "data.chosen_field") and shown(panel, "data.rejected_field")
    choose_algorithm(qtbot, panel, "GRPO")
    assert not shown(panel, "data.chosen_field") and shown(panel, "data.environment")


def test_values_typed_before_a_switch_survive_it(panel, qtbot):
    unfold(qtbot, panel, "algorithm")
    type_text(qtbot, panel.editor("training.max_steps").input_widget(), "7")
    type_text(qtbot, panel.editor("algorithm.temperature").input_widget(), "0.5")
    choose_algorithm(qtbot, panel, "PPO")  # PPO samples too: its temperature is the one typed
    assert panel.doc.get("algorithm.temperature") == 0.5
    assert panel.editor("algorithm.temperature").input_widget().text() == "0.5"
    choose_algorithm(qtbot, panel, "DPO")  # no temperature: nothing to keep
    choose_algorithm(qtbot, panel, "GRPO")
    assert panel.doc.get("algorithm.temperature") == 0.5 and panel.doc.get("training.max_steps") == 7


def test_a_changed_field_is_marked_and_reset_puts_the_presets_value_back(panel, qtbot):
    field = panel.editor("training.learning_rate").input_widget()
    preset_value = panel.doc.get("training.learning_rate")
    reset = panel.forms["training"].resets["training.learning_rate"]
    assert not reset.isVisible()
    type_text(qtbot, field, "0.002")
    assert reset.isVisible() and panel.forms["training"].labels["training.learning_rate"].styleSheet()
    assert str(preset_value) in reset.toolTip()
    qtbot.mouseClick(reset, Qt.LeftButton)
    assert panel.doc.get("training.learning_rate") == preset_value
    assert float(field.text()) == preset_value and not reset.isVisible()


def test_the_folded_state_is_remembered_in_a_new_window(panel, qtbot, tmp_path):
    """A new window's form (the `panel` fixture keeps this test's settings folder)."""
    unfold(qtbot, panel, "training")
    assert panel.rows()["training.batch_size"].isVisible()
    (tmp_path / "second").mkdir()
    second = show_setup_panel(qtbot, tmp_path / "second")
    assert second.forms["training"].fold.unfolded
    assert second.rows()["training.batch_size"].isVisible()
    assert not second.forms["alarms"].fold.unfolded  # only the group opened


def test_the_memory_note_on_a_cpu_only_machine_leads_with_cpu_memory(panel, qtbot, monkeypatch):
    from workbench.setup import checks

    monkeypatch.setattr(checks, "gpu_found", lambda: False)
    panel.validate_now()
    note = dict(panel.notes)["training.micro_batch_size"]
    assert note.startswith("needs about") and "of RAM on the CPU (no GPU found, fp32)" in note.split(";")[0]
    assert "GPU memory" not in note and ", in MiB: weights" in note  # the breakdown names its unit


def test_the_memory_note_with_a_gpu_leads_with_gpu_memory():
    from types import SimpleNamespace

    from workbench.setup.device import memory_note

    def estimate(amount):
        breakdown = "update: weights 0.5; with gradient checkpointing"
        return SimpleNamespace(amount=lambda: amount, breakdown=lambda: breakdown)

    note = memory_note(estimate("1.3 GiB"), estimate("602 MiB"), "auto", "auto", False, found=True)
    assert note.startswith("needs about 602 MiB of GPU memory (GPU found, bf16); update phase, in MiB: weights 0.5")
    assert note.endswith("On the CPU: about 1.3 GiB of RAM")
    cpu = memory_note(estimate("1.3 GiB"), estimate("602 MiB"), "auto", "auto", False, found=False)
    assert cpu.startswith("needs about 1.3 GiB of RAM on the CPU (no GPU found, fp32)") and "602" not in cpu


def test_the_form_modules_examples_hold():
    """The docstring examples of the form's new modules (tests/test_doctests.py runs the engine's)."""
    import doctest

    from workbench.setup import device, folding, switching

    for module in (device, folding, switching):
        result = doctest.testmod(module)
        assert result.attempted and result.failed == 0, module.__name__
