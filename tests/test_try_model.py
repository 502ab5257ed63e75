"""`rl-engine try` (engine/commands/try_model.py, issue 41's Try a checkpoint), in this
process on the tests' shared trained run (conftest's `trained_run`: grpo-sort on the built-in
model, checkpoints at steps 2 and 4): the numbers it prints are checked against a forward pass
done here, with transformers and peft directly, not through the engine's passes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from engine_runs import ROOT, cli

PROMPT = "sort 3 1 2 ="


@pytest.fixture(scope="module")
def greedy_report(trained_run) -> dict:
    result = cli("try", trained_run, "--checkpoint", "step_000004", "--prompt", PROMPT, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def forward_logprobs(run: Path, checkpoint: str | None, prompt: str, ids: list[int]) -> tuple[list[float], list[int]]:
    """log p of each of `ids` after `prompt`, and the argmax at each position, by one plain
    forward pass of the built-in model (with the checkpoint's adapter, or none)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "assets" / "tiny-model")
    model = AutoModelForCausalLM.from_pretrained(ROOT / "assets" / "tiny-model", torch_dtype=torch.float32)
    if checkpoint is not None:
        model = PeftModel.from_pretrained(model, run / "checkpoints" / checkpoint)
    model.eval()
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids + ids])).logits[0].float()
    predicting = logits[len(prompt_ids) - 1: len(prompt_ids) - 1 + len(ids)]  # position t predicts token t + 1
    logp = torch.log_softmax(predicting, -1)
    return logp[torch.arange(len(ids)), torch.tensor(ids)].tolist(), predicting.argmax(-1).tolist()


def test_greedy_answers_are_scored_as_a_forward_pass_scores_them(greedy_report, trained_run):
    base, checkpoint = greedy_report["models"]
    assert (base["name"], checkpoint["name"]) == ("base", "step_000004")
    assert greedy_report["sampling"]["greedy"] and greedy_report["templated_prompt"] == PROMPT
    answer = checkpoint["answers"][0]
    assert len(checkpoint["answers"]) == 1 and answer["tokens"][-1] == "<eos>"
    mine, argmax = forward_logprobs(trained_run, "step_000004", PROMPT, answer["token_ids"])
    assert answer["logprob"] == pytest.approx(mine, abs=1e-4)
    assert answer["token_ids"] == argmax  # greedy: each token the checkpoint's most likely
    theirs, _ = forward_logprobs(trained_run, None, PROMPT, answer["token_ids"])
    assert answer["other_logprob"] == pytest.approx(theirs, abs=1e-4)
    # the log-ratio is log p_checkpoint - log p_base on both sides
    assert answer["log_ratio"] == pytest.approx([a - b for a, b in zip(mine, theirs)], abs=2e-4)
    assert any(abs(r) > 1e-6 for r in answer["log_ratio"])  # four steps of training moved something
    b = base["answers"][0]
    assert b["log_ratio"] == pytest.approx([o - m for m, o in zip(b["logprob"], b["other_logprob"])], abs=1e-9)


def test_greedy_answers_are_the_same_every_time(greedy_report, trained_run):
    again = cli("try", trained_run, "--checkpoint", "step_000004", "--prompt", PROMPT, "--json")
    assert again.code == 0, again.err
    report = json.loads(again.out)
    assert [[a["token_ids"] for a in m["answers"]] for m in report["models"]] == \
        [[a["token_ids"] for a in m["answers"]] for m in greedy_report["models"]]


GIVEN = " 1 2 3"  # an answer of our own, scored instead of sampled


@pytest.fixture(scope="module")
def given_report(trained_run) -> dict:
    result = cli("try", trained_run, "--checkpoint", "step_000004", "--prompt", PROMPT, "--completion", GIVEN, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_a_given_answer_is_scored_by_both_models_as_a_forward_pass_scores_it(given_report, trained_run):
    from transformers import AutoTokenizer

    assert given_report["given"] and given_report["completion"] == GIVEN
    assert given_report["sampling"]["seed"] is None and given_report["sampling"]["temperature"] is None
    base, checkpoint = given_report["models"]
    assert (base["name"], checkpoint["name"]) == ("base", "step_000004")
    assert len(base["answers"]) == len(checkpoint["answers"]) == 1
    b, c = base["answers"][0], checkpoint["answers"][0]
    tokenizer = AutoTokenizer.from_pretrained(ROOT / "assets" / "tiny-model")
    ids = tokenizer(GIVEN, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]  # a finished answer
    assert b["token_ids"] == c["token_ids"] == ids and c["tokens"][-1] == "<eos>" and not c["truncated"]
    assert b["text"] == c["text"] == GIVEN
    under_checkpoint, _ = forward_logprobs(trained_run, "step_000004", PROMPT, ids)
    under_base, _ = forward_logprobs(trained_run, None, PROMPT, ids)
    assert c["logprob"] == pytest.approx(under_checkpoint, abs=1e-4)
    assert c["other_logprob"] == pytest.approx(under_base, abs=1e-4)
    assert b["logprob"] == pytest.approx(under_base, abs=1e-4)
    assert b["other_logprob"] == pytest.approx(under_checkpoint, abs=1e-4)
    ratio = [x - y for x, y in zip(under_checkpoint, under_base)]
    assert b["log_ratio"] == pytest.approx(ratio, abs=2e-4) and c["log_ratio"] == pytest.approx(ratio, abs=2e-4)
    assert c["sum_logprob"] == pytest.approx(sum(under_checkpoint), abs=1e-3)


def test_a_given_answer_as_long_as_the_limit_has_no_end_token_and_a_held_out_prompt(trained_run):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "assets" / "tiny-model")
    text = " 1 2 3 4 5 6 7 8"
    n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    result = cli("try", trained_run, "--held-out", "2", "--completion", text, "--max-new-tokens", n, "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    answer = report["models"][1]["answers"][0]
    assert len(answer["token_ids"]) == n and answer["truncated"] and "<eos>" not in answer["tokens"]
    assert report["held_out"] == 2 and report["templated_prompt"].startswith("sort ")
    mine, _ = forward_logprobs(trained_run, "step_000004", report["templated_prompt"], answer["token_ids"])
    assert answer["logprob"] == pytest.approx(mine, abs=1e-4)
    longer = cli("try", trained_run, "--held-out", "2", "--completion", text, "--max-new-tokens", n - 1)
    assert longer.code == 2 and f"--completion: the answer is {n} tokens, over the {n - 1}" in longer.err


@pytest.mark.parametrize("args, words", [
    (["--prompt", PROMPT, "--completion", ""], "--completion: the answer is empty"),
    (["--prompt", PROMPT, "--completion", " 1 2", "--samples", "2"], "--completion scores the answer given"),
    (["--prompt", PROMPT, "--completion", " 1 2", "--greedy"], "leave out --greedy, --samples"),
    (["--completion", " 1 2"], "give --prompt TEXT"),
    (["--prompt", PROMPT, "--completion", " 1 2", "--set", "data.environment=calculator"],
     "--completion: run sort-run's episodes use tools (data.environment calculator)"),
    (["--prompt", "   "], "--prompt: the prompt is empty"),
    (["--held-out", "8"], "--held-out: 8 is out of range; run sort-run holds out 8 prompts (0 to 7)"),
    (["--checkpoint", "step_000003", "--prompt", PROMPT], "has no checkpoint step_000003 (it has: step_000002, "
                                                          "step_000004)"),
    (["--greedy", "--samples", "3", "--prompt", PROMPT], "--greedy decodes one answer"),
    ([], "give --prompt TEXT"),
    (["--prompt", "sort " + "1 " * 60 + "="], "--prompt: the prompt is 126 tokens as templated and an answer up to "
                                               "16 (--max-new-tokens), over the 128 positions the model reads"),
])
def test_bad_input_is_one_error_line(trained_run, args, words):
    result = cli("try", trained_run, *args)
    assert result.code == 2 and result.out == ""
    assert result.err.startswith("error: ") and result.err.count("\n") == 1 and words in result.err


def test_a_folder_that_is_not_a_run_or_has_no_checkpoint(trained_run, tmp_path):
    result = cli("try", tmp_path, "--prompt", PROMPT)
    assert result.code == 2 and f"error: {tmp_path} is not a run folder" in result.err
    young = tmp_path / "young"
    young.mkdir()
    shutil.copy(trained_run / "preset.yaml", young / "preset.yaml")
    result = cli("try", young, "--prompt", PROMPT)
    assert result.code == 2 and "run young has no complete checkpoint yet" in result.err
