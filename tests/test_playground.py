"""The reward playground: `rl-engine score-rewards` (engine/commands/score_rewards.py) gives the numbers
`try-reward` and engine.rl.advantages give, and errors with the file and line of a fault in
a user's function; the Reward playground tab (workbench/playground/) scores a run's
samples and typed completions with rewards edited key by key, shows a user function's
error with its file:line, and carries the edited rewards into the set-up form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from PySide6.QtCore import Qt

from engine.run import rundir
from engine.rl.advantages import group_advantages, rloo_advantages
from engine.cli import main
from engine.data import load_splits
from engine.commands.score_rewards import score
from engine.preset.schema import preset_from_dict
from engine.foundation.io import preset_to_dict
from engine.rewards import build_reward_components, combine_rewards
from workbench.playground.results import ADVANTAGE, RUN_ADVANTAGE, RUN_TOTAL, TOTAL, component_column
from engine_runs import cli, engine
from workbench_helpers import small_preset, type_text
from window_fixtures import make_window, window  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
SCORE_TIMEOUT_MS = 60_000  # the engine's start (imports, torch for the advantages) on a busy machine

REWARDS_PY = """\
def brevity(prompts, completions, target=10, **fields):
    return [-abs(len(c) - target) / target for c in completions]


def broken(prompts, completions, **fields):
    scale = 0
    return [len(c) / scale for c in completions]


def chatty(prompts, completions, **fields):
    print("debugging output from a reward")
    return [1.0 for c in completions]
"""


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def score_cli(request: dict, tmp_path: Path, process: bool = False) -> tuple[int, dict, str]:
    """`rl-engine score-rewards REQUEST.json`: (exit code, answer, stderr). In this process
    (engine_runs.cli); with `process`, as the window runs it: `python -m engine
    score-rewards` in a process of its own, with a bare environment."""
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    if process:
        env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
        done = engine("score-rewards", path, env=env, cwd=tmp_path, timeout=120)
    else:
        done = cli("score-rewards", path, cwd=tmp_path)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def sort_examples(preset: dict, count: int):
    train, _ = load_splits(preset_from_dict(preset).data, preset["training"].get("seed", 0), None)
    return train[:count]


# ------------------------------------------------------------------ the engine command


def test_scores_equal_try_reward_table(tmp_path, capsys):
    (tmp_path / "my_rewards.py").write_text(REWARDS_PY)
    rewards = [{"name": "exact_match"}, {"name": "sort_position", "weight": 0.5},
               {"name": "my_rewards.py:brevity", "weight": 0.1, "options": {"target": 4}}]
    preset_file = tmp_path / "preset.yaml"
    preset_file.write_text(yaml.safe_dump({"rewards": rewards}))
    completions = [" 1 2 3", " 3 1 2", " 1 2"]
    code, answer, _ = score_cli({"preset": {"rewards": rewards, "algorithm": {"name": "grpo", "num_generations": 3}},
                                 "base_dir": str(tmp_path),
                                 "items": [{"prompt": "sort 3 1 2 =", "completion": c, "fields": {"answer": " 1 2 3"}}
                                           for c in completions]}, tmp_path)
    assert code == 0, answer
    assert [c["label"] for c in answer["components"]] == ["exact_match", "sort_position", "brevity"]
    for item, completion in zip(answer["items"], completions):
        assert main(["try-reward", str(preset_file), "--prompt", "sort 3 1 2 =", f"--completion={completion}",
                     "--field", "answer= 1 2 3"]) == 0
        table = [line.split() for line in capsys.readouterr().out.splitlines()]
        values = {row[0]: float(row[2]) for row in table[1:-1]}
        assert {k: round(v, 4) for k, v in item["components"].items()} == values
        assert round(item["total"], 4) == float(table[-1][1])
        assert item["total"] == pytest.approx(sum(w * values[k] for k, w in
                                                  (("exact_match", 1), ("sort_position", 0.5), ("brevity", 0.1))),
                                              abs=1e-4)


@pytest.mark.parametrize("estimator,scale", [("grpo", "group"), ("grpo", "batch"), ("grpo", "none"), ("rloo", "group")])
def test_advantages_equal_the_engine_estimator(estimator, scale):
    completions = [" 1 2 3", " 3 1 2", " 1 2", " 1 2 3", " 2 1 3", " 1", " 1 2 3", " 9"]
    request = {"preset": {"rewards": [{"name": "exact_match"}, {"name": "sort_position", "weight": 0.5}],
                          "algorithm": {"name": "grpo", "num_generations": 4, "scale_rewards": scale,
                                        "advantage_estimator": estimator}},
               "items": [{"prompt": "sort 3 1 2 =", "completion": c, "fields": {"answer": " 1 2 3"}}
                         for c in completions]}
    answer = score(request)
    totals = torch.tensor([item["total"] for item in answer["items"]])
    expected = group_advantages(totals, 4, scale) if estimator == "grpo" else rloo_advantages(totals, 4)
    assert answer["advantages"]["computed"]
    assert [item["advantage"] for item in answer["items"]] == pytest.approx(expected.tolist(), abs=1e-6)
    assert [item["group"] for item in answer["items"]] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_advantages_through_the_command_and_a_partial_group(tmp_path):
    items = [{"prompt": "sort 2 1 =", "completion": c, "fields": {"answer": " 1 2"}, "group": g}
             for c, g in ((" 1 2", 0), (" 2 1", 0), (" 1", 0), (" 1 2", 7), (" 2", 7))]
    code, answer, _ = score_cli({"preset": {"rewards": [{"name": "sort_position"}],
                                            "algorithm": {"name": "grpo", "num_generations": 3}},
                                 "items": items}, tmp_path)
    assert code == 0
    totals = torch.tensor([item["total"] for item in answer["items"][:3]])
    assert [i["advantage"] for i in answer["items"][:3]] == pytest.approx(group_advantages(totals, 3).tolist(), abs=1e-6)
    assert [i["advantage"] for i in answer["items"][3:]] == [None, None]  # group 7 holds 2 of 3
    assert any("without exactly 3 completions" in note for note in answer["notes"])


def test_no_advantages_for_ppo_dpo_or_token_level_estimators():
    items = [{"prompt": "p", "completion": c, "fields": {"answer": "a"}} for c in ("a", "b")]
    for algorithm, why in (({"name": "ppo"}, "critic"), ({"name": "dpo"}, "preference pairs"),
                           ({"name": "grpo", "num_generations": 2, "advantage_estimator": "reinforce_pp"},
                            "token counts")):
        answer = score({"preset": {"rewards": [{"name": "exact_match"}], "algorithm": algorithm}, "group_size": 2,
                        "items": items})
        assert not answer["advantages"]["computed"] and why in answer["advantages"]["reason"]
        assert [i["advantage"] for i in answer["items"]] == [None, None]
        assert [i["total"] for i in answer["items"]] == [1.0, 0.0]


def test_fields_are_looked_up_in_the_preset_data():
    preset = small_preset()
    examples = sort_examples(preset, 2)
    items = [{"prompt": e.prompt, "completion": e.fields["answer"]} for e in examples]
    items.append({"prompt": "not in the data", "completion": "x", "fields": {"answer": "x"}})
    answer = score({"preset": preset, "fields_from_data": True, "group_size": 1, "items": items})
    assert [i["components"]["exact_match"] for i in answer["items"]] == [1.0, 1.0, 1.0]
    assert any("1 of 3 prompts are not in the preset's data" in note for note in answer["notes"])


def test_a_fault_in_a_user_function_gives_its_file_and_line(tmp_path):
    rewards_file = tmp_path / "my_rewards.py"
    rewards_file.write_text(REWARDS_PY)
    request = {"preset": {"rewards": [{"name": "my_rewards.py:broken"}], "algorithm": {"name": "grpo"}},
               "base_dir": str(tmp_path), "items": [{"prompt": "p", "completion": "c"}]}
    code, answer, stderr = score_cli(request, tmp_path)
    assert code == 1
    error = answer["error"]
    assert error["file"] == str(rewards_file.resolve())
    assert error["line"] == line_of(rewards_file, "len(c) / scale")
    assert "failed with ZeroDivisionError" in error["message"] and "error:" in stderr
    # A reward's print goes to stderr: the answer on stdout stays one JSON object. This one
    # is score-rewards' real-process check: the window's command line, a process's stdout.
    request["preset"]["rewards"] = [{"name": "my_rewards.py:chatty"}]
    code, answer, stderr = score_cli(request, tmp_path, process=True)
    assert code == 0 and answer["items"][0]["total"] == 1.0 and "debugging output" in stderr


def test_bad_requests_exit_2_with_a_message(tmp_path):
    code, answer, _ = score_cli({"preset": {"rewards": [{"name": "exact_match"}]}, "items": []}, tmp_path)
    assert code == 2 and "needs `items`" in answer["error"]["message"]
    code, answer, _ = score_cli({"preset": {"rewards": [{"name": "exact_match", "weight": "heavy"}]},
                                 "items": [{"prompt": "p", "completion": "c"}]}, tmp_path)
    assert code == 2 and answer["error"]["problems"][0][0] == "rewards.0.weight"
    code, answer, _ = score_cli({"preset": {"rewards": [{"name": "exact_match"}]},
                                 "items": [{"prompt": "p", "completion": "c"}]}, tmp_path)
    assert code == 2 and "needs the field 'answer'" in answer["error"]["message"]
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    assert main(["score-rewards", str(path)]) == 2


# ------------------------------------------------------------- the window's model


def test_model_examples_and_answers():
    import doctest

    import workbench.playground.model as model

    result = doctest.testmod(model)
    assert result.attempted == 2 and result.failed == 0  # parse_fields, typed_completions
    # A process that died without an answer: the end of its stderr, with the exit code.
    error = model.read_answer("", "Traceback...\nMemoryError", -9)
    assert isinstance(error, model.ScoreError) and "exit code -9" in error.message and "MemoryError" in error.message
    # A stray line before the answer does not hide it.
    answer = model.read_answer('hello\n{"items": [{"total": 2.0, "components": {"a": 2.0}, "advantage": null}], '
                               '"components": [{"label": "a", "weight": 1.0}], "advantages": {"computed": false}}\n',
                               "", 0)
    assert answer.totals == [2.0] and answer.advantages == [None] and answer.labels == ["a"]


def test_rewards_for_setup_keep_finding_their_files(tmp_path):
    from workbench.playground.model import rewards_for_setup

    (tmp_path / "presets" / "lib").mkdir(parents=True)
    (tmp_path / "presets" / "lib" / "r.py").write_text(REWARDS_PY)
    run_dir = tmp_path / "runs" / "x"
    run_dir.mkdir(parents=True)
    absolute = f"{tmp_path / 'presets' / 'lib' / 'r.py'}:brevity"
    rewards = [{"name": "exact_match", "weight": 2.0}, {"name": absolute, "options": {"target": 3}}, {"name": "r.py"}]
    moved = rewards_for_setup(rewards, run_dir, tmp_path / "presets")
    assert moved == [{"name": "exact_match", "weight": 2.0, "options": {}},
                     {"name": "lib/r.py:brevity", "options": {"target": 3}}, {"name": "r.py"}]
    assert rewards_for_setup(rewards, run_dir, None)[1]["name"] == absolute  # an unsaved preset: absolute


# ------------------------------------------------------------------ the tab


def write_sort_run(folder: Path, rewards: list | None = None, files: dict | None = None) -> Path:
    """A GRPO run on the sort task (groups of 4): preset.yaml, run_started, and the samples
    of steps 1 and 2 (two groups each, real prompts of the task, some answers right),
    with the reward and advantage the engine gives them under the run's own rewards."""
    run_dir = folder / "sort-run"
    run_dir.mkdir(parents=True)
    for name, text in (files or {}).items():
        (run_dir / name).write_text(text)
    preset = small_preset(log_completions=8)
    if rewards is not None:
        preset["rewards"] = rewards
    preset = preset_to_dict(preset_from_dict(preset))
    (run_dir / rundir.PRESET_FILE).write_text(yaml.safe_dump(preset, sort_keys=False))
    components = build_reward_components(preset_from_dict(preset).rewards, base_dir=run_dir)
    events = rundir.EventWriter(run_dir)
    events.emit("run_started", step=0, preset=preset, algorithm="grpo", max_steps=2)
    for step in (1, 2):
        examples = sort_examples(preset, 4)[2 * step - 2: 2 * step]
        prompts = [e.prompt for e in examples for _ in range(4)]
        answers = [e.fields["answer"] for e in examples for _ in range(4)]
        completions = [a if i % 4 in (0, step) else a[::-1] for i, a in enumerate(answers)]
        try:
            totals, parts = combine_rewards(components, prompts, completions, {"answer": answers})
        except Exception:  # a run whose rewards fail now: what it logged does not matter
            totals, parts = [0.0] * 8, {}
        advantages = group_advantages(torch.tensor(totals), 4).tolist()
        events.emit("samples", step=step, samples=[
            {"index": i, "group": i // 4, "prompt": prompts[i], "completion": completions[i], "reward": totals[i],
             "rewards": {k: v[i] for k, v in parts.items()}, "advantage": advantages[i]} for i in range(8)])
    events.emit("run_finished", step=2, status="done", reason="test")
    events.close()
    return run_dir


def open_playground(qtbot, window, run_dir: Path):
    window.open_run(run_dir)
    window.tabs.setCurrentWidget(window.playground)
    view = window.playground
    qtbot.waitUntil(lambda: view.source.run is not None and bool(view.rewards.items), timeout=5000)
    return view


def press_score(qtbot, view):
    with qtbot.waitSignal(view.sig_scored, timeout=SCORE_TIMEOUT_MS) as scored:
        qtbot.mouseClick(view.score_button, Qt.LeftButton)
        assert not view.score_button.isEnabled() and view.busy.isVisible()
        assert view.score() is False  # a second Score while one runs is refused
    return scored.args[0]


def column(table, name: str) -> list[float]:
    return [table.item(row, table.columns.index(name)).data(Qt.UserRole) for row in range(table.rowCount())]


def test_tab_scores_a_runs_samples_with_a_weight_typed_in(qtbot, window, tmp_path):
    run_dir = write_sort_run(tmp_path)
    view = open_playground(qtbot, window, run_dir)
    assert view.source.step == 2 and view.table.rowCount() == 8
    assert [r.get("name") for r in view.doc.get("rewards")] == ["exact_match", "sort_position"]
    type_text(qtbot, view.rewards.items[1].weight.line, "2")
    assert view.doc.get("rewards")[1]["weight"] == 2.0
    result = press_score(qtbot, view)
    assert view.result is result and not view.error_label.isVisible()
    table = view.table
    exact, position = column(table, component_column("exact_match")), column(table, component_column("sort_position"))
    totals = column(table, TOTAL)
    assert exact.count(1.0) == 4  # the answers were found in the task's data: right ones score 1
    assert totals == pytest.approx([e + 2 * p for e, p in zip(exact, position)], abs=1e-9)
    assert column(table, ADVANTAGE) == pytest.approx(group_advantages(torch.tensor(totals), 4).tolist(), abs=1e-6)
    # Side by side with the run's: its totals were 1 x exact + 0.5 x position.
    assert column(table, RUN_TOTAL) == pytest.approx([e + 0.5 * p for e, p in zip(exact, position)], abs=1e-9)
    assert all(isinstance(a, float) for a in column(table, RUN_ADVANTAGE))
    assert table.horizontalHeaderItem(table.columns.index(component_column("sort_position"))).text().endswith("× 2")

    # Another step: the table shows its samples, and the rewards stay as edited.
    view.source.step_combo.setCurrentIndex(0)
    assert view.source.step == 1 and view.doc.get("rewards")[1]["weight"] == 2.0
    press_score(qtbot, view)
    assert column(view.table, TOTAL) != totals

    # One click carries the edited rewards into the set-up form, and shows it.
    qtbot.mouseClick(view.use_in_setup, Qt.LeftButton)
    assert window.tabs.currentWidget() is window.setup
    assert [(r["name"], r["weight"]) for r in window.doc.get("rewards")] == [("exact_match", 1.0),
                                                                           ("sort_position", 2.0)]
    assert window.setup.rewards.items[1].weight.line.text() == "2.0"
    assert window.doc.dirty


def test_tab_scores_typed_completions(qtbot, window, tmp_path):
    window.tabs.setCurrentWidget(window.playground)
    view = window.playground
    qtbot.mouseClick(view.source.typed, Qt.LeftButton)
    assert view.source.typed.isChecked() and view.source.typed_panel.isVisible()
    qtbot.keyClicks(view.source.prompt, "sort 3 1 2 =")
    qtbot.keyClicks(view.source.completions_edit, " 1 2 3")
    qtbot.keyClick(view.source.completions_edit, Qt.Key_Return)
    qtbot.keyClicks(view.source.completions_edit, " 3 2 1")
    qtbot.keyClick(view.source.completions_edit, Qt.Key_Return)
    qtbot.keyClicks(view.source.completions_edit, " 1 3 2")
    qtbot.keyClicks(view.source.fields_edit, "answer= 1 2 3")
    assert view.table.rowCount() == 3
    # No run anywhere: the rewards are the set-up form's.
    assert view.source.run is None
    assert [r["name"] for r in view.doc.get("rewards")] == [r["name"] for r in window.doc.get("rewards")]
    result = press_score(qtbot, view)
    assert result.totals[0] > result.totals[1]  # the right answer scores more
    expected = score({"preset": view.doc.data, "items": [{"prompt": "sort 3 1 2 =", "completion": c,
                                                          "fields": {"answer": " 1 2 3"}}
                                                         for c in (" 1 2 3", " 3 2 1", " 1 3 2")]})
    assert column(view.table, TOTAL) == [i["total"] for i in expected["items"]]
    assert column(view.table, ADVANTAGE) == pytest.approx(group_advantages(
        torch.tensor([i["total"] for i in expected["items"]]), 3).tolist(), abs=1e-6)
    assert view.table.cell(0, RUN_TOTAL) == "—"  # typed completions have no run values

    # A field line that is not NAME=VALUE: said in the tab, nothing started.
    qtbot.keyClick(view.source.fields_edit, Qt.Key_Return)
    qtbot.keyClicks(view.source.fields_edit, "oops")
    assert view.score() is False
    assert "line 2: 'oops' is not NAME=VALUE" in view.error_label.text()


def test_tab_shows_a_user_function_error_with_file_and_line(qtbot, window, tmp_path):
    run_dir = write_sort_run(tmp_path, rewards=[{"name": "exact_match"}, {"name": "my_rewards.py:brevity"}],
                             files={"my_rewards.py": REWARDS_PY})
    view = open_playground(qtbot, window, run_dir)
    row = view.rewards.items[1]
    assert row.kind == "custom" and row.file.value().endswith("my_rewards.py")
    row.function.combo.lineEdit().setFocus()
    row.function.combo.lineEdit().selectAll()
    qtbot.keyClicks(row.function.combo.lineEdit(), "broken")
    assert view.doc.get("rewards")[1]["name"].endswith("my_rewards.py:broken")
    error = press_score(qtbot, view)
    rewards_file = (run_dir / "my_rewards.py").resolve()
    line = line_of(rewards_file, "len(c) / scale")
    assert error.file == str(rewards_file) and error.line == line
    shown = view.error_label.text()
    assert view.error_label.isVisible() and f"{rewards_file}:{line}" in shown
    assert "return [len(c) / scale for c in completions]" in shown and "ZeroDivisionError" in shown
    # Fixed: the error goes, the numbers come.
    row.function.combo.lineEdit().selectAll()
    qtbot.keyClicks(row.function.combo.lineEdit(), "brevity")
    press_score(qtbot, view)
    assert not view.error_label.isVisible() and view.table.rowCount() == 8
    assert view.table.cell(0, component_column("brevity")) != "—"


def test_tab_lists_the_runs_folder_and_takes_the_set_up_rewards(qtbot, window, tmp_path):
    run_dir = write_sort_run(tmp_path / "runs")  # the window's runs folder; no run is open
    window.tabs.setCurrentWidget(window.playground)
    view = window.playground
    assert view.source.run_combo.currentData() == run_dir.resolve()
    assert view.source.run is not None and view.source.step == 2 and view.table.rowCount() == 8
    assert [r["weight"] for r in view.doc.get("rewards")] == [1.0, 0.5]  # the run's preset.yaml
    assert window.doc.get("rewards") == [{"name": "exact_match", "weight": 1.0, "options": {}}]
    qtbot.mouseClick(view.from_setup, Qt.LeftButton)
    assert [r["name"] for r in view.doc.get("rewards")] == ["exact_match"]
    # A weight the schema refuses is shown on its row, as in the set-up form.
    type_text(qtbot, view.rewards.items[0].weight.line, "heavy")
    assert "weight:" in view.rewards.items[0].problems.error.text()
    qtbot.mouseClick(view.from_run, Qt.LeftButton)
    assert [r["name"] for r in view.doc.get("rewards")] == ["exact_match", "sort_position"]
    assert not view.rewards.items[0].problems.error.isVisible()


def test_a_cell_is_shaded_only_when_it_reads_differently_from_the_runs():
    from workbench.playground.results import _differs

    assert not _differs(-0.93532, -0.93527)  # both read -0.9353: a change from the std's epsilon
    assert _differs(-1.5042, -1.1944) and _differs(0.5, 0.4)
    assert not _differs(None, 0.4) and not _differs(0.4, float("nan"))
