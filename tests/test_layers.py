"""The layering rules of docs/architecture.md as import-linter contracts (pyproject.toml,
[tool.importlinter]): the engine's floors (no import runs back up), the engine never
imports the workbench or Qt, the workbench never imports torch/transformers/peft, and the
workbench's Qt-free models never import PySide6 or pyqtgraph. Imports inside functions
count. tools/import_floors.py counts the same floors' arrows and the engine's import
circles on its own."""

import subprocess
import sys
from pathlib import Path

from conftest import repo_tool

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout and "KEPT" in result.stdout


def _import_floors():
    return repo_tool("import_floors")


def test_no_import_runs_back_up_and_none_goes_round():
    floors = _import_floors()
    edges = floors.graph(ROOT)
    assert floors.arrows_back_up(edges) == []
    assert floors.circles(edges) == []


def test_the_floors_are_the_contracts_layers():
    """tools/import_floors.py and the layers contract name the same floors."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    layers = [tuple(name.strip().removeprefix("engine.") for name in layer.split("|"))
              for layer in reversed(contract["layers"])]
    assert layers == [tuple(floor) for floor in _import_floors().FLOORS]


def test_one_registry_class():
    assert _import_floors().registry_classes(ROOT) == ["engine/foundation/registry.py"]
