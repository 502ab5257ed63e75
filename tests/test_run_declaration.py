"""The run declares what the workbench draws (run_started `plots` and `records`,
docs/run-directory.md); old runs without it open through workbench/run_declaration.py.
A made-up algorithm gets its declared plots and record layout with no workbench change."""

from __future__ import annotations

import json

from engine import rundir
from inspector_helpers import dpo_record, grpo_record, write_steps
from workbench.dashboard import Dashboard
from workbench.dashboard.plotspec import choose_plots, expected_names
from workbench.inspector.index import TrajectoryIndex
from workbench.inspector.navigation import Navigation
from workbench.inspector.records import Trajectory
from workbench.run_declaration import declaration_of
from workbench.runs.rundata import RunData
from workbench_helpers import write_run

MY_PLOTS = [{"key": "my_wobble", "title": "Wobble", "metrics": ["my/wobble", "my/wobble_max"]},
            {"key": "reward", "title": "Reward", "metrics": ["reward"]}]
MY_RECORDS = {"layout": "pair", "sides": ["left", "right"], "token_values": ["push"], "preferred": ["push"]}


def declare(run_dir, **fields) -> None:
    """Rewrite the run's run_started with extra fields (what a newer engine writes)."""
    path = run_dir / rundir.EVENTS_FILE
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for event in lines:
        if event["type"] == "run_started":
            event.update(fields)
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))


def test_engine_declarations_match_what_old_runs_get():
    from engine.algorithms.dpo import DPOTrainer
    from engine.algorithms.grpo import GRPOTrainer
    from engine.algorithms.ppo import PPOTrainer

    for name, cls in (("grpo", GRPOTrainer), ("ppo", PPOTrainer), ("dpo", DPOTrainer)):
        old = declaration_of({"algorithm": name})
        assert old["plots"] == [dict(p) for p in cls.PLOTS], name
        assert old["records"] == dict(cls.RECORDS), name


def test_old_run_opens_with_its_plots(qtbot, tmp_path):
    run = RunData(write_run(tmp_path, "old", steps=3))
    run.poll()
    assert "plots" not in run.started  # written as before the declaration
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.set_runs([run])
    for key in ("reward", "kl", "entropy", "loss"):
        assert dashboard.plot(key) is not None, key
    assert Trajectory.from_record(dpo_record(1, 0)).layout == "pair"
    assert Trajectory.from_record(grpo_record(1, 0, 0, 1.0, 0.5)).layout == "group"


def test_made_up_algorithm_gets_declared_plots_and_layout(qtbot, tmp_path):
    run_dir = write_run(tmp_path, "mine", steps=3, algorithm="my_algo",
                        extra_metrics={"my/wobble": 0.3, "my/wobble_max": 0.9})
    declare(run_dir, plots=MY_PLOTS, records=MY_RECORDS)
    run = RunData(run_dir)
    run.poll()
    declared = declaration_of(run.started, run.algorithm)
    assert declared == {"plots": MY_PLOTS, "records": MY_RECORDS}
    names = {"metrics": set(run.metrics.names()), "eval": set(run.evals.names())}
    layout = choose_plots(names, declared)
    wobble = [curves for spec, curves in layout.plots if spec.key == "my_wobble"]
    assert [c.metric for c in wobble[0]] == ["my/wobble", "my/wobble_max"]
    assert "my/wobble" not in layout.other
    assert expected_names(declared)["metrics"] == {"my/wobble", "my/wobble_max", "reward"}
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.set_runs([run])
    assert dashboard.plot("my_wobble") is not None

    side = {"tokens": ["a", "b"], "token_ids": [1, 2], "push": [0.5, -0.5], "completion": "ab", "reward": 1.0}
    record = {"algorithm": "my_algo", "step": 1, "index": 0, "prompt": "p", "margin": 0.2,
              "left": side, "right": dict(side, push=[0.1, 0.2])}
    write_steps(run_dir, {1: [record]})
    index = TrajectoryIndex.of_run(run)  # what the Inspector tab reads
    index.poll()
    t = index.records(1)[0]
    assert (t.algorithm, t.layout, [s.name for s in t.sides]) == ("my_algo", "pair", ["left", "right"])
    assert t.quantities() == ["push"] and t.advantage == 0.2
    assert Navigation().fit_quantity(["logprob", "push"], t.preferred) == "push"
