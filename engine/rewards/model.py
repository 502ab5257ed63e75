"""A learned reward model as a reward component (``name: reward_model``).

Any Hugging Face ``AutoModelForSequenceClassification`` with one label, by hub id or
local folder::

    rewards:
      - name: reward_model
        weight: 0.5
        options: {model: OpenAssistant/reward-model-deberta-v3-large-v2, batch_size: 32}

The reward of a completion is the model's single logit on ``prompt + completion``
(the text as the policy sees it, no chat template), computed in batches of
``batch_size`` on the engine's device, in eval mode without gradients. Texts longer
than ``max_length`` tokens (default: the model's context) are cut from the left, so
the completion is always scored. A tokenizer without a pad token pads with its EOS
token (and the model's ``config.pad_token_id`` is set to match).

Loaded models are cached per (model, device, dtype): two components naming one model,
and the evaluation, share one copy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.foundation.run_files import adapter_base_model, has_score_head, is_adapter
from engine.model.loading import context_length, resolve_device, resolve_dtype
from engine.model.score import encode_texts, has_position_scores, position_scores, text_limit, token_ends
from engine.rewards.base import RewardError, RewardFunc
from engine.rewards.kinds import REWARD_MODEL_OPTIONS
from engine.rewards.paths import num_labels_message, resolve_reward_model

log = logging.getLogger(__name__)


@dataclass
class RewardModel:
    """A loaded reward model: ``score(texts)`` is one float per text.

    Example (a model whose logit is 0.7 on "sort 2 1 = 1 2"):
        load_reward_model("path/to/rm", "cpu").score(["sort 2 1 = 1 2"]) -> [0.7]
    """

    name: str
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    context: int | None

    @torch.inference_mode()
    def score(self, texts: list[str], batch_size: int = 32, max_length: int | None = None) -> list[float]:
        """The model's logit for each text, in batches of ``batch_size`` (texts of
        similar length batched together; the order of the result is the input's). Texts
        are encoded as a reward-model run encodes them (engine/model/score.py)."""
        limit = max_length or self.context
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        scores = [0.0] * len(texts)
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            ids, mask = encode_texts(self.tokenizer, [texts[i] for i in rows], limit, self.device)
            logits = self.model(input_ids=ids, attention_mask=mask).logits
            for row, value in zip(rows, logits[:, 0].float().cpu().tolist()):
                scores[row] = value
        return scores

    @torch.inference_mode()
    def prefix_scores(self, texts: list[str], batch_size: int = 32,
                      max_length: int | None = None) -> list[tuple[list[int], list[float]]] | None:
        """Each text's tokens as the reward reads them: (the end character offset of each
        token in the text, the score head at that token: the reward of the text ending
        there), from one pass over each batch of ``batch_size`` texts. The last score is
        ``score(texts)``'s. None for a model without a score at every position (an encoder
        read at its [CLS]: engine/model/score.py's has_position_scores).

        Example (the one-label model above, a tokenizer of one token a character):
            prefix_scores(["ab"]) -> [([1, 2], [score of "a", score of "ab"])]
        """
        if not has_position_scores(self.model):
            return None
        limit = max_length or self.context
        out = []
        for start in range(0, len(texts), batch_size):
            chunk = texts[start:start + batch_size]
            ids, mask = encode_texts(self.tokenizer, chunk, limit, self.device)
            scores = position_scores(self.model, ids, mask).cpu()
            for row, ends in enumerate(token_ends(self.tokenizer, chunk, limit)):
                out.append((ends, scores[row, :len(ends)].tolist()))
        return out


_CACHE: dict[tuple[str, str, str], RewardModel] = {}


def _hint(model: str, what: str, exc: Exception) -> str:
    if Path(model).expanduser().exists():
        return f"could not load the {what} from folder {model}: {exc}"
    return (
        f"could not load the {what} {model!r}: it is not a local folder, and loading it from the "
        f"Hugging Face hub failed ({type(exc).__name__}: {str(exc)[:300]}). Check the id, your "
        "network, or download it and give the folder's path."
    )



def padded_tokenizer(model: str, where: str):
    """A reward model's tokenizer, ready for batches: a pad token (its EOS when it has
    none), padding on the right and cutting from the left. RewardError naming `where`
    when it cannot be loaded or has nothing to pad with."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
    except Exception as exc:  # transformers raises many kinds; all mean "cannot load"
        raise RewardError(f"{where}: {_hint(model, 'tokenizer', exc)}") from exc
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise RewardError(f"{where}: the tokenizer of {model} has neither a pad nor an EOS token to pad batches with")
        tokenizer.pad_token = tokenizer.eos_token
    # Right padding keeps every text's positions as they are alone; the completion is
    # at the end of the text, so truncation cuts the prompt's beginning instead.
    tokenizer.padding_side = "right"
    tokenizer.truncation_side = "left"
    return tokenizer


def load_with_head(auto_class, model: str, torch_dtype, where: str):
    """``auto_class.from_pretrained(model)`` and the names of the weights outside its base
    model that the checkpoint lacks (a head that would start random: the caller refuses
    it, naming the head). RewardError naming `where` when it cannot be loaded."""
    try:
        loaded, info = auto_class.from_pretrained(model, dtype=torch_dtype, output_loading_info=True)
    except Exception as exc:  # transformers raises many kinds; all mean "cannot load"
        raise RewardError(f"{where}: {_hint(model, 'model', exc)}") from exc
    prefix = getattr(loaded, "base_model_prefix", "") + "."
    return loaded, sorted(k for k in info.get("missing_keys", ()) if not k.startswith(prefix))

def load_reward_model(model: str, device=None, dtype: str = "auto", where: str = "reward_model") -> RewardModel:
    """Load (or take from the cache) the sequence-classification model ``model`` on
    ``device`` (a torch.device, a string, or None for CUDA when available) in ``dtype``
    (``auto``: bf16 on a CUDA device that has it, else fp32). RewardError, prefixed with
    ``where``, when it cannot be loaded or does not output exactly one score."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    device = device if isinstance(device, torch.device) else resolve_device(device or "auto")
    torch_dtype = resolve_dtype(dtype, device)
    key = (model, str(device), str(torch_dtype))
    if key in _CACHE:
        return _CACHE[key]
    if is_adapter(model):  # a reward-model run's checkpoint (or its exported adapter): base + adapter
        _CACHE[key] = load_adapter_reward_model(model, device, dtype, torch_dtype, where)
        return _CACHE[key]
    try:
        config = AutoConfig.from_pretrained(model)
    except Exception as exc:  # transformers raises many kinds; all mean "cannot load"
        raise RewardError(f"{where}: {_hint(model, 'config', exc)}") from exc
    if config.num_labels != 1:
        raise RewardError(f"{where}: {num_labels_message(model, config.num_labels)}")
    tokenizer = padded_tokenizer(model, where)
    loaded, untrained = load_with_head(AutoModelForSequenceClassification, model, torch_dtype, where)
    if untrained:
        raise RewardError(
            f"{where}: {model} has no trained reward head ({', '.join(untrained)} would start "
            "random); give a model trained for sequence classification with one label"
        )
    loaded.config.pad_token_id = tokenizer.pad_token_id
    loaded.to(device).eval()
    loaded.requires_grad_(False)
    result = RewardModel(model, loaded, tokenizer, device, torch_dtype, text_limit(context_length(loaded.config),
                                                                                   tokenizer))
    _CACHE[key] = result
    log.info("loaded reward model %s on %s (%s)", model, device, torch_dtype)
    return result


def load_adapter_reward_model(folder: str, device: torch.device, dtype: str, torch_dtype, where: str) -> RewardModel:
    """A reward model given as a LoRA adapter with its score head (a reward-model run's
    checkpoint): its base model as a one-output sequence classifier, with the adapters it
    stands on merged in (engine/foundation/run_files.py's chain), so it scores exactly as
    the run did. RewardError naming `where` when the adapter has no trained head."""
    from engine.model.config import ModelConfig
    from engine.model.loading import ModelLoadError, load_base_model, resolve_model_path

    if not has_score_head(folder):
        raise RewardError(f"{where}: {folder} is an adapter without a trained score head (no 'score' in its "
                          "modules_to_save), so it would score at random; give a reward-model run's checkpoint")
    base = adapter_base_model(folder)
    try:
        path = resolve_model_path(base)
        tokenizer = padded_tokenizer(path, where)
        loaded = load_base_model(path, ModelConfig(name_or_path=base, start_from=folder), device, torch_dtype,
                                 head="score", pad_token_id=tokenizer.pad_token_id)
    except ModelLoadError as exc:
        raise RewardError(f"{where}: {exc}") from exc
    loaded.eval().requires_grad_(False)
    log.info("loaded reward model %s (base %s with its adapter) on %s (%s)", folder, base, device, torch_dtype)
    return RewardModel(folder, loaded, tokenizer, device, torch_dtype,
                       text_limit(context_length(loaded.config), tokenizer))


def reward_model_reward(*, model: str, batch_size: int = REWARD_MODEL_OPTIONS["batch_size"],
                        max_length: int | None = None, dtype: str = "auto", device=None, base_dir=None,
                        where: str = "reward_model") -> RewardFunc:
    """A reward component scoring ``prompt + completion`` with the reward model ``model``
    (a relative folder is looked up in ``base_dir``, then the current folder).

    Example (``rm`` is a folder with a one-label GPT2ForSequenceClassification):
        reward = reward_model_reward(model="rm", device="cpu")
        reward(["sort 2 1 ="], [" 1 2"]) -> [logit of "sort 2 1 = 1 2"]
    """
    loaded = load_reward_model(resolve_reward_model(model, base_dir), device, dtype, where)

    def reward(prompts: list[str], completions: list[str], **fields: list) -> list[float]:
        return loaded.score(scored_texts(prompts, completions), batch_size, max_length)

    def prefix_scores(prompts: list[str], completions: list[str]):
        """The texts' scores token by token, as RewardModel.prefix_scores (the reward's options)."""
        return loaded.prefix_scores(scored_texts(prompts, completions), batch_size, max_length)

    reward.reward_source = f"reward model {model}"
    reward.reward_model = loaded  # the loaded model, for a view of its score token by token
    reward.prefix_scores = prefix_scores  # engine/algorithms/reward_tokens.py reads the recorded rows with it
    return reward


def scored_texts(prompts: list[str], completions: list[str]) -> list[str]:
    """The texts a reward model scores: each prompt followed by its completion (the text as
    the policy sees it, its end token cut).

    >>> scored_texts(["sort 2 1 ="], [" 1 2"])
    ['sort 2 1 = 1 2']
    """
    return [p + c for p, c in zip(prompts, completions)]
