"""Adding a variant is one function and one registration: a policy surrogate (as a loss
type), a loss aggregation, an advantage estimator and a task, each written and registered
here, in the test module, then trained for 2 steps by `rl-engine run` in this process on
the built-in model. Nothing outside this file names them."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
import yaml

from engine.data.examples import Example, _split_unique
from engine.data.tasks import TASKS, corrupt_sort_answer, register_task
from engine.rl.catalog import (
    AGGREGATIONS, ESTIMATORS, Aggregation, Estimator, register_policy_loss, rows_share, unregister_policy_loss,
)
from engine.run import rundir
from engine_runs import cli

CALLS: Counter = Counter()


# ---------------------------------------------------- the variants, as a researcher writes them


def unclipped_surrogate(logprobs, old_logprobs, advantages, mask, *, log_ratio):
    """Plain policy gradient: -ratio * A, no clip."""
    CALLS["surrogate"] += 1
    ratio = torch.exp(log_ratio).expand_as(logprobs)
    return -ratio * advantages, ratio, {"test/negative_advantage": (advantages < 0).expand_as(logprobs)}


def row_sum(per_token_loss, mask):
    """Sum over each completion's tokens, mean over completions."""
    CALLS["aggregation"] += 1
    return torch.where(mask.bool(), per_token_loss, 0.0).sum(-1).mean()


def max_baseline(rewards, mask, *, num_generations):
    """Each reward minus the best of its group (never positive)."""
    CALLS["estimator"] += 1
    grouped = rewards.view(-1, num_generations)
    return (grouped - grouped.max(dim=1, keepdim=True).values).reshape(-1)


def make_reverse_examples(*, seed: int, num_train: int, num_eval: int, length: int = 4):
    """Reverse a list of digits: `reverse 3 1 4 =` -> ` 4 1 3`."""
    rng = random.Random(f"reverse:{seed}")

    def draw() -> Example:
        digits = [str(rng.randint(0, 9)) for _ in range(length)]
        return Example("reverse " + " ".join(digits) + " =", {"answer": "".join(" " + d for d in reversed(digits))})

    return _split_unique(draw, num_train=num_train, num_eval=num_eval, task_name="test_reverse")


@pytest.fixture
def registered():
    register_policy_loss("test_unclipped", unclipped_surrogate, metrics=("test/negative_advantage",),
                         origin=__name__)
    AGGREGATIONS.register("test_row_sum", row_sum, declares=Aggregation(micro_batch_weight=rows_share),
                          origin=__name__)
    ESTIMATORS.register("test_max_baseline", max_baseline, declares=Estimator(), origin=__name__)
    register_task("test_reverse", make_reverse_examples, corrupt=corrupt_sort_answer, accuracy_reward="exact_match")
    CALLS.clear()
    yield
    unregister_policy_loss("test_unclipped")
    AGGREGATIONS.unregister("test_row_sum")
    ESTIMATORS.unregister("test_max_baseline")
    TASKS.unregister("test_reverse")


def tiny_preset(tmp_path, algorithm: dict, data: dict | None = None):
    preset = {
        "name": "variant",
        "model": {"name_or_path": "builtin:tiny", "lora": {"r": 4, "alpha": 8.0}},
        "algorithm": {"name": "grpo", "num_generations": 2, "max_completion_length": 10, **algorithm},
        "data": {"task": "sort", "num_train": 40, "num_eval": 4, **(data or {})},
        "rewards": [{"name": "exact_match"}],
        "training": {"max_steps": 2, "batch_size": 4, "micro_batch_size": 2, "eval_steps": 0, "save_steps": 0,
                     "record_rollouts": 0, "log_completions": 4},
    }
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(preset))
    return path


def trained(tmp_path, algorithm: dict, data: dict | None = None) -> list[dict]:
    """The events of a 2-step run of the preset, after checking it finished."""
    run = tmp_path / "run"
    result = cli("run", tiny_preset(tmp_path, algorithm, data), "--run-dir", run, "--quiet")
    assert result.code == 0, result.err
    events = rundir.read_events(run)
    assert [e["step"] for e in events if e["type"] == "metrics"] == [1, 2]
    return events


def test_a_registered_surrogate_trains_and_reports_its_metric(registered, tmp_path):
    events = trained(tmp_path, {"loss_type": "test_unclipped"})
    assert CALLS["surrogate"] == 4  # 2 steps x 2 micro-batches
    for metrics in (e for e in events if e["type"] == "metrics"):
        assert 0.0 <= metrics["test/negative_advantage"] <= 1.0
        assert metrics["clip_ratio/region_mean"] is None  # it declares no clip


def test_a_registered_aggregation_trains(registered, tmp_path):
    trained(tmp_path, {"loss_type": "grpo", "loss_aggregation": "test_row_sum"})
    assert CALLS["aggregation"] == 4


def test_a_registered_estimator_gives_the_advantages(registered, tmp_path):
    events = trained(tmp_path, {"advantage_estimator": "test_max_baseline"})
    assert CALLS["estimator"] == 2  # once a step
    samples = [s for e in events if e["type"] == "samples" for s in e["samples"]]
    assert samples and all(s["advantage"] <= 0.0 for s in samples)


def test_a_registered_task_gives_the_prompts(registered, tmp_path):
    events = trained(tmp_path, {}, {"task": "test_reverse", "task_options": {"length": 3}})
    prompts = [s["prompt"] for e in events if e["type"] == "samples" for s in e["samples"]]
    assert prompts and all(p.startswith("reverse ") and len(p.split()) == 5 for p in prompts)


def test_a_variant_no_one_registered_is_refused_before_training(tmp_path):
    result = cli("validate", tiny_preset(tmp_path, {"loss_type": "test_unclipped"}))
    assert result.code == 2
    assert "algorithm.loss_type: unknown loss type 'test_unclipped'" in result.err + result.out
