"""Screenshots of the live window, shared by `inspector_screenshots.py` and
`workbench_screenshots.py`: let Qt's event loop run until the window has settled, then
grab a widget into a PNG."""

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

    def shot(self, widget, name: str) -> None:
        self.settle(self.settle_s)
        path = self.out / name
        widget.grab().save(str(path), "PNG", 0)
        print(f"{path}: {path.stat().st_size // 1024} KB")
