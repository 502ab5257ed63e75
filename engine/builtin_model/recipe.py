"""Recipe for the built-in tiny model shipped in ``assets/tiny-model`` (its tools
variant, ``assets/tiny-tools-model``, is :mod:`engine.builtin_model.tools`).

The app must run RL with no download, so it ships a very small GPT-2 style
model with a character-level tokenizer.  It is trained from scratch here by
supervised fine-tuning on the TRAIN split of the built-in tasks (``sort`` and
``arithmetic``, see :mod:`engine.data.tasks`) and deliberately stopped early, so it
is *partially* competent: good enough that sampled completions are sometimes
right (GRPO needs some reward signal), bad enough that RL has room to improve.

Rebuild it (about three and a half minutes on two idle CPU cores; deterministic
from ``--seed`` on a given machine)::

    python -m engine.builtin_model --out assets/tiny-model

The output loads like any Hugging Face model::

    >>> from transformers import AutoModelForCausalLM, AutoTokenizer
    >>> path = builtin_model_path()
    >>> tokenizer = AutoTokenizer.from_pretrained(path)      # doctest: +SKIP
    >>> model = AutoModelForCausalLM.from_pretrained(path)   # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from tqdm import tqdm
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from engine.builtin_model.card import save_builtin_model
from engine.data import Example, make_task

__all__ = [
    "PAD_TOKEN",
    "BOS_TOKEN",
    "EOS_TOKEN",
    "UNK_TOKEN",
    "RecipeConfig",
    "builtin_model_path",
    "build_tokenizer",
    "build_model",
    "make_sft_data",
    "encode_example",
    "greedy_accuracy",
    "sampled_pass_at_k",
    "train_builtin_model",
    "run_sft",
    "evaluate_builtin_model",
    "save_builtin_model",
]

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)  # ids 0, 1, 2, 3

# Printable ASCII plus newline and tab: every character the built-in tasks use
# and most of what a user prompt file will contain, so decode(encode(text))
# returns ``text`` unchanged for such text.  Anything else becomes <unk>.
CHARACTERS = tuple(chr(code) for code in range(32, 127)) + ("\n", "\t")

TASK_NAMES = ("sort", "arithmetic")


def builtin_model_path() -> Path:
    """Return the directory of the shipped model, ``<repo>/assets/tiny-model``.

    Example:
        >>> builtin_model_path().parts[-2:]
        ('assets', 'tiny-model')
    """
    return Path(__file__).resolve().parents[2] / "assets" / "tiny-model"


@dataclass(frozen=True)
class RecipeConfig:
    """Every knob of the recipe; the defaults build the shipped model.

    ``steps`` and ``sort_fraction`` set how competent the model ends up: they
    were tuned so that held-out greedy accuracy lands well between 0 and 100%
    on both tasks.  Sorting is learnt far faster than arithmetic, so only a
    small share of each batch is sort examples.

    Example:
        >>> RecipeConfig(steps=10).steps
        10
    """

    seed: int = 0
    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4
    n_positions: int = 128
    num_train: int = 20_000  # per task
    num_eval: int = 500  # per task, held out
    steps: int = 2000
    sort_fraction: float = 0.08  # expected share of sort examples per batch
    batch_size: int = 64
    learning_rate: float = 2e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01


# ---------------------------------------------------------------------------
# Tokenizer and model
# ---------------------------------------------------------------------------


def build_tokenizer(model_max_length: int = 128) -> PreTrainedTokenizerFast:
    """Build the character-level tokenizer: one token per character.

    No special tokens are added on encode (like GPT-2), so the round trip is
    exact, spaces included.  Padding is on the left because the model is used
    for batched generation.

    Example:
        >>> tokenizer = build_tokenizer()
        >>> ids = tokenizer.encode("sort 3 1 =")
        >>> len(ids), tokenizer.decode(ids)
        (10, 'sort 3 1 =')
        >>> tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id
        (0, 1, 2)
    """
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    # Isolate every character (spaces and newlines included) as its own piece.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    # Fuse joins the pieces back with nothing in between.
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        padding_side="left",
        model_max_length=model_max_length,
        # The default clean-up would turn " ," into "," and break the round trip.
        clean_up_tokenization_spaces=False,
    )


def build_model(config: RecipeConfig, tokenizer: PreTrainedTokenizerFast) -> GPT2LMHeadModel:
    """Build a freshly initialised GPT-2 model sized by ``config``.

    Example:
        >>> model = build_model(RecipeConfig(n_layer=1, n_embd=32, n_head=2), build_tokenizer())
        >>> model.config.eos_token_id
        2
    """
    torch.manual_seed(config.seed)
    model_config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=config.n_positions,
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        # No dropout: training is short, and RL on a model that still has
        # dropout on would score one network and update another.
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = GPT2LMHeadModel(model_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


def make_sft_data(
    config: RecipeConfig,
) -> tuple[dict[str, list[Example]], dict[str, list[Example]]]:
    """Return the train and the held-out eval examples, each keyed by task name.

    Example:
        >>> train, evals = make_sft_data(RecipeConfig(num_train=3, num_eval=2))
        >>> sorted(train), len(train["sort"]), len(evals["arithmetic"])
        (['arithmetic', 'sort'], 3, 2)
    """
    train: dict[str, list[Example]] = {}
    evals: dict[str, list[Example]] = {}
    for name in TASK_NAMES:
        train[name], evals[name] = make_task(
            name, seed=config.seed, num_train=config.num_train, num_eval=config.num_eval
        )
    return train, evals


def encode_example(
    example: Example, tokenizer: PreTrainedTokenizerFast
) -> tuple[list[int], list[int]]:
    """Token ids of ``prompt + answer + <eos>`` and their labels.

    Prompt positions get label -100 so the loss only covers the answer and
    the end-of-sequence token (the model learns to answer, and to stop).

    Example:
        >>> ids, labels = encode_example(Example("ab", {"answer": "c"}), build_tokenizer())
        >>> labels[:2], labels[2:] == ids[2:], ids[-1]
        ([-100, -100], True, 2)
    """
    prompt_ids = tokenizer.encode(example.prompt)
    answer_ids = tokenizer.encode(str(example.fields["answer"])) + [tokenizer.eos_token_id]
    return prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids


def _collate(
    encoded: list[tuple[list[int], list[int]]], pad_id: int
) -> dict[str, torch.Tensor]:
    """Right-pad a batch of (ids, labels) into tensors for a causal LM."""
    width = max(len(ids) for ids, _ in encoded)
    input_ids, labels, mask = [], [], []
    for ids, target in encoded:
        padding = width - len(ids)
        input_ids.append(ids + [pad_id] * padding)
        labels.append(target + [-100] * padding)
        mask.append([1] * len(ids) + [0] * padding)
    return {
        "input_ids": torch.tensor(input_ids),
        "labels": torch.tensor(labels),
        "attention_mask": torch.tensor(mask),
    }


def _sample_batch(
    encoded: dict[str, list[tuple[list[int], list[int]]]],
    config: RecipeConfig,
    rng: random.Random,
) -> list[tuple[list[int], list[int]]]:
    """Draw one batch, each row a sort example with probability ``sort_fraction``."""
    num_sort = sum(rng.random() < config.sort_fraction for _ in range(config.batch_size))
    return rng.sample(encoded["sort"], num_sort) + rng.sample(
        encoded["arithmetic"], config.batch_size - num_sort
    )


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------


@torch.no_grad()
def greedy_accuracy(
    model: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerFast,
    examples: list[Example],
    *,
    batch_size: int = 250,
    max_new_tokens: int = 20,
) -> float:
    """Fraction of examples whose greedy completion equals the answer exactly.

    The completion is the decoded text before the first ``<eos>``.

    Example:
        >>> model = build_model(RecipeConfig(n_layer=1, n_embd=32, n_head=2), build_tokenizer())
        >>> 0.0 <= greedy_accuracy(model, build_tokenizer(), [Example("sort 2 1 =", {"answer": " 1 2"})]) <= 1.0
        True
    """
    was_training = model.training
    model.eval()
    correct = 0
    for start in range(0, len(examples), batch_size):
        batch = examples[start : start + batch_size]
        inputs = tokenizer([e.prompt for e in batch], return_tensors="pt", padding=True)
        output = model.generate(
            **inputs,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        completions = tokenizer.batch_decode(
            output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True
        )
        correct += sum(c == e.fields["answer"] for c, e in zip(completions, batch))
    model.train(was_training)
    return correct / max(1, len(examples))


@torch.no_grad()
def sampled_pass_at_k(
    model: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerFast,
    examples: list[Example],
    *,
    k: int = 8,
    seed: int = 0,
    max_new_tokens: int = 20,
) -> float:
    """Fraction of examples where at least one of ``k`` samples (temperature 1) is exact.

    This is the headroom GRPO can exploit: a prompt whose group of samples
    holds a correct answer gives a useful advantage signal.

    Example:
        >>> model = build_model(RecipeConfig(n_layer=1, n_embd=32, n_head=2), build_tokenizer())
        >>> 0.0 <= sampled_pass_at_k(model, build_tokenizer(), [Example("sort 2 1 =", {"answer": " 1 2"})], k=2) <= 1.0
        True
    """
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)  # sampling is random; keep the measurement reproducible
    solved = 0
    for start in range(0, len(examples), 100):
        batch = examples[start : start + 100]
        inputs = tokenizer([e.prompt for e in batch], return_tensors="pt", padding=True)
        output = model.generate(
            **inputs,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            num_return_sequences=k,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        completions = tokenizer.batch_decode(
            output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True
        )
        for index, example in enumerate(batch):
            group = completions[index * k : (index + 1) * k]
            solved += any(c == example.fields["answer"] for c in group)
    model.train(was_training)
    return solved / max(1, len(examples))


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


def _learning_rate(step: int, config: RecipeConfig) -> float:
    """Linear warm-up then cosine decay to 10% of the peak rate."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_builtin_model(
    config: RecipeConfig, *, show_progress: bool = True
) -> tuple[GPT2LMHeadModel, PreTrainedTokenizerFast]:
    """Train the tiny model from scratch; return it and its tokenizer.

    Deterministic for a given ``config`` on a given machine: the batch order
    comes from a seeded ``random.Random`` and the weights from ``torch.manual_seed``.

    Example:
        >>> cfg = RecipeConfig(n_layer=1, n_embd=32, n_head=2, num_train=20, num_eval=5, steps=2, batch_size=8)
        >>> model, tokenizer = train_builtin_model(cfg, show_progress=False)
        >>> model.config.n_layer
        1
    """
    torch.manual_seed(config.seed)
    tokenizer = build_tokenizer(model_max_length=config.n_positions)
    model = build_model(config, tokenizer)
    train, _ = make_sft_data(config)
    encoded = {
        name: [encode_example(example, tokenizer) for example in examples]
        for name, examples in train.items()
    }
    rng = random.Random(f"sft:{config.seed}")

    def batch_loss() -> torch.Tensor:
        return model(**_collate(_sample_batch(encoded, config, rng), tokenizer.pad_token_id)).loss

    run_sft(model, config, batch_loss, show_progress=show_progress)
    return model, tokenizer


def run_sft(
    model: GPT2LMHeadModel,
    config: RecipeConfig,
    batch_loss: Callable[[], torch.Tensor],
    *,
    show_progress: bool = True,
) -> None:
    """Train ``model`` for ``config.steps`` steps, each on the loss ``batch_loss``
    computes for a freshly drawn batch; AdamW, warm-up then cosine (`_learning_rate`),
    clipping at 1.0. Leaves the model in eval mode. Both variants share it (tools.py
    draws episodes).

    Example:
        >>> cfg = RecipeConfig(n_layer=1, n_embd=32, n_head=2, steps=1)
        >>> model = build_model(cfg, build_tokenizer())
        >>> batch = _collate([([5, 6, 2], [-100, 6, 2])], 0)
        >>> run_sft(model, cfg, lambda: model(**batch).loss, show_progress=False)
        >>> model.training
        False
    """
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    model.train()
    progress = tqdm(range(config.steps), desc="SFT", disable=not show_progress)
    for step in progress:
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(step, config)
        loss = batch_loss()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 10 == 0:
            progress.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()


def evaluate_builtin_model(
    model: GPT2LMHeadModel, tokenizer: PreTrainedTokenizerFast, config: RecipeConfig
) -> dict[str, dict[str, float]]:
    """Held-out greedy accuracy and sampled pass@8 per task.

    Example:
        >>> cfg = RecipeConfig(n_layer=1, n_embd=32, n_head=2, num_train=2, num_eval=2)
        >>> metrics = evaluate_builtin_model(build_model(cfg, build_tokenizer()), build_tokenizer(), cfg)
        >>> sorted(metrics), sorted(metrics["greedy_accuracy"])
        (['greedy_accuracy', 'sampled_pass_at_8'], ['arithmetic', 'sort'])
    """
    _, evals = make_sft_data(config)
    return {
        "greedy_accuracy": {
            name: greedy_accuracy(model, tokenizer, evals[name]) for name in TASK_NAMES
        },
        "sampled_pass_at_8": {
            name: sampled_pass_at_k(model, tokenizer, evals[name], k=8, seed=config.seed)
            for name in TASK_NAMES
        },
    }
