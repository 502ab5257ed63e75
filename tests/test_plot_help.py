"""Every plot the engine declares carries its help (what it shows, what healthy looks
like), the ⓘ of its plot in the window: engine/algorithms/declaration.py. And every
plot the dashboard shows has one, including a run recorded before plots carried help."""

from __future__ import annotations

import ast
import importlib.util
from types import SimpleNamespace

from engine.algorithms import ALGORITHMS
from engine.algorithms import declaration
from engine.algorithms.declaration import EPISODE_PLOTS, UPDATE_EFFECT_PLOTS, learned_vs_truth
from workbench.dashboard.plotspec import METRICS, choose_plots, plot_help


def trainer_plots(target: str) -> tuple:
    """A registered trainer's PLOTS ("module:Class"), read from its source and evaluated
    with the declaration's names: the trainers import torch, which this check need not
    load (6.7 s on this machine)."""
    module, _, name = target.partition(":")
    source = importlib.util.find_spec(module).origin
    tree = ast.parse(open(source, encoding="utf-8").read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    value = next(s.value for s in cls.body if isinstance(s, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "PLOTS" for t in s.targets))
    return eval(compile(ast.Expression(value), source, "eval"), vars(declaration))


def _declared_plots() -> list[tuple[str, dict]]:
    """(who, plot) for every plot any registered algorithm can declare: its PLOTS and
    the ones a preset adds (the update's effect, episodes, the Goodhart plot)."""
    out = [(e.name, entry) for e in ALGORITHMS.entries() for entry in trainer_plots(e.target)]
    rewards = [SimpleNamespace(name="reward_model", label=None), SimpleNamespace(name="exact_match", label=None)]
    extra = [*UPDATE_EFFECT_PLOTS, *EPISODE_PLOTS, learned_vs_truth(rewards)]
    return out + [("preset", entry) for entry in extra]


def test_every_declared_plot_of_every_algorithm_has_help():
    plots = _declared_plots()
    assert len({name for name, _ in plots}) == len(ALGORITHMS) + 1  # each algorithm declares some
    missing = [f"{name}: {entry['key']} ({entry['title']})" for name, entry in plots if not entry.get("help")]
    assert not missing, f"declared plots without help: {missing}"
    # Help says what healthy looks like, not just the title again.
    short = [entry["key"] for _, entry in plots if "ealthy" not in entry["help"] and "watch" not in entry["help"]]
    assert not short, short


def test_a_plot_recorded_without_help_gets_the_engines_by_key_and_title():
    # A run recorded before plots carried help: the dashboard finds the engine's help for the
    # same key and title; the same key under another title (KTO's kl) is not given the wrong one.
    old = [{"key": "kl", "title": "KL to reference", "metrics": ["kl"]},
           {"key": "kto_counts", "title": "Desirable and undesirable rows", "metrics": ["count/chosen"]},
           {"key": "my_plot", "title": "Mine", "metrics": ["mine"]}]
    layout = choose_plots({METRICS: {"kl", "count/chosen", "mine", "throughput/tokens_per_second"}}, old)
    helps = {spec.key: plot_help(spec, curves) for spec, curves in layout.plots}
    assert helps["kl"].startswith("How far the policy has drifted")
    assert helps["kto_counts"].startswith("How many desirable")
    assert helps["throughput"].startswith("Tokens processed per second")  # logged, not declared
    assert helps["my_plot"] == ""  # nothing known: no made-up help
    kto = choose_plots({METRICS: {"kl"}}, [{"key": "kl", "title": "KL reference point", "metrics": ["kl"]}])
    assert not plot_help(*kto.plots[0]).startswith("How far the policy")
