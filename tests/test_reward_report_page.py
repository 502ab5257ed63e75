"""The reward-model report card page (issue 39): report files written here by hand into a
fake run folder (no engine runs), read by workbench/runs/reward_report.py and shown by
workbench/runs/reward_report_page.py; its Compute buttons start a stand-in command
(`python -c ...`) in place of `rl-engine reward-report`."""

from __future__ import annotations

import doctest
import json
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

import workbench.runs.reward_report
import workbench.runs.reward_report_views
from workbench.runs.reward_report import HELD_OUT_FILE, REPORTS_DIR, load_report, ReportError
from workbench.runs.reward_report_page import RewardReportPage

RUN = "rm-sort-20261128-150000"


def fake_rm_run(folder: Path) -> Path:
    """A reward-model run as the window tells one: run_started's model head is `score`."""
    run_dir = folder / RUN
    run_dir.mkdir(parents=True)
    (run_dir / "preset.yaml").write_text("name: rm-sort\nalgorithm: {name: reward_model}\n")
    started = {"type": "run_started", "time": 1.8e9, "step": 0, "algorithm": "reward_model", "max_steps": 10,
               "model": {"name_or_path": "builtin:tiny", "head": "score"}}
    (run_dir / "events.jsonl").write_text(json.dumps(started) + "\n")
    return run_dir


def report(run_dir: Path, **changes) -> dict:
    """A report card of 6 held-out pairs, two ranked the wrong way round."""
    rewards = [(1.2, 0.3), (-0.5, 0.9), (2.0, -1.0), (0.1, 0.2), (0.8, 0.8), (1.5, 0.0)]
    pairs = [{"prompt": f"sort {i}", "chosen": f"answer {i} chosen", "rejected": f"answer {i} rejected",
              "reward_chosen": c, "reward_rejected": r, "length_chosen": 9 + i, "length_rejected": 7}
             for i, (c, r) in enumerate(rewards)]
    bins = [{"low": i / 10, "high": (i + 1) / 10, "count": 0, "predicted": None, "observed": None} for i in range(10)]
    bins[0] = {"low": 0.0, "high": 0.1, "count": 12, "predicted": 0.06, "observed": 0.0}
    bins[9] = {"low": 0.9, "high": 1.0, "count": 40, "predicted": 0.95, "observed": 0.9}
    data = {
        "kind": "reward_report", "version": 1, "run": str(run_dir),
        "checkpoint": str(run_dir / "checkpoints" / "step_000300"), "step": 300, "created": 1795876484.3,
        "source": {"kind": "held_out", "path": None, "pairs": 200}, "accuracy": 0.785,
        "margin": {"mean": 1.2, "median": 1.0, "edges": [-3.0, -1.5, 0.0, 1.5, 3.0], "counts": [2, 5, 11, 7]},
        "calibration": {"ece": 0.041, "bins": bins},
        "length": {"unit": "tokens", "longer_accuracy": 0.55, "ties": 120, "correlation": 0.12,
                   "matched_accuracy": 0.81, "matched_pairs": 130},
        "preflight": [
            {"check": "head", "title": "The score head is saved and loads", "status": "good", "saw": "score.weight"},
            {"check": "policy", "title": "The policy's tokenizer", "status": "skipped", "saw": "no --policy given"},
            {"check": "scores", "title": "Scores are finite", "status": "bad", "saw": "3 NaN scores"}],
        "lines": [
            {"topic": "accuracy", "title": "Accuracy", "status": "good", "saw": "78.5 % of held-out pairs",
             "try": None},
            {"topic": "length", "title": "Length", "status": "worrying", "saw": "longer answers score higher",
             "try": "add length-matched pairs"},
            {"topic": "preflight", "title": "Preflight", "status": "bad", "saw": "3 scores are NaN",
             "try": "look at the checkpoint"}],
        "pairs": pairs,
    }
    return {**data, **changes}


def write_report(run_dir: Path, data: dict | str, name: str = HELD_OUT_FILE) -> Path:
    path = run_dir / REPORTS_DIR / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def stand_in(script: str):
    """A command factory running `script` (argv: run_dir, then the pairs file or "") for the engine."""
    return lambda run_dir, pairs: [sys.executable, "-c", script, str(run_dir), str(pairs or "")]


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return fake_rm_run(tmp_path / "runs")


def open_page(qtbot, run_dir: Path, command_for=None) -> RewardReportPage:
    page = RewardReportPage(command_for) if command_for else RewardReportPage()
    qtbot.addWidget(page)
    page.resize(1500, 900)
    page.set_run(run_dir)
    page.show()
    return page


def test_the_examples_hold():
    for module in (workbench.runs.reward_report, workbench.runs.reward_report_views):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted >= 2


def test_the_card_shows_its_verdicts_checks_plots_and_length(qtbot, run_dir):
    write_report(run_dir, report(run_dir))
    page = open_page(qtbot, run_dir)
    assert page.body.currentWidget() is page.content and not page.message.isVisible()
    header = page.header.text()
    assert "Accuracy 78.5 %" in header and "step_000300" in header and "step 300" in header
    assert "200 held-out pairs" in header

    verdicts = page.verdicts.labels
    assert [v.objectName() for v in verdicts] == ["verdict-accuracy", "verdict-length", "verdict-preflight"]
    assert [v.property("status") for v in verdicts] == ["good", "worrying", "bad"]
    assert "longer answers score higher" in verdicts[1].text() and "add length-matched pairs" in verdicts[1].text()
    assert "#b00020" in verdicts[2].styleSheet() and "#1e7e34" in verdicts[0].styleSheet()
    assert "Try:" not in verdicts[0].text()  # no advice where there is none
    checks = {c.objectName(): c for c in page.preflight.labels}
    assert checks["preflight-head"].property("status") == "good" and "✓" in checks["preflight-head"].text()
    assert "✗" in checks["preflight-scores"].text() and "3 NaN scores" in checks["preflight-scores"].text()
    assert "no --policy given" in checks["preflight-policy"].text()

    bars = page.margin_plot.bars.opts
    assert list(bars["height"]) == [2, 5, 11, 7] and list(bars["x0"]) == [-3.0, -1.5, 0.0, 1.5]
    assert page.margin_plot.zero.value() == 0.0
    assert "mean 1.2" in page.margin_plot.plot.plotItem.titleLabel.text
    calibration = page.calibration_plot
    assert "ECE 0.041" in calibration.plot.plotItem.titleLabel.text
    assert "90%" not in calibration.plot.plotItem.titleLabel.text  # an older report has no interval
    write_report(run_dir, report(run_dir, calibration={"ece": 0.041, "ece_interval": [0.028, 0.09],
                                                       "bins": report(run_dir)["calibration"]["bins"]}))
    assert page.show_report(run_dir / REPORTS_DIR / HELD_OUT_FILE)
    calibration = page.calibration_plot
    assert "ECE 0.041 (90%: 0.028-0.090)" in calibration.plot.plotItem.titleLabel.text
    spots = calibration.points.points()
    assert [(s.pos().x(), s.pos().y()) for s in spots] == [(0.06, 0.0), (0.95, 0.9)]
    assert spots[0].data() == "σ(r_a − r_b) in 0–0.1: 12 pairs\npredicted 0.06, observed 0"
    assert "0.9–1: 40 pairs" in calibration.plot.toolTip()

    length = page.length.text()
    for shown in ("55.0 %", "120", "0.12", "81.0 % on 130 pairs", "as a coin would"):
        assert shown in length


def test_the_pairs_are_listed_worst_ranked_first_and_sort_on_a_click(qtbot, run_dir):
    write_report(run_dir, report(run_dir))
    page = open_page(qtbot, run_dir)
    table = page.pairs
    margins = table.shown_margins()
    assert margins == sorted(margins) and margins[0] == pytest.approx(-1.4)
    first = table.model().index(0, 0)
    assert table.model().data(first) == "-1.400"
    assert table.model().data(table.model().index(0, 5)) == "sort 1"  # the pair the model gets most wrong
    assert table.model().data(table.model().index(0, 3)) == "10"  # its lengths beside it
    header = table.horizontalHeader()
    qtbot.mouseClick(header.viewport(), Qt.LeftButton, pos=_section_centre(header, 0))
    assert table.shown_margins() == sorted(margins, reverse=True)


def _section_centre(header, section: int):
    from PySide6.QtCore import QPoint

    return QPoint(header.sectionViewportPosition(section) + header.sectionSize(section) // 2, header.height() // 2)


def test_the_picker_switches_between_the_held_out_and_a_files_card(qtbot, run_dir):
    write_report(run_dir, report(run_dir))
    hard = report(run_dir, accuracy=0.42, source={"kind": "file", "path": "/data/hard.jsonl", "pairs": 57})
    write_report(run_dir, hard, "reward-report-hard.json")
    page = open_page(qtbot, run_dir)
    picker = page.picker
    assert [picker.itemText(i) for i in range(picker.count())] == ["held-out pairs", "file: hard"]
    assert "78.5 %" in page.header.text()
    with qtbot.waitSignal(page.sig_report_shown) as shown:
        qtbot.keyClick(picker, Qt.Key_Down)
    assert shown.args[0].name == "reward-report-hard.json"
    assert "Accuracy 42.0 %" in page.header.text() and "57 pairs of hard.jsonl" in page.header.text()
    qtbot.keyClick(picker, Qt.Key_Up)
    assert "78.5 %" in page.header.text()


def test_a_missing_part_a_garbled_file_and_a_newer_format_are_said_in_the_page(qtbot, run_dir):
    partial = report(run_dir)
    del partial["calibration"], partial["pairs"]
    write_report(run_dir, partial)
    page = open_page(qtbot, run_dir)
    assert page.body.currentWidget() is page.content and "78.5 %" in page.header.text()
    assert "no calibration" in page.message.text() and "no pairs" in page.message.text()
    assert "not in this report" in page.calibration_plot.plot.plotItem.titleLabel.text
    assert page.pairs.model().rowCount() == 0

    path = write_report(run_dir, json.dumps(report(run_dir))[:300])  # cut off mid-write
    page.refresh_reports(select=path)
    assert page.body.currentWidget() is page.unreadable
    assert "not valid JSON (cut off while it was being written?)" in page.message.text()
    write_report(run_dir, report(run_dir, version=2))
    with pytest.raises(ReportError, match="version 2 .* newer than this window reads"):
        load_report(path)


def test_a_card_that_scored_nothing_points_at_its_checks(qtbot, run_dir):
    head = {"check": "head", "title": "The score head is saved and loads", "status": "bad", "saw": "no score head"}
    nothing = {key: value for key, value in report(run_dir).items() if key not in ("margin", "calibration", "length")}
    write_report(run_dir, {**nothing, "accuracy": None, "source": {"kind": "held_out", "path": None, "pairs": 0},
                           "preflight": [head], "pairs": []})
    page = open_page(qtbot, run_dir)
    assert "No pairs scored" in page.header.text() and not page.message.isVisible()
    assert page.preflight.labels[0].property("status") == "bad"


WRITES_A_REPORT = """
import json, sys, time
from pathlib import Path
run, pairs = Path(sys.argv[1]), sys.argv[2]
print("loading the reward model", file=sys.stderr, flush=True)
print("scoring pairs 64/200", file=sys.stderr, flush=True)
time.sleep(0.4)
card = json.loads((run / "template.json").read_text())
name = "reward-report-" + Path(pairs).stem + ".json" if pairs else "reward-report.json"
out = run / "reports" / name
out.parent.mkdir(exist_ok=True)
out.write_text(json.dumps(card))
print("Reward model report card: ...")
print("wrote " + str(out))
"""

FAILS = """
import sys
print("scoring pairs 0/57", file=sys.stderr)
print("error: --pairs: no column chosen in pairs.csv; name the columns with data.chosen_field", file=sys.stderr)
sys.exit(2)
"""


def test_compute_runs_the_engine_in_the_background_and_shows_what_it_wrote(qtbot, run_dir):
    (run_dir / "template.json").write_text(json.dumps(report(run_dir)))
    page = open_page(qtbot, run_dir, stand_in(WRITES_A_REPORT))
    assert page.body.currentWidget() is page.intro and "report card" in page.findChild(type(page.header),
                                                                                        "report-intro").text()
    assert page.intro_button.isEnabled() and not page.picker.isVisible()
    with qtbot.waitSignal(page.sig_compute_finished, timeout=10_000) as finished:
        qtbot.mouseClick(page.intro_button, Qt.LeftButton)
        assert page.running and page.progress.isVisible() and not page.compute_button.isEnabled()
        qtbot.waitUntil(lambda: page.progress_line.text() == "scoring pairs 64/200", timeout=5_000)
        assert page.progress.maximum() == 200 and page.progress.value() == 64
    assert finished.args == [True, ""]
    assert page.body.currentWidget() is page.content and "78.5 %" in page.header.text()
    assert not page.progress.isVisible() and page.compute_button.isEnabled()
    assert page.compute_button.text() == "Compute again"

    page.ask_pairs_file = lambda: Path("/data/hard.jsonl")  # the file dialog, as the user answers it
    with qtbot.waitSignal(page.sig_compute_finished, timeout=10_000):
        qtbot.mouseClick(page.file_button, Qt.LeftButton)
    assert [page.picker.itemText(i) for i in range(page.picker.count())] == ["held-out pairs", "file: hard"]
    assert page.picker.currentText() == "file: hard"  # the card just written is the one on show


def test_a_failing_computation_shows_the_engines_error_line(qtbot, run_dir):
    page = open_page(qtbot, run_dir, stand_in(FAILS))
    page.ask_pairs_file = lambda: run_dir / "pairs.csv"
    with qtbot.waitSignal(page.sig_compute_finished, timeout=10_000) as finished:
        qtbot.mouseClick(page.file_button, Qt.LeftButton)
    assert finished.args[0] is False
    assert page.message.isVisible()
    text = page.message.text()
    assert "no column chosen in pairs.csv; name the columns with data.chosen_field" in text
    assert "Traceback" not in text and "error:" not in text
    assert page.body.currentWidget() is page.intro and page.file_button.isEnabled()


def test_the_window_adds_the_page_for_a_reward_model_run_only(qtbot, tmp_path, monkeypatch):
    from workbench.main_window import MainWindow
    from workbench.settings import Settings

    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    rm = fake_rm_run(tmp_path / "runs")
    write_report(rm, report(rm))
    policy = tmp_path / "runs" / "grpo-sort-20261128-170000"
    policy.mkdir()
    (policy / "events.jsonl").write_text(json.dumps({"type": "run_started", "time": 1.8e9, "step": 0,
                                                     "model": {"head": "causal_lm"}}) + "\n")
    window = MainWindow(Settings(runs_folder=str(tmp_path / "runs")), settings_path=tmp_path / "config" / "s.json")
    qtbot.addWidget(window)
    tab = window.tabs.indexOf(window.report_card)
    window.open_run(rm)
    assert window.tabs.isTabVisible(tab) and window.report_card.run_dir == rm.resolve()
    assert "78.5 %" in window.report_card.header.text()
    window.open_run(policy)
    assert not window.tabs.isTabVisible(tab)


def test_cancel_ends_the_engine_and_says_so(qtbot, run_dir):
    page = open_page(qtbot, run_dir, stand_in("import sys, time\nprint('scoring pairs 0/9', file=sys.stderr, "
                                              "flush=True)\ntime.sleep(30)"))
    with qtbot.waitSignal(page.sig_compute_finished, timeout=10_000) as finished:
        qtbot.mouseClick(page.compute_button, Qt.LeftButton)
        qtbot.waitUntil(lambda: page.progress_line.text() == "scoring pairs 0/9", timeout=5_000)
        qtbot.mouseClick(page.cancel_button, Qt.LeftButton)
    assert finished.args == [False, "cancelled"]
    assert "Cancelled; no report card was written." in page.message.text() and page.compute_button.isEnabled()


def test_the_card_is_checked_against_the_rl_preset_that_uses_the_reward_model(tmp_path, run_dir):
    """The window's command passes --policy: the first preset whose reward_model reward
    names this run (run:NAME of its preset, or its folder), so the preflight's tokenizer and
    template check runs in the window too; no such preset, no --policy."""
    from workbench.runs.reward_report import policy_preset, reward_report_command

    other = tmp_path / "a-other.yaml"
    other.write_text("name: other\nrewards: [{name: reward_model, options: {model: run:rm-other}}]\n")
    by_name = tmp_path / "b-ppo.yaml"
    by_name.write_text("name: ppo\nrewards: [{name: exact_match, weight: 0.0}, "
                       "{name: reward_model, options: {model: run:rm-sort}}]\n")
    by_folder = tmp_path / "c-grpo.yaml"
    by_folder.write_text(f"name: grpo\nrewards: [{{name: reward_model, options: {{model: '{run_dir}'}}}}]\n")
    broken = tmp_path / "0-broken.yaml"
    broken.write_text("rewards: [unclosed\n")
    assert policy_preset(run_dir, [broken, other, by_name, by_folder]) == by_name
    assert policy_preset(run_dir, [other, by_folder]) == by_folder
    assert policy_preset(run_dir, [other]) is None
    assert reward_report_command(run_dir, python="py", policy=by_name)[-2:] == ["--policy", str(by_name)]
    bundled = reward_report_command(run_dir, python="py")  # rm-sort: the bundled RL presets against it
    assert bundled[-2] == "--policy" and Path(bundled[-1]).name in ("grpo-sort-rm.yaml", "ppo-sort-rm.yaml")
