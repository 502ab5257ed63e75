"""Every bundled preset runs through the CLI exactly as the README shows it
(`rl-engine run PRESET --run-dir DIR`, progress bar on), for 2 steps.

This is what a new user types first; it caught DPO dying after step 1 because the
progress bar asked for a `reward` metric DPO does not log. A preset added to presets/
is covered by itself (the parameters are the glob). grpo-sort runs through the console
script itself, a real process (the README's command); the others call the same CLI in this
process (engine_runs.cli), progress bar and all.
"""

from __future__ import annotations

import subprocess

import pytest

from conftest import ROOT
from engine.run import rundir
from engine_runs import cli, rl_engine

# The RLHF pipeline's presets stand on each other's runs (model.start_from: run:sft-sort, a
# reward model run:rm-sort): they run in order, in one runs folder, in their own test.
PIPELINE = ["sft-sort", "rm-sort", "ppo-sort-rm", "grpo-sort-rm"]
PRESETS = sorted(p for p in (ROOT / "presets").glob("*.yaml") if p.stem not in PIPELINE)
# Only sizes change: 2 steps of a small batch, a few prompts, evaluation at start and end.
QUICK = ["training.max_steps=2", "training.batch_size=16", "training.eval_steps=0",
         "data.num_train=32", "data.num_eval=4"]


def test_presets_are_found():
    assert len(PRESETS) >= 4, PRESETS  # the glob must not silently cover nothing


def finished_done(run) -> bool:
    finished = [e for e in rundir.read_events(run) if e["type"] in ("run_finished", "run_failed")]
    return bool(finished) and finished[-1]["type"] == "run_finished" and finished[-1]["status"] == "done"


def test_the_pipeline_presets_chain_in_one_runs_folder(tmp_path):
    """sft-sort, then rm-sort from it, then ppo-sort-rm and grpo-sort-rm from the SFT run
    against the reward model: each finds the newest run of the stages before it in the
    runs folder it writes to, as the README's commands run them."""
    sets = [arg for item in QUICK for arg in ("--set", item)]
    for stem in PIPELINE:
        run = tmp_path / "runs" / stem
        result = cli("run", ROOT / "presets" / f"{stem}.yaml", "--run-dir", run, *sets, cwd=tmp_path)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        assert "2/2" in result.stderr and "loss=" in result.stderr
        assert finished_done(run), stem
    started = next(e for e in rundir.read_events(tmp_path / "runs" / "ppo-sort-rm") if e["type"] == "run_started")
    assert [(e["role"], e["preset"]) for e in started["lineage"]] == [("start_from", "sft-sort"),
                                                                      ("reward_model", "rm-sort")]


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_bundled_preset_runs_with_the_progress_bar(preset, tmp_path, engine_env):
    run = tmp_path / "run"
    sets = [arg for item in QUICK for arg in ("--set", item)]
    if preset.stem == "grpo-sort":  # the console script as the README runs it, a process of its own
        result = subprocess.run([*rl_engine(), "run", str(preset), "--run-dir", str(run), *sets],
                                capture_output=True, text=True, env=engine_env, cwd=tmp_path, timeout=300)
    else:
        result = cli("run", preset, "--run-dir", run, *sets, cwd=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    assert "2/2" in result.stderr  # the bar was on and reached the end
    assert "loss=" in result.stderr  # with the algorithm's own metrics in its postfix
    finished = [e for e in rundir.read_events(run) if e["type"] in ("run_finished", "run_failed")]
    assert finished and finished[-1]["type"] == "run_finished" and finished[-1]["status"] == "done", finished
