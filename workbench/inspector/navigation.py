"""Which step, rollout, quantity and scale scope the inspector shows, and the moves
between them (←/→ rollouts, ↑/↓ steps, a typed step, following a live run), and which
prompt the Prompt history page follows. No Qt: the views ask this model where to go
and draw what it holds.

>>> nav = Navigation()
>>> nav.current is None, nav.next_position(), nav.neighbour_step(+1)
(True, None, None)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from workbench.run_declaration import declaration_of
from workbench.inspector.records import text_display

if TYPE_CHECKING:
    from workbench.inspector.index import TrajectoryIndex
    from workbench.inspector.records import Trajectory

SCOPE_STEP, SCOPE_ROLLOUT = "step", "rollout"


@dataclass(frozen=True)
class Target:
    """Where a request to show one rollout lands: the step and record to open (step
    None: nowhere, the run has no records), whether it was `found`, whether to show the
    Group page, and what to tell the user ('' when found)."""

    step: int | None
    index: int | None
    found: bool
    group_page: bool = False
    message: str = ""


class Navigation:
    """The inspector's selection over a run's step files (`index`): the shown `step`,
    its `records`, the `position` of the shown one among them (-1: none), the quantity
    `key` to colour by, the scale's `scope` and the `selected` token (-1: none)."""

    def __init__(self, index: TrajectoryIndex | None = None):
        self.index = index
        self.step: int | None = None
        self.records: list[Trajectory] = []
        self.position = -1
        self.key = "advantage"
        self.scope = SCOPE_STEP
        self.selected = -1

    def reset(self, index: TrajectoryIndex | None) -> None:
        """Another run: nothing shown (the quantity and scope stay)."""
        self.index = index
        self.step = None
        self.records = []
        self.position = -1

    @property
    def steps(self) -> list[int]:
        return self.index.steps if self.index is not None else []

    @property
    def current(self) -> Trajectory | None:
        return self.records[self.position] if 0 <= self.position < len(self.records) else None

    @property
    def current_index(self) -> int | None:
        """The shown record's index (kept when moving to another step)."""
        current = self.current
        return current.index if current is not None else None

    # ------------------------------------------------------------------ steps

    def open_step(self, step: int, index: int | None = None, keep_position: bool = False) -> bool:
        """Show a step's records: the record `index` if given and recorded, else the
        same position as before (keep_position) or the first. False (and nothing
        changed) when the step has no records."""
        if self.index is None:
            return False
        records = self.index.records(step)
        if not records:
            return False
        position = 0
        if index is not None:
            position = next((k for k, r in enumerate(records) if r.index == index), 0)
        elif keep_position and self.position >= 0:
            position = min(self.position, len(records) - 1)
        self.step, self.records, self.position = step, records, position
        return True

    def is_newest(self, step: int) -> bool:
        """Whether `step` is the newest on disk (showing it keeps following a live run;
        looking back stops following)."""
        return bool(self.steps) and step == self.steps[-1]

    def neighbour_step(self, direction: int) -> int | None:
        """The step on disk after (+1, ↓) or before (-1, ↑) the shown one; None at the ends."""
        if self.index is None or self.step is None:
            return None
        return self.index.neighbour_step(self.step, direction)

    def typed_step(self, value: int) -> int | None:
        """The step a typed value goes to: itself when recorded, else the nearest."""
        if not self.steps:
            return None
        return value if value in self.steps else self.index.nearest_step(value)

    def newest_step_to_follow(self) -> int | None:
        """Following switched on: the newest step, when another step is shown."""
        steps = self.steps
        return steps[-1] if steps and self.step != steps[-1] else None

    def step_to_show_after_poll(self, changed: bool, following: bool) -> tuple[int | None, bool]:
        """After the step files were polled: (step to open, whether to keep the
        position), or (None, False) to stay. A shown step that vanished goes to the
        newest, and so does a new step while following."""
        steps = self.steps
        if not steps:
            return None, False
        if self.step is None or self.step not in steps:
            return steps[-1], False
        if changed and following and steps[-1] != self.step:
            return steps[-1], True
        return None, False

    def rewritten(self) -> bool:
        """Whether the shown step's file was re-read since it was opened (a resume)."""
        return self.index is not None and self.step is not None and self.index.records(self.step) is not self.records

    def locate(self, step: int, index: int, group: int | None = None, recorded: int | None = None) -> Target:
        """Where showing rollout `index` of `step` goes (the samples table's double-click).
        Recorded: there. Else, when the step has records: the first recorded rollout of
        its `group` (known from the samples events) on the Group page, or the step's
        first; else the nearest recorded step. `recorded`: training.record_rollouts."""
        if self.index is None:
            return Target(None, None, False)
        if self.index.find(step, index) is not None:
            return Target(step, index, True)
        rule = f" (training.record_rollouts = {recorded}: the first {recorded} of each step)" if recorded else ""
        if step in self.index.steps:
            first = next((r.index for r in self.index.records(step) if group is not None and r.group == group), None)
            return Target(step, first, False, first is not None,
                          f"Rollout {index} of step {step} was not recorded token by token{rule}. "
                          + ("Its group is on the Group page, its text among them." if first is not None
                             else "Showing the step's recorded rollouts."))
        nearest = self.index.nearest_step(step)
        if nearest is None:
            return Target(None, None, False)
        return Target(nearest, None, False, False,
                      f"Step {step} has no token-level records{rule}; showing step {nearest}, the nearest that has.")

    # --------------------------------------------------------------- rollouts

    def position_of(self, index: int) -> int | None:
        """The position of the record `index` in the shown step, None if not there."""
        return next((k for k, r in enumerate(self.records) if r.index == index), None)

    def next_position(self) -> int | None:
        """→: the next record's position; None on the last."""
        return self.position + 1 if self.position + 1 < len(self.records) else None

    def prev_position(self) -> int | None:
        """←: the previous record's position; None on the first."""
        return self.position - 1 if self.position > 0 else None

    def pick(self, position: int) -> bool:
        """Show the record at `position`; True when that changed what is shown."""
        if 0 <= position < len(self.records) and position != self.position:
            self.position = position
            return True
        return False

    def moves(self) -> dict[str, bool]:
        """Which moves go somewhere from here: ↑ prev_step, ↓ next_step, ← prev_rollout,
        → next_rollout (the buttons are enabled by it)."""
        steps, step = self.steps, self.step
        return {"prev_step": bool(steps) and step is not None and step > steps[0],
                "next_step": bool(steps) and step is not None and step < steps[-1],
                "prev_rollout": self.position > 0,
                "next_rollout": 0 <= self.position < len(self.records) - 1}

    # -------------------------------------------------------------- quantity

    def fit_quantity(self, keys: list[str], preferred) -> str:
        """Keep the quantity when the shown record has it, else pick the first of the
        `preferred` ones it has (the record's declared ones; a string: an old run's
        algorithm), else its first ('' when it has none). Returns the key."""
        if self.key not in keys:
            if isinstance(preferred, str):
                preferred = declaration_of({"algorithm": preferred})["records"].get("preferred") or ()
            self.key = next((k for k in preferred if k in keys), keys[0] if keys else "")
        return self.key


class PromptChoice:
    """The prompt the Prompt history page shows: the shown rollout's while `following`,
    until the user picks or types another."""

    def __init__(self):
        self.prompt = ""
        self.following = True

    def reset(self) -> None:
        self.prompt = ""

    def follow(self, prompt: str) -> bool:
        """The shown rollout changed; True when the page should now show `prompt`."""
        if self.following and prompt != self.prompt:
            self.prompt = prompt
            return True
        return False

    def pick(self, prompt: str) -> bool:
        """The user chose a prompt: stop following; True when it is another prompt."""
        if prompt == self.prompt:
            return False
        self.following = False
        self.prompt = prompt
        return True

    def options(self, eval_samples) -> list[tuple[str, str]]:
        """(label, prompt) for the picker: the current prompt, then the held-out
        prompts of the first evaluation.

        >>> choice = PromptChoice(); choice.follow("a\\nb")
        True
        >>> choice.options([(10, [{"prompt": "q"}, {"prompt": "a\\nb"}])])
        [('a↵b', 'a\\nb'), ('held out: q', 'q')]
        """
        out = [(text_display(self.prompt), self.prompt)] if self.prompt else []
        seen = {self.prompt}
        for _step, items in (eval_samples or [])[:1]:
            for item in items:
                p = item.get("prompt") if isinstance(item, dict) else None
                if isinstance(p, str) and p not in seen:
                    seen.add(p)
                    out.append((f"held out: {text_display(p)}", p))
        return out
