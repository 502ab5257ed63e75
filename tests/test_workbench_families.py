"""What the window shows for the keys the new families write (issue 24;
docs/run-directory.md): each reward's own advantage (GDPO's `component_advantages`), a
greedy baseline (ReMax's `baseline`), an unpaired completion's `label` (KTO) and a
sampled pair's scores (Online DPO's `score_margin`, `tie`, its sides' `rewards`).

Each test writes a run directory by hand (events.jsonl and trajectories/, with the
engine's own writers), opens it in the main window (pytest-qt, offscreen) and reads
what a user sees: the samples table's headers and cells, the rollout picker's labels,
the Trajectory page's headers, the Group page's rows, the summary, tooltips and export.
The window keys on the fields, never on the algorithm's name.
"""

from __future__ import annotations

import doctest
import json
import math
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from engine.run import rundir
from inspector_helpers import dpo_side, grpo_record, write_steps
from workbench.inspector.view import GROUP_PAGE, TRAJECTORY_PAGE
from workbench.inspector.export import tooltip_html
from workbench.window.names import INSPECTOR, SAMPLES
from window_fixtures import make_window, window  # noqa: F401 (fixtures)

GROUP_RECORDS = {"layout": "group", "token_values": ["advantage", "logprob", "ref_logprob", "kl", "entropy", "ratio"],
                 "preferred": ["advantage"]}
SINGLE_RECORDS = {"layout": "single", "token_values": ["implicit_reward", "logprob", "ref_logprob", "entropy"],
                  "preferred": ["implicit_reward"]}
PAIR_RECORDS = {"layout": "pair", "sides": ["chosen", "rejected"],
                "token_values": ["implicit_reward", "logprob", "ref_logprob", "entropy"],
                "preferred": ["implicit_reward"]}
PROMPT = "sort 3 1 2 ="


def family_run(folder: Path, name: str, algorithm: str, records: dict, samples: list[dict],
               trajectories: list[dict], rewards: list[dict] | None = None) -> Path:
    """A one-step run as an engine of `algorithm` writes it: run_started declaring the
    record layout, metrics, the step's samples event and its trajectory records."""
    run_dir = Path(folder) / name
    run_dir.mkdir(parents=True)
    preset = {"name": name, "algorithm": {"name": algorithm, "num_generations": 4},
              "rewards": rewards or [{"name": "exact_match", "weight": 1.0}],
              "training": {"max_steps": 1, "record_rollouts": 4}}
    events = rundir.EventWriter(run_dir)
    events.emit("run_started", step=0, preset=preset, algorithm=algorithm, max_steps=1,
                model={"name_or_path": "builtin:tiny"}, device="cpu", dtype="float32", num_train=8, num_eval=0,
                plots=[{"key": "loss", "title": "Loss", "metrics": ["loss"]}], records=records)
    events.emit("metrics", step=1, loss=0.5, reward=0.5)
    events.emit("samples", step=1, samples=samples)
    events.emit("run_finished", step=1, status="done", reason="max_steps reached", checkpoint=None)
    events.close()
    write_steps(run_dir, {1: trajectories})
    return run_dir


def open_in(window, run_dir: Path):  # noqa: F811 (the fixture's name)
    window.open_run(run_dir)
    window.tabs.setCurrentIndex(SAMPLES)
    return window.samples.model


def headers(model) -> list[str]:
    return [model.headerData(c, Qt.Horizontal) for c in range(model.columnCount())]


def cell(model, row: int, header: str, role=Qt.DisplayRole):
    return model.data(model.index(row, headers(model).index(header)), role)


def row_of(model, index: int) -> int:
    return next(r for r in range(model.rowCount()) if model.sample(r).index == index)


def inspector_on(window, page: int):  # noqa: F811
    window.tabs.setCurrentIndex(INSPECTOR)
    inspector = window.inspector
    inspector.pages.setCurrentIndex(page)
    return inspector


# ================================================================ GDPO: each reward's advantage

# Two rewards over a group of 4 (exact_match weight 1, format weight 0.5), each normalised
# within the group by hand (unbiased std): exact_match [1, 0, 0, 0] has mean 0.25 and std
# 0.5, so [1.5, -0.5, -0.5, -0.5]; format [1, 1, 0, 1] has mean 0.75 and std 0.5, so
# [0.5, 0.5, -1.5, 0.5]. Weighted sums [1.75, -0.25, -1.25, -0.25] (batch mean 0, std
# sqrt(4.75 / 3) = 1.2583) give the advantages [1.3908, -0.1987, -0.9934, -0.1987].
EXACT, FORMAT = [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0]
EXACT_ADV, FORMAT_ADV = [1.5, -0.5, -0.5, -0.5], [0.5, 0.5, -1.5, 0.5]
GDPO_ADV = [1.3908, -0.1987, -0.9934, -0.1987]
WEIGHTS = [{"name": "exact_match", "weight": 1.0}, {"name": "regex_format", "label": "format", "weight": 0.5}]
# Completions that earn those rewards for the answer " 0 2 3" (regex_format: integers only).
GDPO_COMPLETIONS, GDPO_ANSWER = [" 0 2 3", " 1 2 3", "two", " 3 2 3"], " 0 2 3"


def test_the_hand_worked_gdpo_numbers_hold():
    def normalised(values):
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        return [(v - mean) / std for v in values]

    assert normalised(EXACT) == pytest.approx(EXACT_ADV) and normalised(FORMAT) == pytest.approx(FORMAT_ADV)
    total = [e + 0.5 * f for e, f in zip(EXACT_ADV, FORMAT_ADV)]
    assert normalised(total) == pytest.approx(GDPO_ADV, abs=1e-4)  # batch mean 0: the same normalisation


def gdpo_run(folder: Path) -> Path:
    samples, records = [], []
    for i in range(4):
        rewards = {"exact_match": EXACT[i], "format": FORMAT[i]}
        parts = {"exact_match": EXACT_ADV[i], "format": FORMAT_ADV[i]}
        total = EXACT[i] + 0.5 * FORMAT[i]
        samples.append({"index": i, "group": 0, "prompt": PROMPT, "completion": GDPO_COMPLETIONS[i], "reward": total,
                        "rewards": rewards, "advantage": GDPO_ADV[i], "component_advantages": parts})
        if i < 3:  # the first three recorded token by token; the fourth only in the samples event
            record = grpo_record(1, i, 0, total, GDPO_ADV[i], n=6 + i, prompt=PROMPT)
            record.update(rewards=rewards, component_advantages=parts)
            records.append(record)
    return family_run(folder, "gdpo", "grpo", GROUP_RECORDS, samples, records, rewards=WEIGHTS)


def test_gdpo_samples_table_shows_each_rewards_advantage(window, tmp_path):  # noqa: F811
    model = open_in(window, gdpo_run(tmp_path))
    assert headers(model) == ["step", "prompt", "completion", "reward", "exact_match", "format", "advantage",
                              "adv: exact_match", "adv: format"]
    row = row_of(model, 2)
    assert cell(model, row, "adv: exact_match") == "-0.5" and cell(model, row, "adv: format") == "-1.5"
    assert cell(model, row, "advantage") == "-0.9934"
    assert cell(model, row, "adv: format", Qt.BackgroundRole).name() == "#fae1e1"  # pink: pushed down
    assert "normalised within the prompt's group" in model.headerData(7, Qt.Horizontal, Qt.ToolTipRole)
    # sorted by format's advantage, lowest first: the completion format pulls down on top
    window.samples.table.sortByColumn(headers(model).index("adv: format"), Qt.AscendingOrder)
    assert model.sample(0).index == 2
    window.samples.select_row(0)
    assert "advantage of each reward" in window.samples.detail.toPlainText()
    assert "exact_match -0.5, format -1.5" in window.samples.detail.toPlainText()


def test_gdpo_group_page_shows_which_reward_drives_each_completion(window, tmp_path):  # noqa: F811
    open_in(window, gdpo_run(tmp_path))
    inspector = inspector_on(window, GROUP_PAGE)
    group = inspector.group_view
    assert [r.index for r in group.rows] == [0, 1, 2, 3] and group.baseline is None
    texts = [r.header.text() for r in group.rows]
    assert all("per reward" in t for t in texts)
    assert "+1.5" in texts[0] and "-1.5" in texts[2]
    # |weight x advantage|: exact_match 1.5 vs format 0.25 (row 0); 0.5 vs 0.75 (row 2)
    assert "<u>exact_match</u>" in texts[0] and "<u>format</u>" not in texts[0]
    assert "<u>format</u>" in texts[2] and "<u>exact_match</u>" not in texts[2]
    assert "per reward" in texts[3] and "text only" in texts[3]  # from the samples event alone
    assert "exact_match × 1, format × 0.5" in group.title.text()
    # the summary, a token's tooltip and the export say it too
    inspector.pages.setCurrentIndex(TRAJECTORY_PAGE)
    assert "advantage per reward <b>exact_match +1.5, format +0.5</b>" in inspector.summary.text()
    assert "advantage per reward exact_match +1.5, format +0.5" in tooltip_html(inspector.current, 0, 1)
    page = inspector.export_html_to(tmp_path / "gdpo.html").read_text(encoding="utf-8")
    assert "advantage per reward <b>exact_match +1.5, format +0.5</b>" in page


# ================================================================ ReMax: the greedy baseline

BASELINE = {"completion": " 1 2 3", "reward": 0.5, "rewards": {"exact_match": 0.5}}


def remax_run(folder: Path, rewards: list[float], name: str = "remax") -> Path:
    samples, records = [], []
    for i, reward in enumerate(rewards):
        advantage = reward - BASELINE["reward"]  # ReMax: the reward minus the greedy completion's
        samples.append({"index": i, "group": 0, "prompt": PROMPT, "completion": f" {i} 1 2", "reward": reward,
                        "rewards": {"exact_match": reward}, "advantage": advantage, "baseline": BASELINE})
        if i < 2:
            record = grpo_record(1, i, 0, reward, advantage, n=7, prompt=PROMPT)
            record["baseline"] = BASELINE
            records.append(record)
    return family_run(folder, name, "grpo", GROUP_RECORDS, samples, records)


def test_remax_samples_table_shows_the_greedy_baseline_beside_the_reward(window, tmp_path):  # noqa: F811
    model = open_in(window, remax_run(tmp_path, [1.0, 0.0, 1.0, 0.25]))
    assert headers(model) == ["step", "prompt", "completion", "reward", "greedy baseline", "exact_match",
                              "advantage"]
    row = row_of(model, 1)
    assert cell(model, row, "reward") == "0" and cell(model, row, "greedy baseline") == "0.5"
    assert cell(model, row, "advantage") == "-0.5"
    tip = cell(model, row, "greedy baseline", Qt.ToolTipRole)
    assert "greedy completion" in tip and "reward 0.5 (exact_match 0.5)" in tip and tip.endswith("\n 1 2 3")
    window.samples.select_row(row)
    detail = window.samples.detail.toPlainText()
    assert "Greedy baseline" in detail and " 1 2 3" in detail


def test_remax_group_page_shows_the_greedy_completion_apart_from_the_samples(qtbot, window, tmp_path):  # noqa: F811
    open_in(window, remax_run(tmp_path, [1.0, 0.0, 1.0, 0.25]))
    inspector = inspector_on(window, GROUP_PAGE)
    group = inspector.group_view
    baseline = group.baseline
    assert baseline is not None
    qtbot.waitUntil(baseline.isVisible, timeout=3000)
    assert group.rows_layout.itemAt(0).widget() is baseline  # at the top, before the samples
    assert [r.index for r in group.rows] == [0, 1, 2, 3]  # not one of the group's rows
    assert "greedy baseline" in baseline.header.text() and "reward <b>0.5</b> (exact_match 0.5)" in \
        baseline.header.text()
    assert "Not a trained sample" in baseline.header.text() and baseline.text.text() == " 1 2 3"
    assert "greedy baseline reward <b>0.5</b>" in group.title.text()
    assert not hasattr(baseline, "view")  # no tokens to colour
    inspector.pages.setCurrentIndex(TRAJECTORY_PAGE)
    assert "greedy baseline reward <b>0.5</b> (exact_match 0.5)" in inspector.summary.text()
    assert "greedy baseline reward 0.5" in tooltip_html(inspector.current, 0, 0)
    page = inspector.export_html_to(tmp_path / "remax.html").read_text(encoding="utf-8")
    assert "<h2>greedy baseline · reward 0.5 (exact_match 0.5)" in page and "> 1 2 3</div>" in page


def test_remax_equal_rewards_still_learn_from_the_baseline(window, tmp_path):  # noqa: F811
    open_in(window, remax_run(tmp_path, [1.0, 1.0, 1.0, 1.0]))
    group = inspector_on(window, GROUP_PAGE).group_view
    assert group.flag.isVisible()
    text = group.flag.text()
    assert "No learning signal" not in text and "greedy baseline got 0.5" in text and "still learns" in text


# ================================================================ KTO: desirable or not

def kto_record(index: int, label: bool) -> dict:
    record = grpo_record(1, index, index, 0.0, 0.0, n=6, prompt=f"Question {index}?")
    beta = 0.1
    implicit = [round(beta * (lp - ref), 4) for lp, ref in zip(record["logprob"], record["ref_logprob"])]
    for key in ("advantage", "ratio", "clipped", "kl", "rewards", "truncated"):
        record.pop(key)
    record.update(algorithm="kto", label=label, implicit_reward=implicit, reward=round(sum(implicit), 4), kl=0.03)
    return record


def kto_run(folder: Path) -> Path:
    records = [kto_record(0, True), kto_record(1, False)]
    samples = [{"index": r["index"], "group": r["index"], "prompt": r["prompt"], "completion": r["completion"],
                "label": r["label"], "reward": r["reward"]} for r in records]
    return family_run(folder, "kto", "kto", SINGLE_RECORDS, samples, records)


def test_kto_labels_in_the_table_the_picker_the_header_and_the_export(qtbot, window, tmp_path):  # noqa: F811
    run_dir = kto_run(tmp_path)
    model = open_in(window, run_dir)
    assert headers(model) == ["step", "prompt", "completion", "label", "reward"]  # no advantage: no column of nulls
    assert cell(model, row_of(model, 0), "label") == "desirable"
    assert cell(model, row_of(model, 1), "label") == "undesirable"
    assert cell(model, row_of(model, 1), "label", Qt.BackgroundRole).name() == "#fae1e1"
    # filtered to the second question, typed key by key: its row says undesirable
    qtbot.keyClicks(window.samples.search, "Question 1")
    qtbot.waitUntil(lambda: model.rowCount() == 1, timeout=3000)
    assert cell(model, 0, "label") == "undesirable"

    inspector = inspector_on(window, TRAJECTORY_PAGE)
    labels = [inspector.rollout_box.itemText(i) for i in range(inspector.rollout_box.count())]
    assert "· desirable ·" in labels[0] and "· undesirable ·" in labels[1]
    header = inspector.sides[0].header
    assert header.isVisible() and "desirable" in header.text() and "pushes this completion up" in header.text()
    assert inspector.key == "implicit_reward"
    inspector.next_rollout()
    assert "undesirable" in header.text() and "pushes this completion down" in header.text()
    summary = inspector.summary.text()
    assert "<b>undesirable</b>" in summary and "KL reference point <b>0.03</b>" in summary
    page = inspector.export_html_to(tmp_path / "kto.html").read_text(encoding="utf-8")
    assert "step 1 · rollout 1 (undesirable)</h1>" in page
    inspector.pages.setCurrentIndex(GROUP_PAGE)
    assert "undesirable" in inspector.group_view.rows[0].header.text()


# ================================================================ Online DPO: which side won

def online_pair(index: int, chosen_score: float, rejected_score: float, tie: bool) -> dict:
    import random

    rng = random.Random(index)
    chosen, rejected = dpo_side(rng, 0.1, 8), dpo_side(rng, 0.1, 10)
    chosen.update(reward=chosen_score, rewards={"exact_match": chosen_score})
    rejected.update(reward=rejected_score, rewards={"exact_match": rejected_score})
    implicit = sum(chosen["implicit_reward"]) - sum(rejected["implicit_reward"])
    return {"algorithm": "online_dpo", "step": 1, "index": index, "group": index, "prompt": f"sort {index} 1 =",
            "beta": 0.1, "margin": round(implicit, 4), "score_margin": chosen_score - rejected_score, "tie": tie,
            "chosen": chosen, "rejected": rejected}


def online_dpo_run(folder: Path) -> Path:
    records = [online_pair(0, 1.0, 0.5, False), online_pair(1, 0.25, 0.25, True)]
    samples = [{"index": r["index"], "group": r["index"], "prompt": r["prompt"],
                "completion": r["chosen"]["completion"], "rejected": r["rejected"]["completion"],
                "reward": r["chosen"]["reward"],
                "rewards": {"chosen": r["chosen"]["reward"], "rejected": r["rejected"]["reward"],
                            "margin": r["score_margin"]},
                "advantage": r["margin"], "tie": r["tie"]} for r in records]
    return family_run(folder, "online-dpo", "online_dpo", PAIR_RECORDS, samples, records)


def test_online_dpo_says_which_side_won_and_by_how_much(window, tmp_path):  # noqa: F811
    model = open_in(window, online_dpo_run(tmp_path))
    assert headers(model) == ["step", "prompt", "completion", "reward", "chosen", "rejected", "margin",
                              "advantage", "tie"]
    assert cell(model, row_of(model, 0), "margin") == "0.5" and cell(model, row_of(model, 0), "tie") == "no"
    assert cell(model, row_of(model, 1), "tie") == "yes"
    window.samples.select_row(row_of(model, 1))
    assert "Rejected" in window.samples.detail.toPlainText() and "tie" in window.samples.detail.toPlainText()

    inspector = inspector_on(window, TRAJECTORY_PAGE)
    first, second = (inspector.rollout_box.itemText(i) for i in range(2))
    margin = inspector.records[0].record["margin"]
    assert first.startswith(f"pair 0 · chosen won by +0.5 score · implicit margin {margin:.4g} · ")
    assert "chosen score 1 / rejected score 0.5" in first
    assert second.startswith("pair 1 · tie: first sampled taken as chosen · ")
    chosen, rejected = (panel.header.text() for panel in inspector.sides)
    implicit = sum(inspector.current.record["chosen"]["implicit_reward"])
    assert "score <b>1</b> (exact_match 1)" in chosen and f"implicit reward <b>{implicit:.4g}</b>" in chosen
    assert "score <b>0.5</b>" in rejected
    summary = inspector.summary.text()
    assert "<b>chosen won by +0.5 score</b>" in summary and f"implicit reward margin <b>{margin:.4g}</b>" in summary
    page = inspector.export_html_to(tmp_path / "pair.html").read_text(encoding="utf-8")
    assert "<h2>chosen · score 1 · implicit reward" in page and "chosen won by +0.5 score" in page
    inspector.next_rollout()
    assert "<b>tie: first sampled taken as chosen</b>" in inspector.summary.text()


# ================================================================ the reward playground

def playground_scores(run_dir: Path, rewards: list[dict], algorithm: dict, answer: str):
    """The playground's results for a run's logged step 1 under `rewards`: its request
    (as the tab builds it), scored by the engine's own score-rewards code in this process
    (the tab runs it in a subprocess: tests/test_playground.py), the answer read back
    and shown in the results table."""
    from engine.commands.score_rewards import score
    from workbench.playground.model import build_request, read_answer, run_completions
    from workbench.playground.results import ResultsTable
    from workbench.runs.rundata import RunData

    run = RunData(run_dir)
    run.poll()
    completions = run_completions(run, 1)
    for completion in completions:
        completion.fields = {"answer": answer}
    request = build_request({"rewards": rewards, "algorithm": algorithm}, None, completions, 4, False)
    result = read_answer(json.dumps(score(request)) + "\n", "", 0)
    table = ResultsTable()
    table.show_completions(completions, result)
    return request, table


def numbers(table, name: str) -> list[float]:
    return [table.item(row, table.columns.index(name)).data(Qt.UserRole) for row in range(table.rowCount())]


def test_playground_shows_each_rewards_advantage_recomputed(qtbot, tmp_path):
    algorithm = {"name": "grpo", "num_generations": 4, "multi_objective_aggregation": "normalize_then_sum"}
    _, table = playground_scores(gdpo_run(tmp_path), WEIGHTS, algorithm, GDPO_ANSWER)
    qtbot.addWidget(table)
    assert table.columns[-4:] == ["advantage", "run advantage", "adv: exact_match", "adv: format"]
    assert "greedy baseline" not in table.columns
    # the engine's normalisation has eps 1e-4 in each std: the hand-worked values to 1e-3
    assert numbers(table, "adv: exact_match") == pytest.approx(EXACT_ADV, abs=1e-3)
    assert numbers(table, "adv: format") == pytest.approx(FORMAT_ADV, abs=1e-3)
    assert numbers(table, "advantage") == pytest.approx(GDPO_ADV, abs=1e-3)
    item = table.item(2, table.columns.index("adv: format"))
    assert item.text() == "-1.4997" and item.toolTip() == "the run had -1.5000"


def test_playground_scores_the_greedy_baseline_with_the_edited_rewards(qtbot, tmp_path):
    algorithm = {"name": "grpo", "num_generations": 4, "advantage_estimator": "remax"}
    request, table = playground_scores(remax_run(tmp_path, [1.0, 0.0, 1.0, 0.25]), [{"name": "exact_match"}],
                                       algorithm, " 1 2 3")
    qtbot.addWidget(table)
    assert [item["baseline"] for item in request["items"]] == [" 1 2 3"] * 4  # the run's greedy completion, sent
    assert table.columns[table.columns.index("run total") + 1] == "greedy baseline"
    # exact_match: the greedy " 1 2 3" is the answer (1; the run had 0.5), the samples are not (0)
    assert numbers(table, "greedy baseline") == [1.0] * 4 and numbers(table, "advantage") == [-1.0] * 4
    cell_ = table.item(0, table.columns.index("greedy baseline"))
    assert "greedy completion, scored by these rewards (exact_match 1.0000)" in cell_.toolTip()
    assert "the run had 0.5000" in cell_.toolTip() and cell_.background().color().name() == "#fff3cd"


# ================================================================ runs without these keys

def test_a_plain_run_gets_none_of_the_new_columns_or_rows(window, tmp_path):  # noqa: F811
    samples = [{"index": i, "group": 0, "prompt": PROMPT, "completion": f" {i}", "reward": float(i % 2),
                "rewards": {"exact_match": float(i % 2)}, "advantage": i - 1.5} for i in range(4)]
    records = [grpo_record(1, i, 0, float(i % 2), i - 1.5, prompt=PROMPT) for i in range(2)]
    model = open_in(window, family_run(tmp_path, "plain", "grpo", GROUP_RECORDS, samples, records))
    assert headers(model) == ["step", "prompt", "completion", "reward", "exact_match", "advantage"]
    inspector = inspector_on(window, GROUP_PAGE)
    assert inspector.group_view.baseline is None
    assert all("per reward" not in r.header.text() for r in inspector.group_view.rows)
    inspector.pages.setCurrentIndex(TRAJECTORY_PAGE)
    assert not inspector.sides[0].header.isVisible()
    assert "the completion" not in tooltip_html(inspector.current, 0, 0)


@pytest.mark.parametrize("name", ["workbench.runs.samples_store", "workbench.inspector.index",
                                  "workbench.inspector.export"])
def test_docstring_examples_hold(name):
    import importlib

    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted and result.failed == 0
