"""The RLHF pipeline (issue 38): SFT and reward-model runs, and runs that stand on them.

One small pipeline is trained once a worker (`pipeline`: SFT, then a reward model from it,
two steps each, in this process); the tests check its maths against passes written out
here, its hand-off (model.start_from, a reward-model run as a reward, the exported
reward model) and the errors for bad input.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from conftest import ROOT
from engine.commands.train import build_trainer
from engine.data.demonstrations import demonstration, load_demonstration_splits
from engine.data.examples import Example
from engine.data.preference import load_preference_splits
from engine.model.score import encode_texts, last_token_positions, position_scores
from engine.preset.schema import preset_from_dict
from engine.rl.bradley_terry import bradley_terry_loss
from engine.run import rundir
from engine.run.lineage import pin_run_references
from engine_runs import cli


def stage(name: str, algorithm: dict, **model) -> dict:
    """A two-step preset on the built-in model: `algorithm`, the model's extra fields."""
    return {"name": name, "model": {"name_or_path": "builtin:tiny", "lora": {"r": 4, "alpha": 8.0}, **model},
            "algorithm": {"max_completion_length": 14, **algorithm},
            "data": {"task": "sort", "num_train": 64, "num_eval": 8},
            "rewards": [{"name": "exact_match"}],
            "training": {"max_steps": 2, "batch_size": 8, "learning_rate": 0.01, "eval_steps": 0, "save_steps": 2,
                         "record_rollouts": 2, "log_completions": 2}}


def train(data: dict, run: Path):
    """The preset trained in this process to its end; its trainer."""
    trainer = build_trainer(preset_from_dict(data), run)
    assert trainer.run() == "done"
    return trainer


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> dict:
    """runs/sft (SFT) and runs/rm (a reward model started from it), trained once."""
    runs = tmp_path_factory.mktemp("pipeline") / "runs"
    sft = train(stage("sft-stage", {"name": "sft"}), runs / "sft")
    rm = train(stage("rm-stage", {"name": "reward_model", "center_rewards_coefficient": 0.01},
                     start_from="run:sft-stage"), runs / "rm")
    return {"runs": runs, "sft": sft, "rm": rm}


# ------------------------------------------------------------------ the maths, by hand


def test_bradley_terry_loss_with_margin_and_centering_by_hand():
    r_c, r_r = torch.tensor([2.0, 0.5]), torch.tensor([1.0, 1.5])
    plain = bradley_terry_loss(r_c, r_r)
    assert plain.tolist() == pytest.approx([math.log(1 + math.exp(-1.0)), math.log(1 + math.exp(1.0))], abs=1e-6)
    margin = bradley_terry_loss(r_c, r_r, torch.tensor([1.0, -1.0]))  # r_c - r_r - m: 0 and 0
    assert margin.tolist() == pytest.approx([math.log(2.0)] * 2, abs=1e-6)
    centred = bradley_terry_loss(r_c, r_r, center_rewards_coefficient=0.1)  # + 0.1 (r_c + r_r)^2: 0.9, 0.4
    assert (centred - plain).tolist() == pytest.approx([0.9, 0.4], abs=1e-6)


def test_the_score_is_read_at_the_answers_end_when_pad_is_eos():
    """pad == EOS: a text's end token would be taken for padding. No text gets one, and the
    score is read at the last token that is not padding, as transformers reads it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "assets" / "tiny-model")
    tokenizer.pad_token = tokenizer.eos_token
    ids, mask = encode_texts(tokenizer, ["sort 2 1 = 1 2", "sort 9 8 7 = 7 8 9"], None, "cpu")
    assert ids[0, 14:].tolist() == [tokenizer.eos_token_id] * 4 and mask[0].sum() == 14
    positions = last_token_positions(ids, tokenizer.pad_token_id)
    assert positions.tolist() == [13, 17]  # the answers' last digits
    assert tokenizer.decode(ids[0, 13]) == "2" and tokenizer.decode(ids[1, 17]) == "9"
    # an end token inside a row (pad == EOS) is padding too: the last real token before it
    assert last_token_positions(torch.tensor([[5, 6, 2, 2]]), 2).tolist() == [1]


def test_the_score_at_every_position_is_the_reward_of_the_prefix_ending_there(pipeline):
    """One pass gives what scoring each prefix alone would give (reward-bench's N passes)."""
    rm = pipeline["rm"]
    text = "sort 4 1 3 = 1 3 4"
    ids, mask = encode_texts(rm.tokenizer, [text], None, rm.device)
    with torch.no_grad():
        positions = position_scores(rm.model, ids, mask)[0]
        for end in (6, 12, len(text)):
            prefix, _ = encode_texts(rm.tokenizer, [text[:end]], None, rm.device)
            alone = rm.model(input_ids=prefix).logits[0, 0]
            assert float(positions[prefix.shape[1] - 1]) == pytest.approx(float(alone), abs=1e-5)


def test_sft_loss_and_token_accuracy_equal_a_pass_written_out(tmp_path, monkeypatch):
    """The step's loss is the completion tokens' mean NLL over the batch, its accuracy the
    share of them that are the model's top token, computed here from the logits."""
    data = stage("sft-one", {"name": "sft"})
    data["training"].update(max_steps=1, save_steps=0, learning_rate=1e-9)  # the pass below: as before the step
    trainer = build_trainer(preset_from_dict(data), tmp_path / "run")
    results = []
    real = trainer.train_step
    monkeypatch.setattr(trainer, "train_step", lambda: results.append(real()) or results[-1])
    assert trainer.run() == "done"
    rows = results[0].outputs.rows
    nll, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for r in range(rows.completion_ids.shape[0]):
            prompt = rows.prompt_ids[r][rows.prompt_mask[r].bool()]
            n = int(rows.completion_mask[r].sum())
            target = rows.completion_ids[r, :n]
            logits = trainer.model(input_ids=torch.cat([prompt, target])[None]).logits[0, len(prompt) - 1:-1]
            nll -= float(torch.log_softmax(logits.float(), -1).gather(-1, target[:, None]).sum())
            correct += int((logits.argmax(-1) == target).sum())
            count += n
    metrics = results[0].metrics
    assert metrics["loss"] == pytest.approx(nll / count, rel=1e-5)
    assert metrics["mean_token_accuracy"] == pytest.approx(correct / count)
    assert metrics["num_tokens"] == int(rows.completion_mask.sum() + rows.prompt_mask.sum())


# ------------------------------------------------------------------ the hand-off


def test_sft_and_reward_model_runs_write_what_they_promise(pipeline):
    sft_events = rundir.read_events(pipeline["runs"] / "sft")
    metrics = [e for e in sft_events if e["type"] == "metrics"]
    assert {"loss", "mean_token_accuracy", "entropy", "num_tokens"} <= set(metrics[-1])
    record = rundir.read_trajectories(pipeline["runs"] / "sft", 2)[0]
    assert {"logprob", "entropy", "top_tokens", "logprob_change"} <= set(record)
    rm_events = rundir.read_events(pipeline["runs"] / "rm")
    last = [e for e in rm_events if e["type"] == "metrics"][-1]
    assert {"accuracy", "margin", "min_reward", "mean_reward", "max_reward", "rewards/chosen",
            "rewards/rejected", "num_tokens"} <= set(last)
    evaluation = [e for e in rm_events if e["type"] == "eval"][-1]
    assert 0.0 <= evaluation["accuracy"] <= 1.0 and evaluation["num_pairs"] == 8
    pair = rundir.read_trajectories(pipeline["runs"] / "rm", 2)[0]
    for side in ("chosen", "rejected"):  # the score at every answer token, ending at the side's reward
        assert pair[side]["score"][-1] == pytest.approx(pair[side]["reward"], abs=1e-3)
    started = next(e for e in rm_events if e["type"] == "run_started")
    assert started["lineage"] == [{"role": "start_from", "run": str((pipeline["runs"] / "sft").resolve()),
                                   "checkpoint": "step_000002", "step": 2, "algorithm": "sft",
                                   "preset": "sft-stage"}]
    checkpoint = rundir.complete_checkpoints(pipeline["runs"] / "rm")[-1]
    assert "score" in json.loads((checkpoint / "adapter_config.json").read_text())["modules_to_save"]


def test_a_policy_started_from_an_sft_run_is_that_run_at_step_0(pipeline, tmp_path):
    """model.start_from: the SFT adapter merged into the base; with its fresh adapter (zero
    at the start) the new policy gives the SFT model's logprobs, and so does its reference."""
    sft = pipeline["sft"]
    data = stage("grpo-after-sft", {"name": "grpo", "num_generations": 4},
                 start_from=str(pipeline["runs"] / "sft"))
    policy = build_trainer(preset_from_dict(data), pipeline["runs"] / "grpo")
    ids = torch.tensor([[ord(c) - 28 for c in "sort 3 1 2 = 1 2 3"]])  # printable ASCII is id - 28 in the tiny vocab
    with torch.no_grad():
        expected = sft.model(input_ids=ids).logits
        assert torch.allclose(policy.model(input_ids=ids).logits, expected, atol=1e-5)
        from engine.model.loading import reference_mode
        with reference_mode(policy.model):
            assert torch.allclose(policy.model(input_ids=ids).logits, expected, atol=1e-5)
    assert policy.preset.model.start_from == str(rundir.complete_checkpoints(pipeline["runs"] / "sft")[-1].resolve())


def test_a_pair_scores_the_same_in_the_reward_model_run_and_as_an_rl_reward(pipeline):
    from engine.rewards.model import reward_model_reward

    rm = pipeline["rm"]
    pairs = rm.eval_examples[:4]
    in_run = rm.score_pairs(pairs).tolist()
    checkpoint = rundir.complete_checkpoints(pipeline["runs"] / "rm")[-1]
    reward = reward_model_reward(model=str(checkpoint), device="cpu")
    prompts = [e.prompt for e in pairs for _ in range(2)]
    answers = [e.fields[side] for e in pairs for side in ("chosen", "rejected")]
    assert reward(prompts, answers) == pytest.approx(in_run, abs=1e-5)


def test_the_exported_reward_model_loads_with_transformers_and_scores_as_the_run(pipeline, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    rm = pipeline["rm"]
    pairs = rm.eval_examples[:3]
    in_run = rm.score_pairs(pairs).tolist()
    texts = [e.prompt + e.fields[side] for e in pairs for side in ("chosen", "rejected")]
    result = cli("export", pipeline["runs"] / "rm", "--merged", tmp_path / "merged", "--adapter",
                 tmp_path / "adapter", "--quiet")
    assert result.code == 0, result.err
    assert "AutoModelForSequenceClassification" in result.out
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "merged")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "merged")
    tokenizer.padding_side = "right"
    with torch.no_grad():
        merged = model(**tokenizer(texts, return_tensors="pt", padding=True)).logits[:, 0].tolist()
    assert merged == pytest.approx(in_run, abs=1e-5)
    card = (tmp_path / "adapter" / "README.md").read_text()
    assert "AutoModelForSequenceClassification" in card and "merge them into the base first" in card


# ------------------------------------------------------------------ refused before anything loads


def pin(data: dict, runs: Path):
    return pin_run_references(preset_from_dict(data), runs)


def test_bad_run_references_are_refused_naming_the_field_and_the_fix(pipeline, tmp_path):
    runs = pipeline["runs"]
    grpo = {"name": "grpo", "num_generations": 4}
    not_a_run = tmp_path / "plain"
    not_a_run.mkdir()
    with pytest.raises(ValueError, match=r"model.start_from: .*plain is not a run folder \(it has no preset.yaml\)"):
        pin(stage("p", grpo, start_from=str(not_a_run)), runs)
    young = runs.parent / "young"
    young.mkdir()
    (young / "preset.yaml").write_text(yaml.safe_dump(stage("rm-young", {"name": "reward_model"})))
    rm_young = {"name": "reward_model", "options": {"model": str(young)}}
    with pytest.raises(ValueError, match=r"rewards.0.options.model: run young has no checkpoint yet"):
        pin({**stage("p", grpo), "rewards": [rm_young]}, runs)
    with pytest.raises(ValueError, match=r"no run of preset 'nothing' with a checkpoint in"):
        pin(stage("p", grpo, start_from="run:nothing"), runs)
    with pytest.raises(ValueError, match=r"model.start_from: rm is a reward model .*use it as a reward"):
        pin(stage("p", grpo, start_from=str(runs / "rm")), runs)
    with pytest.raises(ValueError, match=r"options.model: sft \(a sft run\) has no trained score head"):
        pin({**stage("p", grpo), "rewards": [{"name": "reward_model", "options": {"model": "run:sft-stage"}}]}, runs)
    other = stage("p", grpo, start_from="run:sft-stage")
    other["model"]["name_or_path"] = "builtin:tiny-tools"
    with pytest.raises(ValueError, match=r"trained on builtin:tiny, not on this preset's model.name_or_path "
                                         r"builtin:tiny-tools; set model.name_or_path: builtin:tiny"):
        pin(other, runs)
    plain = stage("p", grpo, start_from="run:sft-stage", chat_template="none")
    with pytest.raises(ValueError, match=r"model.chat_template 'auto', this preset with 'none'"):
        pin(plain, runs)


def test_a_reward_model_checkpoint_without_its_head_is_refused(pipeline, tmp_path):
    import shutil

    headless = tmp_path / "runs" / "headless"
    shutil.copytree(pipeline["runs"] / "rm", headless)
    checkpoint = rundir.complete_checkpoints(headless)[-1]
    config = json.loads((checkpoint / "adapter_config.json").read_text())
    config["modules_to_save"] = None
    (checkpoint / "adapter_config.json").write_text(json.dumps(config))
    data = {**stage("p", {"name": "grpo", "num_generations": 4}),
            "rewards": [{"name": "reward_model", "options": {"model": str(headless)}}]}
    with pytest.raises(ValueError, match=r"has no trained score head .* would score at random"):
        pin(data, tmp_path / "runs")


def test_an_empty_side_and_a_row_without_completion_get_one_line_naming_the_row(tmp_path):
    from engine.data.config import DataConfig

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"prompt": "2+2=", "chosen": " 4", "rejected": " 5"}\n'
                     '{"prompt": "3+3=", "chosen": " 6", "rejected": ""}\n')
    cfg = DataConfig(task=None, path=str(pairs), num_eval=0)
    with pytest.raises(ValueError, match=r"data.path: a reward model needs `chosen` and `rejected` .*"
                                         r"training example 1 \('3\+3='\): rejected is empty"):
        load_preference_splits(cfg, 0, who="a reward model")
    demos = tmp_path / "demos.jsonl"
    demos.write_text('{"prompt": "2+2=", "completion": " 4"}\n{"prompt": "3+3="}\n')
    with pytest.raises(ValueError, match=r"training example 1 \('3\+3='\): SFT needs a completion"):
        load_demonstration_splits(DataConfig(task=None, path=str(demos), num_eval=0), 0)
    chat = demonstration(Example([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], {}),
                         False, "row 1")
    assert chat.prompt == [{"role": "user", "content": "hi"}]


def test_validate_names_the_runs_a_pipeline_preset_needs(tmp_path):
    result = cli("validate", ROOT / "presets" / "ppo-sort-rm.yaml", cwd=tmp_path)  # no runs/ here
    assert result.code == 2
    assert "model.start_from: no run of preset 'sft-sort' with a checkpoint in runs" in result.err
    assert "rewards.0.options.model: no run of preset 'rm-sort' with a checkpoint in runs" in result.err


def test_a_loss_on_the_prompt_too_keeps_the_whole_answer(tmp_path):
    """completion_only_loss false: every token but the first is a target, and
    max_completion_length cuts the answer alone (the prompt does not take its room)."""
    data = stage("sft-whole", {"name": "sft", "completion_only_loss": False, "max_completion_length": 8})
    trainer = build_trainer(preset_from_dict(data), tmp_path / "run")
    e = trainer.train_examples[0]
    rows = trainer.demonstration_rows([e])
    prompt = trainer.tokenizer(e.prompt, add_special_tokens=False)["input_ids"]
    answer = trainer.policy.encode_answer(e.fields["completion"], 8)
    assert rows.prompt_ids[0].tolist() == prompt[:1]
    assert rows.completion_ids[0].tolist() == prompt[1:] + answer
    assert answer[-1] == trainer.tokenizer.eos_token_id  # a sort answer fits 8 tokens with its end


def test_a_reference_by_preset_name_is_pinned_to_an_absolute_checkpoint(pipeline, monkeypatch):
    """`rl-engine run` resolves run:NAME in the relative folder runs/: the preset.yaml the
    run keeps (and its lineage) must still find the checkpoint from another folder."""
    monkeypatch.chdir(pipeline["runs"].parent)
    pinned, lineage = pin(stage("p", {"name": "grpo", "num_generations": 4}, start_from="run:sft-stage"),
                          Path("runs"))
    assert Path(pinned.model.start_from).is_absolute() and Path(lineage[0]["run"]).is_absolute()
    assert Path(pinned.model.start_from) == rundir.complete_checkpoints(pipeline["runs"] / "sft")[-1].resolve()


def test_preference_pairs_with_implicit_prompts_are_read_as_trl_reads_them(tmp_path):
    """TRL's implicit-prompt format (trl-lib/ultrafeedback_binarized): no prompt column,
    `chosen` and `rejected` whole conversations; the messages they begin with alike are the
    prompt. From a file and from a data set saved with save_to_disk."""
    import datasets

    from engine.data.config import DataConfig

    user = {"role": "user", "content": "What colour is the sky?"}
    rows = [{"chosen": [user, {"role": "assistant", "content": "Blue."}],
             "rejected": [user, {"role": "assistant", "content": "Green."}], "score_chosen": 8.0}] * 3
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    for cfg in (DataConfig(task=None, path=str(tmp_path / "pairs.jsonl"), num_eval=1),
                DataConfig(task=None, dataset=str(tmp_path / "saved"), num_eval=1)):
        train, held_out = load_preference_splits(cfg, 0, who="a reward model")
        pair = train[0]
        assert pair.prompt == [user]
        assert pair.fields["chosen"] == [{"role": "assistant", "content": "Blue."}]
        assert pair.fields["rejected"] == [{"role": "assistant", "content": "Green."}]
        assert pair.fields["score_chosen"] == 8.0 and len(held_out) == 1
    (tmp_path / "plain.jsonl").write_text('{"chosen": " 4", "rejected": " 5"}\n' * 3)  # text: no prompt to find
    with pytest.raises(ValueError, match=r"has no column 'prompt' \(data.prompt_field\)"):
        load_preference_splits(DataConfig(task=None, path=str(tmp_path / "plain.jsonl"), num_eval=1), 0)


def test_the_inspector_heads_a_reward_models_pair_with_its_reward(pipeline):
    """A reward model's pair has no implicit reward (DPO's): each side is headed by its
    reward, the score at its last token; SFT's record opens as a completion."""
    from workbench.inspector.records import Trajectory
    from workbench.inspector.trajectory_page import side_header

    started = next(e for e in rundir.read_events(pipeline["runs"] / "rm") if e["type"] == "run_started")
    pair = Trajectory.from_record(rundir.read_trajectories(pipeline["runs"] / "rm", 2)[0], started["records"])
    chosen = side_header(pair, pair.sides[0])
    assert "implicit reward" not in chosen and f"reward <b>{pair.sides[0].reward:.4g}" in chosen
    sft = Trajectory.from_record(rundir.read_trajectories(pipeline["runs"] / "sft", 2)[0])
    assert len(sft.sides) == 1 and len(sft.sides[0]) == len(sft.sides[0].numbers["logprob"])
