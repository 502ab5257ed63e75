"""The Evaluate page (issue 40): evaluations written here by hand into a fake run folder
(eval.json and samples.jsonl as `rl-engine eval` writes them; no engine runs), read by
workbench/runs/evaluations.py and shown by workbench/runs/evaluate_page.py; *Run
evaluation* starts a stand-in (`python -c ...`) given the real command's arguments."""

from __future__ import annotations

import doctest
import json
import math
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

import workbench.runs.evaluate_prompts
import workbench.runs.evaluate_views
import workbench.runs.evaluations
from workbench.runs.evaluate_page import EvaluatePage
from workbench.runs.evaluations import EvaluationError, SamplesFile, eval_command, load_evaluation

RUN = "grpo-sort-20261128-160000"
KS = [1, 2, 4, 8, 16, 32]
PASS = {"base": [0.31, 0.45, 0.6, 0.72, 0.8, 0.85], "step_000200": [0.4, 0.5, 0.6, 0.7, 0.75, 0.8],
        "step_000400": [0.55, 0.63, 0.7, 0.75, 0.78, 0.8]}
MAJ = {"base": [0.31, 0.3, 0.35, 0.4, 0.45, 0.5], "step_000200": [0.4, 0.42, 0.45, 0.5, 0.52, 0.55],
       "step_000400": [0.55, 0.57, 0.6, 0.62, 0.63, 0.64]}
# Correct samples of 32 per prompt. Base vs step 400: prompt 3 base only; 1, 2, 6 step 400
# only; 0, 5 both; 4, 7 neither.
CORRECT = {"base": [3, 0, 0, 2, 0, 1, 0, 0], "step_000200": [10, 1, 0, 0, 0, 2, 0, 1],
           "step_000400": [30, 5, 12, 0, 0, 1, 7, 0]}
PROMPTS = ["sort 3 1 =", "sort 9 4 7 =", "sort 5 5 2 =", "sort 8 1 =", "sort 6 2 9 4 =", "sort 2 7 =",
           "sort 4 3 1 =", "sort 7 7 7 1 ="]


def fake_run(folder: Path) -> Path:
    """A GRPO run with two complete checkpoints and one being written (no state.json yet)."""
    run_dir = folder / RUN
    for step, complete in ((200, True), (400, True), (600, False)):
        checkpoint = run_dir / "checkpoints" / f"step_{step:06d}"
        checkpoint.mkdir(parents=True)
        if complete:
            (checkpoint / "state.json").write_text(json.dumps({"step": step}))
    (run_dir / "preset.yaml").write_text("name: grpo-sort\nalgorithm: {name: grpo}\n")
    (run_dir / "events.jsonl").write_text(json.dumps({"type": "run_started", "time": 1.8e9, "step": 0,
                                                      "model": {"head": "causal_lm"}}) + "\n")
    return run_dir


def model_entry(run_dir: Path, name: str, best_of_n: bool = False, done: int = 8) -> dict:
    step = 0 if name == "base" else int(name.split("_")[1])
    entry = {"name": name, "label": "base (no adapter)" if name == "base" else f"step {step}",
             "checkpoint": None if name == "base" else str(run_dir / "checkpoints" / name), "step": step,
             "done_prompts": done, "pass_at_k": dict(zip(map(str, KS), PASS[name])),
             "pass_hat_k": {str(k): round(PASS[name][0] ** k, 4) for k in KS},
             "maj_at_k": dict(zip(map(str, KS), MAJ[name])), "mean_reward": PASS[name][0] + 0.01,
             "best_of_n": None, "samples_per_second": 410.0 + step}
    if best_of_n:
        oracle = {str(n): min(1.0, PASS[name][0] + 0.02 * (n - 1)) for n in range(1, 33)}
        entry["best_of_n"] = {"reward_model": {n: v * 0.8 for n, v in oracle.items()}, "oracle": oracle}
    return entry


def write_eval(run_dir: Path, name: str = "eval-20261128-170000", models=("base", "step_000200", "step_000400"),
               best_of_n: bool = False, **changes) -> Path:
    """eval.json and samples.jsonl of `models` on the 8 prompts, as the engine writes them."""
    folder = run_dir / "evals" / name
    folder.mkdir(parents=True, exist_ok=True)
    data = {"kind": "evaluation", "version": 1, "name": name, "run": str(run_dir),
            "preset": str(run_dir / "preset.yaml"), "created": 1795880000.0, "finished": True, "n": 32, "ks": KS,
            "sampling": {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "max_completion_length": 16},
            "verifier": "exact_match", "reward_model": "/runs/rm-sort" if best_of_n else None, "prompts": 8,
            "models": [model_entry(run_dir, m, best_of_n) for m in models],
            "crossings": [{"a": "base", "b": "step_000400", "k": 12.5, "metric": "pass_at_k"}],
            "per_prompt": [{"index": i, "prompt": p, "correct": {m: CORRECT[m][i] for m in models}}
                           for i, p in enumerate(PROMPTS)]}
    data.update(changes)
    (folder / "eval.json").write_text(json.dumps(data))
    with open(folder / "samples.jsonl", "w") as out:
        for model in models:
            for index, prompt in enumerate(PROMPTS):
                answer = " " + " ".join(sorted(prompt.split()[1:-1]))
                samples = [{"completion": answer if s < CORRECT[model][index] else f" wrong {s}",
                            "reward": 1.0 if s < CORRECT[model][index] else 0.0, "rewards": {"exact_match": 1.0},
                            "correct": s < CORRECT[model][index], "vote": answer.strip() if s % 2 == 0 else None,
                            "rm_score": None} for s in range(32)]
                out.write(json.dumps({"model": model, "index": index, "prompt": prompt, "answer": answer,
                                      "samples": samples}) + "\n")
    return folder


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return fake_run(tmp_path / "runs")


def stand_in(script: str):
    """A command factory: `script` given the arguments `rl-engine eval` would get."""
    return lambda *args: [sys.executable, "-c", script] + eval_command(*args)[4:]


def open_page(qtbot, run_dir: Path, command_for=None) -> EvaluatePage:
    page = EvaluatePage(command_for) if command_for else EvaluatePage()
    qtbot.addWidget(page)
    page.resize(1500, 950)
    page.set_run(run_dir)
    page.show()
    return page


def test_the_examples_hold():
    for module in (workbench.runs.evaluations, workbench.runs.evaluate_views, workbench.runs.evaluate_prompts):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted >= 1


def test_the_form_offers_the_base_and_each_complete_checkpoint(qtbot, run_dir):
    page = open_page(qtbot, run_dir)
    assert list(page.model_boxes) == ["base", "step_000200", "step_000400"]  # step_000600 is being written
    assert page.chosen_models() == ["base", "step_000400"]  # the base and the last
    assert page.n_spin.value() == 32 and page.body.currentWidget() is page.intro
    assert page.run_button.isEnabled() and not page.stop_button.isVisible()
    for box in page.model_boxes.values():
        box.setChecked(False)
    assert not page.run_button.isEnabled()  # nothing to evaluate


def test_the_summary_and_the_curves_on_a_log2_axis(qtbot, run_dir):
    write_eval(run_dir)
    page = open_page(qtbot, run_dir)
    view = page.view
    assert page.body.currentWidget() is view and not page.message.isVisible()
    assert "8 held-out prompts × 32 samples" in view.header.text() and "exact_match" in view.header.text()
    summary = view.summary
    assert [summary.cell(r, "model") for r in range(3)] == ["base (no adapter)", "step 200", "step 400"]
    assert summary.cell(0, "pass@1") == "0.310" and summary.cell(0, "pass@32") == "0.850"
    assert summary.cell(2, "maj@32") == "0.640" and summary.cell(2, "mean reward") == "0.560"
    assert summary.cell(2, "samples/s") == "810.0" and summary.cell(1, "prompts") == "8"

    plot = view.pass_plot
    assert set(plot.curves) == {"base", "step_000200", "step_000400"}
    for name, values in PASS.items():
        assert plot.points(name) == list(zip(map(float, KS), values))
    x, _y = plot.curves["base"].getData()
    assert list(x) == [0, 1, 2, 3, 4, 5]  # log2 k
    ticks = plot.plot.getAxis("bottom")._tickLevels[0]
    assert [label for _pos, label in ticks] == ["1", "2", "4", "8", "16", "32"]
    [mark] = plot.marks
    assert mark.value() == pytest.approx(math.log2(12.5)) and mark.label.format == "curves cross at k ≈ 12.5"
    assert view.maj_plot.points("step_000400") == list(zip(map(float, KS), MAJ["step_000400"]))
    assert not view.maj_plot.marks  # the crossing is pass@k's
    assert view.best_plot.isHidden() and not view.best_plot.curves  # no reward model given


def test_best_of_n_is_drawn_only_when_a_reward_model_was_given(qtbot, run_dir):
    write_eval(run_dir, "eval-a")
    write_eval(run_dir, "eval-b", models=("base", "step_000400"), best_of_n=True, crossings=[])
    page = open_page(qtbot, run_dir)
    picker = page.picker
    assert {picker.itemText(i) for i in range(picker.count())} == {"eval-a", "eval-b"}
    page.refresh_evaluations(select=run_dir / "evals" / "eval-b")
    best = page.view.best_plot
    assert best.isVisible() and set(best.curves) == {"base:reward_model", "base:oracle", "step_000400:reward_model",
                                                     "step_000400:oracle"}
    assert len(best.points("base:oracle")) == 32 and best.points("base:oracle")[0] == (1.0, 0.31)
    assert best.curves["base:oracle"].opts["pen"].style() == Qt.DashLine
    assert not page.view.pass_plot.marks
    page.refresh_evaluations(select=run_dir / "evals" / "eval-a")
    assert page.view.best_plot.isHidden()


def _shown_categories(page) -> list[str]:
    table = page.view.prompts.table
    return [table.model().index(r, table.model().columnCount() - 1).data() for r in range(table.model().rowCount())]


def test_each_category_lists_its_prompts_and_the_filter_goes_by_keyboard(qtbot, run_dir):
    write_eval(run_dir)
    page = open_page(qtbot, run_dir)
    section = page.view.prompts
    assert (section.first.currentText(), section.second.currentText()) == ("base", "step 400")
    assert section.table.prompts.columns() == ["#", "prompt", "base", "step 200", "step 400", "solved by"]
    items = [section.filter.itemText(i) for i in range(section.filter.count())]
    assert items == ["all prompts (8)", "solved by base only (1)", "solved by step 400 only (3)",
                     "solved by both (2)", "solved by neither (2)"]
    assert "step 400 solves 3 prompts that base never solved in 32 samples, and misses 1" in section.summary.text()
    section.table.setFocus()
    expected = [[3], [1, 2, 6], [0, 5], [4, 7]]
    for category, indices in zip(["base only", "step 400 only", "both", "neither"], expected):
        qtbot.keyClick(section.filter, Qt.Key_Down)
        assert section.table.shown_indices() == indices
        assert set(_shown_categories(page)) == {category}
    qtbot.keyClick(section.filter, Qt.Key_Home)
    assert section.table.shown_indices() == list(range(8))

    section.first.setCurrentIndex(section.first.findText("step 200"))  # what steps 200 to 400 taught
    assert section.filter.itemText(2) == "solved by step 400 only (2)"  # prompts 2 and 6
    assert section.filter.itemText(1) == "solved by step 200 only (1)"  # prompt 7
    qtbot.keyClick(section.filter, Qt.Key_Down)
    assert section.table.shown_indices() == [7]


def test_a_click_on_a_prompt_shows_each_models_samples(qtbot, run_dir):
    write_eval(run_dir)
    page = open_page(qtbot, run_dir)
    section = page.view.prompts
    table = section.table
    rect = table.visualRect(table.model().index(0, 1))
    with qtbot.waitSignal(section.sig_prompt_shown) as shown:
        qtbot.mouseClick(table.viewport(), Qt.LeftButton, pos=rect.center())
    assert shown.args == [0]
    text = section.samples.toPlainText()
    assert "sort 3 1 =" in text and "Reference answer: ·1 3" in text
    assert "base: 3 of 32 correct" in text and "step 200: 10 of 32 correct" in text
    assert "step 400: 30 of 32 correct" in text and "wrong 31" in text
    assert text.count("✓") == 3 + 10 + 30 + 3  # a mark per correct sample, and each table's header
    qtbot.keyClick(table, Qt.Key_Down)  # the keyboard moves on to the next prompt
    assert "sort 9 4 7 =" in section.samples.toPlainText()


def click_link(qtbot, browser, href: str) -> None:
    """A click on the link to `href` in a QTextBrowser, where it is drawn (scrolled to)."""
    document, found = browser.document(), None
    cursor = document.find("tokens ▸")
    while not cursor.isNull():
        if cursor.charFormat().anchorHref() == href:
            found = cursor
            break
        cursor = document.find("tokens ▸", cursor)
    assert found is not None, f"no link to {href}"
    at = QTextCursor(document)
    at.setPosition(found.selectionStart() + 2)
    browser.setTextCursor(at)
    browser.ensureCursorVisible()
    qtbot.mouseClick(browser.viewport(), Qt.LeftButton, pos=browser.cursorRect(at).center())


def test_a_samples_tokens_link_opens_it_as_an_answer_to_score(qtbot, run_dir):
    write_eval(run_dir)
    page = open_page(qtbot, run_dir)
    section = page.view.prompts
    table = section.table
    qtbot.mouseClick(table.viewport(), Qt.LeftButton, pos=table.visualRect(table.model().index(0, 1)).center())
    assert section.samples.toPlainText().count("tokens ▸") == 3 * 32
    with qtbot.waitSignal(page.sig_open_tokens) as opened:
        click_link(qtbot, section.samples, "tokens:2/0")  # step 400's first sample of prompt 0
    given = opened.args[0]
    assert (given.held_out, given.completion, given.checkpoint) == (0, " 1 3", "step_000400")
    assert given.max_new_tokens == 16 and given.run_dir.resolve() == run_dir.resolve()
    assert given.source == "sample 0 of step 400 on held-out prompt 0 in eval-20261128-170000"
    with qtbot.waitSignal(page.sig_open_tokens) as opened:
        click_link(qtbot, section.samples, "tokens:0/5")  # a base sample: under the evaluation's last checkpoint
    assert (opened.args[0].completion, opened.args[0].checkpoint) == (" wrong 5", "step_000400")

    # A run of tool episodes: Try cannot score its answers (the tools' tokens), so no link.
    (run_dir / "preset.yaml").write_text(
        "name: calc\nalgorithm: {name: grpo}\ndata: {environment: builtin:calculator}\n")
    assert page.show_evaluation(Path(page.picker.currentData()))
    qtbot.mouseClick(table.viewport(), Qt.LeftButton, pos=table.visualRect(table.model().index(1, 1)).center())
    assert "correct" in section.samples.toPlainText() and "tokens ▸" not in section.samples.toPlainText()


def click_point(qtbot, plot, k: int, value: float) -> None:
    """A click on a KCurvePlot's point (k, value), where it is drawn."""
    from PySide6.QtCore import QPointF

    widget = plot.plot
    scene = widget.getPlotItem().getViewBox().mapViewToScene(QPointF(math.log2(k), value))
    qtbot.mouseClick(widget.viewport(), Qt.LeftButton, pos=widget.mapFromScene(scene))


def test_a_click_on_a_curves_point_lists_that_models_weakest_prompts_first(qtbot, run_dir):
    write_eval(run_dir)
    page = open_page(qtbot, run_dir)
    qtbot.waitExposed(page)
    section = page.view.prompts
    section.filter.setCurrentIndex(1)  # a filter left on: the click shows every prompt again
    with qtbot.waitSignal(section.sig_prompt_shown) as shown:
        click_point(qtbot, page.view.pass_plot, 1, PASS["step_000200"][0])
    assert section.second.currentText() == "step 200" and section.first.currentText() == "base"
    assert section.filter.currentIndex() == 0
    # step 200's correct samples [10, 1, 0, 0, 0, 2, 0, 1]: its pass@1 per prompt, lowest first (ties by index)
    assert section.table.shown_indices() == [2, 3, 4, 6, 1, 7, 5, 0]
    assert shown.args == [2] and "sort 5 5 2 =" in section.samples.toPlainText()
    assert "ordered by step 200's pass@1 per prompt" in section.order_note.text()
    assert "8 of 8 below 0.5" in section.order_note.text()
    with qtbot.waitSignal(section.sig_prompt_shown) as shown:
        click_point(qtbot, page.view.maj_plot, 1, MAJ["base"][0])  # the base: already the first of the pair
    assert (section.first.currentText(), section.second.currentText()) == ("base", "step 200")
    assert section.table.shown_indices() == [1, 2, 4, 6, 7, 5, 3, 0]  # base's [3, 0, 0, 2, 0, 1, 0, 0]
    assert shown.args == [1] and "its maj@k point at k = 1" in section.order_note.text()


def test_the_samples_file_is_indexed_lazily_and_as_it_grows(run_dir):
    folder = write_eval(run_dir, models=("base",))
    reader = SamplesFile(folder / "samples.jsonl")
    assert reader.offsets == {}
    answer, rows = reader.samples("base", 5)
    assert answer == " 2 7" and len(rows) == 32 and rows[0].correct and not rows[1].correct
    assert reader.samples("step_000400", 0) is None
    line = json.dumps({"index": 0, "answer": "x", "model": "step_000400", "samples": []})  # another key order
    with open(folder / "samples.jsonl", "a") as out:
        out.write(line + "\n" + '{"model": "step_000400", "index": 1, "samp')  # the last line half-written
    assert reader.samples("step_000400", 0) == ("x", [])
    assert reader.samples("step_000400", 1) is None


def test_a_garbled_or_newer_file_is_said_in_the_page(qtbot, run_dir):
    folder = write_eval(run_dir)
    text = (folder / "eval.json").read_text()
    (folder / "eval.json").write_text(text[:300])
    page = open_page(qtbot, run_dir)
    assert page.body.currentWidget() is page.unreadable
    assert "not valid JSON (cut off while it was being written?)" in page.message.text()
    (folder / "eval.json").write_text(text.replace('"version": 1', '"version": 2'))
    with pytest.raises(EvaluationError, match="version 2 .* newer than this window reads"):
        load_evaluation(folder)
    data = json.loads(text)
    data["models"][0]["pass_at_k"] = None  # no verifier
    data["models"][1]["maj_at_k"] = None
    del data["per_prompt"]
    (folder / "eval.json").write_text(json.dumps(data))
    page.refresh_evaluations(select=folder)
    assert page.body.currentWidget() is page.view and "no per_prompt" in page.message.text()
    assert set(page.view.pass_plot.curves) == {"step_000200", "step_000400"}
    assert page.view.summary.cell(0, "pass@1") == "—"


WRITES = """
import argparse, json, shutil, sys, time
from pathlib import Path
parser = argparse.ArgumentParser()
for arg in ("run", "--models", "--n", "--name", "--reward-model"):
    parser.add_argument(arg)
parser.add_argument("--progress", action="store_true")
args = parser.parse_args()
run = Path(args.run)
assert Path.cwd() == run.resolve(), Path.cwd()
print("loading base", file=sys.stderr, flush=True)
for done in range(1, 5):
    print(f"progress {done}/4", file=sys.stderr, flush=True)
    deadline = time.monotonic() + 10
    while done == 2 and not (run / "go-on").exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # until the test has seen the bar at 2 of 4 (or gives up)
out = run / "evals" / args.name
shutil.copytree(run / "template", out)
data = json.loads((out / "eval.json").read_text())
data["name"], data["n"] = args.name, int(args.n)
data["models"] = [m for m in data["models"] if m["name"] in args.models.split(",")]
(out / "eval.json").write_text(json.dumps(data))
print(f"wrote {out}")
"""


def write_template(run_dir: Path, **changes) -> Path:
    """An evaluation the stand-ins copy, outside the run's evals/ (so not listed)."""
    return write_eval(run_dir, "template", **changes).rename(run_dir / "template")


def test_run_evaluation_moves_the_bar_and_shows_what_the_engine_wrote(qtbot, run_dir):
    write_template(run_dir)
    page = open_page(qtbot, run_dir, stand_in(WRITES))
    qtbot.mouseClick(page.model_boxes["step_000400"], Qt.LeftButton)  # off: base and step 200
    qtbot.mouseClick(page.model_boxes["step_000200"], Qt.LeftButton)
    page.n_spin.selectAll()
    qtbot.keyClicks(page.n_spin, "16")
    with qtbot.waitSignal(page.sig_run_finished, timeout=10_000) as finished:
        qtbot.mouseClick(page.run_button, Qt.LeftButton)
        assert page.running and page.stop_button.isVisible() and not page.run_button.isEnabled()
        qtbot.waitUntil(lambda: page.progress.value() == 2, timeout=5_000)
        assert page.progress.maximum() == 4
        (run_dir / "go-on").touch()  # the stand-in waits at 2 of 4 until the bar has shown it
    assert finished.args == ["done", ""]
    assert page.picker.currentText().startswith("eval-") and page.body.currentWidget() is page.view
    assert "16 samples" in page.view.header.text()
    assert [page.view.summary.cell(r, "model") for r in range(2)] == ["base (no adapter)", "step 200"]
    assert not page.stop_button.isVisible() and page.run_button.isEnabled() and not page.message.isVisible()


FAILS = """
import sys
print("progress 0/4", file=sys.stderr)
print("error: --models: step_000900 is not a checkpoint of this run (it has step_000200, step_000400)",
      file=sys.stderr)
sys.exit(2)
"""


def test_a_failing_evaluation_shows_the_engines_error_line(qtbot, run_dir):
    page = open_page(qtbot, run_dir, stand_in(FAILS))
    with qtbot.waitSignal(page.sig_run_finished, timeout=10_000) as finished:
        qtbot.mouseClick(page.run_button, Qt.LeftButton)
    assert finished.args[0] == "failed"
    text = page.message.text()
    assert "step_000900 is not a checkpoint of this run (it has step_000200, step_000400)" in text
    assert "error:" not in text and "Traceback" not in text
    assert page.body.currentWidget() is page.intro and page.run_button.isEnabled()


STOPS = """
import argparse, json, sys, time
from pathlib import Path
parser = argparse.ArgumentParser()
for arg in ("run", "--models", "--n", "--name", "--reward-model"):
    parser.add_argument(arg)
parser.add_argument("--progress", action="store_true")
args = parser.parse_args()
out = Path(args.run) / "evals" / args.name
data = json.loads((Path(args.run) / "template" / "eval.json").read_text())
resumed = out.exists()
data["name"] = args.name
if not resumed:
    data["finished"], data["models"][1]["done_prompts"] = False, 3
out.mkdir(parents=True, exist_ok=True)
(out / "eval.json").write_text(json.dumps(data))
print("progress 11/16", file=sys.stderr, flush=True)
try:
    time.sleep(0 if resumed else 30)
except KeyboardInterrupt:
    print("stopped: kept 11 of 16", file=sys.stderr, flush=True)
    sys.exit(130)
print(f"wrote {out}")
"""


def test_stop_keeps_what_was_done_and_resume_carries_it_on(qtbot, run_dir):
    write_template(run_dir, models=("base", "step_000400"))
    page = open_page(qtbot, run_dir, stand_in(STOPS))
    with qtbot.waitSignal(page.sig_run_finished, timeout=10_000) as finished:
        qtbot.mouseClick(page.run_button, Qt.LeftButton)
        qtbot.waitUntil(lambda: page.progress.value() == 11, timeout=5_000)
        qtbot.waitUntil(lambda: page.body.currentWidget() is page.view, timeout=5_000)  # the first model, shown
        qtbot.mouseClick(page.stop_button, Qt.LeftButton)
    assert finished.args == ["stopped", ""]
    assert "Stopped: what was done is kept" in page.message.text()
    assert page.view.summary.cell(1, "prompts") == "3 of 8 (stopped)"
    assert "not finished" in page.view.header.text()
    assert "step 400 (stopped)" in [label.text for _sample, label in page.view.pass_plot.legend.items]
    name = page.picker.currentText()
    assert page.resume_button.isVisible()
    with qtbot.waitSignal(page.sig_run_finished, timeout=10_000) as finished:
        qtbot.mouseClick(page.resume_button, Qt.LeftButton)
    assert finished.args == ["done", ""] and page.picker.currentText() == name and page.picker.count() == 1
    assert page.view.summary.cell(1, "prompts") == "8" and not page.resume_button.isVisible()


def window_and_evaluated_run(qtbot, tmp_path, monkeypatch):
    """The main window (its settings in tmp_path) and a fake run with an evaluation in its
    runs folder, not yet opened."""
    from workbench.main_window import MainWindow
    from workbench.settings import Settings

    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    run_dir = fake_run(tmp_path / "runs")
    write_eval(run_dir)
    window = MainWindow(Settings(runs_folder=str(tmp_path / "runs")), settings_path=tmp_path / "config" / "s.json")
    qtbot.addWidget(window)
    return window, run_dir


def test_the_window_shows_the_tab_for_any_run_on_show(qtbot, tmp_path, monkeypatch):
    window, run_dir = window_and_evaluated_run(qtbot, tmp_path, monkeypatch)
    tab = window.tabs.indexOf(window.evaluate)
    assert window.tabs.tabText(tab) == "Evaluate" and not window.tabs.isTabVisible(tab)
    window.open_run(run_dir)
    assert window.tabs.isTabVisible(tab) and window.evaluate.run_dir == run_dir.resolve()
    assert window.evaluate.view.summary.rowCount() == 3


def test_a_samples_tokens_link_in_the_window_scores_it_in_the_try_tab(qtbot, tmp_path, monkeypatch):
    from stand_in_engine import stand_in_command
    from workbench.runs.try_answers import try_command

    window, run_dir = window_and_evaluated_run(qtbot, tmp_path, monkeypatch)
    commands = []

    def command_for(*args, **kwargs):
        commands.append(try_command(*args, **kwargs))
        return stand_in_command(commands[-1])

    window.try_page.command_for = command_for
    window.resize(1500, 950)
    window.show()
    window.open_run(run_dir)
    window.tabs.setCurrentWidget(window.evaluate)
    section = window.evaluate.view.prompts
    table = section.table
    qtbot.mouseClick(table.viewport(), Qt.LeftButton, pos=table.visualRect(table.model().index(2, 1)).center())
    with qtbot.waitSignal(window.try_page.sig_finished, timeout=10_000) as finished:
        click_link(qtbot, section.samples, "tokens:1/0")  # step 200's first sample of prompt 2
    assert finished.args == ["done", ""] and window.tabs.currentWidget() is window.try_page
    assert commands[-1][4:] == [str(run_dir.resolve()), "--checkpoint", "step_000200", "--json", "--progress",
                                "--held-out", "2", "--completion= wrong 0", "--max-new-tokens", "16"]
    page = window.try_page
    assert page.checkpoint_panel.view.tokens == list(" wrong 0") + ["<eos>"] == page.base_panel.view.tokens
    assert "step 200" in page.checkpoint_panel.header.text() and "sort 5 5 2 =" in page.prompt_line.text()
    assert "sample 0 of step 200 on held-out prompt 2" in page.given_note.text()
