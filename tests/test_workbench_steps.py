"""What the window shows for step rewards (issue 25; docs/run-directory.md): a trajectory
record's `steps` ({label: {"ends": [token, ...], "scores": [...]}}) and a samples row's
({label: [score, ...]}).

A run directory is written by hand (events.jsonl and trajectories/, with the engine's
own writers), as tests/test_workbench_families.py does, and opened in the inspector or
the main window (pytest-qt, offscreen). The checks read what a user sees: where the
text draws each step's badge, its colour and pixels, the tooltip, the plot's step
lines, the summary, the Group page's step chips and order, the samples table's steps
column, the playground's steps; and that a record without steps looks as before.
"""

from __future__ import annotations

import doctest
import html
import importlib
import math
import re
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from engine.run import rundir
from inspector_helpers import grpo_record, write_steps
from workbench.inspector.view import GROUP_PAGE
from workbench.inspector.colors import diverging_hex
from workbench.inspector.export import export_html, summary_parts, tooltip_html
from workbench.inspector.index import build_group
from workbench.inspector.steps import Reference, StepComponent, badges, record_steps
from workbench.window.names import SAMPLES
from workbench.playground import model as playground_model
from workbench.playground.model import Completion, ScoreResult
from workbench.playground.results import ResultsTable, steps_column
from window_fixtures import inspector, make_window, open_run, window  # noqa: F401 (fixtures)

PROMPT = "sort 3 1 2 ="
ANSWER = " 1 2 3"
GROUP_RECORDS = {"layout": "group", "token_values": ["advantage", "logprob", "ref_logprob", "kl", "entropy", "ratio"],
                 "preferred": ["advantage"]}


def char_tokens(text: str) -> list[str]:
    """A sort completion as the built-in model writes it: a token a character, then <eos>."""
    return list(text) + ["<eos>"]


def sort_steps(completion: str) -> tuple[list[int], list[float]]:
    """sort_steps by hand (the process spec, section 3): each digit a step ending on its
    token, 1 while the digits so far equal the answer's, 0 from the first wrong one."""
    answer = [c for c in ANSWER if c.isdigit()]
    ends, scores, right = [], [], True
    for k, ch in enumerate(completion):
        if ch.isdigit():
            n = len(ends)
            right = right and n < len(answer) and answer[n] == ch
            ends.append(k)
            scores.append(1.0 if right else 0.0)
    return ends, scores


# The group: four completions; the first three recorded token by token, the fourth only in
# the samples event. Their step scores by hand:
#   #0 " 1 2 3" -> 1 1 1     #1 " 1 3 2" -> 1 0 0     #2 " 2 1 3" -> 0 0 0
#   #3 " 1 2 3 4" -> 1 1 1 0 (an extra digit is wrong)
COMPLETIONS = [" 1 2 3", " 1 3 2", " 2 1 3", " 1 2 3 4"]
SCORES = [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]
# All 13 step scores of the group: seven 1s, six 0s. Their mean is 7/13: a 1 is above it
# (green), a 0 below (pink); the colours' half-width is max(1 - 7/13, 7/13) = 7/13.
GROUP_MEAN = 7 / 13


def test_the_hand_worked_steps_hold():
    assert [sort_steps(c)[1] for c in COMPLETIONS] == SCORES
    assert sort_steps(" 1 3 2")[0] == [1, 3, 5]
    pooled = [s for scores in SCORES for s in scores]
    assert sum(pooled) / len(pooled) == pytest.approx(GROUP_MEAN)


def token_advantages(ends: list[int], scores: list[float], n: int, mean: float, std: float) -> list[float]:
    """GRPO process supervision (DeepSeekMath §4.1.3): a token's advantage is the sum of
    the normalised scores of the steps ending at or after it (0 after the last step)."""
    return [sum((s - mean) / std for e, s in zip(ends, scores) if e >= i) for i in range(n)]


def stepped_record(index: int, completion: str, steps: dict | None) -> dict:
    tokens = char_tokens(completion)
    record = grpo_record(1, index, 0, 0.0, 0.0, prompt=PROMPT, tokens=tokens)
    record["completion"] = completion
    if steps is not None:
        ends, scores = steps["sort_steps"]["ends"], steps["sort_steps"]["scores"]
        record.update(steps=steps, step_weights={label: 1.0 for label in steps}, reward=sum(scores) / len(scores),
                      rewards={"sort_steps": sum(scores) / len(scores)},
                      advantage=[round(a, 4) for a in token_advantages(ends, scores, len(tokens), 0.5, 0.5)])
    return record


def steps_run(folder: Path) -> Path:
    """Three steps of one group of 4: step 1 scored by sort_steps; step 2 by sort_steps and
    a PRM (two step components, ending on different tokens); step 3 by an outcome reward
    alone (no steps: as before)."""
    run_dir = Path(folder) / "steps"
    run_dir.mkdir(parents=True)
    preset = {"name": "steps", "algorithm": {"name": "grpo", "num_generations": 4},
              "rewards": [{"name": "sort_steps", "weight": 1.0}], "training": {"max_steps": 3, "record_rollouts": 3}}
    events = rundir.EventWriter(run_dir)
    events.emit("run_started", step=0, preset=preset, algorithm="grpo", max_steps=3,
                model={"name_or_path": "builtin:tiny"}, device="cpu", dtype="float32", num_train=8, num_eval=0,
                plots=[{"key": "loss", "title": "Loss", "metrics": ["loss"]}], records=GROUP_RECORDS)
    by_step: dict[int, list[dict]] = {1: [], 2: [], 3: []}
    for step in (1, 2, 3):
        events.emit("metrics", step=step, loss=0.5, reward=0.5)
        samples = []
        for i, completion in enumerate(COMPLETIONS):
            ends, scores = sort_steps(completion)
            steps = {"sort_steps": {"ends": ends, "scores": scores}}
            if step == 2:
                steps["prm"] = {"ends": [3, len(completion)], "scores": [0.9, 0.2]}  # the last on <eos>
            row = {"index": i, "group": 0, "prompt": PROMPT, "completion": completion, "reward": sum(scores) / len(scores),
                   "rewards": {"sort_steps": sum(scores) / len(scores)}, "advantage": 0.0}
            if step != 3:
                row["steps"] = {label: value["scores"] for label, value in steps.items()}
            samples.append(row)
            if i < 3:
                record = stepped_record(i, completion, steps if step != 3 else None)
                record["step"] = step
                by_step[step].append(record)
        events.emit("samples", step=step, samples=samples)
    events.emit("run_finished", step=3, status="done", reason="max_steps reached", checkpoint=None)
    events.close()
    write_steps(run_dir, by_step)
    return run_dir


def plain(text: str) -> str:
    """Rich text as read: tags gone, entities decoded, runs of spaces one space."""
    return re.sub(r"\s+", " ", html.unescape(re.sub("<[^>]+>", " ", text))).strip()


def visible_step_lines(plot) -> list[tuple[float, str]]:
    return [(line.value(), line.label.format) for line in plot.step_lines if line.isVisible()]


# ================================================================ the Trajectory page


def test_the_text_draws_each_steps_score_after_its_end_token(inspector, tmp_path, qtbot):  # noqa: F811
    open_run(inspector, steps_run(tmp_path))
    inspector.open_step(1, index=1)
    view = inspector.sides[0].view
    # " 1 3 2<eos>": the steps end on the digits (tokens 1, 3, 5); a badge follows each.
    assert view.drawn_boxes() == [("token", 0, ""), ("token", 1, ""), ("badge", 1, "1"), ("token", 2, ""),
                                  ("token", 3, ""), ("badge", 3, "0"), ("token", 4, ""), ("token", 5, ""),
                                  ("badge", 5, "0"), ("token", 6, "")]
    assert view.step_parity == [0, 0, 1, 1, 0, 0, -1]  # underlined in turn; <eos> after the last step
    # Coloured against the group's mean step score (7/13, recorded rows and samples alike).
    green, pink = diverging_hex(1.0, GROUP_MEAN, GROUP_MEAN), diverging_hex(0.0, GROUP_MEAN, GROUP_MEAN)
    assert pink == "#a9006b"  # 0 is the group's farthest below its mean: the darkest pink
    assert [bg.name() for _, bg, _ in view.step_badges[1]] == [green]
    assert [bg.name() for _, bg, _ in view.step_badges[3]] == [pink]
    # Painted: the badge's pill shows its colour, right of the token it ends.
    qtbot.waitUntil(lambda: view.badge_rects() and view.badge_rects()[0].width() > 0)
    image = view.viewport().grab().toImage()
    ratio = image.devicePixelRatio()
    rect = view.badge_rects()[1]
    pixel = image.pixelColor(int((rect.left() + 6) * ratio), int(rect.center().y() * ratio))
    assert pixel.name() == pink
    assert rect.left() > view.token_rect(3).right()
    assert view.badge_rects()[1].top() == pytest.approx(view.token_rect(3).top())  # same line


def test_the_tooltip_says_which_step_a_token_is_in(inspector, tmp_path):  # noqa: F811
    open_run(inspector, steps_run(tmp_path))
    inspector.open_step(1, index=1)
    view = inspector.sides[0].view
    assert "step 2 of 3 (sort_steps): score 0 · ends here" in plain(view.tooltip_for(3))
    assert "step 2 of 3 (sort_steps): score 0" in plain(view.tooltip_for(2))
    assert "ends here" not in plain(view.tooltip_for(2))
    assert "step 1 of 3 (sort_steps): score 1" in plain(view.tooltip_for(0))
    assert "after the last step (sort_steps)" in plain(view.tooltip_for(6))
    inspector.select_token(3)
    assert "step 2 of 3 (sort_steps): score 0 · ends here" in plain(inspector.details.text())


def test_the_plot_marks_each_step_end(inspector, tmp_path):  # noqa: F811
    open_run(inspector, steps_run(tmp_path))
    inspector.open_step(1, index=1)
    # A line between each end token and the next, labelled with the step's score.
    assert visible_step_lines(inspector.plot) == [(1.5, "1"), (3.5, "0"), (5.5, "0")]
    inspector.open_step(2, index=1)  # two step components: each end once, the scores after their labels
    assert visible_step_lines(inspector.plot) == [(1.5, "sort_steps 1"), (3.5, "sort_steps 0 · prm 0.9"),
                                                  (5.5, "sort_steps 0"), (6.5, "prm 0.2")]
    inspector.open_step(3, index=1)  # no steps: no lines
    assert visible_step_lines(inspector.plot) == []


def test_several_step_components_each_show_their_ends_with_a_label(inspector, tmp_path):  # noqa: F811
    open_run(inspector, steps_run(tmp_path))
    inspector.open_step(2, index=1)
    view = inspector.sides[0].view
    assert [box for box in view.drawn_boxes() if box[0] == "badge"] == [
        ("badge", 1, "sort_steps 1"), ("badge", 3, "sort_steps 0"), ("badge", 3, "prm 0.9"),
        ("badge", 5, "sort_steps 0"), ("badge", 6, "prm 0.2")]
    assert view.drawn_boxes()[-1] == ("badge", 6, "prm 0.2")  # the last step ends on <eos>
    text = plain(view.tooltip_for(4))
    assert "step 3 of 3 (sort_steps): score 0" in text and "step 2 of 2 (prm): score 0.2" in text
    assert view.step_parity == [0, 0, 1, 1, 0, 0, -1]  # the first component's steps


def test_the_summary_gives_the_steps_and_a_mean_advantage_with_its_range(inspector, tmp_path):  # noqa: F811
    open_run(inspector, steps_run(tmp_path))
    inspector.open_step(1, index=1)
    summary = plain(inspector.summary.text())
    assert "steps of sort_steps 1 0 0 (mean 0.3333, weight 1)" in summary
    # " 1 3 2": normalised steps (mean 0.5, std 0.5) +1, -1, -1; a token's advantage sums
    # those ending at or after it: -1 on tokens 0-1, -2 on 2-3, -1 on 4-5, 0 on <eos>.
    assert inspector.current.sides[0].numbers["advantage"].tolist() == [-1, -1, -2, -2, -1, -1, 0]
    assert "mean advantage -1.143 (per token -2 to 0)" in summary  # 0 unsigned (round-off reads as 0)
    assert "steps 1 0 0" in inspector.rollout_box.currentText()
    assert "mean adv -1.14" in inspector.rollout_box.currentText()


def test_a_record_without_steps_looks_as_before(inspector, tmp_path):  # noqa: F811
    open_run(inspector, steps_run(tmp_path))
    inspector.open_step(3, index=1)
    view = inspector.sides[0].view
    assert view.drawn_boxes() == [("token", i, "") for i in range(7)]
    assert view.step_badges == {} and view.step_parity is None and view.badge_rects() == []
    assert "(sort_steps)" not in plain(view.tooltip_for(3)) and "last step" not in plain(view.tooltip_for(6))
    summary = plain(inspector.summary.text())
    assert "steps" not in summary and "advantage 0 " in summary and "mean advantage" not in summary
    # The same tokens laid out as a stepped record but without badges: token boxes in the
    # same places up to the first badge.
    x_before = [view.token_rect(i).left() for i in range(7)]
    inspector.open_step(1, index=1)
    stepped = inspector.sides[0].view
    assert [stepped.token_rect(i).left() for i in range(2)] == x_before[:2]
    assert stepped.token_rect(2).left() > x_before[2]  # pushed right by the first badge


def test_export_html_draws_the_step_badges(inspector, tmp_path):  # noqa: F811
    open_run(inspector, steps_run(tmp_path))
    inspector.open_step(1, index=1)
    page = export_html(inspector.current, "advantage", inspector.scale)
    assert page.count("class='st'") == 3
    # each badge right after its end token's span (" 1 3 2": tokens 1, 3 and 5)
    assert re.search(r"data-i='1'[^>]*>1</span><span class='st'[^>]*>1</span>", page)
    assert "step 2 of 3 (sort_steps): score 0 · ends here" in html.unescape(page)


# ================================================================ the Group page


def group_header_texts(inspector) -> dict[int, str]:  # noqa: F811
    return {row.index: plain(row.header.text()) for row in inspector.group_view.rows}


def test_the_group_page_shows_each_completions_steps_and_orders_by_them(inspector, tmp_path):  # noqa: F811
    open_run(inspector, steps_run(tmp_path))
    inspector.open_step(1, index=0)
    inspector.pages.setCurrentIndex(GROUP_PAGE)
    group = inspector.group_view
    texts = group_header_texts(inspector)
    assert set(texts) == {0, 1, 2, 3}  # the fourth from the samples event (text only)
    assert "steps 1 1 1 mean 1" in texts[0] and "first wrong" not in texts[0]
    assert "steps 1 0 0 mean 0.333 first wrong: step 2" in texts[1]
    assert "first wrong: step 1" in texts[2]
    assert "steps 1 1 1 0 mean 0.75 first wrong: step 4" in texts[3]
    assert "mean advantage" in texts[1] and "(per token -2 to 0)" in texts[1]
    assert "green above the group's mean step score (sort_steps 0.5385)" in plain(group.title.text())
    # The first wrong step is bold and underlined: #1's second chip.
    chips = re.findall(r"<span style='background:[^']*'>", group.row(1).header.text())
    assert ["text-decoration:underline" in chip for chip in chips[:3]] == [False, True, False]
    # The recorded rows draw their badges too, coloured against the same group mean.
    assert [box for box in group.row(1).view.drawn_boxes() if box[0] == "badge"] == [
        ("badge", 1, "1"), ("badge", 3, "0"), ("badge", 5, "0")]
    assert group.order_row.isVisibleTo(group)
    assert group.shown_order() == [0, 1, 2, 3]
    group.order_box.setCurrentIndex(1)  # by steps: no wrong step first, then the latest first wrong
    assert group.shown_order() == [0, 3, 1, 2]
    group.order_box.setCurrentIndex(0)
    assert group.shown_order() == [0, 1, 2, 3]
    inspector.open_step(3, index=0)  # no steps: no order box, no chips
    assert not group.order_row.isVisibleTo(group)
    assert not any(re.search(r"· steps |first wrong", text) for text in group_header_texts(inspector).values())


def test_equal_rewards_with_different_steps_are_not_flagged_as_no_signal():
    # [1, 0] and [0, 1]: both mean 0.5 (the same reward), but the steps differ.
    rows = [{"index": i, "group": 0, "prompt": PROMPT, "completion": "x", "reward": 0.5, "advantage": 0.0,
             "steps": {"s": scores}} for i, scores in enumerate(([1.0, 0.0], [0.0, 1.0]))]
    group = build_group([], rows, 1, 0, size=2)
    assert group.rewards_equal and group.steps_differ and not group.no_signal
    assert "steps were scored differently" in group.flag()
    same = build_group([], [{**r, "steps": {"s": [1.0, 1.0]}} for r in rows], 1, 0, size=2)
    assert not same.steps_differ and same.no_signal


# ================================================================ the samples table


def headers(model) -> list[str]:
    return [model.headerData(c, Qt.Horizontal) for c in range(model.columnCount())]


def cell(model, row: int, header: str, role=Qt.DisplayRole):
    return model.data(model.index(row, headers(model).index(header)), role)


def test_the_samples_table_shows_the_steps_compactly(window, tmp_path):  # noqa: F811
    window.open_run(steps_run(tmp_path))
    window.tabs.setCurrentIndex(SAMPLES)
    model = window.samples.model
    assert headers(model) == ["step", "prompt", "completion", "reward", "sort_steps", "steps", "advantage"]
    rows = {(model.sample(r).step, model.sample(r).index): r for r in range(model.rowCount())}
    assert cell(model, rows[1, 1], "steps") == "1 0 0"
    assert cell(model, rows[1, 3], "steps") == "1 1 1 0"
    assert cell(model, rows[2, 1], "steps") == "sort_steps: 1 0 0 · prm: 0.9 0.2"
    assert cell(model, rows[3, 1], "steps") == ""  # a row without steps
    assert cell(model, rows[1, 1], "steps", Qt.ToolTipRole) == (
        "sort_steps: 3 steps, mean 0.3333\n  step 1: 1\n  step 2: 0\n  step 3: 0")
    assert "each step's score" in model.headerData(headers(model).index("steps"), Qt.Horizontal, Qt.ToolTipRole)
    # sorted by steps (the mean of each row's scores), lowest first; rows without steps last
    window.samples.step_from.setValue(1)
    window.samples.step_to.setValue(1)
    window.samples.table.sortByColumn(headers(model).index("steps"), Qt.AscendingOrder)
    assert [model.sample(r).index for r in range(model.rowCount())] == [2, 1, 3, 0]
    window.samples.select_row(1)
    assert "steps of sort_steps: 1 0 0 (mean 0.3333)" in window.samples.detail.toPlainText()


# ================================================================ the playground


def test_the_playground_reads_the_steps_of_an_answer_and_shows_them():
    answer = ('{"components": [{"label": "sort_steps", "weight": 1.0, "source": ""}], "items": ['
              '{"total": 0.3333, "components": {"sort_steps": 0.3333}, "advantage": null,'
              ' "steps": {"sort_steps": [[2, 1.0], [4, 0.0], [6, 0.0]]}},'
              '{"total": 1.0, "components": {"sort_steps": 1.0}, "advantage": null,'
              ' "steps": {"sort_steps": [[2, 1.0], [4, 1.0], [6, 1.0]]}}]}')
    result = playground_model.read_answer(answer, "", 0)
    assert playground_model.answer_steps({"s": [[2, 1.0], {"end": 4, "score": 0}, "x"], "bad": 3}) == {
        "s": [(2, 1.0), (4, 0.0)]}  # pairs or mappings; anything else left out
    assert isinstance(result, ScoreResult) and result.step_labels == ["sort_steps"]
    assert result.steps[0] == {"sort_steps": [(2, 1.0), (4, 0.0), (6, 0.0)]}
    table = ResultsTable()
    completions = [Completion(PROMPT, " 1 3 2", 0, run_steps={"sort_steps": [1.0, 1.0, 0.0]}),
                   Completion(PROMPT, " 1 2 3", 0)]
    table.show_completions(completions, result)
    assert table.columns[-1] == steps_column("sort_steps") == "steps: sort_steps"
    assert table.cell(0, "steps: sort_steps") == "[ 1] 1  [ 3] 0  [ 2] 0"
    assert table.cell(1, "steps: sort_steps") == "[ 1] 1  [ 2] 1  [ 3] 1"
    item = table.item(0, table.columns.index("steps: sort_steps"))
    assert item.toolTip() == "step 1: 1  ' 1'\nstep 2: 0  ' 3'\nstep 3: 0  ' 2'\nthe run had 1 1 0"
    assert item.background().color().name() == "#fff3cd"  # the run had scored step 2 right
    assert table.item(1, table.columns.index("steps: sort_steps")).background().style() == Qt.NoBrush
    table.deleteLater()


STEPS_PY = """\
def words(prompts, completions, **fields):
    # each word a step, ending after it; scored by its length, capped at 1
    out = []
    for text in completions:
        steps, end = [], 0
        for word in text.split(" "):
            end += len(word)
            if word:
                steps.append((end, min(1.0, len(word) / 3)))
            end += 1
        out.append(steps)
    return out
"""


def press_score(qtbot, view):
    with qtbot.waitSignal(view.sig_scored, timeout=60_000) as scored:  # the engine's start on a busy machine
        qtbot.mouseClick(view.score_button, Qt.LeftButton)
    return scored.args[0]


def test_the_playground_tab_scores_steps_of_a_reward_of_its_own(qtbot, window, tmp_path):  # noqa: F811
    (tmp_path / "my_steps.py").write_text(STEPS_PY)
    window.tabs.setCurrentWidget(window.playground)
    view = window.playground
    view.doc.set("rewards", [{"name": "my_steps.py:words", "weight": 1.0}])
    view.doc.path = tmp_path / "preset.yaml"  # the reward file is found next to it
    qtbot.mouseClick(view.source.typed, Qt.LeftButton)
    qtbot.keyClicks(view.source.prompt, "say it")
    qtbot.keyClicks(view.source.completions_edit, "abc de")
    qtbot.keyClick(view.source.completions_edit, Qt.Key_Return)
    qtbot.keyClicks(view.source.completions_edit, "a")
    result = press_score(qtbot, view)
    assert isinstance(result, ScoreResult), getattr(result, "message", result)
    assert result.steps[0] == {"words": [(3, 1.0), (6, pytest.approx(2 / 3))]}
    # abc: 3 letters -> 1; de: 2 -> 2/3; the component's value is their mean, 5/6
    assert view.table.cell(0, "steps: words") == "[abc] 1  [ de] 0.667"
    assert view.table.cell(1, "steps: words") == "[a] 0.333"
    assert result.values[0]["words"] == pytest.approx((1 + 2 / 3) / 2)


# ================================================================ the models


def test_steps_that_do_not_fit_the_tokens_are_left_out():
    record = {"steps": {"ok": {"ends": [0, 4], "scores": [1, 0]},
                        "past_the_end": {"ends": [5], "scores": [1]},
                        "not_ascending": {"ends": [2, 2], "scores": [1, 1]},
                        "one_score_short": {"ends": [1, 2], "scores": [1]},
                        "not_whole": {"ends": [1.5], "scores": [1]}}}
    assert [c.label for c in record_steps(record, 5)] == ["ok"]
    assert record_steps({"steps": None}, 5) == [] and record_steps({}, 5) == []


def test_badges_without_a_group_are_coloured_against_the_completions_own_steps():
    (one,) = badges([StepComponent("s", (0,), (1.0,))], {}).values()
    assert one == [("1", "#f7f7f7")]  # a lone score is its own mean: neutral
    ref = Reference.of([0.2, 0.8])
    assert ref.mean == pytest.approx(0.5) and ref.spread == pytest.approx(0.3) and ref.threshold == pytest.approx(0.5)
    assert math.isnan(Reference.of([]).mean)


def test_summary_parts_without_steps_are_unchanged():
    record = grpo_record(1, 0, 0, 1.0, 0.5, prompt=PROMPT, tokens=char_tokens(" 1 2 3"))
    from workbench.inspector.records import Trajectory

    t = Trajectory.from_record(record, GROUP_RECORDS)
    assert t.steps == [] and t.advantage_range is None
    texts = [p.text() for p in summary_parts(t)]
    assert "advantage +0.5" in texts and not any(text.startswith("steps") or "mean advantage" in text
                                                 for text in texts)
    assert "(sort_steps)" not in plain(tooltip_html(t, 0, 2)) and "last step" not in plain(tooltip_html(t, 0, 6))


@pytest.mark.parametrize("name", ["workbench.inspector.steps", "workbench.runs.samples_store"])
def test_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted and result.failed == 0


# ================================================================ a real run from the window


def test_a_step_reward_preset_runs_from_the_window_and_shows_its_steps(window, qtbot):  # noqa: F811
    """The window's launcher runs a preset with the built-in step reward and grpo_process
    (the engine process is the subject): the samples table shows each completion's steps,
    and the recorded rollouts carry them for the inspector."""
    from conftest import small_preset_dict
    from window_fixtures import click_run

    preset = small_preset_dict(max_steps=2, record_rollouts=4)
    preset["rewards"] = [{"name": "exact_match"}, {"name": "sort_steps", "weight": 0.5}]
    preset["algorithm"]["advantage_estimator"] = "grpo_process"
    window.doc.new(preset)
    with qtbot.waitSignal(window.engine_finished, timeout=150_000) as finished:
        run_dir = click_run(qtbot, window)
    assert finished.args == [0]
    window.tick()
    assert window.shown[0].status == "done"
    window.tabs.setCurrentIndex(SAMPLES)
    model = window.samples.model
    assert "steps" in headers(model) and model.rowCount() == 8  # 2 steps x log_completions 4
    shown = 0
    for r in range(model.rowCount()):
        scores = model.sample(r).steps["sort_steps"]
        if scores:  # (a completion without digits has no steps)
            assert cell(model, r, "steps") == " ".join(f"{s:g}" for s in scores)
            shown += 1
    assert shown
    records = rundir.read_trajectories(run_dir, 2)
    assert records and all(set(r["steps"]) == {"sort_steps"} for r in records)
