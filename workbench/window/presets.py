"""The window's presets: New, Open, Save, Save as, the recent and bundled menus, a run's
preset as a new one. `PresetsController`, owned by MainWindow, with the actions and
menus it fills; it is given the document, the settings and the window's callbacks."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu, QWidget

from engine.foundation.errors import PresetError
from workbench.runs.labels import bundled_preset, read_label_record
from workbench.settings import bundled_presets
from workbench.setup.checks import REPO_ROOT
from workbench.settings import Settings
from workbench.setup.document import PresetDocument
from workbench.window.hooks import WindowHooks, make_action
from workbench.window.names import CANCEL, DISCARD, SAVE, SETUP


def bundled_folder() -> Path:
    return REPO_ROOT / "presets"


def hub_presets() -> list[Path]:
    """The bundled presets on hub models (presets/hub/): they download their model."""
    return sorted((bundled_folder() / "hub").glob("*.yaml"))


def is_bundled(path: str | Path) -> bool:
    """Whether `path` is one of the repository's own presets (anything under presets/),
    which open as untitled copies so Save never overwrites what ships."""
    try:
        Path(path).resolve().relative_to(bundled_folder().resolve())
    except (ValueError, OSError):
        return False
    return True


@dataclass(frozen=True)
class PresetOrigin:
    """The preset the form's document was opened (or last saved) as: what a run started
    from it is labelled against (workbench/runs/labels.py). `title` its name, `data` its
    fields, `path` its file (None: none on disk), `resolved` whether `data` is a run's
    record (files already absolute)."""

    title: str
    data: dict
    path: str | None = None
    resolved: bool = False


def run_origin(run_dir: Path, preset: dict) -> PresetOrigin:
    """The preset a run was started from, for a copy of its preset: what the window
    recorded at Run, else the bundled preset of its name, else the run's own preset."""
    record = read_label_record(run_dir)
    if isinstance(record.get("preset_fields"), dict) and record.get("preset"):
        return PresetOrigin(str(record["preset"]), record["preset_fields"], record.get("preset_file"), True)
    name = str(preset.get("name") or Path(run_dir).name)
    bundled = bundled_preset(name)
    if bundled is not None:
        return PresetOrigin(name, bundled, None, True)
    return PresetOrigin(name, copy.deepcopy(preset), None, True)


class PresetsController:
    """New, Open, Save, Save As, Open Recent, Bundled Presets, and a run's preset as a
    new one, on `doc`. `window`: the dialogs' parent and the window's callbacks
    (workbench/window/hooks.py); `run_preset(run dir)` a run's resolved preset (None:
    none)."""

    def __init__(self, window: WindowHooks, doc: PresetDocument, settings: Settings,
                 run_preset: Callable[[Path], dict | None]):
        self.window, self.doc, self.settings, self.run_preset = window, doc, settings, run_preset
        self.origin: PresetOrigin | None = None  # the preset the document was opened or saved as
        self.copy_of: str | None = None  # the run whose preset the document is an unsaved copy of
        parent: QWidget = window.parent
        self.act_new = make_action(parent, "New", self.new_preset, QKeySequence.New,
                                   "A new preset with every field at its default")
        self.act_open = make_action(parent, "Open…", self.open_preset_dialog, QKeySequence.Open, "Open a preset (YAML)")
        self.act_save = make_action(parent, "Save", self.save, QKeySequence.Save, "Save the preset")
        self.act_save_as = make_action(parent, "Save As…", self.save_as_dialog, QKeySequence.SaveAs,
                                       "Save the preset to a new file")
        self.recent_menu = QMenu("Open Recent", parent)
        self.recent_menu.aboutToShow.connect(self.fill_recent)
        self.bundled_menu = QMenu("Bundled Presets", parent)
        self.bundled_menu.aboutToShow.connect(self.fill_bundled)

    @property
    def title(self) -> str:
        """The document's title: its file's name, "copy of RUN's preset", or untitled."""
        if self.copy_of and self.doc.path is None:
            return f"copy of {self.copy_of}'s preset"
        return self.doc.title

    def _opened(self, title: str, path: str | Path | None) -> None:
        """The document now holds this preset as it was opened or saved: what runs of it
        are labelled against."""
        self.origin = PresetOrigin(str(self.doc.get("name") or title), copy.deepcopy(self.doc.data),
                                   str(path) if path else None)

    def fill_recent(self) -> None:
        self.recent_menu.clear()
        paths = [p for p in self.settings.recent_presets]
        if not paths:
            self.recent_menu.addAction("(none yet)").setEnabled(False)
        for path in paths:
            act = self.recent_menu.addAction(path)
            act.setEnabled(Path(path).exists())
            act.triggered.connect(lambda _c=False, p=path: self.open_preset(p))

    def fill_bundled(self) -> None:
        self.bundled_menu.clear()
        presets = bundled_presets()
        if not presets:
            self.bundled_menu.addAction("(no presets/ folder found)").setEnabled(False)
        for path in presets:
            act = self.bundled_menu.addAction(path.stem)
            act.setToolTip(str(path))
            act.triggered.connect(lambda _c=False, p=path: self.open_bundled(p))
        hub = hub_presets()
        if hub:
            self.bundled_menu.addSection("Hugging Face hub models (downloaded on first run)")
            for path in hub:
                act = self.bundled_menu.addAction(path.stem)
                act.setToolTip(f"{path}: its model is downloaded from the Hugging Face hub")
                act.triggered.connect(lambda _c=False, p=path: self.open_bundled(p))

    def confirm_discard(self) -> bool:
        """True when the current preset may be replaced: no unsaved changes, or the user
        saved them or chose to discard them."""
        if not self.doc.dirty:
            return True
        answer = self.window.ask("Unsaved changes", f"Save the changes to {self.doc.title}?", [SAVE, DISCARD, CANCEL])
        if answer == SAVE:
            return self.save()
        return answer == DISCARD

    def new_preset(self) -> None:
        if self.confirm_discard():
            self.copy_of = None  # before the document's signals: the window's title reads it
            self.doc.new()
            self._opened("new preset", None)
            self.window.clear_message("error", "problems")
            self.window.show_tab(SETUP)

    def open_preset_dialog(self) -> None:
        if not self.confirm_discard():
            return
        start = str(self.doc.base_dir or Path.cwd())
        path, _ = QFileDialog.getOpenFileName(self.window.parent, "Open preset", start, "Presets (*.yaml *.yml);;All files (*)")
        if path:
            self.open_preset(path, confirmed=True)

    def open_preset(self, path: str | Path, confirmed: bool = False) -> bool:
        if is_bundled(path):  # `make run`, Open or Recent on presets/...: a copy, as the Bundled menu
            return self.open_bundled(Path(path), confirmed)
        if not confirmed and not self.confirm_discard():
            return False
        copy_of, self.copy_of = self.copy_of, None
        try:
            self.doc.open(path)
        except PresetError as exc:
            self.copy_of = copy_of
            self.window.tell("Cannot open preset", str(exc))
            return False
        self._opened(Path(path).stem, path)
        self.settings.add_recent(path)
        self.window.save_settings()
        self.window.show_message(f"Opened {path}")
        self.window.show_tab(SETUP)
        return True

    def open_bundled(self, path: Path, confirmed: bool = False) -> bool:
        """A bundled preset opens as a new, untitled preset (Save writes a copy, so the
        shipped file is not overwritten by accident)."""
        if not confirmed and not self.confirm_discard():
            return False
        try:
            data = self._read_preset(path)
        except PresetError as exc:
            self.window.tell("Cannot open preset", str(exc))
            return False
        self.copy_of = None
        self.doc.new(data, clean=True)
        self._opened(Path(path).stem, path)
        self.window.show_message(f"Opened the bundled preset {Path(path).stem} (Save writes a copy)")
        self.window.show_tab(SETUP)
        return True

    @staticmethod
    def _read_preset(path: Path) -> dict:
        from engine.foundation.io import read_preset_dict

        data = read_preset_dict(path)
        if not isinstance(data, dict):
            raise PresetError(["the top level must be a mapping of sections"], str(path))
        return data

    def save(self) -> bool:
        if self.doc.path is None:
            return self.save_as_dialog()
        return self.save_as(self.doc.path)

    def save_as_dialog(self) -> bool:
        start = str(self.doc.path or (Path.cwd() / f"{self.doc.get('name') or 'preset'}.yaml"))
        path, _ = QFileDialog.getSaveFileName(self.window.parent, "Save preset as", start, "Presets (*.yaml *.yml)")
        return self.save_as(path) if path else False

    def save_as(self, path: str | Path) -> bool:
        _, problems = self.doc.validate()
        if problems:
            answer = self.window.ask("The preset has problems",
                              f"{len(problems)} field(s) are not valid yet; the engine will refuse this preset "
                              "until they are fixed. Save it anyway, as it is?", ["Save anyway", CANCEL])
            if answer != "Save anyway":
                return False
        try:
            self.doc.save(path)
        except OSError as exc:
            self.window.tell("Cannot save preset", f"{path}: {exc.strerror or exc}")
            return False
        self.copy_of = None
        self._opened(Path(path).stem, path)
        self.settings.add_recent(path)
        self.window.save_settings()
        self.window.show_message(f"Saved {path}")
        return True

    def load_run_preset(self, run_dir: Path) -> None:
        """Start a new preset from a run's resolved preset (to run a variation): Load its
        preset into Set-up, asking first about unsaved edits."""
        if self.confirm_discard():
            self.load_run_copy(run_dir, ask=False)

    def load_run_copy(self, run_dir: Path, ask: bool = True) -> bool:
        """A copy of the run's preset in Set-up (opening a run does this): untitled, so Save
        asks where to write it and no file on disk is overwritten; labelled against the
        preset the run was started from, so a run of it reads `grpo-sort · ...` too. Unsaved
        edits in Set-up are kept (and said so) rather than replaced without asking: `ask`
        False when the user has just agreed to replace them."""
        run_dir = Path(run_dir)
        preset = self.run_preset(run_dir)
        if not preset:
            if not ask:
                self.window.tell("No preset", f"{run_dir} has no preset.yaml")
            return False
        if ask and self.doc.dirty:
            self.window.show_message(f"Set-up keeps your unsaved edits; Runs ▸ Load its preset into Set-up "
                                     f"replaces them with {run_dir.name}'s", "info", run=run_dir)
            return False
        self.copy_of = run_dir.name  # before the document's signals: the window's title reads it
        self.doc.new(preset, clean=True)
        self.origin = run_origin(run_dir, preset)
        if not ask:
            self.window.show_tab(SETUP)
        return True
