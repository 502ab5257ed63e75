"""The Alarms panel: the `alarm` events of a run (the engine's watch over its own
metrics, docs/run-directory.md), each with what it saw, why it matters, what to try and
the numbers it is based on; links to the samples and recorded rollouts of its steps.

Model (no Qt): model (`Alarm`, read leniently from an event; colours; which recorded
rollout its steps lead to). Views (Qt): list_view (`AlarmList`), details
(`AlarmDetails`), panel (`AlarmsPanel`: the list, the details and the buttons, following
one run). The dashboard draws a marker per alarm (workbench/dashboard/markers.py).
Import the views from their modules (workbench.alarms.<module>): the package names none, so
importing a model pulls in no Qt.
"""
