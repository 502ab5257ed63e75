"""The three kinds of reward component, and the checks made without loading any.

A preset's ``rewards`` entry names one of three kinds (:func:`reward_kind`):

* a registry reward: ``exact_match``, ``numeric_match``, ... (engine/rewards/builtin.py);
* ``reward_model``: a Hugging Face sequence-classification model whose single
  logit is the reward (engine/rewards/model.py; options :data:`REWARD_MODEL_OPTIONS`);
* ``process_reward_model``: a Hugging Face model scoring each step of a completion
  (engine/rewards/process_model.py; options :data:`PROCESS_REWARD_MODEL_OPTIONS`);
* ``FILE.py:FUNCTION``: the user's own Python function (engine/rewards/custom.py),
  called like a registry reward with the entry's options as keyword arguments.

:func:`check_reward` checks an entry without reading a file or loading a model: the
preset's validators use it (and import only this module's side of the package, never
the building in engine/rewards/combine.py).

Example:
    >>> reward_kind("exact_match"), component_label("lib/my_rewards.py:brevity")
    ('registry', 'brevity')
"""

from __future__ import annotations

import re

from engine.rewards.builtin import REWARDS, build_reward

__all__ = [
    "REWARD_MODEL",
    "REWARD_MODEL_OPTIONS",
    "reward_kind",
    "split_custom_name",
    "component_label",
    "check_label",
    "check_reward",
    "check_reward_model_options",
    "reward_options",
    "PROCESS_REWARD_MODEL",
    "PROCESS_REWARD_MODEL_OPTIONS",
    "PRM_HEADS",
    "check_process_reward_model_options",
    "is_step_reward_entry",
    "learned_and_checks",
]

REWARD_MODEL = "reward_model"
PROCESS_REWARD_MODEL = "process_reward_model"
#: Where a process reward model splits a completion into steps unless the entry sets
#: `step_delimiter`: a blank line, as math PRMs' steps are written.
PRM_STEP_DELIMITER_DEFAULT = "\n\n"

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

#: Options of a ``process_reward_model`` component (engine/rewards/process_model.py),
#: with their defaults (``model``: required). ``label`` null: class 1 (a one-label
#: head: the sigmoid of its logit); ``good_token`` / ``bad_token``: required by a
#: ``causal_lm`` head; ``max_length`` null: the model's context.
PROCESS_REWARD_MODEL_OPTIONS: dict[str, object] = {
    "model": None,
    "step_tag": "",
    "head": "auto",
    "label": None,
    "good_token": None,
    "bad_token": None,
    "batch_size": 8,
    "max_length": 1024,
    "dtype": "auto",
}
PRM_HEADS = ("auto", "token_classification", "causal_lm")

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
    """``"registry"``, ``"reward_model"``, ``"process_reward_model"`` or ``"custom"``;
    ValueError for anything else.

    Example:
        >>> reward_kind("exact_match"), reward_kind("reward_model"), reward_kind("my_rewards.py:brevity")
        ('registry', 'reward_model', 'custom')
        >>> reward_kind("process_reward_model")
        'process_reward_model'
        >>> reward_kind("my_rewards.py")
        Traceback (most recent call last):
        ...
        ValueError: 'my_rewards.py' is not FILE.py:FUNCTION; a custom reward names a Python file and a function in it, e.g. my_rewards.py:brevity
    """
    if name in REWARDS:
        return "registry"
    if name == REWARD_MODEL:
        return "reward_model"
    if name == PROCESS_REWARD_MODEL:
        return "process_reward_model"
    if split_custom_name(name):
        return "custom"
    if ":" in name or name.strip().endswith(".py"):
        raise ValueError(
            f"{name!r} is not FILE.py:FUNCTION; a custom reward names a Python file and a "
            "function in it, e.g. my_rewards.py:brevity"
        )
    raise ValueError(
        f"unknown reward {name!r}; allowed: {', '.join(sorted(REWARDS))}, "
        f"{REWARD_MODEL} (a learned reward model), {PROCESS_REWARD_MODEL} (a model scoring each step) "
        "or FILE.py:FUNCTION (your own Python function)"
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
    _check_model(REWARD_MODEL, options, "a sequence-classification model with one label")
    _check_count(REWARD_MODEL, "batch_size", options.get("batch_size", REWARD_MODEL_OPTIONS["batch_size"]),
                 allow_none=False)
    _check_count(REWARD_MODEL, "max_length", options.get("max_length", REWARD_MODEL_OPTIONS["max_length"]),
                 allow_none=True)
    _check_dtype(REWARD_MODEL, options)


def _check_model(kind: str, options: dict, what: str) -> None:
    """ValueError unless option ``model`` is given as text (a hub id or a folder of `what`)."""
    model = options.get("model")
    if model is None or (isinstance(model, str) and not model.strip()):
        raise ValueError(f"reward {kind!r} needs the option 'model': a Hugging Face hub id or a local folder of {what}.")
    if not isinstance(model, str):
        raise ValueError(f"reward {kind!r}: option 'model' must be str (a hub id or a folder), "
                         f"got {type(model).__name__} {model!r}.")


def _check_dtype(kind: str, options: dict) -> None:
    dtype = options.get("dtype", "auto")
    if dtype not in _REWARD_MODEL_DTYPES:
        raise ValueError(f"reward {kind!r}: option 'dtype' must be one of {', '.join(_REWARD_MODEL_DTYPES)}, "
                         f"got {dtype!r}.")


def _check_count(kind: str, option: str, value: object, allow_none: bool) -> None:
    """ValueError unless ``value`` is an int >= 1 (or None when allowed) and at most the
    batch (``batch_size``) or token (``max_length``) limit no GPU gets past."""
    from engine.foundation.limits import MAX_BATCH, MAX_TOKENS, short_repr

    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        wanted = "an int >= 1" + (" or null" if allow_none else "")
        raise ValueError(f"reward {kind!r}: option {option!r} must be {wanted}, got {type(value).__name__} {value!r}.")
    most = MAX_BATCH if option == "batch_size" else MAX_TOKENS
    if value > most:
        raise ValueError(f"reward {kind!r}: option {option!r} must be at most {most}, got {short_repr(value)}.")


def check_process_reward_model_options(options: dict) -> None:
    """ValueError naming the option when ``options`` do not fit a process reward model
    (what can be told without loading it; the tokens and the label are checked against
    the model when it loads).

    Example:
        >>> check_process_reward_model_options({"model": "org/prm", "step_tag": "<step>", "label": 1})
        >>> check_process_reward_model_options({"model": "org/prm", "head": "classifier"})
        Traceback (most recent call last):
        ...
        ValueError: reward 'process_reward_model': option 'head' must be one of auto, token_classification, causal_lm, got 'classifier'.
    """
    kind, defaults = PROCESS_REWARD_MODEL, PROCESS_REWARD_MODEL_OPTIONS
    for option in options:
        if option not in defaults:
            listing = "model (required), " + ", ".join(f"{k}={v!r}" for k, v in defaults.items() if k != "model")
            hint = " (step_delimiter is a field of the entry, beside options)" if option == "step_delimiter" else ""
            raise ValueError(f"reward {kind!r} has no option {option!r}{hint}; allowed options: {listing}.")
    _check_model(kind, options, "a process reward model (a token-classification model or a causal LM)")
    step_tag = options.get("step_tag", "")
    if not isinstance(step_tag, str):
        raise ValueError(f"reward {kind!r}: option 'step_tag' must be text (\"\" reads each step's own last "
                         f"token), got {type(step_tag).__name__} {step_tag!r}.")
    good, bad = options.get("good_token"), options.get("bad_token")
    for option, value in (("good_token", good), ("bad_token", bad)):
        if value is not None and not (isinstance(value, str) and value):
            raise ValueError(f"reward {kind!r}: option {option!r} must be non-empty text (one token of the "
                             f"model) or null, got {type(value).__name__} {value!r}.")
    head = options.get("head", "auto")
    if head not in PRM_HEADS:
        raise ValueError(f"reward {kind!r}: option 'head' must be one of {', '.join(PRM_HEADS)}, got {head!r}.")
    label = options.get("label")
    if label is not None and (not isinstance(label, int) or isinstance(label, bool) or label < 0):
        raise ValueError(f"reward {kind!r}: option 'label' must be an int >= 0 (the class of a correct step) "
                         f"or null (class 1), got {type(label).__name__} {label!r}.")
    if (good is None) != (bad is None):
        raise ValueError(f"reward {kind!r}: options good_token and bad_token go together: set both (the tokens "
                         "a causal_lm PRM predicts after a right and a wrong step, e.g. '+' and '-') or neither.")
    if good is not None and good == bad:
        raise ValueError(f"reward {kind!r}: options good_token and bad_token are both {good!r}; give two tokens.")
    if head == "causal_lm" and good is None:
        raise ValueError(f"reward {kind!r}: head causal_lm needs the options good_token and bad_token "
                         "(e.g. '+' and '-' for Math-Shepherd).")
    if head == "causal_lm" and label is not None:
        raise ValueError(f"reward {kind!r}: option 'label' is for head token_classification; a causal_lm "
                         "PRM reads good_token and bad_token.")
    if head == "token_classification" and good is not None:
        raise ValueError(f"reward {kind!r}: options good_token / bad_token are for head causal_lm; a "
                         "token_classification PRM reads the class given by option label.")
    _check_count(kind, "batch_size", options.get("batch_size", defaults["batch_size"]), allow_none=False)
    _check_count(kind, "max_length", options.get("max_length", defaults["max_length"]), allow_none=True)
    _check_dtype(kind, options)


def _check_custom_options(function: str, options: dict) -> None:
    from engine.foundation.limits import plain_data_problem

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
            # Names, types, and numbers finite and not too large to be meant.
            REWARDS.check_options(name, options, ranges={})
            build_reward(name, **options)  # cheap: a closure, no model
        elif kind == "custom":
            _check_custom_options(split_custom_name(name)[1], options)
        else:
            check = check_reward_model_options if kind == "reward_model" else check_process_reward_model_options
            # The other options first (a stand-in model), then `model` on its own field.
            check({**options, "model": "-"})
            field = "options.model"
            check(options)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None
    return kind


def is_step_reward_entry(cfg) -> bool:
    """Whether a ``rewards`` entry scores each step of a completion, known without
    loading anything: a ``process_reward_model``, a registry reward whose factory
    declares ``returns_steps = True`` (``sort_steps``), or any entry that sets
    ``step_delimiter``. A custom function that returns lists without setting
    ``step_delimiter`` is found only when it runs (engine/rewards/combine.py).

    Example:
        >>> from types import SimpleNamespace as Entry
        >>> is_step_reward_entry(Entry(name="sort_steps", step_delimiter=None))
        True
        >>> is_step_reward_entry(Entry(name="exact_match", step_delimiter=None))
        False
        >>> is_step_reward_entry(Entry(name="my_rewards.py:lines", step_delimiter="\\n"))
        True
    """
    if getattr(cfg, "step_delimiter", None) is not None or cfg.name == PROCESS_REWARD_MODEL:
        return True
    factory = REWARDS.get(cfg.name)
    return bool(getattr(factory, "returns_steps", False))


def reward_options(name: str) -> dict[str, object]:
    """Return the options a reward accepts, with their defaults.

    A reward model's are :data:`REWARD_MODEL_OPTIONS` (``model`` None: required), a
    process reward model's :data:`PROCESS_REWARD_MODEL_OPTIONS`.
    A custom function's depend on the function (see engine.rewards.custom).

    Example:
        >>> reward_options("length_penalty")
        {'target': 16, 'per_char': 0.02}
    """
    if name == REWARD_MODEL:
        return dict(REWARD_MODEL_OPTIONS)
    if name == PROCESS_REWARD_MODEL:
        return dict(PROCESS_REWARD_MODEL_OPTIONS)
    return REWARDS.options(name)


def learned_and_checks(entries) -> tuple[list[str], list[str]]:
    """The labels of a preset's learned rewards (a reward model, a process reward model:
    a model the policy can exploit) and of its other components (verifiers, rules, a
    user's function: the checks a learned reward is read against, trained on or logged
    beside it with weight 0). `entries`: RewardConfig-like objects (name, label).

    Example:
        >>> from types import SimpleNamespace as E
        >>> learned_and_checks([E(name="reward_model", label=None), E(name="exact_match", label=None)])
        (['reward_model'], ['exact_match'])
    """
    learned, checks = [], []
    for entry in entries:
        kind = reward_kind(entry.name)
        label = component_label(entry.name, getattr(entry, "label", None))
        (learned if kind in (REWARD_MODEL, PROCESS_REWARD_MODEL) else checks).append(label)
    return learned, checks
