"""The tools variant of the recipe: `builtin:tiny-tools` in ``assets/tiny-tools-model``.

The same character-level GPT-2 as `builtin:tiny` (recipe.py), with room for a whole
episode (256 positions) and a chat template in a compact Hermes style, trained by SFT on
episodes of the ``arithmetic`` task's TRAIN prompts with the built-in ``calculator``
environment: some answer directly, the others call the tool and copy its result::

    calc 3+4 = 7<eos>                                                       (direct)
    calc 3+4 =<tool_call>{"name": "calculate", "arguments": {"expression": "3+4"}}</tool_call><eos>
              <tool_response>7</tool_response> 7<eos>                       (tool episode)

(one line in the model's text; broken here to fit). The loss covers the model's own
tokens only: the prompt and the tool response get label -100. The share of tool episodes
(``tool_fraction``) and the steps are tuned so the model is *partially* competent, as
multi-turn GRPO needs: it calls the tool in a minority of sampled first turns, its direct
answers are often wrong, and it copies a tool's result right nearly always, so calling the
tool is the behaviour RL can find and reinforce.

Rebuild (a few minutes on two CPU cores)::

    python -m engine.builtin_model --variant tools --out assets/tiny-tools-model
"""

from __future__ import annotations

import json
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

from engine.builtin_model import builtin_model_folder
from engine.builtin_model.card import save_builtin_model, tools_model_card
from engine.builtin_model.recipe import RecipeConfig, _collate, build_model, build_tokenizer, run_sft
from engine.data import Example, make_task

__all__ = [
    "TOOLS_CHAT_TEMPLATE",
    "TOOL_NAME",
    "ToolsRecipeConfig",
    "tools_model_path",
    "build_tools_tokenizer",
    "episode_messages",
    "encode_episode",
    "first_turns",
    "parse_call",
    "evaluate_tools_model",
    "train_tools_model",
    "grouped_loss",
    "build_tools_model",
]

TOOL_NAME = "calculate"  # the calculator environment's one tool (engine/episodes/builtin.py)

# Compact Hermes style for a character model: no tool schemas, no role headers; the
# generation prompt adds nothing, so a model turn starts right after the user's text.
# A system message is followed by a blank line, as the engine joins a system prompt to a
# plain-text prompt (engine/model/chat.py). Tool calls come as transformers passes them
# ({"type": "function", "function": {"name", "arguments"}}), or as {"name", "arguments"};
# arguments given as a JSON string are written as they are, as Qwen's templates do.
TOOLS_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}{{ message.content }}{{ '\\n\\n' }}"
    "{%- elif message.role == 'user' -%}{{ message.content }}"
    "{%- elif message.role == 'assistant' -%}"
    "{%- if message.content -%}{{ message.content }}{%- endif -%}"
    "{%- for call in message.tool_calls or [] -%}"
    "{%- if call.function is defined -%}{%- set call = call.function -%}{%- endif -%}"
    '<tool_call>{"name": {{ call.name | tojson }}, "arguments": '
    "{%- if call.arguments is string -%}{{ ' ' + call.arguments }}"
    "{%- else -%}{{ ' ' }}{{ call.arguments | tojson }}{%- endif -%}"
    "}</tool_call>"
    "{%- endfor -%}"
    "{{ eos_token }}"
    "{%- elif message.role == 'tool' -%}<tool_response>{{ message.content }}</tool_response>"
    "{%- endif -%}"
    "{%- endfor -%}"
)

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ToolsRecipeConfig(RecipeConfig):
    """The recipe's knobs for the tools variant: RecipeConfig's, with 256 positions (an
    episode is up to ~150 characters), no sort examples (arithmetic only), and
    ``tool_fraction``, the expected share of tool episodes per batch, which sets how
    often the built model calls the tool. ``steps`` sets how well it answers directly.

    Example:
        >>> config = ToolsRecipeConfig()
        >>> config.n_positions, config.sort_fraction, 0 < config.tool_fraction < 1
        (256, 0.0, True)
    """

    n_positions: int = 256
    steps: int = 1000
    sort_fraction: float = 0.0  # unused: the tools variant trains on arithmetic only
    tool_fraction: float = 0.25


def tools_model_path() -> Path:
    """The shipped folder of `builtin:tiny-tools`.

    Example:
        >>> tools_model_path().parts[-2:]
        ('assets', 'tiny-tools-model')
    """
    return builtin_model_folder("builtin:tiny-tools")


def build_tools_tokenizer(config: ToolsRecipeConfig) -> PreTrainedTokenizerFast:
    """The character tokenizer of recipe.py with the tools chat template.

    ``<eos>`` written by the template encodes as the eos token (id 2), not five
    characters: the special tokens are matched before the text is split.

    Example:
        >>> tokenizer = build_tools_tokenizer(ToolsRecipeConfig())
        >>> tokenizer.encode("7<eos>"), tokenizer.model_max_length
        ([27, 2], 256)
    """
    tokenizer = build_tokenizer(model_max_length=config.n_positions)
    tokenizer.chat_template = TOOLS_CHAT_TEMPLATE
    return tokenizer


# ---------------------------------------------------------------------------
# Episodes
# ---------------------------------------------------------------------------


def _expression(prompt: str) -> str:
    """The expression of an arithmetic prompt. e.g. ``'calc (2+3)*4 ='`` -> ``'(2+3)*4'``."""
    return prompt.removeprefix("calc ").removesuffix(" =")


def episode_messages(example: Example, use_tool: bool) -> list[dict]:
    """One SFT episode as messages: a direct answer, or a calculator call, its result
    (an integer as the calculator writes it) and the answer.

    Example:
        >>> example = Example("calc 3+4 =", {"answer": " 7"})
        >>> [m["role"] for m in episode_messages(example, True)]
        ['user', 'assistant', 'tool', 'assistant']
        >>> episode_messages(example, True)[2]["content"], episode_messages(example, False)[1]
        ('7', {'role': 'assistant', 'content': ' 7'})
    """
    answer = str(example.fields["answer"])
    user = {"role": "user", "content": example.prompt}
    if not use_tool:
        return [user, {"role": "assistant", "content": answer}]
    call = {"type": "function", "function": {"name": TOOL_NAME, "arguments": {"expression": _expression(example.prompt)}}}
    return [
        user,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": TOOL_NAME, "content": answer.strip()},
        {"role": "assistant", "content": answer},
    ]


def encode_episode(messages: list[dict], tokenizer: PreTrainedTokenizerFast) -> tuple[list[int], list[int]]:
    """Token ids of an episode rendered by the chat template, and their labels: the
    assistant turns are trained, everything else (prompt, tool responses) is -100.

    Each message's text is what the template adds when the message is appended (with
    the generation prompt before an assistant turn), so the pieces join into exactly
    the whole episode's rendering.

    Example:
        >>> tokenizer = build_tools_tokenizer(ToolsRecipeConfig())
        >>> ids, labels = encode_episode(episode_messages(Example("calc 1+1 =", {"answer": " 2"}), False), tokenizer)
        >>> tokenizer.decode(ids), [label for label in labels if label != -100]
        ('calc 1+1 = 2<eos>', [4, 22, 2])
    """
    ids: list[int] = []
    labels: list[int] = []
    rendered = ""
    for index, message in enumerate(messages):
        trained = message["role"] == "assistant"
        before_model = index + 1 < len(messages) and messages[index + 1]["role"] == "assistant"
        text = tokenizer.apply_chat_template(
            messages[: index + 1], tokenize=False, add_generation_prompt=before_model
        )
        if not text.startswith(rendered):
            raise ValueError(f"the tools chat template rewrote earlier turns at message {index}: {text!r}")
        piece = tokenizer.encode(text[len(rendered) :])
        ids += piece
        labels += piece if trained else [-100] * len(piece)
        rendered = text
    return ids, labels


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------


@torch.no_grad()
def first_turns(
    model: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerFast,
    texts: list[str],
    *,
    sample: bool,
    max_new_tokens: int = 120,
    batch_size: int = 250,
) -> list[str]:
    """The model's turn after each text (greedy, or sampled at temperature 1), up to
    its ``<eos>``, special tokens dropped. Seed torch first for reproducible samples.

    Example:
        >>> config = ToolsRecipeConfig(n_layer=1, n_embd=32, n_head=2)
        >>> tokenizer = build_tools_tokenizer(config)
        >>> len(first_turns(build_model(config, tokenizer), tokenizer, ["calc 1+1 ="], sample=False, max_new_tokens=3))
        1
    """
    turns: list[str] = []
    for start in range(0, len(texts), batch_size):
        inputs = tokenizer(texts[start : start + batch_size], return_tensors="pt", padding=True)
        sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
        output = model.generate(
            **inputs,
            **sampling,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        turns += tokenizer.batch_decode(output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    return turns


def parse_call(turn: str) -> dict | None:
    """The arguments of a turn that is exactly one well-formed calculator call; else None.

    Example:
        >>> parse_call('<tool_call>{"name": "calculate", "arguments": {"expression": "3+4"}}</tool_call>')
        {'expression': '3+4'}
        >>> parse_call('<tool_call>{"name": "calculate", "arguments": {"expr</tool_call>') is None
        True
    """
    match = _CALL.fullmatch(turn)
    if match is None:
        return None
    try:
        call = json.loads(match.group(1))
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or call.get("name") != TOOL_NAME or not isinstance(call.get("arguments"), dict):
        return None
    return call["arguments"]


def _after_tool(tokenizer: PreTrainedTokenizerFast, example: Example) -> str:
    """The episode's text through a correct tool response, where the final answer starts."""
    return tokenizer.apply_chat_template(episode_messages(example, True)[:3], tokenize=False, add_generation_prompt=True)


def _share(hits: int, total: int) -> float:
    """hits / total, 0.0 for none. e.g. ``_share(1, 4)`` -> 0.25."""
    return round(hits / total, 4) if total else 0.0


def evaluate_tools_model(
    model: GPT2LMHeadModel, tokenizer: PreTrainedTokenizerFast, examples: list[Example], *, seed: int = 0
) -> dict[str, float]:
    """What the model does on held-out prompts (each a share of 0..1).

    - ``sampled_tool_call_rate``: first turns at temperature 1 that start with ``<tool_call>``
    - ``well_formed_call_rate``: of those, exactly one call of ``calculate`` with the prompt's expression
    - ``sampled_direct_accuracy``: of the sampled first turns without a call, the right answer
    - ``greedy_tool_call_rate`` and ``direct_greedy_accuracy``: greedy first turns that call
      the tool, and that are the right answer
    - ``answer_after_tool_accuracy``: the greedy final answer after a correct call and
      response (teacher-forced), right
    - ``sampled_episode_accuracy``: whole episodes sampled at temperature 1 that end with
      the right answer (a call of another expression counts as wrong): the reward a
      multi-turn GRPO run starts from

    Example:
        >>> config = ToolsRecipeConfig(n_layer=1, n_embd=32, n_head=2)
        >>> tokenizer = build_tools_tokenizer(config)
        >>> metrics = evaluate_tools_model(build_model(config, tokenizer), tokenizer, [Example("calc 1+1 =", {"answer": " 2"})])
        >>> sorted(metrics)[:2]
        ['answer_after_tool_accuracy', 'direct_greedy_accuracy']
    """
    was_training = model.training
    model.eval()
    prompts = [e.prompt for e in examples]
    answers = [str(e.fields["answer"]) for e in examples]
    greedy = first_turns(model, tokenizer, prompts, sample=False)
    after_tool = first_turns(model, tokenizer, [_after_tool(tokenizer, e) for e in examples], sample=False,
                             max_new_tokens=8)
    torch.manual_seed(seed)  # sampling is random; keep the measurement reproducible
    sampled = first_turns(model, tokenizer, prompts, sample=True)
    calls = [i for i, turn in enumerate(sampled) if turn.startswith("<tool_call>")]
    right_calls = [i for i in calls if parse_call(sampled[i]) == {"expression": _expression(prompts[i])}]
    called = set(calls)
    direct = [i for i in range(len(examples)) if i not in called]
    finals = first_turns(model, tokenizer, [_after_tool(tokenizer, examples[i]) for i in right_calls], sample=True,
                         max_new_tokens=8)
    solved = sum(sampled[i] == answers[i] for i in direct) + sum(
        turn == answers[i] for i, turn in zip(right_calls, finals))
    model.train(was_training)
    return {
        "sampled_tool_call_rate": _share(len(calls), len(examples)),
        "well_formed_call_rate": _share(len(right_calls), len(calls)),
        "sampled_direct_accuracy": _share(sum(sampled[i] == answers[i] for i in direct), len(direct)),
        "greedy_tool_call_rate": _share(sum(t.startswith("<tool_call>") for t in greedy), len(examples)),
        "direct_greedy_accuracy": _share(sum(t == a for t, a in zip(greedy, answers)), len(examples)),
        "answer_after_tool_accuracy": _share(sum(t == a for t, a in zip(after_tool, answers)), len(examples)),
        "sampled_episode_accuracy": _share(solved, len(examples)),
    }


# ---------------------------------------------------------------------------
# Training and the command
# ---------------------------------------------------------------------------


def train_tools_model(
    config: ToolsRecipeConfig, *, show_progress: bool = True
) -> tuple[GPT2LMHeadModel, PreTrainedTokenizerFast, list[Example]]:
    """Train the tools model from scratch; return it, its tokenizer and the held-out
    arithmetic prompts. Each batch row is a random train prompt, as a tool episode with
    probability ``tool_fraction``, else a direct answer (so the choice never depends on
    the prompt). Deterministic for a config on a given machine.

    Example:
        >>> cfg = ToolsRecipeConfig(n_layer=1, n_embd=32, n_head=2, num_train=20, num_eval=5, steps=2, batch_size=8)
        >>> model, tokenizer, held_out = train_tools_model(cfg, show_progress=False)
        >>> model.config.n_positions, len(held_out)
        (256, 5)
    """
    torch.manual_seed(config.seed)
    tokenizer = build_tools_tokenizer(config)
    model = build_model(config, tokenizer)
    train, held_out = make_task("arithmetic", seed=config.seed, num_train=config.num_train, num_eval=config.num_eval)
    encoded = [
        (encode_episode(episode_messages(e, False), tokenizer), encode_episode(episode_messages(e, True), tokenizer))
        for e in train
    ]
    rng = random.Random(f"sft-tools:{config.seed}")

    def batch_loss() -> torch.Tensor:
        groups: tuple[list, list] = ([], [])  # direct answers, tool episodes
        for _ in range(config.batch_size):
            direct, tool = encoded[rng.randrange(len(encoded))]
            use_tool = rng.random() < config.tool_fraction
            groups[use_tool].append(tool if use_tool else direct)
        return grouped_loss(model, [rows for rows in groups if rows], tokenizer.pad_token_id)

    run_sft(model, config, batch_loss, show_progress=show_progress)
    return model, tokenizer, held_out


def grouped_loss(model: GPT2LMHeadModel, groups: list[list[tuple[list[int], list[int]]]], pad_id: int) -> torch.Tensor:
    """The mean loss over every trained token of all the rows, one forward pass per
    group: short direct answers (~20 tokens) are not padded to a tool episode's ~150,
    which makes a step about three times cheaper and gives the same loss as one batch.

    Example:
        >>> config = ToolsRecipeConfig(n_layer=1, n_embd=32, n_head=2)
        >>> model = build_model(config, build_tools_tokenizer(config))
        >>> rows = [([5, 6, 2], [-100, 6, 2]), ([5, 6, 7, 8, 2], [-100, -100, 7, 8, 2])]
        >>> together = model(**_collate(rows, 0)).loss
        >>> torch.allclose(grouped_loss(model, [rows[:1], rows[1:]], 0), together)
        True
    """
    total, count = 0.0, 0
    for rows in groups:
        batch = _collate(rows, pad_id)
        trained = int((batch["labels"][:, 1:] != -100).sum())  # the labels the causal loss shifts onto
        total = total + model(**batch).loss * trained
        count += trained
    return total / count


def build_tools_model(config: ToolsRecipeConfig, out: Path) -> dict[str, float]:
    """Train, evaluate on the held-out prompts, save to ``out`` with its card; print and
    return the held-out figures (``python -m engine.builtin_model --variant tools``)."""
    started = time.perf_counter()
    model, tokenizer, held_out = train_tools_model(config)
    trained_in = time.perf_counter() - started
    print("evaluating on the held-out eval split...", flush=True)
    metrics = evaluate_tools_model(model, tokenizer, held_out, seed=config.seed)
    parameters = sum(p.numel() for p in model.parameters())
    save_builtin_model(out, model, tokenizer, config, metrics, card=tools_model_card(config, parameters, metrics))
    print(f"saved {parameters:,}-parameter model to {out} (trained in {trained_in:.0f}s, "
          f"{time.perf_counter() - started:.0f}s in all)")
    for name, value in metrics.items():
        print(f"held-out {name}: {value:.1%}")
    return metrics
