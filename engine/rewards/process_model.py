"""A process reward model (PRM) as a step reward (``name: process_reward_model``).

A PRM scores each step of a solution, not only its end (Lightman et al., Let's Verify
Step by Step). The public math PRMs come in two shapes, both read here at a tag placed
after each step:

* ``token_classification``: a classifier on every token (e.g. one trained with TRL's
  PRMTrainer); the score is the softmax probability of class ``label`` (default 1, the
  "correct" class of a two-class PRM; a one-label head: the sigmoid of its logit);
* ``causal_lm``: a language model asked which token follows the tag (e.g.
  Math-Shepherd: ``good_token`` "+", ``bad_token`` "-"); the score is
  p(good) / (p(good) + p(bad)) at the tag.

::

    rewards:
      - name: process_reward_model
        step_delimiter: "\\n"
        options: {model: peiyi9979/math-shepherd-mistral-7b-prm, step_tag: " ки",
                  good_token: "+", bad_token: "-"}

Each completion is split at the entry's ``step_delimiter`` (default ``"\\n\\n"``; the
delimiter belongs to the step it ends, engine/rewards/steps.py). The PRM reads the
prompt, then the completion with ``step_tag`` inserted after each step's text, before
its delimiter (as Math-Shepherd's ``ки`` sits before the newline). Each step is scored
at the token holding the last character of its tag, or, when ``step_tag`` is "" (the
default), of the step itself, delimiter included (where TRL's PRMTrainer puts its
labels). The reward returns per completion a list of ``(end, score)`` pairs, ``end``
the step's end offset in the completion (the tags are not part of it).

Inputs are cut from the left, in the prompt, to ``max_length`` tokens (and the model's
context); a completion that does not fit with its tags is refused, naming the option
to raise. Only fast tokenizers are accepted: the step positions come from their
character offsets. Batched by ``batch_size`` on the engine's device, in eval mode
without gradients; a loaded model is cached per (model, device, dtype, head).
"""

from __future__ import annotations

import bisect
import inspect
import logging
from dataclasses import dataclass
from typing import Callable

import torch

from engine.model.loading import context_length, resolve_device, resolve_dtype
from engine.rewards.base import RewardError, RewardFunc
from engine.rewards.kinds import PRM_STEP_DELIMITER_DEFAULT, PROCESS_REWARD_MODEL, PROCESS_REWARD_MODEL_OPTIONS
from engine.model.score import text_limit
from engine.rewards.model import _hint, load_with_head, padded_tokenizer
from engine.rewards.paths import resolve_reward_model
from engine.rewards.steps import split_step_ends

__all__ = [
    "STEP_DELIMITER_DEFAULT",
    "PrmInput",
    "tagged_input",
    "scoring_tokens",
    "head_of",
    "ProcessRewardModel",
    "load_process_reward_model",
    "process_reward_model_reward",
]

log = logging.getLogger(__name__)

STEP_DELIMITER_DEFAULT = PRM_STEP_DELIMITER_DEFAULT  # engine/rewards/kinds.py (torch-free)
"""Where a PRM splits a completion when its entry sets no ``step_delimiter``: the
public math PRMs score paragraphs (Qwen2.5-Math-PRM's steps are ``\\n\\n``-separated)."""

# config.architectures suffix -> head; GPT-2 names its causal LM ...LMHeadModel.
_HEAD_SUFFIXES = (
    ("ForTokenClassification", "token_classification"),
    ("ForCausalLM", "causal_lm"),
    ("LMHeadModel", "causal_lm"),
)


@dataclass(frozen=True)
class PrmInput:
    """What the PRM reads for one completion: ``text`` (prompt + tagged completion),
    ``marks`` (per step, the exclusive end offset in ``text`` of what its score is read
    at) and ``prompt_length`` (characters of the prompt at the start of ``text``)."""

    text: str
    marks: list[int]
    prompt_length: int


def tagged_input(prompt: str, completion: str, ends: list[int], delimiter: str, tag: str) -> PrmInput:
    """The PRM's input for a completion split at ``ends``: ``tag`` after each step's
    text, before the step's own trailing ``delimiter``; each mark ends the tag (or, with
    no tag, the step with its delimiter).

    Example:
        >>> tagged_input("Q:", " a\\n\\nb", [4, 5], "\\n\\n", "<t>")
        PrmInput(text='Q: a<t>\\n\\nb<t>', marks=[7, 13], prompt_length=2)
        >>> tagged_input("Q:", " a\\n\\nb", [4, 5], "\\n\\n", "").marks
        [6, 7]
    """
    pieces, marks, length, start = [prompt], [], len(prompt), 0
    for end in ends:
        step = completion[start:end]
        body, tail = step, ""
        if tag and step.endswith(delimiter):
            body, tail = step[: len(step) - len(delimiter)], delimiter
        pieces += [body, tag, tail]
        length += len(body) + len(tag)
        marks.append(length)
        length += len(tail)
        start = end
    return PrmInput("".join(pieces), marks, len(prompt))


def scoring_tokens(offsets: list[tuple[int, int]], marks: list[int]) -> list[int]:
    """Per mark, the index of the token holding the character just before it: the last
    token starting before the mark (tokens of empty span, the special and padding ones,
    skipped). A mark no token starts before (nothing precedes the step) reads the first
    token. ValueError when there are no tokens at all.

    Example (tokens "Q:", " a", "<t>", pad):
        >>> scoring_tokens([(0, 2), (2, 4), (4, 7), (0, 0)], [7, 4, 0])
        [2, 1, 0]
    """
    spans = [(start, index) for index, (start, end) in enumerate(offsets) if end > start]
    if not spans:
        raise ValueError("the process reward model's input is empty: no prompt, completion or step_tag to score")
    starts = [start for start, _ in spans]
    return [spans[max(bisect.bisect_left(starts, mark) - 1, 0)][1] for mark in marks]


def head_of(architectures: list[str] | None) -> str | None:
    """The head a PRM's ``config.architectures`` names, or None when none says.

    Example:
        >>> head_of(["Qwen2ForTokenClassification"]), head_of(["MistralForCausalLM"]), head_of(["GPT2LMHeadModel"])
        ('token_classification', 'causal_lm', 'causal_lm')
        >>> head_of(["Qwen2ForProcessRewardModel"]) is None
        True
    """
    for architecture in architectures or ():
        for suffix, head in _HEAD_SUFFIXES:
            if architecture.endswith(suffix):
                return head
    return None


def _first_kept_start(offsets: list[tuple[int, int]]) -> int:
    """Character offset where the first kept (non-special) token starts."""
    return next((start for start, end in offsets if end > start), 0)


@dataclass
class ProcessRewardModel:
    """A loaded PRM: ``step_logits(inputs, ...)`` gives, per input, the head's logits
    at each step's scoring token, (steps, classes) for a token classifier, (steps,
    vocab) for a causal LM; a reader turns them into scores."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    head: str
    context: int | None

    def limit(self, max_length: int | None) -> int | None:
        """Tokens per input: ``max_length`` and the model's context, the smaller."""
        limits = [n for n in (max_length, self.context) if n is not None]
        return min(limits) if limits else None

    def _forward(self, encoded: dict, positions: list[list[int]]) -> torch.Tensor:
        """The logits at ``positions`` (one list per row), stacked: (sum of steps, C)."""
        rows = torch.tensor([r for r, row in enumerate(positions) for _ in row], device=self.device)
        columns = torch.tensor([p for row in positions for p in row], device=self.device)
        if self.head == "causal_lm":
            # The vocabulary is large: (B, T, V) logits of a long batch would not fit,
            # so only the positions read are projected when the model allows it.
            keep = torch.unique(columns)  # sorted
            if "logits_to_keep" in inspect.signature(self.model.forward).parameters:
                logits = self.model(**encoded, use_cache=False, logits_to_keep=keep).logits  # (B, K, V)
                return logits[rows, torch.searchsorted(keep, columns)].float()
            logits = self.model(**encoded, use_cache=False).logits  # (B, T, V)
        else:
            logits = self.model(**encoded).logits  # (B, T, C)
        return logits[rows, columns].float()

    @torch.no_grad()
    def step_logits(self, inputs: list[PrmInput], batch_size: int, max_length: int | None) -> list[torch.Tensor]:
        """Per input, the logits at its steps' scoring tokens, (steps, C) on the CPU;
        inputs of similar length batched together (the result in the input's order).
        RewardError when a completion with its tags does not fit the length limit."""
        limit = self.limit(max_length)
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i].text))
        result: list[torch.Tensor] = [torch.empty(0)] * len(inputs)
        for begin in range(0, len(order), batch_size):
            rows = order[begin:begin + batch_size]
            encoded = self.tokenizer(
                [inputs[i].text for i in rows], return_tensors="pt", padding=True,
                truncation=limit is not None, max_length=limit, return_offsets_mapping=True,
            )
            positions = []
            for row, offsets in zip(rows, encoded.pop("offset_mapping").tolist()):
                if _first_kept_start(offsets) > inputs[row].prompt_length:
                    raise RewardError(
                        f"completion {row} with its step tags is longer than {limit} tokens, the "
                        f"process reward model's max_length (its context is {self.context}); raise the "
                        "option max_length or lower the completion length (max_completion_length)."
                    )
                positions.append(scoring_tokens(offsets, inputs[row].marks))
            encoded = {k: v.to(self.device) for k, v in encoded.items()
                       if k in ("input_ids", "attention_mask", "token_type_ids")}
            logits = self._forward(encoded, positions).cpu()
            for row, piece in zip(rows, logits.split([len(p) for p in positions])):
                result[row] = piece
        return result


_CACHE: dict[tuple[str, str, str, str], ProcessRewardModel] = {}


def _loaded_head(model: str, architectures: list[str] | None, head: str, where: str) -> str:
    if head != "auto":
        return head
    found = head_of(architectures)
    if found is None:
        raise RewardError(
            f"{where}: cannot tell the head of {model} from its architectures {architectures}; set the "
            "option head to token_classification (a classifier on each token, e.g. trained with TRL's "
            "PRMTrainer) or causal_lm (a language model read at good_token / bad_token, e.g. Math-Shepherd)."
        )
    return found


def _fast_tokenizer(model: str, where: str):
    tokenizer = padded_tokenizer(model, where)
    if not getattr(tokenizer, "is_fast", False):
        raise RewardError(
            f"{where}: the tokenizer of {model} ({type(tokenizer).__name__}) is a slow (Python) tokenizer; "
            "a process reward model finds each step's token by the character offsets only a fast tokenizer "
            "gives. Give a model whose folder has a tokenizer.json (a fast tokenizer)."
        )
    return tokenizer


def load_process_reward_model(model: str, device=None, dtype: str = "auto", head: str = "auto",
                              where: str = PROCESS_REWARD_MODEL) -> ProcessRewardModel:
    """Load (or take from the cache) the PRM ``model`` (hub id or folder) on ``device``
    (torch.device, string, or None: CUDA when available) in ``dtype`` (auto: bf16 on a
    CUDA device that has it, else fp32), its head given or read off
    ``config.architectures``. RewardError, prefixed with ``where``, when it cannot."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

    device = device if isinstance(device, torch.device) else resolve_device(device or "auto")
    torch_dtype = resolve_dtype(dtype, device)
    try:
        config = AutoConfig.from_pretrained(model)
    except Exception as exc:
        raise RewardError(f"{where}: {_hint(model, 'config', exc)}") from exc
    head = _loaded_head(model, getattr(config, "architectures", None), head, where)
    key = (model, str(device), str(torch_dtype), head)
    if key in _CACHE:
        return _CACHE[key]
    tokenizer = _fast_tokenizer(model, where)
    auto_class = AutoModelForCausalLM if head == "causal_lm" else AutoModelForTokenClassification
    loaded, untrained = load_with_head(auto_class, model, torch_dtype, where)
    if untrained:
        raise RewardError(
            f"{where}: {model} has no trained {head} head ({', '.join(untrained)} would start random); "
            f"give a PRM trained with that head, or set the option head to the one it has."
        )
    loaded.config.pad_token_id = tokenizer.pad_token_id
    loaded.to(device).eval()
    loaded.requires_grad_(False)
    result = ProcessRewardModel(model, loaded, tokenizer, device, torch_dtype, head,
                                text_limit(context_length(loaded.config), tokenizer))
    _CACHE[key] = result
    log.info("loaded process reward model %s (%s) on %s (%s)", model, head, device, torch_dtype)
    return result


def _one_token(loaded: ProcessRewardModel, option: str, text: str, where: str) -> int:
    """The id of ``text``, RewardError unless the tokenizer encodes it to one token."""
    ids = loaded.tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise RewardError(
            f"{where}: option {option!r} {text!r} encodes to {len(ids)} tokens {ids} with the tokenizer "
            f"of {loaded.name}; it must be exactly one token (e.g. '+' / '-' for Math-Shepherd)."
        )
    rows = loaded.model.get_output_embeddings().weight.shape[0]
    if ids[0] >= rows:
        raise RewardError(f"{where}: option {option!r} {text!r} is token {ids[0]}, past the model's {rows} outputs.")
    return ids[0]


def _reader(loaded: ProcessRewardModel, label: int | None, good_token: str | None, bad_token: str | None,
            where: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The scores from a (steps, C) block of logits, for the loaded head and options.

    e.g. token classification, label 1, logits [[0, ln 3]] -> [0.75];
    causal LM, logits at good and bad [ln 3, 0] -> [0.75].
    """
    if loaded.head == "causal_lm":
        if label is not None:
            raise RewardError(f"{where}: option 'label' is for a token_classification head; {loaded.name} "
                              "is a causal_lm: remove label and set good_token and bad_token.")
        if good_token is None or bad_token is None:
            raise RewardError(
                f"{where}: {loaded.name} is a causal_lm PRM: set the options good_token and bad_token, the "
                "tokens it predicts after a right and a wrong step (e.g. '+' and '-' for Math-Shepherd)."
            )
        pair = [_one_token(loaded, "good_token", good_token, where), _one_token(loaded, "bad_token", bad_token, where)]
        if pair[0] == pair[1]:
            raise RewardError(f"{where}: good_token and bad_token are the same token {pair[0]}; give two tokens.")
        return lambda logits: logits[:, pair].softmax(-1)[:, 0]  # p(good) / (p(good) + p(bad))
    if good_token is not None or bad_token is not None:
        raise RewardError(f"{where}: options good_token / bad_token are for a causal_lm head; {loaded.name} is "
                          "a token_classification PRM: remove them (its option label picks the class).")
    count = loaded.model.config.num_labels
    if count == 1:
        if label not in (None, 0):
            raise RewardError(f"{where}: option 'label' is {label}, but {loaded.name} has one label (its "
                              "score is the sigmoid of its logit): remove label or set it to 0.")
        return lambda logits: logits[:, 0].sigmoid()
    label = 1 if label is None else label
    if not 0 <= label < count:
        names = getattr(loaded.model.config, "id2label", None) or {}
        raise RewardError(f"{where}: option 'label' is {label}, but {loaded.name} has {count} labels "
                          f"(0 to {count - 1}: {names}); set label to the class of a correct step.")
    return lambda logits: logits.softmax(-1)[:, label]


def process_reward_model_reward(
    *, model: str, step_tag: str = PROCESS_REWARD_MODEL_OPTIONS["step_tag"],
    head: str = PROCESS_REWARD_MODEL_OPTIONS["head"], label: int | None = None,
    good_token: str | None = None, bad_token: str | None = None,
    batch_size: int = PROCESS_REWARD_MODEL_OPTIONS["batch_size"],
    max_length: int | None = PROCESS_REWARD_MODEL_OPTIONS["max_length"], dtype: str = "auto",
    step_delimiter: str | None = None, device=None, base_dir=None, where: str = PROCESS_REWARD_MODEL,
) -> RewardFunc:
    """A step reward scoring each step of ``prompt + completion`` with the PRM ``model``
    (a relative folder is looked up in ``base_dir``, then the current folder).

    Example (``prm`` a folder with a two-label Qwen2ForTokenClassification):
        reward = process_reward_model_reward(model="prm", step_tag="<step>", device="cpu")
        reward(["Q:"], [" a\\n\\nb"]) -> [[(4, p1 at the first <step>), (5, p1 at the second)]]
        for the input "Q: a<step>\\n\\nb<step>"
    """
    delimiter = STEP_DELIMITER_DEFAULT if step_delimiter is None else step_delimiter
    if not delimiter:
        raise RewardError(f"{where}: step_delimiter is empty; give the text that ends a step, e.g. '\\n\\n'.")
    loaded = load_process_reward_model(resolve_reward_model(model, base_dir), device, dtype, head, where)
    read = _reader(loaded, label, good_token, bad_token, where)

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[list[tuple[int, float]]]:
        ends = [split_step_ends(c, delimiter) for c in completions]
        inputs = [tagged_input(p, c, e, delimiter, step_tag) for p, c, e in zip(prompts, completions, ends)]
        try:
            logits = loaded.step_logits(inputs, batch_size, max_length)
        except ValueError as exc:  # an empty input: nothing to score
            raise RewardError(str(exc)) from exc
        return [list(zip(e, read(block).tolist())) for e, block in zip(ends, logits)]

    reward.returns_steps = True
    reward.step_delimiter = delimiter
    reward.reward_source = f"process reward model {model}"
    return reward
