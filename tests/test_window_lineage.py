"""RLHF pipelines in the window (issue 38): a run's `lineage` (run_started: the run it
starts from, the reward-model runs that score it) in the Runs list's family column and in
the run header; the Runs list's "Start a policy from this run" and "Use as reward model",
which edit the set-up form; a reward model's Run… in the rewards editor.

The runs are fake folders written here (preset.yaml, events.jsonl, a checkpoint's
state.json): no engine runs."""

from __future__ import annotations

import doctest
import html
import json
import re
from pathlib import Path

import pytest
import yaml

import workbench.runs.lineage
from engine.run import rundir
from workbench.runs.rundata import RunData
from workbench.runs.run_header import RunHeader
from workbench.runs.runs_view import COLUMNS, START_POLICY, USE_AS_REWARD_MODEL, RunsView
from workbench.setup.document import PresetDocument
from workbench.setup.rewards_editor import RewardsEditor
from workbench.window import pipeline
from workbench.window.names import RUNS, SETUP
from workbench_helpers import small_preset, type_text
from window_fixtures import make_window, window  # noqa: F401 (fixtures)

SFT, RM, PPO = "sft-sort-20261128-140000", "rm-sort-20261128-150000", "ppo-sort-20261128-160000"


def fake_run(folder: Path, name: str, algorithm: str, *, lineage: list | None = None, checkpoint: int | None = 10,
             accuracy: float | None = None, base: str = "builtin:tiny", start: float = 1.8e9) -> Path:
    """A finished run of `algorithm`: preset.yaml, run_started (with `lineage` when given),
    a few metrics, an evaluation, and a complete checkpoint at step `checkpoint`."""
    run_dir = folder / name
    run_dir.mkdir(parents=True)
    preset = {"name": re.sub(r"-\d{8}-\d{6}$", "", name), "model": {"name_or_path": base, "chat_template": "none"},
              "algorithm": {"name": algorithm}, "training": {"max_steps": 10}}
    (run_dir / rundir.PRESET_FILE).write_text(yaml.safe_dump(preset, sort_keys=False))
    scorer = algorithm == "reward_model"  # as the engine writes a reward-model run: its head, its adapter's
    started = {"type": "run_started", "time": start, "step": 0, "preset": preset, "algorithm": algorithm,
               "max_steps": 10, "model": {"name_or_path": base, "head": "score" if scorer else "causal_lm"}}
    if lineage is not None:
        started["lineage"] = lineage
    events = [started] + [{"type": "metrics", "time": start + s, "step": s, "loss": 1.0 / s} for s in range(1, 11)]
    if accuracy is not None:
        events.append({"type": "eval", "time": start + 10, "step": 10, "accuracy": accuracy})
    events.append({"type": "run_finished", "time": start + 11, "step": 10, "status": "done"})
    (run_dir / rundir.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in events))
    if checkpoint is not None:
        folder_ = run_dir / rundir.CHECKPOINTS_DIR / f"step_{checkpoint:06d}"
        folder_.mkdir(parents=True)
        (folder_ / rundir.CHECKPOINT_STATE).write_text("{}")
        (folder_ / "adapter_config.json").write_text(json.dumps({"modules_to_save": ["score"] if scorer else None}))
    return run_dir


def stage(role: str, run: Path, algorithm: str, step: int = 10) -> dict:
    return {"role": role, "run": str(run.resolve()), "checkpoint": f"step_{step:06d}", "step": step,
            "algorithm": algorithm, "preset": run.name.rsplit("-", 2)[0]}


@pytest.fixture
def pipeline_runs(tmp_path) -> dict[str, Path]:
    """SFT, then a reward model trained from it, then PPO from the SFT scored by the
    reward model; a plain GRPO run; a reward-model run with no checkpoint yet."""
    folder = tmp_path / "runs"
    sft = fake_run(folder, SFT, "sft", base="builtin:tiny-tools", start=1.8e9)
    rm = fake_run(folder, RM, "reward_model", lineage=[stage("start_from", sft, "sft")], accuracy=0.875,
                  base="builtin:tiny-tools", start=1.8e9 + 100)
    ppo = fake_run(folder, PPO, "ppo", lineage=[stage("reward_model", rm, "reward_model"),
                                                stage("start_from", sft, "sft")],
                   base="builtin:tiny-tools", start=1.8e9 + 200)
    plain = fake_run(folder, "grpo-sort-20261128-170000", "grpo", lineage=[], start=1.8e9 + 300)
    unfinished = fake_run(folder, "rm-early-20261128-180000", "reward_model", checkpoint=None, start=1.8e9 + 400)
    return {"folder": folder, "sft": sft, "rm": rm, "ppo": ppo, "plain": plain, "unfinished": unfinished}


def test_the_lineage_examples_hold():
    result = doctest.testmod(workbench.runs.lineage)
    assert result.failed == 0 and result.attempted >= 5


# ----------------------------------------------------------------- the runs list


def test_the_family_column_names_the_pipeline_and_its_tooltip_spells_it_out(qtbot, pipeline_runs):
    view = RunsView(pipeline_runs["folder"])
    qtbot.addWidget(view)
    model, column = view.model, COLUMNS.index("family")
    family = {run.name: model.data(model.index(row, column)) for row, run in enumerate(model.runs)}
    assert family[PPO] == "from sft-sort · RM rm-sort"  # the launch times in the tooltip
    assert family[RM] == "from sft-sort; used by 1 run"
    assert family[SFT] == "used by 2 runs"
    assert family["grpo-sort-20261128-170000"] == "" and family["rm-early-20261128-180000"] == ""
    row = [run.name for run in model.runs].index(PPO)
    tip = model.data(model.index(row, column), role=0x0003).splitlines()  # Qt.ToolTipRole
    assert tip[0] == "SFT → RM → PPO"
    assert tip[1] == f"SFT: starts from {pipeline_runs['sft'].resolve()} at step_000010 (step 10)"
    assert tip[2] == f"RM: scored by {pipeline_runs['rm'].resolve()} at step_000010 (step 10)"
    assert tip[3] == f"PPO: {PPO}"
    assert view.summary(pipeline_runs["ppo"]).algorithm == "ppo"


def menu_actions(view: RunsView, run: Path) -> dict:
    row = [r.path.resolve() for r in view.model.runs].index(run.resolve())
    return {a.text(): a for a in view.context_menu(row).actions() if a.text()}


def test_the_next_stage_is_offered_only_for_the_runs_it_fits(qtbot, pipeline_runs):
    view = RunsView(pipeline_runs["folder"])
    qtbot.addWidget(view)
    for key in ("sft", "ppo", "plain"):  # a policy: the next stage may start from it
        actions = menu_actions(view, pipeline_runs[key])
        assert actions[START_POLICY].isEnabled() and USE_AS_REWARD_MODEL not in actions
    actions = menu_actions(view, pipeline_runs["rm"])
    assert actions[USE_AS_REWARD_MODEL].isEnabled() and START_POLICY not in actions
    early = menu_actions(view, pipeline_runs["unfinished"])[USE_AS_REWARD_MODEL]
    assert not early.isEnabled() and "no complete checkpoint" in early.toolTip()
    with qtbot.waitSignal(view.reward_model_requested, timeout=1000) as asked:
        menu_actions(view, pipeline_runs["rm"])[USE_AS_REWARD_MODEL].trigger()
    assert asked.args == [pipeline_runs["rm"]]


# ------------------------------------------------------------------- the header


def test_the_header_shows_the_pipeline_and_opens_an_earlier_stage(qtbot, pipeline_runs):
    header = RunHeader()
    qtbot.addWidget(header)
    header.show()
    run = RunData(pipeline_runs["ppo"])
    run.poll()
    header.set_runs([run], lambda _run: ("done", ""))
    line = header.pipeline
    assert line.isVisible()
    text = html.unescape(re.sub(r"<[^>]+>", "", line.text())).replace("\xa0", " ")
    assert text == f"Pipeline: SFT {SFT} (step 10) → RM {RM} (step 10) → PPO this run"
    links = re.findall(r'href="([^"]+)"', line.text())
    assert links == [str(pipeline_runs["sft"].resolve()), str(pipeline_runs["rm"].resolve())]
    with qtbot.waitSignal(header.open_requested, timeout=1000) as opened:
        line.linkActivated.emit(links[1])
    assert opened.args == [pipeline_runs["rm"].resolve()]

    plain = RunData(pipeline_runs["plain"])
    plain.poll()
    header.set_runs([plain], lambda _run: ("done", ""))
    assert not line.isVisible()  # a run built from nothing but its base model: the header as before


def test_a_stage_whose_folder_is_gone_reads_as_missing(qtbot, pipeline_runs, tmp_path):
    gone = tmp_path / "elsewhere" / "sft-old-20260101-000000"
    run_dir = fake_run(tmp_path / "more", "grpo-x-20261128-190000", "grpo", lineage=[stage("start_from", gone, "sft")])
    header = RunHeader()
    qtbot.addWidget(header)
    run = RunData(run_dir)
    run.poll()
    header.set_runs([run], lambda _run: ("done", ""))
    assert "sft-old-20260101-000000 (missing)" in header.pipeline.text() and "href" not in header.pipeline.text()


def test_clicking_a_stage_in_the_window_opens_that_run(window, pipeline_runs):
    window.open_run(pipeline_runs["ppo"])
    window.header.pipeline.linkActivated.emit(str(pipeline_runs["sft"].resolve()))
    assert window.shown[0].run_dir == pipeline_runs["sft"].resolve()
    assert not window.header.pipeline.isVisible()  # the SFT run was built from its base model only


# ------------------------------------------------------------ editing the form


def show_runs_tab(window, folder: Path) -> None:
    window.runs_view.set_folder(folder)
    window.tabs.setCurrentIndex(RUNS)


@pytest.mark.skipif(not pipeline.engine_has_start_from(), reason="this engine's ModelConfig has no start_from yet")
def test_start_a_policy_from_a_run_sets_start_from_and_the_runs_base(window, qtbot, pipeline_runs):
    preset = small_preset()
    preset["data"]["system_prompt"] = "Sort the numbers."  # the SFT run had none
    window.doc.new(preset, clean=True)
    assert window.doc.get("model.name_or_path") == "builtin:tiny"
    show_runs_tab(window, pipeline_runs["folder"])
    menu_actions(window.runs_view, pipeline_runs["sft"])[START_POLICY].trigger()
    assert window.tabs.currentIndex() == SETUP
    assert window.doc.get("model.start_from") == str(pipeline_runs["sft"].resolve())
    assert window.doc.get("model.name_or_path") == "builtin:tiny-tools"  # the adapter fits only its own base
    editor = window.setup.editor("model.start_from")
    assert editor.line.text() == str(pipeline_runs["sft"].resolve())
    assert window.doc.get("model.chat_template") == "none" and window.doc.get("data.system_prompt") is None
    assert window.run_message.text() == (f"The preset starts from {SFT}'s adapter on builtin:tiny-tools (set as the "
                                         "run's: model.name_or_path, model.chat_template, data.system_prompt)")
    # The field takes a typed value as before: the newest run of a preset.
    type_text(qtbot, editor.line, "run:sft-sort")
    assert window.doc.get("model.start_from") == "run:sft-sort"


def test_start_a_policy_is_refused_by_an_engine_without_start_from(window, pipeline_runs, monkeypatch):
    monkeypatch.setattr(pipeline, "engine_has_start_from", lambda: False)
    window.doc.new(small_preset(), clean=True)
    show_runs_tab(window, pipeline_runs["folder"])
    menu_actions(window.runs_view, pipeline_runs["sft"])[START_POLICY].trigger()
    assert window.doc.get("model.start_from") is None and window.doc.get("model.name_or_path") == "builtin:tiny"
    assert "no model.start_from yet" in window.run_message.text()
    assert not window.pipeline.start_policy_from(pipeline_runs["rm"])  # never a reward model, whatever the engine


def test_use_as_reward_model_adds_a_reward_once(window, pipeline_runs):
    window.doc.new(small_preset(), clean=True)
    before = window.doc.get("rewards")
    show_runs_tab(window, pipeline_runs["folder"])
    menu_actions(window.runs_view, pipeline_runs["rm"])[USE_AS_REWARD_MODEL].trigger()
    assert window.tabs.currentIndex() == SETUP
    rewards = window.doc.get("rewards")
    assert rewards[:-1] == before
    assert rewards[-1]["name"] == "reward_model"
    assert rewards[-1]["options"] == {"model": str(pipeline_runs["rm"].resolve())}
    row = window.setup.rewards.items[-1]
    assert row.model.line.text() == str(pipeline_runs["rm"].resolve())
    assert not window.pipeline.use_as_reward_model(pipeline_runs["rm"])  # a second time: refused
    assert "one of the preset's rewards already" in window.run_message.text()
    assert len(window.doc.get("rewards")) == len(rewards)
    assert not window.pipeline.use_as_reward_model(pipeline_runs["unfinished"])
    assert "no complete checkpoint" in window.run_message.text()


# ------------------------------------------------------------- the rewards editor


def rewards_editor(qtbot, doc: PresetDocument) -> RewardsEditor:
    """The rewards editor on its own, following the document as the set-up form has it."""
    editor = RewardsEditor(doc)
    qtbot.addWidget(editor)
    doc.changed.connect(lambda _path: editor.refresh())
    editor.refresh()
    return editor


def test_a_reward_models_run_picker_lists_the_reward_model_runs(qtbot, pipeline_runs):
    doc = PresetDocument(small_preset())
    editor = rewards_editor(qtbot, doc)
    editor.runs_folder = lambda: pipeline_runs["folder"]
    editor.add_reward_model()
    row = editor.items[-1]
    runs = row.run_picker.fill()
    assert [r.path for r in runs] == [pipeline_runs["rm"].resolve()]  # the early one has no checkpoint
    actions = {a.text(): a for a in row.run_picker.menu().actions() if a.text() and not a.isSeparator()}
    assert f"{RM} — step 10, accuracy 0.875" in actions and "run:rm-sort" in actions
    actions[f"{RM} — step 10, accuracy 0.875"].trigger()
    assert doc.get("rewards")[-1]["options"]["model"] == str(pipeline_runs["rm"].resolve())
    actions["run:rm-sort"].trigger()
    assert doc.get("rewards")[-1]["options"]["model"] == "run:rm-sort"
    # A hub id is typed as before.
    editor.show()
    type_text(qtbot, editor.items[-1].model.line, "org/reward-model")
    assert doc.get("rewards")[-1]["options"]["model"] == "org/reward-model"


def test_the_run_picker_says_when_there_is_nothing_to_pick(qtbot, tmp_path):
    doc = PresetDocument(small_preset())
    editor = rewards_editor(qtbot, doc)
    editor.add_reward_model()
    picker = editor.items[-1].run_picker
    assert picker.fill() == [] and picker.menu().actions()[0].text() == "(no runs folder)"
    editor.runs_folder = lambda: tmp_path
    picker.fill()
    assert not picker.menu().actions()[0].isEnabled() and str(tmp_path) in picker.menu().actions()[0].text()
