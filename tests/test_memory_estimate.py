"""The memory estimate (engine/model/memory_estimate.py): hand-worked parts, and one measured
training step of the built-in model on the CPU (bench/memory_check.py measures)."""

from __future__ import annotations

import ast
import math
import re
import importlib.util
from pathlib import Path

import pytest

from engine.model.memory_estimate import (
    GIB, MIB, MemoryEstimate, count_parameters, estimate_memory, lora_parameters, model_shape, update_rows,
    weight_bytes,
)
from engine.preset.schema import load_preset, preset_from_dict

ROOT = Path(__file__).resolve().parents[1]

TINY_LLAMA = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
              "num_key_value_heads": 1, "intermediate_size": 16, "vocab_size": 10}
QWEN25_05B = {"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
              "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
              "tie_word_embeddings": True}


def preset(**sections):
    data = {"model": {"name_or_path": "some/model"}, "data": {"task": "sort", "num_train": 10, "num_eval": 0}}
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return preset_from_dict(data)


def test_shape_reads_gpt2_llama_and_text_config_names():
    gpt2 = model_shape({"model_type": "gpt2", "n_embd": 128, "n_layer": 4, "n_head": 4, "n_inner": None,
                        "vocab_size": 101})
    assert (gpt2.hidden, gpt2.layers, gpt2.intermediate, gpt2.kv_dim, gpt2.tied) == (128, 4, 512, 128, True)
    llama = model_shape({"text_config": TINY_LLAMA})
    assert (llama.hidden, llama.kv_dim, llama.head_dim, llama.tied, llama.gpt2) == (8, 4, 4, False, False)
    with pytest.raises(ValueError, match="hidden_size"):
        model_shape({"model_type": "llama"})


def test_lora_parameters_by_hand():
    s = model_shape(TINY_LLAMA)  # h 8, kv 4 (1 head of 4), I 16
    # per layer, r (in + out): q 8+8, k 8+4, v 8+4, o 8+8, gate 8+16, up 8+16, down 16+8 = 128
    assert lora_parameters(s, r=2) == 2 * 2 * 128
    assert lora_parameters(s, r=2, targets=["q_proj", "v_proj"]) == 2 * 2 * (16 + 12)
    assert lora_parameters(s, r=2, targets=["nope"]) == 0
    # GPT-2: c_attn 8+24, c_proj twice (8+8, 32+8), c_fc 8+32
    gpt2 = model_shape({"n_embd": 8, "n_layer": 1, "n_head": 2, "vocab_size": 10})
    assert lora_parameters(gpt2, r=1) == 32 + 16 + 40 + 40


def test_parameter_count_by_hand():
    s = model_shape(TINY_LLAMA)
    per_layer = 8 * 8 + 2 * 8 * 4 + 8 * 8 + 3 * 8 * 16
    assert count_parameters(s) == 2 * per_layer + 2 * 10 * 8  # untied: embeddings and head
    qwen = count_parameters(model_shape(QWEN25_05B))
    assert 0.48e9 < qwen < 0.50e9  # Qwen2.5-0.5B: 494M


def test_weight_bytes_by_dtype_and_4bit():
    assert weight_bytes(10**9, 2) == 2 * 10**9  # bf16
    assert weight_bytes(10**9, 4) == 4 * 10**9  # fp32
    # 4 bit: 0.5 byte + an fp32 absmax per 64 weights; embeddings stay 16-bit
    assert weight_bytes(10**9, 2, True, 10**8) == round(9 * 10**8 * 0.5625 + 2 * 10**8)


def test_dtype_follows_device_and_4bit_only_on_cuda():
    p = preset(model={"dtype": "auto"})
    cuda = estimate_memory(p, QWEN25_05B, prompt_tokens=100, device="cuda")
    cpu = estimate_memory(p, QWEN25_05B, prompt_tokens=100, device="cpu")
    assert cpu.weights == 2 * cuda.weights
    quant = estimate_memory(preset(model={"load_in_4bit": True}), QWEN25_05B, prompt_tokens=100, device="cuda")
    assert quant.weights < cuda.weights / 1.5


def test_peak_is_the_larger_phase_plus_margin():
    parts = dict(weights=10, optimizer=2, value_head=0, activations=50, activations_without_checkpointing=50,
                 activations_with_checkpointing=5, logits=3, sampling_cache=80, sampling_logits=1,
                 margin=4, gradient_checkpointing=False, device="cpu")
    e = MemoryEstimate(**parts)
    assert (e.update, e.rollout, e.peak_phase, e.total) == (65, 93, "rollout", 97)
    e = MemoryEstimate(**(parts | {"sampling_cache": 10}))
    assert (e.peak_phase, e.total) == ("update", 69)
    assert e.describe().startswith("needs about 0.0 MiB (update: weights 0.0,")


def test_gradient_checkpointing_lowers_the_update():
    config = {**QWEN25_05B}
    off = estimate_memory(preset(training={"gradient_checkpointing": False}), config, prompt_tokens=200)
    on = estimate_memory(preset(training={"gradient_checkpointing": True}), config, prompt_tokens=200)
    assert on.activations < off.activations / 4
    assert on.update < off.update and on.gradient_checkpointing and not off.gradient_checkpointing
    # auto: on from 1B parameters (Qwen2.5-0.5B has 494M)
    auto = estimate_memory(preset(), config, prompt_tokens=200)
    assert not auto.gradient_checkpointing
    assert estimate_memory(preset(), config, parameters=7 * 10**9, prompt_tokens=200).gradient_checkpointing


def test_micro_batches_and_dpo_rows():
    assert update_rows(preset(training={"batch_size": 64, "micro_batch_size": 8})) == (8, 1)  # 8 per prompt
    assert update_rows(preset(training={"batch_size": 64, "micro_batch_size": "auto"})) == (64, 8)
    assert update_rows(preset(algorithm={"name": "dpo"}, training={"batch_size": 16, "micro_batch_size": 4})) == (8, 4)
    ppo = preset(algorithm={"name": "ppo", "num_mini_batches": 4}, training={"batch_size": 64})
    assert update_rows(ppo) == (16, 16)
    smaller = estimate_memory(preset(training={"micro_batch_size": 8}), QWEN25_05B, prompt_tokens=200)
    assert smaller.activations < estimate_memory(preset(), QWEN25_05B, prompt_tokens=200).activations / 4


def test_qwen25_05b_default_grpo_is_plausible():
    # GRPO defaults (64 completions of 256 tokens, 8 per prompt, r 16), bf16 on a GPU,
    # 200-token prompts. Weights about 0.92 GiB; the whole batch in one micro-batch
    # without checkpointing keeps some 36 GiB of activations (24304 bf16 and 10240 fp32
    # elements a token and layer: 6 x 896 + 4864 LoRA inputs cast to fp32 by peft);
    # micro_batch_size 8 about 4.6 GiB.
    whole = estimate_memory(preset(), QWEN25_05B, prompt_tokens=200, device="cuda")
    assert 0.85 * GIB < whole.weights < 1.0 * GIB
    assert 35 * GIB < whole.total < 50 * GIB and whole.peak_phase == "update"
    micro = estimate_memory(preset(training={"micro_batch_size": 8}), QWEN25_05B, prompt_tokens=200, device="cuda")
    assert 5 * GIB < micro.total < 10 * GIB
    # the logits' working set is bounded by the engine's chunks: 150k vocabulary x 2048 tokens
    assert micro.logits == (1 << 26) * 4 * 3


def test_bf16_counts_the_fp32_copies_of_lora_inputs():
    # Per token and layer at Qwen2.5-0.5B's shape: q, k, v, gate, up read the hidden state
    # (896 each), o the attention output (896), down the MLP's (4864): 10240 fp32 copies,
    # as many bytes as 20480 bf16 elements beside saved_per_token's 24304.
    from engine.model.memory_estimate import fp32_copies_per_token, model_shape

    assert fp32_copies_per_token(model_shape(QWEN25_05B)) == 6 * 896 + 4864
    assert fp32_copies_per_token(model_shape(QWEN25_05B), ["q_proj", "v_proj"]) == 2 * 896
    args = dict(preset=preset(training={"micro_batch_size": 8}), config=QWEN25_05B, prompt_tokens=200)
    bf16 = estimate_memory(**args, device="cuda")
    fp32 = estimate_memory(**{**args, "preset": preset(model={"name_or_path": "m", "dtype": "float32"},
                                                         training={"micro_batch_size": 8})}, device="cuda")
    assert bf16.activations / fp32.activations == pytest.approx((24304 * 2 + 10240 * 4) / (24304 * 4), rel=0.02)


def test_the_hub_grpo_preset_is_not_underestimated_against_the_h100_peak():
    # Measured on an H100 (docs/gpu.md, 2026-11-24): presets/hub/grpo-gsm8k at Qwen2.5-0.5B's
    # shape, 512-token completions, micro-batch 16, bf16: torch.cuda.max_memory_allocated
    # 18.17 GiB (prompts of about 100 tokens). The estimate said 13.0 before it counted
    # peft's fp32 copies; it must not say less than the peak, nor much more.
    hub = load_preset(ROOT / "presets" / "hub" / "grpo-gsm8k-qwen2.5-0.5b.yaml", ["data.num_train=32"])
    estimate = estimate_memory(hub, QWEN25_05B, prompt_tokens=100, device="cuda")
    assert 18.17 * GIB <= estimate.total <= 1.3 * 18.17 * GIB


def test_module_is_torch_free():
    tree = ast.parse((ROOT / "engine" / "model" / "memory_estimate.py").read_text(encoding="utf-8"))
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert names <= {"__future__", "math", "dataclasses", "json", "pathlib", "engine"}, names


def _memory_check():
    spec = importlib.util.spec_from_file_location("memory_check", ROOT / "bench" / "memory_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Every prompt as long as the longest, which the estimate assumes (4 random prompts of
# 3 to 6 digits would leave it 30 % above a step that never saw a 6-digit prompt).
SAME_LENGTHS = ["data.task_options.min_len=6", "data.task_options.max_len=6"]


def test_estimate_within_25_percent_of_a_measured_grpo_step_on_cpu():
    # A memory figure, not a timing: the peak of live tensor bytes during one GRPO step of
    # the built-in model (fp32, CPU), measured through the profiler's allocation events.
    bench = _memory_check()
    result = bench.check(ROOT / "presets" / "grpo-sort.yaml",
                         ["training.batch_size=32", "data.num_train=100", *SAME_LENGTHS] + bench.TIGHT)
    assert result["measured"] > result["before"] + 5 * MIB  # the step's activations were seen
    assert 0.75 <= result["ratio"] <= 1.25, result["describe"]


def test_validate_fails_when_the_estimate_exceeds_the_gpu(monkeypatch, capsys):
    # No GPU here: torch.cuda says there is one of 64 MiB, less than the preset needs
    # (the CUDA context alone is counted as 512 MiB).
    import types

    import torch

    from engine.commands.validate import validate

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: types.SimpleNamespace(name="Tiny GPU", total_memory=64 * MIB))
    preset = str(ROOT / "presets" / "grpo-sort.yaml")
    assert validate(preset, ["data.num_train=50", "data.num_eval=4"]) == 2
    err = capsys.readouterr().err
    assert "this GPU (Tiny GPU) has 0.1 GiB" in err
    for field in ("training.micro_batch_size", "training.gradient_checkpointing",
                  "algorithm.max_completion_length", "model.load_in_4bit"):
        assert field in err
    # a GPU large enough: a line on stdout, exit 0
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: types.SimpleNamespace(name="Big GPU", total_memory=80 * GIB))
    assert validate(preset, ["data.num_train=50", "data.num_eval=4"]) == 0
    assert "memory: needs about" in capsys.readouterr().out


def test_several_processes_each_count_their_share_and_their_fsdp_shard():
    # With --nproc-per-node the estimate was the whole batch and the whole model on each
    # process, so validate refused sharded runs that fit.
    def rows(processes, **training):
        return update_rows(preset(training={"batch_size": 64, **training}), processes)

    assert rows(2) == (32, 4) and rows(3) == (24, 3)  # 8 groups of 8: 4 + 4; 3 + 3 + 2
    assert rows(2, micro_batch_size=8) == (8, 1) and rows(4, micro_batch_size=32) == (16, 2)
    dpo = preset(algorithm={"name": "dpo"}, training={"batch_size": 16})
    assert update_rows(dpo, 4) == (8, 4)  # 4 pairs a process, two rows each
    ppo = preset(algorithm={"name": "ppo", "num_mini_batches": 4}, training={"batch_size": 64})
    assert update_rows(ppo, 2) == (8, 8)  # a mini-batch of 16, 8 a process

    one = estimate_memory(preset(), QWEN25_05B, prompt_tokens=200)
    two = estimate_memory(preset(), QWEN25_05B, prompt_tokens=200, processes=2)
    assert two.weights == one.weights and two.optimizer == one.optimizer  # data parallel: whole copies
    assert two.activations < 0.55 * one.activations
    four = estimate_memory(preset(training={"fsdp": True}), QWEN25_05B, prompt_tokens=200, processes=4)
    s = model_shape(QWEN25_05B)
    embeddings = s.vocab * s.hidden * 2  # tied, bf16: whole on every process
    layers = one.weights - embeddings
    assert four.weights == embeddings + math.ceil(layers / 4) + 2 * (layers // 24)
    assert four.optimizer == math.ceil(one.optimizer / 4)


def test_validate_counts_each_process(monkeypatch, capsys):
    # A GPU between what one process needs alone and what each of two needs: refused for
    # one process, valid for two, and the line says it is per process.
    import types

    import torch

    from engine.model.memory_estimate import estimate_for_folder
    from engine.model.loading import resolve_model_path
    from engine.preset.schema import load_preset
    from engine.commands.validate import validate

    path, overrides = str(ROOT / "presets" / "grpo-sort.yaml"), ["data.num_train=50", "data.num_eval=4"]
    assert validate(path, overrides) == 0
    longest = int(re.search(r"longest prompt (\d+) tokens", capsys.readouterr().out).group(1))
    loaded = load_preset(path, overrides)
    folder = resolve_model_path("builtin:tiny")
    alone, each = (estimate_for_folder(loaded, folder, prompt_tokens=longest, processes=n).total for n in (1, 2))
    assert each < alone
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: types.SimpleNamespace(name="Mid GPU", total_memory=(alone + each) // 2))
    assert validate(path, overrides) == 2
    assert "this GPU (Mid GPU)" in capsys.readouterr().err
    assert validate(path, overrides, processes=2) == 0
    assert "memory: each of 2 processes needs about" in capsys.readouterr().out
