"""Alarms that explain themselves: the engine watches its own metrics and evaluations
and writes `alarm` events saying what it saw (the numbers, over which steps), why it
matters and which preset fields to try (docs/run-directory.md has the event).

config.py     the preset's `alarms` section (thresholds)
detectors.py  one pure function per alarm: metric history in, a finding or None out
history.py    the history the detectors read, a Finding, a Kind, the words of their texts
exploitation.py  the alarm for a policy exploiting its learned reward (Goodhart)
watcher.py    AlarmWatcher: feeds the history, fires each alarm once until it clears
"""

from engine.alarms.config import AlarmsConfig
from engine.alarms.watcher import AlarmWatcher, alarm_event, alarm_line

__all__ = ["AlarmWatcher", "AlarmsConfig", "alarm_event", "alarm_line"]
