"""AlarmWatcher: the engine's watch over its own run. It is fed every step's metrics and
every evaluation, runs the detectors (engine/alarms/detectors.py), and returns the
`alarm` events to write. An alarm fires once when its condition begins and again only
after the condition has stayed clear for `alarms.window` steps, so a run that stays flat
(or flickers around a threshold) writes one alarm, not one a step. Each skipped
non-finite step is its own alarm.

A resumed run rebuilds the watch from the run's own events (`replay`): the metrics and
evaluations logged so far, and the alarms already written, which are not written again.
"""

from __future__ import annotations

from engine.alarms.config import AlarmsConfig
from engine.alarms.detectors import DETECTORS, KINDS, Finding, History

__all__ = ["AlarmWatcher", "alarm_event", "alarm_line"]

# Evaluations are not step metrics: they wake only the detectors that read them.
_EVAL_DETECTORS = ("length_drift", "eval_falling", "reward_model_exploited")


def alarm_event(kind: str, finding: Finding, step: int, algorithm_fields=None) -> dict:
    """The fields of an `alarm` event (docs/run-directory.md). `algorithm_fields`: the names
    in the run's algorithm section, when known; advice naming an `algorithm.` field the
    section lacks (GRPO's num_iterations in a KTO run) is left out.

    e.g. kind update_against_advantage, algorithm_fields {"beta", "loss_type"}
         -> try: training.learning_rate, algorithm.beta (num_iterations and epsilon left out)
    """
    k = KINDS[kind]
    advice = [(f, a) for f, a in finding.try_fields or k.try_fields
              if algorithm_fields is None or not f.startswith("algorithm.")
              or f.removeprefix("algorithm.") in algorithm_fields]
    return {"step": step, "kind": kind, "title": k.title, "began": finding.began,
            "steps": [finding.began, finding.end], "metric": finding.metric, "saw": finding.saw,
            "why": k.why, "try": [{"field": f, "advice": a} for f, a in advice],
            "evidence": finding.evidence, **({"samples": finding.samples} if finding.samples else {})}


def alarm_line(event: dict) -> str:
    """The warning line the CLI prints for an alarm."""
    fields = ", ".join(t["field"] for t in event["try"])
    return f"alarm at step {event['step']}: {event['title']}: {event['saw']}. {event['why']} Try: {fields}."


class AlarmWatcher:
    """`algorithm_fields`: the field names of the run's algorithm section (its alarms then
    advise only fields it has); None: every kind's advice as written. `rewards`: the labels
    of the run's learned rewards and of their checks (the exploitation alarm's)."""

    def __init__(self, cfg: AlarmsConfig, algorithm_fields=None, rewards: tuple[list[str], list[str]] = ([], [])):
        self.cfg = cfg
        self.algorithm_fields = None if algorithm_fields is None else frozenset(algorithm_fields)
        self.history = History(learned_rewards=list(rewards[0]), check_rewards=list(rewards[1]))
        self.last_held: dict[str, int] = {}  # kind -> the last step its condition held

    @classmethod
    def for_preset(cls, preset) -> "AlarmWatcher":
        """The watch a preset sets: its alarms section; advice for its algorithm's fields;
        its learned rewards and their checks (engine.rewards.kinds.learned_and_checks)."""
        from engine.rewards.kinds import learned_and_checks

        return cls(preset.alarms, type(preset.algorithm).model_fields, learned_and_checks(preset.rewards))

    def observe_metrics(self, step: int, metrics: dict) -> list[dict]:
        if not self.cfg.enabled:
            return []
        self.history.steps.append(step)
        self.history.metrics.append(metrics)
        return self._check(step, list(DETECTORS))

    def explain_nonfinite(self, step: int, field: str, message: str) -> None:
        """Step `step` is skipped because a user's function (the preset `field` names it)
        returned NaN or inf: its nonfinite_steps alarm says so, and points at the field."""
        self.history.nonfinite_causes[step] = (field, message)

    def observe_eval(self, step: int, result: dict) -> list[dict]:
        if not self.cfg.enabled:
            return []
        self.history.evals.append((step, result))
        return self._check(step, list(_EVAL_DETECTORS))

    def _check(self, step: int, kinds: list[str]) -> list[dict]:
        fired = []
        for kind in kinds:
            finding = DETECTORS[kind](self.history, self.cfg)
            if finding is None:
                continue
            held = self.last_held.get(kind)
            self.last_held[kind] = step
            if held is None or step - held > self.cfg.window or kind == "nonfinite_steps":
                fired.append(alarm_event(kind, finding, step, self.algorithm_fields))
        return fired

    def replay(self, events: list[dict], until_step: int) -> None:
        """Rebuild the watch from a run's events up to `until_step` (a resumed run's
        checkpoint): its metrics, evaluations and alarms (kinds already fired stay quiet
        until they clear)."""
        if not self.cfg.enabled:
            return
        metrics, evals = {}, {}  # a step logged again after an earlier resume: its last event counts
        for event in events:
            step = event.get("step")
            if isinstance(step, int) and step <= until_step:
                if event.get("type") == "metrics":
                    metrics[step] = event
                elif event.get("type") == "eval":
                    evals[step] = event
                elif event.get("type") == "alarm" and event.get("kind") in DETECTORS:
                    self.last_held[event["kind"]] = step
        for step in sorted(metrics):
            self.history.steps.append(step)
            self.history.metrics.append(metrics[step])
        self.history.evals.extend(sorted(evals.items()))
        for kind, detect in DETECTORS.items():
            if kind in self.last_held and detect(self.history, self.cfg) is not None:
                self.last_held[kind] = until_step  # still holding at the checkpoint: no second alarm
