"""The fields of a custom reward's source (its Python file and function) and the
helpers that read a reward's name, used by the rewards editor of the set-up panel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QWidget

from engine.rewards.custom import find_reward_file, inspect_reward_file
from engine.rewards import reward_kind
from workbench.setup import schema
from workbench.setup.editors import FieldEditor, PathEditor


def reward_row_kind(name: Any) -> str:
    """How a rewards entry is edited: ``registry``, ``reward_model`` or ``custom`` (a
    name meant as FILE.py:FUNCTION, valid or not, is edited as one).

    >>> reward_row_kind("exact_match"), reward_row_kind("reward_model"), reward_row_kind("r.py:f"), reward_row_kind("r.py")
    ('registry', 'reward_model', 'custom', 'custom')
    """
    name = name if isinstance(name, str) else ""
    try:
        return reward_kind(name)
    except ValueError:
        return "custom" if (":" in name or name.strip().endswith(".py")) else "registry"


def split_function_name(name: Any) -> tuple[str, str]:
    """The file and function of a custom reward's name, also while it is half typed.

    >>> split_function_name("lib/r.py:brevity"), split_function_name("r.py:"), split_function_name("r.py")
    (('lib/r.py', 'brevity'), ('r.py', ''), ('r.py', ''))
    """
    name = name if isinstance(name, str) else ""
    file, sep, function = name.rpartition(":")
    return (file, function) if sep else (name, "")


def functions_in(file: str, base_dir: Path | None) -> list[str]:
    """Public functions defined in a reward file (read, not run); [] when unreadable."""
    path = find_reward_file(file, base_dir) if file else None
    if path is None:
        return []
    try:
        info = inspect_reward_file(path)
    except ValueError:
        return []
    takes_two = [n for n in info.defined() if len(info.functions[n].args.posonlyargs + info.functions[n].args.args) >= 2
                 or info.functions[n].args.vararg is not None]
    return takes_two + [n for n in info.defined() if n not in takes_two]


class RewardFileEditor(PathEditor):
    """A custom reward's Python file; Browse… writes a path relative to the preset's
    folder when the file is inside it (so the preset can be moved with its rewards)."""

    def __init__(self, spec: schema.FieldSpec, base_dir, parent=None):
        super().__init__(spec, folder=False, file_filter="Python files (*.py);;All files (*)", parent=parent)
        self.base_dir = base_dir  # a callable: the preset's folder, or None
        self.line.setPlaceholderText("my_rewards.py")
        self.browse.setToolTip("Choose the Python file that defines the reward function")

    def _browse(self) -> None:
        base = self.base_dir()
        start = str(find_reward_file(self.line.text(), base) or base or Path.cwd())
        chosen, _ = QFileDialog.getOpenFileName(self, "Python file with the reward function", start, self.file_filter)
        if chosen:
            self.line.setText(relative_to_preset(chosen, base))
            self.report()


def relative_to_preset(path: str, base_dir: Path | None) -> str:
    """``path`` relative to the preset's folder when it is inside it, else unchanged.

    >>> relative_to_preset("/work/presets/lib/r.py", Path("/work/presets")), relative_to_preset("/tmp/r.py", None)
    ('lib/r.py', '/tmp/r.py')
    """
    if base_dir is None:
        return path
    try:
        return Path(path).resolve().relative_to(Path(base_dir).resolve()).as_posix()
    except ValueError:
        return path


class FunctionEditor(FieldEditor):
    """The function's name: typed, or picked among the functions the file defines."""

    def __init__(self, spec: schema.FieldSpec, parent=None):
        super().__init__(spec, parent)
        self.combo = QComboBox(self)
        self.combo.setEditable(True)
        self.combo.setInsertPolicy(QComboBox.NoInsert)
        self.combo.lineEdit().setPlaceholderText("function(prompts, completions, **fields)")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.combo)
        self.combo.lineEdit().textEdited.connect(self.report)
        self.combo.activated.connect(self.report)

    def set_choices(self, names: list[str]) -> None:
        if [self.combo.itemText(i) for i in range(self.combo.count())] != names:
            text = self.combo.currentText()
            self.combo.clear()
            self.combo.addItems(names)
            self.combo.setEditText(text)

    def show_value(self, value: Any) -> None:
        if self.combo.currentText() != (value or ""):
            self.combo.setEditText(value or "")

    def value(self) -> Any:
        return self.combo.currentText().strip()

    def input_widget(self) -> QWidget:
        return self.combo
