"""The Alarms panel: the `alarm` events of a run (the engine's watch over its own
metrics, docs/run-directory.md), each with what it saw, why it matters, what to try and
the numbers it is based on; links to the samples and recorded rollouts of its steps.

Model (no Qt): model (`Alarm`, read leniently from an event; colours; which recorded
rollout its steps lead to). Views (Qt): list_view (`AlarmList`), details
(`AlarmDetails`), panel (`AlarmsPanel`: the list, the details and the buttons, following
one run). The dashboard draws a marker per alarm (workbench/dashboard/markers.py).

The view names below load on first use, so importing the model pulls in no Qt.
"""

from __future__ import annotations

_VIEW_NAMES = {"AlarmsPanel": "panel", "AlarmList": "list_view", "AlarmDetails": "details"}

__all__ = sorted(_VIEW_NAMES)


def __getattr__(name: str):
    if name in _VIEW_NAMES:
        import importlib

        return getattr(importlib.import_module(f"workbench.alarms.{_VIEW_NAMES[name]}"), name)
    raise AttributeError(f"module 'workbench.alarms' has no attribute {name!r}")
