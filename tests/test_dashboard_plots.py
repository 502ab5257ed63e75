"""The dashboard draws each metric once: a plot the catalogue adds for a logged metric
gives way to the plot a run declares for it (SFT's `sft_entropy` "Entropy" and the
catalogue's own Entropy plot), and runs compared whose algorithms declare one metric
under two keys get one plot for it (workbench/dashboard/plotspec.py)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from engine.algorithms import ALGORITHMS
from engine.algorithms.declaration import EPISODE_PLOTS, ROLLOUT_PLOTS, UPDATE_EFFECT_PLOTS, learned_vs_truth
from test_plot_help import trainer_plots
from test_run_declaration import declare
from workbench.dashboard.plotspec import CATALOGUE, EVAL, METRICS, choose_plots
from workbench.dashboard.view import Dashboard
from workbench.runs.rundata import RunData
from workbench_helpers import write_run

REWARDS = [SimpleNamespace(name="reward_model", label=None), SimpleNamespace(name="exact_match", label=None)]


def _declaration(target: str) -> list[dict]:
    """What a trainer can declare: its PLOTS and every plot a preset adds."""
    return [*trainer_plots(target), *UPDATE_EFFECT_PLOTS, *EPISODE_PLOTS, learned_vs_truth(REWARDS)]


def _everything_logged(plots: list[dict]) -> dict[str, set[str]]:
    """Every metric the plots list and every one the catalogue knows, as a run that logs
    them all (SFT logs `entropy` and the completion lengths, which its plots draw or not)."""
    names: dict[str, set[str]] = {METRICS: set(), EVAL: set()}
    for entry in plots:
        names[METRICS].update(entry.get("metrics") or [])
        names[EVAL].update(entry.get("eval") or [])
    for spec in CATALOGUE:
        for curve in spec.curves:
            names[curve.source].add(curve.metric)
    names[METRICS].update({"rewards/exact_match/mean", "rewards/reward_model/mean"})
    return names


def _drawn_twice(layout) -> list:
    counts = Counter((c.source, c.metric) for _, curves in layout.plots for c in curves)
    titles = Counter(spec.title for spec, _ in layout.plots)
    return [m for m, n in counts.items() if n > 1] + [t for t, n in titles.items() if n > 1]


def _target(algorithm: str) -> str:
    return next(e.target for e in ALGORITHMS.entries() if e.name == algorithm)


@pytest.mark.parametrize("algorithm", [e.name for e in ALGORITHMS.entries()])
def test_every_algorithm_draws_each_metric_once_under_one_title(algorithm):
    plots = _declaration(_target(algorithm))
    layout = choose_plots(_everything_logged(plots), plots)
    assert not _drawn_twice(layout), _drawn_twice(layout)
    drawn = {(c.source, c.metric) for _, curves in layout.plots for c in curves}
    listed = {(METRICS, m) for p in plots for m in p.get("metrics") or []}
    assert listed - {(METRICS, o) for o in layout.other} <= drawn | {(METRICS, "reward_std")}


def test_sft_entropy_is_its_declared_plot_and_the_goodhart_plot_keeps_the_rewards():
    layout = choose_plots({METRICS: {"entropy", "loss"}}, list(trainer_plots(_target("sft"))))
    assert [(s.key, s.title) for s, _ in layout.plots if "entropy" in {c.metric for c in _}] == [
        ("sft_entropy", "Entropy")]
    # The learned reward and its check are drawn in the plot declared for them; the
    # Reward plot keeps the total (mean ± std).
    plots = [*ROLLOUT_PLOTS, learned_vs_truth(REWARDS)]
    names = {METRICS: {"reward", "reward_std", "rewards/reward_model/mean", "rewards/exact_match/mean"}}
    layout = dict((s.key, [c.metric for c in curves]) for s, curves in choose_plots(names, plots).plots)
    assert layout == {"reward": ["reward"],
                      "learned_vs_truth": ["rewards/reward_model/mean", "rewards/exact_match/mean"]}
    # A run that declares nothing of its rewards (an old run) keeps them in the Reward plot.
    old = choose_plots(names, "grpo").plots
    assert [c.metric for c in old[0][1]] == ["reward", "rewards/exact_match/mean", "rewards/reward_model/mean"]


def _titles(dashboard: Dashboard) -> list[str]:
    return [plot.title.text().removeprefix("<b>").removesuffix("</b>") for plot in dashboard.plots]


def test_an_sft_run_and_an_sft_run_beside_a_grpo_run_show_one_entropy_plot(qtbot, tmp_path):
    sft_dir = write_run(tmp_path, "sft", steps=3, algorithm="sft",
                        extra_metrics={"mean_token_accuracy": 0.5, "num_tokens": 100})
    declare(sft_dir, plots=list(trainer_plots(_target("sft"))))
    sft = RunData(sft_dir)
    sft.poll()
    grpo_dir = write_run(tmp_path, "grpo", steps=3)
    declare(grpo_dir, plots=[dict(p) for p in ROLLOUT_PLOTS])
    grpo = RunData(grpo_dir)
    grpo.poll()
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.set_runs([sft])
    titles = _titles(dashboard)
    assert titles.count("Entropy") == 1 and dashboard.plot("sft_entropy") is not None
    assert len(titles) == len(set(titles)), titles
    dashboard.set_runs([grpo, sft])  # compared: GRPO's `entropy` and SFT's `sft_entropy`
    titles = _titles(dashboard)
    assert titles.count("Entropy") == 1 and len(titles) == len(set(titles)), titles


def test_an_old_reward_model_run_shows_its_held_out_accuracy_once(qtbot, tmp_path):
    """A reward-model run recorded when it declared `rm_eval` for the held-out accuracy:
    the catalogue's Held-out evaluation (the same `accuracy`) is not drawn beside it."""
    run_dir = write_run(tmp_path, "rm", steps=3, algorithm="reward_model")
    declare(run_dir, plots=[{"key": "rm_eval", "title": "Held-out accuracy", "metrics": [], "eval": ["accuracy"]},
                            {"key": "loss", "title": "Loss (Bradley-Terry)", "metrics": ["loss"]}])
    run = RunData(run_dir)
    run.poll()
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.set_runs([run])
    assert dashboard.plot("rm_eval") is not None
    eval_plot = dashboard.plot("eval")  # what is left of it: the held-out reward
    assert eval_plot is None or [c.spec.metric for c in eval_plot.curves] == ["reward"]
