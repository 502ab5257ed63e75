"""What the engine-job pages share (workbench/runs/engine_job.py's EngineJob, job_page.py's
JobPage): an engine that cannot start is said once on each page, in each page's words; a
job that ends after the page moved to another run says nothing there; a page shown again
reads what was written since. Stand-in commands, no engine."""

from __future__ import annotations

import sys
from pathlib import Path

from test_evaluate_page import fake_run
from test_reward_report_page import fake_rm_run, report, write_report
from workbench.runs.evaluate_page import EvaluatePage
from workbench.runs.reward_report_page import RewardReportPage
from workbench.runs.try_page import TryPage

MISSING = "/nonexistent/rl-engine"


def shown(qtbot, page, run_dir: Path):
    qtbot.addWidget(page)
    page.resize(1200, 800)
    page.set_run(run_dir)
    page.show()
    return page


def test_an_engine_that_cannot_start_is_said_once_in_each_pages_words(qtbot, tmp_path):
    rm = fake_rm_run(tmp_path / "rm")
    policy = fake_run(tmp_path / "policy")
    report_page = shown(qtbot, RewardReportPage(lambda run_dir, pairs: [MISSING]), rm)
    eval_page = shown(qtbot, EvaluatePage(lambda *args: [MISSING]), policy)
    try_page = shown(qtbot, TryPage(lambda *args, **kwargs: [MISSING]), policy)
    try_page.prompt_edit.setText("sort 2 1 =")
    cases = ((report_page, report_page.sig_compute_finished, report_page.compute, False,
              "The report card could not be computed: cannot start the engine (/nonexistent/rl-engine): "),
             (eval_page, eval_page.sig_run_finished, eval_page.start, "failed",
              "The evaluation failed: cannot start the engine (/nonexistent/rl-engine): "),
             (try_page, try_page.sig_finished, try_page.start, "failed",
              "Try failed: cannot start the engine (/nonexistent/rl-engine): "))
    for page, signal, start, outcome, said in cases:
        ends = []
        signal.connect(lambda *args: ends.append(args))
        with qtbot.waitSignal(signal, timeout=10_000):
            assert start()
        qtbot.wait(50)  # no second end
        assert len(ends) == 1 and ends[0][0] == outcome and ends[0][1].startswith("cannot start the engine")
        assert said in page.message.text() and page.message.isVisible()
        assert not page.running and page.job is None and not page.progress.isVisible()


def test_a_job_that_ends_after_the_page_shows_another_run_says_nothing_there(qtbot, tmp_path):
    first, second = fake_rm_run(tmp_path / "a"), fake_rm_run(tmp_path / "b")
    sleeps = "import sys, time\nprint('scoring pairs 0/9', file=sys.stderr, flush=True)\ntime.sleep(30)"
    page = shown(qtbot, RewardReportPage(lambda run_dir, pairs: [sys.executable, "-c", sleeps]), first)
    assert page.compute() and page.running and page.cancel_button.isVisible()
    qtbot.waitUntil(lambda: page.progress_line.text() == "scoring pairs 0/9", timeout=5_000)
    page.set_run(second)  # the report card keeps computing the first run's
    assert page.running and not page.compute_button.isEnabled()
    with qtbot.waitSignal(page.sig_compute_finished, timeout=10_000) as finished:
        page.cancel()
    assert finished.args == [False, "cancelled"]
    assert not page.message.isVisible() and page.job is None and page.compute_button.isEnabled()
    assert not page.cancel_button.isVisible() and page.body.currentWidget() is page.intro


def test_a_page_shown_again_reads_what_was_written_since(qtbot, tmp_path):
    rm = fake_rm_run(tmp_path / "rm")
    page = shown(qtbot, RewardReportPage(), rm)
    assert page.body.currentWidget() is page.intro
    page.hide()
    write_report(rm, report(rm))  # from a terminal, while the tab was away
    assert page.body.currentWidget() is page.intro
    page.show()
    assert page.body.currentWidget() is page.content and "78.5 %" in page.header.text()
    assert page.compute_button.text() == "Compute again"
