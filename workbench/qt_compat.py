"""A guard against a reference-counting bug in some PySide6 builds on Python < 3.12.

PySide6 6.12.0 on CPython 3.11 (the build in this project's environment) returns
`None` from every void method, and passes `True` to every signal emission, without
taking a reference: each call lowers the reference count of `None` or `True` by one.
Python 3.12+ does not care (those objects are immortal there), but on 3.11 the count
reaches zero after some tens of thousands of Qt calls (pyqtgraph makes hundreds a
redraw) and the interpreter aborts with "Fatal Python error: none_dealloc".

`install()` checks whether the running PySide6 has the bug and, if it does, gives
None, True and False a reference count no process can drain, which is what Python
3.12 does for them anyway. On an unaffected PySide6 or Python it does nothing. Every
workbench module that uses Qt imports this module first.
"""

from __future__ import annotations

import ctypes
import sys

_BALLAST = 1 << 40  # a trillion calls: more than any session makes
_installed = False
affected: bool | None = None


def _leaks() -> bool:
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        fired = Signal(bool)

    probe = _Probe()
    probe.fired.connect(lambda _value: None)
    none_before, true_before = sys.getrefcount(None), sys.getrefcount(True)
    for _ in range(50):
        probe.setObjectName("probe")  # a void method: returns None
        probe.fired.emit(True)
    return sys.getrefcount(None) < none_before - 25 or sys.getrefcount(True) < true_before - 25


def install() -> bool:
    """Returns whether the guard was needed (and is now in place)."""
    global _installed, affected
    if _installed or sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return bool(affected)
    _installed = True
    affected = _leaks()
    if affected:
        for value in (None, True, False):
            # ob_refcnt is the first field of every CPython object.
            ctypes.c_ssize_t.from_address(id(value)).value += _BALLAST
    return affected


install()
