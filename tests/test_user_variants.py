"""Research in a file: a preset's own policy loss (`algorithm.loss_type: FILE.py:FUNCTION`)
or advantage estimator (`algorithm.advantage_estimator: FILE.py:FUNCTION`), engine/rl/user_code.py.

Loading (the signature checked against the contract, the field named), the guard around
the function (a fault or a wrong shape named with its file and line), validate's run on a
synthetic batch, and runs through the CLI: the bundled example, its metrics under the
function's name and its advantages in the trajectory records, and a raising function's
run_failed with its file and line.
"""

from __future__ import annotations

import inspect

import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from conftest import ROOT, small_preset_dict
from engine.algorithms.grpo.config import GRPOConfig
from engine.preset.paths import absolute_preset_paths
from engine.preset.schema import preset_from_dict
from engine.rl.catalog import ESTIMATORS, POLICY_LOSSES
from engine.rl.user_code import UserFunctionError, load_entry, resolve, try_user_functions
from engine.rl.user_files import absolute_user_functions, source_problems, user_function_fields
from engine.run import rundir
from engine.run.failures import startup_problems
from engine_runs import cli

EXAMPLES = ROOT / "presets" / "examples"

VARIANTS_PY = '''\
import math

import torch


def median_baseline(rewards, mask, *, num_generations):
    grouped = rewards.view(-1, num_generations)
    return (grouped - grouped.median(dim=1, keepdim=True).values).reshape(-1)


def per_token(rewards, mask):
    return rewards[:, None] * mask


def two_args(x, y):
    return x


def wants_learning_rate(rewards, mask, *, learning_rate):
    return rewards


def reads_temperature(rewards, mask, *, temperature):
    return rewards / temperature


def positional_option(rewards, mask, num_generations=4):
    return rewards


def one_per_prompt(rewards, mask, *, num_generations):
    return rewards.view(-1, num_generations).mean(dim=1)


def with_nan(rewards, mask):
    out = rewards.clone()
    out[0] = math.nan
    return out


def divides(rewards, mask):
    total = rewards.sum().item()
    return total / 0


def plain_pg(logprobs, old_logprobs, advantages, mask):
    return -advantages * logprobs


def detached_loss(logprobs, old_logprobs, advantages, mask):
    return -advantages * logprobs.detach()


def flat_loss(logprobs, old_logprobs, advantages, mask):
    return -(advantages * logprobs).sum(dim=1)


def flagged(logprobs, old_logprobs, advantages, mask, *, log_ratio, epsilon_low):
    ratio = torch.exp(log_ratio).expand_as(logprobs)
    return -ratio * advantages, ratio, {"low": ratio < 1 - epsilon_low, "clipped": ratio < 1}
'''


@pytest.fixture
def variants(tmp_path) -> Path:
    path = tmp_path / "my_variants.py"
    path.write_text(VARIANTS_PY)
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# ------------------------------------------------------------------------------ loading


def test_a_signature_that_does_not_fit_is_refused_naming_the_field(variants):
    with pytest.raises(UserFunctionError) as caught:
        resolve(POLICY_LOSSES, "my_variants.py:two_args", variants.parent)
    assert str(caught.value).startswith(
        "algorithm.loss_type: my_variants.py:two_args takes (x, y) but a policy loss is called with "
        "(logprobs, old_logprobs, advantages, mask, *, log_ratio, epsilon_low, epsilon_high, or any field of the "
        "algorithm section)")
    assert caught.value.user_location == (str(variants), line_of(variants, "def two_args"))
    # training.learning_rate is not the algorithm section's: refused; algorithm.temperature is: given
    with pytest.raises(UserFunctionError, match="algorithm.advantage_estimator: my_variants.py:wants_learning_rate "
                                                "asks for option 'learning_rate', which the engine does not give"):
        resolve(ESTIMATORS, "my_variants.py:wants_learning_rate", variants.parent)
    assert resolve(ESTIMATORS, "my_variants.py:reads_temperature", variants.parent).options == {
        "temperature": inspect.Parameter.empty}
    with pytest.raises(UserFunctionError, match=r"takes 'num_generations' as a positional parameter.*put `\*,`"):
        resolve(ESTIMATORS, "my_variants.py:positional_option", variants.parent)


def test_a_missing_function_or_file_names_the_field(variants, tmp_path):
    with pytest.raises(UserFunctionError, match="algorithm.advantage_estimator: no function 'median' in .*"
                                                "it defines: median_baseline, per_token"):
        resolve(ESTIMATORS, "my_variants.py:median", variants.parent)
    algo = GRPOConfig(loss_type="nowhere.py:f", advantage_estimator="my_variants.py:median")
    problems = dict(source_problems(algo, variants.parent))
    assert problems["algorithm.loss_type"].startswith("file nowhere.py not found")
    assert problems["algorithm.advantage_estimator"].startswith("no function 'median'")
    preset = preset_from_dict({**small_preset_dict(), "algorithm": {"name": "grpo", "loss_type": "nowhere.py:f"}})
    assert startup_problems(preset, tmp_path) == [
        f"algorithm.loss_type: file nowhere.py not found (looked in {tmp_path} and {Path.cwd()})"]


def test_a_user_estimator_gives_its_advantages_and_declares_from_its_signature(variants):
    entry = resolve(ESTIMATORS, "my_variants.py:median_baseline", variants.parent)
    assert entry.origin == str(variants) and entry.declares.needs_group and not entry.declares.uses_scale_rewards
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])  # medians 0 and 1
    out = entry.call(rewards, torch.ones(6, 2), num_generations=3, scale_rewards="group")
    assert out.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, -1.0]
    assert resolve(ESTIMATORS, "my_variants.py:median_baseline", variants.parent) is entry  # loaded once


def test_a_fault_or_a_wrong_shape_names_the_file_and_line(variants):
    divides = resolve(ESTIMATORS, "my_variants.py:divides", variants.parent)
    with pytest.raises(UserFunctionError) as caught:
        divides.call(torch.ones(4), torch.ones(4, 3), num_generations=2)
    line = line_of(variants, "return total / 0")
    assert str(caught.value) == (f"algorithm.advantage_estimator: my_variants.py:divides failed with "
                                 f"ZeroDivisionError: float division by zero (at {variants}, line {line})")
    assert caught.value.user_location == (str(variants), line)
    per_prompt = resolve(ESTIMATORS, "my_variants.py:one_per_prompt", variants.parent)
    with pytest.raises(UserFunctionError, match=r"returned advantages of shape \(2,\); expected \(4,\) "
                                                r"\(one per completion\) or \(4, 3\) \(one per token\)"):
        per_prompt.call(torch.ones(4), torch.ones(4, 3), num_generations=2)


def test_a_user_surrogate_returns_the_contracts_triple_with_its_flags_under_its_name(variants):
    logprobs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -1.0]])
    advantages, mask = torch.tensor([[2.0]]), torch.ones(1, 2)
    plain = resolve(POLICY_LOSSES, "my_variants.py:plain_pg", variants.parent)
    loss, ratio, flags = plain.call(logprobs, old, advantages, mask, log_ratio=logprobs - old, epsilon_low=0.2)
    assert loss.tolist() == [[2.0, 4.0]] and flags == {}  # -A * logprob
    assert ratio[0].tolist() == pytest.approx([1.6487, 0.3679], abs=1e-4)  # exp(0.5), exp(-1): the inspector's
    flagged = resolve(POLICY_LOSSES, "my_variants.py:flagged", variants.parent)
    assert flagged.declares.metrics is None and flagged.declares.inspector_flag == "flagged/clipped"
    _, _, flags = flagged.call(logprobs, old, advantages, mask, log_ratio=logprobs - old, epsilon_low=0.2,
                               epsilon_high=0.2, max_completion_length=2)
    assert {k: v.tolist() for k, v in flags.items()} == {"flagged/low": [[False, True]],
                                                         "flagged/clipped": [[False, True]]}
    for name, message in (("detached_loss", "no gradient"), ("flat_loss", r"per-token loss of shape \(1,\)")):
        with pytest.raises(UserFunctionError, match=message):
            resolve(POLICY_LOSSES, f"my_variants.py:{name}", variants.parent).call(logprobs, old, advantages, mask)


def test_the_preset_names_the_files_absolutely_for_a_resume(variants):
    algo = GRPOConfig(loss_type="my_variants.py:plain_pg", advantage_estimator="rloo")
    assert [f for f, _, _ in user_function_fields(algo)] == ["algorithm.loss_type"]
    assert absolute_user_functions(algo, variants.parent).loss_type == f"{variants}:plain_pg"
    preset = preset_from_dict({**small_preset_dict(), "algorithm": {
        "name": "grpo", "advantage_estimator": "my_variants.py:median_baseline"}})
    fixed = absolute_preset_paths(preset, variants.parent)
    assert fixed.algorithm.advantage_estimator == f"{variants}:median_baseline"
    assert fixed.algorithm.loss_type == "dapo"  # a registered name is left alone


# ------------------------------------------------------------------------- validate


def test_try_user_functions_runs_each_on_a_synthetic_batch(variants):
    algo = GRPOConfig(num_generations=4, loss_type="my_variants.py:flagged",
                      advantage_estimator="my_variants.py:per_token")
    ran, failed = try_user_functions(algo, variants.parent)
    assert failed == []
    assert ran == [
        "algorithm.loss_type: my_variants.py:flagged ran on a synthetic batch of 8 completions x 6 tokens: "
        "per-token loss (8, 6), finite, with a finite gradient; metrics flagged/low, flagged/clipped",
        "algorithm.advantage_estimator: my_variants.py:per_token ran on a synthetic batch of 8 completions x "
        "6 tokens: advantages (8, 6) (one per token), finite",
    ]
    algo = GRPOConfig(num_generations=4, advantage_estimator="my_variants.py:with_nan")
    (failed,) = try_user_functions(algo, variants.parent)[1]
    assert failed[0] == "algorithm.advantage_estimator"
    assert failed[1].startswith("my_variants.py:with_nan returned advantages with 1 non-finite value(s), "
                                "the first nan at [0]")
    assert failed[1].endswith(f"(at {variants}, line {line_of(variants, 'def with_nan')})")


def write_preset(folder: Path, **algorithm) -> Path:
    data = small_preset_dict(max_steps=2)
    data["algorithm"].update(algorithm)
    path = folder / "preset.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_validate_runs_a_user_loss_and_estimator_and_says_what_they_gave(variants):
    good = write_preset(variants.parent, loss_type="my_variants.py:plain_pg",
                        advantage_estimator="my_variants.py:median_baseline")
    result = cli("validate", good)
    assert result.code == 0, result.err
    assert ("algorithm.loss_type: my_variants.py:plain_pg ran on a synthetic batch of 8 completions x 6 tokens: "
            "per-token loss (8, 6), finite, with a finite gradient") in result.out
    assert "algorithm.advantage_estimator: my_variants.py:median_baseline ran on" in result.out

    shape = write_preset(variants.parent, advantage_estimator="my_variants.py:one_per_prompt")
    result = cli("validate", shape)
    assert result.code == 2
    assert (f"  - algorithm.advantage_estimator: my_variants.py:one_per_prompt returned advantages of shape (2,); "
            f"expected (8,) (one per completion) or (8, 6) (one per token) "
            f"(at {variants}, line {line_of(variants, 'def one_per_prompt')})") in result.err

    nan = write_preset(variants.parent, advantage_estimator="my_variants.py:with_nan")
    result = cli("validate", nan)
    assert result.code == 2 and "my_variants.py:with_nan returned advantages with 1 non-finite value" in result.err

    wrong = write_preset(variants.parent, loss_type="my_variants.py:two_args")
    result = cli("validate", wrong)
    assert result.code == 2
    assert "  - algorithm.loss_type: my_variants.py:two_args takes (x, y) but a policy loss is called with" in result.err
    assert "Traceback" not in result.err


# ----------------------------------------------------------------------------- runs


def test_the_bundled_example_runs_its_loss_and_estimator_from_files(tmp_path):
    """presets/examples/grpo-sort-research.yaml through the CLI, from another folder: the
    files are found beside the preset, the loss's flags are logged under its name, and the
    records carry the median-baseline advantages of the rewards."""
    run = tmp_path / "run"
    result = cli("run", EXAMPLES / "grpo-sort-research.yaml", "--run-dir", run, "--quiet",
                 "--set", "training.max_steps=2", "--set", "training.batch_size=16",
                 "--set", "algorithm.num_generations=4", "--set", "algorithm.max_completion_length=8",
                 "--set", "training.eval_steps=0", "--set", "data.num_train=32", "--set", "data.num_eval=4",
                 "--set", "training.save_steps=0", "--set", "training.record_rollouts=16", cwd=tmp_path)
    assert result.code == 0, result.err
    saved = yaml.safe_load((run / rundir.PRESET_FILE).read_text())["algorithm"]
    assert saved["loss_type"] == f"{EXAMPLES / 'my_losses.py'}:clip_cov"  # a resume finds it from anywhere
    metrics = [e for e in rundir.read_events(run) if e["type"] == "metrics"]
    assert len(metrics) == 2
    for event in metrics:
        assert 0.0 <= event["clip_cov/cov_clipped"] <= 1.0 and 0.0 <= event["clip_cov/clipped"] <= 1.0
    records = rundir.read_trajectories(run, 1) + rundir.read_trajectories(run, 2)
    assert len(records) == 32  # every completion of both steps: 4 groups of 4 each
    spread = 0
    for first in range(0, 32, 4):
        group = records[first:first + 4]
        rewards = torch.tensor([r["reward"] for r in group])
        median = float(rewards.sort().values[1])  # the lower middle value of 4, as torch.median
        for record in group:  # the median baseline, on every token (the inspector's view)
            assert record["advantage"] == pytest.approx([record["reward"] - median] * len(record["tokens"]), abs=1e-4)
        spread += len(set(rewards.tolist())) > 1
    assert spread > 0  # some group's rewards differ: the advantages checked are not all 0


def test_a_run_whose_loss_raises_reports_its_file_and_line(tmp_path):
    losses = tmp_path / "my_losses.py"
    losses.write_text(textwrap.dedent('''\
        def strict(logprobs, old_logprobs, advantages, mask):
            if advantages.abs().sum() >= 0:
                raise ValueError("no loss for these advantages")
            return -advantages * logprobs
        '''))
    run = tmp_path / "run"
    result = cli("run", write_preset(tmp_path, loss_type="my_losses.py:strict"), "--run-dir", run, "--quiet",
                 cwd=ROOT)
    assert result.code == 1, result.err
    (failed,) = [e for e in rundir.read_events(run) if e["type"] == "run_failed"]
    assert failed["file"] == str(losses) and failed["line"] == 3
    assert failed["message"] == (f"algorithm.loss_type: {losses}:strict failed with ValueError: no loss for these "
                                 f"advantages (at {losses}, line 3)")
    assert "Traceback" not in result.err


def test_a_run_refuses_a_wrong_signature_before_it_starts(tmp_path, variants):
    run = tmp_path / "run"
    result = cli("run", write_preset(tmp_path, advantage_estimator="my_variants.py:wants_learning_rate"),
                 "--run-dir", run, "--quiet")
    assert result.code == 2, result.err
    assert "algorithm.advantage_estimator: " in result.err and "asks for option 'learning_rate'" in result.err
    assert "Traceback" not in result.err
