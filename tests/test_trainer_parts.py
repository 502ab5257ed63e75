"""The parts a Trainer is composed of, each built alone (no model loaded, no trainer):
the optimizer part, the random states, checkpoints, the out-of-memory retry, the
evaluation, the step's timing metrics and the run's events."""

from __future__ import annotations

import json
import random
import re
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model

from conftest import small_preset_dict
from engine.algorithms.checkpoints import CheckpointParts, Progress, WorldSizeMismatch, load_checkpoint, save_checkpoint
from engine.algorithms.evaluation import evaluate_generations
from engine.algorithms.memory import MemoryFields, MicroBatchSize, OutOfMemory, StepStart, step_that_fits
from engine.algorithms.optimization import Optimization, adamw_settings
from engine.algorithms.random_states import RandomStates
from engine.algorithms.run_events import RunEvents
from engine.algorithms.step_metrics import PassClock, timing_metrics
from engine.algorithms.step_result import RolloutStepOutputs
from engine.alarms import AlarmWatcher
from engine.data import Example
from engine.distributed.world import World
from engine.preset.schema import preset_from_dict
from engine.run import rundir

CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"


def training(**overrides):
    """The preset's training section, as a run validates it."""
    return preset_from_dict(small_preset_dict(**overrides)).training


def parameters(seed: int = 0, count: int = 2) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(3, generator=g)) for _ in range(count)]


def one_update(optimization: Optimization, loss_of=lambda ps: sum((p ** 2).sum() for p in ps)) -> tuple[float, bool]:
    optimization.zero_grad()
    loss = loss_of(optimization.parameters)
    optimization.backward(loss)
    return optimization.clip_and_step(float(loss))


# ------------------------------------------------------------------ optimizer


def test_the_optimizer_takes_the_presets_adamw_settings_and_warms_up():
    cfg = training(learning_rate=0.01, warmup_steps=2, lr_scheduler_type="linear", weight_decay=0.1)
    part = Optimization(parameters(), cfg, total_updates=6)
    (group,) = part.optimizer.param_groups
    assert group["betas"] == (cfg.adam_beta1, cfg.adam_beta2) and group["weight_decay"] == 0.1
    rates = [part.learning_rate]
    for _ in range(5):
        assert one_update(part)[1]
        rates.append(part.learning_rate)
    assert rates == pytest.approx([0.005, 0.01, 0.01, 0.0075, 0.005, 0.0025])  # lr_factor's worked example


def test_a_non_finite_loss_drops_the_gradient_and_keeps_the_schedule():
    part = Optimization(parameters(), training(), total_updates=4)
    before = [p.detach().clone() for p in part.parameters]
    grad_norm, ok = one_update(part, loss_of=lambda ps: sum(p.sum() for p in ps) * float("nan"))
    assert not ok and part.scheduler.last_epoch == 0
    assert all(p.grad is None for p in part.parameters)
    assert all(torch.equal(a, b) for a, b in zip(before, part.parameters))


def test_a_loaded_optimizer_state_takes_the_presets_new_settings():
    # A fork with --set training.learning_rate (and betas, weight decay): the loaded
    # moments and schedule position stay, the settings are the new preset's.
    old = Optimization(parameters(), training(learning_rate=0.01, warmup_steps=0, lr_scheduler_type="linear"),
                       total_updates=10)
    for _ in range(3):
        one_update(old)
    new_cfg = training(learning_rate=0.002, warmup_steps=0, lr_scheduler_type="linear")
    new_cfg.adam_beta1, new_cfg.weight_decay = 0.8, 0.05
    new = Optimization(parameters(seed=1), new_cfg, total_updates=10)
    new.load_state_dict(old.state_dict())
    (group,) = new.optimizer.param_groups
    assert {k: group[k] for k in ("betas", "weight_decay")} == {k: v for k, v in adamw_settings(new_cfg).items()
                                                                if k != "lr"}
    assert new.scheduler.last_epoch == 3
    assert new.learning_rate == pytest.approx(0.002 * (1 - 3 / 10))  # linear decay, at the loaded position
    state = old.optimizer.state_dict()["state"][0]
    torch.testing.assert_close(new.optimizer.state_dict()["state"][0]["exp_avg"], state["exp_avg"])


def test_a_snapshot_puts_the_optimizer_back():
    part = Optimization(parameters(), training(), total_updates=10)
    one_update(part)
    snapshot = part.snapshot()
    rate, moments = part.learning_rate, part.optimizer.state_dict()["state"][0]["exp_avg"].clone()
    one_update(part)
    assert part.learning_rate != rate or not torch.equal(part.optimizer.state_dict()["state"][0]["exp_avg"], moments)
    part.restore(snapshot)
    assert part.learning_rate == rate and part.scheduler.last_epoch == 1
    assert torch.equal(part.optimizer.state_dict()["state"][0]["exp_avg"], moments)


# --------------------------------------------------------------- random states


def test_rank_states_put_every_generator_back():
    states = RandomStates(seed=3, device=torch.device("cpu"))
    saved = states.rank_state()
    first = (torch.rand(2), random.random(), torch.rand(2, generator=states.sample_generator))
    states.set_rank_state(saved)
    again = (torch.rand(2), random.random(), torch.rand(2, generator=states.sample_generator))
    assert torch.equal(first[0], again[0]) and first[1] == again[1] and torch.equal(first[2], again[2])


def test_ranks_sample_differently_and_draw_alike():
    ranks = [RandomStates(seed=3, device=torch.device("cpu"), rank=r, world_size=2) for r in range(2)]
    assert torch.equal(*(torch.rand(4, generator=r.generator) for r in ranks))
    assert not torch.equal(*(torch.rand(4, generator=r.sample_generator) for r in ranks))


# ----------------------------------------------------------------- checkpoints


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)


def checkpoint_parts(seed: int, cfg) -> CheckpointParts:
    torch.manual_seed(seed)
    model = get_peft_model(Net(), LoraConfig(r=2, target_modules=["proj"], init_lora_weights=False))
    trained = [p for p in model.parameters() if p.requires_grad]
    return CheckpointParts(model, Optimization(trained, cfg, total_updates=10),
                           RandomStates(seed, torch.device("cpu")), World())


def test_a_checkpoint_written_from_parts_reads_back_into_fresh_parts(tmp_path):
    cfg = training(save_total_limit=2)
    parts = checkpoint_parts(0, cfg)
    for _ in range(2):
        one_update(parts.optimization)
    torch.rand(3, generator=parts.random_states.generator)  # the generators moved on
    extra = {"value_head": {"weight": torch.arange(3.0)}}
    folder = save_checkpoint(parts, tmp_path, Progress(step=2, data_position=8, nonfinite_steps=1), extra,
                             keep=cfg.save_total_limit)
    assert folder == rundir.checkpoint_dir(tmp_path, 2)
    assert {p.name for p in folder.iterdir()} >= {"adapter_model.safetensors", "trainer_state.pt", "state.json"}
    info = json.loads((folder / "state.json").read_text())
    assert {k: info[k] for k in ("step", "data_position", "nonfinite_steps", "world_size")} == {
        "step": 2, "data_position": 8, "nonfinite_steps": 1, "world_size": 1}

    fresh = checkpoint_parts(1, cfg)
    progress, extra_back = load_checkpoint(fresh, folder, torch.device("cpu"))
    assert progress == Progress(2, 8, 1) and torch.equal(extra_back["value_head"]["weight"], torch.arange(3.0))
    for a, b in zip(parts.optimization.parameters, fresh.optimization.parameters):
        assert torch.equal(a, b)
    assert fresh.optimization.scheduler.last_epoch == 2
    torch.testing.assert_close(fresh.optimization.optimizer.state_dict()["state"],
                               parts.optimization.optimizer.state_dict()["state"])
    assert torch.equal(torch.rand(3, generator=fresh.random_states.generator),
                       torch.rand(3, generator=parts.random_states.generator))


def test_checkpoints_past_the_limit_are_pruned_and_other_world_sizes_refused(tmp_path):
    parts = checkpoint_parts(0, training())
    for step in (1, 2, 3):
        save_checkpoint(parts, tmp_path, Progress(step, step, 0), {}, keep=2)
    assert rundir.complete_checkpoints(tmp_path) == [rundir.checkpoint_dir(tmp_path, s) for s in (2, 3)]
    two = CheckpointParts(parts.model, parts.optimization, parts.random_states, World(rank=0, size=2))
    with pytest.raises(WorldSizeMismatch):
        load_checkpoint(two, rundir.checkpoint_dir(tmp_path, 3), torch.device("cpu"))


# ------------------------------------------------------------ out of memory


class Start:
    """A step's start that counts what the retry asks of it."""

    def __init__(self):
        self.freed = self.restored = 0

    def free(self):
        self.freed += 1

    def restore(self):
        self.restored += 1


FIELDS = MemoryFields(batch=8, unit="completions", max_tokens=16, checkpointing=False)


def step_fitting(sizes: MicroBatchSize, fits: int, tried: list[int]):
    """A step function that runs out of memory with micro-batches above `fits` rows."""
    def step():
        tried.append(sizes.current)
        if sizes.current > fits:
            raise torch.OutOfMemoryError(CUDA_OOM)
        return "trained"
    return step


def test_auto_halves_the_micro_batch_until_the_step_fits():
    sizes, start, tried, halved = MicroBatchSize("auto", batch_size=8), Start(), [], []
    result = step_that_fits(step_fitting(sizes, 2, tried), sizes, start, FIELDS, phase=lambda: "update",
                            on_halved=lambda old, new: halved.append((old, new)))
    assert result == "trained" and tried == [8, 4, 2] and halved == [(8, 4), (4, 2)]
    assert start.freed == start.restored == 2
    assert sizes.slices(slice(0, 8)) == [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)]


@pytest.mark.parametrize("setting, phase, message", [
    (4, "update", "in the update, with micro-batches of 4 completions of up to 16 tokens: lower "
                  "training.micro_batch_size (now 4), or set it to `auto`"),
    ("auto", "rollout", "while sampling 8 completions of up to 16 tokens"),
])
def test_without_a_retry_the_message_names_the_fields(setting, phase, message):
    sizes, start = MicroBatchSize(setting, batch_size=8), Start()
    with pytest.raises(OutOfMemory, match=re.escape(message)):
        step_that_fits(step_fitting(sizes, 1, []), sizes, start, FIELDS, phase=lambda: phase, on_halved=print)
    assert start.restored == 0


def test_other_errors_are_not_retried():
    def step():
        raise RuntimeError("shape mismatch")

    start = Start()
    with pytest.raises(RuntimeError, match="shape mismatch"):
        step_that_fits(step, MicroBatchSize("auto", 8), start, FIELDS, phase=lambda: "update", on_halved=print)
    assert start.freed == 0


def test_a_steps_start_puts_back_data_position_random_states_weights_and_optimizer():
    part = Optimization(parameters(), training(), total_updates=10)
    stream, states = SimpleNamespace(position=4), RandomStates(0, torch.device("cpu"))
    start = StepStart(stream, states, part, updates=True)
    weights = [p.detach().clone() for p in part.parameters]
    draws = (torch.rand(2), torch.rand(2, generator=states.generator))
    stream.position = 12
    one_update(part)
    start.free()
    start.restore()
    assert stream.position == 4 and part.scheduler.last_epoch == 0 and not part.optimizer.state_dict()["state"]
    assert all(torch.equal(a, b) for a, b in zip(weights, part.parameters))
    assert torch.equal(draws[0], torch.rand(2)) and torch.equal(draws[1], torch.rand(2, generator=states.generator))


def test_a_retried_step_samples_again_what_it_sampled_on_a_rank_of_several():
    # Rank 1 of 2 samples with its own generator: a step taken again after an
    # out-of-memory must draw the same completions as it drew the first time.
    part = Optimization(parameters(), training(), total_updates=10)
    states = RandomStates(0, torch.device("cpu"), rank=1, world_size=2)
    start = StepStart(SimpleNamespace(position=0), states, part, updates=False)
    first = torch.rand(3, generator=states.sample_generator)
    start.restore()
    assert torch.equal(first, torch.rand(3, generator=states.sample_generator))


# --------------------------------------------------------- evaluation, metrics


def test_evaluation_scores_the_completions_it_is_given():
    examples = [Example(f"p{i}", {"answer": f"a{i}"}) for i in range(5)]
    exact = lambda prompts, completions, answer, **_: [float(c == a) for c, a in zip(completions, answer)]  # noqa: E731
    completed = []

    def complete(prompts, fields=None):
        completed.append(len(prompts))
        return [f"a{p[1:]}" if p != "p3" else "wrong" for p in prompts]

    result = evaluate_generations(examples, complete, [("exact", 1.0, exact)], exact, batch=2)
    assert completed == [2, 2, 1]
    assert result["accuracy"] == result["reward"] == pytest.approx(0.8)
    assert result["num_examples"] == 5 and result["rewards/exact/mean"] == pytest.approx(0.8)
    assert evaluate_generations([], complete, [], None, batch=2) == {}


def test_timing_metrics_from_the_steps_clock():
    metrics = timing_metrics([0.0, 1.0, 1.5, 2.0], samples=4, tokens=100, generated=60,
                             learning_rate=1e-4, skipped_steps=1)
    assert metrics["step_time"] == 2.0 and metrics["timing/reward"] == 0.5
    assert metrics["throughput/tokens_per_second"] == 50.0 and metrics["throughput/rollout_tokens_per_second"] == 60.0
    assert "loss_scale" not in metrics and metrics["skipped_steps"] == 1


def test_pass_clock_adds_up_named_passes_and_starts_again_when_taken(monkeypatch):
    ticks = iter([10.0, 10.5, 20.0, 20.25, 30.0, 31.0])
    monkeypatch.setattr("engine.algorithms.step_metrics.time.perf_counter", lambda: next(ticks))
    clock = PassClock()
    for name in ("reference", "reference", "after_update"):
        with clock.timed(name):
            pass
    assert clock.take() == {"timing/reference": 0.75, "timing/after_update": 1.0}
    assert clock.take() == {}


def test_rollout_outputs_as_samples_show_a_per_token_advantage_by_its_first_token():
    outputs = RolloutStepOutputs(prompts=["p"] * 4, completions=list("abcd"), totals=[1.0, 0.0, 0.5, 0.0],
                                 components={"r": [1.0, 0.0, 0.5, 0.0]}, rollout=None,
                                 advantages=torch.zeros(4), record_rows=[])
    per_token = torch.tensor([[0.5, 0.1], [-0.5, 0.2], [0.0, 0.0], [1.0, 1.0]])
    samples = outputs.samples(per_token, group_size=2, count=3)
    assert [(s["group"], s["completion"], s["advantage"]) for s in samples] == [(0, "a", 0.5), (0, "b", -0.5),
                                                                              (1, "c", 0.0)]


def test_run_events_write_logged_metrics_and_rank_zero_alone(tmp_path):
    from engine.alarms.config import AlarmsConfig

    events = RunEvents(AlarmWatcher(AlarmsConfig()))
    (tmp_path / "main").mkdir()
    events.open(tmp_path / "main", "none", is_main=True)
    events.metrics(1, {"loss": 1.0}, logged=False)
    events.metrics(2, {"loss": 0.5}, logged=True)
    events.evaluation(2, {})  # no evaluation: no event
    events.close()
    assert [(e["type"], e["step"]) for e in rundir.read_events(tmp_path / "main")] == [("metrics", 2)]
    other = RunEvents(AlarmWatcher(AlarmsConfig()))
    (tmp_path / "other").mkdir()
    other.open(tmp_path / "other", "none", is_main=False)
    other.metrics(1, {"loss": 1.0}, logged=True)
    other.close()
    assert not (tmp_path / "other" / rundir.EVENTS_FILE).exists()
