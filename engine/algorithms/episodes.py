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

from engine.episodes.environment import EnvironmentSpec, EpisodeEnvironment, load_environment
from engine.episodes.rollout import (EpisodeSettings, episode_fields, episode_metrics, episode_rollout, episode_texts,
                                     sample_episodes, timed_progress)
from engine.episodes.template import tool_support_problem
from engine.episodes.tool_calls import call_format
from engine.model.chat import ChatFormat, template_examples, with_observation
from engine.model.rollout import Rollout

__all__ = ["EpisodeRunner", "environment_reward", "StepEpisodes", "episode_fields"]


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

    def __init__(self, preset, chat: ChatFormat, tokenizer, end_token_ids: list[int], preset_dir: Path | None):
        data = preset.data  # one process only: engine/distributed/launch.world_size_problems refuses more
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
        self.report = None  # called with a line after each turn (the CLI's progress)

    @classmethod
    def of(cls, preset, chat: ChatFormat, loaded, preset_dir: Path | None) -> "EpisodeRunner | None":
        """The runner of a preset with data.environment, else None."""
        if not preset.data.environment:
            return None
        return cls(preset, chat, loaded.tokenizer, loaded.eos_token_ids, preset_dir)

    def reward_components(self) -> list[tuple]:
        """The environment's get_reward() as a (label, weight, reward) component: named after
        its class, weight 1 (as TRL adds it); none without get_reward."""
        return [(self.spec.reward_label, 1.0, environment_reward(self.spec))] if self.spec.has_reward else []

    def template(self, examples):
        """The examples' prompts templated with the tools; the data's prompts kept."""
        templated = template_examples(examples, self.chat, self.tokenizer)
        self.raw_prompts.update({t.prompt: e.prompt for t, e in zip(templated, examples)})
        return templated

    def prompt_ids(self, prompt: str, observation: str | None) -> list[int]:
        """An episode's prompt tokens: the templated prompt, or with reset()'s observation
        appended to its last user message, templated again."""
        if observation:
            prompt = self.chat.render(self.tokenizer, with_observation(self.raw_prompts.get(prompt, prompt), observation))
        return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]

    def sample(self, policy, prompts: list[str], fields: dict[str, list], group_size: int,
               generator: torch.Generator, greedy: bool = False) -> tuple[Rollout, list[str]]:
        """The episodes of `prompts` (rows in groups of `group_size`), each environment reset
        with its row's data columns. Returns their Rollout and each episode's answer (the
        model's last turn: what the rewards score)."""
        environments, prompt_ids = [], []
        for i, prompt in enumerate(prompts):
            env = self.spec.new()
            observation = env.reset({k: v[i] for k, v in fields.items()})
            environments.append(env)
            prompt_ids.append(self.prompt_ids(prompt, observation))

        def sample_turn(contexts, group, max_new_tokens):
            return policy.sample_turn(contexts, generator, group, max_new_tokens, greedy=greedy)

        episodes = sample_episodes(sample_turn, self.tokenizer, self.chat.template, prompt_ids, environments,
                                   self.settings, group_size, progress=timed_progress(self.report, len(prompts)))
        rollout = episode_rollout(episodes, self.tokenizer.pad_token_id, policy.device)
        return rollout, [e.answer for e in episodes]


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

    def metrics(self) -> dict:
        return episode_metrics(self.episodes) if self else {}

    def row_extras(self) -> dict[str, list]:
        return {"episode": [e.summary() for e in self.episodes]} if self else {}
