"""The episode loop (engine/episodes/rollout.py): token in, token out, on the tests' tiny
Qwen2 chat model and its template.

A scripted sampler plays the model (what it writes each turn is fixed), so each test
knows the episode it must get; one test samples from the model itself and checks that the
update's pass over the episode sees what sampling saw.
"""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine.episodes.environment import load_environment
from engine.episodes.rollout import (EpisodeSettings, episode_fields, episode_metrics, episode_rollout, episode_texts,
                                     sample_episodes)
from engine.model.forward import completion_logits
from engine.model.rollout import sample
from tests.hub_fixtures import make_tiny_chat_model

ENV = '''
class Calc:
    """Adds numbers."""

    def reset(self, **row):
        self.calls = 0

    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first
            b: the second
        """
        self.calls += 1
        return a + b

    def fail(self, why: str) -> str:
        """Always fails.

        Args:
            why: a reason
        """
        raise RuntimeError(why)

    def get_reward(self) -> float:
        return float(self.calls)
'''


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    folder = make_tiny_chat_model(tmp_path_factory.mktemp("qwen"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    return tokenizer, model


@pytest.fixture
def spec(tmp_path):
    (tmp_path / "calc_env.py").write_text(ENV)
    return load_environment("calc_env.py:Calc", tmp_path)


def settings(tokenizer, **kw):
    end = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    values = dict(max_turns=4, max_tool_calls=8, tool_timeout=5.0, call_format="hermes", budget=200,
                  end_token_ids=tuple(end))
    values.update(kw)
    return EpisodeSettings(**values)


def call_text(name, args):
    import json

    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


def scripted(tokenizer, turns_per_episode):
    """A sampler that writes, for episode i, its next scripted turn (text + <|im_end|>)."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    progress = {}

    def sample_turn(contexts, group_size, max_new_tokens):
        out = []
        for context in contexts:
            key = tuple(context[:PROMPT_LEN[0]])
            i = progress.get(key, 0)
            progress[key] = i + 1
            text = turns_per_episode[key][i]
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [end]
            out.append((ids[:max_new_tokens], [-0.5] * min(len(ids), max_new_tokens)))
        return out

    return sample_turn


PROMPT_LEN = [0]


def prompt_ids(tokenizer, spec, question):
    text = tokenizer.apply_chat_template([{"role": "user", "content": question}], tools=spec.schemas,
                                         add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def run(tokenizer, spec, scripts, **kw):
    """Episodes of the scripted turns; scripts: {question: [turn texts]}."""
    prompts = [prompt_ids(tokenizer, spec, q) for q in scripts]
    PROMPT_LEN[0] = min(len(p) for p in prompts)
    turns = {tuple(p[:PROMPT_LEN[0]]): script for p, script in zip(prompts, scripts.values())}
    assert len(turns) == len(scripts), "scripts must differ in their first prompt tokens"
    envs = [spec.new() for _ in prompts]
    for env in envs:
        env.reset({})
    return sample_episodes(scripted(tokenizer, turns), tokenizer, tokenizer.chat_template, prompts, envs,
                           settings(tokenizer, **kw)), prompts


def test_an_episode_is_exactly_what_the_chat_template_renders(qwen, spec):
    tokenizer, _ = qwen
    (episode,), (prompt,) = run(tokenizer, spec, {"What is 3+4?": [call_text("add", {"a": 3, "b": 4}), "It is 7."]})
    conversation = [{"role": "user", "content": "What is 3+4?"},
                    {"role": "assistant", "content": "",
                     "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 3, "b": 4}}}]},
                    {"role": "tool", "name": "add", "content": "7"},
                    {"role": "assistant", "content": "It is 7."}]
    rendered = tokenizer.apply_chat_template(conversation, tools=spec.schemas, tokenize=False)
    # the template ends the last turn with "<|im_end|>\n"; the episode stops at the end token
    assert tokenizer.decode(prompt + episode.ids) == rendered[: rendered.rindex("<|im_end|>") + len("<|im_end|>")]
    reply = tokenizer.decode([t for t, m in zip(episode.ids, episode.model) if not m])
    assert reply == "\n<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert episode.turns == 2 and episode.stop_reason == "answered" and not episode.truncated
    assert episode.tool_calls == [{"turn": 0, "name": "add", "arguments": {"a": 3, "b": 4}, "result": "7",
                                   "error": False}]
    assert episode.answer == "It is 7."
    assert [m["role"] for m in episode.messages] == ["assistant", "tool", "assistant"]
    # turns: the first turn and the reply to its call are turn 0, the answer turn 1
    first_end = episode.ids.index(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    assert set(episode.turn_of[: first_end + 1]) == {0} and episode.turn_of[-1] == 1


def test_rollout_masks_rewards_fields_and_metrics(qwen, spec):
    tokenizer, _ = qwen
    episodes, _ = run(tokenizer, spec, {
        "What is 3+4?": [call_text("add", {"a": 3, "b": 4}), "7"],
        "Why?": [call_text("fail", {"why": "no reason"}), "sorry"],
        "Hi": ["Hello"],
    })
    rollout = episode_rollout(episodes, tokenizer.pad_token_id, "cpu")
    for row, e in enumerate(episodes):
        n = len(e.ids)
        assert rollout.completion_mask[row, :n].tolist() == [float(m) for m in e.model]
        assert rollout.tool_mask[row, :n].tolist() == [float(1 - m) for m in e.model]
        assert rollout.present_mask[row, n:].sum() == 0
        assert int(rollout.lengths[row]) == n and int(rollout.model_lengths[row]) == sum(e.model)
        # sampling logprobs on the model's tokens only
        assert rollout.sampling_logprobs[row, :n].tolist() == [-0.5 * m for m in e.model]
    assert episodes[1].tool_calls[0]["error"] is True
    assert episodes[1].tool_calls[0]["result"] == str({"error": "no reason"})  # TRL's error text
    fields = episode_fields(episodes)
    assert [env.get_reward() for env in fields["environment"]] == [1.0, 0.0, 0.0]
    assert fields["tool_calls"][2] == [] and fields["messages"][2] == [{"role": "assistant", "content": "Hello"}]
    metrics = episode_metrics(episodes)
    # worked: turns 2, 2, 1 -> 5/3; calls 1, 1, 0 -> 2/3 a episode; one of the two failed
    assert metrics["episodes/turns_mean"] == pytest.approx(5 / 3)
    assert metrics["tools/call_frequency"] == pytest.approx(2 / 3)
    assert metrics["tools/failure_frequency"] == pytest.approx(0.5)
    assert metrics["episodes/truncated_ratio"] == 0.0
    model_tokens = sum(sum(e.model) for e in episodes)
    assert metrics["episodes/model_tokens_mean"] == pytest.approx(model_tokens / 3)
    assert episode_texts(tokenizer, episodes)[2] == "Hello<|im_end|>"


def test_limits_end_an_episode_as_truncated(qwen, spec):
    tokenizer, _ = qwen
    call = call_text("add", {"a": 1, "b": 1})
    (e,), _ = run(tokenizer, spec, {"Q": [call, call, call, "2"]}, max_turns=2)
    assert e.turns == 2 and e.stop_reason == "max_turns" and e.truncated and len(e.tool_calls) == 1
    (e,), _ = run(tokenizer, spec, {"Q": [call + call, "2"]}, max_tool_calls=1)
    assert e.stop_reason == "max_tool_calls" and e.truncated and e.tool_calls == []
    # a budget that ends inside the first turn: cut there, no end token
    (e,), _ = run(tokenizer, spec, {"Q": [call, "2"]}, budget=5)
    assert len(e.ids) == 5 and e.stop_reason == "budget" and e.truncated and sum(e.model) == 5
    # a budget with room for the call but not its reply: the reply is not appended
    first = len(tokenizer(call, add_special_tokens=False)["input_ids"]) + 1
    (e,), _ = run(tokenizer, spec, {"Q": [call, "2"]}, budget=first + 3)
    assert e.stop_reason == "budget" and e.ids and all(e.model) and e.tool_calls and e.messages[-1]["role"] == "assistant"


def test_a_malformed_call_is_answered_with_its_problem(qwen, spec):
    tokenizer, _ = qwen
    (e,), _ = run(tokenizer, spec, {"Q": ["<tool_call>\n{not json\n</tool_call>", "ok"]})
    assert e.turns == 2 and e.tool_calls[0]["error"] is True and "error" in e.tool_calls[0]["result"]


def test_the_update_pass_sees_what_sampling_saw(qwen, spec):
    """Sampled from the model itself: the teacher-forced pass over the episode (prompt,
    turns and the tool's reply attended) gives each model token the logprob it was sampled
    with, and the tool's tokens are not the model's."""
    tokenizer, model = qwen
    # a random model seldom writes <|im_end|>: a turn ends at any token of a third of the vocabulary,
    # and every turn "calls" add (the template's reply is rendered as after <|im_end|>)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ends = [t for t in range(len(tokenizer)) if t % 3 == 0] + [im_end]
    generator = torch.Generator().manual_seed(0)

    def sample_turn(contexts, group_size, max_new_tokens):
        width = max(len(c) for c in contexts)
        ids = torch.tensor([[0] * (width - len(c)) + c for c in contexts])
        mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts])
        out = sample(model, ids, mask, max_new_tokens=max_new_tokens, eos_token_ids=ends,
                     pad_token_id=tokenizer.pad_token_id, generator=generator, group_size=group_size)
        n = out.lengths.long().tolist()
        return [(r[:k], lp[:k]) for r, lp, k in zip(out.completion_ids.tolist(), out.sampling_logprobs.tolist(), n)]

    import engine.episodes.rollout as loop
    from engine.episodes.tool_calls import ToolCall

    original, reply = loop.parse_tool_calls, loop.tool_result_ids
    loop.parse_tool_calls = lambda text, fmt: [ToolCall("add", {"a": 2, "b": 3})]
    loop.tool_result_ids = lambda tok, template, messages, _ends: reply(tok, template, messages, [im_end])
    try:
        prompts = [prompt_ids(tokenizer, spec, "What is 2+3?")] * 2 + [prompt_ids(tokenizer, spec, "Hi")] * 2
        envs = [spec.new() for _ in prompts]
        episodes = sample_episodes(sample_turn, tokenizer, tokenizer.chat_template, prompts, envs,
                                   settings(tokenizer, end_token_ids=tuple(ends), max_turns=3, budget=120),
                                   group_size=2)
    finally:
        loop.parse_tool_calls, loop.tool_result_ids = original, reply
    rollout = episode_rollout(episodes, tokenizer.pad_token_id, "cpu")
    assert rollout.tool_mask.sum() > 0, "the episodes have tool replies"
    with torch.no_grad():
        logprobs = completion_logits(model, rollout, slice(0, 4), group_size=2).logprobs(rollout.completion_ids)
    mask = rollout.completion_mask.bool()
    assert torch.allclose(logprobs[mask], rollout.sampling_logprobs[mask], atol=1e-4)
    # and a pass that did not attend to the tool's tokens would not agree (the check can fail)
    blind = episode_rollout(episodes, tokenizer.pad_token_id, "cpu")
    blind.tool_mask = torch.zeros_like(blind.tool_mask)
    with torch.no_grad():
        wrong = completion_logits(model, blind, slice(0, 4), group_size=2).logprobs(blind.completion_ids)
    after_reply = mask & (rollout.turns > 0)
    assert not torch.allclose(wrong[after_reply], rollout.sampling_logprobs[after_reply], atol=1e-4)


def test_every_token_has_a_turn_and_a_writer(qwen, spec):
    tokenizer, _ = qwen
    episodes, _ = run(tokenizer, spec, {"What is 3+4?": [call_text("add", {"a": 3, "b": 4}), "7"]})
    rollout = episode_rollout(episodes, tokenizer.pad_token_id, "cpu")
    assert rollout.turns[0, : len(episodes[0].ids)].tolist() == episodes[0].turn_of
