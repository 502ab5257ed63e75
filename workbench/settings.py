"""The window's own settings: runs folder, recently used presets, how long Stop waits.
A small JSON file, no Qt (so tests point it at a temporary folder with one variable).

Location: $RL_WORKBENCH_CONFIG_DIR, else $XDG_CONFIG_HOME/rl-workbench, else
~/.config/rl-workbench.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workbench.setup.checks import REPO_ROOT

MAX_RECENT = 10


def config_dir() -> Path:
    if os.environ.get("RL_WORKBENCH_CONFIG_DIR"):
        return Path(os.environ["RL_WORKBENCH_CONFIG_DIR"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rl-workbench"


def default_runs_folder() -> Path:
    """`runs/` in the working directory, where `rl-engine run` writes by default, so
    runs started from a terminal and from the window land together."""
    return Path.cwd() / "runs"


def bundled_presets() -> list[Path]:
    """The presets shipped in the repository's presets/ folder."""
    return sorted((REPO_ROOT / "presets").glob("*.yaml"))


@dataclass
class Settings:
    runs_folder: str = ""
    recent_presets: list[str] = field(default_factory=list)
    # Stop writes `stop` to the engine, which finishes its step and saves a checkpoint;
    # only after this long is it terminated, then killed.
    stop_timeout_s: float = 120.0
    smoothing: float = 0.6

    @property
    def runs_path(self) -> Path:
        return Path(self.runs_folder).expanduser() if self.runs_folder else default_runs_folder()

    def add_recent(self, path: str | Path) -> None:
        text = str(Path(path).resolve())
        self.recent_presets = [text] + [p for p in self.recent_presets if p != text]
        del self.recent_presets[MAX_RECENT:]

    @classmethod
    def load(cls, path: Path | None = None) -> "Settings":
        path = path or config_dir() / "settings.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__} if isinstance(data, dict) else {}
        try:
            return cls(**known)
        except TypeError:
            return cls()

    def save(self, path: Path | None = None) -> None:
        path = path or config_dir() / "settings.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")
            tmp.replace(path)
        except OSError:
            pass  # settings are a convenience; a read-only home must not break the window


# The set-up form's advanced groups that the user unfolded (the others stay folded). A file
# of its own: the window writes settings.json at close from the copy it loaded, which would
# put back a state changed meanwhile by the form.
FORM_FILE = "setup-form.json"


def unfolded_groups(path: Path | None = None) -> set[str]:
    """The keys of the set-up form's groups left unfolded (none when nothing was saved)."""
    try:
        data = json.loads((path or config_dir() / FORM_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    keys = data.get("unfolded") if isinstance(data, dict) else None
    return {k for k in keys if isinstance(k, str)} if isinstance(keys, list) else set()


def save_unfolded_groups(keys: set[str], path: Path | None = None) -> None:
    path = path or config_dir() / FORM_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"unfolded": sorted(keys)}), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a convenience, as the settings are
