"""Hardening round three, N3: the prompt a record shows is the prompt the model saw. An
environment whose reset() returns a first observation ("The ledger starts at 0.") has it
appended to the prompt's last user message; samples, trajectory records and evaluation
samples must show it (GRPO and PPO, in this process, on the tests' tiny Qwen2 chat model
with a scripted sampler, as tests/test_episodes_training.py)."""

from __future__ import annotations

import json

import pytest

from engine.commands.train import build_trainer
from engine.algorithms.policy import Policy
from engine.preset.schema import preset_from_dict
from engine.run import rundir
from tests.hub_fixtures import make_tiny_chat_model

OBSERVATION = " The ledger starts at 0."
LEDGER = f'''
class Ledger:
    def reset(self, **row):
        self.total = 0
        return {OBSERVATION!r}

    def add(self, amount: int) -> str:
        """Add an amount to the ledger.

        Args:
            amount: what to add
        """
        self.total += amount
        return str(self.total)
'''


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return make_tiny_chat_model(tmp_path_factory.mktemp("qwen"), context=2048)


@pytest.fixture
def answers_at_once(monkeypatch):
    """Every episode answers "5" in its first turn (no tool call)."""

    def sample_turn(self, contexts, generator, group_size, max_new_tokens, greedy=False):
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ids = self.tokenizer("5", add_special_tokens=False)["input_ids"] + [end]
        return [(list(ids), [-1.0] * len(ids)) for _ in contexts]

    monkeypatch.setattr(Policy, "sample_turn", sample_turn)


def _preset(tmp_path, model_folder, algorithm: str):
    (tmp_path / "ledger.py").write_text(LEDGER)
    rows = [{"prompt": f"What is 2+3? ({i})", "answer": "5"} for i in range(8)]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    algo = {"name": algorithm, "num_generations": 2, "max_completion_length": 60}
    return preset_from_dict({
        "name": "ledger", "model": {"name_or_path": str(model_folder), "lora": {"r": 4, "alpha": 8.0}},
        "algorithm": algo,
        "data": {"task": None, "path": str(tmp_path / "prompts.jsonl"), "num_train": 6, "num_eval": 2,
                 "environment": "ledger.py:Ledger", "max_turns": 2},
        "rewards": [{"name": "exact_match"}],
        "training": {"max_steps": 1, "batch_size": 4, "learning_rate": 0.01, "eval_steps": 0, "save_steps": 0,
                     "record_rollouts": 2, "log_completions": 4},
    })


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_records_show_the_prompt_with_resets_observation(tmp_path, model_folder, answers_at_once, algorithm):
    trainer = build_trainer(_preset(tmp_path, model_folder, algorithm), tmp_path / "run", preset_dir=tmp_path)
    assert trainer.run() == "done"
    events = rundir.read_events(tmp_path / "run")
    samples = next(e for e in events if e["type"] == "samples")["samples"]
    assert samples and all(OBSERVATION in s["prompt"] for s in samples)
    # the observation at the end of the user's message, inside the template (before the assistant's turn)
    assert all(s["prompt"].index(OBSERVATION) < s["prompt"].rindex("<|im_start|>assistant") for s in samples)
    records = rundir.read_trajectories(tmp_path / "run", 1)
    assert records and all(OBSERVATION in r["prompt"] for r in records)
    evaluations = [e for e in events if e["type"] == "eval"]
    assert evaluations and all(OBSERVATION in s["prompt"] for e in evaluations for s in e["samples"])
