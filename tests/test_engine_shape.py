"""The engine's shape, read from the source: its root holds only entry points and
packages, and no module grows past what a reader takes in at once (~500 lines; a module
that outgrows it is split where its concepts part)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "engine"
ENTRY_POINTS = {"__init__.py", "__main__.py", "cli.py"}
MOST_LINES = 520  # "about 500": a few lines of slack, not a second module's worth


def test_the_engine_root_holds_only_entry_points_and_packages():
    files = {p.name for p in ENGINE.glob("*.py")}
    assert files == ENTRY_POINTS, f"modules at engine/'s root belong in a package: {sorted(files - ENTRY_POINTS)}"
    packages = [p for p in ENGINE.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert packages and all((p / "__init__.py").is_file() for p in packages), \
        [p.name for p in packages if not (p / "__init__.py").is_file()]


def test_no_engine_module_is_over_about_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted(ENGINE.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MOST_LINES}
    assert not long, f"split these where their concepts part: {long}"
