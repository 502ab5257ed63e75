"""The set-up form's rewards editor, on the playground's own copy of a preset.

RewardsEditor is written for the set-up panel: it reads and writes `panel.doc` and is
redrawn by the panel when the document changes. RewardsHost stands in for the panel, so
the playground edits rewards with the very widgets the set-up form has (registry
rewards, reward models, Python functions, labels, weights, options), without touching
the set-up form's preset until "Use these rewards in Set-up".
"""

from __future__ import annotations

from PySide6.QtWidgets import QVBoxLayout, QWidget

from workbench.setup.document import PresetDocument
from workbench.setup.rewards_editor import RewardsEditor


class RewardsHost(QWidget):
    """Holds `doc` (the preset whose rewards are edited) and the RewardsEditor on it; the
    schema's problems about the rewards are shown next to their rows."""

    def __init__(self, doc: PresetDocument, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.rewards = RewardsEditor(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.rewards)
        layout.addStretch(1)
        doc.changed.connect(lambda _path: self.refresh())
        doc.replaced.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        self.rewards.refresh()
        self.show_problems()

    def problems(self) -> list[tuple[str, str]]:
        """The schema's problems with the rewards, by field path (rewards.1.weight)."""
        _, problems = self.doc.validate()
        return [(path, message) for path, message in problems if path == "rewards" or path.startswith("rewards.")]

    def show_problems(self) -> list[tuple[str, str]]:
        problems = self.problems()
        owned = {"rewards": self.rewards.list_row, **self.rewards.all_rows()}
        rows = {id(row): (row, []) for row in owned.values()}
        row_paths = {id(row): path for path, row in owned.items()}
        for path, message in problems:
            row = self.rewards.row_for(path)
            if row is not None and id(row) in rows:
                own = row_paths[id(row)]
                # On a component's row, say which of its fields: "weight: must be ...".
                prefix = path[len(own) + 1:] + ": " if path.startswith(own + ".") else ""
                rows[id(row)][1].append(prefix + message)
        for row, messages in rows.values():
            row.show_problems(messages)
        return problems
