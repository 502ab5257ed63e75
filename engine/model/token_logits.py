"""The logits that predict completion tokens, never all at once.

A (B, T, V) fp32 logit tensor is where RL trainers run out of memory: 16 completions of
512 tokens over Qwen's 151,936-token vocabulary is 5 GB, and the backward pass of a
log-softmax keeps another copy. `TokenLogits` holds the last hidden states (B, T, H)
and the output head instead, and computes what a trainer needs (the sampled tokens'
logprobs, entropy, the top-5 for the inspector) over chunks of at most
LOGIT_CHUNK_ELEMENTS logits. Under autograd no chunk's logits are kept for the backward
pass: for the usual head (a frozen linear layer) each chunk's gradient is worked out in
the forward pass (_LinearLogprob), for any other its logits are recomputed in the
backward pass (checkpointed). The peak is one chunk's, whatever the batch, and the
results and gradients are those of the full tensor.

All maths in fp32 (a bf16 model's hidden states are cast per chunk).

The lean update (LEAN_UPDATE, on unless the environment sets RL_ENGINE_LEAN_UPDATE=0):
for the usual head, the differentiable pass gives in the same chunk pass what a step
reads besides the logprobs (each token's entropy, the logits' sum, the top-5 of the rows
the inspector records), so no step runs the LM head over the rows a second time, and a
chunk takes one exponential, not two (_fused_chunk). Off: the earlier path, every
quantity its own pass (for before/after figures).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from engine.model.tensors import entropy_from_logits, selective_log_softmax
from engine.model.memory_estimate import LOGIT_CHUNK_ELEMENTS  # one number for the engine and the estimate

__all__ = ["LEAN_UPDATE", "LOGIT_CHUNK_ELEMENTS", "TokenLogits", "OutputHead", "output_head"]

# The switch of the lean update (module docstring); read at each pass, so a bench or a
# test can set it in-process too.
LEAN_UPDATE = os.environ.get("RL_ENGINE_LEAN_UPDATE", "1").strip() not in ("0", "false", "off")
TOP_K = 5  # the inspector's alternatives per token
# The lean pass's chunk on the CPU: 2**24 logits (110 tokens of a 152k vocabulary, 64 MiB a
# copy, two copies live) runs its matmuls as fast as 2**26 there (measured: 2.47 s against
# 2.50 s for 256 tokens, one thread) at under half the memory; smaller chunks slow the
# matmuls (27 tokens: 3.07 s). On a GPU the larger chunk keeps the kernels few and wide.
LEAN_CPU_CHUNK_ELEMENTS = 1 << 24


def _linear_log_softmax(hidden: torch.Tensor, weight: torch.Tensor, scale: float) -> torch.Tensor:
    """log_softmax(scale * hidden @ weight.T) in fp32. (n, H) -> (n, V). One function for
    the passes with and without gradients, so that at equal weights they give bit-equal
    logprobs (PPO's first ratio is exactly 1)."""
    return (F.linear(hidden, weight).float() * scale).log_softmax(-1)


class _LinearLogprob(torch.autograd.Function):
    """log p(ids) under softmax(scale * hidden @ weight.T) for one chunk, with its gradient
    with respect to `hidden` worked out in the forward pass: d log p_y / d logits is
    onehot(y) - softmax, so the backward pass only scales the (n, H) result by the
    incoming gradient. No logits are kept for backward and none are recomputed (the
    trick of fused linear cross-entropy kernels). The head's weight must be frozen."""

    @staticmethod
    def forward(ctx, hidden, weight, ids, scale: float):
        logp = _linear_log_softmax(hidden, weight, scale)  # (n, V) fp32
        chosen = logp.gather(-1, ids[:, None]).squeeze(-1)  # (n,)
        if ctx.needs_input_grad[0]:
            grad_logits = logp.exp_().neg_()  # -softmax, in place of logp
            grad_logits.scatter_add_(-1, ids[:, None], torch.ones_like(chosen)[:, None])  # onehot - softmax
            ctx.save_for_backward(((grad_logits * scale).to(weight.dtype) @ weight))  # (n, H)
        return chosen

    @staticmethod
    def backward(ctx, grad_chosen):
        (grad_hidden,) = ctx.saved_tensors
        return grad_hidden * grad_chosen[:, None].to(grad_hidden.dtype), None, None, None


def _scaled_logits(hidden: torch.Tensor, weight: torch.Tensor, scale: float) -> torch.Tensor:
    """scale * hidden @ weight.T in fp32 (fp64 for fp64 weights), (n, H) -> (n, V), scaled in place."""
    logits = F.linear(hidden, weight)
    logits = logits if logits.dtype == torch.float64 else logits.float()
    return logits.mul_(scale) if scale != 1.0 else logits


def _lean_logprobs(hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor, scale: float) -> torch.Tensor:
    """log p(ids) of one chunk without gradients, by the very operations _fused_chunk
    uses (bit-equal to its logprobs: PPO's first ratio is exactly 1)."""
    z = _scaled_logits(hidden, weight, scale)
    z.sub_(z.amax(-1, keepdim=True))
    return z.gather(-1, ids[:, None]).squeeze(-1) - z.exp().sum(-1).log()


def _fused_chunk(hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor, scale: float, top_tokens: int):
    """Everything a step reads of one chunk of logits z = scale * hidden @ weight.T, from
    one matmul and one exponential: (log p(ids) (n,), entropy (n,), sum of z (n,),
    top-5 (probs, ids) of the first `top_tokens` tokens, d log p(ids) / d hidden (n, H)).

    With z' = z - max z, e = exp(z'), s = sum e: log p(y) = z'_y - log s;
    entropy = log s - (e . z') / s; d log p_y / dz = onehot(y) - e / s.
    z is finite for a linear head of finite weights, so e . z' has no 0 * -inf."""
    z = _scaled_logits(hidden, weight, scale)
    sums = z.sum(-1)
    z.sub_(z.amax(-1, keepdim=True))
    chosen = z.gather(-1, ids[:, None]).squeeze(-1)
    top = z[:top_tokens].topk(min(TOP_K, z.shape[-1]), dim=-1) if top_tokens else None
    e = z.exp()
    s = e.sum(-1)
    log_s = s.log()
    chosen = chosen - log_s
    # e . z' by an in-place product and a sum (a batched dot is 3x slower on the CPU); z' is not needed after
    entropy = log_s - z.mul_(e).sum(-1) / s
    del z
    if top is not None:
        top = (top.values.sub_(log_s[:top_tokens, None]).exp_(), top.indices)
    # -scale * e / s, then +scale at the chosen token: the gradient of log p(ids) w.r.t. z, times scale
    e.mul_((-scale / s)[:, None])
    e.scatter_add_(-1, ids[:, None], torch.full_like(chosen, scale)[:, None])
    grad_hidden = e.to(weight.dtype) @ weight
    return chosen, entropy, sums, top, grad_hidden


class _FusedLinearLogprob(torch.autograd.Function):
    """_LinearLogprob's lean twin (_fused_chunk): log p(ids) with its gradient worked out
    in the forward pass, and the chunk's entropy, logit sums and top-5 as outputs without
    gradient. The head's weight must be frozen."""

    @staticmethod
    def forward(ctx, hidden, weight, ids, scale: float, top_tokens: int):
        chosen, entropy, sums, top, grad_hidden = _fused_chunk(hidden, weight, ids, scale, top_tokens)
        ctx.save_for_backward(grad_hidden)
        if top is None:
            top = (chosen.new_zeros(0, TOP_K), ids.new_zeros(0, TOP_K))
        ctx.mark_non_differentiable(entropy, sums, *top)
        return chosen, entropy, sums, *top

    @staticmethod
    def backward(ctx, grad_chosen, *_):
        (grad_hidden,) = ctx.saved_tensors
        return grad_hidden * grad_chosen[:, None].to(grad_hidden.dtype), None, None, None, None


class OutputHead:
    """hidden (n, H) -> logits (n, V) as the model's own forward computes them: its output
    embedding, then the final scaling or soft-capping some architectures apply (Cohere's
    logit_scale, Granite's logits_scaling, Gemma 2/3's soft-capping). `linear` is
    (weight, scale) when the logits are just scale * hidden @ weight.T with a frozen,
    bias-free weight (the fused logprob applies), else None."""

    def __init__(self, causal_lm):
        self.head = causal_lm.get_output_embeddings()
        config = causal_lm.config.get_text_config()
        self.cap = getattr(config, "final_logit_softcapping", None)
        self.scale = getattr(config, "logit_scale", None) or 1.0
        self.scale /= getattr(config, "logits_scaling", None) or 1.0
        weight, bias = getattr(self.head, "weight", None), getattr(self.head, "bias", None)
        plain = isinstance(self.head, torch.nn.Linear) and bias is None and self.cap is None
        self.linear = (weight, self.scale) if plain and not weight.requires_grad else None

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        out = self.head(hidden)
        if self.scale != 1.0:
            out = out * self.scale
        if self.cap is not None:
            out = torch.tanh(out / self.cap) * self.cap
        return out


def output_head(causal_lm) -> OutputHead:
    return OutputHead(causal_lm)


class TokenLogits:
    """Temperature-scaled logits (b, T, V) predicting each completion token, computed
    from `hidden` (b, T, H) by `head` chunk by chunk, as each quantity is asked for."""

    def __init__(self, hidden: torch.Tensor, head, vocab_size: int, temperature: float = 1.0,
                 chunk_elements: int | None = None, top_rows: int = 0):
        self.hidden = hidden
        self.head = head
        self.vocab_size = vocab_size
        self.temperature = temperature
        # The module's number read now, not bound as a default: a test can make chunks small.
        self.chunk_tokens = max(1, (chunk_elements or LOGIT_CHUNK_ELEMENTS) // vocab_size)
        # The lean pass keeps the top-5 of the first `top_rows` rows (the recorded ones) and
        # every token's entropy and logit sum: what `top`, `entropy` and `sums` then return.
        self.top_rows = top_rows
        self.kept: dict[str, torch.Tensor] = {}

    @property
    def shape(self) -> tuple[int, int, int]:
        b, t, _ = self.hidden.shape
        return b, t, self.vocab_size

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden).float() / self.temperature  # (n, V) fp32

    def _chunks(self, hidden: torch.Tensor, *others: torch.Tensor, tokens: int | None = None):
        """(b, T, ...) tensors flattened over (b, T) and split into chunks of tokens."""
        flat = [t.reshape(-1, *t.shape[2:]) for t in (hidden, *others)]
        return zip(*(t.split(tokens or self.chunk_tokens) for t in flat))

    def _chunk_logprobs(self, hidden: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return selective_log_softmax(self._logits(hidden)[None], ids[None])[0]

    def logprobs(self, ids: torch.Tensor) -> torch.Tensor:
        """log p(ids) at each position (b, T) fp32, differentiable without keeping any
        chunk's logits: a plain linear head's gradient is worked out chunk by chunk in
        the forward pass (_LinearLogprob); any other head's chunk is checkpointed
        (its logits recomputed in the backward pass)."""
        if tuple(ids.shape) != tuple(self.hidden.shape[:2]):  # a gather would take the first rows silently
            raise ValueError(f"token ids of shape {tuple(ids.shape)} for logits of {tuple(self.hidden.shape[:2])}")
        grad = torch.is_grad_enabled() and self.hidden.requires_grad
        linear = getattr(self.head, "linear", None)
        if LEAN_UPDATE and linear is not None:
            return self._lean_logprobs(ids, linear, grad)
        parts = []
        for hidden, index in self._chunks(self.hidden, ids):
            if linear is not None:
                weight, scale = linear
                if grad:
                    parts.append(_LinearLogprob.apply(hidden, weight, index, scale / self.temperature))
                else:
                    logp = _linear_log_softmax(hidden, weight, scale / self.temperature)
                    parts.append(logp.gather(-1, index[:, None]).squeeze(-1))
            elif grad:
                parts.append(checkpoint(self._chunk_logprobs, hidden, index, use_reentrant=False))
            else:
                parts.append(self._chunk_logprobs(hidden, index))
        return torch.cat(parts).reshape(ids.shape)

    def _lean_logprobs(self, ids: torch.Tensor, linear, grad: bool) -> torch.Tensor:
        """logprobs by _fused_chunk (with gradients: keeping the entropy, sums and top-5
        on the way) or by _lean_logprobs (without)."""
        weight, scale = linear
        scale = scale / self.temperature
        tokens = self.chunk_tokens
        if self.hidden.device.type == "cpu":
            tokens = min(tokens, max(1, LEAN_CPU_CHUNK_ELEMENTS // self.vocab_size))
        if not grad:
            with torch.no_grad():
                parts = [_lean_logprobs(h, weight, i, scale) for h, i in self._chunks(self.hidden, ids, tokens=tokens)]
            return torch.cat(parts).reshape(ids.shape)
        T = ids.shape[1]
        top_tokens, start = min(self.top_rows, ids.shape[0]) * T, 0
        outs = []
        for hidden, index in self._chunks(self.hidden, ids, tokens=tokens):
            n = hidden.shape[0]
            outs.append(_FusedLinearLogprob.apply(hidden, weight, index, scale, max(0, min(n, top_tokens - start))))
            start += n
        chosen, entropy, sums, probs, top_ids = (torch.cat(part) for part in zip(*outs))
        self.kept = {"entropy": entropy.reshape(ids.shape), "sums": sums.reshape(ids.shape)}
        if top_tokens:
            rows, k = top_tokens // T, probs.shape[-1]
            self.kept["top"] = (probs.reshape(rows, T, k), top_ids.reshape(rows, T, k))
        return chosen.reshape(ids.shape)

    @torch.no_grad()
    def entropy(self) -> torch.Tensor:
        """Entropy of the softmax at each position, in nats. (b, T) fp32"""
        if "entropy" in self.kept:
            return self.kept["entropy"]
        parts = [entropy_from_logits(self._logits(h)[None])[0] for (h,) in self._chunks(self.hidden.detach())]
        return torch.cat(parts).reshape(self.hidden.shape[:2])

    @torch.no_grad()
    def top(self, rows: int, k: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
        """The k most likely tokens and their probabilities at each position of the first
        `rows` rows: ((rows, T, k) probs, (rows, T, k) ids)."""
        kept = self.kept.get("top")
        if kept is not None and rows <= kept[0].shape[0] and k <= kept[0].shape[-1]:
            return kept[0][:rows, :, :k], kept[1][:rows, :, :k]
        hidden = self.hidden[:rows].detach()
        k = min(k, self.vocab_size)
        probs, ids = [], []
        for (h,) in self._chunks(hidden):
            p, i = F.softmax(self._logits(h), dim=-1).topk(k, dim=-1)
            probs.append(p)
            ids.append(i)
        shape = (*hidden.shape[:2], k)
        return torch.cat(probs).reshape(shape), torch.cat(ids).reshape(shape)

    @torch.no_grad()
    def sums(self) -> torch.Tensor:
        """The sum of the logits over the vocabulary at each position (b, T): DPO's
        `logits/chosen` metric is their mean."""
        if "sums" in self.kept:
            return self.kept["sums"]
        parts = [self._logits(h).sum(-1) for (h,) in self._chunks(self.hidden.detach())]
        return torch.cat(parts).reshape(self.hidden.shape[:2])

    @torch.no_grad()
    def full(self) -> torch.Tensor:
        """All the logits at once (b, T, V): for tests and small vocabularies only."""
        return self._logits(self.hidden.detach().reshape(-1, self.hidden.shape[-1])).reshape(self.shape)
