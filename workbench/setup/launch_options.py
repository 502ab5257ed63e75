"""The launch controls above the set-up form: how many processes train the run and on
which GPUs. They say how to launch, not what to train, so they are not preset fields and
are never saved into the preset; Run passes them to the engine (`--nproc-per-node N`,
`--gpus LIST`; workbench.runs.launcher.engine_command). Their problems are found by
workbench.setup.checks.launch_problems and listed with the preset's."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QSpinBox, QWidget

from workbench.setup.checks import GPUS, MAX_PROCESSES, PROCESSES, gpu_list
from workbench.setup.editors import ERROR_STYLE, NOTE_STYLE

PROCESSES_TIP = (
    "How many processes train this run, on this machine, started by torchrun (the engine's "
    "--nproc-per-node N). Data parallel: every process holds the model and takes a share of each "
    "step's prompts, and their gradients are averaged. On a CPU the processes talk over gloo with one "
    "thread each; on CUDA each process takes one GPU (NCCL). 1: one process, as `rl-engine run` "
    "without --nproc-per-node. Not saved in the preset.")
GPUS_TIP = (
    "Which GPUs the processes use, comma-separated (e.g. 0,1): the engine's --gpus, which sets "
    "CUDA_VISIBLE_DEVICES. Empty: every visible GPU, or no CUDA at all. On CUDA one process takes one "
    "GPU, so list at least as many as Processes. Not saved in the preset.")


class LaunchOptions(QWidget):
    """Processes (1..64) and GPUs, in one row of fixed height: a problem turns a label
    red and goes into its tool tip (the panel's summary lists it), so the form below
    never moves. `changed()` when either is edited."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("launch-options")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        title = QLabel("<b>Launch</b>", self)
        title.setToolTip("How Run starts the engine on this preset (not saved in the preset)")
        layout.addWidget(title)

        self.processes_label = QLabel(f"{PROCESSES}:", self)
        self.processes = QSpinBox(self)
        self.processes.setObjectName("launch-processes")
        self.processes.setRange(1, MAX_PROCESSES)
        self.processes.setValue(1)
        self.processes.setAccelerated(True)
        self.processes_label.setBuddy(self.processes)
        self.gpus_label = QLabel(f"{GPUS}:", self)
        self.gpus = QLineEdit(self)
        self.gpus.setObjectName("launch-gpus")
        self.gpus.setPlaceholderText("all visible")
        self.gpus.setClearButtonEnabled(True)
        self.gpus.setMaximumWidth(160)
        self.gpus_label.setBuddy(self.gpus)
        self._tips = {PROCESSES: PROCESSES_TIP, GPUS: GPUS_TIP}
        self._labels = {PROCESSES: self.processes_label, GPUS: self.gpus_label}
        self._inputs = {PROCESSES: self.processes, GPUS: self.gpus}
        for key in (PROCESSES, GPUS):
            self._labels[key].setToolTip(self._tips[key])
            self._inputs[key].setToolTip(self._tips[key])
            layout.addWidget(self._labels[key])
            layout.addWidget(self._inputs[key])
        self.hint = QLabel("how Run starts the engine; not saved in the preset", self)
        self.hint.setStyleSheet(NOTE_STYLE)
        layout.addWidget(self.hint)
        layout.addStretch(1)
        self.processes.valueChanged.connect(lambda _value: self.changed.emit())
        self.gpus.textChanged.connect(lambda _text: self.changed.emit())

    def process_count(self) -> int:
        return self.processes.value()

    def gpu_text(self) -> str:
        return self.gpus.text()

    def gpu_list(self) -> str:
        """The GPUs as the engine takes them (`0,1`), "" when empty or not a list (a
        problem, which keeps Run from launching)."""
        try:
            return gpu_list(self.gpus.text())
        except ValueError:
            return ""

    def owns(self, path: str) -> bool:
        return path in self._inputs

    def show_problems(self, problems: list[tuple[str, str]]) -> None:
        """Mark the controls that have a problem (label red, the message in the tool tip)."""
        for key, label in self._labels.items():
            messages = [message for path, message in problems if path == key]
            label.setStyleSheet(ERROR_STYLE if messages else "")
            tip = self._tips[key] + ("\n\n✖ " + "\n✖ ".join(messages) if messages else "")
            label.setToolTip(tip)
            self._inputs[key].setToolTip(tip)

    def focus(self, path: str) -> None:
        widget = self._inputs.get(path)
        if widget is not None:
            widget.setFocus(Qt.OtherFocusReason)
            if isinstance(widget, QLineEdit):
                widget.selectAll()
