"""Evaluation like a researcher (issue 40): the estimators against values worked out by
hand (c = 0, c = n, k = n; votes with ties and formatting; best-of-N with tied scores),
and `rl-engine eval` on a tiny run trained in this process: what it writes, that a stopped
evaluation resumes to what an uninterrupted one gives, best-of-N by a reward-model run, and
one clear line for bad input."""

from __future__ import annotations

import json
import math

import pytest

from engine.cli import main as rl_engine
from engine.commands import evaluate as ev
from engine.evaluate.answers import vote_keys
from engine.evaluate.estimators import best_of_n, crossings, maj_at_k, pass_at_k, pass_hat_k
from test_rlhf_pipeline import pipeline, stage, train  # noqa: F401  (pipeline: a two-step SFT and reward-model run)


# ------------------------------------------------------------------ the estimators, by hand


def test_pass_at_k_and_pass_hat_k_by_hand():
    # n 5, c 2: pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10; pass^2 = C(2,2)/C(5,2) = 1/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7) and pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4) == pass_hat_k(5, 2, 1)  # k = 1: both the fraction correct
    assert pass_at_k(5, 0, 5) == 0.0 and pass_hat_k(5, 0, 1) == 0.0  # c = 0
    assert pass_at_k(5, 5, 1) == 1.0 and pass_hat_k(5, 5, 5) == 1.0  # c = n
    assert pass_at_k(5, 1, 5) == 1.0 and pass_hat_k(5, 4, 5) == 0.0  # k = n: any / all
    assert pass_at_k(5, 3, 3) == 1.0  # n - c < k: some correct in any 3
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_maj_at_k_with_ties_and_answers_that_differ_only_in_formatting():
    exact = vote_keys("exact_match")
    votes = exact([" 1 2", "1 2 ", " 2 1", " 1 2"])  # three " 1 2" however spaced: one answer
    assert votes == ["1 2", "1 2", "2 1", "1 2"]
    assert maj_at_k(votes, [True, True, False, True], 4) == 1.0
    assert maj_at_k(exact([" 1 2", " 2 1"]), [True, False], 2) == 0.0  # a tie is no majority
    numeric = vote_keys("numeric_match")
    votes = numeric(["so 7.0", "7", " 8", "8.00", "no number"])  # 7 twice, 8 twice, one unreadable
    assert votes == [7.0, 7.0, 8.0, 8.0, None]
    assert maj_at_k(votes, [True, True, False, False, False], 5) == 0.0  # 7 and 8 tie
    assert maj_at_k(votes[:3] + [None, None], [True, True, False, False, False], 5) == 1.0
    # k < n: the share of drawn k-subsets whose majority is right; k = 1 exactly the readable-and-right share
    assert maj_at_k(votes, [True, True, False, False, False], 1) == pytest.approx(0.4)
    two = maj_at_k(["a", "a", "b"], [True, True, False], 2)  # pairs: aa (right), ab, ab (ties): 1/3
    assert abs(two - 1 / 3) < 0.1
    assert vote_keys("sort_position") is None  # no answer rule: maj@k is not given


def test_best_of_n_by_hand_with_tied_scores():
    """Scores [2, 2, 1, 0], correct [T, F, T, F], N 2: the top of a random pair is one of
    the two 2s unless the pair is {1, 0}: chance 5/6, shared by a right and a wrong one
    (each 5/12), then the 1 (right) with 1/6: 5/12 + 1/6 = 7/12."""
    assert best_of_n([2, 2, 1, 0], [True, False, True, False], 2) == pytest.approx(7 / 12)
    assert best_of_n([2, 2, 1, 0], [True, False, True, False], 1) == pytest.approx(0.5)  # N 1: a random one
    assert best_of_n([2, 2, 1, 0], [True, False, True, False], 4) == pytest.approx(0.5)  # N n: the tied top
    assert best_of_n([0, 1, 2, 3], [True, False, False, False], 4) == 0.0  # a reward model that picks wrong


def test_crossings_interpolate_on_log_k():
    base = {1: 0.3, 2: 0.5, 4: 0.7, 8: 0.9}
    rl = {1: 0.6, 2: 0.7, 4: 0.75, 8: 0.8}
    (k,) = crossings(base, rl)  # difference 0.05 at k 4, -0.1 at k 8: a third of the way in log2
    assert k == pytest.approx(2 ** (2 + 1 / 3))
    assert crossings(base, {1: 0.1, 2: 0.2, 4: 0.3, 8: 0.4}) == []


# ------------------------------------------------------------------ the command, in process


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A two-step GRPO run on sort with a checkpoint at step 2."""
    runs = tmp_path_factory.mktemp("eval") / "runs"
    data = stage("eval-grpo", {"name": "grpo", "num_generations": 4, "temperature": 1.0})
    train(data, runs / "grpo")
    return runs / "grpo"


def test_an_evaluation_of_base_and_last_writes_every_sample_and_its_estimates(tiny_run, capsys):
    assert rl_engine(["eval", str(tiny_run), "--n", "4", "--prompts", "5", "--name", "e1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"wrote {tiny_run.resolve() / 'evals' / 'e1'}"
    report = json.loads((tiny_run / "evals" / "e1" / "eval.json").read_text())
    assert report["finished"] and report["n"] == 4 and report["ks"] == [1, 2, 4] and report["prompts"] == 5
    assert [m["name"] for m in report["models"]] == ["base", "step_000002"] and report["verifier"] == "exact_match"
    rows = [json.loads(line) for line in (tiny_run / "evals" / "e1" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 10 and all(len(r["samples"]) == 4 for r in rows)
    for model in report["models"]:
        mine = [r for r in rows if r["model"] == model["name"]]
        counts = [sum(s["correct"] for s in r["samples"]) for r in mine]
        assert model["pass_at_k"]["1"] == pytest.approx(sum(counts) / 20)  # pass@1: the fraction correct
        assert model["pass_at_k"]["4"] == pytest.approx(sum(c > 0 for c in counts) / 5)  # k = n: any correct
        assert model["pass_hat_k"]["4"] == pytest.approx(sum(c == 4 for c in counts) / 5)
        assert model["maj_at_k"] is not None and model["best_of_n"] is None  # no reward model
        for r in mine:
            for s in r["samples"]:  # each verdict is exact match's, each vote its answer rule's
                assert s["correct"] == (s["completion"].strip() == r["answer"].strip())
                assert s["vote"] == s["completion"].strip()
    assert {p["index"] for p in report["per_prompt"]} == set(range(5))


def test_a_stopped_evaluation_resumes_to_what_an_uninterrupted_one_draws(tiny_run, monkeypatch):
    monkeypatch.setattr(ev, "ROWS_PER_BATCH", 8)  # 2 prompts a chunk at N 4: 3 chunks a model
    args = ev.add_eval_parser(__import__("argparse").ArgumentParser().add_subparsers()).parse_args(
        [str(tiny_run), "--n", "4", "--prompts", "5", "--name", "whole"])
    whole, stopped = ev.evaluate(ev.plan_evaluation(args), lambda line: None, [False])
    assert not stopped
    stop = [False]

    def stop_after_first_chunk(line: str) -> None:
        if line.startswith("progress 2/"):
            stop[0] = True

    args.name = "cut"
    part, stopped = ev.evaluate(ev.plan_evaluation(args), stop_after_first_chunk, stop)
    assert stopped and not part["finished"] and part["models"][0]["done_prompts"] == 2
    assert json.loads((tiny_run / "evals" / "cut" / "eval.json").read_text())["finished"] is False
    resumed, stopped = ev.evaluate(ev.plan_evaluation(args), lambda line: None, [False])
    assert not stopped and resumed["finished"]
    samples = {name: sorted((json.loads(line)["model"], json.loads(line)["index"], json.dumps(json.loads(line)[
        "samples"])) for line in (tiny_run / "evals" / name / "samples.jsonl").read_text().splitlines())
        for name in ("whole", "cut")}
    assert samples["whole"] == samples["cut"]
    assert [m["pass_at_k"] for m in resumed["models"]] == [m["pass_at_k"] for m in whole["models"]]


def test_best_of_n_as_a_reward_model_run_picks_against_the_verifier(pipeline, capsys):  # noqa: F811
    runs = pipeline["runs"]
    assert rl_engine(["eval", str(runs / "sft"), "--n", "4", "--prompts", "4", "--models", "base",
                      "--reward-model", str(runs / "rm"), "--name", "bon", "--quiet"]) == 0
    report = json.loads((runs / "sft" / "evals" / "bon" / "eval.json").read_text())
    (model,) = report["models"]
    rows = [json.loads(line) for line in (runs / "sft" / "evals" / "bon" / "samples.jsonl").read_text().splitlines()]
    picked = [max(r["samples"], key=lambda s: s["rm_score"])["correct"] for r in rows]
    assert model["best_of_n"]["reward_model"]["4"] == pytest.approx(sum(picked) / 4)  # N = n: its top sample
    assert model["best_of_n"]["oracle"]["4"] == model["pass_at_k"]["4"]
    assert model["best_of_n"]["reward_model"]["1"] == pytest.approx(model["pass_at_k"]["1"])  # N 1: any sample
    assert "best-of-N by the reward model" in capsys.readouterr().out


def test_bad_input_gets_one_line(tiny_run, pipeline, tmp_path, capsys):  # noqa: F811
    for argv, message in (([str(tiny_run), "--n", "4", "--k", "1,8"], "--k: k must be between 1 and --n 4"),
                          ([str(tiny_run), "--models", "base,step_000009"], "has no checkpoint step_000009"),
                          ([str(tmp_path)], "neither a run folder"),
                          ([str(pipeline["runs"] / "rm")], "reward-report"),
                          ([str(tiny_run), "--n", "0"], "--n: 0 samples"),
                          ([str(tiny_run), "--k", "1,four"], "--k: '1,four' is not a comma-separated list"),
                          ([str(tiny_run), "--name", str(tmp_path / "elsewhere")], "is not a folder name"),
                          ([str(tiny_run), "--name", ".."], "is not a folder name")):
        assert rl_engine(["eval", *argv, "--quiet"]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: ") and message in err[-1] and "Traceback" not in "\n".join(err)


def test_without_a_verifier_pass_at_k_is_refused_and_the_mean_reward_given(tmp_path, monkeypatch, capsys):
    """A prompt file with no answers, a preset (its base model alone), written under the
    current folder's runs/evals/ as `rl-engine run` writes under runs/."""
    import yaml

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": f"sort {a} {b} ="}) for a in range(5) for b in range(3)))
    data = stage("no-verifier", {"name": "grpo", "num_generations": 2})
    data["data"] = {"path": str(prompts), "num_eval": 3}
    data["rewards"] = [{"name": "length_penalty"}]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    assert rl_engine(["eval", "p.yaml", "--models", "base", "--n", "2", "--name", "nv", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "no verifier" in captured.err and "pass@k" in captured.err
    (model,) = json.loads((tmp_path / "runs" / "evals" / "nv" / "eval.json").read_text())["models"]
    assert model["pass_at_k"] is None and model["maj_at_k"] is None and math.isfinite(model["mean_reward"])
