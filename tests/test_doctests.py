"""Run the docstring examples (`>>>`) of every engine module, and of the Qt-free workbench
modules no other test runs, so an example that stops being true fails the suite.

Each run must have attempted something wherever the source holds `>>>`: a module whose
examples doctest cannot find (a typo in the prompt, an example moved out of a docstring)
would otherwise pass with nothing checked. Docstrings in the `input:/output:` or `e.g.`
style are descriptions, not doctests; the maths behind them is tested in test_losses.py,
test_advantages.py and test_estimators.py.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import engine

ENGINE_MODULES = sorted(m.name for m in pkgutil.walk_packages(engine.__path__, "engine.")
                        if m.name != "engine.__main__")  # __main__ runs the CLI on import
# Qt-free workbench modules with examples that no other test file runs.
# (inspector.colors and inspector.records: tests/test_inspector_data.py; setup.schema, setup.document,
# runs.rundata, runs.metric_table, runs.process, runs.status, runs.summaries, smoothing,
# plotspec: tests/test_workbench_models.py; the Qt modules:
# tests/test_workbench.py and tests/test_workbench_rewards.py.)
WORKBENCH_MODULES = ["workbench.signals", "workbench.run_declaration"]


def holds_examples(module) -> bool:
    return ">>>" in Path(module.__file__).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ENGINE_MODULES + WORKBENCH_MODULES)
def test_docstring_examples_hold(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
    if holds_examples(module):
        assert result.attempted > 0, f"{name} holds '>>>' but doctest found no example"


def test_the_engine_has_its_examples():
    # The modules documented by example (about a hundred examples in all) still are: a
    # module that lost every '>>>' would pass test_docstring_examples_hold unchecked.
    attempted = {name: doctest.testmod(importlib.import_module(name)).attempted
                 for name in ("engine.builtin_model.recipe", "engine.rewards.custom", "engine.rewards.builtin", "engine.data.tasks")}
    assert all(n > 0 for n in attempted.values()), attempted


def test_every_registry_reward_has_an_example_that_runs():
    # Each reward in the registry documents itself by an example; doctest must find and
    # pass one in its own docstring (not merely contain the text '>>>').
    from engine import rewards

    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    for name, factory in rewards.REWARDS.items():
        tests = [t for t in finder.find(factory, name, module=rewards, globs=vars(rewards).copy()) if t.examples]
        assert tests, f"reward {name!r} has no docstring example"
        for test in tests:
            result = runner.run(test, out=lambda _text: None)
            assert result.failed == 0 and result.attempted > 0, name
