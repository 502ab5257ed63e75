"""The run header's pipeline line: the runs the run on show was built from, as stages
leading to it (`SFT sft-sort-… (step 300) → RM rm-sort-… (step 200) → GRPO this run`),
each earlier stage a link that opens that run. Hidden for a run with no lineage (most
runs), so the header is as before for them."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QSizePolicy

from workbench.runs.lineage import Stage, algorithm_label, pipeline_tooltip
from workbench.runs.rundata import RunData

ARROW = " →&nbsp;"  # a plain space there was drawn as part of the link after it
MISSING_COLOUR = "#9aa0a6"


def stage_html(stage: Stage) -> str:
    """One earlier stage: its short name and run as a link to the run's folder (plain
    and greyed, marked missing, when the folder is gone), then its checkpoint's step."""
    words = html.escape(f"{stage.label} {stage.name}")
    where = f" ({html.escape(stage.where)})" if stage.where else ""
    if not stage.run.is_dir():
        return f"<span style='color:{MISSING_COLOUR}'>{words} (missing){where}</span>"
    return f"<a href=\"{html.escape(str(stage.run), quote=True)}\">{words}</a>{where}"


def pipeline_html(stages: list[Stage], algorithm: str) -> str:
    this_run = f"<b>{html.escape(algorithm_label(algorithm))}</b> this run" if algorithm else "<b>this run</b>"
    return ARROW.join([stage_html(s) for s in stages] + [this_run])


class PipelineLine(QLabel):
    """Signals: open_requested(path) (a stage's link clicked: show that run)."""

    open_requested = Signal(Path)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("run-pipeline")
        self.setTextFormat(Qt.RichText)
        self.setTextInteractionFlags(Qt.TextBrowserInteraction)
        # Its text may be longer than the header is wide: never let it widen the window.
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.linkActivated.connect(lambda href: self.open_requested.emit(Path(href)))
        self._key: tuple | None = None
        self.hide()

    def show_run(self, run: RunData | None) -> None:
        """The pipeline of `run` (None, or one without lineage: hidden). The header redraws
        every second or so: the label is rebuilt only when the pipeline changed."""
        stages = run.lineage if run is not None else []
        key = (run.run_dir, tuple(stages), run.algorithm) if stages else None
        if key == self._key:
            return
        self._key = key
        if key is None:
            self.clear()
            self.hide()
            return
        self.setText(f"<span style='color:#5f6368'>Pipeline:</span> {pipeline_html(stages, run.algorithm)}")
        self.setToolTip(pipeline_tooltip(stages, run.algorithm, run.name))
        self.show()
