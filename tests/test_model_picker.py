"""The pickers of cached models and data sets (workbench.setup.model_picker), on the fake
Hugging Face cache of tests/test_hub_cache.py, driven with the mouse (pytest-qt,
offscreen): the rows shown, greyed rows that cannot be chosen, the empty-cache message,
and the set-up form's "Cached…" buttons filling their field as typing would.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from test_hub_cache import hf_home  # noqa: F401 (the fake-cache fixture, shared with the cache tests)
from window_fixtures import show_setup_panel
from workbench.setup.model_picker import DatasetPicker, ModelPicker

SCAN_TIMEOUT_MS = 10_000


@pytest.fixture
def panel(qtbot, tmp_path, hf_home):
    widget = show_setup_panel(qtbot, tmp_path, size=(1400, 900))
    qtbot.waitExposed(widget)
    return widget


def scanned(qtbot, picker):
    """The picker once its scan has filled the table."""
    if picker.scanning:
        with qtbot.waitSignal(picker.scanned, timeout=SCAN_TIMEOUT_MS):
            pass
    return picker


def open_picker(qtbot, picker_class):
    picker = picker_class()
    qtbot.addWidget(picker)
    picker.show()
    qtbot.waitExposed(picker)
    return scanned(qtbot, picker)


def row_of(picker, repo_id: str) -> int:
    [row] = [r for r in range(picker.table.rowCount()) if picker.table.item(r, 0).text() == repo_id]
    return row


def row_texts(picker, repo_id: str) -> list[str]:
    row = row_of(picker, repo_id)
    return [picker.table.item(row, c).text() for c in range(picker.table.columnCount())]


def click_row(qtbot, picker, repo_id: str, double: bool = False) -> None:
    item = picker.table.item(row_of(picker, repo_id), 0)
    picker.table.scrollToItem(item)
    where = picker.table.visualItemRect(item).center()
    qtbot.mouseClick(picker.table.viewport(), Qt.LeftButton, pos=where)
    if double:  # a double click is a click, then the double-click event (QTest sends only the latter)
        qtbot.mouseDClick(picker.table.viewport(), Qt.LeftButton, pos=where)


# ------------------------------------------------------------------ the pickers


def test_the_model_picker_shows_every_cached_model(qtbot, hf_home):
    picker = open_picker(qtbot, ModelPicker)
    assert picker.windowTitle() == "Models in the local Hugging Face cache"
    assert picker.table.rowCount() == 6
    repo, size, architecture, parameters, chat, context = row_texts(picker, "test-org/tiny-chat")
    assert (architecture, parameters, chat, context) == ("Qwen2ForCausalLM", "4,256", "yes", "2,048")
    assert size.endswith("kB")
    assert row_texts(picker, "test-org/tiny-base")[3:] == ["217", "no", "512"]
    assert str(hf_home / "hub") in picker.message.text() and "greyed out" in picker.message.text()


def test_greyed_rows_say_why_and_cannot_be_chosen(qtbot, hf_home):
    picker = open_picker(qtbot, ModelPicker)
    bert = picker.table.item(row_of(picker, "test-org/tiny-bert"), 0)
    assert "not a causal LM" in row_texts(picker, "test-org/tiny-bert")[2]
    assert "not a causal LM" in bert.toolTip() and not bert.flags() & Qt.ItemIsSelectable
    half = picker.table.item(row_of(picker, "test-org/half-downloaded"), 0)
    assert "no config.json" in half.toolTip() and not half.flags() & Qt.ItemIsEnabled
    for repo_id in ("test-org/tiny-bert", "test-org/half-downloaded", "test-org/no-snapshots"):
        click_row(qtbot, picker, repo_id)
        assert picker.chosen() is None and not picker.ok_button.isEnabled()
        click_row(qtbot, picker, repo_id, double=True)
        assert picker.isVisible() and picker.result() != picker.DialogCode.Accepted
        assert not picker.select(repo_id)


def test_a_double_click_on_a_usable_model_accepts_it(qtbot, hf_home):
    picker = open_picker(qtbot, ModelPicker)
    with qtbot.waitSignal(picker.accepted, timeout=2000):
        click_row(qtbot, picker, "test-org/gpt2-chat", double=True)
    assert picker.chosen() == "test-org/gpt2-chat"


def test_an_empty_cache_says_where_it_looked_and_how_to_fill_it(qtbot, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    models = open_picker(qtbot, ModelPicker)
    assert models.table.rowCount() == 0 and not models.ok_button.isEnabled()
    text = models.message.text()
    assert "No models" in text and str(tmp_path / "empty-home" / "hub") in text
    assert "download Qwen/Qwen2.5-0.5B-Instruct" in text
    datasets = open_picker(qtbot, DatasetPicker)
    assert "No data sets" in datasets.message.text()
    assert "download --repo-type dataset openai/gsm8k" in datasets.message.text()


def test_the_dataset_picker_shows_subsets(qtbot, hf_home):
    picker = open_picker(qtbot, DatasetPicker)
    assert picker.table.rowCount() == 2
    assert row_texts(picker, "openai/gsm8k")[2:] == ["main, socratic", "4"]
    click_row(qtbot, picker, "test-org/readme-only")
    assert picker.chosen() is None
    click_row(qtbot, picker, "openai/gsm8k")
    assert picker.chosen() == "openai/gsm8k" and picker.ok_button.isEnabled()


# ------------------------------------------------------------- in the set-up form


def choose_in_form(qtbot, panel, path: str, repo_id: str):
    """Click the field's Cached… button, click the row, click OK."""
    button = panel.cache_buttons[path]
    qtbot.mouseClick(button, Qt.LeftButton)
    picker = scanned(qtbot, panel.cache_picker)
    qtbot.waitExposed(picker)
    click_row(qtbot, picker, repo_id)
    with qtbot.waitSignal(picker.accepted, timeout=2000):
        qtbot.mouseClick(picker.ok_button, Qt.LeftButton)
    return picker


def test_choosing_a_cached_model_fills_the_model_field(qtbot, panel):
    assert panel.cache_buttons["model.name_or_path"].text() == "Cached…"
    choose_in_form(qtbot, panel, "model.name_or_path", "test-org/tiny-chat")
    assert panel.editor("model.name_or_path").input_widget().text() == "test-org/tiny-chat"
    assert panel.doc.get("model.name_or_path") == "test-org/tiny-chat"
    assert panel.doc.dirty  # an edit like typing: the preset has unsaved changes
    panel.validate_now()
    assert panel.model_note.note.text().startswith("Hugging Face hub id, in the local cache: Qwen2ForCausalLM")


def test_cancel_leaves_the_model_field_as_it_was(qtbot, panel):
    before = panel.doc.get("model.name_or_path")
    qtbot.mouseClick(panel.cache_buttons["model.name_or_path"], Qt.LeftButton)
    picker = scanned(qtbot, panel.cache_picker)
    click_row(qtbot, picker, "test-org/tiny-chat")
    with qtbot.waitSignal(picker.rejected, timeout=2000):
        qtbot.keyClick(picker, Qt.Key_Escape)
    assert panel.doc.get("model.name_or_path") == before


def test_choosing_a_cached_dataset_fills_the_dataset_field(qtbot, panel):
    # Needs the preset's data.dataset field (a hub id or a folder; null by default).
    assert "data.dataset" in panel.rows(), "engine/preset/schema.py has no data.dataset field yet"
    choose_in_form(qtbot, panel, "data.dataset", "openai/gsm8k")
    assert panel.editor("data.dataset").input_widget().text() == "openai/gsm8k"
    assert panel.doc.get("data.dataset") == "openai/gsm8k"


def test_a_cached_model_gets_lora_targets_of_its_own_architecture(qtbot, panel):
    """Module names typed for another architecture (GPT-2's c_attn) would match nothing
    in the chosen Qwen2 model: choosing it from the cache sets the targets to auto."""
    targets = panel.editor("model.lora.target_modules")
    targets.line.setFocus()
    targets.line.selectAll()
    qtbot.keyClicks(targets.line, "c_attn, c_proj")
    assert panel.doc.get("model.lora.target_modules") == ["c_attn", "c_proj"]
    choose_in_form(qtbot, panel, "model.name_or_path", "test-org/tiny-chat")
    assert panel.doc.get("model.lora.target_modules") == "auto"
    assert targets.line.text() == "auto"
