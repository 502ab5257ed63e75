"""PySide6 6.12.0 on CPython 3.11 returns None from every void method, and passes True to
every signal emission, without taking a reference: each call lowers the reference count
of None or True by one, and after some tens of thousands of Qt calls (pyqtgraph makes
hundreds a redraw) the interpreter aborts with "Fatal Python error: none_dealloc".
pyproject.toml keeps PySide6 below 6.12 for that reason; this test fails on a PySide6
that has the bug, so the pin can only be raised to a version without it."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal


class _Probe(QObject):
    fired = Signal(bool)


def test_qt_calls_keep_the_reference_counts_of_none_and_true(qtbot):
    probe = _Probe()
    probe.fired.connect(lambda _value: None)
    none_before, true_before = sys.getrefcount(None), sys.getrefcount(True)
    for _ in range(200):
        probe.setObjectName("probe")  # a void method: returns None
        probe.fired.emit(True)
    # Python 3.12+ makes None and True immortal (their counts never move); on 3.11 a
    # leaking build loses 200 of each here, a sound one at most a few to other threads.
    assert sys.getrefcount(None) >= none_before - 25
    assert sys.getrefcount(True) >= true_before - 25
