"""How the set-up panel shows its problems and notes: each beside the field it is about
(or the closest enclosing one), the summary above the form, the "checking" state while the
pre-launch checks run, the data preview, and a click on a problem that focuses its field.
A mixin of workbench.setup.panel's SetupPanel, whose parts (rows, algorithm, rewards,
launch, summary, preview, scroll, doc) it reads.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt

from workbench.setup import schema
from workbench.setup.editors import ERROR_STYLE, FieldEditor, FieldRow, describe_model_source

SUMMARY_LINES = 3  # the problem summary's fixed height, in lines
CHECKING = "Checking"  # plain words: an hourglass glyph is a box in the stock fonts
MEMORY_NOTE_FIELD = "training.micro_batch_size"  # where workbench.setup.checks puts the memory note


class ProblemsShown:
    """The SetupPanel's showing of problems and notes (see the module's docstring)."""

    def _show_checking(self) -> None:
        """The checking state: the notes of the last check (about the preset as it was)
        give way to "checking…" in the space they took, so no row moves under the pointer,
        and the summary says the checks are running."""
        self.notes = []
        rows = list(self.rows().values()) + [self.algorithm.row, self.rewards.list_row] + \
            list(self.rewards.all_rows().values())
        for row in rows:
            row.show_problems([])
            row.show_checking()
        self.launch.show_problems([])
        self.summary.setText(f"<span style='color:#5f6368'>{CHECKING} the data, the prompts' lengths against the "
                             "model's context, and memory…</span>")

    def _kept_notes(self, problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """While the preset has problems the pre-launch checks cannot run: their last
        notes stay (so rows do not shrink and grow under the user's pointer as problems
        come and go elsewhere), except on a field that now has a problem."""
        broken = {path for path, _ in problems}
        return [(path, note) for path, note in self.notes if path not in broken]

    def row_for(self, path: str) -> FieldRow | None:
        """The row a problem about `path` belongs to: the field itself, or the closest
        enclosing one (rewards.1.options.x -> reward component 1)."""
        if path == "rewards" or path.startswith("rewards."):
            return self.rewards.row_for(path)
        if path == "algorithm" or path.startswith(f"algorithm.{schema.algorithm_tag()}"):
            return self.algorithm.row
        rows = self.rows()
        parts = path.split(".")
        while parts:
            candidate = ".".join(parts)
            if candidate in rows:
                return rows[candidate]
            parts.pop()
        # A problem about a section as a whole (data: set exactly one of task or path)
        # or an unknown field in it goes to the section's first field.
        section = path.split(".")[0]
        if section == "algorithm":
            return self.algorithm.row
        return next((row for p, row in rows.items() if p.startswith(section + ".")), None)

    def _show(self, problems: list[tuple[str, str]], notes: list[tuple[str, str]]) -> None:
        by_row: dict[int, tuple[FieldRow, list[str]]] = {}
        unplaced: list[str] = []
        all_rows = list(self.rows().values()) + [self.algorithm.row, self.rewards.list_row] + \
            list(self.rewards.all_rows().values())
        for row in all_rows:
            by_row[id(row)] = (row, [])
        unknown = {key.path for key in self.doc.unknown_keys()}
        for path, message in problems:
            if path in unknown:
                continue  # on its section's banner, with Remove / Rename
            row = self.row_for(path) if path and not self.launch.owns(path) else None
            if row is None or id(row) not in by_row:
                unplaced.append(f"{path}: {message}" if path else message)
                continue
            own = self._row_path(row)
            prefix = path[len(own) + 1:] + ": " if own and path.startswith(own + ".") else ""
            by_row[id(row)][1].append(prefix + message)
        for row, messages in by_row.values():
            row.show_problems(messages)
        self.open_troubled_folds()
        self.launch.show_problems(problems)
        note_rows: dict[int, tuple[FieldRow, list[str]]] = {id(r): (r, []) for r in all_rows}
        for path, message in notes:
            row = self.row_for(path)
            if row is not None and id(row) in note_rows:
                note_rows[id(row)][1].append(message)
        source = describe_model_source(str(self.doc.get("model.name_or_path") or ""))
        if id(self.model_note) in note_rows and source:
            note_rows[id(self.model_note)][1].insert(0, source)
        for row, messages in note_rows.values():
            row.show_notes(messages)
        self._summarise(problems, unplaced, notes)

    def _row_path(self, row: FieldRow) -> str:
        for path, candidate in self.rows().items():
            if candidate is row:
                return path
        for path, candidate in self.rewards.all_rows().items():
            if candidate is row:
                return path
        return ""

    def _summarise(self, problems: list[tuple[str, str]], unplaced: list[str],
                   notes: list[tuple[str, str]] = ()) -> None:
        if not problems:
            # The resource note in a line of its own: its field (micro_batch_size) is folded.
            memory = next((note.split(";")[0] for path, note in notes if path == MEMORY_NOTE_FIELD), "")
            memory = f"<br><span style='color:#5f6368'>Memory: {html.escape(memory)}.</span>" if memory else ""
            self.summary.setText("<span style='color:#1e7e34'>✔ Ready to run.</span> "
                                 "<span style='color:#5f6368'>Hover a field's name for its help.</span>" + memory)
            return
        items = []
        unknown = {key.path: key for key in self.doc.unknown_keys()}
        for path, message in problems:
            if path in unknown:  # the engine's message lists every allowed key: too long here
                key = unknown[path]
                message = (f"unknown key (Rename to {key.suggestion} or Remove" if key.suggestion
                           else "unknown key (Remove") + " at the top of its section)"
            label = html.escape(path or "preset")
            link = f"<a href='{html.escape(path)}'>{label}</a>" if path else label
            items.append(f"{link}: {html.escape(message)}")
        more = " (scroll for all)" if len(problems) >= SUMMARY_LINES else ""
        self.summary.setText(
            f"<span style='{ERROR_STYLE}'>✖ {len(problems)} problem{'s' if len(problems) > 1 else ''} "
            f"to fix before running{more}:</span><br>" + "<br>".join(items)
        )

    def _show_preview(self, examples: list, reason: str) -> None:
        if not examples:
            self.preview.setPlainText(reason)
            return
        lines = []
        for example in examples:
            answer = example.fields.get("answer")
            lines.append(example.prompt + (f"  →  {answer!r}" if answer is not None else ""))
        # Templated prompts run over several lines: a rule between them, the note first.
        separator = "\n" + "─" * 24 + "\n" if any("\n" in line for line in lines) else "\n"
        self.preview.setPlainText((f"[{reason}]\n" if reason else "") + separator.join(lines))

    def focus_field(self, path: str) -> None:
        key = next((k for k in self.doc.unknown_keys() if k.path == path), None)
        banner = self.banners().get(key.section) if key is not None else None
        if banner is not None and key.key in banner.rows:
            self.scroll.ensureWidgetVisible(banner)
            banner.row(key.key).remove.setFocus(Qt.OtherFocusReason)
            return
        if self.launch.owns(path):
            self.launch.focus(path)
            return
        row = self.row_for(path)
        if row is None:
            return
        self.scroll.ensureWidgetVisible(row)
        editor = row.editor
        target = editor.input_widget() if isinstance(editor, FieldEditor) else editor
        target.setFocus(Qt.OtherFocusReason)
