"""The policy part of a trainer: the loaded model (with its LoRA adapter) and tokenizer,
and the passes every algorithm runs through it: sampling completions, the teacher-forced
pass over (prompt, completion) rows, and the reference pass (the adapter disabled).

The maths of a pass is in engine.model (forward, token_logits, rollout); this part holds
what a pass needs besides its rows: the sampling settings, the dropout modes, whether
gradient checkpointing is on, and, with several processes, how a pass joins the others'
(DDP for a pass whose backward follows; a sharded model decodes as long as any rank).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from engine.algorithms.step_metrics import PassClock
from engine.model.forward import completion_logits
from engine.model.loading import LoadedModel, reference_mode
from engine.model.merged_lora import merged_lora
from engine.model.rollout import Rollout, sample
from engine.model.static_decode import decode_path
from engine.model.token_logits import TokenLogits

__all__ = ["Policy", "Sampling", "set_update_mode"]


def set_update_mode(model, updating: bool, lora_dropout: bool = False) -> None:
    """Every dropout stays off, the base model's and the adapter's, in sampling, in the
    passes that give old logprobs and in the updates, as TRL's `disable_dropout`: a pass
    whose logprobs feed an importance ratio (GRPO, PPO) must be dropout-free, or at
    identical weights the ratio is not 1 but noise (up to 0.19 in logprob with LoRA
    dropout 0.05). With `lora_dropout` (DPO with `disable_dropout` false only: it has no
    ratio, it compares with a reference pass that has the adapter off) the adapter's
    dropout is on in updates.
    Under gradient checkpointing the decoder layers' own flags are on in updates.

    One walk over the modules, writing a flag only where it changes: every pass calls this,
    and `model.eval()` alone (a Module.__setattr__ per module) cost 1.5 ms a call on the
    built-in model."""
    for name, module in model.named_modules():
        # Gradient checkpointing acts only on layers in training mode: their own flag
        # is set (not their children's, so dropout stays off).
        training = updating and (
            (lora_dropout and ".lora_dropout." in f".{name}.")  # the adapter's dropout modules and their container
            or (getattr(module, "gradient_checkpointing", False) is True and hasattr(module, "_gradient_checkpointing_func")))
        if module.training != training:
            module.training = training


@dataclass(frozen=True)
class Sampling:
    """How completions are sampled (the algorithm's section). The update scores tokens at
    the same temperature, so its logprobs are those of the policy that sampled; DPO
    samples only greedily (its evaluation), with the defaults.

    >>> Sampling.of(type("DPOConfig", (), {"max_completion_length": 64})())
    Sampling(max_tokens=64, temperature=1.0, top_p=1.0, top_k=0)
    """

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    @classmethod
    def of(cls, algo) -> "Sampling":
        return cls(algo.max_completion_length, getattr(algo, "temperature", 1.0),
                   getattr(algo, "top_p", 1.0), getattr(algo, "top_k", 0))


class Policy:
    """The model being trained and its passes. `group_size`: how many rows share each
    prompt, unless a pass says otherwise (the preset's num_generations; DPO's pairs).

    `ddp` (a callable that runs a pass through DistributedDataParallel) and
    `finished_everywhere` (whether every rank's decoding has finished: a sharded model's
    passes are collectives) are set by the trainer when the run has several processes."""

    def __init__(self, loaded: LoadedModel, sampling: Sampling, group_size: int):
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.device = loaded.device
        self.checkpointing = loaded.gradient_checkpointing
        self.sampling = sampling
        # The temperature the loss's passes divide the logits by: the sampling one, so the
        # ratio's logprobs are those of the policy that sampled (GRPO, PPO, as TRL); an
        # algorithm that takes its loss on the model's own distribution sets 1 (online DPO).
        self.pass_temperature = sampling.temperature
        self.group_size = group_size
        self.ddp = None
        self.finished_everywhere: Callable[[bool], bool] | None = None
        self.clock = PassClock()  # the reference passes' time (and the after-update look's), per step
        # The first rows of the next differentiable passes whose top-5 the inspector records:
        # set by the update around a micro-batch's loss, so a lean pass keeps them on the way.
        self.recorded_rows = 0

    def encode_prompts(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        return enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)

    def encode_answer(self, text: str, max_tokens: int) -> list[int]:
        """A given answer's tokens (DPO's and KTO's completions, not sampled) up to its
        first end token (a chat template ends it with its end-of-turn token), or with the
        tokenizer's EOS added (the model must learn to stop there, as TRL adds it), cut to
        `max_tokens`."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        eos = set(self.loaded.eos_token_ids)
        end = next((i for i, t in enumerate(ids) if t in eos), None)
        ids = ids[: end + 1] if end is not None else ids + [self.tokenizer.eos_token_id]
        return ids[:max_tokens]

    def answer_rows(self, prompts: list[str], answers: list[str], max_tokens: int) -> Rollout:
        """Rows (prompt i, answer i) of given answers: prompts left-padded, answers
        right-padded, as a sampled rollout would be, so the same passes run over them."""
        prompt_ids = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        return self.id_rows(prompt_ids, [self.encode_answer(a, max_tokens) for a in answers])

    def id_rows(self, prompts: list[list[int]], completions: list[list[int]]) -> Rollout:
        """Rows of given token ids: each prompt left-padded, each completion right-padded."""
        pad = self.tokenizer.pad_token_id
        P, T = max(len(p) for p in prompts), max(len(c) for c in completions)
        prompt_ids = torch.tensor([[pad] * (P - len(p)) + p for p in prompts], device=self.device)
        prompt_mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        ids = torch.tensor([c + [pad] * (T - len(c)) for c in completions], device=self.device)
        mask = torch.tensor([[1.0] * len(c) + [0.0] * (T - len(c)) for c in completions], device=self.device)
        B = len(completions)
        return Rollout(prompt_ids, prompt_mask, ids, mask, torch.zeros(B, T, device=self.device),
                       torch.zeros(B, dtype=torch.bool, device=self.device))

    def decode_completions(self, rollout: Rollout) -> list[str]:
        """The completions' text for the rewards: the end token that stopped one is cut,
        whether or not the tokenizer calls it special (`<|im_end|>` and the like)."""
        eos = set(self.loaded.eos_token_ids)
        ids = [row[: int(n)].tolist() for row, n in zip(rollout.completion_ids, rollout.lengths)]
        ids = [row[:-1] if row and row[-1] in eos else row for row in ids]
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def _sample(self, ids: torch.Tensor, mask: torch.Tensor, generator: torch.Generator, greedy: bool,
                group_size: int, max_new_tokens: int) -> Rollout:
        """Left-padded prompt rows sampled with the preset's settings, dropout off."""
        set_update_mode(self.model, False)
        s = self.sampling
        # The adapter folded into its weights while decoding; a captured decode step replays
        # the merged weights' storage, so it keeps them between rollouts (memory held through
        # the update), any other path lets them go.
        captured = decode_path(self.loaded.decode, self.device, max_new_tokens,
                               self.finished_everywhere is not None) == "captured"
        with merged_lora(self.model, keep=captured):
            return sample(
                self.model, ids, mask,
                max_new_tokens=max_new_tokens,
                eos_token_ids=self.loaded.eos_token_ids, pad_token_id=self.tokenizer.pad_token_id,
                temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                greedy=greedy, generator=generator, group_size=group_size,
                finished_everywhere=self.finished_everywhere, decode=self.loaded.decode,
            )

    def generate(self, prompts: list[str], generator: torch.Generator, greedy: bool = False,
                 group_size: int = 1) -> Rollout:
        """Completions of `prompts` (each row's prompt repeated `group_size` times in a
        row), sampled with `generator`, dropout off."""
        ids, mask = self.encode_prompts(prompts)
        return self._sample(ids, mask, generator, greedy, group_size, self.sampling.max_tokens)

    def sample_turn(self, contexts: list[list[int]], generator: torch.Generator, group_size: int,
                    max_new_tokens: int, greedy: bool = False) -> list[tuple[list[int], list[float]]]:
        """One turn of each episode (engine/episodes/rollout.py): `contexts` are token ids
        (the prompt and the episode so far, never re-tokenised), left-padded here; each
        row's sampled tokens up to and including its end token, and their logprobs."""
        width = max(len(c) for c in contexts)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts], device=self.device)
        mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=self.device)
        out = self._sample(ids, mask, generator, greedy, group_size, max_new_tokens)
        lengths = out.lengths.long().tolist()
        return [(row[:n], lp[:n]) for row, lp, n in zip(out.completion_ids.tolist(), out.sampling_logprobs.tolist(),
                                                        lengths)]

    def completion_logits(self, rollout: Rollout, rows: slice, group_size: int | None = None) -> TokenLogits:
        """Temperature-scaled logits that predict each completion token, as a TokenLogits
        (b, T, V) computed in chunks (its `hidden`, (b, T, H), is what a value head reads).
        Rows come in groups of `group_size` identical prompts (default: the preset's)."""
        group_size = self.group_size if group_size is None else group_size
        args = (self.model, rollout, rows, group_size)
        # Under gradient checkpointing every row runs in full (no KV cache to share a prompt).
        kwargs = {"temperature": self.pass_temperature, "shared_prefix": not self.checkpointing}
        if self.recorded_rows and torch.is_grad_enabled():
            kwargs["top_rows"] = self.recorded_rows
        if self.ddp is not None and torch.is_grad_enabled():
            # A pass whose backward follows: through DDP, which then reduces the gradients.
            return self.ddp(completion_logits, *args, **kwargs)
        return completion_logits(*args, **kwargs)

    @torch.no_grad()
    def reference_logprobs(self, rollout: Rollout, rows: slice, group_size: int | None = None) -> torch.Tensor:
        """The reference's logprobs of the completion tokens of `rows`: the same model
        with its adapter disabled."""
        with self.clock.timed("reference"), reference_mode(self.model):
            logits = self.completion_logits(rollout, rows, group_size=group_size)
            return logits.logprobs(rollout.completion_ids[rows])
