"""KTO (algorithm `kto`): its loss against numbers worked by hand, the KL reference point,
the unpaired data (TRL's format, plain and conversational, and its errors), and steps of
the trainer on the built-in model (metrics, records, samples, evaluation)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import small_preset_dict
from engine.algorithms.kto.config import KTOConfig, weight_ranges
from engine.algorithms.kto.trainer import KTOTrainer
from engine.data import Example, preference_pairs
from engine.data.unpaired import load_unpaired_splits, unpair, unpaired_rows
from engine.foundation.errors import PresetError
from engine.rewards.input_checks import reward_field_problems
from engine.preset.schema import preset_from_dict
from engine.data.config import DataConfig
from engine.rl.kto_losses import kl_reference_point, kto_loss, mismatched_order
from engine.run import rundir

KTO_METRICS = {"loss", "kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen",
               "logps/rejected", "logits/chosen", "logits/rejected", "entropy", "count/chosen", "count/rejected",
               "grad_norm", "learning_rate", "step_time"}


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def kto_preset(training=None, data=None, **algorithm):
    preset = small_preset_dict(**(training or {}))
    preset["algorithm"] = {"name": "kto", "max_completion_length": 16, **algorithm}
    if data is not None:
        preset["data"] = data
    return preset_from_dict(preset)


# ------------------------------------------------------------------------- the loss


def test_kto_loss_against_hand_worked_numbers():
    # beta 0.1; policy - reference = z = [2, -1] (a desirable row, an undesirable one); kl 0.5.
    # desirable:   1 - sigmoid(0.1 * (2 - 0.5))    = 1 - sigmoid(0.15) = 0.462570
    # undesirable: 1 - sigmoid(0.1 * (0.5 - (-1))) = 1 - sigmoid(0.15) = 0.462570
    # rewards: 0.1 * z = [0.2, -0.1]
    policy, ref = torch.tensor([-1.0, -4.0]), torch.tensor([-3.0, -3.0])
    losses, rewards = kto_loss(policy, ref, torch.tensor([True, False]), torch.tensor(0.5), beta=0.1)
    assert losses.tolist() == pytest.approx([0.462570, 0.462570], abs=1e-6)
    assert losses.tolist() == pytest.approx([1 - sigmoid(0.15)] * 2, abs=1e-7)
    assert rewards.tolist() == pytest.approx([0.2, -0.1], abs=1e-7)
    # The same z = 1 on both sides, kl 0.5: the reference point's side matters.
    # desirable:   1 - sigmoid(0.1 * (1 - 0.5)) = 1 - sigmoid(0.05)  = 0.487503
    # undesirable: 1 - sigmoid(0.1 * (0.5 - 1)) = 1 - sigmoid(-0.05) = 0.512497
    losses, _ = kto_loss(torch.tensor([1.0, 1.0]), torch.zeros(2), torch.tensor([True, False]), torch.tensor(0.5),
                         beta=0.1)
    assert losses.tolist() == pytest.approx([0.487503, 0.512497], abs=1e-6)


def test_apo_zero_unpaired_against_hand_worked_numbers_without_the_reference_point():
    # beta 0.1, z = [2, -1]: desirable 1 - sigmoid(0.2) = 0.450166, undesirable sigmoid(-0.1) = 0.475021;
    # the KL point is not read (0.5 and 7 give the same losses).
    policy, ref = torch.tensor([-1.0, -4.0]), torch.tensor([-3.0, -3.0])
    for kl in (0.5, 7.0):
        losses, rewards = kto_loss(policy, ref, torch.tensor([True, False]), torch.tensor(kl), beta=0.1,
                                   loss_type="apo_zero_unpaired")
        assert losses.tolist() == pytest.approx([0.450166, 0.475021], abs=1e-6)
        assert rewards.tolist() == pytest.approx([0.2, -0.1], abs=1e-7)


def test_the_weights_scale_each_side_and_the_gradient_is_the_sigmoids():
    # desirable_weight 3, undesirable_weight 2 on the first example: 3 x 0.462570 = 1.387710, 2 x 0.462570 = 0.925140
    z = torch.tensor([2.0, -1.0], requires_grad=True)
    losses, _ = kto_loss(z, torch.zeros(2), torch.tensor([True, False]), torch.tensor(0.5), beta=0.1,
                         desirable_weight=3.0, undesirable_weight=2.0)
    assert losses.tolist() == pytest.approx([1.387710, 0.925140], abs=1e-5)
    losses.sum().backward()
    # d/dz [w (1 - sigmoid(b (z - kl)))] = -w b s (1 - s), s = sigmoid(0.15) = 0.537430:
    #   desirable: -3 x 0.1 x 0.537430 x 0.462570 = -0.074579
    # d/dz [w (1 - sigmoid(b (kl - z)))] = +w b s (1 - s): undesirable: 2 x 0.1 x 0.248599 = 0.049720
    assert z.grad.tolist() == pytest.approx([-0.074579, 0.049720], abs=1e-6)
    with pytest.raises(ValueError, match="unknown KTO loss_type 'kto2'; allowed: kto, apo_zero_unpaired"):
        kto_loss(z, torch.zeros(2), torch.tensor([True, False]), torch.tensor(0.0), beta=0.1, loss_type="kto2")


def test_the_kl_reference_point_is_the_batch_mean_detached_and_clamped():
    policy = torch.tensor([-3.0, -3.0], requires_grad=True)
    point = kl_reference_point(policy, torch.tensor([-4.0, -4.0]))  # mean(1, 1) = 1
    assert float(point) == 1.0 and not point.requires_grad and point.dim() == 0
    assert float(kl_reference_point(torch.tensor([-3.0, -5.0]), torch.tensor([-4.0, -4.0]))) == 0.0  # mean(1, -1)
    assert float(kl_reference_point(torch.tensor([-3.0, -6.0]), torch.tensor([-4.0, -4.0]))) == 0.0  # -0.5 -> 0
    assert float(kl_reference_point(torch.tensor([-2.0, -4.5]), torch.tensor([-4.0, -4.0]))) == 0.75  # mean(2, -0.5)
    # No gradient reaches the policy through the point: the loss's gradient is the rows' alone.
    z = torch.tensor([1.0], requires_grad=True)
    losses, _ = kto_loss(z, torch.zeros(1), torch.tensor([True]), kl_reference_point(z, torch.zeros(1)), beta=1.0)
    losses.sum().backward()
    s = sigmoid(0.0)  # z - kl = 1 - 1
    assert z.grad.item() == pytest.approx(-s * (1 - s))  # -0.25, not 0 (as it would be through kl)


def test_mismatched_pairs_rotate_the_completions_as_trl():
    # TRL: (x_1, y_1), ..., (x_n, y_n) -> (x_1, y_n), (x_2, y_1), ..., (x_n, y_{n-1})
    assert mismatched_order(4) == [3, 0, 1, 2]
    assert mismatched_order(2) == [1, 0]
    assert mismatched_order(1) == [0]


# ----------------------------------------------------------------------- the config


def test_kto_needs_two_rows_a_step_for_its_reference_point():
    with pytest.raises(PresetError, match="training.batch_size: KTO's loss_type kto needs at least 2 rows"):
        kto_preset(training={"batch_size": 1})
    assert kto_preset(training={"batch_size": 1}, loss_type="apo_zero_unpaired").training.batch_size == 1
    with pytest.raises(PresetError, match="algorithm.desirable_weight"):
        kto_preset(desirable_weight=0.0)


def test_the_weight_advice_is_trls():
    # 100 desirable, 300 undesirable, weights 1 and 1: desirable_weight in [300/100, x 1.33] = [3.0, 3.99],
    # undesirable_weight in [100/300 / 1.33, 100/300] = [0.25, 0.33]
    assert weight_ranges(100, 300, 1.0, 1.0) == ((3.0, 3.99), (0.25, 0.33))
    warning = KTOConfig().balance_warning(100, 300)
    assert "EITHER desirable_weight in [3.0, 3.99] OR undesirable_weight in [0.25, 0.33]" in warning
    assert KTOConfig(desirable_weight=3.5).balance_warning(100, 300) == ""
    assert KTOConfig(undesirable_weight=0.3).balance_warning(100, 300) == ""
    assert KTOConfig().balance_warning(50, 50) == ""


def test_the_rewards_data_columns_are_not_checked_against_labelled_rows():
    preset = kto_preset()
    assert KTOConfig.trains_on_unpaired and preset.algorithm.playground_reason().startswith("KTO trains on")
    assert reward_field_problems(preset, [Example("2+2=", {"completion": " 4", "label": True})]) == []


# ------------------------------------------------------------------------- the data


def test_a_tasks_rows_are_its_preference_pairs_unpaired():
    cfg = DataConfig(task="sort", num_train=6, num_eval=2)
    train, held_out = load_unpaired_splits(cfg, seed=3)
    from engine.data import load_splits

    pairs = preference_pairs(load_splits(cfg, 3)[0], 3, "sort")  # DPO's pairs for the same seed
    assert len(train) == 12 and len(held_out) == 4
    for pair, (good, bad) in zip(pairs, zip(train[0::2], train[1::2])):
        assert good.prompt == bad.prompt == pair.prompt
        assert (good.fields["completion"], good.fields["label"]) == (pair.fields["chosen"], True)
        assert (bad.fields["completion"], bad.fields["label"]) == (pair.fields["rejected"], False)
        assert good.fields["answer"] == pair.fields["answer"] and "chosen" not in good.fields


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_unpaired_rows_from_files_plain_conversational_csv_and_pairs(tmp_path):
    plain = write_rows(tmp_path / "plain.jsonl", [{"prompt": f"p{i}", "completion": " a", "label": i % 2 == 0}
                                                  for i in range(5)])
    train, held_out = load_unpaired_splits(DataConfig(task=None, path=str(plain), num_eval=1), seed=0)
    assert len(train) == 4 and len(held_out) == 1
    assert sorted(e.fields["label"] for e in train + held_out) == [False, False, True, True, True]
    talk = [{"prompt": [{"role": "user", "content": f"q{i}"}], "completion": [{"role": "assistant", "content": "yes"}],
             "label": False} for i in range(3)]
    conversational = write_rows(tmp_path / "talk.jsonl", talk)
    train, _ = load_unpaired_splits(DataConfig(task=None, path=str(conversational), num_eval=0), seed=0)
    assert train[0].fields["completion"] == [{"role": "assistant", "content": "yes"}]
    assert isinstance(train[0].prompt, list) and train[0].fields["label"] is False
    csv = tmp_path / "rows.csv"
    csv.write_text("prompt,completion,label\nq1, yes,TRUE\nq2, no,false\n")
    train, _ = load_unpaired_splits(DataConfig(task=None, path=str(csv), num_eval=0), seed=0)
    assert sorted(e.fields["label"] for e in train) == [False, True]  # CSV cells are text
    # Preference pairs are unpaired, as TRL's KTO trainer does
    rows = unpaired_rows([Example("q", {"chosen": " a", "rejected": " b"})], lambda n, e: f"row {n}")
    assert rows == unpair([Example("q", {"chosen": " a", "rejected": " b"})])
    assert [(r.fields["completion"], r.fields["label"]) for r in rows] == [(" a", True), (" b", False)]


def test_a_missing_column_or_a_label_not_boolean_names_the_column_and_the_row(tmp_path):
    rows = [{"prompt": f"p{i}", "completion": " a", "label": True} for i in range(4)]
    rows[2]["label"] = 1
    bad_label = write_rows(tmp_path / "bad_label.jsonl", rows)
    with pytest.raises(ValueError, match=r"row 3 of data file .*bad_label.jsonl: column 'label' must be true "
                                         r"\(a desirable completion\) or false \(an undesirable one\), got 1"):
        KTOTrainer(kto_preset(data={"task": None, "path": str(bad_label), "num_eval": 0}), tmp_path / "run")
    rows[2] = {"prompt": "p2", "label": False}
    no_completion = write_rows(tmp_path / "no_completion.jsonl", rows)
    with pytest.raises(ValueError, match=r"row 3 of data file .*: KTO needs a `completion` column .* this row "
                                         r"lacks completion$"):
        KTOTrainer(kto_preset(data={"task": None, "path": str(no_completion), "num_eval": 0}), tmp_path / "run")
    # Without a locator (a data set): the split and the example's number
    with pytest.raises(ValueError, match=r"data.path: training example 0 \('q'\): .* lacks completion and label"):
        load_unpaired_splits(DataConfig(task=None, path=str(write_rows(tmp_path / "bare.jsonl", [{"prompt": "q"}])),
                                        num_eval=0), seed=0)


# ---------------------------------------------------------------------- the trainer


def test_a_kto_run_logs_trls_metrics_labelled_records_and_samples(tmp_path):
    trainer = KTOTrainer(kto_preset(), tmp_path / "run")
    calls = []
    real_rows = trainer.completion_rows

    def spy(prompts, completions):
        calls.append((prompts, completions))
        return real_rows(prompts, completions)

    trainer.completion_rows = spy
    assert trainer.run() == "done"
    events = rundir.read_events(tmp_path / "run")
    metrics = [e for e in events if e["type"] == "metrics"]
    assert len(metrics) == 3 and all(not KTO_METRICS - set(m) for m in metrics)
    first = metrics[0]
    # At the start the policy is the reference: every log ratio 0, kl 0, each row's loss 1 - sigmoid(0) = 0.5
    assert first["kl"] == 0.0 and first["loss"] == pytest.approx(0.5, abs=1e-6)
    assert first["rewards/chosen"] == pytest.approx(0.0, abs=1e-6)
    assert first["count/chosen"] + first["count/rejected"] == 8
    # The KL pairs of each step: prompt i with the completion of row i - 1 (TRL's rotation)
    step_calls = [c for c in calls if len(c[0]) == 8]  # (the evaluations' passes hold the 16 held-out rows)
    (rows_prompts, rows_completions), (kl_prompts, kl_completions) = step_calls[:2]
    assert kl_prompts == rows_prompts and kl_completions == rows_completions[-1:] + rows_completions[:-1]
    samples = next(e for e in events if e["type"] == "samples")["samples"]
    assert {"prompt", "completion", "label", "reward"} <= set(samples[0])
    assert {s["label"] for s in samples} <= {True, False}
    step3 = [json.loads(line) for line in (tmp_path / "run" / "trajectories" / "step_000003.jsonl").read_text().splitlines()]
    assert len(step3) == 2
    beta = trainer.algo.beta
    for record in step3:
        assert record["algorithm"] == "kto" and isinstance(record["label"], bool)
        assert record["tokens"][-1] == "<eos>"
        assert record["kl"] == pytest.approx(metrics[-1]["kl"], rel=1e-3)  # the step's reference point
        assert record["implicit_reward"] == pytest.approx(
            [beta * (lp - ref) for lp, ref in zip(record["logprob"], record["ref_logprob"])], rel=1e-2, abs=2e-4)
        assert sum(record["implicit_reward"]) == pytest.approx(record["reward"], abs=1e-3)
        assert len(record["entropy"]) == len(record["tokens"])
        # the update's effect on the row's tokens (engine/algorithms/update_effect.py), as every algorithm records it
        assert record["logprob_change"] == pytest.approx(
            [after - before for after, before in zip(record["logprob_after"], record["logprob"])], rel=1e-2, abs=2e-3)
    assert {"update/against_advantage_ratio", "update/change_pos_adv_mean"} <= set(metrics[-1])
    started = events[0]
    assert started["records"] == {"layout": "single", "token_values": ["implicit_reward", "logprob", "ref_logprob",
                                                                       "entropy", "logprob_after", "logprob_change"],
                                  "preferred": ["implicit_reward"]}
    assert started["sample_fields"][0]["key"] == "label"  # the samples table's column (declaration.py)
    assert {"kl", "kto_rewards", "kto_logps", "kto_eval", "loss"} <= {p["key"] for p in started["plots"]}
    evals = [e for e in events if e["type"] == "eval"]
    assert evals[0]["label_accuracy"] == 0.0  # every implicit reward exactly 0 at the start
    assert evals[0]["num_rows"] == 16 and evals[0]["num_examples"] == 8  # each prompt generated once
    assert {"accuracy", "label_accuracy", "rewards/chosen", "rewards/rejected", "rewards/margins"} <= set(evals[-1])


def test_a_step_moves_its_rows_the_way_their_labels_say(tmp_path):
    trainer = KTOTrainer(kto_preset(training={"learning_rate": 1e-3}), tmp_path / "run")
    before = trainer.train_step().metrics
    assert before["loss"] == pytest.approx(0.5, abs=1e-6) and before["rewards/margins"] == pytest.approx(0, abs=1e-6)
    trainer.stream.position = 0  # the same rows again, after one update
    trainer.optimizer.step = lambda: None
    after = trainer.train_step().metrics
    assert after["rewards/chosen"] > 0 > after["rewards/rejected"]  # desirable up, undesirable down
    assert after["loss"] < before["loss"]


def test_micro_batches_and_precomputed_reference_give_the_same_step(tmp_path):
    grads, losses = {}, {}
    for micro, precompute in ((None, False), (3, True)):
        trainer = KTOTrainer(kto_preset(training={"micro_batch_size": micro}, precompute_ref_log_probs=precompute,
                                        desirable_weight=1.5), tmp_path / f"m{micro}")
        trainer.optimizer.step = lambda: None
        trainer.scheduler.step = lambda: None
        losses[micro] = [trainer.train_step().metrics["loss"] for _ in range(2)]
        grads[micro] = torch.cat([p.grad.flatten() for p in trainer.trainable_parameters() if p.grad is not None])
    assert len(trainer.reference_cache) == len(trainer.train_examples)
    assert torch.allclose(grads[None], grads[3], rtol=1e-4, atol=1e-7)
    assert losses[3] == pytest.approx(losses[None], rel=1e-5)


def test_kto_on_conversational_rows_through_a_chat_template(tmp_path):
    import hub_fixtures as hf

    model = hf.make_tiny_chat_model(tmp_path / "model")
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
             "completion": [{"role": "assistant", "content": str(2 * i if i % 3 else i)}], "label": bool(i % 3)}
            for i in range(12)]
    path = write_rows(tmp_path / "kto.jsonl", rows)
    preset = small_preset_dict(max_steps=1, batch_size=4, record_rollouts=1)
    preset.update(model={"name_or_path": str(model), "lora": {"r": 4, "alpha": 8.0}},
                  algorithm={"name": "kto", "max_completion_length": 8},
                  data={"task": None, "path": str(path), "num_eval": 2}, rewards=[{"name": "exact_match"}])
    trainer = KTOTrainer(preset_from_dict(preset), tmp_path / "run")
    e = trainer.train_examples[0]
    assert e.prompt.endswith("<|im_start|>assistant\n") and e.fields["completion"].endswith("<|im_end|>\n")
    assert trainer.run() == "done"
    record = json.loads((tmp_path / "run" / "trajectories" / "step_000001.jsonl").read_text().splitlines()[0])
    assert record["tokens"][-1] == "<|im_end|>"  # the completion ends with the template's end of turn
    evals = [e for e in rundir.read_events(tmp_path / "run") if e["type"] == "eval"]
    assert evals[-1]["num_rows"] == 2 and evals[-1]["accuracy"] is None  # no answers: no generation eval
