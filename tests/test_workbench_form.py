"""The set-up form driven as a user drives it (pytest-qt, offscreen): keys typed one by
one into the real fields, buttons clicked with the mouse, presets opened and saved
through the window's own paths.

- typing never has its text rewritten under it (`0.002` stayed `0.0.002` before);
- unknown keys in an opened preset are shown in their section, with Remove and Rename;
- the fields do not move as problems come and go, and a cross-field problem shows
  together with a field's problem.
"""

from __future__ import annotations

import pytest
import yaml
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from workbench.main_window import MainWindow

from workbench.window.names import DISCARD, STOP_RUN
from workbench.settings import Settings
from workbench_helpers import small_preset, type_text
from window_fixtures import panel  # noqa: F401 (fixture)


def line(panel, path: str):
    return panel.editor(path).input_widget()


def clear(qtbot, field) -> None:
    """Click into a field, select all, delete: keys only."""
    qtbot.mouseClick(field, Qt.LeftButton)
    qtbot.keyClick(field, Qt.Key_A, Qt.ControlModifier)
    qtbot.keyClick(field, Qt.Key_Backspace)
    assert field.text() == ""


def leave(qtbot, field) -> None:
    """Tab out of a field; editingFinished fires."""
    with qtbot.waitSignal(field.editingFinished, timeout=2000):
        qtbot.keyClick(field, Qt.Key_Tab)
    assert not field.hasFocus()


def problems_at(panel, path: str) -> list[str]:
    return [message for p, message in panel.problems if p == path]


# --------------------------------------------------------- typing is never rewritten


def test_typing_a_decimal_into_an_empty_field_keeps_every_keystroke(panel, qtbot):
    field = line(panel, "training.learning_rate")
    clear(qtbot, field)
    for typed in "0.002":
        qtbot.keyClick(field, typed)
    assert field.text() == "0.002"  # was "0.0.002": "0" came back as "0.0"
    assert panel.doc.get("training.learning_rate") == 0.002
    leave(qtbot, field)
    panel.validate_now()
    assert field.text() == "0.002" and panel.doc.get("training.learning_rate") == 0.002
    assert panel.problems == []


def test_backspace_then_type_replaces_the_last_digit(panel, qtbot):
    field = line(panel, "algorithm.temperature")
    panel.doc.set("algorithm.temperature", 0.7)  # as a preset file has it
    assert field.text() == "0.7"
    qtbot.mouseClick(field, Qt.LeftButton)
    qtbot.keyClick(field, Qt.Key_End)
    qtbot.keyClick(field, Qt.Key_Backspace)
    assert field.text() == "0."  # was rewritten to "0.0", so the next key gave 0.08
    qtbot.keyClick(field, "8")
    assert field.text() == "0.8" and panel.doc.get("algorithm.temperature") == 0.8
    leave(qtbot, field)
    assert field.text() == "0.8" and panel.doc.get("algorithm.temperature") == 0.8


@pytest.mark.parametrize("typed, value", [("1e-4", 1e-4), ("3E-5", 3e-5), ("2.5e-3", 2.5e-3)])
def test_scientific_notation_is_typed_as_it_is_written(panel, qtbot, typed, value):
    field = line(panel, "training.learning_rate")
    type_text(qtbot, field, typed)
    assert field.text() == typed and panel.doc.get("training.learning_rate") == value
    panel.validate_now()
    assert panel.problems == [] and field.text() == typed
    # A value set elsewhere (not typed) is still shown.
    panel.doc.set("training.learning_rate", 0.003)
    assert field.text() == "0.003"


def test_negative_numbers_in_fields_that_allow_them(panel, qtbot):
    weight = panel.rewards.items[1].weight.line  # a reward weight may be negative (a penalty)
    type_text(qtbot, weight, "-0.5")
    assert weight.text() == "-0.5"  # was "-0.0.5": "-0" came back as "-0.0"
    assert panel.doc.get("rewards")[1]["weight"] == -0.5
    seed = line(panel, "training.seed")  # an int typed with a sign (refused or not, as the engine says)
    type_text(qtbot, seed, "-12")
    assert seed.text() == "-12" and panel.doc.get("training.seed") == -12
    panel.validate_now()
    assert [path for path, _ in panel.problems if path != "training.seed"] == []
    assert weight.text() == "-0.5" and panel.doc.get("rewards")[1]["weight"] == -0.5


def test_integer_fields_keep_what_is_typed_valid_or_not(panel, qtbot):
    field = line(panel, "training.max_steps")
    type_text(qtbot, field, "250")
    assert field.text() == "250" and panel.doc.get("training.max_steps") == 250
    type_text(qtbot, field, "1.5")  # not an integer: kept as typed, with the engine's message
    assert field.text() == "1.5"  # was "1.05": "1." came back as "1.0"
    assert panel.doc.get("training.max_steps") == 1.5
    panel.validate_now()
    [message] = problems_at(panel, "training.max_steps")
    assert "valid integer" in message and "1.5" in message
    assert "1.5" in panel.rows()["training.max_steps"].error.text()
    type_text(qtbot, field, "-3")
    assert field.text() == "-3" and panel.doc.get("training.max_steps") == -3
    panel.validate_now()
    assert "greater than or equal to 1" in problems_at(panel, "training.max_steps")[0]


def test_a_list_of_names_can_be_typed(panel, qtbot):
    field = line(panel, "model.lora.target_modules")
    type_text(qtbot, field, "c_attn, c_proj")
    assert field.text() == "c_attn, c_proj" and panel.doc.get("model.lora.target_modules") == ["c_attn", "c_proj"]
    qtbot.mouseClick(field, Qt.LeftButton)
    qtbot.keyClick(field, Qt.Key_End)
    for _ in "c_proj":
        qtbot.keyClick(field, Qt.Key_Backspace)
    assert field.text() == "c_attn, "  # was rewritten to "c_attn", so the next name ran into it
    assert panel.doc.get("model.lora.target_modules") == ["c_attn"]
    qtbot.keyClicks(field, "v_proj")
    assert field.text() == "c_attn, v_proj" and panel.doc.get("model.lora.target_modules") == ["c_attn", "v_proj"]
    leave(qtbot, field)
    assert field.text() == "c_attn, v_proj"


# ------------------------------------------------- layout and problems shown together


def _y(panel, widget) -> int:
    """Where a field is laid out: its place in the form plus the form's place in the
    panel (the form's scroll position left out: Tab scrolls to the next field)."""
    QApplication.sendPostedEvents()
    QApplication.processEvents()
    return widget.mapTo(panel.scroll.widget(), QPoint(0, 0)).y() + panel.scroll.mapTo(panel, QPoint(0, 0)).y()


def test_fields_stay_put_as_problems_come_and_go(panel, qtbot):
    qtbot.waitUntil(lambda: "Ready to run" in panel.summary.text(), timeout=10000)  # the first check's notes
    watched = [line(panel, "training.learning_rate"), line(panel, "model.lora.r"), line(panel, "algorithm.beta")]
    before = [_y(panel, w) for w in watched]
    num_train = line(panel, "data.num_train")
    type_text(qtbot, num_train, "abc")
    qtbot.waitUntil(lambda: bool(problems_at(panel, "data.num_train")), timeout=5000)
    assert "data.num_train" in panel.summary.text()
    assert [_y(panel, w) for w in watched] == before
    type_text(qtbot, line(panel, "training.logging_steps"), "0")  # below the watched training field
    type_text(qtbot, line(panel, "data.num_eval"), "-1")
    qtbot.waitUntil(lambda: len(panel.problems) == 3, timeout=5000)
    assert [_y(panel, w) for w in watched] == before
    type_text(qtbot, num_train, "50")
    type_text(qtbot, line(panel, "training.logging_steps"), "1")
    type_text(qtbot, line(panel, "data.num_eval"), "4")
    qtbot.waitUntil(lambda: panel.problems == [] and "Ready to run" in panel.summary.text(), timeout=10000)
    assert [_y(panel, w) for w in watched] == before


def test_a_cross_field_problem_shows_while_another_field_has_one(panel, qtbot):
    assert panel.doc.get("algorithm.num_generations") == 4
    type_text(qtbot, line(panel, "algorithm.temperature"), "0")
    type_text(qtbot, line(panel, "training.batch_size"), "10")
    panel.validate_now()
    assert "greater than 0" in problems_at(panel, "algorithm.temperature")[0]
    assert "must be divisible by algorithm.num_generations (4)" in problems_at(panel, "training.batch_size")[0]
    rows = panel.rows()
    assert "greater than 0" in rows["algorithm.temperature"].error.text()
    assert "divisible" in rows["training.batch_size"].error.text()
    assert not rows["algorithm.temperature"].error.isHidden() and not rows["training.batch_size"].error.isHidden()
    assert "2 problems" in panel.summary.text()
    # A bad value is never stood in for by its default in a cross-field check: with
    # batch_size unreadable, 5 generations says nothing about divisibility.
    type_text(qtbot, line(panel, "algorithm.num_generations"), "5")
    type_text(qtbot, line(panel, "training.batch_size"), "abc")
    panel.validate_now()
    assert [p for p, _ in panel.problems] == ["algorithm.temperature", "training.batch_size"]
    assert "valid integer" in problems_at(panel, "training.batch_size")[0]


# ------------------------------------------------------------------ unknown keys


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    made = MainWindow(Settings(runs_folder=str(tmp_path / "runs")), settings_path=tmp_path / "config" / "s.json")
    made.ask = lambda title, text, choices: DISCARD if DISCARD in choices else STOP_RUN if STOP_RUN in choices \
        else pytest.fail(f"unexpected question: {title}: {text}")
    made.resize(1400, 900)
    made.show()
    qtbot.waitExposed(made)
    yield made
    made.ask = lambda title, text, choices: DISCARD if DISCARD in choices else choices[0]
    made.close()
    made.deleteLater()


def open_through_the_dialog(window, monkeypatch, path) -> None:
    monkeypatch.setattr("workbench.main_window.QFileDialog.getOpenFileName", lambda *a, **k: (str(path), ""))
    window.presets.open_preset_dialog()
    assert window.doc.path == path


def write_preset(tmp_path, edit) -> "Path":
    data = small_preset()
    edit(data)
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_an_unknown_key_is_shown_in_its_section_and_renamed_with_one_click(window, qtbot, tmp_path, monkeypatch):
    def typo(data):
        del data["training"]["learning_rate"]
        data["training"]["learnin_rate"] = 0.002

    path = write_preset(tmp_path, typo)
    open_through_the_dialog(window, monkeypatch, path)
    panel = window.setup
    panel.validate_now()
    assert any(p == "training.learnin_rate" for p, _ in panel.problems)
    banner = panel.banners()["training"]
    assert banner.isVisible() and "learnin_rate" in banner.row("learnin_rate").label.text()
    # not under another field (it was shown under max steps)
    assert all("learnin_rate" not in row.error.text() for row in panel.rows().values())
    assert "training.learnin_rate</a>: unknown key (Rename to learning_rate or Remove" in panel.summary.text()
    panel.focus_field("training.learnin_rate")  # what the summary's link does
    assert banner.row("learnin_rate").remove.hasFocus()
    rename = banner.row("learnin_rate").rename
    assert rename.text() == "Rename to learning_rate"
    qtbot.mouseClick(rename, Qt.LeftButton)
    assert panel.doc.get("training.learning_rate") == 0.002
    assert "learnin_rate" not in panel.doc.data["training"]
    assert line(panel, "training.learning_rate").text() == "0.002"
    assert banner.isHidden()
    panel.validate_now()
    assert panel.problems == []
    assert window.presets.save()
    saved = yaml.safe_load(path.read_text())
    assert "learnin_rate" not in path.read_text() and saved["training"]["learning_rate"] == 0.002


def test_unknown_keys_at_the_top_and_in_nested_sections_are_removed_or_renamed(window, qtbot, tmp_path, monkeypatch):
    def typos(data):
        data["notes"] = "try a smaller rank"
        data["model"]["lora"]["alhpa"] = data["model"]["lora"].pop("alpha")
        data["algorithm"]["temprature"] = 0.5

    path = write_preset(tmp_path, typos)
    open_through_the_dialog(window, monkeypatch, path)
    panel = window.setup
    banners = panel.banners()
    top, lora, algorithm = banners[""], banners["model.lora"], banners["algorithm"]
    assert all(b.isVisible() for b in (top, lora, algorithm)) and banners["training"].isHidden()
    assert top.row("notes").rename is None  # nothing close: Remove only
    qtbot.mouseClick(top.row("notes").remove, Qt.LeftButton)
    assert "notes" not in panel.doc.data and top.isHidden()
    # LoRA's fold opened to show its unknown key: clicked once the window has laid it out
    qtbot.waitUntil(lambda: lora.row("alhpa").rename.height() > 0)
    qtbot.mouseClick(lora.row("alhpa").rename, Qt.LeftButton)
    assert panel.doc.get("model.lora.alpha") == 8.0 and "alhpa" not in panel.doc.get("model.lora")
    assert line(panel, "model.lora.alpha").text() == "8.0"
    assert algorithm.row("temprature").rename.text() == "Rename to temperature"
    qtbot.mouseClick(algorithm.row("temprature").rename, Qt.LeftButton)
    assert panel.doc.get("algorithm.temperature") == 0.5
    panel.validate_now()
    assert panel.problems == []
    assert window.presets.save()
    text = path.read_text()
    assert not any(typo in text for typo in ("notes", "alhpa", "temprature"))
    saved = yaml.safe_load(text)
    assert saved["model"]["lora"]["alpha"] == 8.0 and saved["algorithm"]["temperature"] == 0.5


def test_an_unknown_key_in_a_reward_component_is_shown_on_it(window, qtbot, tmp_path, monkeypatch):
    def typo(data):
        data["rewards"][1]["wieght"] = data["rewards"][1].pop("weight")

    path = write_preset(tmp_path, typo)
    open_through_the_dialog(window, monkeypatch, path)
    panel = window.setup
    row = panel.rewards.items[1]
    qtbot.waitUntil(row.isVisible, timeout=2000)  # rows made after the window was shown appear on the next loop
    assert row.unknown.isVisible() and panel.rewards.items[0].unknown.isHidden()
    assert "wieght" not in row.problems.error.text()  # on the banner, not in the component's problems
    qtbot.mouseClick(row.unknown.row("wieght").rename, Qt.LeftButton)
    assert panel.doc.get("rewards")[1] == {"name": "sort_position", "weight": 0.5, "options": {}}
    assert panel.rewards.items[1].weight.line.text() == "0.5"
    panel.validate_now()
    assert panel.problems == []
    assert window.presets.save()
    assert "wieght" not in path.read_text() and yaml.safe_load(path.read_text())["rewards"][1]["weight"] == 0.5


def test_renaming_onto_a_field_the_file_sets_asks_first(window, qtbot, tmp_path, monkeypatch):
    from workbench.setup import unknown_keys as unknown_keys_module

    def both(data):
        data["training"]["learnin_rate"] = 0.5  # and learning_rate 0.01 stays

    path = write_preset(tmp_path, both)
    open_through_the_dialog(window, monkeypatch, path)
    panel = window.setup
    banner = panel.banners()["training"]
    asked = []

    def answer(reply):
        def question(parent, title, text, *args, **kwargs):
            asked.append(text)
            return reply
        return question

    monkeypatch.setattr(unknown_keys_module.QMessageBox, "question", answer(QMessageBox.No))
    qtbot.mouseClick(banner.row("learnin_rate").rename, Qt.LeftButton)
    assert "training.learning_rate is already set to 0.01" in asked[0]
    assert panel.doc.get("training.learning_rate") == 0.01 and panel.doc.get("training.learnin_rate") == 0.5
    monkeypatch.setattr(unknown_keys_module.QMessageBox, "question", answer(QMessageBox.Yes))
    qtbot.mouseClick(banner.row("learnin_rate").rename, Qt.LeftButton)
    assert len(asked) == 2
    assert panel.doc.get("training.learning_rate") == 0.5 and "learnin_rate" not in panel.doc.data["training"]
    panel.validate_now()
    assert panel.problems == []
    assert window.presets.save()
    saved = yaml.safe_load(path.read_text())
    assert saved["training"]["learning_rate"] == 0.5 and "learnin_rate" not in saved["training"]


def test_doctests_of_the_unknown_keys_banner():
    import doctest

    from workbench.setup import unknown_keys

    result = doctest.testmod(unknown_keys)
    assert result.failed == 0 and result.attempted >= 1
