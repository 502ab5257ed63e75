"""The built-in model's folder as saved: weights (safetensors), tokenizer, ``recipe.json``
and the README model card. The recipe that trains it is :mod:`engine.builtin_model.recipe`,
which calls `save_builtin_model` at the end of ``python -m engine.builtin_model``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    from engine.builtin_model.recipe import RecipeConfig


def _model_card(
    config: RecipeConfig, parameters: int, metrics: dict[str, dict[str, float]]
) -> str:
    """Render the README.md model card for the saved model."""
    recipe = "\n".join(f"| `{key}` | {value} |" for key, value in asdict(config).items())
    greedy, pass_at_8 = metrics["greedy_accuracy"], metrics["sampled_pass_at_8"]
    scores = "\n".join(  # the tasks in the order they were evaluated
        f"| `{name}` | {greedy[name]:.1%} | {pass_at_8[name]:.1%} |" for name in greedy
    )
    return f"""# Built-in tiny model

A {parameters:,}-parameter GPT-2 style causal LM with a character-level
tokenizer, shipped so that RL Workbench can run GRPO with no download.

It was trained from scratch by supervised fine-tuning on the **train** split of
the built-in `sort` and `arithmetic` tasks (`engine/data/tasks.py`, loss on the
answer and `<eos>` only) and stopped early on purpose: it is *partially*
competent, so sampled completions are sometimes right (GRPO gets a reward
signal) while RL still has plenty of room to improve it.

## Rebuild

```
python -m engine.builtin_model --out assets/tiny-model
```

Deterministic from the seed on a given machine; about three and a half
minutes on two otherwise idle CPU cores.  The recipe is `engine/builtin_model/recipe.py`.

## Prompt format

| task | prompt | answer (completion) |
|---|---|---|
| `sort` | `sort 3 1 4 1 5 =` | ` 1 1 3 4 5` |
| `arithmetic` | `calc (2+3)*4 =` | ` 20` |

The model then emits `<eos>`.

## Held-out accuracy

Exact match on {config.num_eval} eval-split prompts per task (the eval split is
chosen by a hash of the prompt, so it never overlaps any train split).
*Greedy* is the accuracy RL should raise; *pass@8* is the share of prompts
where at least one of 8 samples at temperature 1 is right -- the headroom a
GRPO group of 8 can find.

| task | greedy | pass@8 (sampled) |
|---|---|---|
{scores}

## Tokenizer

One token per character: printable ASCII plus newline and tab.  Special
tokens: `<pad>`=0, `<bos>`=1, `<eos>`=2, `<unk>`=3 (any other character).
Nothing is added on encode, so `decode(encode(text)) == text`.  Padding side
is left, for batched generation.

## Recipe

| setting | value |
|---|---|
{recipe}

Architecture: `GPT2Config(n_layer={config.n_layer}, n_embd={config.n_embd}, n_head={config.n_head}, n_positions={config.n_positions})`,
no dropout, tied input/output embeddings.  Optimiser: AdamW, linear warm-up
then cosine decay to 10% of the peak rate, gradient clipping at 1.0.

## Loading

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained("assets/tiny-model")
model = AutoModelForCausalLM.from_pretrained("assets/tiny-model")
```
"""


def _use_portable_tokenizer_class(config_path: Path) -> None:
    """Name the tokenizer class ``PreTrainedTokenizerFast`` in tokenizer_config.json.

    transformers 5 writes its internal name ``TokenizersBackend``, which
    transformers 4 cannot resolve; ``PreTrainedTokenizerFast`` loads in both.
    """
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(tokenizer_config, indent=2) + "\n")


def save_builtin_model(
    out: Path,
    model: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerFast,
    config: RecipeConfig,
    metrics: dict[str, dict[str, float]],
) -> None:
    """Write model (safetensors), tokenizer, recipe and model card to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _use_portable_tokenizer_class(out / "tokenizer_config.json")
    parameters = sum(p.numel() for p in model.parameters())
    (out / "recipe.json").write_text(
        json.dumps(
            {"recipe": asdict(config), "parameters": parameters, "held_out": metrics},
            indent=2,
        )
        + "\n"
    )
    (out / "README.md").write_text(_model_card(config, parameters, metrics))
