"""The fields of a custom reward's source (its Python file and function), the step
delimiter every entry may set, and the helpers that read a reward's name, used by the
rewards editor of the set-up panel."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QWidget

from engine.rewards.custom import find_reward_file, function_options, inspect_reward_file
from engine.rewards import PRM_STEP_DELIMITER_DEFAULT, PROCESS_REWARD_MODEL, REWARDS, reward_kind, reward_options
from workbench.setup import schema
from workbench.setup.editors import FieldEditor, PathEditor, TextEditor

# Where a process reward model splits a completion when its entry sets no delimiter.
PRM_STEP_DELIMITER = PRM_STEP_DELIMITER_DEFAULT


def reward_row_kind(name: Any) -> str:
    """How a rewards entry is edited: ``registry``, ``reward_model``,
    ``process_reward_model`` or ``custom`` (a name meant as FILE.py:FUNCTION, valid or
    not, is edited as one).

    >>> reward_row_kind("exact_match"), reward_row_kind("reward_model"), reward_row_kind("r.py:f"), reward_row_kind("r.py")
    ('registry', 'reward_model', 'custom', 'custom')
    >>> reward_row_kind("process_reward_model")
    'process_reward_model'
    """
    name = name if isinstance(name, str) else ""
    try:
        return reward_kind(name)
    except ValueError:
        return "custom" if (":" in name or name.strip().endswith(".py")) else "registry"


def option_defaults(name: Any, base_dir: Path | None) -> dict:
    """A reward entry's options and their defaults: a registry reward's, a reward model's
    (its `model` too), a function's keyword parameters; {} for a half-typed entry."""
    kind = reward_row_kind(name)
    try:
        if kind == "custom":
            return function_options(name, base_dir) if isinstance(name, str) else {}
        if kind == "registry":
            return reward_options(name) if name in REWARDS else {}
        return reward_options(kind)
    except Exception:  # a reward's own factory, read from the engine: nothing to compare with
        return {}


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


# ----------------------------------------------------------------- step delimiter

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNESCAPES = {"\\": "\\", "n": "\n", "t": "\t", "r": "\r"}


def delimiter_text(value: str) -> str:
    r"""A step delimiter as its field shows it: a newline as the two characters \n (a
    tab \t, a carriage return \r, a backslash \\), everything else as it is.

    >>> print(delimiter_text("\n\n"), delimiter_text("Step"), delimiter_text("a\\b"))
    \n\n Step a\\b
    """
    return "".join(_ESCAPES.get(char, char) for char in value)


def parse_delimiter(text: str) -> str | None:
    r"""What a typed step delimiter means: None when empty (unset); \n a newline, \t a
    tab, \r a carriage return, \\ one backslash; any other backslash is itself. The
    inverse of :func:`delimiter_text`: ``parse_delimiter(delimiter_text(d)) == d``.

    >>> parse_delimiter(r"\n\n"), parse_delimiter(""), parse_delimiter(" ; ")
    ('\n\n', None, ' ; ')
    >>> print(parse_delimiter(r"\d\\n"))
    \d\n
    """
    if not text:
        return None
    out, i = [], 0
    while i < len(text):
        pair = text[i + 1] if text[i] == "\\" and i + 1 < len(text) else ""
        if pair in _UNESCAPES:
            out.append(_UNESCAPES[pair])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


DELIMITER_TYPING = (r"Typed as text: \n is a newline (\n\n a blank line), \t a tab, \\ a backslash; "
                    "any other character is itself, spaces included. Empty: not set.")


def delimiter_placeholder(name: Any) -> str:
    r"""What an empty step-delimiter field means for the entry named `name`.

    >>> print(delimiter_placeholder("process_reward_model"))
    default: \n\n
    >>> delimiter_placeholder("exact_match"), delimiter_placeholder("sort_steps")
    ('none: one score per completion', 'none: the reward places its steps')
    """
    if name == PROCESS_REWARD_MODEL:
        return f"default: {delimiter_text(PRM_STEP_DELIMITER)}"
    if getattr(REWARDS.get(name) if isinstance(name, str) else None, "returns_steps", False):
        return "none: the reward places its steps"
    return "none: one score per completion"


class StepDelimiterEditor(TextEditor):
    r"""A reward entry's `step_delimiter`: the text steps are split at, typed with \n for
    a newline (see :func:`parse_delimiter`); empty means unset."""

    def __init__(self, spec: schema.FieldSpec, parent=None):
        super().__init__(spec, parent)
        self.setToolTip(spec.tooltip() + "<br>" + html.escape(DELIMITER_TYPING))
        self.line.setToolTip(self.toolTip())

    def show_value(self, value: Any) -> None:
        text = delimiter_text(value) if isinstance(value, str) else ("" if value is None else str(value))
        if self.line.text() != text:
            self.line.setText(text)

    def value(self) -> Any:
        return parse_delimiter(self.line.text())


def reward_help(name: str) -> str:
    """A registry reward's help, for its item's tooltip: its docstring's first paragraph.

    >>> reward_help("exact_match")
    '1.0 when the completion equals the answer, ignoring surrounding whitespace.'
    """
    doc = (getattr(REWARDS.get(name), "__doc__", None) or "").strip()
    return " ".join(doc.split("\n\n")[0].split())
