"""Opening a file that is not a usable preset in the window (pytest-qt, offscreen): binary
junk, UTF-16, a 5,000-level nesting, a YAML alias bomb, a self-referencing alias, a
Python tag, a huge file. Each must end in the window's one-line message naming the file
(never a traceback, never a hang), through the same paths a user takes: File > Open
(MainWindow.open_preset) and the bundled-preset menu (MainWindow.open_bundled)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.foundation.limits import MAX_FILE_BYTES
from workbench.main_window import MainWindow
from workbench.settings import Settings

BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"] + [
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]) + "\n"


def bad_files(folder: Path) -> dict[str, tuple[bytes, str]]:
    """name -> (content, words the message must hold)."""
    marker = folder / "executed"
    return {
        "binary": (bytes(range(256)) * 8, "not UTF-8 text"),
        "utf16": ("name: x\n".encode("utf-16"), "UTF-16"),
        "deep": (("model: " + "[" * 5000 + "]" * 5000 + "\n").encode(), "nested more than"),
        "deep-map": (("data:\n  task_options: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n").encode(),
                     "nested more than"),
        "bomb": (("name: bomb\n" + BOMB + "data: {task: sort, task_options: {x: *i}}\n").encode(),
                 "holds more than"),
        "self-alias": (b"data:\n  task_options: &loop {x: *loop}\n", "refers to itself"),
        "python-tag": (f'name: !!python/object/apply:os.system ["touch {marker}"]\n'.encode(),
                       "tag !!python/object/apply:os.system is not allowed"),
        "huge": (b"name: x\n" + b"# padding\n" * (MAX_FILE_BYTES // 10 + 1), "larger than"),
    }


class Told:
    """Stands in for the window's modal questions; records what it was told."""

    def __init__(self):
        self.messages: list[tuple[str, str]] = []

    def __call__(self, title: str, text: str, choices: list[str]) -> str:
        self.messages.append((title, text))
        return choices[-1]


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    settings = Settings(runs_folder=str(tmp_path / "runs"))
    window = MainWindow(settings, settings_path=tmp_path / "config" / "settings.json")
    window.ask = Told()
    qtbot.addWidget(window)
    window.show()
    return window


@pytest.mark.parametrize("name", list(bad_files(Path("."))))
@pytest.mark.parametrize("how", ["open_preset", "open_bundled"])
def test_a_file_that_is_no_preset_gives_one_line_naming_it(window, tmp_path, name, how):
    content, words = bad_files(tmp_path)[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(content)
    before = window.doc.data

    assert getattr(window.presets, how)(path) is False  # refused, as a user opening it sees

    ((title, text),) = window.ask.messages  # told once
    assert title == "Cannot open preset"
    assert text.startswith(f"{path} is invalid:\n  - ") and words in text, text
    problem_lines = text.splitlines()[1:]
    assert len(problem_lines) == 1 and len(problem_lines[0]) < 300, text  # one line, no dump
    assert "Traceback" not in text and "Error:" not in text
    assert str(path) in window.run_message.text()  # the window's own message line too
    assert window.doc.data == before  # the open preset is untouched
    assert not (tmp_path / "executed").exists()  # the tag ran nothing
