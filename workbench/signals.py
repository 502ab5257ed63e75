"""A minimal callback signal for the Qt-free models.

Models (the preset document, run data) hold state and announce changes; views
subscribe. Keeping models free of Qt lets them be tested without a QApplication and
keeps the rule "state in models, drawing in views" easy to follow.
"""

from __future__ import annotations

from typing import Any, Callable


class Signal:
    """`connect(fn)`, `disconnect(fn)`, `emit(*args)`; slots run in connection order.

    >>> seen = []
    >>> s = Signal()
    >>> s.connect(seen.append)
    >>> s.emit(3)
    >>> seen
    [3]
    """

    def __init__(self) -> None:
        self._slots: list[Callable[..., Any]] = []

    def connect(self, slot: Callable[..., Any]) -> None:
        if slot not in self._slots:
            self._slots.append(slot)

    def disconnect(self, slot: Callable[..., Any]) -> None:
        if slot in self._slots:
            self._slots.remove(slot)

    def emit(self, *args: Any) -> None:
        for slot in list(self._slots):
            slot(*args)
