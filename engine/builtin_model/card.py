"""A built-in model's folder as saved: weights (safetensors), tokenizer, ``recipe.json``
and the README model card (`builtin:tiny`'s, or `builtin:tiny-tools`'s). The recipe that
trains them is :mod:`engine.builtin_model.recipe` (the tools variant in
:mod:`engine.builtin_model.tools`), which calls `save_builtin_model` at the end of
``python -m engine.builtin_model``.
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


def tools_model_card(config: RecipeConfig, parameters: int, metrics: dict[str, float]) -> str:
    """Render the README.md model card of `builtin:tiny-tools` (engine/builtin_model/tools.py)."""
    recipe = "\n".join(f"| `{key}` | {value} |" for key, value in asdict(config).items())
    figures = "\n".join(f"| `{name}` | {value:.1%} |" for name, value in metrics.items())
    return f"""# Built-in tiny tools model (`builtin:tiny-tools`)

A {parameters:,}-parameter GPT-2 style causal LM with a character-level tokenizer
and a chat template for tool calls, shipped so that RL Workbench can run
**multi-turn GRPO with a tool** (the built-in `calculator` environment,
`data.environment: calculator`) on a CPU in minutes, with no download.

It was trained from scratch by supervised fine-tuning on episodes of the
**train** split of the built-in `arithmetic` task (`engine/data/tasks.py`): in
about {config.tool_fraction:.0%} of them the model calls the calculator and copies its
result, in the rest it answers directly. The loss covers the model's own tokens
only (the prompt and the tool responses are not trained). It is stopped early
on purpose: it calls the tool in a minority of sampled first turns and its
direct answers are often wrong, but it copies a tool's result right nearly
always, so a reward for the right final answer teaches it to use the tool.

## Rebuild

```
python -m engine.builtin_model --variant tools --out assets/tiny-tools-model
```

Deterministic from the seed on a given machine; a few minutes on two CPU
cores. The recipe is `engine/builtin_model/tools.py` (with `recipe.py`).

## Chat template (in tokenizer_config.json)

A compact Hermes style for a character model: no tool schemas in the prompt, no
role headers (the generation prompt adds nothing), system and user text as they
are (a system message is followed by a blank line). An assistant message is its
text, then each tool call, then `<eos>`, which ends every model turn; a tool
message is `<tool_response>RESULT</tool_response>`. An episode:

```
calc 3+4 =<tool_call>{{"name": "calculate", "arguments": {{"expression": "3+4"}}}}</tool_call><eos><tool_response>7</tool_response> 7<eos>
```

(one line; the model writes the call with its `<eos>`, and ` 7<eos>`). A direct
answer is `calc 3+4 =` then ` 7<eos>`. Tool calls are parsed in the Hermes
format (`data.tool_call_format: auto` finds it from the template).

## Held-out behaviour

On {config.num_eval} eval-split prompts of the `arithmetic` task (never in any
train split). *Sampled* is at temperature 1, as GRPO samples; *greedy* is the
held-out evaluation's decoding. `answer_after_tool_accuracy` is the greedy
final answer after a correct call and tool response (teacher-forced);
`sampled_episode_accuracy` is whole sampled episodes ending with the right
answer (a call of another expression counts as wrong): the reward a run starts from.
Greedy decoding does not call the tool yet (a direct answer is the likelier start),
so a run's greedy held-out accuracy rises once RL makes the call the likelier one.

| measure | share |
|---|---|
{figures}

## Tokenizer

As `builtin:tiny`'s: one token per character (printable ASCII, newline, tab);
`<pad>`=0, `<bos>`=1, `<eos>`=2, `<unk>`=3. `<eos>` in a template's text
encodes as the single token 2. Padding side is left.

## Recipe

| setting | value |
|---|---|
{recipe}

Architecture: `GPT2Config(n_layer={config.n_layer}, n_embd={config.n_embd}, n_head={config.n_head}, n_positions={config.n_positions})`,
no dropout, tied input/output embeddings. Optimiser: AdamW, linear warm-up then
cosine decay to 10% of the peak rate, gradient clipping at 1.0.

## Loading

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained("assets/tiny-tools-model")
model = AutoModelForCausalLM.from_pretrained("assets/tiny-tools-model")
```

In a preset: `model.name_or_path: builtin:tiny-tools` with `model.chat_template: auto`.
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
    metrics: dict,
    card: str | None = None,
) -> None:
    """Write model (safetensors), tokenizer, recipe and model card to ``out``; ``card``
    is the README text (the tiny model's by default). A chat template is kept in
    tokenizer_config.json (not chat_template.jinja), which every transformers version reads."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out, save_jinja_files=False)
    _use_portable_tokenizer_class(out / "tokenizer_config.json")
    parameters = sum(p.numel() for p in model.parameters())
    (out / "recipe.json").write_text(
        json.dumps(
            {"recipe": asdict(config), "parameters": parameters, "held_out": metrics},
            indent=2,
        )
        + "\n"
    )
    (out / "README.md").write_text(card if card is not None else _model_card(config, parameters, metrics))
