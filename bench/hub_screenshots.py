"""Screenshots of the set-up form on a Hub preset, for the README: the model picker
listing the local Hugging Face cache, and the GSM8K preset's prompts previewed through
Qwen2.5's chat template. The cache is filled with stand-ins under the real ids
(tests/hub_fixtures.py: a tiny Qwen2-architecture model with Qwen2.5's template, GSM8K-shaped
parquet files), since nothing can be downloaded here.

    xvfb-run -a -s "-screen 0 1600x1000x24" python bench/hub_screenshots.py --out docs/screenshots

Writes setup-hub.png and model-picker.png.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def fill_cache(home: Path, work: Path) -> None:
    import hub_fixtures as hf

    model = hf.make_tiny_chat_model(work / "model")
    hf.cache_model(home, "Qwen/Qwen2.5-0.5B-Instruct", model)
    hf.cache_dataset(home, "openai/gsm8k", hf.make_gsm8k_parquet_pair(work / "data"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="hub-shots-"))
    os.environ["HF_HOME"] = str(work / "hf_home")
    os.environ["HF_HUB_OFFLINE"] = "1"
    fill_cache(work / "hf_home", work)

    from PySide6.QtWidgets import QApplication

    from bench.camera import Camera
    from workbench.main_window import MainWindow
    from workbench.settings import Settings

    app = QApplication.instance() or QApplication(sys.argv[:1])
    camera = Camera(app, args.out, settle_s=0.6)
    window = MainWindow(Settings(runs_folder=str(work / "runs")), settings_path=work / "settings.json")
    window.ask = lambda title, text, choices: "Discard" if "Discard" in choices else choices[0]
    window.resize(1600, 1000)
    window.show()
    window.presets.open_bundled(ROOT / "presets" / "hub" / "grpo-gsm8k-qwen2.5-0.5b.yaml")
    # The stand-in GSM8K has 8 test rows (the real one 1,319): hold out 8, typed as a user would.
    # and the stand-in model's context is 512 tokens (Qwen2.5's 32,768): shorter completions.
    for path, value in (("data.num_eval", "8"), ("algorithm.max_completion_length", "256")):
        editor = window.setup.editor(path)
        editor.line.setText(value)
        editor.line.textEdited.emit(value)
    window.setup.validate_now()
    camera.settle(2.0)
    window.setup.scroll.verticalScrollBar().setValue(window.setup.scroll.verticalScrollBar().maximum())
    camera.shot(window, "setup-hub.png")

    window.setup.cache_buttons["model.name_or_path"].click()
    picker = window.setup.cache_picker
    deadline = time.monotonic() + 30
    while picker.table.rowCount() == 0 and time.monotonic() < deadline:
        camera.settle(0.2)
    camera.shot(picker, "model-picker.png")
    picker.reject()
    window.close()


if __name__ == "__main__":
    main()
