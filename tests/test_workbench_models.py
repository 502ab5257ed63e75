"""The workbench's Qt-free models: schema reading, the preset document, pre-launch
checks, run data, the runs list, smoothing and plot choice."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from engine.run import rundir
from engine.preset.schema import Preset, preset_from_dict
from engine.foundation.errors import PresetError
from workbench.runs.process import write_process_record
from workbench.runs.labels import MISSING, differing_fields
from workbench.runs.summaries import RunIndex, summarize_run
from workbench.dashboard import plotspec, smoothing
from workbench.runs import labels, metric_table, process, rundata, status, summaries
from workbench.window import names
from workbench.runs.metric_table import MetricTable
from workbench.runs.rundata import RunData
from workbench.setup import checks, document, schema
from workbench.setup.document import PresetDocument, split_problem
from workbench_helpers import write_run


# Only modules that hold examples (checks and settings have none: a run of them attempts
# nothing and cannot fail).
@pytest.mark.parametrize("module", [schema, document, rundata, metric_table, process, status, summaries, smoothing,
                                    plotspec, labels, names])
def test_doctests(module):
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


# ------------------------------------------------------------------------ schema


def test_every_preset_field_has_an_editable_kind_and_help():
    specs = schema.leaf_specs(schema.default_preset_dict())
    paths = {s.path for s in specs}
    for expected in ("model.name_or_path", "model.lora.r", "model.lora.target_modules", "algorithm.beta",
                     "data.task_options", "training.learning_rate", "name", "description"):
        assert expected in paths
    for spec in specs:
        assert spec.kind in (schema.INT, schema.FLOAT, schema.BOOL, schema.CHOICE, schema.TEXT, schema.NAMES,
                             schema.MAPPING)
        if spec.path not in ("name", "description"):
            assert spec.description, f"{spec.path} has no help text in the schema"


def test_algorithms_come_from_the_discriminated_union():
    models = schema.algorithm_models()
    assert "grpo" in models
    fields = {s.name for s in schema.algorithm_fields("grpo")}
    assert "name" not in fields and {"num_generations", "beta", "loss_type"} <= fields
    assert schema.algorithm_defaults("grpo")["num_generations"] == 8


def test_ranges_and_nullability_are_read():
    spec = schema.field_spec(schema.algorithm_models()["grpo"], "top_p", "algorithm.")
    assert spec.bounds == {"gt": 0.0, "le": 1.0}
    assert "> 0.0 and <= 1.0" in spec.tooltip()
    assert schema.field_spec(schema.algorithm_models()["grpo"], "epsilon_high").nullable


# ---------------------------------------------------------------------- document


def test_problem_lines_split_into_field_and_message():
    assert split_problem("algorithm.grpo.beta: bad") == ("algorithm.beta", "bad")
    assert split_problem("model.lora.target_modules.literal['auto']: x") == ("model.lora.target_modules.literal['auto']", "x")


def test_document_tracks_unsaved_changes_and_saves_losslessly(tmp_path):
    doc = PresetDocument()
    assert not doc.dirty
    doc.set("training.max_steps", 7)
    assert doc.dirty
    doc.set("training.max_steps", schema.default_preset_dict()["training"]["max_steps"])
    assert not doc.dirty  # back to what was saved
    doc.set("training.learning_rate", 0.003)
    path = doc.save(tmp_path / "p.yaml")
    assert not doc.dirty
    reopened = PresetDocument()
    reopened.open(path)
    assert reopened.data == doc.data
    assert preset_from_dict(yaml.safe_load(path.read_text())).training.learning_rate == 0.003


def test_an_invalid_preset_opens_with_its_problems(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("training:\n  batch_size: 7\n  learning_rate: abc\n")
    doc = PresetDocument()
    doc.open(path)
    assert doc.get("training.batch_size") == 7  # kept as written
    assert doc.get("training.max_steps") == 200  # missing fields at their defaults
    _, problems = doc.validate()
    assert ("training.learning_rate", "Input should be a valid number (got 'abc')") in problems
    with pytest.raises(PresetError):
        (tmp_path / "nope.yaml").write_text("a: [")
        doc.open(tmp_path / "nope.yaml")


def test_switching_algorithm_keeps_each_algorithms_settings():
    # grpo -> ppo -> dpo -> grpo -> ppo -> dpo: each algorithm's edits come back when the
    # user returns to it, and none leaks into another (GRPO and DPO both have a beta).
    doc = PresetDocument()
    assert doc.algorithm == "grpo"
    doc.set("algorithm.beta", 0.5)
    doc.set("algorithm.num_generations", 4)
    doc.switch_algorithm("ppo")
    assert doc.algorithm == "ppo" and doc.get("algorithm.beta", None) is None
    ppo_default = doc.get("algorithm.kl_coef")
    doc.set("algorithm.kl_coef", ppo_default * 2)
    doc.set("algorithm.num_ppo_epochs", 2)
    doc.switch_algorithm("dpo")
    assert doc.algorithm == "dpo" and doc.get("algorithm.beta") == 0.1  # DPO's own default
    doc.set("algorithm.beta", 0.25)
    doc.set("algorithm.loss_type", "ipo")
    doc.switch_algorithm("grpo")
    assert doc.get("algorithm.beta") == 0.5 and doc.get("algorithm.num_generations") == 4
    assert doc.get("algorithm.loss_type") == "dapo"  # GRPO's, not DPO's ipo
    doc.switch_algorithm("ppo")
    assert doc.get("algorithm.kl_coef") == ppo_default * 2 and doc.get("algorithm.num_ppo_epochs") == 2
    doc.switch_algorithm("dpo")
    assert doc.get("algorithm.beta") == 0.25 and doc.get("algorithm.loss_type") == "ipo"
    preset, problems = doc.validate()
    assert not problems and preset.algorithm.name == "dpo" and preset.algorithm.beta == 0.25


def test_saving_an_invalid_preset_writes_it_as_it_stands(tmp_path):
    doc = PresetDocument()
    doc.set("training.batch_size", "abc")
    doc.save(tmp_path / "x.yaml")
    assert yaml.safe_load((tmp_path / "x.yaml").read_text())["training"]["batch_size"] == "abc"


def test_cross_field_problems_are_reported_with_field_problems():
    doc = PresetDocument()
    doc.update({"algorithm.num_generations": 4, "training.batch_size": 10, "algorithm.temperature": 0.0,
                "training.micro_batch_size": 32})
    _, problems = doc.validate()
    paths = [path for path, _ in problems]
    assert paths == ["algorithm.temperature", "training.batch_size"]  # the schema alone stopped at temperature
    assert "must be divisible by algorithm.num_generations (4)" in dict(problems)["training.batch_size"]
    doc.set("training.batch_size", 16)  # micro_batch_size 32 > 16 is the next cross-field problem
    assert [path for path, _ in doc.validate()[1]] == ["algorithm.temperature", "training.micro_batch_size"]
    # A field that is itself invalid is never judged by its default standing in for it.
    doc.update({"training.batch_size": "many", "algorithm.num_generations": 5, "training.micro_batch_size": None})
    assert [path for path, _ in doc.validate()[1]] == ["algorithm.temperature", "training.batch_size"]


def test_unknown_keys_are_found_removed_and_renamed(tmp_path):
    path = tmp_path / "typos.yaml"
    path.write_text("notes: x\nmodel:\n  lora:\n    alhpa: 8.0\ntraining:\n  learnin_rate: 0.002\n"
                    "  learning_rat: 0.5\n  max_steps: 5\n")
    doc = PresetDocument()
    doc.open(path)
    found = {key.path: key.suggestion for key in doc.unknown_keys()}
    assert found == {"notes": None, "model.lora.alhpa": "alpha", "training.learnin_rate": "learning_rate",
                     "training.learning_rat": "learning_rate"}
    _, problems = doc.validate()
    assert {p for p, _ in problems} == set(found)  # each reported at its own path
    assert not doc.was_set("training.learning_rate") and doc.was_set("training.max_steps")
    doc.rename_key("training.learnin_rate", "learning_rate")
    assert doc.get("training.learning_rate") == 0.002 and doc.was_set("training.learning_rate")
    doc.rename_key("model.lora.alhpa", "alpha")
    doc.remove_key("notes")
    doc.remove_key("training.learning_rat")
    assert doc.unknown_keys() == [] and doc.validate()[1] == []
    doc.save()
    saved = yaml.safe_load(path.read_text())
    assert saved["training"]["learning_rate"] == 0.002 and saved["model"]["lora"]["alpha"] == 8.0
    assert "notes" not in saved and "learnin_rate" not in path.read_text()


# ------------------------------------------------------------------------ checks


def _model_folder(tmp_path, context=40):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "n_positions": context}))
    from tokenizers import Tokenizer, models, pre_tokenizers, Regex

    vocab = {chr(c): i for i, c in enumerate(range(32, 127))}
    vocab["<unk>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_context_check_counts_prompt_tokens_without_torch(tmp_path):
    folder = _model_folder(tmp_path, context=40)
    preset = preset_from_dict({"model": {"name_or_path": str(folder)}, "algorithm": {"name": "grpo",
                               "max_completion_length": 30}, "data": {"num_train": 50, "num_eval": 5}})
    result = checks.prelaunch_checks(preset)
    [(path, message)] = result.problems
    assert path == "algorithm.max_completion_length"
    assert "model's context is 40" in message and "Lower max_completion_length to at most" in message
    fine = preset.model_copy(update={"algorithm": preset.algorithm.model_copy(update={"max_completion_length": 5})})
    assert not checks.prelaunch_checks(fine).problems


def test_hub_ids_skip_the_context_check_with_a_note():
    result = checks.prelaunch_checks(preset_from_dict({"model": {"name_or_path": "org/some-model"}}))
    assert not result.problems
    assert any("hub id" in note and "skipped" in note for _, note in result.notes)


def test_reward_option_types_and_missing_folders_are_caught():
    doc = PresetDocument()
    doc.set("rewards", [{"name": "exact_match", "weight": 1.0, "options": {"case_sensitive": "yes"}}])
    _, problems = doc.validate()
    assert any(path == "rewards.0.options" and "must be bool" in message for path, message in problems)
    preset = preset_from_dict({"model": {"name_or_path": "/no/such/folder"}})
    problems = dict(checks.prelaunch_checks(preset).problems)
    assert "does not exist" in problems["model.name_or_path"]


# ----------------------------------------------------------------------- rundata


def test_metric_table_grows_and_rewinds():
    table = MetricTable()
    table.append([{"step": s, "time": float(s), "reward": s / 10, "kl": None} for s in range(1, 1001)])
    assert table.size == 1000 and np.isnan(table.column("kl")).all()
    assert table.last("reward") == pytest.approx(100.0)
    table.append([{"step": 1001, "time": 1.0, "new": 5}])
    assert np.isnan(table.column("new")[:1000]).all() and table.column("new")[-1] == 5
    assert table.truncate_after(500) == 501 and table.size == 500


def test_run_data_reads_a_run_and_a_resume(tmp_path):
    run_dir = write_run(tmp_path, "r", steps=10, status="stopped")
    run = RunData(run_dir)
    update = run.poll()
    assert update.metrics == 10 and update.samples == 10 and update.lifecycle  # samples events
    assert len(run.samples) == 40
    assert run.status == "stopped" and run.algorithm == "grpo" and run.max_steps == 10
    assert run.samples.components == ["exact_match"]
    # A resume from step 6 redoes steps 7..10: the old values go.
    with open(run_dir / rundir.EVENTS_FILE, "a") as f:
        f.write(json.dumps({"type": "run_resumed", "time": time.time(), "step": 6, "max_steps": 10,
                            "algorithm": "grpo"}) + "\n")
        f.write('{"type": "metrics", "step": 7, "time": 1.0, "rew')  # half written
    update = run.poll()
    assert update.rewound and run.metrics.size == 6 and run.status == "running"
    assert max(s.step for s in run.samples.rows) == 6
    with open(run_dir / rundir.EVENTS_FILE, "a") as f:
        f.write('ard": 0.9}\n')
    run.poll()
    assert run.metrics.size == 7 and run.metrics.last("reward") == 0.9


def test_engine_written_samples_are_parsed_when_first_needed(tmp_path):
    events = rundir.EventWriter(tmp_path)
    events.emit("run_started", step=0, algorithm="grpo", max_steps=2)
    events.emit("metrics", step=1, reward=0.5)
    events.emit("samples", step=1, samples=[{"index": 0, "group": 0, "prompt": "p", "completion": "c\nd",
                                            "reward": 1.0, "rewards": {"a": 1.0}, "advantage": 0.5}])
    events.close()
    with open(tmp_path / rundir.EVENTS_FILE, "a") as f:
        f.write('{"type":"samples","time":1,"step":2,"samples":[{"index":0,"prom')  # still being written
    run = RunData(tmp_path)
    run.poll()
    assert run.samples.pending_events == 1  # the raw line, unparsed
    assert len(run.samples) == 1 and run.samples.row(0).completion == "c\nd"
    assert run.samples.components == ["a"] and run.samples.numbers("rewards/a").tolist() == [1.0]
    with open(tmp_path / rundir.EVENTS_FILE, "a") as f:
        f.write('pt":"q","completion":"x","reward":0,"rewards":{"a":0},"advantage":-1}]}\n')
    assert run.poll().samples == 1
    assert [s.step for s in run.samples.rows] == [1, 2]


def test_progress_and_eta():
    table = MetricTable()
    table.append([{"step": s, "time": 100 + 3.0 * s} for s in range(1, 11)])
    progress = rundata.progress_of(table, 10, 40)
    assert progress.seconds_per_step == pytest.approx(3.0)
    assert progress.eta_seconds == pytest.approx(90.0)
    assert rundata.format_duration(90) == "1 min 30 s"


# -------------------------------------------------------------------------- runs


def test_runs_are_listed_with_status(tmp_path):
    write_run(tmp_path, "a-done", status="done", start=time.time() - 100)
    write_run(tmp_path, "b-failed", status="failed", start=time.time() - 50)
    stale = write_run(tmp_path, "c-stale", status="running", start=time.time() - 7200)
    dead = write_run(tmp_path, "d-dead", status="running", start=time.time() - 30)
    write_process_record(dead, 2 ** 22 + 12345, ["python"])  # no such process
    (tmp_path / "not-a-run").mkdir()
    summaries = {s.name: s for s in RunIndex(tmp_path).scan()}
    assert set(summaries) == {"a-done", "b-failed", "c-stale", "d-dead"}
    assert summaries["a-done"].status == "done" and summaries["a-done"].last_reward is not None
    assert summaries["a-done"].step == 20 and summaries["a-done"].max_steps == 20
    assert summaries["b-failed"].status == "failed" and "synthetic failure" in summaries["b-failed"].note
    assert summaries["c-stale"].status == "stale"
    assert summaries["d-dead"].status == "interrupted"
    assert stale.exists()


def test_a_live_process_record_reads_as_running(tmp_path):
    run_dir = write_run(tmp_path, "live-run", status="running", start=time.time() - 7200)
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)",
                             str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"  # its command line is in place
    try:
        write_process_record(run_dir, proc.pid, [])
        assert summarize_run(run_dir).status == "running"  # old events, but alive
    finally:
        proc.kill()
        proc.wait()
    assert summarize_run(run_dir).status == "interrupted"


def test_differing_fields():
    a = {"name": "a", "training": {"learning_rate": 0.1, "seed": 0}, "rewards": [{"name": "x", "weight": 1.0}]}
    b = {"name": "b", "training": {"learning_rate": 0.2, "seed": 0},
         "rewards": [{"name": "x", "weight": 1.0}, {"name": "y", "weight": 0.5}]}
    rows = dict(differing_fields([a, b]))
    assert rows == {"name": ["a", "b"], "training.learning_rate": [0.1, 0.2], "rewards.y.weight": [MISSING, 0.5]}


# ---------------------------------------------------------------- plots, smoothing


def test_plots_follow_metric_names_and_algorithm():
    grpo = plotspec.choose_plots({"metrics": {"reward", "reward_std", "kl", "loss/value_avg"}}, "grpo")
    assert [p.key for p, _ in grpo.plots] == ["reward", "kl"]
    assert grpo.other == ["loss/value_avg"]  # not a GRPO plot, still reachable
    ppo = plotspec.choose_plots({"metrics": {"reward", "loss/value_avg", "val/explained_variance",
                                             "objective/rlhf_reward", "policy/clipfrac_avg"}}, "ppo")
    assert {"value_loss", "explained_variance", "ppo_objective", "ppo_clip"} <= {p.key for p, _ in ppo.plots}
    assert ppo.other == []
    dpo = plotspec.choose_plots({"metrics": {"rewards/margins", "rewards/accuracies"}}, "dpo")
    assert [p.key for p, _ in dpo.plots] == ["dpo_margins", "dpo_accuracy"]
    components = plotspec.choose_plots({"metrics": {"reward", "rewards/a/mean", "rewards/b/mean"}}, "grpo")
    assert [c.label for c in components.plots[0][1]] == ["reward (mean ± std)", "a", "b"]


def test_smoothing_matches_the_recurrence_and_is_incremental():
    rng = np.random.default_rng(0)
    values = rng.normal(size=3000)
    values[::11] = np.nan

    def reference(x, w):
        out, state, n = [], 0.0, 0
        for v in x:
            if not np.isfinite(v):
                out.append(np.nan)
                continue
            state, n = w * state + (1 - w) * v, n + 1
            out.append(state / (1 - w ** n))
        return np.array(out)

    for weight in (0.0, 0.2, 0.6, 0.9, 0.99):
        np.testing.assert_allclose(smoothing.ema(values, weight), reference(values, weight), atol=1e-9)
        series = smoothing.SmoothedSeries()
        series.update(values[:1000], weight)
        np.testing.assert_allclose(series.update(values, weight), reference(values, weight), atol=1e-9)


def test_settings_round_trip(tmp_path, monkeypatch):
    from workbench.settings import Settings

    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path))
    settings = Settings.load()
    settings.runs_folder = str(tmp_path / "runs")
    for i in range(12):
        settings.add_recent(tmp_path / f"p{i}.yaml")
    settings.save()
    loaded = Settings.load()
    assert loaded.runs_path == tmp_path / "runs"
    assert len(loaded.recent_presets) == 10 and loaded.recent_presets[0].endswith("p11.yaml")
    assert os.path.exists(tmp_path / "settings.json")


def test_new_preset_is_the_schema_default():
    # ... but for the fields New changes so that it runs on the built-in model as it is.
    from workbench.setup.document import NEW_PRESET_CHANGES, set_path

    expected = Preset().model_dump(mode="json")
    for path, value in NEW_PRESET_CHANGES.items():
        set_path(expected, path, value)
    assert PresetDocument().data == expected


def test_run_data_status_is_the_engine_rule(tmp_path):
    """RunData follows the lifecycle incrementally; it must agree with rundir.run_status
    of the whole stream after every event."""
    events = [{"type": "run_started", "step": 0}, {"type": "metrics", "step": 1},
              {"type": "run_finished", "step": 1, "status": "stopped"}, {"type": "run_resumed", "step": 1},
              {"type": "run_failed", "message": "x"}, {"type": "run_resumed", "step": 1},
              {"type": "run_finished", "step": 2}]
    run = RunData(tmp_path)
    assert run.status == "empty"
    for i, event in enumerate(events):
        with open(tmp_path / rundir.EVENTS_FILE, "a") as f:
            f.write(json.dumps(event) + "\n")
        run.poll()
        assert run.status == rundir.run_status(events[: i + 1])
    assert run.status == "done"
