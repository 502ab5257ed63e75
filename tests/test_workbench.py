"""The workbench window (pytest-qt, offscreen): the set-up form, presets, validation,
launching a real engine on the built-in model, Stop, failures, past runs and comparing.

Engine launches use the tests' small preset (a few seconds a run); every wait is a
qtbot wait on a signal or condition with a timeout.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from PySide6.QtCore import Qt

from engine.run import rundir
from engine.foundation.errors import PresetError
from engine.preset.schema import preset_from_dict
from workbench.runs.process import LAUNCH_PRESET, pid_alive, workbench_dir
from workbench.app import classify_target, create_window
from workbench.runs.launcher import AttachedEngine, EngineProcess
from workbench.window.names import CANCEL, DISCARD, LEAVE_RUNNING, LOG, RUNS, SAMPLES, SAVE, SETUP
from workbench.settings import Settings
from workbench.setup import schema
from workbench.setup.editors import BoolEditor, ChoiceEditor, NamesEditor
from workbench.setup.options_editor import OptionsEditor
from workbench.setup.schema import format_value
from workbench_helpers import small_preset, write_run
from window_fixtures import (  # noqa: F401 (fixtures)
    Asked, click, click_run, collect_in_main_thread, make_window, stand_in, window,
)

ENGINE_TIMEOUT_MS = 150_000  # model load on a busy 2-core machine, then a few steps


# ------------------------------------------------------------------ form helpers


def edit(editor, value) -> None:
    """Change a field the way a user does (the editor's edited signal fires)."""
    if isinstance(editor, BoolEditor):
        if editor.box.isChecked() != value:
            editor.box.click()
    elif isinstance(editor, ChoiceEditor):
        index = editor._values.index(value)
        editor.combo.setCurrentIndex(index)
        editor.combo.activated.emit(index)
    else:
        text = ", ".join(value) if isinstance(editor, NamesEditor) and isinstance(value, list) else (
            value if isinstance(value, str) else format_value(value))
        editor.line.setText(text)
        editor.line.textEdited.emit(text)




def type_into(qtbot, editor, text: str) -> None:
    """Real key presses into a text field (replacing what is there)."""
    editor.line.setFocus()
    editor.line.selectAll()
    qtbot.keyClick(editor.line, Qt.Key_Delete)
    qtbot.keyClicks(editor.line, text)


SPECIAL = {
    "name": "round-trip", "description": "every field changed", "model.name_or_path": "org/some-model",
    "model.device": "cpu", "model.lora.target_modules": ["c_attn", "c_proj"], "algorithm.num_generations": 4,
    "training.batch_size": 32, "training.micro_batch_size": 8, "data.prompt_field": "question",
    "data.task": "arithmetic", "algorithm.epsilon_high": 0.3, "model.chat_template": "none",
    "data.split": "validation", "data.answer_field": "solution", "data.answer_pattern": "####\\s*(.+)",
    "data.chosen_field": "better", "data.rejected_field": "worse", "data.system_prompt": "Be brief.",
    # normalize_then_sum (GDPO) computes the advantages itself: only with the grpo estimator
    "algorithm.multi_objective_aggregation": "sum_then_normalize",
    "alarms.single_step_fraction": 0.8,  # must stay above 0.5 (the share before that counts as split)
    "data.environment": "calculator",  # multi-turn episodes (a built-in environment)
    "algorithm.delta": 4.0,  # the two-sided clip's cap must be above 1
    "model.start_from": "run:sft-sort",  # another run's adapter (a text field; resolved when a run starts)
}


def alternative(spec: schema.FieldSpec):
    """A valid value other than the default."""
    if spec.path in SPECIAL:
        return SPECIAL[spec.path]
    if spec.kind == schema.INT:
        return (spec.default or 0) + 1
    if spec.kind == schema.FLOAT:
        return spec.default * 0.5 if spec.default else 0.05
    if spec.kind == schema.BOOL:
        return not spec.default
    if spec.kind == schema.CHOICE:
        return next(c for c in spec.choices if c != spec.default)
    raise AssertionError(f"no alternative for {spec.path}")


# ------------------------------------------------------------------------ set-up


def test_every_form_field_round_trips_through_a_preset_file(window, make_window, tmp_path):
    panel = window.setup
    expected = {}
    for spec in schema.leaf_specs(window.doc.data):
        if spec.path in ("data.path", "data.task_options", "data.dataset", "data.subset", "data.eval_split"):
            continue  # data.path / data.dataset replace the task (tested below); options next
        value = alternative(spec)
        edit(panel.editor(spec.path), value)
        expected[spec.path] = value
    options = panel.editor("data.task_options")
    assert isinstance(options, OptionsEditor) and "max_depth" in options._rows  # arithmetic's options
    options.option_widget("max_depth").setText("3")
    options.option_widget("max_depth").textEdited.emit("3")
    expected["data.task_options"] = {"max_depth": 3}
    # Rewards: weight and an option of the first, a second component from the registry.
    rewards = panel.rewards
    edit(rewards.items[0].weight, 2.0)
    case = rewards.items[0].options.option_widget("case_sensitive")
    case.setCurrentIndex(2)
    case.activated.emit(2)
    rewards.adder.setCurrentText("length_penalty")
    rewards.add_button.click()
    edit(rewards.items[1].weight, 0.25)
    target = rewards.items[1].options.option_widget("target")
    target.setText("20")
    target.textEdited.emit("20")
    expected["rewards"] = [
        {"name": "exact_match", "weight": 2.0, "options": {"case_sensitive": False}},
        {"name": "length_penalty", "weight": 0.25, "options": {"target": 20}},
    ]
    for path, value in expected.items():
        assert window.doc.get(path) == value, path
    assert not panel.validate_now() or all(p == "model.name_or_path" for p, _ in panel.problems)

    path = tmp_path / "round-trip.yaml"
    assert window.presets.save_as(path)
    assert preset_from_dict(yaml.safe_load(path.read_text())).model_dump(mode="json") == window.doc.data

    other = make_window()
    assert other.presets.open_preset(path)
    assert other.doc.data == window.doc.data
    for spec in schema.leaf_specs(other.doc.data):
        assert other.setup.editor(spec.path).value() == window.setup.editor(spec.path).value(), spec.path
    assert not other.doc.dirty


def test_choosing_a_prompt_file_replaces_the_builtin_task(window, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "q{i} =", "answer": "{i}"}}\n' for i in range(30)))
    edit(window.setup.editor("data.path"), str(prompts))
    assert window.doc.get("data.task") is None and window.doc.get("data.path") == str(prompts)
    window.doc.set("data.num_eval", 5)
    window.setup.validate_now()
    assert "q" in window.setup.preview.toPlainText()
    edit(window.setup.editor("data.task"), "sort")
    assert window.doc.get("data.path") is None
    window.setup.validate_now()
    assert window.setup.preview.toPlainText().startswith("sort ")


def test_every_field_has_the_schemas_help_as_tooltip(window):
    for spec in schema.leaf_specs(window.doc.data):
        if spec.description:
            assert spec.description in window.setup.editor(spec.path).toolTip(), spec.path
    chooser = window.setup.algorithm.chooser
    assert [chooser.itemData(i) for i in range(chooser.count())] == list(schema.algorithm_models())


def engine_problems(data: dict) -> dict[str, str]:
    with pytest.raises(PresetError) as engine_says:
        preset_from_dict(data)
    return dict(line.split(": ", 1) for line in engine_says.value.problems)


def test_invalid_values_show_the_engines_message_and_block_run(window, qtbot):
    panel = window.setup
    type_into(qtbot, panel.editor("training.batch_size"), "7")
    row = panel.rows()["training.batch_size"]
    qtbot.waitUntil(lambda: row.error.isVisible(), timeout=5000)  # after the debounce
    assert row.error.text() == engine_problems(window.doc.data)["training.batch_size"]
    assert "divisible by algorithm.num_generations" in row.error.text()
    assert "1 problem" in panel.summary.text()

    click(qtbot, window, window.run_control.act_run)
    assert window.run_control.engine is None
    assert "Cannot run" in window.run_message.text() and "training.batch_size" in window.run_message.text()
    assert window.tabs.currentIndex() == SETUP

    type_into(qtbot, panel.editor("training.batch_size"), "0")
    type_into(qtbot, panel.editor("training.learning_rate"), "abc")
    expected = engine_problems(window.doc.data)
    lr_row = panel.rows()["training.learning_rate"]
    qtbot.waitUntil(lambda: lr_row.error.isVisible(), timeout=5000)
    assert lr_row.error.text() == expected["training.learning_rate"] == "Input should be a valid number (got 'abc')"
    assert row.error.text() == expected["training.batch_size"]
    assert "2 problems" in panel.summary.text()

    type_into(qtbot, panel.editor("training.batch_size"), "64")
    type_into(qtbot, panel.editor("training.learning_rate"), "1e-4")
    assert window.doc.get("training.learning_rate") == 1e-4 and window.doc.get("training.batch_size") == 64
    qtbot.waitUntil(lambda: not row.error.isVisible() and not lr_row.error.isVisible(), timeout=5000)


def test_prelaunch_check_prompt_plus_completion_within_context(window, qtbot):
    window.doc.new(small_preset())
    edit(window.setup.editor("algorithm.max_completion_length"), 5000)
    problems = window.setup.validate_now()
    assert [p for p, _ in problems] == ["algorithm.max_completion_length"]
    error = window.setup.rows()["algorithm.max_completion_length"].error
    assert error.isVisible() and "Lower max_completion_length to at most" in error.text()
    edit(window.setup.editor("algorithm.max_completion_length"), 14)
    assert not window.setup.validate_now()
    assert "fits" in window.setup.rows()["algorithm.max_completion_length"].note.text()


def test_unsaved_changes_are_not_lost_silently(window, tmp_path):
    edit(window.setup.editor("training.seed"), 5)
    assert window.isWindowModified()
    window.ask = Asked(CANCEL)
    window.presets.new_preset()
    assert window.doc.get("training.seed") == 5
    window.ask = Asked(DISCARD)
    window.presets.new_preset()
    assert window.doc.get("training.seed") == 0 and not window.isWindowModified()

    path = tmp_path / "p.yaml"
    assert window.presets.save_as(path)
    edit(window.setup.editor("training.seed"), 9)
    window.ask = Asked(SAVE)
    assert window.presets.open_bundled(Path(__file__).resolve().parents[1] / "presets" / "grpo-sort.yaml")
    assert window.doc.get("name") == "grpo-sort"
    assert yaml.safe_load(path.read_text())["training"]["seed"] == 9


def test_bundled_and_recent_presets(window, tmp_path):
    bundled = Path(__file__).resolve().parents[1] / "presets" / "grpo-sort.yaml"
    assert window.presets.open_bundled(bundled)
    assert window.doc.get("name") == "grpo-sort" and window.doc.path is None and not window.doc.dirty
    window.presets.fill_bundled()
    assert "grpo-sort" in [a.text() for a in window.presets.bundled_menu.actions()]
    saved = tmp_path / "mine.yaml"
    window.presets.save_as(saved)
    window.presets.fill_recent()
    assert str(saved.resolve()) in [a.text() for a in window.presets.recent_menu.actions()]
    assert Settings.load(tmp_path / "config" / "settings.json").recent_presets[0] == str(saved.resolve())


# ------------------------------------------------------------------ real engine


def test_run_fills_plots_samples_and_progress(window, qtbot):
    window.doc.new(small_preset())
    with qtbot.waitSignal(window.engine_finished, timeout=ENGINE_TIMEOUT_MS) as finished:
        run_dir = click_run(qtbot, window)
        assert run_dir is not None and window.run_control.act_stop.isEnabled() and not window.run_control.act_run.isEnabled()
        assert "starting" in window.header.status.text()

        def reward_plotted():
            plot = window.dashboard.plot("reward")
            return plot is not None and plot.curves[0].line.getData()[0] is not None

        qtbot.waitUntil(reward_plotted, timeout=ENGINE_TIMEOUT_MS)  # filled live, from the timer
    assert finished.args == [0]
    window.tick()
    run = window.shown[0]
    assert run.status == "done" and run.metrics.size == 3
    assert (workbench_dir(run_dir) / LAUNCH_PRESET).exists()
    qtbot.waitUntil(lambda: len(window.dashboard.plot("reward").curves[0].line.getData()[0]) == 3, timeout=5000)
    x, _ = window.dashboard.plot("reward").curves[0].line.getData()
    assert list(x) == [1.0, 2.0, 3.0]
    window.tabs.setCurrentIndex(SAMPLES)
    assert window.samples.model.rowCount() == 12  # 3 steps x log_completions 4
    assert window.header.progress.value() == 3 and window.header.progress.maximum() == 3
    assert "done" in window.header.status.text()
    assert window.run_control.act_run.isEnabled() and not window.run_control.act_stop.isEnabled()


def test_stop_leaves_a_checkpoint_and_a_stopped_status(window, qtbot, stand_in):
    # The window's Stop, on the stand-in engine (its stop line, checkpoint and exit as the
    # engine's): a real engine's stop is tests/test_cli.py's and tests/test_reliability.py's.
    window.doc.new(small_preset(max_steps=400))
    run_dir = click_run(qtbot, window)
    qtbot.waitUntil(lambda: window.shown[0].metrics.size >= 2, timeout=ENGINE_TIMEOUT_MS)
    with qtbot.waitSignal(window.engine_finished, timeout=60_000) as finished:
        click(qtbot, window, window.run_control.act_stop)
        assert "Stopping" in window.run_message.text()
    assert finished.args == [0]
    window.tick()
    assert window.shown[0].status == "stopped"
    assert rundir.complete_checkpoints(run_dir)
    assert "stopped" in window.header.status.text()
    window.tabs.setCurrentIndex(RUNS)
    assert window.runs_view.summary(run_dir).status == "stopped"


def test_a_run_left_running_is_running_when_reopened_and_can_be_stopped(make_window, qtbot, stand_in):
    # The window is the subject (leaving a run, attaching to it, SIGTERM to a process it did
    # not start): on the stand-in engine, as test_workbench_runs.py's SIGKILLed window.
    first = make_window()
    first.doc.new(small_preset(max_steps=400))
    run_dir = click_run(qtbot, first)
    qtbot.waitUntil(lambda: first.shown[0].metrics.size >= 1, timeout=ENGINE_TIMEOUT_MS)
    pid = first.run_control.engine.pid
    first.ask = Asked(DISCARD, CANCEL)  # unsaved preset: discard; the run question: cancel
    first.close()
    assert first.isVisible()
    first.ask = Asked(DISCARD, LEAVE_RUNNING)
    first.close()
    assert not first.isVisible() and pid_alive(pid, run_dir.name)

    second = make_window()
    run = second.open_run(run_dir)
    assert isinstance(second.run_control.engine, AttachedEngine) and second.run_control.act_stop.isEnabled()
    assert "running" in second.header.status.text()
    steps = run.metrics.size
    qtbot.waitUntil(lambda: second.shown[0].metrics.size > steps, timeout=60_000)  # plots continue
    with qtbot.waitSignal(second.engine_finished, timeout=60_000):
        click(qtbot, second, second.run_control.act_stop)
    second.tick()
    assert run.status == "stopped" and rundir.complete_checkpoints(run_dir)


def test_a_failing_engine_shows_its_message_and_the_log(window, qtbot, tmp_path):
    # A custom reward that raises, next to the preset and named relative to it: the
    # launched engine finds it, fails in it, and the banner shows the user's file and line.
    folder = tmp_path / "presets"
    folder.mkdir()
    rewards_file = folder / "my_rewards.py"
    rewards_file.write_text("def strict(prompts, completions, **fields):\n"
                            "    raise ValueError('strict refuses ' + repr(completions[0]))\n")
    data = small_preset()
    data["rewards"].append({"name": "my_rewards.py:strict", "weight": 0.5})
    (folder / "failing.yaml").write_text(yaml.safe_dump(data))
    assert window.presets.open_preset(folder / "failing.yaml")
    with qtbot.waitSignal(window.engine_finished, timeout=ENGINE_TIMEOUT_MS) as finished:
        assert click_run(qtbot, window) is not None
    assert finished.args == [1]
    window.tick()
    banner = window.header.failure
    assert banner.isVisible()
    assert "reward component 'strict'" in banner.message.text() and "strict refuses" in banner.message.text()
    assert f"{rewards_file.resolve()}:2" in banner.message.text()
    assert "failed" in window.header.status.text()
    qtbot.mouseClick(banner.log_button, Qt.LeftButton)
    assert window.tabs.currentIndex() == LOG
    assert "run failed" in window.log_view.contents()


def test_an_engine_that_exits_without_a_result_is_reported(window, qtbot, tmp_path):
    run_dir = tmp_path / "runs" / "refused"
    bad = tmp_path / "bad.yaml"
    bad.write_text("training: {batch_size: 7}\n")  # the engine refuses it (status 2), writing nothing
    engine = EngineProcess(run_dir, bad, parent=window)
    engine.start()
    window.run_control.attach(engine, run_dir)
    window.open_run(run_dir)
    with qtbot.waitSignal(window.engine_finished, timeout=60_000) as finished:
        pass
    assert finished.args == [2]
    banner = window.header.failure
    assert banner.isVisible() and "exited with code 2" in banner.message.text()
    assert "failed" in window.header.status.text()
    window.tabs.setCurrentIndex(RUNS)
    assert window.runs_view.summary(run_dir).status == "failed"  # the same status in the Runs tab
    assert "batch_size" in banner.message.text()
    window.show_engine_log()
    assert "is invalid" in window.log_view.contents()


# ------------------------------------------------------------ past runs, compare


def test_a_past_run_opens_with_dashboard_samples_and_log(window, qtbot, tmp_path):
    run_dir = write_run(tmp_path / "runs", "past", steps=20)
    window.tabs.setCurrentIndex(RUNS)
    window.runs_view.refresh()
    window.runs_view.select_paths([run_dir])
    qtbot.mouseClick(window.runs_view.open_button, Qt.LeftButton)
    assert window.tabs.currentIndex() == 1
    assert "done" in window.header.status.text() and window.header.progress.value() == 20
    qtbot.waitUntil(lambda: not window.dashboard.plot("reward").stale, timeout=5000)
    x, y = window.dashboard.plot("reward").curves[0].line.getData()
    assert len(x) == 20
    keys = [p.spec.key for p in window.dashboard.plots]
    assert "reward" in keys and "kl" in keys and "value_loss" not in keys and "other" in keys
    assert window.dashboard.plot("kl").note.isVisible()  # logged, but all null

    # Samples (read when the tab is first shown): newest first, filter by text and step
    # range, sort by reward, detail pane.
    window.tabs.setCurrentIndex(SAMPLES)
    samples = window.samples
    model = samples.model
    assert model.rowCount() == 80 and model.sample(0).step == 20
    samples.search.setText("sort 3 ")
    assert model.rowCount() == 4 and {model.sample(r).step for r in range(4)} == {3}
    samples.search.setText("")
    samples.step_from.setValue(5)
    samples.step_to.setValue(6)
    assert model.rowCount() == 8
    samples.step_from.setValue(-1)
    samples.step_to.setValue(-1)
    samples.table.sortByColumn(model.columns.index("reward"), Qt.DescendingOrder)
    rewards = [model.sample(r).reward for r in range(model.rowCount())]
    assert rewards == sorted(rewards, reverse=True)
    samples.select_row(0)
    assert "end" in samples.detail.toPlainText() and "Completion" in samples.detail.toPlainText()
    window.tabs.setCurrentIndex(LOG)
    assert "synthetic run" in window.log_view.contents()


def test_dashboard_smoothing_axis_and_readout(window, qtbot, tmp_path):
    run_dir = write_run(tmp_path / "runs", "smooth", steps=50, step_seconds=2.0)
    window.open_run(run_dir)
    dashboard = window.dashboard
    dashboard.smoothing.setValue(0)
    plot = dashboard.plot("reward")
    raw = plot.curves[0].line.getData()[1].copy()
    dashboard.smoothing.setValue(90)
    smoothed = plot.curves[0].line.getData()[1]
    assert smoothed[-1] < raw[-1]  # a rising curve, smoothed, lags
    text = plot.readout_at(10.2)
    assert "step 10" in text and f"{window.shown[0].metrics.column('reward')[9]:.5g}" in text
    dashboard.x_axis.setCurrentIndex(1)
    plot = dashboard.plot("reward")
    qtbot.waitUntil(lambda: not plot.stale, timeout=3000)  # new plots draw once laid out
    x = plot.curves[0].line.getData()[0]
    assert x[0] == pytest.approx(2.0) and x[-1] == pytest.approx(100.0)
    box = plot.item.getViewBox()
    assert box.viewRange()[0] == pytest.approx([0.0, 110.0])  # the data, and a tenth more
    box.sigRangeChangedManually.emit([True, True])  # as a mouse zoom does
    box.setXRange(10, 20, padding=0)
    dashboard.refresh()
    assert box.viewRange()[0] == pytest.approx([10, 20])  # the user's zoom is kept
    dashboard.reset_view()
    qtbot.waitUntil(lambda: box.viewRange()[0] == pytest.approx([0.0, 110.0]), timeout=3000)


def test_two_runs_compare_with_their_differences(window, qtbot, tmp_path):
    a = write_run(tmp_path / "runs", "lr-small", steps=20, learning_rate=0.01)
    b = write_run(tmp_path / "runs", "lr-large", steps=30, learning_rate=0.05)
    window.tabs.setCurrentIndex(RUNS)
    window.runs_view.refresh()
    window.runs_view.select_paths([a, b])
    assert window.runs_view.compare_button.isEnabled()
    qtbot.mouseClick(window.runs_view.compare_button, Qt.LeftButton)
    assert {r.name for r in window.dashboard.runs} == {a.name, b.name}
    plot = window.dashboard.plot("reward")
    qtbot.waitUntil(lambda: not plot.stale, timeout=3000)
    lengths = sorted(len(c.line.getData()[0]) for c in plot.curves if c.spec.metric == "reward")
    assert lengths == [20, 30]
    colours = {c.line.opts["pen"].color().name() for c in plot.curves if c.spec.metric == "reward"}
    assert len(colours) == 2
    table = window.dash.differences
    fields = [table.verticalHeaderItem(r).text() for r in range(table.rowCount())]
    assert {"name", "training.learning_rate", "training.max_steps"} <= set(fields)
    assert "seed" not in " ".join(fields)
    assert "Comparing 2 runs" in window.header.name.text()


# ------------------------------------------------------------------------ launch


def test_launch_with_a_preset_or_a_run_folder(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path / "config"))
    run_dir = write_run(tmp_path / "runs", "launched", steps=5)
    assert classify_target(str(run_dir)) == "run"
    preset = Path(__file__).resolve().parents[1] / "presets" / "grpo-sort.yaml"
    assert classify_target(str(preset)) == "preset"
    with pytest.raises(ValueError, match="not a run folder"):
        classify_target(str(tmp_path))
    with pytest.raises(ValueError, match="does not exist"):
        classify_target(str(tmp_path / "missing.yaml"))

    window = create_window([str(preset), "--runs", str(tmp_path / "runs")])
    # A bundled preset opens as an untitled copy: Save never overwrites the shipped file.
    assert window.doc.get("name") == "grpo-sort" and window.doc.path is None
    window2 = create_window([str(run_dir)])
    assert window2.shown[0].run_dir == run_dir.resolve() and window2.shown[0].status == "done"
    assert window2.doc.path is None and window2.doc.get("name") == window2.shown[0].preset.get("name")  # a copy
    for w in (window, window2):
        w.ask = lambda *a: DISCARD
        w.close()
        w.deleteLater()
    collect_in_main_thread()


@pytest.mark.parametrize("name", ["workbench.setup.editors", "workbench.setup.options_editor", "workbench.runs.runs_view", "workbench.window.run_control",
                                  "workbench.runs.log_view", "workbench.xcb_check"])
def test_doctests_of_the_qt_modules(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0
