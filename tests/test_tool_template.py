"""An episode through the chat template (engine/episodes/template.py), with the tests' tiny
Qwen2 chat model (Qwen 2.5's real template, a BPE tokenizer): the tokens of the tools'
results append to the model's turn exactly as the template renders the whole
conversation, and templates that cannot carry tool calls are named."""

from __future__ import annotations

import pytest

from engine.episodes.template import render_prompt_with_tools, tool_result_ids, tool_support_problem
from engine.episodes.tool_calls import ToolCall, as_message_tool_calls
from tests.hub_fixtures import LLAMA3_CHAT_TEMPLATE, make_tiny_chat_model

QUESTION = [{"role": "user", "content": "What is (3+4)*4?"}]
CALCULATE = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate arithmetic.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string", "description": "It."}},
                   "required": ["expression"]}}}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(make_tiny_chat_model(tmp_path_factory.mktemp("qwen") / "model"))


@pytest.fixture(scope="module")
def end_ids(tokenizer):
    return tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])  # what generation stops on


def render(tokenizer, messages, add_generation_prompt, tools=None) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def assistant_turn_ids(tokenizer, history, message, tools=None) -> list[int]:
    """The tokens the model would write for `message` after `history`: the template's
    rendering of it, from after the generation prompt through its <|im_end|>."""
    head = render(tokenizer, history, True, tools)
    whole = render(tokenizer, history + [message], False, tools)
    assert whole.startswith(head)
    turn = whole[len(head):]
    return encode(tokenizer, turn[:turn.rindex("<|im_end|>") + len("<|im_end|>")])


@pytest.mark.parametrize("results", [
    [("calculate", "28")],
    [("calculate", "7"), ("calculate", "{'error': 'division by zero'}")],
], ids=["one tool message", "two tool messages"])
def test_tool_results_append_to_the_turn_as_the_template_renders_the_conversation(tokenizer, end_ids, results):
    calls = [ToolCall("calculate", {"expression": "(3+4)*4"}), ToolCall("calculate", {"expression": "1/0"})]
    assistant = {"role": "assistant", "content": "",
                 "tool_calls": as_message_tool_calls(calls[:len(results)])}
    tool_messages = [{"role": "tool", "name": name, "content": content} for name, content in results]
    prompt_ids = encode(tokenizer, render_prompt_with_tools(tokenizer, None, QUESTION, [CALCULATE]))
    turn_ids = assistant_turn_ids(tokenizer, QUESTION, assistant, [CALCULATE])
    assert turn_ids[-1] == end_ids[0]  # the model's turn ended with its end token

    reply_ids = tool_result_ids(tokenizer, None, tool_messages, end_ids)

    expected = render(tokenizer, QUESTION + [assistant] + tool_messages, True, [CALCULATE])
    assert tokenizer.decode(prompt_ids + turn_ids + reply_ids) == expected
    contents = "".join(f"\n<tool_response>\n{content}\n</tool_response>" for _, content in results)
    assert tokenizer.decode(reply_ids) == f"\n<|im_start|>user{contents}<|im_end|>\n<|im_start|>assistant\n"


def test_a_second_round_of_tool_results_appends_the_same_way(tokenizer, end_ids):
    first = {"role": "assistant", "content": "",
             "tool_calls": as_message_tool_calls([ToolCall("calculate", {"expression": "3+4"})])}
    second = {"role": "assistant", "content": "Now times 4.",
              "tool_calls": as_message_tool_calls([ToolCall("calculate", {"expression": "7*4"})])}
    answers = [{"role": "tool", "name": "calculate", "content": "7"}], [{"role": "tool", "name": "calculate",
                                                                        "content": "28"}]
    ids = encode(tokenizer, render(tokenizer, QUESTION, True))
    history = list(QUESTION)
    for message, tool_messages in zip((first, second), answers):
        ids += assistant_turn_ids(tokenizer, history, message) + tool_result_ids(tokenizer, None, tool_messages,
                                                                                 end_ids)
        history += [message] + tool_messages
    assert tokenizer.decode(ids) == render(tokenizer, history, True)


def test_the_prompt_is_rendered_with_the_tools_schemas(tokenizer):
    text = render_prompt_with_tools(tokenizer, None, QUESTION, [CALCULATE])
    assert '"name": "calculate"' in text and "<tools>" in text and text.endswith("<|im_start|>assistant\n")
    assert "<tools>" not in render_prompt_with_tools(tokenizer, None, QUESTION, [])


def test_a_template_that_rewrites_the_turn_before_tool_messages_is_refused(tokenizer, end_ids):
    rewriting = ("{%- for m in messages %}{%- if m.role == 'assistant' %}"
                 "{{- '<|im_start|>assistant\\n' + ('LAST' if loop.last else 'EARLIER') + '<|im_end|>\\n' }}"
                 "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
                 "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
    with pytest.raises(ValueError, match=r"^model\.chat_template: the chat template renders an assistant turn"):
        tool_result_ids(tokenizer, rewriting, [{"role": "tool", "name": "calculate", "content": "7"}], end_ids)


def test_qwens_template_supports_tools(tokenizer):
    assert tool_support_problem(tokenizer, None) is None


def test_llama3s_basic_template_drops_tool_calls(tokenizer):
    problem = tool_support_problem(tokenizer, LLAMA3_CHAT_TEMPLATE)
    assert problem.startswith("model.chat_template: the chat template drops the assistant's tool calls")
    assert "data.environment" in problem


def test_a_template_without_a_tool_role_is_named(tokenizer):
    no_tool_role = ("{%- for m in messages %}{%- if m.role not in ['system', 'user', 'assistant'] %}"
                    "{{- raise_exception('Unknown role: ' + m.role) }}{%- endif %}"
                    "{{- m.role + ': ' + m.content + '\\n' }}{%- endfor %}")
    problem = tool_support_problem(tokenizer, no_tool_role)
    assert problem.startswith("model.chat_template: the chat template cannot render a tool call and its result")
    assert "Unknown role: tool" in problem


def test_a_template_that_drops_tool_messages_is_named(tokenizer):
    drops_tools = ("{%- for m in messages %}{%- if m.role == 'assistant' and m.tool_calls %}"
                   "{{- m.tool_calls | tojson }}{%- elif m.role != 'tool' %}{{- m.content }}{%- endif %}"
                   "{%- endfor %}")
    assert tool_support_problem(tokenizer, drops_tools).startswith(
        "model.chat_template: the chat template drops the tool messages")


def test_a_model_without_a_template_is_named(tokenizer):
    saved = tokenizer.chat_template
    tokenizer.chat_template = None
    try:
        assert tool_support_problem(tokenizer, None).startswith("model.chat_template: the model has no chat template")
    finally:
        tokenizer.chat_template = saved
