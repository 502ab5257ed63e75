"""The engine's side of bench/audit_vs_trl.py: the result row, the seeded tensors both sides
get, and small helpers (TRL's side is bench/audit_trl_paths.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

import audit_trl_paths as trl_paths

F64_TOL, F32_TOL = 1e-10, 2e-5  # float64 leaf paths; float32 paths (fused head, our float32 advantages)


@dataclass
class Row:
    variant: str
    trl: str  # TRL's code path
    value: float | None = None  # max |Δ| of the loss (or of the advantages), logprobs given
    grad_logp: float | None = None  # of its gradient w.r.t. the per-token logprobs
    value_logits: float | None = None  # the loss again, computed from the logits by each side
    grad_logits: float | None = None  # its gradient w.r.t. the logits
    metrics: float | None = None  # the metrics both report (logprobs given)
    metrics_logits: float | None = None  # those from the logits path (entropy)
    metric_names: tuple[str, ...] = ()  # TRL's names of the metrics compared
    note: str = ""
    status: str = ""
    tol: float = F64_TOL  # for value, grad_logp, metrics
    tol_logits: float = F32_TOL  # for the logits path: TRL's fused head and our TokenLogits are float32
    by_design: bool = False  # a difference here is the engine's choice or convention (the note says which)

    def worst(self) -> float:
        exact = [x for x in (self.value, self.grad_logp, self.metrics) if x is not None]
        loose = [x for x in (self.value_logits, self.grad_logits, self.metrics_logits) if x is not None]
        return max([x / self.tol for x in exact] + [x / self.tol_logits for x in loose], default=0.0)

    def settle(self) -> "Row":
        if not self.status:
            self.status = "agrees" if self.worst() <= 1 else (
                "differs, by design / convention" if self.by_design else "DIFFERS")
        return self


def maxdiff(a, b) -> float:
    return float((torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().max())


def metric_diff(ours: dict, trl: dict, pairs) -> tuple[float | None, list[str], list[str]]:
    """(max |Δ| over the metrics both report, TRL's names of those, ours TRL reports but we
    lack); pairs: (our key, TRL key); TRL's metric lists: their last value.

    e.g. ({"kl": 0.5}, {"kl": [0.5]}, [("kl", "kl")]) -> (0.0, ["kl"], [])"""
    diffs, compared, missing = [], [], []
    for mine, theirs in pairs:
        if theirs not in trl or not trl[theirs]:
            continue
        if mine not in ours:
            missing.append(mine)
            continue
        diffs.append(abs(float(ours[mine]) - float(trl[theirs][-1])))
        compared.append(theirs)
    return (max(diffs) if diffs else None), compared, missing


def missing_row(variant: str, trl: str, what: str) -> Row:
    return Row(variant, trl, status="not in this checkout yet", note=f"{what} not found")


# ------------------------------------------------------------------------------ tensors


@dataclass
class Batch:
    """Seeded inputs shared by both sides. e.g. Batch.make(0).mask[1] = [1]*7 + [0]*5"""

    B: int
    T: int
    P: int
    V: int
    G: int
    mask: torch.Tensor  # (B, T) float64, right padding
    logprobs: torch.Tensor  # (B, T) policy logprobs (the leaf the gradients are taken of)
    old: torch.Tensor
    ref: torch.Tensor
    advantages: torch.Tensor  # (B,)
    hidden: torch.Tensor  # (B, P+T, V) logits (the identity head's hidden states)
    prompt_ids: torch.Tensor  # (B, P)
    completion_ids: torch.Tensor  # (B, T)
    lp_hidden: torch.Tensor  # (B, T) logprobs of the completion under `hidden`
    old_h: torch.Tensor  # old / ref logprobs near lp_hidden
    ref_h: torch.Tensor
    rewards: torch.Tensor  # (B, K) reward components
    weights: torch.Tensor  # (K,)

    @staticmethod
    def make(seed: int, B=8, T=12, P=5, V=16, G=4) -> "Batch":
        g = torch.Generator().manual_seed(seed)
        d = torch.float64
        lengths = torch.randint(2, T + 1, (B,), generator=g)
        lengths[0] = T  # one truncated completion, no padding
        mask = (torch.arange(T)[None] < lengths[:, None]).to(d)
        logprobs = -(torch.rand(B, T, generator=g, dtype=d) * 3 + 0.05)
        old = logprobs + 0.35 * torch.randn(B, T, generator=g, dtype=d)
        ref = logprobs + 0.5 * torch.randn(B, T, generator=g, dtype=d)
        advantages = torch.randn(B, generator=g, dtype=d)
        advantages[B - 1] = 0.0  # a zero advantage too
        hidden = 2 * torch.randn(B, P + T, V, generator=g, dtype=d)
        prompt_ids = torch.randint(1, V, (B, P), generator=g)
        completion_ids = torch.randint(1, V, (B, T), generator=g)
        completion_ids = torch.where(mask.bool(), completion_ids, 0)  # 0: the pad token
        lp_hidden = torch.log_softmax(hidden[:, P - 1:-1], -1).gather(-1, completion_ids[..., None]).squeeze(-1)
        old_h = lp_hidden + 0.35 * torch.randn(B, T, generator=g, dtype=d)
        ref_h = lp_hidden + 0.5 * torch.randn(B, T, generator=g, dtype=d)
        rewards = torch.randint(0, 3, (B, 2), generator=g).to(d) + 0.1 * torch.randn(B, 2, generator=g, dtype=d)
        rewards[G:2 * G] = torch.tensor([1.0, 0.5], dtype=d)  # the second group: equal rewards (std 0)
        return Batch(B, T, P, V, G, mask, logprobs, old, ref, advantages, hidden, prompt_ids, completion_ids,
                     lp_hidden, old_h, ref_h, rewards, torch.tensor([1.0, 0.5], dtype=d))

    def leaf(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone().requires_grad_(True)

    def lm(self, hidden: torch.Tensor, outputs=("log_probs", "entropy")):
        """A fused-head model stand-in whose input_ids [prompt | completion] give `hidden`."""
        lm = trl_paths.fused(trl_paths.IdentityHeadLM(self.V), outputs)
        lm.route(torch.cat([self.prompt_ids, self.completion_ids], 1), hidden)
        return lm


def our_token_logits(batch: Batch, hidden: torch.Tensor, lm):
    """Our trainer's logits path: TokenLogits over the hidden states predicting the completion."""
    from engine.model.token_logits import TokenLogits, output_head

    return TokenLogits(hidden[:, batch.P - 1:-1], output_head(lm), batch.V)
