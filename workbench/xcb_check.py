"""Before Qt starts on X11: are the shared libraries of Qt's xcb platform plugin there?

When one is missing, Qt aborts with its own message, which names `libxcb-cursor0` whatever
is actually missing. This module asks the dynamic linker (`ldd` on the plugin, which
resolves its libQt6XcbQpa and everything below) which libraries are not found, and names
the Debian/Ubuntu packages to install, in one line. No Qt is imported here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

# Shared library (soname) -> the Debian / Ubuntu package that ships it.
PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xinput.so.0": "libxcb-xinput0",
    "libxcb-glx.so.0": "libxcb-glx0",
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libSM.so.6": "libsm6",
    "libICE.so.6": "libice6",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libOpenGL.so.0": "libopengl0",
    "libGLX.so.0": "libglx0",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
}

_NOT_FOUND = re.compile(r"^\s*(\S+)\s*=>\s*not found", re.MULTILINE)


def missing_libraries(ldd_output: str) -> list[str]:
    """The sonames `ldd` reports as not found, once each, in order.

    >>> missing_libraries("\\tlibxcb-icccm.so.4 => not found\\n\\tlibc.so.6 => /lib/libc.so.6 (0x1)\\n"
    ...                   "\\tlibxcb-icccm.so.4 => not found\\n")
    ['libxcb-icccm.so.4']
    """
    out: list[str] = []
    for name in _NOT_FOUND.findall(ldd_output):
        if name not in out:
            out.append(name)
    return out


def packages_for(libraries: list[str]) -> list[str]:
    """The packages that provide `libraries` (a library with no known package is named
    as it is), once each.

    >>> packages_for(["libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libfoo.so.3"])
    ['libxcb-icccm4', 'libxcb-keysyms1', 'libfoo.so.3']
    """
    out: list[str] = []
    for lib in libraries:
        package = PACKAGES.get(lib, lib)
        if package not in out:
            out.append(package)
    return out


def message_for(ldd_output: str) -> str | None:
    """One line naming what to install, from `ldd` on the xcb plugin; None when nothing
    is missing.

    >>> print(message_for("\\tlibxcb-keysyms.so.1 => not found\\n"))  # doctest: +ELLIPSIS
    rl-workbench: ... missing libxcb-keysyms.so.1. Install: sudo apt-get install libxcb-keysyms1 (or ...)
    """
    missing = missing_libraries(ldd_output)
    if not missing:
        return None
    return (f"rl-workbench: Qt's X11 (xcb) platform plugin cannot load, missing {', '.join(missing)}. "
            f"Install: sudo apt-get install {' '.join(packages_for(missing))} "
            "(or run without a display: QT_QPA_PLATFORM=offscreen)")


def will_use_xcb(env: dict | None = None, platform: str | None = None) -> bool:
    """Whether Qt will pick its xcb plugin: Linux, QT_QPA_PLATFORM unset or xcb, and a
    DISPLAY to connect to (without one Qt says so clearly itself).

    >>> will_use_xcb({"DISPLAY": ":0"}, "linux"), will_use_xcb({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, "linux")
    (True, False)
    >>> will_use_xcb({}, "linux"), will_use_xcb({"DISPLAY": ":0"}, "darwin")
    (False, False)
    """
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux") or not env.get("DISPLAY"):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "").split(":", 1)[0].strip()
    if not chosen and env.get("WAYLAND_DISPLAY") and env.get("XDG_SESSION_TYPE") == "wayland":
        return False  # Qt 6 prefers wayland in a wayland session
    return chosen in ("", "xcb")


def xcb_plugin() -> Path | None:
    """PySide6's platforms/libqxcb.so, found without importing Qt."""
    import importlib.util

    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for candidate in (Path(folder) / "Qt" / "plugins" / "platforms" / "libqxcb.so",
                          Path(folder) / "plugins" / "platforms" / "libqxcb.so"):
            if candidate.exists():
                return candidate
    return None


def run_ldd(path: Path) -> str:
    """`ldd PATH`'s output ("" when ldd is not there or fails)."""
    try:
        result = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout + result.stderr


def check(env: dict | None = None) -> str | None:
    """The one-line message when Qt will use xcb and a library it needs is missing;
    None otherwise (or when this cannot be checked)."""
    if not will_use_xcb(env):
        return None
    plugin = xcb_plugin()
    if plugin is None:
        return None
    return message_for(run_ldd(plugin))
