"""Verifiable reward functions for GRPO.

A reward function has the same shape as a TRL reward function::

    reward(prompts: list[str], completions: list[str], **fields) -> list[float]

Each keyword field (``answer`` and any other dataset column) is a list aligned
with ``prompts``.  Rewards must accept fields they do not use, because the
engine passes every column to every reward.

Rewards are built from *factories* in :data:`REWARDS`; a factory takes
keyword-only options (all with defaults) and returns the reward callable, so a
preset can name a reward plus options and :func:`build_reward` checks them.

A preset's ``rewards`` entry names one of three kinds (:func:`reward_kind`):

* a registry reward: ``exact_match``, ``numeric_match``, ... (this module);
* ``reward_model``: a Hugging Face sequence-classification model whose single
  logit is the reward (engine/reward_model.py; options :data:`REWARD_MODEL_OPTIONS`);
* ``FILE.py:FUNCTION``: the user's own Python function (engine/custom_reward.py),
  called like a registry reward with the entry's options as keyword arguments.

:func:`build_reward_components` turns the whole list into the
``(label, weight, reward)`` triples that :func:`combine_rewards` sums.

This module deliberately does not import torch (the reward model's module does,
and is imported only when a preset uses one).

Example:
    >>> reward = build_reward("exact_match")
    >>> reward(["sort 2 1 ="], [" 1 2"], answer=[" 1 2"])
    [1.0]
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
import re
import traceback
from collections import Counter
from pathlib import Path
from typing import Callable, Protocol, Sequence

__all__ = [
    "RewardFunc",
    "RewardError",
    "MissingFieldError",
    "REWARDS",
    "REWARD_MODEL",
    "REWARD_MODEL_OPTIONS",
    "reward_kind",
    "split_custom_name",
    "component_label",
    "check_label",
    "check_reward",
    "check_reward_model_options",
    "describe_component",
    "looks_like_local_path",
    "resolve_reward_model",
    "num_labels_message",
    "build_reward",
    "build_reward_components",
    "reward_options",
    "reward_source_problems",
    "absolute_reward_paths",
    "combine_rewards",
    "exact_match",
    "numeric_match",
    "regex_format",
    "sort_position",
    "sort_inclusion_order",
    "length_penalty",
]


class RewardFunc(Protocol):
    """A reward: one float per completion, fields aligned with the prompts."""

    def __call__(
        self, prompts: list[str], completions: list[str], **fields: list
    ) -> list[float]: ...


class RewardError(ValueError):
    """A reward component failed or returned something other than finite floats."""


class MissingFieldError(RewardError):
    """A reward needs a data field (``answer``, ...) that the data does not have."""


class RewardTimeout(RewardError):
    """A custom reward function did not return within its time limit (see
    engine/custom_reward.py). ``user_location`` is (file, line) where it was when the
    engine stopped waiting, or None."""

    user_location: tuple[str, int] | None = None


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_DIGIT = re.compile(r"\d")


def _column(reward: str, fields: dict, name: str, size: int) -> list:
    """Return field ``name`` checked to be a list aligned with the prompts."""
    if name not in fields:
        found = ", ".join(repr(k) for k in fields) or "none"
        raise MissingFieldError(
            f"reward {reward!r} needs the field {name!r} but the data has "
            f"{found}; add that column or set the reward's answer_field option."
        )
    column = fields[name]
    if len(column) != size:
        raise RewardError(
            f"reward {reward!r}: field {name!r} has {len(column)} values for "
            f"{size} completions; every field must be aligned with the prompts."
        )
    return list(column)


def _digits(text: str) -> list[str]:
    """Every decimal digit in ``text``, in order.

    Example:
        >>> _digits(" 1 10 x3")
        ['1', '1', '0', '3']
    """
    return _DIGIT.findall(text)


def _parse_number(text: object) -> float | None:
    """Read a reference answer as a number (int, float or numeric string).

    Example:
        >>> _parse_number(" -16"), _parse_number(3), _parse_number("n/a")
        (-16.0, 3.0, None)
    """
    if isinstance(text, numbers.Real) and not isinstance(text, bool):
        return float(text)
    try:
        return float(str(text).strip())
    except ValueError:
        return None


# ---------------------------------------------------------------------------
# Reward factories
# ---------------------------------------------------------------------------


def exact_match(*, answer_field: str = "answer", case_sensitive: bool = True) -> RewardFunc:
    """1.0 when the completion equals the answer, ignoring surrounding whitespace.

    Example:
        >>> reward = exact_match()
        >>> reward(["p", "p"], [" 1 2 ", "1 3"], answer=[" 1 2", " 1 2"])
        [1.0, 0.0]
        >>> exact_match(case_sensitive=False)(["p"], ["Yes"], answer=["yes"])
        [1.0]
    """

    def normalise(text: object) -> str:
        text = str(text).strip()
        return text if case_sensitive else text.casefold()

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        answers = _column("exact_match", fields, answer_field, len(completions))
        return [
            1.0 if normalise(c) == normalise(a) else 0.0
            for c, a in zip(completions, answers)
        ]

    return reward


def numeric_match(
    *, answer_field: str = "answer", tolerance: float = 1e-6, which: str = "last"
) -> RewardFunc:
    """1.0 when a number in the completion equals the answer within ``tolerance``.

    ``which`` picks the ``"last"`` number in the completion (the final answer
    after any working) or the ``"first"`` one.  A leading ``-`` counts as a
    sign, so ``"5-3"`` reads as the numbers 5 and -3.  No number, or an answer
    that is not numeric, scores 0.0.

    Example:
        >>> reward = numeric_match()
        >>> reward(["p"] * 3, [" -16", "so 2+3 = 5.0", "none"], answer=[" -16", "5", "5"])
        [1.0, 1.0, 0.0]
        >>> numeric_match(which="first")(["p"], ["7 then 8"], answer=[7])
        [1.0]
    """
    if which not in ("first", "last"):
        raise ValueError(f"reward 'numeric_match': which must be 'first' or 'last', got {which!r}.")
    if tolerance < 0:
        raise ValueError(f"reward 'numeric_match': tolerance must be >= 0, got {tolerance!r}.")
    pick = 0 if which == "first" else -1

    def score(completion: str, answer: object) -> float:
        expected = _parse_number(answer)
        found = _NUMBER.findall(completion)
        if expected is None or not found:
            return 0.0
        return 1.0 if abs(float(found[pick]) - expected) <= tolerance else 0.0

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        answers = _column("numeric_match", fields, answer_field, len(completions))
        return [score(c, a) for c, a in zip(completions, answers)]

    return reward


def regex_format(
    *, pattern: str = r"\s*-?\d+(?: -?\d+)*\s*", match: str = "fullmatch"
) -> RewardFunc:
    """1.0 when the completion matches ``pattern``.

    ``match="fullmatch"`` requires the whole completion to match;
    ``match="search"`` accepts a match anywhere.  The default pattern is "one or
    more space-separated integers", the shape of both built-in tasks' answers.

    Example:
        >>> reward = regex_format()
        >>> reward(["p"] * 3, [" 1 2 3", " 12", "1, 2"])
        [1.0, 1.0, 0.0]
        >>> regex_format(pattern=r"<answer>", match="search")(["p"], ["x <answer> y"])
        [1.0]
    """
    if match not in ("fullmatch", "search"):
        raise ValueError(
            f"reward 'regex_format': match must be 'fullmatch' or 'search', got {match!r}."
        )
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(
            f"reward 'regex_format': pattern {pattern!r} is not a valid regular expression: {exc}."
        ) from None
    matcher = compiled.fullmatch if match == "fullmatch" else compiled.search

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        return [1.0 if matcher(c) else 0.0 for c in completions]

    return reward


def sort_position(*, answer_field: str = "answer") -> RewardFunc:
    """Fraction of positions where the completion's digit equals the answer's.

    Only digits are compared (separators are ignored; pair this reward with
    :func:`regex_format` to reward the format).  The denominator is the longer
    of the two digit sequences, so extra or missing digits cost credit.

    Example:
        >>> reward = sort_position()
        >>> reward(["p"] * 4, [" 1 1 3 4", " 1 3 1 4", " 1 1", " 1 1 3 4 4"],
        ...        answer=[" 1 1 3 4"] * 4)
        [1.0, 0.5, 0.5, 0.8]
    """

    def score(completion: str, answer: object) -> float:
        got, expected = _digits(completion), _digits(str(answer))
        longest = max(len(got), len(expected))
        if longest == 0:
            return 1.0  # nothing was asked and nothing was given
        return sum(g == e for g, e in zip(got, expected)) / longest

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        answers = _column("sort_position", fields, answer_field, len(completions))
        return [score(c, a) for c, a in zip(completions, answers)]

    return reward


def sort_inclusion_order(
    *, answer_field: str = "answer", inclusion_weight: float = 0.5
) -> RewardFunc:
    """Partial credit for sorting: right digits, plus right order.

    * ``inclusion_weight`` (default half) when the completion's digits are
      exactly the answer's digits as a multiset (same digits, same counts);
    * the rest when the digits are in non-decreasing order -- only given when
      the completion has as many digits as the answer, so an empty or
      truncated output cannot collect it.

    A correct answer scores 1.0.

    Example:
        >>> reward = sort_inclusion_order()
        >>> reward(["p"] * 4, [" 1 2 3", " 3 1 2", " 1 2 2", ""], answer=[" 1 2 3"] * 4)
        [1.0, 0.5, 0.5, 0.0]
    """
    if not 0.0 <= inclusion_weight <= 1.0:
        raise ValueError(
            f"reward 'sort_inclusion_order': inclusion_weight must be in [0, 1], "
            f"got {inclusion_weight!r}."
        )

    def score(completion: str, answer: object) -> float:
        got, expected = _digits(completion), _digits(str(answer))
        credit = inclusion_weight if Counter(got) == Counter(expected) else 0.0
        in_order = all(a <= b for a, b in zip(got, got[1:]))
        if got and len(got) == len(expected) and in_order:
            credit += 1.0 - inclusion_weight
        return credit

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        answers = _column("sort_inclusion_order", fields, answer_field, len(completions))
        return [score(c, a) for c, a in zip(completions, answers)]

    return reward


def length_penalty(*, target: int = 16, per_char: float = 0.02) -> RewardFunc:
    """Negative reward, ``per_char`` for every character beyond ``target``.

    Completions of ``target`` characters or fewer get 0.0.  Use it with a
    small weight to discourage rambling without drowning the task reward.

    Example:
        >>> reward = length_penalty(target=4, per_char=0.5)
        >>> reward(["p"] * 2, ["abc", "abcdefg"])
        [0.0, -1.5]
    """
    if target < 0 or per_char < 0:
        raise ValueError(
            f"reward 'length_penalty': target and per_char must be >= 0, "
            f"got target={target!r}, per_char={per_char!r}."
        )

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        # ``0.0 - x`` rather than ``-x``: avoids a confusing -0.0 in logs.
        return [0.0 - per_char * max(0, len(c) - target) for c in completions]

    return reward


REWARDS: dict[str, Callable[..., RewardFunc]] = {
    "exact_match": exact_match,
    "numeric_match": numeric_match,
    "regex_format": regex_format,
    "sort_position": sort_position,
    "sort_inclusion_order": sort_inclusion_order,
    "length_penalty": length_penalty,
}


# ---------------------------------------------------------------------------
# The three kinds of component: registry, reward model, custom function
# ---------------------------------------------------------------------------

REWARD_MODEL = "reward_model"

#: Options of a ``reward_model`` component, with their defaults (``model`` has
#: none: it is required). ``max_length`` null means the model's own context;
#: ``dtype`` auto is bf16 on a CUDA device that has it, else fp32 (as ``model.dtype``).
REWARD_MODEL_OPTIONS: dict[str, object] = {
    "model": None,
    "batch_size": 32,
    "max_length": None,
    "dtype": "auto",
}
_REWARD_MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16")

_CUSTOM = re.compile(r"^(?P<file>.+\.py):(?P<function>[A-Za-z_]\w*)$", re.S)


def split_custom_name(name: str) -> tuple[str, str] | None:
    """``FILE.py:FUNCTION`` -> (file, function); None for any other name.

    Example:
        >>> split_custom_name("lib/my_rewards.py:brevity")
        ('lib/my_rewards.py', 'brevity')
        >>> split_custom_name("exact_match") is None
        True
    """
    match = _CUSTOM.match(name)
    return (match.group("file"), match.group("function")) if match else None


def reward_kind(name: str) -> str:
    """``"registry"``, ``"reward_model"`` or ``"custom"``; ValueError for anything else.

    Example:
        >>> reward_kind("exact_match"), reward_kind("reward_model"), reward_kind("my_rewards.py:brevity")
        ('registry', 'reward_model', 'custom')
        >>> reward_kind("my_rewards.py")
        Traceback (most recent call last):
        ...
        ValueError: 'my_rewards.py' is not FILE.py:FUNCTION; a custom reward names a Python file and a function in it, e.g. my_rewards.py:brevity
    """
    if name in REWARDS:
        return "registry"
    if name == REWARD_MODEL:
        return "reward_model"
    if split_custom_name(name):
        return "custom"
    if ":" in name or name.strip().endswith(".py"):
        raise ValueError(
            f"{name!r} is not FILE.py:FUNCTION; a custom reward names a Python file and a "
            "function in it, e.g. my_rewards.py:brevity"
        )
    raise ValueError(
        f"unknown reward {name!r}; allowed: {', '.join(sorted(REWARDS))}, "
        f"{REWARD_MODEL} (a learned reward model) or FILE.py:FUNCTION (your own Python function)"
    )


_LABEL = re.compile(r"^[\w.\-]+$")


def component_label(name: str, label: str | None = None) -> str:
    """The name a component is logged under (``rewards/<label>/mean``): ``label`` when
    set, else the function's name for a custom function, else the reward's name.

    Example:
        >>> component_label("exact_match"), component_label("lib/my_rewards.py:brevity")
        ('exact_match', 'brevity')
        >>> component_label("reward_model", "rm2")
        'rm2'
    """
    if label:
        return label
    custom = split_custom_name(name)
    return custom[1] if custom else name


def check_label(label: str) -> str:
    """ValueError unless ``label`` can name metrics (letters, digits, ``_``, ``.``, ``-``).

    Example:
        >>> check_label("rm-2")
        'rm-2'
        >>> check_label("my rm")
        Traceback (most recent call last):
        ...
        ValueError: must be letters, digits, _ . or - (it names the metrics rewards/<label>/mean)
    """
    if not _LABEL.match(label):
        raise ValueError("must be letters, digits, _ . or - (it names the metrics rewards/<label>/mean)")
    return label


def check_reward_model_options(options: dict) -> None:
    """ValueError naming the option when ``options`` do not fit a reward model.

    Example:
        >>> check_reward_model_options({"model": "org/reward-model", "batch_size": 8})
        >>> check_reward_model_options({"batch_size": 8})
        Traceback (most recent call last):
        ...
        ValueError: reward 'reward_model' needs the option 'model': a Hugging Face hub id or a local folder of a sequence-classification model with one label.
    """
    listing = "model (required), " + ", ".join(
        f"{k}={v!r}" for k, v in REWARD_MODEL_OPTIONS.items() if k != "model")
    for option in options:
        if option not in REWARD_MODEL_OPTIONS:
            raise ValueError(
                f"reward {REWARD_MODEL!r} has no option {option!r}; allowed options: {listing}."
            )
    model = options.get("model")
    if model is None or (isinstance(model, str) and not model.strip()):
        raise ValueError(
            f"reward {REWARD_MODEL!r} needs the option 'model': a Hugging Face hub id or a "
            "local folder of a sequence-classification model with one label."
        )
    if not isinstance(model, str):
        raise ValueError(
            f"reward {REWARD_MODEL!r}: option 'model' must be str (a hub id or a folder), "
            f"got {type(model).__name__} {model!r}."
        )
    for option, allow_none in (("batch_size", False), ("max_length", True)):
        value = options.get(option, REWARD_MODEL_OPTIONS[option])
        if value is None and allow_none:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            wanted = "an int >= 1" + (" or null" if allow_none else "")
            raise ValueError(
                f"reward {REWARD_MODEL!r}: option {option!r} must be {wanted}, "
                f"got {type(value).__name__} {value!r}."
            )
        # Texts scored in one pass / tokens per text: past these no GPU holds the pass.
        from engine.preset_limits import MAX_BATCH, MAX_TOKENS, short_repr

        most = MAX_BATCH if option == "batch_size" else MAX_TOKENS
        if value > most:
            raise ValueError(
                f"reward {REWARD_MODEL!r}: option {option!r} must be at most {most}, got {short_repr(value)}."
            )
    dtype = options.get("dtype", "auto")
    if dtype not in _REWARD_MODEL_DTYPES:
        raise ValueError(
            f"reward {REWARD_MODEL!r}: option 'dtype' must be one of "
            f"{', '.join(_REWARD_MODEL_DTYPES)}, got {dtype!r}."
        )


def _check_custom_options(function: str, options: dict) -> None:
    from engine.preset_limits import plain_data_problem

    for option, value in options.items():
        if not (isinstance(option, str) and option.isidentifier()):
            raise ValueError(
                f"option {option!r} is not a Python identifier; options are passed "
                f"to {function} as keyword arguments."
            )
        # The function may take any value, but the run saves its preset (YAML, JSON
        # events): a NaN, a date or a set would not survive that, nor mean anything.
        problem = plain_data_problem(value, option)
        if problem:
            where, _, what = problem.partition(": ")
            raise ValueError(f"option {option!r}{f' at {where}' if where != option else ''} {what}.")


def _check_registry_numbers(name: str, options: dict) -> None:
    """ValueError for an option key that is not a name (it could not be passed as a
    keyword), or a number option that is not finite or is too large to be meant."""
    from engine.preset_limits import MAX_OPTION_MAGNITUDE, number_problem

    allowed = reward_options(name)
    for option, value in options.items():
        if not isinstance(option, str) or option not in allowed:
            listing = ", ".join(f"{k}={v!r}" for k, v in allowed.items())
            raise ValueError(f"reward {name!r} has no option {option!r}; allowed options: {listing}.")
        if _type_ok(value, allowed[option]):
            problem = number_problem(value, -MAX_OPTION_MAGNITUDE, MAX_OPTION_MAGNITUDE)
            if problem:
                raise ValueError(f"reward {name!r}: option {option!r} {problem}.")


def check_reward(name: str, options: dict) -> str:
    """Check a ``rewards`` entry without loading anything (no file is read, no model
    loaded): the name's kind and the options that can be checked now. Returns the kind.
    Raises ValueError; a message about one field starts with it (``name:``,
    ``options:``, ``options.model:``) so the preset's error names that field.

    Example:
        >>> check_reward("my_rewards.py:brevity", {"target": 10})
        'custom'
        >>> check_reward("exact_match", {"foo": 1})
        Traceback (most recent call last):
        ...
        ValueError: options: reward 'exact_match' has no option 'foo'; allowed options: answer_field='answer', case_sensitive=True.
        >>> check_reward("reward_model", {"batch_size": 8})
        Traceback (most recent call last):
        ...
        ValueError: options.model: reward 'reward_model' needs the option 'model': a Hugging Face hub id or a local folder of a sequence-classification model with one label.
    """
    try:
        kind = reward_kind(name)
    except ValueError as exc:
        raise ValueError(f"name: {exc}") from None  # the message is about the name field
    field = "options"
    try:
        if kind == "registry":
            _check_registry_numbers(name, options)
            build_reward(name, **options)  # cheap: a closure, no model
        elif kind == "custom":
            _check_custom_options(split_custom_name(name)[1], options)
        else:
            # The other options first (a stand-in model), then `model` on its own field.
            check_reward_model_options({**options, "model": "-"})
            field = "options.model"
            check_reward_model_options(options)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None
    return kind


def looks_like_local_path(name_or_path: str) -> bool:
    """A hub id is ``name`` or ``org/name``; anything starting like a path is a folder.

    Example:
        >>> looks_like_local_path("org/model"), looks_like_local_path("./rm"), looks_like_local_path("a/b/c")
        (False, True, True)
    """
    return name_or_path.startswith(("/", "./", "../", "~", ".\\")) or name_or_path.count("/") > 1


def resolve_reward_model(model: str, base_dir=None) -> str:
    """A reward model's folder as an absolute path when it exists, looked up against
    ``base_dir`` (the preset's folder) first, then the current folder; anything else
    (a hub id) unchanged.

    Example:
        >>> resolve_reward_model("org/reward-model", "/nowhere")
        'org/reward-model'
    """
    path = Path(model).expanduser()
    if path.is_absolute():
        return str(path)
    for root in (base_dir, Path.cwd()):
        if root is not None and (Path(root) / path).is_dir():
            return str((Path(root) / path).resolve())
    return model


def absolute_reward_paths(name: str, options: dict, base_dir=None) -> tuple[str, dict]:
    """The same entry with a relative custom-reward file or reward-model folder made
    absolute (where it exists), so a copy of the preset elsewhere (a run's
    preset.yaml) still finds it.

    Example (``/work/presets/my_rewards.py`` exists):
        absolute_reward_paths("my_rewards.py:brevity", {}, "/work/presets")
        -> ("/work/presets/my_rewards.py:brevity", {})
    """
    kind = reward_kind(name)
    if kind == "custom":
        from engine.custom_reward import find_reward_file

        file, function = split_custom_name(name)
        found = find_reward_file(file, base_dir)
        return (f"{found}:{function}" if found is not None else name), dict(options)
    if kind == "reward_model" and isinstance(options.get("model"), str):
        return name, {**options, "model": resolve_reward_model(options["model"], base_dir)}
    return name, dict(options)


def _reward_model_problems(model: str, base_dir) -> list[tuple[str, str]]:
    """What can be told about a reward model without loading it: a local folder that
    is missing, is not a model, or has a number of labels other than one."""
    resolved = Path(resolve_reward_model(model, base_dir))
    if not resolved.is_dir():
        if looks_like_local_path(model):
            where = f"{base_dir} or the current folder" if base_dir is not None else "the current folder"
            return [("options.model", f"folder {model} does not exist (looked in {where})")]
        return []  # a hub id: checked when it is loaded
    config_path = resolved / "config.json"
    if not config_path.exists():
        return [("options.model", f"{resolved} has no config.json; is it a Hugging Face model folder?")]
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [("options.model", f"cannot read {config_path}: {exc}")]
    labels = config.get("id2label")
    count = len(labels) if isinstance(labels, dict) else config.get("num_labels", 2)
    if count != 1:
        return [("options.model", num_labels_message(str(resolved), count))]
    return []


def num_labels_message(model: str, count: object) -> str:
    """The message for a reward model whose classifier does not have one output."""
    return (
        f"{model} has num_labels {count}; a reward model must output one score "
        "(num_labels 1, a sequence-classification head with a single output). A causal LM "
        "or a multi-class classifier cannot be used as a reward model."
    )


def reward_source_problems(rewards_cfg, base_dir=None) -> list[tuple[str, str]]:
    """Problems with what the rewards point at, found without importing user code or
    loading a model: a custom reward's file or function that is missing, options its
    function does not take; a local reward-model folder that is missing or whose
    config does not have exactly one label. Returned as (field path, message) pairs
    like ``("rewards.2.name", "no function 'brevity' in /abs/my_rewards.py; it defines: a, b")``.
    """
    problems = []
    for index, cfg in enumerate(rewards_cfg):
        name, options = cfg.name, cfg.options
        try:
            kind = reward_kind(name)
        except ValueError:
            continue  # the schema reports it
        if kind == "custom":
            from engine.custom_reward import static_problems

            found = static_problems(name, options, base_dir)
        elif kind == "reward_model" and isinstance(options.get("model"), str) and options["model"].strip():
            found = _reward_model_problems(options["model"], base_dir)
        else:
            found = []
        problems += [(f"rewards.{index}.{field}", message) for field, message in found]
    return problems


# ---------------------------------------------------------------------------
# Building and combining
# ---------------------------------------------------------------------------


def _factory(name: str) -> Callable[..., RewardFunc]:
    """Look a reward factory up by name, naming the allowed ones when unknown."""
    try:
        return REWARDS[name]
    except KeyError:
        raise ValueError(
            f"unknown reward {name!r}; allowed rewards: {', '.join(sorted(REWARDS))}."
        ) from None


def reward_options(name: str) -> dict[str, object]:
    """Return the options a reward accepts, with their defaults.

    A reward model's are :data:`REWARD_MODEL_OPTIONS` (``model`` None: required).
    A custom function's depend on the function (see engine.custom_reward).

    Example:
        >>> reward_options("length_penalty")
        {'target': 16, 'per_char': 0.02}
    """
    if name == REWARD_MODEL:
        return dict(REWARD_MODEL_OPTIONS)
    signature = inspect.signature(_factory(name))
    return {param.name: param.default for param in signature.parameters.values()}


def _type_ok(value: object, default: object) -> bool:
    """Whether ``value`` fits an option whose default is ``default``."""
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, float):
        # An int is a fine float ("tolerance: 0"), a bool is not.
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, type(default))


def build_reward(name: str, **options: object) -> RewardFunc:
    """Build the reward ``name`` with ``options``, checking names and types.

    Example:
        >>> build_reward("numeric_match", tolerance=0.5)(["p"], ["3.4"], answer=["3"])
        [1.0]
        >>> build_reward("numeric_match", tol=0.5)
        Traceback (most recent call last):
        ...
        ValueError: reward 'numeric_match' has no option 'tol'; allowed options: answer_field='answer', tolerance=1e-06, which='last'.
    """
    factory = _factory(name)
    allowed = reward_options(name)
    listing = ", ".join(f"{k}={v!r}" for k, v in allowed.items())
    for option, value in options.items():
        if option not in allowed:
            raise ValueError(
                f"reward {name!r} has no option {option!r}; allowed options: {listing}."
            )
        default = allowed[option]
        if not _type_ok(value, default):
            raise ValueError(
                f"reward {name!r}: option {option!r} must be {type(default).__name__} "
                f"(default {default!r}), got {type(value).__name__} {value!r}."
            )
    return factory(**options)


def describe_component(name: str, reward: object) -> str:
    """How messages name a component: its label, plus where it comes from when that is
    not the registry (a custom function's ``FILE.py:FUNCTION``, a reward model's id).

    Example:
        >>> describe_component("exact", exact_match())
        "reward component 'exact'"
    """
    source = getattr(reward, "reward_source", None)
    return f"reward component {name!r}" + (f" ({source})" if source and source != name else "")


def _as_list(values: object) -> object:
    """numpy arrays and torch tensors (anything with ``tolist``) as plain lists."""
    tolist = getattr(values, "tolist", None)
    if callable(tolist) and not isinstance(values, (str, bytes)):
        values = tolist()
    return values


def _checked_values(name: str, values: object, size: int) -> list[float]:
    """Validate one component's output: ``size`` finite real numbers. ``name`` is how
    the component is named in messages (see :func:`describe_component`)."""
    values = _as_list(values)
    if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
        raise RewardError(
            f"{name} returned {type(values).__name__}; "
            f"it must return a list of {size} floats, one per completion."
        )
    if len(values) != size:
        raise RewardError(
            f"{name} returned {len(values)} values for {size} "
            f"completions; it must return exactly one float per completion."
        )
    checked = []
    for index, value in enumerate(values):
        if not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise RewardError(
                f"{name} returned {value!r} at index {index}; "
                f"every reward must be a finite real number (no None, NaN or inf)."
            )
        checked.append(float(value))
    return checked


def _fault_location(exc: BaseException, reward: object) -> str:
    """`` at FILE, line N``: the innermost frame of the traceback in a custom reward's
    own file, or "" when the reward has no file or the fault is not in it."""
    source_file = getattr(reward, "source_file", None)
    if not source_file:
        return ""
    found = ""
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == source_file:
            found = f" (at {source_file}, line {line})"
    return found


def combine_rewards(
    components: list[tuple[str, float, RewardFunc]],
    prompts: list[str],
    completions: list[str],
    fields: dict[str, list],
) -> tuple[list[float], dict[str, list[float]]]:
    """Weighted sum of reward components, plus each component's raw values.

    ``components`` are ``(name, weight, reward)`` triples; names must be unique
    because they key the per-component output (used for logging).

    A component that raises is reported as a RewardError naming it (and, for a
    custom function, its ``FILE.py:FUNCTION`` and the file and line of the fault),
    raised ``from`` the original exception so its traceback is kept. A component
    that returns the wrong number of values, a non-number, NaN or inf is refused
    with a RewardError naming it (for a custom function, ``user_location`` is the
    file and line of its ``def``). A custom function that does not return within its
    time limit raises RewardTimeout naming it and where it was.

    Example:
        >>> components = [("exact", 1.0, exact_match()), ("length", 0.5, length_penalty(target=2, per_char=1.0))]
        >>> total, parts = combine_rewards(components, ["p", "p"], [" 12", "abcd"], {"answer": ["12", "12"]})
        >>> total
        [0.5, -1.0]
        >>> parts["length"]
        [-1.0, -2.0]
    """
    size = len(prompts)
    if len(completions) != size:
        raise RewardError(
            f"got {len(completions)} completions for {size} prompts; they must be aligned."
        )
    for field_name, column in fields.items():
        if len(column) != size:
            raise RewardError(
                f"field {field_name!r} has {len(column)} values for {size} prompts; "
                f"every field must be aligned with the prompts."
            )
    totals = [0.0] * size
    per_component: dict[str, list[float]] = {}
    for name, weight, reward in components:
        described = describe_component(name, reward)
        if name in per_component:
            raise RewardError(f"reward component name {name!r} is used twice; names must be unique.")
        if not isinstance(weight, numbers.Real) or not math.isfinite(weight):
            raise RewardError(f"{described} has weight {weight!r}; use a finite number.")
        try:
            raw = reward(list(prompts), list(completions), **fields)
        except RewardTimeout as exc:
            error = RewardTimeout(f"{described} {exc}")
            error.user_location = exc.user_location
            raise error from exc
        except Exception as exc:
            # Name the component: with several rewards in a preset, the bare
            # exception would not say which one broke.
            error = MissingFieldError if isinstance(exc, MissingFieldError) else RewardError
            raise error(
                f"{described} failed with {type(exc).__name__}: {exc}{_fault_location(exc, reward)}"
            ) from exc
        try:
            values = _checked_values(described, raw, size)
        except RewardError as exc:
            # A custom function's bad result: point at the function (its `def` line).
            source_file, source_line = getattr(reward, "source_file", None), getattr(reward, "source_line", None)
            if source_file and source_line:
                exc.user_location = (source_file, source_line)
            raise
        per_component[name] = values
        totals = [t + weight * v for t, v in zip(totals, values)]
    return totals, per_component


def build_reward_components(rewards_cfg, *, device=None, base_dir=None) -> list[tuple[str, float, RewardFunc]]:
    """The preset's ``rewards`` list as (label, weight, reward) triples for combine_rewards.

    ``device`` is where reward models run (a torch.device or a string like ``"cpu"``;
    None: CUDA if available); ``base_dir`` is the folder relative paths are resolved
    against first (the preset file's folder), then the current folder. Registry rewards
    are built here; a ``reward_model`` is loaded (once per model, device and dtype);
    a custom function's file is imported. Problems name the entry, e.g.
    ``rewards[2] (my_rewards.py:brevity): no function 'brevity' in /abs/my_rewards.py;
    it defines: a, b``.

    Example:
        rewards: [{name: exact_match}, {name: my_rewards.py:brevity, weight: 0.1}]
        -> [("exact_match", 1.0, <exact_match>), ("brevity", 0.1, <brevity, wrapped>)]
    """
    components = []
    for index, cfg in enumerate(rewards_cfg):
        where = f"rewards[{index}] ({cfg.name})"
        kind = reward_kind(cfg.name)
        if kind == "registry":
            reward = build_reward(cfg.name, **cfg.options)
        elif kind == "reward_model":
            from engine.reward_model import reward_model_reward

            reward = reward_model_reward(**cfg.options, device=device, base_dir=base_dir, where=where)
        else:
            from engine.custom_reward import load_custom_reward

            reward = load_custom_reward(cfg.name, cfg.options, base_dir=base_dir, where=where)
        components.append((component_label(cfg.name, getattr(cfg, "label", None)), cfg.weight, reward))
    return components
