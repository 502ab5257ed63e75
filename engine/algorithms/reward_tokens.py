"""A learned reward model's reward token by token, on an RL step's recorded rows.

For each recorded completion (the first `training.record_rollouts` rows, whose per-token
records go to trajectories/), the run's first `reward_model` component reads the text it
scores as a reward, `prompt + completion` with the completion's end token cut, in one pass
of its score head at every position (engine/rewards/model.py's `prefix_scores`): the
reward of the text ending at each of its tokens. The reward model's tokenizer may differ
from the policy's; character offsets join them: a policy token gets the score of the last
reward-model token that ends at or before the policy token's end
(engine/rewards/steps.py's `token_step_ends` finds the policy token each reward-model token
ends in). So the value at the completion's last text token is the row's reward, and an end
token (not in the text) gets the last value.

A record gains `rm_score`, `rm_score_change` (from the token before; the first token's from
the score at the prompt's last token) and `rm_label` (the component read). Left out, the
records then without these keys: a preset with no `reward_model` component (a process
reward model is not read), a reward model with no score at every position (an encoder read
at its [CLS]), and multi-turn episodes (data.environment: the text a reward reads there is
not one prompt and one completion).
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from engine.rewards.steps import token_step_ends

log = logging.getLogger(__name__)

__all__ = ["REWARD_TOKENS", "reward_model_component", "policy_token_scores", "score_changes", "reward_token_rows"]

REWARD_TOKENS = ("rm_score", "rm_score_change")
"""The per-token values a record gains (the run's declared records' token_values)."""


def reward_model_component(components) -> tuple[str, Callable] | None:
    """(label, prefix_scores) of the first reward component that reads a reward model token
    by token (engine/rewards/model.py's reward_model reward), None when there is none.
    `components`: the trainer's (label, weight, reward) triples."""
    for label, _weight, reward in components:
        prefix_scores = getattr(reward, "prefix_scores", None)
        if callable(prefix_scores):
            return label, prefix_scores
    return None


def policy_token_scores(rm_ends: Sequence[int], rm_scores: Sequence[float], prompt_length: int,
                        decode: Callable[[Sequence[int]], str], text_ids: Sequence[int], text_length: int,
                        num_tokens: int) -> tuple[list[float | None], float | None]:
    """(each policy token's score, the score at the prompt's last token).

    `rm_ends`, `rm_scores`: the reward model's tokens of prompt + completion, each one's end
    character in that text (ascending) and its score; `prompt_length`: the prompt's
    characters; `text_ids`: the policy's completion tokens that make its text (its end token
    cut), `decode` their text, `text_length` the completion's characters; `num_tokens`: the
    completion's tokens, an end token included (it gets the last value). A policy token gets
    the score of the last reward-model token that ends at or before its end; one before any
    gets the prompt's (None when no reward-model token ends in the prompt: it was cut).

    Example (reward-model tokens of 2 characters over "ab" + "cdefg": "ab" "cd" "ef" "g",
    scored 1 to 4; policy tokens "c" "de" "f" "g" and an end token):
        >>> pieces = {1: "c", 2: "de", 3: "f", 4: "g"}
        >>> decode = lambda ids: "".join(pieces[i] for i in ids)
        >>> policy_token_scores([2, 4, 6, 7], [1.0, 2.0, 3.0, 4.0], 2, decode, [1, 2, 3, 4], 5, 5)
        ([1.0, 2.0, 3.0, 4.0, 4.0], 1.0)
    """
    before, ends, scores = None, [], []
    for end, score in zip(rm_ends, rm_scores):
        if end <= prompt_length:
            before = score
        else:
            ends.append(min(end - prompt_length, text_length))
            scores.append(score)
    placed: dict[int, float] = {}
    if text_ids and ends:  # each reward-model token on the policy token it ends in (the last one wins)
        placed = dict(zip(token_step_ends(decode, list(text_ids), ends, text_length), scores))
    values, current = [], before
    for token in range(len(text_ids)):
        current = placed.get(token, current)
        values.append(current)
    return values + [current] * (num_tokens - len(text_ids)), before


def score_changes(values: Sequence[float | None], before: float | None) -> list[float | None]:
    """Each value's change from the one before it (the first's from `before`); None where
    either is unknown.

    >>> score_changes([1.0, 2.0, 2.0], 0.5)
    [0.5, 1.0, 0.0]
    >>> score_changes([1.0, 2.0], None)
    [None, 1.0]
    """
    out, previous = [], before
    for value in values:
        out.append(None if value is None or previous is None else value - previous)
        previous = value
    return out


def _rounded(values: list[float | None]) -> list[float | None]:
    """6 significant digits (the records' other values keep 4): the last text token's score
    stays the row's reward to about 1e-6 of its size."""
    return [None if v is None else float(f"{v:.6g}") for v in values]


def reward_token_rows(components, tokenizer, eos_ids: Sequence[int], outputs) -> dict[str, list]:
    """What the recorded rows' trajectory records gain: {"rm_score", "rm_score_change",
    "rm_label"}, each a list over the batch (None for a row not recorded), as
    trajectory_records' `extra`; {} when nothing is read (see the module's docstring).

    `components`: the trainer's reward components; `tokenizer`, `eos_ids`: the policy's
    (its completion's end token is cut from the text, as the rewards read it); `outputs`:
    the step's RolloutStepOutputs (prompts, completions, rollout, record_rows). One pass of
    the reward model over the recorded texts, without gradients, on its own device. A view:
    when it fails, a warning is logged and the records go without it; the run goes on.
    """
    found = reward_model_component(components)
    rows, rollout = list(outputs.record_rows), outputs.rollout
    if found is None or not rows or rollout.episodes is not None:
        return {}
    try:
        return _read_rows(*found, tokenizer, eos_ids, outputs, rows)
    except Exception:  # a view of the records must not end a run
        log.warning("the reward model's score token by token was not recorded this step", exc_info=True)
        return {}


def _read_rows(label: str, prefix_scores: Callable, tokenizer, eos_ids: Sequence[int], outputs,
               rows: list[int]) -> dict[str, list]:
    """reward_token_rows' reading of the recorded `rows` with `label`'s `prefix_scores`."""
    rollout = outputs.rollout
    prompts = [outputs.prompts[i] for i in rows]
    completions = [outputs.completions[i] for i in rows]
    read = prefix_scores(prompts, completions)
    if read is None:  # no score at every position
        return {}

    def decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    eos, size = set(eos_ids), len(outputs.prompts)
    out: dict[str, list] = {key: [None] * size for key in (*REWARD_TOKENS, "rm_label")}
    for i, prompt, completion, (ends, scores) in zip(rows, prompts, completions, read):
        ids = rollout.completion_ids[i, : int(rollout.lengths[i])].tolist()
        text_ids = ids[:-1] if ids and ids[-1] in eos else ids
        values, before = policy_token_scores(ends, scores, len(prompt), decode, text_ids, len(completion), len(ids))
        out["rm_score"][i] = _rounded(values)
        out["rm_score_change"][i] = _rounded(score_changes(values, before))
        out["rm_label"][i] = label
    return out
