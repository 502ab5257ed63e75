"""`rl-engine score-rewards REQUEST.json`: score completions with a preset's rewards and
give the advantages GRPO would compute for them, as one JSON object on stdout.

The workbench's reward playground runs this in the background: the window never imports
torch, and rewards may need it (a reward model, a user's function). The numbers are the
engine's own: the components and their weighted total come from the same
build_reward_components / combine_rewards that `try-reward` and the trainers use, the
advantages from the estimator GRPO's trainer looks up (engine.rl.catalog.ESTIMATORS).

Request (a file, or `-` for stdin):

    {"preset": {"rewards": [...], "algorithm": {...}, "model": {...}, "data": {...}},
     "base_dir": "/folder/custom/reward/files/are/relative/to",
     "group_size": 4,                        # default: the algorithm's num_generations
     "fields_from_data": false,              # true: look up missing fields (answer, ...) of
                                             # each prompt in the preset's data
     "items": [{"prompt": "sort 3 1 =", "completion": " 1 3", "fields": {"answer": " 1 3"},
                "group": 0,                  # group: optional; default index // group_size
                "baseline": " 1 3"},         # optional: the prompt's greedy completion (ReMax),
                                             # text or {"completion": ...} as a run's samples carry it
               ...]}

Answer (exit 0):

    {"components": [{"label": "exact_match", "weight": 1.0, "source": ""}, ...],
     "items": [{"index": 0, "group": 0, "components": {"exact_match": 1.0}, "total": 1.0,
                "advantage": 0.866}, ...],
     "advantages": {"computed": true, "estimator": "grpo", "scale_rewards": "group",
                    "multi_objective_aggregation": "sum_then_normalize", "greedy_baseline": false,
                    "group_size": 4, "reason": ""},
     "notes": ["..."]}

A preset with step rewards (engine/rewards/steps.py) adds to each item
`"steps": {label: [[end, score], ...]}`: each step component's steps in that completion,
`end` the exclusive end character offset of the step in the completion text (a step
starts where the one before it ended, the first at 0), ascending; the component's value
in `components` is the mean of their scores (0.0 for no steps). Outcome components have
no entry; a preset without step rewards gives no `steps` key.

GDPO (multi_objective_aggregation normalize_then_sum) adds to each item
`"component_advantages": {label: value}` (each reward normalised in its group; null
outside a complete group). An estimator that needs a greedy baseline (remax) adds to each
item `"baseline": {"completion", "total", "components"}` (its greedy completion scored by
the same rewards; null where the item gave none), and `advantage` = total - baseline total.

A group gets advantages only when it holds exactly group_size completions (a run logs
the first log_completions of a step, so its last logged group may be partial); under
remax, an item gets one when it carries its prompt's greedy completion. PPO's
advantages come from its critic (GAE per token) and REINFORCE++'s are whitened over
every token of the batch: neither can be computed from texts alone, and DPO has none;
then `computed` is false and `reason` says why (remax with no baseline given: what to give).

Errors: {"error": {"message": ..., "file": ..., "line": ..., "problems": [[field, message]]}}
with exit 1 when a reward fails to load or to score (file and line of a fault in the
user's own function), exit 2 for a bad request (not JSON, a bad preset, a missing field).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from engine.run.failures import failure_location, failure_message
from engine.preset.schema import ALGORITHM_CONFIGS, preset_from_dict
from engine.foundation.errors import PresetError

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2

# An estimator that is not `per_token` (engine.rl.catalog.Estimator) gives a completion an
# advantage from the rewards of its group (and, for a reward scaling that spans the batch,
# the other groups given): computable from texts.


class BadRequest(ValueError):
    """The request cannot be scored as given; the message says what to change."""

    def __init__(self, message: str, problems: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.problems = problems or []


# ------------------------------------------------------------------ the request


def read_request(source: str) -> dict:
    """The request from a file or `-` (stdin). BadRequest when it is not a JSON object."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise BadRequest(f"cannot read the request {source}: {exc.strerror or exc}") from None
    try:
        request = json.loads(text)
    except ValueError as exc:
        raise BadRequest(f"the request is not JSON ({exc}); see `rl-engine score-rewards --help`") from None
    if not isinstance(request, dict):
        raise BadRequest(f"the request must be a JSON object, got {type(request).__name__}")
    return request


def _section(preset: dict, name: str) -> Any:
    value = preset.get(name)
    if value is not None and not isinstance(value, dict):
        raise BadRequest(f"preset.{name} must be a mapping, got {type(value).__name__}")
    return value


def request_preset(request: dict, with_data: bool = False):
    """The parts of the request's preset that scoring uses, validated: the rewards, the
    algorithm, the model's device (where reward models run), and with `with_data` the
    data section and seed. The rest of a preset (a half-edited learning rate, say) is
    not the playground's business and is not checked."""
    preset = request.get("preset")
    if not isinstance(preset, dict):
        raise BadRequest("the request needs `preset`: a mapping with at least `rewards` and `algorithm`")
    if not isinstance(preset.get("rewards"), list) or not preset["rewards"]:
        raise BadRequest("preset.rewards must be a non-empty list of reward components, "
                         "e.g. [{\"name\": \"exact_match\"}]")
    algorithm = _section(preset, "algorithm") or {"name": "grpo"}
    model = _section(preset, "model") or {}
    minimal: dict[str, Any] = {"rewards": preset["rewards"], "algorithm": algorithm}
    if "device" in model:
        minimal["model"] = {"device": model["device"]}
    # training.batch_size must divide into groups (and PPO's mini-batches): one that does.
    fields = getattr(ALGORITHM_CONFIGS.get(algorithm.get("name", "grpo")), "model_fields", {})
    default = {name: fields[name].default for name in ("num_generations", "num_mini_batches") if name in fields}
    group = algorithm.get("num_generations", default.get("num_generations", 1))
    mini = algorithm.get("num_mini_batches", default.get("num_mini_batches", 1))
    training: dict[str, Any] = {}
    if isinstance(group, int) and isinstance(mini, int) and group > 0 and mini > 0:
        training["batch_size"] = group * mini
    if with_data:
        minimal["data"] = _section(preset, "data") or {}
        seed = (_section(preset, "training") or {}).get("seed")
        if seed is not None:
            training["seed"] = seed
    if training:
        minimal["training"] = training
    return preset_from_dict(minimal, "preset")


def request_items(request: dict) -> list[dict]:
    items = request.get("items")
    if not isinstance(items, list) or not items:
        raise BadRequest("the request needs `items`: a non-empty list of {prompt, completion, fields}")
    checked = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadRequest(f"items[{i}] must be a mapping with prompt and completion, got {type(item).__name__}")
        if not isinstance(item.get("completion"), str):
            raise BadRequest(f"items[{i}].completion must be text")
        prompt = item.get("prompt", "")
        if not isinstance(prompt, (str, list)):
            raise BadRequest(f"items[{i}].prompt must be text (or a conversation, a list of messages)")
        fields = item.get("fields") or {}
        if not isinstance(fields, dict):
            raise BadRequest(f"items[{i}].fields must be a mapping of field name to value, e.g. {{\"answer\": \"3\"}}")
        checked.append({"prompt": prompt, "completion": item["completion"], "fields": dict(fields),
                        "group": item.get("group"), "baseline": _baseline_completion(item.get("baseline"), i)})
    return checked


def _baseline_completion(baseline: Any, index: int) -> str | None:
    """An item's greedy completion (ReMax's baseline): text, or a run's samples' `baseline`
    mapping {"completion": ..., "reward": ...}; None when not given."""
    if baseline is None or isinstance(baseline, str):
        return baseline
    if isinstance(baseline, dict) and isinstance(baseline.get("completion"), str):
        return baseline["completion"]
    raise BadRequest(f"items[{index}].baseline must be the prompt's greedy completion: text, or a mapping with "
                     f"`completion` text (as a ReMax run's samples carry it), e.g. {{\"completion\": \" 1 2 3\"}}")


def request_group_size(request: dict, preset) -> int:
    size = request.get("group_size")
    if size is None:
        return preset.group_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise BadRequest(f"group_size must be a whole number >= 1, got {size!r}")
    return size


# ---------------------------------------------------------------- data fields


def _prompt_key(prompt: Any) -> str:
    # The workbench shows a conversation prompt as str(list): the same key finds it.
    return prompt if isinstance(prompt, str) else str(prompt)


def fill_fields_from_data(request: dict, items: list[dict], base_dir: Path | None) -> list[str]:
    """Give each item the fields of its prompt in the preset's data (train and held-out
    splits), where the item does not set them itself; a conversation prompt found there
    is passed to the rewards as the conversation. Returns notes (how many were found,
    or why the data could not be read)."""
    try:
        preset = request_preset(request, with_data=True)
        from engine.data import load_splits

        train, held_out = load_splits(preset.data, preset.training.seed, base_dir)
    except Exception as exc:  # the data is a help here, not a requirement: say why, and go on
        return [f"the data fields (answer, ...) could not be read from the preset's data: {failure_message(exc)}"]
    by_prompt = {_prompt_key(e.prompt): e for e in [*train, *held_out]}
    found = 0
    for item in items:
        example = by_prompt.get(_prompt_key(item["prompt"]))
        if example is None:
            continue
        found += 1
        item["fields"] = {**example.fields, **item["fields"]}
        item["prompt"] = example.prompt
    notes = []
    if found < len(items):
        notes.append(f"{len(items) - found} of {len(items)} prompts are not in the preset's data: "
                     "their fields (answer, ...) are only those given")
    return notes


# ---------------------------------------------------------------- the scoring


def score(request: dict) -> dict:
    """The answer to a request (see the module's docstring). Raises BadRequest,
    PresetError, MissingFieldError, or a reward's failure."""
    from engine.rewards import build_reward_components, score_rewards_with_steps

    preset = request_preset(request)
    items = request_items(request)
    group_size = request_group_size(request, preset)
    base_dir = request.get("base_dir")
    base_dir = Path(base_dir) if isinstance(base_dir, str) and base_dir else None
    notes = fill_fields_from_data(request, items, base_dir) if request.get("fields_from_data") else []
    # Every field any item has, None where another item lacks it (as the trainer passes
    # the columns of a batch whose examples differ).
    names = sorted({k for item in items for k in item["fields"]})
    fields = {k: [item["fields"].get(k) for item in items] for k in names}
    components = build_reward_components(preset.rewards, device=preset.model.device, base_dir=base_dir)
    totals, parts, steps = score_rewards_with_steps(components, [i["prompt"] for i in items],
                                                    [i["completion"] for i in items], fields)
    groups = [item["group"] if item["group"] is not None else index // group_size for index, item in enumerate(items)]
    baselines = (score_baselines(components, items, fields)
                 if any(item["baseline"] is not None for item in items) and greedy_baseline_of(preset, base_dir)
                 else None)
    weights = {label: weight for label, weight, _ in components}
    advantages, about = group_advantages_of(preset, totals, groups, group_size, base_dir,
                                            components=parts, weights=weights, baselines=baselines)
    notes += about.pop("notes")
    per_item = about.pop("per_item")  # the extra keys of each item (GDPO's, ReMax's, the steps)
    if steps:
        per_item["steps"] = [{label: [[end, score] for end, score in steps[label][i]] for label in steps}
                             for i in range(len(items))]
    return {
        "components": [{"label": label, "weight": weight, "source": getattr(reward, "reward_source", "") or ""}
                       for label, weight, reward in components],
        "items": [{"index": i, "group": groups[i], "components": {label: parts[label][i] for label in parts},
                   "total": totals[i], "advantage": advantages[i], **{k: v[i] for k, v in per_item.items()}}
                  for i in range(len(items))],
        "advantages": about,
        "notes": notes,
    }


def greedy_baseline_of(preset, base_dir: Path | None) -> bool:
    """Whether the preset's advantage estimator needs each prompt's greedy completion
    (ReMax); False for an algorithm without one."""
    name = getattr(preset.algorithm, "advantage_estimator", None)
    if name is None or preset.algorithm.playground_reason():
        return False
    from engine.rl.catalog import ESTIMATORS, wants_greedy_baseline
    from engine.rl.user_code import resolve

    return wants_greedy_baseline(resolve(ESTIMATORS, name, base_dir))


def score_baselines(components, items: list[dict], fields: dict[str, list]) -> list[dict | None]:
    """Each item's greedy completion (its `baseline`) scored by the same rewards, with the
    item's prompt and fields: {completion, total, components}, or None where none was given."""
    from engine.rewards import combine_rewards

    given = [i for i, item in enumerate(items) if item["baseline"] is not None]
    totals, parts = combine_rewards(components, [items[i]["prompt"] for i in given],
                                    [items[i]["baseline"] for i in given],
                                    {k: [column[i] for i in given] for k, column in fields.items()})
    scored: list[dict | None] = [None] * len(items)
    for row, i in enumerate(given):
        scored[i] = {"completion": items[i]["baseline"], "total": totals[row],
                     "components": {label: values[row] for label, values in parts.items()}}
    return scored


def group_advantages_of(preset, totals: list[float], groups: list, group_size: int,
                        base_dir: Path | None = None, *, components: dict[str, list[float]] | None = None,
                        weights: dict[str, float] | None = None,
                        baselines: list[dict | None] | None = None) -> tuple[list, dict]:
    """Advantages of the items a run would give one, by the estimator (or the reward
    aggregation) GRPO's trainer uses, None for the others, and what was done:
    (advantages, {computed, estimator, scale_rewards, multi_objective_aggregation,
    greedy_baseline, group_size, reason, notes, per_item}). `per_item`: keys to add to
    each item, a list over the items each (GDPO's component_advantages, ReMax's baseline).

    Items count in groups of exactly `group_size` (a group-relative estimator, GDPO), or one
    by one (an estimator with no group); with a greedy baseline (remax), only those whose
    `baselines` entry (their greedy completion, scored: {completion, total, components})
    is given. `components` and `weights` (by label) feed GDPO.
    """
    algo = preset.algorithm
    about: dict[str, Any] = {"computed": False, "estimator": getattr(algo, "advantage_estimator", None),
                             "scale_rewards": getattr(algo, "scale_rewards", None),
                             "multi_objective_aggregation": getattr(algo, "multi_objective_aggregation", None),
                             "greedy_baseline": False, "group_size": group_size, "reason": "", "notes": [],
                             "per_item": {}}
    none = [None] * len(totals)
    about["reason"] = algo.playground_reason()  # "" where it recomputes group advantages (GRPO)
    if about["reason"]:
        return none, about
    from engine.rl.catalog import ESTIMATORS, REWARD_AGGREGATIONS, REWARD_SCALINGS, wants_greedy_baseline
    from engine.rl.user_code import resolve

    estimator = resolve(ESTIMATORS, algo.advantage_estimator, base_dir)
    if estimator.declares.per_token:
        computable = [e.name for e in ESTIMATORS.entries() if not e.declares.per_token]
        about["reason"] = (f"advantage_estimator {algo.advantage_estimator} gives per-token advantages, which depend "
                           "on the completions' tokens: their token counts (REINFORCE++ whitens over every token of "
                           "the batch) or the tokens that end each step (step rewards); only "
                           f"{', '.join(computable)} advantages can be computed from texts")
        return none, about
    aggregation = REWARD_AGGREGATIONS.entry(algo.multi_objective_aggregation)
    gdpo = aggregation.declares.own_advantages
    units = _units(groups, group_size, estimator.declares.needs_group or gdpo, about)
    if units is None:
        return none, about
    greedy = wants_greedy_baseline(estimator)
    if greedy:
        about["greedy_baseline"] = True
        about["per_item"]["baseline"] = baselines or list(none)
        units = _with_baselines(units, baselines, algo.advantage_estimator, about)
        if units is None:
            return none, about
    import torch

    order = [i for rows in units for i in rows]  # (B,): a group's completions contiguous
    advantages = list(none)
    if gdpo:
        names = list(components)
        values = torch.tensor([[components[name][i] for name in names] for i in order], dtype=torch.float64)
        values, per_component = aggregation.call(values, [weights[name] for name in names], group_size)
        about["per_item"]["component_advantages"] = list(none)
        for i, row in zip(order, per_component.tolist()):
            about["per_item"]["component_advantages"][i] = dict(zip(names, row))
        about["notes"].append(f"multi_objective_aggregation {algo.multi_objective_aggregation}: the final "
                              f"normalisation is over these {len(order)} completions; a run's is over its whole batch")
    else:
        rewards = torch.tensor([totals[i] for i in order], dtype=torch.float32)
        mask = torch.ones(len(order), 1)  # unused by the estimators computable from texts
        baseline_rewards = (torch.tensor([baselines[i]["total"] for i in order], dtype=torch.float32)
                            if greedy else None)
        values = estimator.call(rewards, mask, baseline_rewards=baseline_rewards,
                                **{**algo.model_dump(), "num_generations": group_size})  # the section's fields
        if estimator.declares.uses_scale_rewards and REWARD_SCALINGS.declares(algo.scale_rewards).spans_batch:
            about["notes"].append(f"scale_rewards batch: the std is over these {len(order)} completions; "
                                  "a run's is over its whole batch")
    for i, value in zip(order, values.tolist()):
        advantages[i] = value
    about["computed"] = True
    return advantages, about


def _units(groups: list, group_size: int, grouped: bool, about: dict) -> list[list[int]] | None:
    """The items an advantage is computed over, in units: the groups of exactly
    `group_size` items when the advantage is relative to the group (`grouped`), else each
    item alone. None when there is none (`about["reason"]` says why); a note for partial groups."""
    if not grouped:
        return [[i] for i in range(len(groups))]
    if group_size < 2:
        about["reason"] = "one completion per group: a group-relative advantage needs at least 2"
        return None
    members: dict[Any, list[int]] = {}
    for index, group in enumerate(groups):
        members.setdefault(json.dumps(group), []).append(index)
    complete = [rows for rows in members.values() if len(rows) == group_size]
    partial = [rows for rows in members.values() if len(rows) != group_size]
    if partial:
        about["notes"].append(
            f"{len(partial)} group{'s' if len(partial) > 1 else ''} without exactly {group_size} completions "
            f"(sizes {', '.join(str(len(rows)) for rows in partial)}): no advantages for "
            f"{'them' if len(partial) > 1 else 'it'}")
    if not complete:
        about["reason"] = f"no group holds exactly {group_size} completions"
        return None
    return complete


def _with_baselines(units: list[list[int]], baselines: list | None, estimator: str,
                    about: dict) -> list[list[int]] | None:
    """The units whose every item carries its greedy completion (ReMax's baseline); None
    when none does (`about["reason"]` says what to give), a note for those left out."""
    if baselines is None:
        about["reason"] = (f"advantage_estimator {estimator}: each advantage is the reward minus the reward of "
                           "the prompt's greedy completion, which a run generates every step; give each item its "
                           "`baseline` (the greedy completion, as a ReMax run's samples carry it), e.g. "
                           "\"baseline\": {\"completion\": \" 1 2 3\"}")
        return None
    kept = [rows for rows in units if all(baselines[i] is not None for i in rows)]
    left = sum(len(rows) for rows in units) - sum(len(rows) for rows in kept)
    if left:
        about["notes"].append(f"{left} item{'s' if left > 1 else ''} without a baseline (greedy) completion: "
                              "no advantages for them")
    if not kept:
        about["reason"] = "no item carries its baseline (greedy) completion"
        return None
    return kept


# -------------------------------------------------------------------- the command


def error_answer(exc: BaseException, problems: list | None = None) -> dict:
    where = failure_location(exc)
    error: dict[str, Any] = {"message": failure_message(exc), "file": where[0] if where else None,
                             "line": where[1] if where else None}
    if problems:
        error["problems"] = [list(p) for p in problems]
    return {"error": error}


def _preset_problems(exc: PresetError) -> list[tuple[str, str]]:
    found = []
    for line in exc.problems:
        path, sep, message = line.partition(": ")
        found.append((path, message) if sep and " " not in path else ("", line))
    return found


def run_score_rewards(args) -> int:
    """Read the request, score it, print the answer (or the error) as one JSON line."""
    from engine.rewards import MissingFieldError

    out = sys.stdout
    try:
        # A reward that prints (a user's debugging print) must not corrupt the answer:
        # while scoring, stdout goes to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            answer, code = score(read_request(args.request)), EXIT_OK
    except BadRequest as exc:
        answer, code = error_answer(exc, exc.problems), EXIT_INVALID
    except PresetError as exc:
        answer, code = error_answer(exc, _preset_problems(exc)), EXIT_INVALID
        answer["error"]["message"] = "the preset's rewards or algorithm are invalid:\n" + "\n".join(
            f"  - {p}" for p in exc.problems)
    except MissingFieldError as exc:
        answer, code = error_answer(exc), EXIT_INVALID
        answer["error"]["message"] += "\n  give it in the item's fields, e.g. {\"answer\": \" 1 2 3\"}"
    except Exception as exc:  # a reward that fails to load or to score: its message, file and line
        answer, code = error_answer(exc), EXIT_FAILED
    if "error" in answer:
        error = answer["error"]
        suffix = f" ({error['file']}:{error['line']})" if error.get("file") and error["file"] not in error["message"] \
            else ""
        print(f"error: {error['message']}{suffix}", file=sys.stderr)
    out.write(json.dumps(answer, default=str) + "\n")
    out.flush()
    return code


def add_playground_parser(sub) -> argparse.ArgumentParser:
    """The `score-rewards` sub-command (engine/cli.py registers it)."""
    p = sub.add_parser(
        "score-rewards", help="score completions with a preset's rewards; JSON in, JSON out (the reward playground)",
        description="Score completions with a preset's rewards and give the advantages GRPO would compute for "
                    "their groups. Reads a JSON request, prints one JSON object; see engine/commands/score_rewards.py.")
    p.add_argument("request", metavar="REQUEST.json", help="the request file, or - to read it from stdin")
    p.set_defaults(func=run_score_rewards)
    return p
