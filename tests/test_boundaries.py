"""The two layers stay apart: the engine never imports Qt or the workbench, and the
workbench never imports the training stack (so the window opens fast, and a crash in
training never takes the window down)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "engine": {"PySide6", "PyQt5", "PyQt6", "pyqtgraph", "workbench"},
    "workbench": {"torch", "transformers", "peft"},
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_forbidden_imports_in_source(package):
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in sorted(imported_modules(path) & FORBIDDEN[package])
    ]
    assert not offenders, "\n".join(offenders)


def test_workbench_import_pulls_in_no_training_stack():
    # Transitively too: whatever the workbench imports from engine must stay torch-free.
    modules = [p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
               for p in (ROOT / "workbench").rglob("*.py") if p.name != "__main__.py"]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = sorted({'torch', 'transformers', 'peft'} & set(sys.modules))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def engine_modules_of_the_workbench() -> set[str]:
    """The engine modules the workbench's source imports, named below engine (`run.rundir`,
    `preset.schema`, `data`): `from engine.run import rundir` counts as run.rundir, a
    package's re-exported name as the package; lazy imports included."""
    def module_or_package(name: str) -> bool:
        path = ROOT.joinpath(*name.split("."))
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()

    found = set()
    for path in (ROOT / "workbench").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] != "engine":
                    continue
                submodules = [f"{node.module}.{a.name}" for a in node.names if module_or_package(f"{node.module}.{a.name}")]
                found.update(m.partition(".")[2] for m in (submodules or [node.module]))
            elif isinstance(node, ast.Import):
                found.update(a.name.partition(".")[2] for a in node.names if a.name.startswith("engine."))
    return found


def test_the_engine_modules_the_workbench_imports_are_the_ones_docs_list():
    # docs/architecture.md names them ("The torch-free engine modules it imports: ..."):
    # a new reach into the engine must be written there, so the list stays short and true.
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index("The torch-free engine modules it imports:")
    listed = text[start:text.index("\n- ", start)]
    documented = set(re.findall(r"`([a-z_.]+)`", re.sub(r"\(all but [^)]*\)", "", listed)))
    assert engine_modules_of_the_workbench() == documented
