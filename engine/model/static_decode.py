"""A decode step the GPU can replay (issue 42): the `static` and `captured` decode paths.

The plain path (engine/model/rollout.py) runs one Python-driven forward a token over the
rows still generating: on a GPU it is bound by kernel launches and host syncs (58 ms a
step for 64 rows of a 0.5B model, docs/gpu.md). Here every shape stays fixed through a
rollout so that the step can be recorded once as a CUDA graph and replayed:
- the KV cache is a preallocated StaticCache (engine/model/kv_cache.py) of a fixed number
  of columns, its write position a tensor;
- positions and the attention mask are tensors (the mask covers every column: the causal
  mask hides the ones not written yet);
- rows that have ended stay in the batch, masked (they write padding, logprob 0);
- the batch is padded up to a bucket (`batch_bucket`) and the cache's length rounded up
  (`cache_bucket`), so rollouts of nearby sizes reuse one recorded graph;
- a token is drawn on the device from one uniform number a row (rollout.draw_tokens), the
  numbers drawn outside the step from the run's generator, for the real rows only: the
  same numbers, in the same order, as the plain path draws, hence the same tokens.
The host looks at whether every row has ended once every CHECK_EVERY steps, not every step.

Each distinct prompt of a GRPO group is still encoded once; its keys and values are
copied to the rows that share it.

`decode_step` is one function for every device: eager on the CPU (`static`), and under
torch.compile(mode="reduce-overhead", fullgraph=True) on CUDA (`captured`), which records
it as a CUDA graph.
"""

from __future__ import annotations

import logging

import torch

from engine.model.kv_cache import filled_static_cache
from engine.model.sampling import cache_keyword, draw_tokens, positions_from_mask, returned_cache, step_uniforms
from engine.model.tensors import completion_mask

log = logging.getLogger(__name__)

DECODE_SETTINGS = ("auto", "plain", "static", "captured")
# `auto` captures only rollouts this long or longer: compiling and recording a step costs
# seconds once per shape (batch bucket, cache length), which a few tokens do not repay.
CAPTURE_MIN_TOKENS = 32
CHECK_EVERY = 16  # decode steps between the host's looks at whether every row has ended
# The cache's length is rounded up to a multiple of this: prompts of a run differ in width from
# batch to batch, and each length is another graph to compile and record.
CACHE_COLUMNS = 128
# Static caches kept between captured rollouts (their buffers are what the graph replays): one, since
# it stays allocated through the update (at Qwen2.5-0.5B, 64 rows x 384 columns: 0.28 GiB in bf16).
KEPT_CACHES = 1


def decode_path(setting: str, device, max_new_tokens: int, sharded: bool = False) -> str:
    """The decode path a rollout takes: `plain`, `static` or `captured`.

    `auto`: captured on CUDA for rollouts of at least CAPTURE_MIN_TOKENS tokens, plain
    otherwise (on a CPU nothing launches kernels to save, and the plain path drops ended
    rows) and for a model sharded across processes (its passes are collectives, which
    this step has not been tried with). `captured` off CUDA runs the same step uncaptured
    (`static`): CUDA graphs exist on CUDA only. Once a capture has failed in this process,
    `auto` decodes plainly (capture_failed).

    >>> decode_path("auto", "cuda:0", 256), decode_path("auto", "cpu", 256), decode_path("captured", "cpu", 8)
    ('captured', 'plain', 'static')
    """
    if setting not in DECODE_SETTINGS:
        raise ValueError(f"model.decode: {setting!r} is not one of {', '.join(DECODE_SETTINGS)}")
    cuda = torch.device(device).type == "cuda"
    if setting == "auto":
        worth_it = max_new_tokens >= CAPTURE_MIN_TOKENS and not sharded and not _capture_broken
        return "captured" if cuda and worth_it else "plain"
    if setting == "captured" and not cuda:
        return "static"
    return setting


def batch_bucket(rows: int) -> int:
    """The batch a step runs: `rows` rounded up to a power of two up to 64, then to a
    multiple of 64, so that a few recorded graphs cover every batch size.

    >>> [batch_bucket(n) for n in (1, 3, 8, 48, 64, 65, 200)]
    [1, 4, 8, 64, 64, 128, 256]
    """
    if rows <= 64:
        return 1 << (rows - 1).bit_length()
    return -(-rows // 64) * 64


def cache_bucket(columns: int) -> int:
    """The cache's length: `columns` (prompt + new tokens) rounded up to CACHE_COLUMNS.

    >>> cache_bucket(64 + 256), cache_bucket(21)
    (384, 128)
    """
    return -(-columns // CACHE_COLUMNS) * CACHE_COLUMNS


def decode_step(model, cache, cache_kw: str, token, positions, attention, uniforms, ended, eos, *, pad_token_id: int,
                temperature: float, top_k: int, top_p: float, greedy: bool):
    """One decode step of fixed shape: feed each row's last token (b,) at its position
    (b, 1) with the whole-cache attention mask (b, L), then draw the next token from the
    logits with `uniforms` (b,). Rows already `ended` (b,) bool write `pad_token_id` with
    logprob 0. Returns (next token (b,), its logprob (b,), ended (b,)). No host sync, no
    shape that depends on the data: torch.compile(fullgraph=True) takes it whole."""
    out = model(input_ids=token[:, None], attention_mask=attention, position_ids=positions, use_cache=True,
                **{cache_kw: cache})
    next_token, logprob = draw_tokens(out.logits[:, -1, :], uniforms, temperature=temperature, top_k=top_k,
                                      top_p=top_p, greedy=greedy)
    next_token = torch.where(ended, torch.full_like(next_token, pad_token_id), next_token)
    logprob = logprob.masked_fill(ended, 0.0)
    ended = ended | (next_token[:, None] == eos[None, :]).any(-1)
    return next_token, logprob, ended


_captured_step = None  # decode_step compiled for CUDA graphs, made on first use
_capture_broken = False  # a capture failed in this process: `auto` decodes plainly from then on
_kept_caches: dict[tuple, object] = {}


def captured_step():
    """decode_step under torch.compile(mode="reduce-overhead"): recorded as a CUDA graph
    per shape and replayed."""
    global _captured_step
    if _captured_step is None:
        _captured_step = torch.compile(decode_step, mode="reduce-overhead", fullgraph=True, dynamic=False)
    return _captured_step


def capture_failed(error: Exception) -> None:
    """`auto` chose to capture and compiling or recording failed (a model or a torch
    version the compiler does not take): say so once, and decode plainly from then on.
    An explicit `captured` raises instead."""
    global _capture_broken
    if not _capture_broken:
        log.warning("model.decode auto: capturing the decode step failed (%s: %s); decoding plainly. "
                    "Set model.decode: plain to skip the attempt.", type(error).__name__, error)
    _capture_broken = True


def _kept_cache(key: tuple):
    return _kept_caches.get(key)


def _keep_cache(key: tuple, cache) -> None:
    _kept_caches.pop(key, None)
    _kept_caches[key] = cache
    while len(_kept_caches) > KEPT_CACHES:
        _kept_caches.pop(next(iter(_kept_caches)))


def _base_model(model):
    """The causal LM under a peft wrapper (its LoRA layers inside): the step calls it
    directly, so the traced code is transformers', not peft's dispatch."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@torch.no_grad()
def static_sample(model, prompt_ids, prompt_mask, *, max_new_tokens: int, eos_token_ids: list[int],
                  pad_token_id: int, temperature: float, top_p: float, top_k: int, greedy: bool,
                  generator: torch.Generator | None, group_size: int, finished_everywhere=None,
                  captured: bool = False) -> tuple[torch.Tensor, torch.Tensor] | None:
    """rollout.sample's tokens (B, T') and their logprobs (B, T') by the fixed-shape step
    (its arguments, less `decode`), captured as a CUDA graph when `captured`; T' is the
    longest row's length, as the plain path's. Rows hold what they drew after their end
    token as padding with logprob 0. None, after a warning, for a model whose cache cannot
    be static: the caller decodes plainly."""
    batch, width = prompt_ids.shape
    device = prompt_ids.device
    base = _base_model(model)
    rows = batch_bucket(batch)
    length = cache_bucket(width + max_new_tokens)
    # Each real row's prompt (`group_size` rows share one); the padding rows repeat prompt 0.
    prompt_of = torch.arange(rows, device=device).clamp(max=batch - 1) // group_size
    prompt_of[batch:] = 0
    firsts = torch.arange(0, batch, group_size, device=device)
    mask = prompt_mask[firsts].long()
    positions = positions_from_mask(mask)
    out = model(input_ids=prompt_ids[firsts], attention_mask=mask, position_ids=positions, use_cache=True,
                logits_to_keep=1)
    key = (id(base), rows, length, out.logits.dtype, str(device))
    cache = filled_static_cache(base.config, returned_cache(out), prompt_of, length,
                                reuse=_kept_cache(key) if captured else None)
    if cache is None:
        log.warning("model.decode: this model's KV cache cannot be static (a sliding-window or linear-attention "
                    "layer); decoding plainly")
        return None
    if captured:
        _keep_cache(key, cache)
    step = captured_step() if captured else decode_step
    attention = torch.ones(rows, length, dtype=torch.long, device=device)
    attention[:, :width] = mask[prompt_of]
    next_pos = positions[prompt_of][:, -1:] + 1  # (rows, 1)
    eos = torch.tensor(eos_token_ids, device=device)
    sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, greedy=greedy)

    def uniforms() -> torch.Tensor:
        # the real rows' numbers, as the plain path draws them; the padding rows' are never used
        drawn = step_uniforms(batch, greedy, generator, device)
        return torch.cat([drawn, drawn.new_zeros(rows - batch)])

    completion_ids = torch.full((batch, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    logprobs = torch.zeros(batch, max_new_tokens, device=device)
    token, logprob = draw_tokens(out.logits[prompt_of][:, -1, :], uniforms(), **sampling)
    padding = torch.arange(rows, device=device) >= batch
    ended = padding | torch.isin(token, eos)
    completion_ids[:, 0], logprobs[:, 0] = token[:batch], logprob[:batch]
    for t in range(1, max_new_tokens):
        if t % CHECK_EVERY == 0:
            finished = bool(ended.all())  # the host sync, once every CHECK_EVERY steps
            if finished_everywhere(finished) if finished_everywhere is not None else finished:
                break
        if captured:
            torch.compiler.cudagraph_mark_step_begin()
        token, logprob, ended = step(base, cache, cache_keyword(base), token, next_pos + (t - 1), attention,
                                     uniforms(), ended, eos, pad_token_id=pad_token_id, **sampling)
        completion_ids[:, t], logprobs[:, t] = token[:batch], logprob[:batch]
        if captured:  # a replay overwrites its outputs: keep the ones the next step reads
            token, ended = token.clone(), ended.clone()
    # The plain path's width: the longest row, to its end token (one host sync, at the end).
    steps = int(completion_mask(completion_ids, eos_token_ids).sum(-1).max())
    return completion_ids[:, :steps], logprobs[:, :steps]
