"""The run declares what the workbench draws (run_started `plots` and `records`,
docs/run-directory.md); old runs without it open through workbench/run_declaration.py.
A made-up algorithm gets its declared plots and record layout with no workbench change."""

from __future__ import annotations

import json

from engine.run import rundir
from inspector_helpers import dpo_record, grpo_record, write_steps
from workbench.dashboard.view import Dashboard
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


def _plot(key: str, title: str, metrics: list[str], eval: list[str] | None = None) -> dict:
    return {"key": key, "title": title, "metrics": metrics, **({"eval": eval} if eval is not None else {})}


# The frozen record: what engine/algorithms/{grpo,ppo,dpo}.py declared when the engine
# started declaring, written out as data. Old runs carry no declaration and must open
# with exactly this forever, whatever the engine declares later; edit it only to fix a
# mistake in the record, never to follow a change to the engine.
_ROLLOUT = [
    _plot("reward", "Reward", ["reward", "reward_std"]),
    _plot("eval", "Held-out evaluation", [], ["accuracy", "reward"]),
    _plot("kl", "KL to reference", ["kl"]),
    _plot("entropy", "Entropy", ["entropy"]),
    _plot("loss", "Loss", ["loss"]),
    _plot("length", "Completion length", ["completions/mean_length"]),
    _plot("grad_norm", "Gradient norm", ["grad_norm"]),
    _plot("lr", "Learning rate", ["learning_rate"]),
    _plot("timing", "Step time", ["step_time"]),
]
_TOKENS = ["advantage", "logprob", "ref_logprob", "kl", "entropy", "ratio"]
OLD_RUNS = {
    "grpo": {"plots": _ROLLOUT + [
        _plot("clip", "Clip ratio", ["clip_ratio/region_mean"]),
        _plot("truncated", "Truncated completions", ["completions/clipped_ratio"]),
        _plot("zero_std", "Groups with no signal", ["frac_reward_zero_std"]),
        _plot("throughput", "Throughput", ["throughput/tokens_per_second"]),
    ], "records": {"layout": "group", "token_values": _TOKENS, "preferred": ["advantage"]}},
    "ppo": {"plots": _ROLLOUT + [
        _plot("ppo_objective", "RLHF objective",
              ["objective/rlhf_reward", "objective/scores", "objective/non_score_reward"]),
        _plot("value_loss", "Value loss", ["loss/value_avg", "loss/policy_avg"]),
        _plot("explained_variance", "Explained variance", ["val/explained_variance"]),
        _plot("ppo_clip", "Clipped fraction", ["policy/clipfrac_avg", "val/clipfrac_avg"]),
        _plot("ppo_approxkl", "Policy change per update", ["policy/approxkl_avg", "val/ratio"]),
    ], "records": {"layout": "single",
                   "token_values": _TOKENS + ["value", "return", "kl_reward", "reward_per_token"],
                   "preferred": ["advantage"]}},
    "dpo": {"plots": [
        _plot("eval", "Held-out evaluation", [], ["accuracy", "reward"]),
        _plot("loss", "Loss", ["loss"]),
        _plot("grad_norm", "Gradient norm", ["grad_norm"]),
        _plot("lr", "Learning rate", ["learning_rate"]),
        _plot("timing", "Step time", ["step_time"]),
        _plot("dpo_margins", "Reward margins", ["rewards/margins", "rewards/chosen", "rewards/rejected"]),
        _plot("dpo_logps", "Sequence logprobs", ["logps/chosen", "logps/rejected"]),
        _plot("dpo_eval", "Held-out preference accuracy", [], ["preference_accuracy"]),
        _plot("dpo_accuracy", "Preference accuracy", ["rewards/accuracies"]),
    ], "records": {"layout": "pair", "sides": ["chosen", "rejected"],
                   "token_values": ["implicit_reward", "logprob", "ref_logprob"],
                   "preferred": ["implicit_reward", "advantage"]}},
    # An old run of an algorithm the record does not know.
    "my_algo": {"plots": [_plot("reward", "Reward", ["reward"]),
                          _plot("eval", "Held-out evaluation", [], ["accuracy", "reward"])],
                "records": {"layout": "single", "token_values": [], "preferred": ["advantage"]}},
}


def test_old_runs_get_the_frozen_record():
    # Compared with the literal above, not with the engine's classes: a change to the
    # workbench's old-run table fails here, and the engine may change its declarations
    # (new runs carry their own) without moving what old runs open with.
    for name, frozen in OLD_RUNS.items():
        assert declaration_of({"algorithm": name}) == frozen, name
        assert declaration_of({"algorithm": name.upper()}) == frozen, name  # names compare lowercased
        assert declaration_of(None, algorithm=name) == frozen, name  # no event yet: the preset's algorithm
    # A run that declares wins over the record, an empty declaration included.
    assert declaration_of({"algorithm": "grpo", "plots": [], "records": {"layout": "pair"}}) == {
        "plots": [], "records": {"layout": "pair"}}


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


def test_declared_plot_title_and_help_win_over_the_windows_own(qtbot, tmp_path):
    """KTO declares its `kl` plot as a reference point and online DPO its `zero_std` as
    tied pairs: the declared titles show, not the catalogue's "KL to reference" and
    "Groups with no signal"; an old run (no declaration) keeps the catalogue's."""
    run_dir = write_run(tmp_path, "kto-like", steps=3, algorithm="my_kto",
                        extra_metrics={"kl": 0.1, "frac_reward_zero_std": 0.5})
    declare(run_dir, plots=[_plot("kl", "KL reference point (mismatched pairs)", ["kl"]),
                            dict(_plot("zero_std", "Tied pairs", ["frac_reward_zero_std"]),
                                 help="Pairs whose two samples scored the same")],
            records=MY_RECORDS)
    run = RunData(run_dir)
    run.poll()
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.set_runs([run])
    kl, tied = dashboard.plot("kl"), dashboard.plot("zero_std")
    assert "KL reference point (mismatched pairs)" in kl.title.text() and "KL to reference" not in kl.title.text()
    assert "Tied pairs" in tied.title.text() and "Groups with no signal" not in tied.title.text()
    assert tied.help.startswith("Pairs whose two samples scored the same")

    old = write_run(tmp_path, "old-grpo", steps=3, algorithm="grpo", extra_metrics={"kl": 0.1})
    old_run = RunData(old)
    old_run.poll()
    dashboard.set_runs([old_run])
    assert "KL to reference" in dashboard.plot("kl").title.text()
