"""Help ▸ About: the versions the window and the engine run with, and whether a GPU was
found, all without importing torch, transformers or peft here.

Versions come from the installed packages' metadata (importlib.metadata). The GPU
question goes to torch itself, in a short background process of the interpreter the
engine runs under (`gpu_probe_command`, a few seconds while torch imports): its answer
is what `model.device: auto` will pick. The driver's files (/proc/driver/nvidia,
nvidia-smi) would answer at once, but they say nothing of a CPU-only torch build (a GPU
the engine cannot use), of ROCm builds or of Apple's MPS.
"""

from __future__ import annotations

import json
import platform
import sys
from importlib import metadata

from PySide6 import __version__ as PYSIDE_VERSION
from PySide6.QtCore import QProcess, QProcessEnvironment, Qt, QTimer, qVersion
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

APP_PACKAGE = "rl-workbench"
ENGINE_PACKAGES = ("torch", "transformers", "peft")
PROBE_TIMEOUT_MS = 120_000
CHECKING = "checking: asking torch in a background process…"

GPU_PROBE = """\
import json, torch
cuda = torch.cuda.is_available()
names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
mps = getattr(torch.backends, "mps", None)
print(json.dumps({"cuda": cuda, "devices": names, "cuda_build": torch.version.cuda,
                  "hip_build": getattr(torch.version, "hip", None), "mps": bool(mps and mps.is_available())}))
"""


def package_version(name: str) -> str:
    """The installed version of `name`, read from its metadata (nothing is imported).

    >>> package_version("no-such-package-here")
    'not installed'
    """
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> list[tuple[str, str]]:
    """(what, version) for the About box: the app, Python, Qt, PySide6, pyqtgraph, and
    the engine's torch, transformers and peft."""
    import pyqtgraph  # the window's plots already imported it

    return [("RL Workbench", package_version(APP_PACKAGE)), ("Python", platform.python_version()),
            ("Qt", qVersion()), ("PySide6", PYSIDE_VERSION), ("pyqtgraph", pyqtgraph.__version__),
            *((name, package_version(name)) for name in ENGINE_PACKAGES)]


def gpu_probe_command(python: str | None = None) -> list[str]:
    """The background process that asks torch about GPUs (one JSON line on stdout)."""
    return [python or sys.executable, "-c", GPU_PROBE]


def gpu_answer(exit_code: int | None, output: str) -> str:
    """The About box's GPU line from the probe's exit code and output.

    >>> gpu_answer(0, '{"cuda": true, "devices": ["NVIDIA H200"], "cuda_build": "12.4", "mps": false}')
    'yes: 1 CUDA GPU (NVIDIA H200), torch built for CUDA 12.4; runs with device auto use it'
    >>> gpu_answer(0, '{"cuda": false, "devices": [], "cuda_build": null, "mps": false}')
    'no: this torch is a CPU-only build; runs use the CPU'
    >>> gpu_answer(0, '{"cuda": false, "devices": [], "cuda_build": "12.4", "mps": false}')
    'no: torch (built for CUDA 12.4) finds no GPU; runs use the CPU'
    >>> gpu_answer(1, "Traceback ...\\nModuleNotFoundError: No module named 'torch'")
    'unknown: torch is not installed for this Python'
    >>> gpu_answer(None, "")
    'unknown: torch did not answer within 120 s'
    """
    if exit_code is None:
        return f"unknown: torch did not answer within {PROBE_TIMEOUT_MS // 1000} s"
    lines = [line for line in output.strip().splitlines() if line.strip()]
    try:
        found = json.loads(lines[-1]) if exit_code == 0 and lines else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        last = lines[-1] if lines else f"exit code {exit_code}"
        if "No module named 'torch'" in last:
            return "unknown: torch is not installed for this Python"
        return f"unknown: asking torch failed ({last})"
    devices = [str(d) for d in found.get("devices") or []]
    if found.get("cuda") and devices:
        kind = "ROCm" if found.get("hip_build") else "CUDA"
        build = f"ROCm {found['hip_build']}" if found.get("hip_build") else f"CUDA {found.get('cuda_build')}"
        plural = "s" if len(devices) > 1 else ""
        return (f"yes: {len(devices)} {kind} GPU{plural} ({', '.join(devices)}), torch built for {build}; "
                "runs with device auto use it")
    if found.get("mps"):
        return "Apple's MPS device (no CUDA GPU); runs with device auto use the CPU, set model.device: mps to try it"
    if not found.get("cuda_build") and not found.get("hip_build"):
        return "no: this torch is a CPU-only build; runs use the CPU"
    return f"no: torch (built for CUDA {found.get('cuda_build')}) finds no GPU; runs use the CPU"


def about_html(rows: list[tuple[str, str]], gpu: str) -> str:
    cells = "".join(f"<tr><td><b>{what}</b>&nbsp;&nbsp;</td><td>{version}</td></tr>" for what, version in rows)
    return (f"<h3>RL Workbench</h3><p>A desktop workbench for RL fine-tuning of language models: the window "
            f"starts the training engine as a separate process and reads the run folder.</p>"
            f"<table>{cells}<tr><td><b>GPU</b>&nbsp;&nbsp;</td><td>{gpu}</td></tr></table>"
            f"<p><small>Versions from the installed packages' metadata; the GPU as torch sees it, asked in a "
            f"background process (the window never imports torch).</small></p>")


class AboutBox(QDialog):
    """The versions at once, the GPU line when the probe answers (`gpu` holds it).
    `probe`: the probe's command, None to ask nothing (the line says so)."""

    def __init__(self, parent: QWidget | None = None, probe: list[str] | None = None):
        super().__init__(parent)
        self.setWindowTitle("About RL Workbench")
        self.setObjectName("about-box")
        self.rows = versions()
        self.gpu = CHECKING if probe else "not checked"
        self.text = QLabel()
        self.text.setObjectName("about-text")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextSelectableByMouse)  # versions to copy into a bug report
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text)
        layout.addWidget(buttons)
        self._show()
        self.process: QProcess | None = None
        if probe:
            self._ask(probe)

    def _show(self) -> None:
        self.text.setText(about_html(self.rows, self.gpu))

    def _ask(self, probe: list[str]) -> None:
        process = self.process = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("OMP_NUM_THREADS", "1")  # a question, not work: keep it off the other cores
        process.setProcessEnvironment(env)
        process.setProcessChannelMode(QProcess.MergedChannels)
        process.finished.connect(lambda code, _status: self._answered(code))
        process.errorOccurred.connect(self._failed)
        self.timer = QTimer(self, singleShot=True, interval=PROBE_TIMEOUT_MS, timeout=self._timed_out)
        self.timer.start()
        process.start(probe[0], probe[1:])

    def _answered(self, code: int) -> None:
        self.timer.stop()
        output = bytes(self.process.readAll()).decode("utf-8", "replace")
        self.gpu = gpu_answer(code, output)
        self._show()

    def _failed(self, error) -> None:
        if error == QProcess.FailedToStart:
            self.timer.stop()
            self.gpu = f"unknown: {self.process.program()} could not be started"
            self._show()

    def _timed_out(self) -> None:
        self.process.finished.disconnect()  # the kill's own "finished" must not overwrite the line
        self.process.kill()
        self.gpu = gpu_answer(None, "")
        self._show()

    def done(self, result: int) -> None:  # closing the box ends a probe still running
        if self.process is not None and self.process.state() != QProcess.NotRunning:
            self.process.finished.disconnect()
            self.process.kill()
            self.process.waitForFinished(2000)
        super().done(result)
