"""The update's effect recorded (issue 28): after a step, each recorded token's log-probability
under the updated policy, checked against a forward pass of the model written out here on
the same weights; its change against the log-probability the step started from; the
update/* metrics, the declaration, and the switch that turns it off. GRPO, PPO and DPO."""

from __future__ import annotations

import pytest
import torch

from conftest import small_preset_dict
from engine.commands.train import build_trainer
from engine.preset.schema import preset_from_dict
from engine.run import rundir


def one_step(tmp_path, monkeypatch, algorithm: dict | None = None, **training):
    data = small_preset_dict(max_steps=1, record_rollouts=4, **training)
    data["data"]["num_eval"] = 0
    if algorithm:
        data["algorithm"] = algorithm
    trainer = build_trainer(preset_from_dict(data), tmp_path / "run")
    results = []
    real_step = trainer.train_step
    monkeypatch.setattr(trainer, "train_step", lambda: results.append(real_step()) or results[-1])
    assert trainer.run() == "done"
    return trainer, results[0]


@torch.no_grad()
def logprobs_by_hand(model, rollout, row: int, temperature: float) -> torch.Tensor:
    """log p of row `row`'s completion tokens: the prompt's real tokens then the completion,
    one forward pass, each completion token read at the position before it."""
    prompt = rollout.prompt_ids[row][rollout.prompt_mask[row].bool()]
    n = int(rollout.lengths[row])
    completion = rollout.completion_ids[row, :n]
    logits = model(input_ids=torch.cat([prompt, completion])[None]).logits[0].float()
    predicting = logits[len(prompt) - 1: len(prompt) - 1 + n] / temperature
    return torch.log_softmax(predicting, dim=-1).gather(-1, completion[:, None])[:, 0]


def test_grpo_records_each_tokens_logprob_after_the_update(tmp_path, monkeypatch):
    trainer, result = one_step(tmp_path, monkeypatch)
    last = result.outputs
    after = last.logprob_after
    assert after is not None and after.shape[0] == 4
    temperature = trainer.algo.temperature
    for row in range(4):
        n = int(last.rollout.lengths[row])
        assert torch.allclose(after[row, :n], logprobs_by_hand(trainer.model, last.rollout, row, temperature),
                              atol=1e-5)
    records = rundir.read_trajectories(tmp_path / "run", 1)
    moved = 0
    for row, record in enumerate(records):
        n = len(record["tokens"])
        change = (after[row, :n] - last.per_token["logprob"][row, :n]).tolist()
        assert record["logprob_after"] == pytest.approx(after[row, :n].tolist(), rel=1e-3, abs=1e-6)
        assert record["logprob_change"] == pytest.approx(change, rel=1e-3, abs=1e-6)
        moved += len(set(record["logprob_change"])) > 1  # the change varies within a completion
    assert moved
    metrics = next(e for e in rundir.read_events(tmp_path / "run") if e["type"] == "metrics")
    assert {"update/change_abs_mean", "update/change_top10_share", "update/against_advantage_ratio"} <= set(metrics)
    started = next(e for e in rundir.read_events(tmp_path / "run") if e["type"] == "run_started")
    assert started["records"]["token_values"][-2:] == ["logprob_after", "logprob_change"]
    assert {"update_effect", "update_change"} <= {p["key"] for p in started["plots"]}


def test_the_switch_turns_the_pass_off(tmp_path, monkeypatch):
    _, result = one_step(tmp_path, monkeypatch, record_update_effect=False)
    assert result.outputs.logprob_after is None
    records = rundir.read_trajectories(tmp_path / "run", 1)
    assert records and not any("logprob_after" in r or "logprob_change" in r for r in records)
    metrics = next(e for e in rundir.read_events(tmp_path / "run") if e["type"] == "metrics")
    assert not any(key.startswith("update/") for key in metrics)
    started = next(e for e in rundir.read_events(tmp_path / "run") if e["type"] == "run_started")
    assert "logprob_change" not in started["records"]["token_values"]


def test_ppo_and_dpo_record_it_too(tmp_path, monkeypatch):
    ppo = {"name": "ppo", "num_generations": 1, "max_completion_length": 14}
    trainer, result = one_step(tmp_path / "ppo", monkeypatch, ppo)
    last = result.outputs
    for row in range(4):
        n = int(last.rollout.lengths[row])
        assert torch.allclose(last.logprob_after[row, :n],
                              logprobs_by_hand(trainer.model, last.rollout, row, trainer.algo.temperature), atol=1e-5)
    records = rundir.read_trajectories(tmp_path / "ppo" / "run", 1)
    assert all(len(r["logprob_change"]) == len(r["tokens"]) for r in records)

    data = small_preset_dict(max_steps=1, record_rollouts=2)
    data["data"]["num_eval"] = 0
    data["algorithm"] = {"name": "dpo", "max_completion_length": 16}
    data["training"]["batch_size"] = 4
    trainer = build_trainer(preset_from_dict(data), tmp_path / "dpo")
    assert trainer.run() == "done"
    (record, *_) = rundir.read_trajectories(tmp_path / "dpo", 1)
    for side in ("chosen", "rejected"):
        values = record[side]
        assert len(values["logprob_change"]) == len(values["tokens"])
        assert values["logprob_change"] == pytest.approx(
            [a - b for a, b in zip(values["logprob_after"], values["logprob"])], abs=5e-3)  # each rounded to 4 digits
    metrics = next(e for e in rundir.read_events(tmp_path / "dpo") if e["type"] == "metrics")
    assert metrics["update/change_pos_adv_mean"] is not None and metrics["update/change_neg_adv_mean"] is not None


def test_kto_and_online_dpo_record_it_too(tmp_path, monkeypatch):
    """The two algorithms that gained it when the base took over the step (issue 37): each
    recorded row's log-probability after the update equals a forward pass written out here;
    the change is per token in the records; the update/* metrics have both signs (KTO's
    desirable rows and online DPO's chosen completions count as pushed up)."""
    for name, algorithm in (("kto", {"name": "kto", "max_completion_length": 16}),
                            ("online_dpo", {"name": "online_dpo", "max_completion_length": 14})):
        trainer, result = one_step(tmp_path / name, monkeypatch, algorithm)
        last = result.outputs
        rows = last.rows if name == "kto" else last.rollout
        after = last.logprob_after
        recorded = 4 if name == "kto" else 8  # record_rollouts counts online DPO's pairs
        assert after is not None and after.shape[0] == recorded, name
        for row in range(recorded):
            n = int(rows.lengths[row])
            assert torch.allclose(after[row, :n], logprobs_by_hand(trainer.model, rows, row,
                                                                   trainer.policy.pass_temperature), atol=1e-5), name
        metrics = next(e for e in rundir.read_events(tmp_path / name / "run") if e["type"] == "metrics")
        assert metrics["update/change_pos_adv_mean"] is not None and metrics["update/change_neg_adv_mean"] is not None
        started = next(e for e in rundir.read_events(tmp_path / name / "run") if e["type"] == "run_started")
        assert {"update_effect", "update_change"} <= {p["key"] for p in started["plots"]}, name
