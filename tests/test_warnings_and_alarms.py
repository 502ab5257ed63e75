"""Deprecations raised through our calls fail the suite (tests/conftest.py's hook), the
engine's calls use the current APIs, and alarm texts say which value they quote."""

import sys
import textwrap

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import conftest
from engine.alarms import AlarmsConfig
from engine.alarms.detectors import DETECTORS, History
from engine.model.forward import completion_logits
from engine.model.rollout import cache_keyword, returned_cache, sample

@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=32, vocab_size=20)).eval()


# --- the hook ---------------------------------------------------------------------------


@pytest.fixture
def helper_as_our_code(tmp_path, monkeypatch):
    """A helper module that calls a deprecated torch API, counted as our code."""
    (tmp_path / "deprecated_helper.py").write_text(textwrap.dedent("""
        import torch

        def old_autocast():
            with torch.cuda.amp.autocast(enabled=False):  # FutureWarning (@deprecated): torch.amp.autocast
                return 1

        def old_checkpointing_flag(model):
            return model.is_gradient_checkpointing  # FutureWarning: is_activation_checkpointing
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(conftest, "OUR_CODE", [*conftest.OUR_CODE, tmp_path])
    monkeypatch.delitem(sys.modules, "deprecated_helper", raising=False)
    import deprecated_helper

    return deprecated_helper


def test_a_deprecated_library_call_through_our_code_is_an_error(helper_as_our_code, gpt2):
    with pytest.raises(FutureWarning, match=r"torch.amp.autocast.*raised through our call at .*deprecated_helper.py:5"):
        helper_as_our_code.old_autocast()
    with pytest.raises(FutureWarning, match=r"is_gradient_checkpointing.*our call at .*deprecated_helper.py:9"):
        helper_as_our_code.old_checkpointing_flag(gpt2)


def test_the_same_calls_from_elsewhere_are_only_reported(gpt2):
    with pytest.warns(FutureWarning, match="torch.amp.autocast"):
        with torch.cuda.amp.autocast(enabled=False):
            pass
    with pytest.warns(FutureWarning, match="is_gradient_checkpointing"):
        assert not gpt2.is_gradient_checkpointing


# --- the engine's calls -----------------------------------------------------------------


def grouped(model):
    ids = torch.randint(3, 20, (2, 5)).repeat_interleave(2, dim=0)  # two prompts, twice each
    mask = torch.ones_like(ids)
    return sample(model, ids, mask, max_new_tokens=4, eos_token_ids=[1], pad_token_id=0,
                  generator=torch.Generator().manual_seed(0), group_size=2)


def test_sampling_and_the_shared_prefix_pass_pass_the_cache_without_deprecations(gpt2):
    rollout = grouped(gpt2)  # a deprecated keyword would raise here (the hook)
    logits = completion_logits(gpt2, rollout, slice(0, 4), group_size=2, shared_prefix=True)
    assert logits.logprobs(rollout.completion_ids).shape == rollout.completion_ids.shape


def test_the_old_cache_keyword_would_fail_the_suite(gpt2, monkeypatch):
    """What the two tests above guard against: `past_key_values`, deprecated in
    transformers 5.2x, raised through engine/model/rollout.py."""
    if cache_keyword(gpt2) != "cache":
        pytest.skip("this transformers still takes past_key_values")
    monkeypatch.setattr("engine.model.rollout.cache_keyword", lambda model: "past_key_values")
    with pytest.raises(FutureWarning, match=r"past_key_values.*raised through our call at .*engine/model/rollout.py"):
        grouped(gpt2)


def test_the_cache_keyword_is_read_from_the_forward_signature(gpt2):
    class OldStyle(torch.nn.Module):  # remote code written for transformers 4
        def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=None):
            ...

    assert cache_keyword(gpt2) == "cache"
    assert cache_keyword(OldStyle()) == "past_key_values"

    class OldOutput:  # an output without the `cache` field
        past_key_values = "the cache"

    assert returned_cache(OldOutput()) == "the cache"


def test_loading_with_lora_raises_no_deprecation():
    """peft 0.21 reads transformers' deprecated `is_gradient_checkpointing` while it wraps
    the model: quieted at that one call (engine/model/loading.py), or the hook raises here."""
    from engine.model.loading import load_model
    from engine.model.config import ModelConfig

    loaded = load_model(ModelConfig(name_or_path="builtin:tiny"), gradient_checkpointing=True)
    assert loaded.gradient_checkpointing


# --- alarm texts: which curve, and raw values --------------------------------------------

CFG = AlarmsConfig(window=4)


def history(**series) -> History:
    """A history whose step i (from 1) has series[key][i-1] for every key."""
    n = len(next(iter(series.values())))
    return History(steps=list(range(1, n + 1)), metrics=[{k: v[i] for k, v in series.items()} for i in range(n)])


def saw(kind, h) -> str:
    return DETECTORS[kind](h, CFG).saw


def test_the_kl_alarm_quotes_the_raw_value_of_its_step():
    """The dashboard's smoothed KL peaked at 0.5 while the alarm said "KL was 1.17": the text
    names the curve and says the number is the step's own, unsmoothed."""
    text = saw("kl_spike", history(kl=[0.1, 0.1, 0.1, 0.1, 1.17]))
    assert text.startswith("kl (raw, step 5) was 1.17, 11.7x its raw mean of 0.1 over steps 1-4")


@pytest.mark.parametrize("series, quoted", [
    ({"frac_reward_zero_std": [1, 1, 1, 0.8]}, "frac_reward_zero_std (raw, mean over steps 1-4) was 95%"),
    ({"completions/clipped_ratio": [1, 1, 1, 0.8]}, "completions/clipped_ratio (raw, mean over steps 1-4) was 95%"),
    ({"grad_norm": [0.0] * 4}, "grad_norm (raw, mean over steps 1-4) was 0"),
])
def test_no_learning_signal_quotes_raw_window_means(series, quoted):
    assert saw("no_learning_signal", history(**series)).startswith(quoted)


def test_entropy_length_hacking_and_held_out_alarms_say_raw():
    assert saw("entropy_collapse", history(entropy=[1, 1, 1, 1, 0.2, 0.1, 0.2, 0.1])).startswith(
        "entropy (raw, mean over steps 5-8) was 0.15 nats a token, 15% of its raw mean of 1 over steps 1-4")

    h = history(**{"completions/mean_length": [10, 10, 10, 10, 15, 16, 16, 17]})
    h.evals = [(0, {"accuracy": 0.3}), (8, {"accuracy": 0.31})]
    assert saw("length_drift", h) == (
        "completions/mean_length (raw, mean over steps 1-4) was 10 tokens and completions/mean_length (raw, mean "
        "over steps 5-8) 16, +60%, while the held-out accuracy stayed at 0.3 -> 0.31 (raw evaluations at steps 0 "
        "and 8)")

    lengths = [10, 10, 11, 11, 12, 13, 14, 15]
    assert saw("reward_hacking", history(reward=[x / 10 for x in lengths], **{"completions/mean_length": lengths})
               ).startswith("reward (raw, means over steps 1-4 and 5-8) went 1.05 -> 1.35 and "
                            "completions/mean_length (raw, the same means) 10.5 -> 13.5 tokens (+29%)")

    h = history(reward=[0.2, 0.2, 0.2, 0.2, 0.5, 0.5, 0.5, 0.5])
    h.evals = [(4, {"accuracy": 0.5}), (8, {"accuracy": 0.35})]
    assert saw("eval_falling", h).startswith(
        "the held-out accuracy fell from 0.5 to 0.35 (raw evaluations at steps 4 and 8) while reward (raw, mean "
        "over steps 1-4) was 0.2 and reward (raw, mean over steps 5-8) 0.5")

    h = history(skipped_steps=[0, 0, 1])
    assert "skipped_steps (raw, step 3) is 1" in saw("nonfinite_steps", h)



# --- the window's event loop: no full collection over the libraries ------------------------


def test_the_window_takes_its_startup_heap_out_of_the_collectors_reach(monkeypatch, tmp_path):
    """A full garbage collection walked the ~95,000 objects of the libraries and the window
    every time: the dashboard's longest stall, 37 ms (bench/workbench_bench.py)."""
    import gc

    from PySide6.QtWidgets import QApplication

    from workbench import app

    frozen = []

    def exec_(*_args):  # the event loop: note what is frozen, then close at once
        frozen.append(gc.get_freeze_count())
        gc.unfreeze()
        for window in QApplication.topLevelWidgets():
            window.ask = lambda *a: "Discard"
            window.close()
        return 0

    monkeypatch.setenv("RL_WORKBENCH_CONFIG_DIR", str(tmp_path))
    monkeypatch.setattr(QApplication, "exec", exec_)
    gc.unfreeze()  # what the test session froze (tests/conftest.py), counted again below
    try:
        assert app.main([str(conftest.ROOT / "presets" / "grpo-sort.yaml")]) == 0
        assert frozen and frozen[0] > 50_000
    finally:  # the session's heap out of reach again, as conftest.py left it
        gc.collect()
        gc.freeze()
