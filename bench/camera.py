"""Screenshots of the live window, shared by the bench's screenshot scripts: let Qt's event
loop run until the window has settled, then grab a widget into a PNG; `open_inspector`, the
inspector on one recorded rollout of a run."""

from __future__ import annotations

import time
from pathlib import Path


class Camera:
    """Grabs widgets into `out`/NAME.png, after letting `app` settle `settle_s` seconds."""

    def __init__(self, app, out: Path, settle_s: float = 0.5):
        self.app, self.out, self.settle_s = app, out, settle_s

    def settle(self, seconds: float = 0.5) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.app.processEvents()
            time.sleep(0.02)

    def wait_until(self, condition, timeout: float, what: str) -> None:
        """Run the event loop until `condition()` holds; TimeoutError naming `what` after
        `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            self.app.processEvents()
            time.sleep(0.02)

    def shot(self, widget, name: str) -> None:
        self.settle(self.settle_s)
        path = self.out / name
        widget.grab().save(str(path), "PNG", 0)
        print(f"{path}: {path.stat().st_size // 1024} KB")


def open_run_window(run_dir: Path, size: tuple[int, int]):
    """The main window shown at `size` on `run_dir` (its runs folder the run's own), for a
    shot of one of its tabs (imports the workbench when called; a QApplication must exist)."""
    from workbench.main_window import MainWindow
    from workbench.settings import Settings

    run_dir = Path(run_dir).resolve()
    window = MainWindow(Settings(runs_folder=str(run_dir.parent)))
    window.resize(*size)
    window.show()
    window.open_run(run_dir)
    return window


def last_recorded_step(run_dir: Path) -> int:
    """The newest step whose rollouts `run_dir` recorded (trajectories/step_N.jsonl)."""
    return max(int(p.stem.split("_")[1]) for p in (Path(run_dir) / "trajectories").glob("step_*.jsonl"))


def open_inspector(run_dir: Path, step: int, index: int, size: tuple[int, int] = (1300, 760)):
    """(app, view): the QApplication and an InspectorView shown at `size` on `run_dir`'s
    recorded rollout `index` of `step` (imports Qt and the workbench when called)."""
    from PySide6.QtWidgets import QApplication

    from workbench.inspector.view import InspectorView
    from workbench.runs.rundata import RunData

    app = QApplication.instance() or QApplication([])
    view = InspectorView()
    view.resize(*size)
    view.show()
    data = RunData(run_dir)
    data.poll()
    view.set_run(data)
    view.open_step(step, index=index)
    return app, view
