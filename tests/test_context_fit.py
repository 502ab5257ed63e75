"""A default max_completion_length cut to the model's context (engine/algorithms/context_fit.py):
an empty preset runs on the built-in model (128 positions), the cut said once by `validate`
and by the run (its stderr and engine.log) and written to the run's preset.yaml; a value the
preset sets is checked as it is and refused when it does not fit. In-process, no subprocess."""

from __future__ import annotations

from pathlib import Path

import yaml

from engine.algorithms.context_fit import default_in_force, fit_prompts, unset_fitted_fields
from engine.cli import main
from engine.data import load_splits
from engine.foundation.io import save_preset
from engine.model.chat import chat_format, template_examples
from engine.model.loading import load_tokenizer, resolve_model_path, tokenizer_chat_template
from engine.preset.schema import load_preset
from engine.run import rundir

NOTE = "algorithm.max_completion_length 256 -> 110 to fit the model's 128-position context"
REFUSED = ("with max_completion_length 256 a sequence needs 274 positions but the model's context is 128. "
           "Lower max_completion_length to at most 110")


def _empty(folder: Path) -> Path:
    path = folder / "empty.yaml"
    path.write_text("")
    return path


def _validate(preset: Path, capsys, *overrides: str) -> tuple[int, str, str]:
    args = ["validate", str(preset)]
    for override in overrides:
        args += ["--set", override]
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _fit(preset):
    """fit_prompts on the preset's own data and the built-in model's tokenizer, as validate calls it."""
    train, held_out = load_splits(preset.data, preset.training.seed, None)
    tokenizer = load_tokenizer(resolve_model_path(preset.model.name_or_path), False)
    fmt = chat_format(preset.model.chat_template, tokenizer_chat_template(tokenizer), preset.data.system_prompt, None)
    examples = template_examples(train + held_out, fmt, tokenizer)
    return fit_prompts(tokenizer, examples, train + held_out, preset, None, 128)


def test_an_empty_preset_validates_with_its_default_cut_once(tmp_path, capsys):
    status, out, err = _validate(_empty(tmp_path), capsys)
    assert status == 0, err
    assert out.count(NOTE) == 1 and f"note: {NOTE}" in out
    assert "valid (grpo" in out and "longest prompt 18 tokens" in out


def test_the_resolved_preset_carries_the_cut_value_as_set(tmp_path):
    preset = load_preset(_empty(tmp_path))
    assert default_in_force(preset.algorithm) and preset.algorithm.max_completion_length == 256
    fit = _fit(preset)
    assert fit.longest == 18 and fit.note.startswith(NOTE)
    assert fit.preset.algorithm.max_completion_length == 110 and not default_in_force(fit.preset.algorithm)
    assert preset.algorithm.max_completion_length == 256  # the preset given is left as it was
    save_preset(fit.preset, tmp_path / "resolved.yaml")  # as the run writes it: read back, the same, and set
    again = load_preset(tmp_path / "resolved.yaml")
    assert again.algorithm.max_completion_length == 110 and not default_in_force(again.algorithm)
    refit = _fit(again)
    assert refit.note is None and refit.preset is again


def test_a_preset_saved_before_the_fit_leaves_the_default_unset(tmp_path):
    preset = load_preset(_empty(tmp_path))
    assert unset_fitted_fields(preset) == ("algorithm.max_completion_length",)
    save_preset(preset, tmp_path / "early.yaml", leave_out=unset_fitted_fields(preset))
    assert "max_completion_length" not in yaml.safe_load((tmp_path / "early.yaml").read_text())["algorithm"]
    assert default_in_force(load_preset(tmp_path / "early.yaml").algorithm)  # started again: fitted again
    assert unset_fitted_fields(_fit(preset).preset) == ()


def test_an_explicit_value_that_does_not_fit_is_still_refused(tmp_path, capsys):
    # the default's own value, set: refused as any other set value
    status, out, err = _validate(_empty(tmp_path), capsys, "algorithm.name=grpo", "algorithm.max_completion_length=256")
    assert status == 2
    assert REFUSED in err and "algorithm.max_completion_length: the longest prompt" in err
    assert "->" not in out + err
    status, out, err = _validate(_empty(tmp_path), capsys, "algorithm.name=grpo", "algorithm.max_completion_length=111")
    assert status == 2 and "Lower max_completion_length to at most 110" in err


def test_an_explicit_value_that_fits_is_kept(tmp_path, capsys):
    status, out, err = _validate(_empty(tmp_path), capsys, "algorithm.name=grpo", "algorithm.max_completion_length=40")
    assert status == 0, err
    assert "->" not in out


def test_dpo_gets_the_same_cut(tmp_path, capsys):
    status, out, err = _validate(_empty(tmp_path), capsys, "algorithm.name=dpo")
    assert status == 0, err
    assert "256 -> 110" in out and "valid (dpo" in out


def test_a_run_of_an_empty_preset_says_the_cut_once_and_keeps_it(tmp_path, capsys):
    run = tmp_path / "run"
    sets = ["algorithm.name=grpo", "algorithm.num_generations=4", "training.batch_size=8", "training.max_steps=1",
            "training.eval_steps=0", "training.save_steps=0", "data.num_train=16", "data.num_eval=2"]
    args = ["run", str(_empty(tmp_path)), "--run-dir", str(run), "--quiet"]
    for item in sets:
        args += ["--set", item]
    status = main(args)
    err = capsys.readouterr().err
    assert status == 0, err
    assert err.count(NOTE) == 1 and f"note: {NOTE}" in err
    assert (run / rundir.LOG_FILE).read_text().count(NOTE) == 1
    saved = load_preset(run / rundir.PRESET_FILE)  # what a resume or a fork reads
    assert saved.algorithm.max_completion_length == 110 and not default_in_force(saved.algorithm)
    (started,) = [e for e in rundir.read_events(run) if e["type"] == "run_started"]
    assert started["preset"]["algorithm"]["max_completion_length"] == 110
    samples = [e for e in rundir.read_events(run) if e["type"] == "samples"]
    assert samples  # it sampled: within 110 tokens, never past the model's positions


def test_the_trainer_takes_the_cut_everywhere_it_reads_the_length(tmp_path):
    from engine.commands.train import build_trainer
    from engine.preset.schema import preset_from_dict

    preset = preset_from_dict({"algorithm": {"name": "grpo", "loss_type": "dr_grpo", "num_generations": 4},
                               "data": {"num_train": 16, "num_eval": 2}, "training": {"batch_size": 8}})
    trainer = build_trainer(preset, tmp_path / "run")
    assert len(trainer.setup_notes) == 1 and trainer.setup_notes[0].startswith(NOTE)
    assert trainer.preset.algorithm is trainer.algo and trainer.algo.max_completion_length == 110
    assert trainer.policy.sampling.max_tokens == 110
    # dr_grpo divides by max_completion_length: the cut one (its options are read after the fit)
    assert trainer.loss_options["max_completion_length"] == 110
    assert trainer.section_options["max_completion_length"] == 110
