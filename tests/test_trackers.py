"""training.report_to: wandb / trackio (engine/run/trackers.py, engine/run/reporting.py).

Neither package is a dependency, so CI runs a real training run against a stand-in
module with the calls both share (init, log, Table, finish), recording what it is given;
the README names the check made against the real packages.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types

import pytest

from conftest import small_preset_dict
from engine.run import rundir
from engine.algorithms.grpo.trainer import GRPOTrainer
from engine.preset.schema import preset_from_dict
from engine.run.trackers import STATE_FILE, TrackerMissing, sample_rows


class StandIn(types.ModuleType):
    """A tracker module recording its calls."""

    def __init__(self, name: str, fail_log: bool = False):
        super().__init__(name)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)  # libraries that probe for it (accelerate)
        self.inits, self.logs, self.finished, self.fail_log = [], [], 0, fail_log
        stand_in = self

        class Table:
            def __init__(self, columns, data):
                self.columns, self.data = columns, data

        self.Table = Table

        def init(**kwargs):
            stand_in.inits.append(kwargs)
            return types.SimpleNamespace(id=f"run-{len(stand_in.inits)}")

        def log(values, step=None):
            if stand_in.fail_log:
                raise ConnectionError("the tracker's server went away")
            stand_in.logs.append((step, values))

        def finish():
            stand_in.finished += 1

        self.init, self.log, self.finish = init, log, finish


def trainer(tmp_path, tracker: str, name="run", **training):
    data = small_preset_dict(report_to=tracker, eval_steps=2, save_steps=2, **training)
    return GRPOTrainer(preset_from_dict(data), tmp_path / name)


@pytest.mark.parametrize("tracker", ["wandb", "trackio"])
def test_a_run_reports_its_metrics_evals_and_samples(tmp_path, monkeypatch, tracker):
    module = StandIn(tracker)
    monkeypatch.setitem(sys.modules, tracker, module)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.delenv("TRACKIO_PROJECT", raising=False)
    first = trainer(tmp_path, tracker, max_steps=2)
    assert first.run() == "done"
    (init,) = module.inits
    assert init["project"] == "rl-workbench" and init["name"] == "run"
    assert init["config"] == first.preset.model_dump(mode="json")
    assert ("dir" in init) is (tracker == "wandb") and "resume" not in init
    assert module.finished == 1
    events = rundir.read_events(tmp_path / "run")
    metrics = {e["step"]: e for e in events if e["type"] == "metrics"}
    logged = {}
    for step, values in module.logs:
        logged.setdefault(step, {}).update(values)
    for step, event in metrics.items():
        assert logged[step]["reward"] == event["reward"] and logged[step]["loss"] == event["loss"]
    evals = [e for e in events if e["type"] == "eval"]
    assert [e["step"] for e in evals] == [0, 2]
    assert logged[2]["eval/accuracy"] == evals[-1]["accuracy"]
    table = logged[2]["eval/samples"]
    assert "prompt" in table.columns and len(table.data) == len(evals[-1]["samples"])
    samples = next(e for e in events if e["type"] == "samples")
    assert len(logged[samples["step"]]["samples"].data) == len(samples["samples"])
    state = json.loads((tmp_path / "run" / STATE_FILE).read_text())
    assert state["tracker"] == tracker and state["name"] == "run"

    # resumed: the same tracked run continues
    checkpoint = rundir.complete_checkpoints(tmp_path / "run")[-1]
    second = trainer(tmp_path, tracker, max_steps=3)
    assert second.run(resume_from=checkpoint) == "done"
    resumed = module.inits[1]
    assert resumed["resume"] == "allow" and resumed["name"] == "run"
    if tracker == "wandb":
        assert resumed["id"] == "run-1"
    assert any(step == 3 and "reward" in values for step, values in module.logs)
    assert module.finished == 2


def test_a_missing_package_is_refused_with_the_install_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(TrackerMissing) as err:
        trainer(tmp_path, "wandb").run()
    assert str(err.value) == ("training.report_to: wandb: the wandb package is not installed: pip install wandb "
                              "(or set report_to: none)")


def test_a_tracker_fault_ends_the_reporting_not_the_run(tmp_path, monkeypatch, caplog):
    module = StandIn("trackio", fail_log=True)
    monkeypatch.setitem(sys.modules, "trackio", module)
    assert trainer(tmp_path, "trackio", max_steps=2).run() == "done"
    assert module.finished == 1 and "reporting to trackio failed" in caplog.text
    assert [e["step"] for e in rundir.read_events(tmp_path / "run") if e["type"] == "metrics"] == [1, 2]


def test_sample_rows_keep_text_and_numbers():
    columns, rows = sample_rows([{"prompt": "p", "reward": 0.5, "ok": True, "rewards": {"a": 1.0}}])
    assert columns == ["prompt", "reward"] and rows == [["p", 0.5]]
    assert sample_rows([]) == ([], [])


def test_the_set_up_form_names_a_missing_reporter_before_run(monkeypatch):
    import importlib.util

    from workbench.setup import checks

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    preset = preset_from_dict(small_preset_dict(report_to="trackio"))
    problems = dict(checks.prelaunch_checks(preset).problems)
    assert problems["training.report_to"] == ("the trackio package is not installed: pip install trackio "
                                              "(or set report_to: none)")
    fine = preset_from_dict(small_preset_dict(report_to="tensorboard"))  # installed here (a dependency)
    assert "training.report_to" not in dict(checks.prelaunch_checks(fine).problems)


def test_validate_names_a_missing_reporter(monkeypatch, capsys):
    import importlib.util

    from conftest import ROOT
    from engine.commands.validate import validate

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    assert validate(str(ROOT / "presets" / "grpo-sort.yaml"), ["training.report_to=wandb"]) == 2
    assert "training.report_to: the wandb package is not installed: pip install wandb" in capsys.readouterr().err
