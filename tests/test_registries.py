"""The registries of RL variants (engine/foundation/registry.py, engine/rl/catalog.py, the tasks'):
the single source of the names a preset may write, of what each variant declares, and of
the micro-batch weighting each aggregation implies."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest
import torch
from pydantic import BaseModel

from engine.rl.catalog import micro_batch_weight
from engine.data.tasks import TASKS
from engine.foundation.errors import PresetError
from engine.preset.schema import ALGORITHM_CONFIGS, Preset, preset_from_dict
from engine.rl import catalog
from engine.rl.catalog import (
    AGGREGATIONS, DPO_LOSSES, ESTIMATORS, IMPORTANCE_LEVELS, KL_ESTIMATORS, POLICY_LOSSES, REWARD_SCALINGS,
    Aggregation, tokens_share,
)
from engine.rl.dpo_losses import dpo_loss, length_averaged, sequence_logps
from engine.rl.losses import grpo_loss
from engine.foundation.registry import Entry, Registry, RegistryChoice

ROOT = Path(__file__).resolve().parents[1]

# Each registry-backed preset field: (algorithm or "data", field) -> its registry.
FIELDS = {
    ("grpo", "loss_type"): POLICY_LOSSES,
    ("grpo", "loss_aggregation"): AGGREGATIONS,
    ("grpo", "scale_rewards"): REWARD_SCALINGS,
    ("grpo", "advantage_estimator"): ESTIMATORS,
    ("grpo", "importance_sampling_level"): IMPORTANCE_LEVELS,
    ("grpo", "multi_objective_aggregation"): catalog.REWARD_AGGREGATIONS,
    ("ppo", "kl_estimator"): KL_ESTIMATORS,
    ("dpo", "loss_type"): DPO_LOSSES,
    ("data", "task"): TASKS,
}


def model_of(section: str) -> type[BaseModel]:
    return Preset.model_fields["data"].annotation if section == "data" else ALGORITHM_CONFIGS[section]


def markers(model: type[BaseModel], name: str) -> list[RegistryChoice]:
    """The RegistryChoice markers on a field, through Optional and Annotated."""
    found, pending = [], [model.model_fields[name].annotation, *model.model_fields[name].metadata]
    while pending:
        item = pending.pop()
        if isinstance(item, RegistryChoice):
            found.append(item)
        pending.extend(typing.get_args(item))  # Optional's members; Annotated's type and metadata
    return found


def preset_with(section: str, name: str, value) -> dict:
    if section == "data":
        return {"data": {"task": value}}
    return {"algorithm": {"name": section, name: value}}


def problems_of(data: dict) -> list[str]:
    with pytest.raises(PresetError) as caught:
        preset_from_dict(data)
    return caught.value.problems


# ------------------------------------------------------------- the preset's fields


@pytest.mark.parametrize("section, name", sorted(FIELDS))
def test_each_registry_field_is_marked_with_its_registry(section, name):
    (marker,) = markers(model_of(section), name)
    assert marker.registry is FIELDS[section, name]


def test_no_literal_in_the_preset_repeats_a_registry():
    registries = [*FIELDS.values(), catalog.SURROGATES]
    seen = []

    def walk(model):
        for field_name, info in model.model_fields.items():
            pending = [info.annotation]
            while pending:
                ann = pending.pop()
                if typing.get_origin(ann) is typing.Literal:
                    seen.append((model.__name__, field_name, set(typing.get_args(ann))))
                elif isinstance(ann, type) and issubclass(ann, BaseModel):
                    walk(ann)
                else:
                    pending.extend(typing.get_args(ann))

    for model in (Preset, *ALGORITHM_CONFIGS.values()):
        walk(model)
    assert seen  # the walk finds Literals (each algorithm's `name`, at least)
    for model, field_name, values in seen:
        if field_name == "name" and model in {m.__name__ for m in ALGORITHM_CONFIGS.values()}:
            continue  # the algorithm's own name, the discriminator: not a variant
        for registry in registries:
            assert not values <= set(registry.names()), (model, field_name, values, registry)


@pytest.mark.parametrize("section, name", sorted(FIELDS))
def test_a_name_registered_at_run_time_is_accepted_then_refused_once_removed(section, name):
    registry = FIELDS[section, name]
    template = registry.entries()[0]
    registry.register("test_variant", template.target, "a test's variant", template.declares, origin=__name__)
    try:
        preset = preset_from_dict(preset_with(section, name, "test_variant"))
        section_model = preset.data if section == "data" else preset.algorithm
        assert getattr(section_model, name) == "test_variant"
    finally:
        registry.unregister("test_variant")
    (problem,) = problems_of(preset_with(section, name, "test_variant"))
    path = "data.task" if section == "data" else f"algorithm.{name}"
    assert problem.startswith(f"{path}: unknown {registry.kind} 'test_variant'")
    assert "one of: " + ", ".join(registry.names()) in problem


def test_an_unknown_name_gets_the_field_the_allowed_names_and_a_near_one():
    (problem,) = problems_of({"algorithm": {"name": "grpo", "loss_type": "dapp"}})
    assert problem == ("algorithm.loss_type: unknown loss type 'dapp' (did you mean `dapo`?); one of: grpo, "
                       "dr_grpo, dapo, cispo, sapo, or FILE.py:FUNCTION (your own surrogate in a file next to the "
                       "preset) "
                       "(got 'dapp')")
    (problem,) = problems_of({"data": {"task": "srot"}})
    assert problem == "data.task: unknown task 'srot' (did you mean `sort`?); one of: sort, arithmetic (got 'srot')"
    (problem,) = problems_of({"algorithm": {"name": "grpo", "advantage_estimator": 3}})
    assert problem == "algorithm.advantage_estimator: Input should be a valid string (got 3)"


def test_a_file_function_is_accepted_by_form_where_a_registry_takes_files():
    algo = preset_from_dict({"algorithm": {"name": "grpo", "loss_type": "lib/my_losses.py:clip_cov",
                                           "advantage_estimator": "my_advantages.py:median_baseline"}}).algorithm
    assert (algo.loss_type, algo.advantage_estimator) == ("lib/my_losses.py:clip_cov", "my_advantages.py:median_baseline")
    (problem,) = problems_of({"algorithm": {"name": "grpo", "loss_type": "my_losses.py"}})
    assert problem.startswith("algorithm.loss_type: 'my_losses.py' is not FILE.py:FUNCTION")
    (problem,) = problems_of({"algorithm": {"name": "grpo", "scale_rewards": "my.py:scale"}})
    assert problem.startswith("algorithm.scale_rewards: unknown reward scaling 'my.py:scale'")


def test_old_names_still_load():
    for section, name, values in [("grpo", "loss_type", ["grpo", "dr_grpo", "dapo"]),
                                  ("grpo", "scale_rewards", ["group", "batch", "none"]),
                                  ("grpo", "advantage_estimator", ["grpo", "rloo", "reinforce_pp",
                                                                   "reinforce_pp_baseline"]),
                                  ("grpo", "importance_sampling_level", ["token", "sequence"]),
                                  ("dpo", "loss_type", ["sigmoid", "ipo", "hinge"]),
                                  ("ppo", "kl_estimator", ["k1", "k3"]), ("data", "task", ["sort", "arithmetic"])]:
        for value in values:
            preset = preset_from_dict(preset_with(section, name, value))
            assert getattr(preset.data if section == "data" else preset.algorithm, name) == value


def test_label_smoothing_is_refused_where_the_dpo_loss_does_not_declare_it():
    (problem,) = problems_of({"algorithm": {"name": "dpo", "loss_type": "ipo", "label_smoothing": 0.1}})
    assert problem == "algorithm.label_smoothing: applies to loss_type sigmoid only (loss_type is ipo)"
    assert preset_from_dict({"algorithm": {"name": "dpo", "label_smoothing": 0.1}}).algorithm.label_smoothing == 0.1


# ------------------------------------------------------------------ the registry


def test_registry_refuses_a_second_registration_and_a_name_a_preset_cannot_hold():
    registry = Registry("colour")
    registry.register("red", None, "warm")
    with pytest.raises(ValueError, match="'red' is already registered"):
        registry.register("red", None)
    registry.register("red", None, "warmer", replace=True)
    assert registry.entry("red").help == "warmer"
    with pytest.raises(ValueError, match="use letters"):
        registry.register("has space", None)
    with pytest.raises(ValueError, match=r"unknown colour 'rde' \(did you mean `red`\?\); one of: red"):
        registry.entry("rde")


def test_entry_gives_a_function_only_the_options_it_declares():
    seen = {}

    def scale(x, *, eps, beta=2.0):
        seen.update(eps=eps, beta=beta)
        return x * beta + eps

    entry = Entry("scale", "", scale)
    assert entry.call(1.0, eps=0.5, beta=3.0, unrelated="ignored") == 3.5 and seen == {"eps": 0.5, "beta": 3.0}
    assert entry.call(1.0, eps=0.5) == 2.5
    with pytest.raises(TypeError, match="'scale' asks for option 'eps'.*available: beta"):
        entry.call(1.0, beta=1.0)


def test_reading_the_registries_and_validating_a_preset_load_no_torch():
    # the catalog names its functions as "module:attr": the schema and the window read
    # names, help and declarations without importing the torch modules
    code = ("import sys; from engine.rl import catalog; from engine.preset.schema import preset_from_dict; "
            "catalog.ESTIMATORS.declares('rloo'); catalog.AGGREGATIONS.describe(); "
            "preset_from_dict({'algorithm': {'name': 'grpo', 'loss_type': 'dr_grpo', "
            "'advantage_estimator': 'rloo'}, 'data': {'task': 'arithmetic'}}); "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_every_built_in_function_takes_only_options_its_registry_gives():
    for registry in (catalog.SURROGATES, AGGREGATIONS, ESTIMATORS, REWARD_SCALINGS, DPO_LOSSES):
        for entry in registry.entries():
            given = {*registry.given, *registry.section_fields}  # catalog.offer_section_fields
            assert set(entry.options) <= given, (registry.kind, entry.name, entry.options)


def test_loss_types_compose_a_surrogate_and_an_aggregation():
    assert catalog.policy_loss_parts("grpo") == ("clipped", "sequence_mean")
    assert catalog.policy_loss_parts("dr_grpo") == ("clipped", "fixed_length")
    assert catalog.policy_loss_parts("dapo", "sequence_mean") == ("clipped", "sequence_mean")
    assert catalog.policy_loss_parts("mine.py:f") == ("mine.py:f", catalog.DEFAULT_AGGREGATION)
    assert catalog.length_neutral_loss_types() == ["dr_grpo", "dapo", "cispo"]


# ----------------------------------------------------- gradient accumulation, every aggregation


def batch(seed=0):
    """Six completions of unequal lengths (5, 2, 4, 1, 3, 5 tokens of 5), logprobs near
    their old and reference values, advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(5)[None] < torch.tensor([5, 2, 4, 1, 3, 5])[:, None]).int()
    lp = torch.randn(6, 5, generator=g) * 0.5 - 1.0
    old = lp + torch.randn(6, 5, generator=g) * 0.2
    ref = lp + torch.randn(6, 5, generator=g) * 0.2
    advantages = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.75, -0.25])
    return lp, old, ref, advantages, mask


def accumulated(aggregation, weight_rule=None):
    """(loss, gradient) of the full batch in one pass, and summed over three unequal
    micro-batches each weighted by micro_batch_weight (or `weight_rule`)."""
    lp, old, ref, advantages, mask = batch()
    kw = dict(beta=0.04, epsilon_low=0.2, epsilon_high=0.28, loss_type="grpo", loss_aggregation=aggregation,
              max_completion_length=5)
    full = lp.clone().requires_grad_(True)
    loss, _, _ = grpo_loss(full, old, ref, advantages, mask, **kw)
    loss.backward()
    micro = lp.clone().requires_grad_(True)
    total = 0.0
    for rows in (slice(0, 1), slice(1, 4), slice(4, 6)):
        part, _, _ = grpo_loss(micro[rows], old[rows], ref[rows], advantages[rows], mask[rows], **kw)
        weight = (weight_rule or (lambda m, b: micro_batch_weight("grpo", m, b, aggregation)))(mask[rows], mask)
        (part * weight).backward()
        total += part.item() * weight
    return loss.item(), full.grad, total, micro.grad


@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
def test_micro_batched_gradient_equals_the_full_batch_gradient(aggregation):
    loss, grad, total, micro_grad = accumulated(aggregation)
    assert total == pytest.approx(loss, abs=1e-6)
    torch.testing.assert_close(micro_grad, grad, rtol=1e-5, atol=1e-7)
    assert grad.abs().sum() > 0


def test_the_wrong_micro_batch_weight_gives_a_wrong_gradient():
    # what the declaration guards against: the per-sequence mean weighted by token share
    loss, grad, total, micro_grad = accumulated("sequence_mean", weight_rule=tokens_share)
    assert total != pytest.approx(loss, abs=1e-3)
    assert not torch.allclose(micro_grad, grad, atol=1e-4)


def test_micro_batch_weight_by_loss_type_as_before():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]])  # 3 of 15 tokens in row 0
    assert micro_batch_weight("dapo", mask[:1], mask) == pytest.approx(3 / 15)
    assert micro_batch_weight("grpo", mask[:1], mask) == micro_batch_weight("dr_grpo", mask[:1], mask) == 0.25
    assert micro_batch_weight("grpo", mask[:1], mask, "token_mean") == pytest.approx(3 / 15)


def test_a_new_aggregation_is_one_function_and_one_registration():
    def row_sum(per_token_loss, mask):
        """Sum over each completion's tokens, mean over completions."""
        return torch.where(mask.bool(), per_token_loss, 0.0).sum(-1).mean()

    AGGREGATIONS.register("test_row_sum", row_sum, declares=Aggregation(), origin=__name__)
    try:
        loss, grad, total, micro_grad = accumulated("test_row_sum")
        torch.testing.assert_close(micro_grad, grad, rtol=1e-5, atol=1e-7)
        # loss = mean over rows of sum over tokens: with zero advantages and beta 0.04 it is
        # 0.04 * mean over rows of the rows' k3 sums, worked out here from the same tensors
        lp, old, ref, _, mask = batch()
        k3 = torch.exp(ref - lp) - (ref - lp) - 1
        zero, _, _ = grpo_loss(lp, old, ref, torch.zeros(6), mask, beta=0.04, epsilon_low=0.2,
                               epsilon_high=0.28, loss_type="grpo", loss_aggregation="test_row_sum",
                               max_completion_length=5)
        assert zero.item() == pytest.approx(0.04 * (k3 * mask).sum(-1).mean().item(), rel=1e-6)
    finally:
        AGGREGATIONS.unregister("test_row_sum")


# ------------------------------------------------------------------- declarations


def test_estimators_declare_their_shape():
    rewards, mask = torch.tensor([1.0, 0.0, 0.5, 0.5]), torch.ones(4, 3)
    for entry in ESTIMATORS.entries():
        # grpo_process reads the step tensors: here one step a completion, on its last token
        ends = torch.zeros(4, 3, dtype=torch.bool)
        ends[:, -1] = True
        out = entry.call(rewards, mask, num_generations=2, scale_rewards="group", baseline_rewards=torch.zeros(4),
                         step_rewards=rewards[:, None] * ends, step_ends=ends)
        assert out.shape == ((4, 3) if entry.declares.per_token else (4,)), entry.name


def test_surrogate_metrics_are_what_it_declares():
    lp = torch.tensor([[0.0, 0.5, -0.5]])
    _, info, tok = grpo_loss(lp, torch.zeros(1, 3), None, torch.tensor([1.0]), torch.ones(1, 3), beta=0.0,
                             epsilon_low=0.2, epsilon_high=0.2, loss_type="dapo", max_completion_length=3)
    assert set(info) == {"kl", *catalog.SURROGATES.declares("clipped").metrics}
    # ratio e^0.5 = 1.65 > 1.2 with A > 0: one token of three clipped high
    assert info["clip_ratio/high_mean"] == pytest.approx(1 / 3) and info["clip_ratio/low_mean"] == 0.0
    assert tok["clipped"].tolist() == [[False, True, False]]


def test_a_surrogate_that_misses_a_declared_flag_is_named():
    def no_flags(logprobs, old_logprobs, advantages, mask):
        return -advantages * logprobs, torch.ones_like(logprobs), {}

    catalog.register_policy_loss("test_no_flags", no_flags, metrics=("test/flag",), origin=__name__)
    try:
        with pytest.raises(ValueError, match="'test_no_flags' declares metric test/flag but returned no such flag"):
            grpo_loss(torch.zeros(1, 2), None, None, torch.ones(1), torch.ones(1, 2), beta=0.0, epsilon_low=0.2,
                      epsilon_high=0.2, loss_type="test_no_flags", max_completion_length=2)
    finally:
        catalog.unregister_policy_loss("test_no_flags")


def test_an_importance_level_declares_how_its_clip_fraction_counts():
    # two sequences: the first has all three real tokens clipped, the second none
    lp = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    kw = dict(beta=0.0, epsilon_low=0.2, epsilon_high=0.2, loss_type="dapo", max_completion_length=4)
    _, token, _ = grpo_loss(lp, torch.zeros(2, 4), None, torch.tensor([1.0, 1.0]), mask, **kw)
    _, sequence, _ = grpo_loss(lp, torch.zeros(2, 4), None, torch.tensor([1.0, 1.0]), mask,
                               importance_sampling_level="sequence", **kw)
    assert token["clip_ratio/high_mean"] == pytest.approx(3 / 4)  # tokens: 3 of 4
    assert sequence["clip_ratio/high_mean"] == pytest.approx(1 / 2)  # sequences: 1 of 2
    assert IMPORTANCE_LEVELS.declares("sequence").counts == "sequences"


def test_a_dpo_loss_declares_length_averaged_logprobs():
    assert [n for n in DPO_LOSSES if length_averaged(n)] == ["ipo"]
    token_logps, mask = torch.tensor([[-1.0, -2.0, -9.0]]), torch.tensor([[1, 1, 0]])
    assert sequence_logps(token_logps, mask, average=length_averaged("ipo")).item() == -1.5
    assert sequence_logps(token_logps, mask, average=length_averaged("sigmoid")).item() == -3.0


def test_a_registered_dpo_loss_is_called_with_its_options():
    def squared_hinge(h, *, beta):
        """relu(1 - beta h)^2"""
        return torch.relu(1 - beta * h) ** 2

    DPO_LOSSES.register("test_squared_hinge", squared_hinge, declares=catalog.DPOLoss(), origin=__name__)
    try:
        zero = torch.zeros(1)
        losses, _, _ = dpo_loss(torch.tensor([-1.0]), torch.tensor([-2.0]), zero - 1.5, zero - 1.5, beta=0.5,
                                loss_type="test_squared_hinge")
        # h = (-1 + 1.5) - (-2 + 1.5) = 1 -> relu(1 - 0.5)^2 = 0.25
        assert losses.item() == pytest.approx(0.25)
    finally:
        DPO_LOSSES.unregister("test_squared_hinge")
