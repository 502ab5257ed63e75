"""Counts the engine's imports that run back up its floors, and its import circles.

    .venv/bin/python tools/import_floors.py          # the counts
    .venv/bin/python tools/import_floors.py -v       # and each arrow and circle

FLOORS names the engine's packages from the bottom up (docs/architecture.md, "The
engine's floors"); packages on one floor may not import each other either way.
An arrow running back up is an import from a module on a lower floor of a module on a
higher one (or across one floor); "package-level" counts the imports at a module's
top level, "function-level" those inside a function. An import under
`if TYPE_CHECKING:` is read by type checkers only and is counted by neither.
A circle is a set of engine modules that import each other round (a strongly connected
component of the module graph, function-level imports included).
tests/test_layers.py holds both counts at 0; import-linter's layers contract in
pyproject.toml holds the same floors.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# From the bottom up; a tuple is one floor of packages that do not import each other.
FLOORS = [
    ("foundation",),
    ("hub",),
    ("data",),
    ("builtin_model",),
    ("model",),
    ("rewards",),
    ("rl",),
    ("alarms", "episodes"),
    ("run",),
    ("distributed",),
    ("algorithms",),
    ("preset",),
    ("reward_report", "evaluate"),
    ("commands",),
    ("cli",),
    ("__main__",),
]


def floor_of(package: str) -> int:
    for i, floor in enumerate(FLOORS):
        if package in floor:
            return i
    return len(FLOORS)  # the engine's own __init__ and anything unlisted: the top


def module_names(root: Path) -> dict[str, Path]:
    names = {}
    for path in sorted((root / "engine").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def is_type_checking(node: ast.If) -> bool:
    """Whether an `if` is `if TYPE_CHECKING:` (its imports never run)."""
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(module: str, path: Path, modules: dict[str, Path]):
    """(imported engine module, line, function-level, implicit) for each import in the
    file; implicit: a package whose __init__ the import runs first."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def add(target: str, line: int, in_function: bool):
        # Importing engine.a.b.c runs engine.a's and engine.a.b's __init__ first.
        found.append((target, line, in_function, False))
        parts = target.split(".")
        for i in range(2, len(parts)):
            name = ".".join(parts[:i])
            if name in modules and not (module == name or module.startswith(name + ".")):
                found.append((name, line, in_function, True))

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and is_type_checking(child):
                for sub in child.orelse:
                    visit(sub, in_function)
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    target = resolve(alias.name)
                    if target:
                        add(target, child.lineno, in_function)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[:len(base) - child.level + 1]
                    name = ".".join(base + ([child.module] if child.module else []))
                else:
                    name = child.module or ""
                if not name.startswith("engine"):
                    continue
                for alias in child.names:
                    target = resolve(f"{name}.{alias.name}") if f"{name}.{alias.name}" in modules else resolve(name)
                    if target:
                        add(target, child.lineno, in_function)
            visit(child, inner)

    visit(tree, False)
    return sorted(set(found))


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "engine"


def graph(root: Path = ROOT):
    modules = module_names(root)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def arrows_back_up(edges) -> list[tuple[str, str, int, bool]]:
    """(module, imported module, line, function-level) for each import from a lower floor
    to a higher one, or between two packages of one floor."""
    found = []
    for module, targets in edges.items():
        a = package_of(module)
        for target, line, in_function, implicit in set((t, line, fn, imp) for t, line, fn, imp in targets):
            b = package_of(target)
            if implicit:
                continue
            if a == b or a == "engine":
                continue
            if floor_of(a) < floor_of(b) or (floor_of(a) == floor_of(b)):
                found.append((module, target, line, in_function))
    return found


def circles(edges) -> list[list[str]]:
    """The engine's import circles: the strongly connected components of its module graph."""
    return strongly_connected({m: {t for t, _, _, _ in targets if t != m} for m, targets in edges.items()})


def strongly_connected(graph) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's, iterative: no
    recursion limit), each sorted, in sorted order; `graph`: node -> the nodes it points at
    (a target that is not a node is left out). tests/test_import_graph.py uses it too.

    >>> strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    [['a', 'b', 'c']]
    """
    adjacency = {node: sorted(targets) for node, targets in graph.items()}
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = 0
    for start in adjacency:
        if start in index:
            continue
        work = [(start, iter(adjacency[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in adjacency:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(adjacency[nxt])))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return sorted(result)


def package_imports(edges) -> set[tuple[str, str]]:
    """The distinct package-level (top-level) imports from one engine package to another."""
    return {(package_of(m), package_of(t)) for m, targets in edges.items() for t, _, fn, _ in targets
            if not fn and package_of(m) != package_of(t) and package_of(m) != "engine"}


def registry_classes(root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted((root / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name == "Registry":
                found.append(str(path.relative_to(root)))
    return found


def main(argv: list[str]) -> int:
    edges = graph()
    up = arrows_back_up(edges)
    top = [a for a in up if not a[3]]
    pairs = package_imports(edges)
    up_pairs = {(package_of(m), package_of(t)) for m, t, _, fn in up if not fn}
    loops = circles(edges)
    print(f"package-level imports between engine packages: {len(pairs)} distinct package pairs, "
          f"{len(up_pairs)} of them running back up")
    print(f"arrows running back up: {len(top)} package-level, {len(up) - len(top)} function-level")
    print(f"import circles: {len(loops)} (modules in them: {sum(len(c) for c in loops)})")
    print(f"classes named Registry: {len(registry_classes())}")
    if "-v" in argv:
        for module, target, line, fn in up:
            print(f"  up {'(function) ' if fn else ''}{module}:{line} -> {target}")
        for pair in sorted(up_pairs):
            print(f"  up package pair {pair[0]} -> {pair[1]}")
        for loop in loops:
            print("  circle: " + " ".join(loop))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
