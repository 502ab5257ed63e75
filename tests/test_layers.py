"""The layering rules of docs/architecture.md as import-linter contracts (pyproject.toml,
[tool.importlinter]): the engine never imports the workbench or Qt, the workbench never
imports torch/transformers/peft, and the workbench's Qt-free models never import PySide6
or pyqtgraph. Imports inside functions count."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout and "KEPT" in result.stdout
