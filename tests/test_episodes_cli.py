"""A preset whose environment is a Python file next to it (presets/examples/
grpo-calculator-file-env.yaml: checked_calculator.py's CheckedCalculator, a tool and
get_reward) through `rl-engine run` (in this process, engine_runs.cli) on the built-in
tools model, then opened in the window as a user would: the samples table and the inspector
show its episodes."""

from __future__ import annotations

import pytest

from conftest import ROOT
from engine.run import rundir
from engine_runs import cli
from window_fixtures import inspector, open_run, open_samples  # noqa: F401 (fixtures)

PRESET = ROOT / "presets" / "examples" / "grpo-calculator-file-env.yaml"
SETS = ["training.max_steps=2", "training.batch_size=16", "training.record_rollouts=16", "training.eval_steps=0",
        "training.save_steps=0", "data.num_train=32", "data.num_eval=8", "training.log_completions=16"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("file-env")
    run = folder / "run"
    result = cli("run", PRESET, "--run-dir", run, *[a for s in SETS for a in ("--set", s)], cwd=folder)
    assert result.code == 0 and "Traceback" not in result.err, result.err[-3000:]
    assert "2/2" in result.err and "turns=" in result.err  # the progress bar shows turns per episode
    return run


def test_the_run_trains_on_episodes_of_the_file_environment(run_dir):
    events = rundir.read_events(run_dir)
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "done"
    assert events[0]["records"]["episodes"] is True
    metrics = [e for e in events if e["type"] == "metrics"]
    assert len(metrics) == 2
    for m in metrics:
        # the environment's get_reward is a component of its own, beside exact_match
        assert {"rewards/CheckedCalculator/mean", "rewards/exact_match/mean", "tools/call_frequency",
                "episodes/turns_mean"} <= set(m)
    records = rundir.read_trajectories(run_dir, 1)
    # A call the tool answered in the episode: a call made as the token budget ran out is
    # listed with no reply tokens after it (the reply did not fit), so it is not the one read.
    called = [r for r in records if r["episode"]["tool_calls"] and sum(r["tool_mask"])]
    assert called, "the tools model calls the calculator in about a quarter of its episodes"
    record = called[0]
    assert sum(record["tool_mask"]) > 0 and record["episode"]["tool_calls"][0]["name"] == "calculate"
    # the tool's reply, as the model read it, is in the episode's text
    assert f"<tool_response>{record['episode']['tool_calls'][0]['result']}</tool_response>" in record["completion"]


def test_the_window_shows_the_episodes(run_dir, inspector, qtbot):  # noqa: F811 (fixture)
    records = rundir.read_trajectories(run_dir, 1)
    index = next(r["index"] for r in records if r["episode"]["tool_calls"] and sum(r["tool_mask"]))
    open_run(inspector, run_dir)
    inspector.open_step(1, index=index)
    assert inspector.current.episode is not None
    assert "episode" in inspector.summary.text() and "not trained" in inspector.summary.text()

    samples = open_samples(qtbot, run_dir)
    column = samples.model.columns.index("episode")
    summaries = [samples.model.data(samples.model.index(r, column)) for r in range(samples.model.rowCount())]
    assert any("calculate" in s for s in summaries) and all("turn" in s for s in summaries)
