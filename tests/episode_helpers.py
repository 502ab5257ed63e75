"""A synthetic run with a multi-turn episode (issue 26), in the record format of
/work/tmp/episodes_spec.md "What the run directory holds": one recorded episode (two
turns, one calculator call, the tool's reply in the middle) beside one plain record,
and a samples event with the episode's `episode` mapping and a plain row."""

from __future__ import annotations

import json
from pathlib import Path

from engine.run import rundir
from inspector_helpers import grpo_record, write_steps
from workbench_helpers import write_run

# The tiny-tools model's turn: a Hermes tool call, then <eos>.
TURN_1 = ["<tool_call>", '{"name":', ' "calculate",', ' "arguments":', ' {"expression":', ' "3+4"}}',
          "</tool_call>", "<eos>"]
TOOL_REPLY = ["<tool_response>", "7", "</tool_response>"]
TURN_2 = [" The", " answer", " is", " 7", "<eos>"]
TOKENS = TURN_1 + TOOL_REPLY + TURN_2
TOOL_FIRST, TOOL_LAST = len(TURN_1), len(TURN_1) + len(TOOL_REPLY) - 1  # 8 and 10
TOOL_MASK = [0] * len(TURN_1) + [1] * len(TOOL_REPLY) + [0] * len(TURN_2)
TURNS = [0] * (len(TURN_1) + len(TOOL_REPLY)) + [1] * len(TURN_2)  # the reply belongs to the turn it answers
PROMPT = "What is 3+4?"
EPISODE = {
    "turns": 2, "truncated": False, "reward_source": None,
    "tool_calls": [{"turn": 0, "name": "calculate", "arguments": {"expression": "3+4"}, "result": "7",
                    "error": False}],
    "messages": [
        {"role": "assistant", "content": "".join(TURN_1[:-1]),
         "tool_calls": [{"type": "function", "function": {"name": "calculate", "arguments": {"expression": "3+4"}}}]},
        {"role": "tool", "name": "calculate", "content": "7"},
        {"role": "assistant", "content": "".join(TURN_2[:-1])}],
}


DECLARED_PLOTS = [
    {"key": "reward", "title": "Reward", "metrics": ["reward", "reward_std"]},
    {"key": "episode_turns", "title": "Turns per episode", "metrics": ["episodes/turns_mean"]},
    {"key": "tool_calls", "title": "Tool calls per episode",
     "metrics": ["tools/call_frequency", "tools/failure_frequency"]},
    {"key": "episode_truncated", "title": "Truncated episodes", "metrics": ["episodes/truncated_ratio"]},
]


def _model_only(values: list[float]) -> list[float | None]:
    """A per-token list with null on the tool tokens, as the engine writes it."""
    return [None if tool else v for v, tool in zip(values, TOOL_MASK)]


def episode_record(step: int = 1, index: int = 0, group: int = 0, reward: float = 1.0,
                   advantage: float = 0.8) -> dict:
    """One recorded episode: the plain record's per-token numbers, null on the tool tokens,
    plus `tool_mask`, `turn` and `episode`."""
    n = len(TOKENS)
    record = grpo_record(step, index, group, reward, advantage, prompt=PROMPT, tokens=list(TOKENS))
    for key in ("logprob", "ref_logprob", "kl", "entropy", "advantage", "ratio"):
        record[key] = _model_only(record[key])
    record["clipped"] = [None if tool else c for c, tool in zip(record["clipped"], TOOL_MASK)]
    record.update({"completion": "".join(TOKENS), "tool_mask": list(TOOL_MASK), "turn": list(TURNS),
                   "episode": json.loads(json.dumps(EPISODE))})
    assert len(record["tokens"]) == n
    return record


def episode_sample(index: int = 0, group: int = 0, reward: float = 1.0) -> dict:
    return {"index": index, "group": group, "prompt": PROMPT, "completion": "".join(TOKENS), "reward": reward,
            "rewards": {"exact_match": reward}, "advantage": 0.8, "episode": json.loads(json.dumps(EPISODE))}


def plain_sample(index: int = 1, group: int = 0) -> dict:
    return {"index": index, "group": group, "prompt": PROMPT, "completion": " 8", "reward": 0.0,
            "rewards": {"exact_match": 0.0}, "advantage": -0.8}


EPISODE_METRICS = {"episodes/turns_mean": 2.0, "episodes/truncated_ratio": 0.0, "episodes/model_tokens_mean": 13.0,
                   "episodes/tool_tokens_mean": 3.0, "tools/call_frequency": 1.0, "tools/failure_frequency": 0.0}


def episode_run(folder: Path, name: str = "episodes", metrics: dict | None = None) -> Path:
    """A finished one-step run: trajectories (the episode, then a plain record, one
    group) and a samples event with both rows (replacing write_run's own); `metrics`
    added to its step's metrics."""
    run_dir = write_run(folder, name, steps=1, samples_per_step=0, extra_metrics=metrics)
    plain = grpo_record(1, 1, 0, 0.0, -0.8, n=6, prompt=PROMPT)
    write_steps(run_dir, {1: [episode_record(), plain]})
    events = rundir.read_events(run_dir)
    for event in events:
        if event.get("type") == "run_started":  # what an episode run declares
            event["records"] = {"layout": "group", "token_values": ["advantage", "logprob", "ref_logprob", "kl",
                                                                    "entropy", "ratio"],
                                "preferred": ["advantage"], "episodes": True}
            event["plots"] = DECLARED_PLOTS
        if event.get("type") == "samples":
            event["samples"] = [episode_sample(), plain_sample()]
    with open(run_dir / rundir.EVENTS_FILE, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(event) + "\n" for event in events)
    return run_dir
