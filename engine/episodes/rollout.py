"""Multi-turn episodes, token in, token out.

An episode: the prompt (templated with the environment's tools), then turns. The model
writes a turn (sampled until an end token); its tool calls are parsed from the turn's
text in the template's format (engine/episodes/tool_calls.py) and run on the episode's
own environment; their results, rendered by the chat template's tool role
(engine/episodes/template.py), are appended as tokens, and the model writes the next turn
on the tokens so far. The history is never re-rendered and re-tokenised: the trained
tokens are exactly the sampled ones, and what the model attended to when it sampled them
is exactly what the update's passes attend to.

An episode ends when a turn has no tool call (answered), at `max_turns` model turns or
`max_tool_calls` calls (its last calls are not run: truncated), or when the token budget
(the algorithm's max_completion_length, counting every token after the prompt) runs out
(truncated; a tool reply that would not fit is not appended, as TRL does).

The batch's episodes run in lockstep: each turn samples every unfinished episode at once
(the first turn shares each group's prompt pass); finished ones drop out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from engine.episodes.environment import EpisodeEnvironment
from engine.episodes.template import tool_result_ids
from engine.episodes.tool_calls import ToolCall, as_message_tool_calls, parse_tool_calls
from engine.model.rollout import Rollout

__all__ = ["EpisodeSettings", "Episode", "sample_episodes", "episode_rollout", "episode_fields", "episode_metrics",
           "episode_texts"]

# (contexts, group_size, max_new_tokens) -> per context (sampled token ids, their logprobs)
SampleTurn = Callable[[list[list[int]], int, int], list[tuple[list[int], list[float]]]]


@dataclass(frozen=True)
class EpisodeSettings:
    """How long an episode may go (the preset's data.max_turns, data.max_tool_calls,
    data.tool_timeout; the algorithm's max_completion_length as `budget`), the tool-call
    format and the tokens that end a model turn."""

    max_turns: int
    max_tool_calls: int
    tool_timeout: float
    call_format: str
    budget: int
    end_token_ids: tuple[int, ...]


@dataclass
class Episode:
    """One episode as it runs: its tokens after the prompt (`ids`), which the model wrote
    (`model`: 1, else a tool reply: 0), their sampling logprobs and turns, and what was said
    and done (messages after the prompt, tool calls with their results)."""

    environment: EpisodeEnvironment | None
    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    model: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_of: list[int] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)
    tool_calls: list[dict] = field(default_factory=list)
    turns: int = 0
    truncated: bool = False
    stop_reason: str | None = None  # answered, max_turns, max_tool_calls, budget
    prompt: str = ""  # the prompt as text, as the model saw it (reset()'s observation in it): what records show

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    @property
    def answer(self) -> str:
        """The model's last turn's text: what the preset's rewards score as the completion."""
        return next((m["content"] for m in reversed(self.messages) if m["role"] == "assistant"), "")

    def summary(self) -> dict:
        """What samples and trajectory records keep of the episode (docs/run-directory.md)."""
        return {"turns": self.turns, "truncated": self.truncated, "stop_reason": self.stop_reason,
                "tool_calls": list(self.tool_calls), "messages": list(self.messages)}

    def add(self, ids: list[int], logprobs: list[float] | None, turn: int) -> None:
        """Tokens the model wrote (with their logprobs) or, with None, a tool reply."""
        self.ids += ids
        self.model += [1 if logprobs is not None else 0] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.turn_of += [turn] * len(ids)


def _stop(episode: Episode, reason: str, truncated: bool) -> None:
    episode.stop_reason, episode.truncated = reason, truncated


def _run_calls(episode: Episode, calls: list[ToolCall], turn: int, timeout: float) -> list[dict]:
    """The turn's calls run on the episode's environment; the tool messages answering them.
    A malformed call is answered with its problem, as a tool error is."""
    messages = []
    for call in calls:
        if call.problem is not None:
            content, error = str({"error": call.problem}), True
        else:
            result = episode.environment.call(call.name, call.arguments, timeout)
            content, error = result.content, result.error
        episode.tool_calls.append({"turn": turn, "name": call.name, "arguments": call.arguments,
                                   "result": content, "error": error})
        messages.append({"role": "tool", "name": call.name, "content": content})
    return messages


def _take_turn(episode: Episode, tokens: list[int], logprobs: list[float], turn: int, settings: EpisodeSettings,
               tokenizer, chat_template) -> None:
    """One model turn added to the episode, its calls run and their reply appended (or the
    episode ended)."""
    room = settings.budget - len(episode.ids)
    tokens, logprobs = tokens[:room], logprobs[:room]
    episode.add(tokens, logprobs, turn)
    episode.turns = turn + 1
    ended = bool(tokens) and tokens[-1] in settings.end_token_ids
    text = tokenizer.decode(tokens[:-1] if ended else tokens, skip_special_tokens=True)
    calls = parse_tool_calls(text, settings.call_format) if ended else []
    message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = as_message_tool_calls([c for c in calls if c.problem is None])
    episode.messages.append(message)
    if not ended:
        return _stop(episode, "budget", True)
    if not calls:
        return _stop(episode, "answered", False)
    if episode.turns >= settings.max_turns:
        return _stop(episode, "max_turns", True)
    if len(episode.tool_calls) + len(calls) > settings.max_tool_calls:
        return _stop(episode, "max_tool_calls", True)
    replies = _run_calls(episode, calls, turn, settings.tool_timeout)
    reply_ids = tool_result_ids(tokenizer, chat_template, replies, list(settings.end_token_ids))
    if len(episode.ids) + len(reply_ids) >= settings.budget:  # no room for the reply and a turn after it
        return _stop(episode, "budget", True)
    episode.messages += replies
    episode.add(reply_ids, None, turn)


def sample_episodes(sample_turn: SampleTurn, tokenizer, chat_template: str | None, prompt_ids: list[list[int]],
                    environments: list[EpisodeEnvironment], settings: EpisodeSettings, group_size: int = 1,
                    progress: Callable[[int, int], None] | None = None) -> list[Episode]:
    """The episodes of a batch, run in lockstep (one sampling pass a turn over the episodes
    still going). `prompt_ids`: each episode's templated prompt; `environments`: one reset
    instance each; `group_size`: rows in contiguous groups of identical prompts share the
    first turn's prompt pass. `progress(turn, still_running)` is called after each turn."""
    episodes = [Episode(env, list(ids)) for env, ids in zip(environments, prompt_ids)]
    grouped = group_size > 1 and len(episodes) % group_size == 0 and all(
        prompt_ids[i] == prompt_ids[i - i % group_size] for i in range(len(prompt_ids)))
    for turn in range(settings.max_turns):
        running = [e for e in episodes if not e.done]
        if not running:
            break
        contexts = [e.prompt_ids + e.ids for e in running]
        longest = max(settings.budget - len(e.ids) for e in running)
        sampled = sample_turn(contexts, group_size if turn == 0 and grouped else 1, longest)
        for episode, (tokens, logprobs) in zip(running, sampled):
            _take_turn(episode, tokens, logprobs, turn, settings, tokenizer, chat_template)
        if progress is not None:
            progress(turn + 1, sum(not e.done for e in episodes))
    return episodes


def episode_rollout(episodes: list[Episode], pad_token_id: int, device) -> Rollout:
    """The episodes as a Rollout: prompts left-padded, each episode's tokens right-padded;
    `completion_mask` the model's tokens (trained), `tool_mask` the replies', `turns`."""
    B = len(episodes)
    P = max(len(e.prompt_ids) for e in episodes)
    T = max(1, max(len(e.ids) for e in episodes))

    def rows(values, width, fill, left=False, dtype=torch.long):
        padded = [([fill] * (width - len(v)) + v) if left else (v + [fill] * (width - len(v))) for v in values]
        return torch.tensor(padded, dtype=dtype, device=device)

    model = rows([e.model for e in episodes], T, 0, dtype=torch.float32)
    present = rows([[1] * len(e.ids) for e in episodes], T, 0, dtype=torch.float32)
    return Rollout(
        prompt_ids=rows([e.prompt_ids for e in episodes], P, pad_token_id, left=True),
        prompt_mask=rows([[1] * len(e.prompt_ids) for e in episodes], P, 0, left=True),
        completion_ids=rows([e.ids for e in episodes], T, pad_token_id),
        completion_mask=model,
        sampling_logprobs=rows([e.logprobs for e in episodes], T, 0.0, dtype=torch.float32) * model,
        truncated=torch.tensor([e.truncated for e in episodes], dtype=torch.bool, device=device),
        tool_mask=present - model,
        turns=rows([e.turn_of for e in episodes], T, 0),
        episodes=episodes,
    )


def episode_fields(episodes: list[Episode]) -> dict[str, list]:
    """What the preset's rewards receive of each episode besides its data columns: its
    messages after the prompt, its tool calls (name, arguments, result, error) and its
    environment (the user's instance, as TRL passes `environments`)."""
    return {"messages": [e.messages for e in episodes], "tool_calls": [e.tool_calls for e in episodes],
            "environment": [None if e.environment is None else e.environment.instance for e in episodes]}


def episode_texts(tokenizer, episodes: list[Episode]) -> list[str]:
    """Each episode's text after the prompt, the model's and the tools' tokens decoded
    together (what samples and records show, aligned with the tokens)."""
    return [tokenizer.decode(e.ids, skip_special_tokens=False) for e in episodes]


def episode_metrics(episodes: list[Episode]) -> dict:
    """A step's episode metrics (TRL's names where it has them).

    e.g. two episodes: 2 turns with 1 call (an error), and 1 turn (answered)
         -> episodes/turns_mean 1.5, tools/call_frequency 0.5, tools/failure_frequency 1.0
    """
    n = max(len(episodes), 1)
    calls = [c for e in episodes for c in e.tool_calls]
    model_tokens = sum(sum(e.model) for e in episodes)
    return {
        "episodes/turns_mean": sum(e.turns for e in episodes) / n,
        "episodes/truncated_ratio": sum(e.truncated for e in episodes) / n,
        "episodes/model_tokens_mean": model_tokens / n,
        "episodes/tool_tokens_mean": sum(len(e.ids) for e in episodes) / n - model_tokens / n,
        "tools/call_frequency": len(calls) / n,
        "tools/failure_frequency": sum(c["error"] for c in calls) / len(calls) if calls else 0.0,
    }


def timed_progress(report: Callable[[str], None] | None, batch: int) -> Callable[[int, int], None] | None:
    """A progress callback that reports each turn ("turn 2: 5 of 16 episodes still running, 3.1 s")."""
    if report is None:
        return None
    start = time.perf_counter()

    def progress(turn: int, running: int) -> None:
        report(f"turn {turn}: {running} of {batch} episodes still running, {time.perf_counter() - start:.1f} s")

    return progress
