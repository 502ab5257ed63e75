"""The reward model's report card (issue 39): its numbers against values worked out by
hand, its preflight on the failures it exists to catch (pad = EOS, a head not saved), and
`rl-engine reward-report` on a small reward-model run trained in this process."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from conftest import ROOT
from engine.cli import main as rl_engine
from engine.model.score import encode_texts, last_token_positions
from engine.reward_report import preflight
from engine.reward_report.card import (
    calibration, card_numbers, ece_interval, length_baseline, margin_histogram, verdict_lines, wilson_interval,
)
from engine.reward_report.compute import build_report, report_path
from engine.run import rundir
from test_rlhf_pipeline import pipeline  # noqa: F401  (the fixture: a two-step SFT and reward-model run)


# ------------------------------------------------------------------ the numbers, by hand


def test_calibration_bins_and_expected_calibration_error_by_hand():
    """Margins ln 3, ln 3, -ln 3, 0: σ = 0.75, 0.75, 0.25, 0.5. Both orders of each pair:
    bin [0.7, 0.8): 0.75 (won), 0.75 (won), 0.75 (rejected-first of the pair ranked wrong:
    lost) -> predicted 0.75, observed 2/3; bin [0.2, 0.3) mirrors it (0.25, 1/3); bin
    [0.5, 0.6): 0.5 twice (the tie: chosen-first won, rejected-first lost) -> 0.5, 0.5.
    ECE = 3/8 · |0.75 - 2/3| + 3/8 · |0.25 - 1/3| + 2/8 · 0 = 1/16."""
    ln3 = math.log(3)
    result = calibration([ln3, ln3, -ln3, 0.0])
    bins = {b["low"]: b for b in result["bins"] if b["count"]}
    assert sorted(bins) == [0.2, 0.5, 0.7]
    assert (bins[0.7]["count"], bins[0.7]["predicted"], bins[0.7]["observed"]) == (3, pytest.approx(0.75),
                                                                                  pytest.approx(2 / 3))
    assert (bins[0.2]["count"], bins[0.2]["predicted"], bins[0.2]["observed"]) == (3, pytest.approx(0.25),
                                                                                  pytest.approx(1 / 3))
    assert (bins[0.5]["predicted"], bins[0.5]["observed"]) == (pytest.approx(0.5), pytest.approx(0.5))
    assert result["ece"] == pytest.approx(1 / 16)
    assert sum(b["count"] for b in result["bins"]) == 8 and len(result["bins"]) == 10
    assert calibration([])["ece"] is None


def test_the_length_baseline_counts_a_tie_as_half_and_matches_lengths_within_a_tenth():
    """Pairs (chosen, rejected) lengths (10, 5) longer chosen, (4, 8) shorter chosen, (6, 6)
    a tie, (10, 11) matched (1 <= 0.1 x 11): pick-the-longer = (1 + 0 + 0.5 + 0) / 4."""
    out = length_baseline([10, 4, 6, 10], [5, 8, 6, 11], [2.0, 1.0, 0.0, 3.0], [1.0, 0.0, 1.0, 1.0])
    assert out["longer_accuracy"] == pytest.approx(0.375) and out["ties"] == 1
    # matched: (6, 6) ranked wrong (0 < 1), (10, 11) right: 1 of 2
    assert (out["matched_pairs"], out["matched_accuracy"]) == (2, pytest.approx(0.5))
    lengths, rewards = [10, 4, 6, 10, 5, 8, 6, 11], [2.0, 1.0, 0.0, 3.0, 1.0, 0.0, 1.0, 1.0]
    mx, my = sum(lengths) / 8, sum(rewards) / 8
    r = sum((x - mx) * (y - my) for x, y in zip(lengths, rewards)) / math.sqrt(
        sum((x - mx) ** 2 for x in lengths) * sum((y - my) ** 2 for y in rewards))
    assert out["correlation"] == pytest.approx(r)
    none = length_baseline([], [], [], [])
    assert none["longer_accuracy"] is None and none["matched_pairs"] == 0


def test_the_margin_histogram_is_symmetric_about_zero():
    out = margin_histogram([-2.0, -0.5, 0.5, 1.0, 2.0], bins=4)  # edges -2 -1 0 1 2
    assert out["edges"] == [-2.0, -1.0, 0.0, 1.0, 2.0] and out["counts"] == [1, 1, 1, 2]
    assert out["mean"] == pytest.approx(0.2) and out["median"] == 0.5


def test_verdicts_say_near_chance_and_no_better_than_length():
    """Accuracy 0.5 is bad; 0.75 while picking the longer answer gets 0.875 ((3 + a tie's
    half) / 4) is worrying, with a length-matched accuracy of 0 (length carried every pair
    it got right)."""
    coin = card_numbers([1.0, 0.0], [0.0, 1.0], [3, 3], [3, 3])
    assert verdict_lines(coin, 2, [])[0]["status"] == "bad"
    # 4 pairs: three right with the chosen longer, one wrong at equal length
    by_length = card_numbers([2.0, 2.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0], [9, 9, 9, 6], [3, 3, 3, 6])
    lines = {line["title"]: line for line in verdict_lines(by_length, 4, [])}
    assert lines["Accuracy"]["status"] == "worrying" and "longer answer" in lines["Accuracy"]["saw"]
    assert lines["Length-matched pairs"]["status"] == "worrying" and lines["Length-matched pairs"]["try"]
    failed = preflight.check("head", "The score head is saved and loads", "bad", "not saved", "train it")
    assert verdict_lines(by_length, 4, [failed])[-1]["status"] == "bad"


def test_how_sure_the_pairs_make_the_accuracy_and_the_ece():
    """Wilson's interval by hand: 0 of 4 at z = 2: centre (0 + 4/8) / (1 + 4/4) = 1/4,
    half-width (2 / 2) · √(0 + 4/64) = 1/4, so [0, 1/2]; 4 of 4 mirrors it. The ECE's
    bootstrap: pairs that all have the same margin ln 3 give the same ECE in every
    resample (each entry predicted 0.75 and won, or 0.25 and lost: 0.25), so the interval is
    that point; a mixed set's interval holds its ECE and is reproducible (seeded), and ten
    times the pairs narrow it."""
    assert wilson_interval(0, 4, z=2.0) == (0.0, pytest.approx(0.5))
    assert wilson_interval(4, 4, z=2.0) == (pytest.approx(0.5), 1.0)
    assert wilson_interval(0, 0) is None
    assert ece_interval([math.log(3)] * 20) == (pytest.approx(0.25), pytest.approx(0.25))
    mixed = [math.log(3), -0.4, 1.2, 0.1, 2.5, -1.0, 0.7, 3.0, -0.2, 0.9] * 2
    low, high = ece_interval(mixed)
    assert low <= calibration(mixed)["ece"] <= high and low < high
    assert ece_interval(mixed) == (low, high)
    low10, high10 = ece_interval(mixed * 10)
    assert high10 - low10 < (high - low) / 2
    assert ece_interval([0.5]) is None


def test_the_card_says_when_too_few_pairs_leave_the_calibration_unsure():
    """Twenty pairs: the accuracy line carries its 90% interval, and an ECE whose interval
    reaches past the 0.05 or 0.15 threshold says the pairs are too few to be sure."""
    margins = [math.log(3), -0.4, 1.2, 0.1, 2.5, -1.0, 0.7, 3.0, -0.2, 0.9] * 2
    card = card_numbers(margins, [0.0] * 20, [3] * 20, [3] * 20)
    low, high = card["accuracy_interval"]
    assert low < card["accuracy"] == 0.7 < high
    lines = {line["title"]: line for line in verdict_lines(card, 20, [])}
    assert f"(90% interval {low:.1%}-{high:.1%})" in lines["Accuracy"]["saw"]
    cal_low, cal_high = card["calibration"]["ece_interval"]
    assert cal_low < 0.15 <= cal_high or cal_low < 0.05 <= cal_high
    assert "too few pairs to be sure" in lines["Calibration"]["saw"]
    sure = card_numbers([math.log(3)] * 200, [0.0] * 200, [3] * 200, [3] * 200)
    assert "too few pairs" not in {line["title"]: line for line in verdict_lines(sure, 200, [])}["Calibration"]["saw"]


# ------------------------------------------------------------------ the preflight


def test_the_preflight_catches_a_score_read_at_padding_when_pad_is_eos():
    """pad == EOS and an answer that ends with the end token (a template's, or the data's):
    the score is read before it, at the answer's last digit, not at the text's end."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "assets" / "tiny-model")
    tokenizer.pad_token = tokenizer.eos_token
    texts = ["sort 2 1 = 1 2", "sort 3 1 = 1 3" + tokenizer.eos_token]
    ids, mask = encode_texts(tokenizer, texts, None, "cpu")
    check = preflight.PoolingCheck(tokenizer)
    check.add(ids, mask, last_token_positions(ids, tokenizer.pad_token_id))
    result = check.result()
    assert result["status"] == "bad" and result["saw"].startswith("1 of 2 texts") and result["try"]
    clean = preflight.PoolingCheck(tokenizer)
    ids, mask = encode_texts(tokenizer, texts[:1], None, "cpu")
    clean.add(ids, mask, last_token_positions(ids, tokenizer.pad_token_id))
    assert clean.result()["status"] == "good" and "pad token is the end token" in clean.result()["saw"]


def test_inside_a_chat_template_the_pad_token_in_the_prompt_does_not_move_the_reading():
    """The tools model's template ends an earlier assistant turn with <eos>; with pad = EOS
    that prompt holds the pad token, and the score is still read at the answer's end."""
    from transformers import AutoTokenizer

    from engine.data.examples import Example
    from engine.model.chat import chat_format, template_examples
    from engine.model.loading import tokenizer_chat_template

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "assets" / "tiny-tools-model")
    tokenizer.pad_token = tokenizer.eos_token
    turns = [{"role": "user", "content": "calc 3+4 ="}, {"role": "assistant", "content": " 7"},
             {"role": "user", "content": "calc 1+1 ="}]
    chat = chat_format("auto", tokenizer_chat_template(tokenizer), "be brief")
    prompt = template_examples([Example(turns, {})], chat, tokenizer)[0].prompt
    assert tokenizer.eos_token in prompt
    ids, mask = encode_texts(tokenizer, [prompt + " 2", prompt + " 11"], None, "cpu")
    check = preflight.PoolingCheck(tokenizer)
    check.add(ids, mask, last_token_positions(ids, tokenizer.pad_token_id))
    result = check.result()
    assert result["status"] == "good" and "2 texts hold the pad token inside them" in result["saw"]


def test_the_preflight_catches_a_head_not_saved_and_scores_that_do_not_vary(pipeline, tmp_path):  # noqa: F811
    headless = tmp_path / "headless"
    shutil.copytree(pipeline["runs"] / "rm", headless)
    checkpoint = rundir.complete_checkpoints(headless)[-1]
    config = json.loads((checkpoint / "adapter_config.json").read_text())
    config["modules_to_save"] = None
    (checkpoint / "adapter_config.json").write_text(json.dumps(config))
    assert preflight.head_check(checkpoint, None)["status"] == "bad"
    report = build_report(headless, progress=lambda line: None)
    assert report["accuracy"] is None and report["preflight"][0]["status"] == "bad"
    assert "not saved" in report["preflight"][0]["saw"] and report["lines"][-1]["status"] == "bad"
    assert preflight.scores_check([0.5, 0.5, 0.5])["status"] == "bad"
    assert preflight.scores_check([0.5, float("nan")])["status"] == "bad"
    assert preflight.scores_check([0.5, 0.7])["status"] == "good"
    # a NaN score is written as null (JSON has none), the file still readable
    from engine.reward_report.compute import write_report

    written = write_report(tmp_path, {"pairs": [{"reward_chosen": float("nan"), "reward_rejected": 0.5}]})
    assert json.loads(written.read_text())["pairs"][0] == {"reward_chosen": None, "reward_rejected": 0.5}
    # reloaded, it must score as in training: its held-out accuracy and margin at that step
    logged = {"step": 2, "accuracy": 0.75, "margin": 0.3}
    assert preflight.reproduction_check(logged, 0.75, 0.3, 8)["status"] == "good"
    assert preflight.reproduction_check(logged, 0.5, 0.3, 8)["status"] == "bad"  # 2 of 8 pairs changed sides
    assert preflight.reproduction_check(None, 0.5, 0.3, 8)["status"] == "skipped"


# ------------------------------------------------------------------ the command


def test_the_report_card_of_a_reward_model_run(pipeline, capsys):  # noqa: F811
    """`rl-engine reward-report RUN`: the held-out pairs scored as the run scored them, the
    checks passed, the file the window reads written."""
    run = pipeline["runs"] / "rm"
    assert rl_engine(["reward-report", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"wrote {report_path(run, None)}"
    report = json.loads(report_path(run, None).read_text())
    rm = pipeline["rm"]
    assert report["source"] == {"kind": "held_out", "path": None, "pairs": len(rm.eval_examples)}
    assert report["step"] == 2 and report["checkpoint"].endswith("step_000002")
    held_out = rm.evaluate()  # the trainer's own evaluation at its last step, its checkpoint's
    assert report["accuracy"] == pytest.approx(held_out["accuracy"])
    margins = [p["reward_chosen"] - p["reward_rejected"] for p in report["pairs"]]
    assert sum(margins) / len(margins) == pytest.approx(held_out["margin"], abs=1e-4)
    assert {c["check"]: c["status"] for c in report["preflight"]} == {
        "head": "good", "pooling": "good", "reading": "good", "scores": "good", "reproduction": "good",
        "policy": "skipped"}  # the run's final evaluation is at its checkpoint's step
    assert sum(report["calibration"]["bins"][i]["count"] for i in range(10)) == 2 * len(margins)
    assert "Accuracy:" in out and "preflight:" in out


def test_a_preference_file_and_bad_input(pipeline, tmp_path, capsys):  # noqa: F811
    run = pipeline["runs"] / "rm"
    pairs = tmp_path / "mine.jsonl"
    pairs.write_text("\n".join(json.dumps({"prompt": f"sort {a} {b} =", "chosen": f" {min(a, b)} {max(a, b)}",
                                           "rejected": f" {max(a, b)}"}) for a, b in ((3, 1), (5, 2), (9, 4))))
    assert rl_engine(["reward-report", str(run), "--pairs", str(pairs), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source"]["kind"] == "file" and report["source"]["pairs"] == 3
    assert report["length"]["longer_accuracy"] == 1.0  # every chosen answer is the longer one
    assert report_path(run, pairs).name == "reward-report-mine.json" and report_path(run, pairs).is_file()
    for argv, message in (([str(tmp_path)], "is not a run folder"),
                          ([str(run), "--checkpoint", "step_9"], "has no complete checkpoint 'step_9'"),
                          ([str(run), "--pairs", str(tmp_path / "none.jsonl")], "is not a file"),
                          ([str(pipeline["runs"] / "sft")], "is not a reward model")):
        assert rl_engine(["reward-report", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: ") and message in err[-1] and "Traceback" not in "".join(err)
