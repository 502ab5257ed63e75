"""The report card's preflight: what must hold before a reward model is trusted as an
RL reward, each check a dict {check, title, status, saw, try}, status good, worrying,
bad or skipped. Known ways a learned reward silently fails:

- a LoRA reward model whose score head was not saved reloads with a random head;
- the score is read at padding (when the pad token is the end token, or a chat
  template puts the pad token at the end of the text);
- an exported model (transformers' own reading of the last non-pad token) scores
  otherwise than the run did;
- the policy formats its prompts otherwise (another tokenizer, template, system prompt);
- scores that are not finite, or do not vary.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import torch

from engine.foundation.run_files import SCORE_HEAD, has_score_head

__all__ = ["check", "head_check", "PoolingCheck", "reading_check", "reproduction_check", "policy_check",
           "scores_check"]

# The score an exported model reads and ours may differ by float rounding only.
SAME_SCORE = 1e-4


def check(name: str, title: str, status: str, saw: str, try_: str | None = None) -> dict:
    return {"check": name, "title": title, "status": status, "saw": saw, "try": try_}


HEAD_TITLE = "The score head is saved and loads"


def head_check(checkpoint: Path, model: torch.nn.Module | None) -> dict:
    """The checkpoint's adapter declares the score head (peft's modules_to_save) and its
    saved weights are the loaded model's (`model`: the merged classifier; None when it
    could not be loaded). A head not saved reloads random: every score is noise."""
    if not has_score_head(checkpoint):
        return check("head", HEAD_TITLE, "bad", f"{checkpoint} has no '{SCORE_HEAD}' in its adapter's modules_to_save: "
                     "the score head was not saved, so a reload starts it random and every score is noise",
                     "train it as algorithm.name: reward_model (it saves the head with every checkpoint), or give "
                     "a checkpoint of such a run")
    from safetensors import safe_open

    saved = None
    weights = checkpoint / "adapter_model.safetensors"
    if weights.is_file():
        with safe_open(str(weights), "pt") as f:
            keys = [k for k in f.keys() if k.endswith(f"{SCORE_HEAD}.weight")]
            saved = f.get_tensor(keys[0]) if keys else None
    if saved is None:
        return check("head", HEAD_TITLE, "bad", f"{weights.name} in {checkpoint} holds no score head weights",
                     "the checkpoint is incomplete: take another (--checkpoint) or train again")
    if model is None:
        return check("head", HEAD_TITLE, "bad", "the model could not be loaded with its head")
    loaded = model.score.weight.detach().float().cpu()
    diff = float((loaded - saved.float()).abs().max()) if loaded.shape == saved.shape else math.inf
    if diff > 1e-3 * max(1.0, float(saved.abs().max())):
        return check("head", HEAD_TITLE, "bad", f"the loaded score head differs from the saved one (largest "
                     f"difference {diff:.3g}): it was not restored", "report it: the loading code lost the head")
    return check("head", HEAD_TITLE, "good", f"saved in {checkpoint.name} ({saved.shape[-1]} weights) and "
                 "restored exactly on loading")


class PoolingCheck:
    """Where each scored text's score is read, against where its last token is: fed
    every batch (ids, mask, the read positions)."""

    title = "The score is read at the end of the answer"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.texts = 0
        self.wrong: list[tuple[int, int]] = []  # (read position, last token position) of texts read elsewhere
        self.pad_inside = 0

    def add(self, ids: torch.Tensor, mask: torch.Tensor, read: torch.Tensor) -> None:
        last = mask.sum(-1) - 1
        pad = self.tokenizer.pad_token_id
        for row in range(ids.shape[0]):
            self.texts += 1
            n = int(last[row])
            if int(read[row]) != n:
                self.wrong.append((int(read[row]), n))
            if bool((ids[row, : n + 1] == pad).any()):
                self.pad_inside += 1

    def result(self) -> dict:
        tok = self.tokenizer
        same = tok.pad_token_id is not None and tok.pad_token_id == tok.eos_token_id
        note = (f"; the pad token is the end token ({tok.pad_token!r}), and no text ends with it" if same else "")
        if self.wrong:
            read, last = self.wrong[0]
            return check("pooling", self.title, "bad", f"{len(self.wrong)} of {self.texts} texts were scored at a "
                         f"position other than their last token (e.g. read at {read}, last token at {last}): the "
                         f"pad token ({tok.pad_token!r}) ends them, so the score is read before it",
                         "give the tokenizer a pad token that is not in the texts (tokenizer.pad_token), or remove "
                         "the end token the template or the data adds to the answers")
        inside = (f"; {self.pad_inside} texts hold the pad token inside them (a chat template's), which does not "
                  "move the reading" if self.pad_inside else "")
        return check("pooling", self.title, "good", f"all {self.texts} texts were scored at their last token"
                     f"{note}{inside}")


def reading_check(ours: torch.Tensor, theirs: torch.Tensor) -> dict:
    """Our reading (the score head at each text's last non-pad token) against
    transformers' own forward of the classifier: what an exported model scores."""
    title = "An exported model scores as the run does"
    diff = float((ours.float() - theirs.float()).abs().max()) if ours.numel() else 0.0
    if diff > SAME_SCORE * max(1.0, float(ours.abs().max())):
        return check("reading", title, "bad", f"transformers' sequence-classification forward read scores up to "
                     f"{diff:.3g} away from the run's on {ours.numel()} texts: it pools another position",
                     "set the model config's pad_token_id to the tokenizer's pad token before exporting")
    return check("reading", title, "good", f"transformers' own forward gives the same scores on {ours.numel()} texts "
                 f"(largest difference {diff:.1e})")


def reproduction_check(eval_event: dict | None, accuracy: float, margin: float, pairs: int) -> dict:
    """The report's held-out accuracy and margin against the run's own evaluation at the
    checkpoint's step: equal when the reloaded model is the trained one."""
    title = "It scores as it did in training"
    if eval_event is None or not isinstance(eval_event.get("accuracy"), (int, float)):
        return check("reproduction", title, "skipped", "the run logged no held-out evaluation at this checkpoint's "
                     "step to compare with")
    then, then_margin = float(eval_event["accuracy"]), float(eval_event.get("margin", math.nan))
    if abs(then - accuracy) > 1.0 / max(pairs, 1) or abs(then_margin - margin) > 1e-3 * max(1.0, abs(margin)):
        return check("reproduction", title, "bad", f"the run's evaluation at step {eval_event.get('step')} had "
                     f"accuracy {then:.1%} and margin {then_margin:.4g}; reloaded, it has {accuracy:.1%} and "
                     f"{margin:.4g}", "the reloaded model is not the trained one: check the checkpoint and its head")
    return check("reproduction", title, "good", f"accuracy {accuracy:.1%} and margin {margin:.4g}, as the run's own "
                 f"evaluation at step {eval_event.get('step')}")


def policy_check(problem: str | None, policy: str | None) -> dict:
    """Whether the policy preset `policy` formats prompts as the reward model read them
    (engine/run/lineage.py's reward_model_problem gives `problem`)."""
    title = "Tokenizer and template match the policy"
    if policy is None:
        return check("policy", title, "skipped", "no policy given: `rl-engine reward-report RUN --policy PRESET` "
                     "checks the RL preset's base model, chat template and system prompt against this one's (an RL "
                     "run using it checks them at its start)")
    if problem:
        return check("policy", title, "bad", problem.split(": ", 1)[-1], "make the two presets agree")
    return check("policy", title, "good", f"{policy} has this reward model's base model, chat template and system "
                 "prompt")


def scores_check(scores: list[float]) -> dict:
    title = "Scores are finite and vary"
    bad = sum(not math.isfinite(s) for s in scores)
    if bad:
        return check("scores", title, "bad", f"{bad} of {len(scores)} scores are NaN or inf",
                     "train again with a lower learning rate; check the model's dtype (float16 overflows)")
    spread = statistics.pstdev(scores) if len(scores) > 1 else 0.0
    if spread < 1e-6:
        return check("scores", title, "bad", f"every text scored {scores[0]:.4g} (standard deviation {spread:.1e}): "
                     "the model does not tell answers apart", "train it; check that the head was saved and loaded")
    return check("scores", title, "good", f"{len(scores)} finite scores from {min(scores):.3g} to {max(scores):.3g} "
                 f"(standard deviation {spread:.3g})")
