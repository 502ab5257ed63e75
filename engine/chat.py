"""Prompts as the model was trained to see them: through its chat template.

A prompt is text or a conversation (a list of {role, content} messages). With a chat
template (the tokenizer's, or a file the preset names), both become the templated text
that `tokenizer.apply_chat_template(..., add_generation_prompt=True)` gives: a text
prompt is one user message, `data.system_prompt` goes first unless the conversation has
its own system message. Without one, a text prompt is fed as it is.

DPO answers are templated too: the answer is what the template puts after the prompt
for an assistant turn (its end-of-turn token included), as TRL does.

Torch-free: the tokenizer is passed in (a transformers tokenizer in the engine).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.data.columns import is_conversation
from engine.data.examples import Example
from engine.preset_paths import resolve_data_path

__all__ = ["ChatFormat", "chat_format", "conversation", "answer_text", "template_examples"]

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


@dataclass(frozen=True)
class ChatFormat:
    """How a run turns prompts into model input. `template` is the Jinja text in use, or
    None (plain text); `source` says where it came from, for run_started."""

    template: str | None
    source: str  # "tokenizer", "none", "no template", or the template file's path
    system_prompt: str | None = None

    def render(self, tokenizer, prompt: str | list[dict]) -> str:
        """The text the model sees for one prompt."""
        if self.template is None:
            if is_conversation(prompt):
                raise ValueError(
                    "data: the prompts are conversations (lists of messages) but the model has no chat "
                    f"template ({self.source}); set model.chat_template to a template file, or use text prompts")
            return prompt if self.system_prompt is None else f"{self.system_prompt}\n\n{prompt}"
        return tokenizer.apply_chat_template(conversation(prompt, self.system_prompt), chat_template=self.template,
                                             tokenize=False, add_generation_prompt=True)

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
