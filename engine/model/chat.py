"""Prompts as the model was trained to see them: through its chat template.

A prompt is text or a conversation (a list of {role, content} messages). With a chat
template (the tokenizer's, or a file the preset names), both become the templated text
that `tokenizer.apply_chat_template(..., add_generation_prompt=True)` gives: a text
prompt is one user message, `data.system_prompt` goes first unless the conversation has
its own system message. Without one, a text prompt is fed as it is.

DPO answers are templated too: the answer is what the template puts after the prompt
for an assistant turn (its end-of-turn token included), as TRL does.

Torch-free: the tokenizer is passed in (a transformers tokenizer in the engine). For
the set-up form's preview, which may not import transformers, `FolderTemplater` reads a
model folder's template and renders it with Jinja as transformers does (its sandboxed
environment and helpers); tests/test_chat_runs.py checks the two agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from engine.data.columns import is_conversation
from engine.data.examples import Example
from engine.foundation.paths import resolve_data_path

__all__ = ["ChatFormat", "chat_format", "conversation", "answer_text", "template_examples", "FolderTemplater"]

AUTO, NONE = "auto", "none"


def conversation(prompt: str | list[dict], system_prompt: str | None) -> list[dict]:
    """The prompt as messages, the system prompt first unless it has its own.

    Example:
        >>> conversation("2+3?", "Be brief.")
        [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '2+3?'}]
    """
    messages = list(prompt) if is_conversation(prompt) else [{"role": "user", "content": prompt}]
    if system_prompt is not None and messages[0].get("role") != "system":
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def with_observation(prompt: str | list[dict], observation: str) -> list[dict]:
    """A prompt with an environment's first observation appended to its last user message
    (what reset() returned, as TRL appends it).

    Example:
        >>> with_observation("Guess a number.", " It is between 1 and 9.")
        [{'role': 'user', 'content': 'Guess a number. It is between 1 and 9.'}]
    """
    messages = [dict(m) for m in conversation(prompt, None)]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last is None:
        return messages + [{"role": "user", "content": observation}]
    messages[last]["content"] = str(messages[last].get("content", "")) + observation
    return messages


@dataclass(frozen=True)
class ChatFormat:
    """How a run turns prompts into model input. `template` is the Jinja text in use, or
    None (plain text); `source` says where it came from, for run_started."""

    template: str | None
    source: str  # "tokenizer", "none", "no template", or the template file's path
    system_prompt: str | None = None
    tools: tuple = ()  # the JSON schemas of an episode's tools (engine/episodes/), rendered by the template

    def render(self, tokenizer, prompt: str | list[dict]) -> str:
        """The text the model sees for one prompt."""
        if self.template is None:
            if is_conversation(prompt):
                raise ValueError(
                    "data: the prompts are conversations (lists of messages) but the model has no chat "
                    f"template ({self.source}); set model.chat_template to a template file, or use text prompts")
            return prompt if self.system_prompt is None else f"{self.system_prompt}\n\n{prompt}"
        return tokenizer.apply_chat_template(conversation(prompt, self.system_prompt), chat_template=self.template,
                                             tools=list(self.tools) or None, tokenize=False, add_generation_prompt=True)

    def answer(self, tokenizer, prompt: str | list[dict], answer: str | list[dict]) -> str:
        """DPO: the text after the templated prompt for an assistant turn holding `answer`
        (a text, or assistant messages); plain text without a template."""
        content = answer_text(answer)
        if self.template is None:
            return content
        messages = conversation(prompt, self.system_prompt)
        head = self.render(tokenizer, prompt)
        whole = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": content}],
                                              chat_template=self.template, tokenize=False)
        # Templates that rewrite earlier turns (dropping reasoning, say) break the prefix;
        # then the answer's own text is used and the end token is added on encoding.
        return whole[len(head):] if whole.startswith(head) else content


def answer_text(answer: str | list[dict]) -> str:
    """A DPO answer as text: TRL's conversational answers are assistant messages.

    Example:
        >>> answer_text([{"role": "assistant", "content": "42"}])
        '42'
    """
    if is_conversation(answer):
        return "".join(m.get("content", "") for m in answer if m.get("role") == "assistant")
    if not isinstance(answer, str):
        raise ValueError(f"data: a DPO answer must be text or assistant messages, got {str(answer)[:80]!r}")
    return answer


def chat_format(setting: str, tokenizer_template: str | None, system_prompt: str | None,
                base_dir: Path | None = None) -> ChatFormat:
    """The ChatFormat a preset's `model.chat_template` asks for: `auto` (the tokenizer's
    template when it has one), `none`, or a template file."""
    if setting == NONE:
        return ChatFormat(None, "none", system_prompt)
    if setting == AUTO:
        if tokenizer_template:
            return ChatFormat(tokenizer_template, "tokenizer", system_prompt)
        return ChatFormat(None, "no template", system_prompt)
    path = resolve_data_path(setting, base_dir)
    if not path.is_file():
        raise ValueError(f"model.chat_template: {setting!r} is neither `auto`, `none` nor a template file "
                         f"(looked for {path})")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"model.chat_template: cannot read {path}: {exc}") from None
    return ChatFormat(text, str(path), system_prompt)


def template_examples(examples: list[Example], fmt: ChatFormat, tokenizer, pairs: bool = False) -> list[Example]:
    """The examples with their prompts templated (and with `pairs`, DPO's chosen and
    rejected answers as the text after the prompt); the other fields unchanged."""
    out = []
    for e in examples:
        fields = e.fields
        if pairs:
            fields = {**fields, **{side: fmt.answer(tokenizer, e.prompt, fields[side]) for side in ("chosen", "rejected")}}
        out.append(Example(fmt.render(tokenizer, e.prompt), fields))
    return out


# ------------------------------------------------ a preview without transformers


def _token_text(value) -> str | None:
    """A special token as tokenizer_config.json stores it: text, or {"content": text}."""
    return value.get("content") if isinstance(value, dict) else value


class FolderTemplater:
    """The chat template of a model folder, rendered with Jinja the way transformers'
    `apply_chat_template` does (sandboxed, trim_blocks and lstrip_blocks, its `tojson`,
    `raise_exception` and `strftime_now`, the special tokens as variables), for previews
    that may not import transformers. The engine itself always uses the tokenizer."""

    def __init__(self, folder: Path):
        folder = Path(folder)
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        template = config.get("chat_template")
        if isinstance(template, list):  # several named templates: the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        jinja_file = folder / "chat_template.jinja"
        self.chat_template = jinja_file.read_text(encoding="utf-8") if jinja_file.is_file() else template
        self.special_tokens = {key: _token_text(config.get(key)) for key in
                               ("bos_token", "eos_token", "pad_token", "unk_token") if config.get(key) is not None}

    def apply_chat_template(self, messages, chat_template=None, tokenize=False, add_generation_prompt=False,
                            tools=None):
        template = _compiled_template(chat_template or self.chat_template)
        return template.render(messages=messages, add_generation_prompt=add_generation_prompt, tools=tools,
                               **self.special_tokens)


@lru_cache(maxsize=16)
def _compiled_template(text: str):
    """A chat template compiled once (transformers caches its own the same way): compiling
    costs ~25 ms, rendering ~0.1 ms, and a preview templates thousands of prompts."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda f: datetime.now().strftime(f))
    return env.from_string(text)
