"""An episode's turns through the model's chat template: the prompt with the tools'
schemas, the tokens that carry tool results back to the model, and the check that a
template can render a tool-calling conversation at all.

The episode is built by appending tokens, never by re-tokenising the conversation: the
model's turn is its sampled tokens, ended by an end token; what follows it (the tool
messages in the template's tool role, then the next assistant header) is cut from the
template's own rendering of a small dummy conversation, as TRL's
``_get_tool_suffix_ids`` does. For Qwen 2.5's template and one calculator result::

    prompt ...<|im_start|>assistant\\n            (rendered with the tools' schemas)
    <tool_call>{"name": "calculate", ...}</tool_call><|im_end|>     (the model's turn)
    \\n<|im_start|>user\\n<tool_response>\\n7\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n
                                                  (tool_result_ids: never trained)

The tokenizer is passed in (a transformers tokenizer); nothing here imports torch.
"""

from __future__ import annotations

__all__ = ["tool_support_problem", "tool_result_ids", "render_prompt_with_tools"]

FIELD = "model.chat_template"
_DUMMY_USER = {"role": "user", "content": "dummy"}

# Distinct words that must survive rendering, so a template that silently drops the
# assistant's calls (Llama 3's basic template reads only `content`) or the tool messages
# is caught (TRL's `supports_tool_calling` makes the same test).
_NAME, _KEY, _VALUE, _CONTENT = "tool_name_a8f3e2b1", "tool_arg_key_b9d4f5c2", "tool_arg_val_d6e7a9f3", \
    "tool_content_c4f9a8e2"


def _render(tokenizer, chat_template: str | None, messages: list[dict], add_generation_prompt: bool,
            tools: list[dict] | None = None) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, chat_template=chat_template, tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


def _encode(tokenizer, text: str) -> list[int]:
    """The text's tokens as the engine encodes templated text (the template writes any
    bos itself)."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def tool_support_problem(tokenizer, chat_template: str | None) -> str | None:
    """None when the template (``chat_template``, or the tokenizer's own when None)
    renders a user -> assistant (tool_calls) -> tool conversation with the call's name,
    its arguments and the tool's result all in the text; else a message naming
    ``model.chat_template``.

    e.g. Qwen 2.5's template -> None
         Llama 3's basic template -> "model.chat_template: the chat template drops the assistant's tool calls ..."
    """
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        return (f"{FIELD}: the model has no chat template, and an environment's episodes are rendered through one "
                "(the tools' schemas, the calls, the tools' results); set model.chat_template to a template file "
                "that renders tool calls")
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": _NAME, "arguments": {_KEY: _VALUE}}}]},
        {"role": "tool", "name": _NAME, "content": _CONTENT},
    ]
    fix = ("data.environment needs one that renders user -> assistant (tool_calls) -> tool; set "
           "model.chat_template to a template file that does (the model family's tool-use template)")
    try:
        text = _render(tokenizer, chat_template, messages, add_generation_prompt=False)
    except Exception as exc:  # jinja2's TemplateError (a role it refuses), TypeError, ValueError
        return f"{FIELD}: the chat template cannot render a tool call and its result ({type(exc).__name__}: {exc}); {fix}"
    if not all(word in text for word in (_NAME, _KEY, _VALUE)):
        return f"{FIELD}: the chat template drops the assistant's tool calls (their name and arguments); {fix}"
    if _CONTENT not in text:
        return f"{FIELD}: the chat template drops the tool messages (the tools' results); {fix}"
    return None


def tool_result_ids(tokenizer, chat_template: str | None, tool_messages: list[dict],
                    end_token_ids: list[int]) -> list[int]:
    """The tokens the template puts after an assistant turn that ended with an end token,
    for ``tool_messages`` (``[{"role": "tool", "name": ..., "content": ...}]``), through
    the next assistant generation prompt.

    A dummy user -> assistant (one call per tool message, by its name) conversation is
    rendered without and with the tool messages (the latter with the generation prompt);
    the first is cut after its last end token (Qwen writes ``<|im_end|>\\n``: the
    newline belongs to what follows the model's turn), and must be a prefix of the
    second; the rest is the answer. A template that rewrites earlier turns once tool
    messages follow is a ValueError naming ``model.chat_template``.

    e.g. Qwen 2.5, [{"role": "tool", "name": "calculate", "content": "7"}]
         -> the ids of "\\n<|im_start|>user\\n<tool_response>\\n7\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n"
    """
    if not tool_messages:
        raise ValueError("tool_result_ids: no tool messages to render")
    calls = [{"type": "function", "function": {"name": message.get("name", ""), "arguments": {}}}
             for message in tool_messages]
    # "content" is given: some templates (and processors) index it on every message.
    dummy = [_DUMMY_USER, {"role": "assistant", "content": "", "tool_calls": calls}]
    before = _encode(tokenizer, _render(tokenizer, chat_template, dummy, add_generation_prompt=False))
    after = _encode(tokenizer, _render(tokenizer, chat_template, dummy + list(tool_messages),
                                       add_generation_prompt=True))
    ends = set(end_token_ids)
    last_end = max((i for i, token in enumerate(before) if token in ends), default=None)
    if last_end is not None:
        before = before[:last_end + 1]
    if after[:len(before)] != before:
        raise ValueError(
            f"{FIELD}: the chat template renders an assistant turn with tool calls differently once tool messages "
            "follow it, so the tools' results cannot be appended to the model's turn as tokens; use a template "
            "that leaves earlier turns as they were (set model.chat_template to a template file)")
    return after[len(before):]


def render_prompt_with_tools(tokenizer, chat_template: str | None, messages: list[dict],
                             schemas: list[dict]) -> str:
    """The prompt text the model sees: ``messages`` through the template with the tools'
    JSON schemas (engine/episodes/environment.py's ``EnvironmentSpec.schemas``) and the
    assistant's generation prompt.

    e.g. Qwen 2.5, [{"role": "user", "content": "What is 3+4?"}], [calculate's schema]
         -> "<|im_start|>system\\n...# Tools...<tools>\\n{\\"type\\": \\"function\\", ...}\\n</tools>...<|im_start|>assistant\\n"
    """
    return _render(tokenizer, chat_template, messages, add_generation_prompt=True, tools=schemas or None)
