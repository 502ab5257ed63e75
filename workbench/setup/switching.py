"""What switching the algorithm in the set-up form keeps: values of the algorithm left that
the new one also has and accepts, and a default completion length that fits the model's
context. No Qt; the document (workbench.setup.document) calls it.
"""

from __future__ import annotations

from typing import Any

from workbench.setup import schema

COMPLETION = "max_completion_length"  # the algorithm field a sequence's room in the context bounds


def same_value(a: Any, b: Any) -> bool:
    """Values equal as the preset reads them: 1 and 1.0 are one number, True is not 1.

    >>> same_value(1, 1.0), same_value(True, 1), same_value([1], [1]), same_value("1", 1)
    (True, False, True, False)
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def switched_section(name: str, current: dict, room: int | None = None) -> dict:
    """Algorithm `name`'s section after a switch from `current` (another algorithm's
    section): its defaults; each value of `current` that differs from its own algorithm's
    default (the user's or the preset's) kept where `name` has that field and accepts the
    value; a default max_completion_length longer than `room` (the context the longest
    prompt leaves) cut to it, so no field the user never touched turns red.

    >>> switched_section("dpo", {"name": "grpo", "max_completion_length": 40, "beta": 0.0})["max_completion_length"]
    40
    >>> switched_section("dpo", {"name": "ppo", "max_completion_length": 53}, room=110)["max_completion_length"]
    110
    >>> switched_section("dpo", {"name": "grpo", "temperature": 0.5})["beta"]  # beta at GRPO's default: DPO's own
    0.1
    """
    from pydantic import ValidationError

    models, tag = schema.algorithm_models(), schema.algorithm_tag()
    model, section = models[name], schema.algorithm_defaults(name)
    old = current.get(tag)
    old_defaults = schema.algorithm_defaults(old) if old in models else {}
    carried = set()
    for key, value in current.items():
        if key == tag or key not in model.model_fields or key not in old_defaults \
                or same_value(value, old_defaults[key]):
            continue
        trial = {**section, key: value}
        try:
            model.model_validate(trial)
        except ValidationError:
            continue  # another algorithm's range or choices: this one's default stays
        section, carried = trial, carried | {key}
    length = section.get(COMPLETION)
    if COMPLETION not in carried and isinstance(room, int) and room >= 1 and isinstance(length, int) and length > room:
        section[COMPLETION] = room
    return section


def fitted_default(name: str, value: Any, room: int | None) -> int | None:
    """`room`, when `value` is algorithm `name`'s default completion length and longer than
    it (a switch made before the prompts were counted: cut once they are); else None.

    >>> fitted_default("dpo", 256, 110), fitted_default("dpo", 100, 110), fitted_default("dpo", 300, 110)
    (110, None, None)
    """
    models = schema.algorithm_models()
    default = schema.algorithm_defaults(name).get(COMPLETION) if name in models else None
    if isinstance(room, int) and room >= 1 and isinstance(value, int) and same_value(value, default) and value > room:
        return room
    return None
