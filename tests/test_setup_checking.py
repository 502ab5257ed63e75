"""The set-up form's pre-launch checks never freeze the window and never show a verdict
about a preset that is no longer the one in the form.

- a chat template is compiled once, not once per prompt (the calculator preset's 5,200
  prompts took 55-86 s on the window's thread);
- while the checks run, the summary says "Checking", never "Ready to run", and the
  notes about the preset that was open (its context, its memory) are gone;
- Run waits for the checks with the window painting, and the verdict is the new one.
"""

from __future__ import annotations

import threading
from pathlib import Path

import jinja2
import yaml
from PySide6.QtCore import Qt

import workbench.setup.panel as panel_module
from engine.builtin_model import builtin_model_folder
from engine.data import Example
from engine.model.chat import FolderTemplater, _compiled_template, chat_format, template_examples
from workbench_helpers import type_text
from window_fixtures import panel  # noqa: F401 (fixture)

PRESETS = Path(__file__).resolve().parents[1] / "presets"


def test_a_chat_template_is_compiled_once_for_many_prompts(monkeypatch):
    _compiled_template.cache_clear()
    compiled = []
    original = jinja2.Environment.compile

    def counting(self, *args, **kwargs):
        compiled.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    templater = FolderTemplater(builtin_model_folder("builtin:tiny-tools"))
    fmt = chat_format("auto", templater.chat_template, None)
    assert fmt.template is not None
    out = template_examples([Example(f"calc {i}+1 =", {}) for i in range(300)], fmt, templater)
    assert len(out) == 300 and out[7].prompt != out[8].prompt and "calc 7+1 =" in out[7].prompt
    assert len(compiled) == 1  # was 300: jinja2's from_string on every prompt


def _gate(monkeypatch):
    """Hold the pre-launch checks until the returned event is set."""
    release = threading.Event()
    real = panel_module.prelaunch_checks

    def held(*args, **kwargs):
        release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(panel_module, "prelaunch_checks", held)
    return release


def _open(panel, qtbot, name: str) -> None:
    panel.doc.new(yaml.safe_load((PRESETS / name).read_text()), clean=True)


def test_the_form_says_checking_not_ready_while_the_checks_run(panel, qtbot, monkeypatch):
    _open(panel, qtbot, "grpo-sort-process.yaml")
    panel.validate_now()
    row = panel.rows()["algorithm.max_completion_length"]
    assert "context 128" in row.note.text() and "Ready to run" in panel.summary.text()

    release = _gate(monkeypatch)
    _open(panel, qtbot, "grpo-calculator-tools.yaml")
    field = panel.editor("algorithm.max_completion_length").input_widget()
    qtbot.mouseClick(field, Qt.LeftButton)
    qtbot.keyClick(field, Qt.Key_A, Qt.ControlModifier)
    type_text(qtbot, field, "300")
    qtbot.waitUntil(lambda: not panel._timer.isActive(), timeout=3000)  # the schema's check ran
    assert panel.checking
    assert "Ready to run" not in panel.summary.text() and "Checking" in panel.summary.text()
    assert "context 128" not in row.note.text()  # the previous preset's context
    assert all("MiB" not in r.note.text() for r in panel.rows().values())  # nor its memory

    release.set()
    qtbot.waitUntil(lambda: not panel.checking, timeout=20000)
    messages = [m for p, m in panel.problems if p == "algorithm.max_completion_length"]
    assert messages and "context" in messages[0], panel.problems
    assert "Ready to run" not in panel.summary.text()


def test_run_waits_for_the_checks_with_the_window_painting(panel, qtbot, monkeypatch):
    _open(panel, qtbot, "grpo-calculator-tools.yaml")
    release = _gate(monkeypatch)
    painted = []
    # While validate_now waits, the event loop runs: a timer fires, as a repaint would.
    qtbot.wait(200)
    panel_module.QTimer.singleShot(50, lambda: painted.append(panel.summary.text()))
    panel_module.QTimer.singleShot(300, release.set)
    problems = panel.validate_now()
    assert painted and "Checking" in painted[0]  # the window answered during the check
    assert problems == [] and "Ready to run" in panel.summary.text()
    assert any("fits" in m for p, m in panel.notes if p == "algorithm.max_completion_length")


def test_a_preset_file_with_only_a_prompt_file_opens_without_problems(panel, qtbot, tmp_path):
    # The engine reads `data: {path: FILE}` as task null; the form filled in the default
    # task first and refused the file with "task and path are both set".
    (tmp_path / "prompts.jsonl").write_text("".join(f'{{"prompt": "sort {i} 1 =", "answer": "1 {i}"}}\n'
                                                    for i in range(2, 9)))
    data = yaml.safe_load((PRESETS / "grpo-sort.yaml").read_text())
    data["data"] = {"path": "prompts.jsonl", "num_eval": 2}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(data))
    panel.doc.open(tmp_path / "mine.yaml")
    assert panel.doc.get("data.task") is None and panel.doc.get("data.path") == "prompts.jsonl"
    assert [p for p in panel.validate_now() if p[0].startswith("data")] == []
