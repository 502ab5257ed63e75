"""GRPO and PPO steps on multi-turn episodes (data.environment), in this process, on the
tests' tiny Qwen2 chat model. A scripted sampler plays the model (a random model calls no
tools): each episode calls the environment's tool, reads its reply, answers. What is
checked: the rewards see the episode, the update trains the model's tokens only, the
records and samples carry who wrote each token, the metrics count turns and calls."""

import json

import pytest
import torch

from engine.commands.train import build_trainer
from engine.algorithms.policy import Policy
from engine.preset.schema import preset_from_dict
from engine.run import rundir
from tests.hub_fixtures import make_tiny_chat_model

ENV = '''
class Adder:
    def reset(self, answer=None, **row):
        self.answer, self.result = answer, None

    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first
            b: the second
        """
        self.result = a + b
        return self.result

    def get_reward(self) -> float:
        return 1.0 if str(self.result) == str(self.answer) else 0.0
'''

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    # the tools' preamble in Qwen's system turn is ~550 tokens of this small vocabulary: a longer context
    return make_tiny_chat_model(tmp_path_factory.mktemp("qwen"), context=2048)


def preset(tmp_path, model_folder, algorithm="grpo"):
    (tmp_path / "adder.py").write_text(ENV)
    rows = [{"prompt": f"What is 2+3? ({i})", "answer": "5"} for i in range(8)]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    algo = {"name": algorithm, "num_generations": 2, "max_completion_length": 200}
    if algorithm == "grpo":
        algo.update(beta=0.04, loss_type="dapo")
    else:  # Monte-Carlo returns: what each model token is owed, worked out below
        algo.update(lam=1.0, gamma=1.0)
    return preset_from_dict({
        "name": "episodes", "model": {"name_or_path": str(model_folder), "lora": {"r": 4, "alpha": 8.0}},
        "algorithm": algo,
        "data": {"task": None, "path": str(tmp_path / "prompts.jsonl"), "num_train": 6, "num_eval": 2,
                 "environment": "adder.py:Adder", "max_turns": 3},
        "rewards": [{"name": "exact_match", "weight": 0.5}],
        "training": {"max_steps": 1, "batch_size": 4, "learning_rate": 0.01, "eval_steps": 0, "save_steps": 0,
                     "record_rollouts": 2, "log_completions": 4},
    })


@pytest.fixture
def scripted(monkeypatch):
    """Every episode: a call to add(2, 3), then the answer "5" (rows 0, 2) or "6" (1, 3)."""
    calls = {"n": 0}

    def sample_turn(self, contexts, generator, group_size, max_new_tokens, greedy=False):
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        out = []
        for row, context in enumerate(contexts):
            replied = "<tool_response>" in self.tokenizer.decode(context)
            text = (("5" if row % 2 == 0 else "6") if replied else CALL)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [end]
            out.append((ids, [-1.0] * len(ids)))
        calls["n"] += 1
        return out

    monkeypatch.setattr(Policy, "sample_turn", sample_turn)
    return calls


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_a_run_of_episodes(tmp_path, model_folder, scripted, algorithm):
    trainer = build_trainer(preset(tmp_path, model_folder, algorithm), tmp_path / "run", preset_dir=tmp_path)
    assert trainer.run() == "done"
    events = rundir.read_events(tmp_path / "run")
    (m,) = [e for e in events if e["type"] == "metrics"]
    assert m["episodes/turns_mean"] == 2 and m["tools/call_frequency"] == 1 and m["tools/failure_frequency"] == 0
    assert m["episodes/truncated_ratio"] == 0
    # rewards: exact_match on the answer (the last turn, "5" or "6") and the environment's get_reward
    # (the tool's result was 5 in every episode), logged under the class name with weight 1
    assert m["rewards/exact_match/mean"] == pytest.approx(0.5)
    assert m["rewards/Adder/mean"] == pytest.approx(1.0)
    assert m["reward"] == pytest.approx(0.5 * 0.5 + 1.0)
    # the completion lengths count the model's tokens: "<tool_call>...</tool_call><|im_end|>" and "5<|im_end|>"
    assert m["completions/mean_length"] < m["episodes/model_tokens_mean"] + m["episodes/tool_tokens_mean"]
    assert m["completions/mean_length"] == pytest.approx(m["episodes/model_tokens_mean"])
    # the held-out evaluation ran greedy episodes too: their answers scored, the environment's reward with them
    evaluation = [e for e in events if e["type"] == "eval"][-1]
    assert evaluation["rewards/Adder/mean"] == pytest.approx(1.0)
    samples = next(e for e in events if e["type"] == "samples")["samples"]
    assert samples[0]["episode"]["turns"] == 2 and samples[0]["episode"]["tool_calls"][0]["result"] == "5"
    declared = events[0]  # run_started carries the declaration's plots and records
    assert declared["records"]["episodes"] is True
    assert {"episode_turns", "tool_calls", "episode_truncated"} <= {p["key"] for p in declared["plots"]}

    records = rundir.read_trajectories(tmp_path / "run", 1)
    assert len(records) == 2
    record = records[0]
    tool = record["tool_mask"]
    assert len(tool) == len(record["tokens"]) == len(record["turn"]) and 0 < sum(tool) < len(tool)
    # values on the tool's tokens are null, on the model's numbers
    for key in ("advantage", "logprob", "entropy"):
        assert all(v is None for v, t in zip(record[key], tool) if t), key
        assert all(v is not None for v, t in zip(record[key], tool) if not t), key
    assert record["episode"]["turns"] == 2 and record["episode"]["tool_calls"][0]["name"] == "add"
    assert "<tool_response>" in record["completion"] and record["completion"].endswith("<|im_end|>")
    assert record["turn"][0] == 0 and record["turn"][-1] == 1


def test_ppo_advantages_carry_across_the_reply(tmp_path, model_folder, scripted):
    """PPO's GAE on an episode: the advantages on the model's tokens before the tool's reply
    see the score at the end (no reset at the reply); the reply's tokens get none."""
    trainer = build_trainer(preset(tmp_path, model_folder, "ppo"), tmp_path / "run", preset_dir=tmp_path)
    out = trainer.train_step().outputs
    adv, tool, model = out.advantages, out.rollout.tool_mask.bool(), out.rollout.completion_mask.bool()
    assert (adv[tool] == 0).all() and (out.returns[tool] == 0).all()
    # a critic at 0 (zero-initialised), gamma = lam = 1: each model token's return is the episode's score
    # less the KL penalties after it; the first token's return holds the score (a GAE that reset at the
    # tool's reply would give the first turn's tokens nothing)
    scores = torch.tensor(out.scores)
    first = out.returns[:, 0]
    penalties = out.non_score.sum(1)
    assert torch.allclose(first, scores + penalties, atol=1e-5)
    assert model.any(1).all()


def test_episodes_are_refused_for_dpo():
    from engine.foundation.errors import PresetError

    with pytest.raises((PresetError, ValueError)) as info:
        preset_from_dict({"name": "x", "algorithm": {"name": "dpo"},
                          "data": {"task": None, "path": "p.jsonl", "environment": "calculator"},
                          "training": {"batch_size": 4}})
    assert "data.environment" in str(info.value) and "grpo or ppo" in str(info.value)


def test_episodes_run_in_one_process(tmp_path, model_folder):
    from engine.distributed.launch import world_size_problems

    problems = world_size_problems(preset(tmp_path, model_folder), 2)
    assert any(p.startswith("data.environment:") and "one process" in p for p in problems)
    assert world_size_problems(preset(tmp_path, model_folder), 1) == []
