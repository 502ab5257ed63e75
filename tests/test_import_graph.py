"""The layering rules, read from the source (no import runs):

* no import circles among the engine's modules, counting imports made inside functions
  (a lazy import that dodges a circle at load time still ties the two modules together);
* the workbench never imports torch, transformers or peft at module level (a function may,
  where it needs them: see test_boundaries.py for what a window's import pulls in);
* the engine never imports the workbench or Qt;

The workbench's Qt-free models (inspector, set-up, runs, dashboard) are kept free of Qt
by an import-linter contract in pyproject.toml (tests/test_layers.py runs it).

An edge goes to the module an import names (``from engine.rewards import x`` is an edge to
``engine.rewards``, and to ``engine.rewards.x`` too when ``x`` is a submodule), not to the
packages above it; imports under ``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import repo_tool

ROOT = Path(__file__).resolve().parents[1]
FLOORS = repo_tool("import_floors")  # its Tarjan's and its reading of `if TYPE_CHECKING:`


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(package: str) -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))}


def imports(path: Path, module: str, *, top_level_only: bool = False, type_checking: bool = False) -> set[str]:
    """Every module ``path`` imports (absolute names), relative imports resolved
    (`type_checking`: those under ``if TYPE_CHECKING:`` too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and FLOORS.is_type_checking(node) and not type_checking:
            for child in node.orelse:
                visit(child)
            return
        if top_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)  # submodules; filtered later
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def engine_graph(package: str = "engine", type_checking: bool = False) -> dict[str, set[str]]:
    modules = package_modules(package)
    graph = {}
    for name, path in modules.items():
        graph[name] = (imports(path, name, type_checking=type_checking) & set(modules)) - {name}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, sorted (the same
    Tarjan's that tools/import_floors.py counts the engine's circles with)."""
    return FLOORS.strongly_connected(graph)


def _circle(graph: dict[str, set[str]], members: list[str]) -> str:
    """One import path around a strongly connected component, for the message."""
    inside = set(members)
    start = members[0]
    path, seen = [start], {start}
    while True:
        nexts = sorted(t for t in graph[path[-1]] if t in inside)
        if start in nexts and len(path) > 1:
            return " -> ".join(path + [start])
        step = next((t for t in nexts if t not in seen), None)
        if step is None:
            return " <-> ".join(members)
        path.append(step)
        seen.add(step)


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    # The reader itself: a function-level import counts, TYPE_CHECKING does not.
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import engine.model.loading\n"
        "def f():\n    from engine.rewards import model\n"
    )
    found = imports(source, "engine.x")
    assert "engine.rewards.model" in found and "engine.model.loading" not in found
    assert "engine.rewards.model" not in imports(source, "engine.x", top_level_only=True)
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles_in_the_engine():
    graph = engine_graph()
    assert "engine.rewards.kinds" in graph and "engine.preset.schema" in graph
    cycles = find_cycles(graph)
    assert not cycles, "import circles in engine/:\n" + "\n".join(_circle(graph, c) for c in cycles)


def test_no_import_circles_in_the_workbench_views():
    """A view takes what it needs (a document, callbacks), never its parent: no two
    workbench modules import each other, type-only imports included (the set-up form's
    child views once took their panel: panel <-> rewards_editor <-> section_form)."""
    graph = engine_graph("workbench", type_checking=True)
    assert "workbench.setup.panel" in graph and "workbench.main_window" in graph
    views = ("workbench.setup.", "workbench.window.", "workbench.playground.", "workbench.main_window")
    # (The inspector's Qt-free records name each other's types for annotations only.)
    cycles = [c for c in find_cycles(graph) if any(m.startswith(views) for m in c)]
    assert not cycles, "import circles in workbench/:\n" + "\n".join(_circle(graph, c) for c in cycles)


@pytest.mark.parametrize("package, forbidden, top_level_only", [
    ("workbench", ("torch", "transformers", "peft"), True),
    ("engine", ("workbench", "PySide6", "PyQt5", "PyQt6", "pyqtgraph"), False),
])
def test_layering(package, forbidden, top_level_only):
    offenders = [
        f"{name} imports {target}"
        for name, path in package_modules(package).items()
        for target in sorted(imports(path, name, top_level_only=top_level_only))
        if target.split(".")[0] in forbidden
    ]
    assert not offenders, "\n".join(offenders)
