"""The episodes part of a trainer, for a preset with `data.environment`: the environment
loaded and checked at set-up, the prompts templated with its tools, and each step's
episodes run through the policy (engine/episodes/rollout.py), one environment instance
each.

GRPO and PPO train on episodes (their passes attend to the tool tokens and train on the
model's); the algorithms whose section declares `trains_episodes` False (DPO, KTO: given
answers; online DPO: pairs of single completions) refuse the field at validation.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from engine.data import Example
from engine.episodes.environment import FIELD, EnvironmentError, EnvironmentSpec, EpisodeEnvironment, load_environment
from engine.episodes.rollout import (EpisodeSettings, episode_fields, episode_metrics, episode_rollout, episode_texts,
                                     sample_episodes, timed_progress)
from engine.episodes.template import tool_support_problem
from engine.episodes.tool_calls import call_format
from engine.model.chat import ChatFormat, template_examples, with_observation
from engine.model.rollout import Rollout
from engine.data.location import prompt_location

__all__ = ["EpisodeRunner", "environment_reward", "StepEpisodes", "episode_fields", "VALIDATED_ROWS"]

# The train rows `rl-engine validate` resets (their first observations' lengths checked).
VALIDATED_ROWS = 8


def environment_reward(spec: EnvironmentSpec):
    """The environment's get_reward() as a reward component's function (TRL's: named after
    the class, weight 1): it reads each episode's instance from the `environment` field."""

    def reward(prompts, completions, environment=None, **fields):
        if environment is None:
            raise ValueError(f"{spec.reward_label}.get_reward: no episodes to score (data.environment is not running)")
        # through the wrapper's checks: a number, finite (a fault names get_reward and its line)
        return [EpisodeEnvironment(spec, env).reward() for env in environment]

    reward.__name__ = spec.reward_label
    return reward


class EpisodeRunner:
    """Runs a step's episodes. Built by the trainer when the preset sets data.environment."""

    def __init__(self, preset, chat: ChatFormat, tokenizer, end_token_ids: list[int], preset_dir: Path | None,
                 context: int | None = None):
        data = preset.data  # one process only: engine/distributed/launch.world_size_problems refuses more
        self.data, self.preset_dir, self.context = data, preset_dir, context  # context: the model's positions
        self.spec = load_environment(data.environment, preset_dir)
        problem = tool_support_problem(tokenizer, chat.template)
        if problem:
            raise ValueError(problem)
        self.chat = replace(chat, tools=tuple(self.spec.schemas))
        self.tokenizer = tokenizer
        self.settings = EpisodeSettings(
            max_turns=data.max_turns, max_tool_calls=data.max_tool_calls, tool_timeout=data.tool_timeout,
            call_format=call_format(data.tool_call_format, chat.template),
            budget=preset.algorithm.max_completion_length, end_token_ids=tuple(end_token_ids))
        self.raw_prompts: dict[str, object] = {}  # templated prompt -> the data's prompt (for reset's observation)
        self.tools_tokens = 0  # of a templated prompt's tokens, those the tools' descriptions take (template)
        self.report = None  # called with a line after each turn (the CLI's progress)

    @classmethod
    def of(cls, preset, chat: ChatFormat, loaded, preset_dir: Path | None) -> "EpisodeRunner | None":
        """The runner of a preset with data.environment, else None."""
        if not preset.data.environment:
            return None
        return cls(preset, chat, loaded.tokenizer, loaded.eos_token_ids, preset_dir, loaded.context_length)

    def reward_components(self) -> list[tuple]:
        """The environment's get_reward() as a (label, weight, reward) component: named after
        its class, weight 1 (as TRL adds it); none without get_reward."""
        return [(self.spec.reward_label, 1.0, environment_reward(self.spec))] if self.spec.has_reward else []

    def template(self, examples):
        """The examples' prompts templated with the tools; the data's prompts kept, and the
        tools' share of a prompt measured on the first (for the context message)."""
        templated = template_examples(examples, self.chat, self.tokenizer)
        self.raw_prompts.update({t.prompt: e.prompt for t, e in zip(templated, examples)})
        if examples and not self.tools_tokens:
            bare = replace(self.chat, tools=()).render(self.tokenizer, examples[0].prompt)
            self.tools_tokens = max(0, len(self._ids(templated[0].prompt)) - len(self._ids(bare)))
        return templated

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_text(self, prompt: str, observation: str | None) -> str:
        """An episode's prompt as the model sees it: the templated prompt, or with reset()'s
        observation appended to its last user message, templated again."""
        if not observation:
            return prompt
        return self.chat.render(self.tokenizer, with_observation(self.raw_prompts.get(prompt, prompt), observation))

    def prompt_ids(self, prompt: str, observation: str | None) -> list[int]:
        """An episode's prompt tokens (:meth:`prompt_text`'s)."""
        return self._ids(self.prompt_text(prompt, observation))

    def start(self, prompts: list[str], fields: dict[str, list]) -> tuple[list[EpisodeEnvironment], list[str],
                                                                             list[list[int]]]:
        """Each prompt's episode begun: a fresh environment reset with its row of `fields`,
        the prompt text the model will see (reset's observation in it) and its tokens.
        EnvironmentError when an observation leaves the episode no room in the context
        (the model would index past its positions)."""
        environments, texts, ids = [], [], []
        for i, prompt in enumerate(prompts):
            row = {k: v[i] for k, v in fields.items()}
            env = self.spec.new()
            observation = env.reset(row)
            text = self.prompt_text(prompt, observation)
            tokens = self._ids(text)
            if observation:
                self._check_fits(prompt, row, tokens)
            environments.append(env)
            texts.append(text)
            ids.append(tokens)
        return environments, texts, ids

    def _check_fits(self, prompt: str, row: dict, tokens: list[int]) -> None:
        """Refuse a prompt that reset's observation grew past the context, with the numbers."""
        budget = self.settings.budget
        if self.context is None or len(tokens) + budget <= self.context:
            return
        where = prompt_location(self.data, self.preset_dir, Example(self.raw_prompts.get(prompt, prompt), row))
        before = len(self._ids(prompt))
        head = (f"{FIELD}: {self.spec.reward_label}.reset's first observation for {where} adds "
                f"{len(tokens) - before} tokens to its prompt of {before}: {len(tokens)} tokens")
        room = self.context - len(tokens)
        if room < 1:
            raise EnvironmentError(f"{head}, more than the model's whole context of {self.context} tokens before the "
                                   "episode begins. Shorten the observation reset returns (or use a model with a "
                                   "longer context).")
        raise EnvironmentError(f"{head}; with algorithm.max_completion_length {budget} an episode needs "
                               f"{len(tokens) + budget} positions but the model's context is {self.context}. Shorten "
                               f"the observation reset returns, or lower algorithm.max_completion_length to at most "
                               f"{room}.")

    def check_first_rows(self, examples: list[Example]) -> int:
        """`rl-engine validate`'s check: the first VALIDATED_ROWS rows reset as a run would
        (an environment's faults, and an observation past the context, raised as the run
        would raise them). Returns the longest of their prompts in tokens, observation included."""
        rows = examples[:VALIDATED_ROWS]
        if not rows:
            return 0
        names = sorted({k for e in rows for k in e.fields})
        fields = {k: [e.fields.get(k) for e in rows] for k in names}
        _, _, ids = self.start([t.prompt for t in self.template(rows)], fields)
        return max(len(i) for i in ids)

    def sample(self, policy, prompts: list[str], fields: dict[str, list], group_size: int,
               generator: torch.Generator, greedy: bool = False) -> tuple[Rollout, list[str]]:
        """The episodes of `prompts` (rows in groups of `group_size`), each environment reset
        with its row's data columns. Returns their Rollout (each episode with the prompt
        text it was given: what samples and records show) and each episode's answer (the
        model's last turn: what the rewards score)."""
        environments, texts, prompt_ids = self.start(prompts, fields)

        def sample_turn(contexts, group, max_new_tokens):
            return policy.sample_turn(contexts, generator, group, max_new_tokens, greedy=greedy)

        episodes = sample_episodes(sample_turn, self.tokenizer, self.chat.template, prompt_ids, environments,
                                   self.settings, group_size, progress=timed_progress(self.report, len(prompts)))
        for episode, text in zip(episodes, texts):
            episode.prompt = text
        rollout = episode_rollout(episodes, self.tokenizer.pad_token_id, policy.device)
        return rollout, [e.answer for e in episodes]

    @staticmethod
    def greedy_outputs(sampled: tuple[Rollout, list[str]]) -> tuple[list[str], dict[str, list], list[str]]:
        """Greedy episodes as the held-out evaluation takes them (engine/algorithms/evaluation.py):
        their answers, what the rewards receive of them, and their prompts as the model saw them."""
        rollout, answers = sampled
        return answers, episode_fields(rollout.episodes), [e.prompt for e in rollout.episodes]

    def take_alarms(self, step: int) -> list[dict]:
        """`alarm` events for the tools that ran past data.tool_timeout and could not be
        stopped since the last call (each tool once a run: engine/episodes/tool_threads.py)."""
        return [{"step": step, "began": step, "steps": [step, step], **warning}
                for warning in self.spec.tool_threads.take_warnings()]


class StepEpisodes:
    """What a step of GRPO or PPO adds for its episodes (nothing for single completions):
    the fields their rewards receive, the texts samples and records show, the metrics, the
    `episode` row extra."""

    def __init__(self, rollout: Rollout, tokenizer):
        self.episodes = rollout.episodes
        self.tokenizer = tokenizer

    def __bool__(self) -> bool:
        return self.episodes is not None

    def reward_fields(self, fields: dict[str, list]) -> dict[str, list]:
        """The data columns and, for episodes, their messages, tool calls and environments."""
        return {**fields, **episode_fields(self.episodes)} if self else fields

    def shown(self, completions: list[str]) -> list[str]:
        """The texts samples and records show: an episode's every token decoded."""
        return episode_texts(self.tokenizer, self.episodes) if self else completions

    def shown_prompts(self, prompts: list[str]) -> list[str]:
        """The prompts samples and records show: each episode's as the model saw it
        (reset()'s observation in it), else `prompts`."""
        return [e.prompt for e in self.episodes] if self else prompts

    def metrics(self) -> dict:
        return episode_metrics(self.episodes) if self else {}

    def row_extras(self) -> dict[str, list]:
        return {"episode": [e.summary() for e in self.episodes]} if self else {}
