"""The start page's tab and the Help menu, wired to the window's own controllers.

`StartController(window)`, made by MainWindow once its actions exist:
- a "Start" tab, added last (the other tabs keep their positions) the first time
  `show_page()` is called (workbench/app.py calls it when no preset or run is given;
  Help ▸ Start page too), so the windows that never show it do not build it;
- a card's Open is the Bundled menu's (an untitled copy in Set-up); its Run is Open and
  then the toolbar's Run action, so it is refused, checked and launched exactly as that;
  a pipeline's later stage (a preset naming `run:NAME`) whose earlier runs the runs folder
  does not hold yet is not launched: the window says which stage runs first and offers
  to run it or open it (workbench/window/pipeline.py finds them, as the engine would);
- recent runs (the runs folder, newest first) open as the Runs list opens them (with a
  copy of their preset in Set-up), recent presets as File ▸ Open Recent opens them;
- Help ▸ Start page, Documentation (F1), Keyboard shortcuts, About RL Workbench.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QMainWindow

from workbench.settings import bundled_presets
from workbench.start.catalog import load_catalog
from workbench.start.page import RECENT_RUNS, StartPage
from workbench.window.hooks import make_action
from workbench.window.names import CANCEL
from workbench.window.pipeline import needed_runs, read_preset, stages_first

START_TAB = "Start"


def run_line(summary) -> str:
    """A recent run's second line: status, steps, algorithm.

    >>> from types import SimpleNamespace as S
    >>> run_line(S(status="done", step=400, max_steps=400, algorithm="grpo"))
    'done · step 400/400 · grpo'
    >>> run_line(S(status="failed", step=0, max_steps=None, algorithm=""))
    'failed · step 0'
    """
    steps = f"step {summary.step}" + (f"/{summary.max_steps}" if summary.max_steps else "")
    return " · ".join(part for part in (summary.status, steps, summary.algorithm) if part)


class StartController:
    def __init__(self, window: QMainWindow):
        self.window = window
        self.page: StartPage | None = None  # built when first shown: most windows never show it
        self._help = self._about = self._shortcuts = None

        self.act_start = make_action(window, "Start page", self.show_page, None,
                                     "The bundled experiments as cards, and recent runs and presets")
        self.act_docs = make_action(window, "Documentation", self.show_docs, QKeySequence.HelpContents,
                                    "README.md and docs/, in a window of their own")
        self.act_shortcuts = make_action(window, "Keyboard shortcuts", self.show_shortcuts, "Ctrl+/",
                                         "Every shortcut of the window")
        self.act_about = make_action(window, "About RL Workbench", self.show_about, None,
                                     "Versions, and whether torch finds a GPU")
        menu = window.menuBar().addMenu("&Help")
        for act in (self.act_start, self.act_docs, self.act_shortcuts, self.act_about):
            menu.addAction(act)
        self.menu = menu

    # ------------------------------------------------------------ the page

    def show_page(self) -> None:
        """Show the Start tab (added, last, the first time) with its recent lists read again."""
        if self.page is None:
            self.page = self._make_page()
            self.window.tabs.addTab(self.page, START_TAB)
            self.window.tabs.setTabToolTip(self.window.tabs.indexOf(self.page), "The bundled experiments, what "
                                           "each teaches, and recent runs and presets")
        self.refresh_recent()
        self.window.tabs.setCurrentWidget(self.page)

    def _make_page(self) -> StartPage:
        page, window = StartPage(load_catalog, bundled_presets()), self.window
        page.open_requested.connect(self.open_preset)
        page.run_requested.connect(self.run_preset)
        page.run_folder_requested.connect(window.open_run_and_preset)  # as the Runs list opens a run
        page.preset_file_requested.connect(lambda path: window.presets.open_preset(path))
        window.runs_view.runs_changed.connect(self._show_recent)  # scanned again, or its read began or ended
        act_run = window.run_control.act_run
        act_run.changed.connect(lambda: page.set_run_enabled(act_run.isEnabled(), "" if act_run.isEnabled()
                                                             else "A run is in progress: stop it first"))
        page.set_run_enabled(act_run.isEnabled())
        return page

    def refresh_recent(self) -> None:
        # The Runs tab's scan: its cache of every run's summary serves both (a fresh index read
        # every run folder again, ~10 ms a run, each time the page was shown). While the Runs tab
        # reads many runs on its worker (the window's start), the page says so, and fills when
        # they are read (runs_changed).
        self.window.runs_view.refresh()
        self._show_recent()

    def _show_recent(self) -> None:
        view = self.window.runs_view
        if self.page is None:
            return
        waiting = f"Reading {view.reader.count} runs…" if view.reader.reading else ""
        self.page.set_recent([(s.name, run_line(s), s.path) for s in view.runs[:RECENT_RUNS]],
                             list(self.window.settings.recent_presets), waiting)

    def open_preset(self, path: Path) -> bool:
        """A card's Open: the bundled preset as an untitled copy in Set-up (asks first
        about unsaved changes, as the Bundled menu does)."""
        return self.window.presets.open_bundled(path)

    def run_preset(self, path: Path) -> None:
        """A card's Run: open it, then press Run (refused with its reason while a run is in
        progress or the preset has problems, as the toolbar's Run is)."""
        run = self.window.run_control.act_run
        if not run.isEnabled():
            engine = self.window.run_control.engine
            name = f" ({engine.run_dir.name})" if engine is not None else ""
            self.window.run_message.show_message(f"A run is in progress{name}; stop it before starting another.",
                                                 "refused")
            return
        if not self._earlier_stages_ran(path):
            return
        if self.open_preset(path):
            run.trigger()

    def _earlier_stages_ran(self, path: Path) -> bool:
        """Whether the preset's earlier pipeline stages have runs to stand on; if not, the
        user is told which stage runs first and may run it (its card's Run) or open it
        (its card's Open) instead. False when the preset is not launched."""
        preset, folder = read_preset(path), self.window.settings.runs_path
        presets = {p.stem: p for p in bundled_presets()}
        first = stages_first(preset, presets, folder)
        if not first:
            return True
        stage = first[0]
        lines = []
        for need in needed_runs(preset, folder):
            waiting = (f"; {need.waiting[-1].name} has no complete checkpoint yet (one is saved every "
                       "training.save_steps steps and when a run ends)") if need.waiting else ""
            lines.append(f"• it {need.role} the newest {need.preset} run ({need.field}: run:{need.preset}): "
                         f"there is none with a checkpoint{waiting}")
        order = " → ".join([*first, path.stem])
        text = (f"{path.stem} stands on earlier runs of its pipeline, and the runs folder ({folder}) does not "
                f"hold them yet:\n" + "\n".join(lines) + f"\n\nRun the stages in order: {order}.")
        run_it, open_it = f"Run {stage}", f"Open {stage}"
        choices = [run_it, open_it, CANCEL] if stage in presets else [CANCEL]
        if stage not in presets:
            text += f"\n{stage} is not a bundled preset: open it and run it first."
        self.window.run_message.show_message(f"{path.stem} needs a run of {stage} first: it was not launched",
                                             "refused")
        answer = self.window.ask(f"Run {stage} first", text, choices)
        if answer == run_it:
            self.run_preset(presets[stage])
        elif answer == open_it:
            self.open_preset(presets[stage])
        return False

    # ---------------------------------------------------------------- help

    def show_docs(self, path: Path | None = None):
        from workbench.start.help_browser import HelpBrowser

        if self._help is None:
            self._help = HelpBrowser(self.window)
        if path is not None:
            self._help.open_doc(path)
        self._raise(self._help)
        return self._help

    def show_shortcuts(self):
        from workbench.start.shortcuts import ShortcutList

        if self._shortcuts is None:
            self._shortcuts = ShortcutList(self.window)
        self._raise(self._shortcuts)
        return self._shortcuts

    def show_about(self, probe: list[str] | None = None):
        """A new About box each time (its GPU question is asked again); `probe` replaces
        the GPU probe's command (tests)."""
        from workbench.start.about import AboutBox, gpu_probe_command

        if self._about is not None:
            self._about.close()
        self._about = AboutBox(self.window, probe or gpu_probe_command())
        self._raise(self._about)
        return self._about

    @staticmethod
    def _raise(dialog) -> None:
        dialog.show()  # not modal: the window stays usable beside it
        dialog.raise_()
        dialog.activateWindow()
