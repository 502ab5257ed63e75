"""Tool calls read from a turn's text (engine/episodes/tool_calls.py): the three formats,
malformed calls kept with their problem, and the format read off a chat template."""

from __future__ import annotations

import pytest

from engine.episodes.tool_calls import (
    TOOL_CALL_FORMATS,
    ToolCall,
    as_message_tool_calls,
    call_format,
    detect_format,
    parse_tool_calls,
)
from tests.hub_fixtures import LLAMA3_CHAT_TEMPLATE, QWEN25_CHAT_TEMPLATE

# Llama 3.1's template, abridged to the parts that tell its tool-call format.
LLAMA31_LIKE_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{%- if message.role == 'ipython' or message.role == 'tool' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content | tojson + '<|eot_id|>' }}"
    "{%- elif 'tool_calls' in message %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}"
    "{%- if builtin_tools is defined %}{{- '<|python_tag|>' }}{%- endif %}"
    "{{- '{\"name\": \"' + message.tool_calls[0].function.name + '\", \"parameters\": ' }}"
    "{{- message.tool_calls[0].function.arguments | tojson }}{{- '}<|eot_id|>' }}"
    "{%- else %}{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}"
    "{%- endif %}{%- endfor %}"
)


# ---------------------------------------------------------------- hermes


def test_hermes_one_call():
    text = 'Let me compute.\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "3+4"}}\n</tool_call>'
    assert parse_tool_calls(text, "hermes") == [ToolCall("calculate", {"expression": "3+4"})]


def test_hermes_several_calls_in_order():
    text = ('<tool_call>{"name": "calculate", "arguments": {"expression": "3+4"}}</tool_call>\n'
            '<tool_call>{"name": "lookup", "arguments": {"word": "cat", "limit": 2}}</tool_call>')
    assert parse_tool_calls(text, "hermes") == [ToolCall("calculate", {"expression": "3+4"}),
                                               ToolCall("lookup", {"word": "cat", "limit": 2})]


def test_hermes_arguments_as_a_json_string_and_missing_arguments():
    text = ('<tool_call>{"name": "calculate", "arguments": "{\\"expression\\": \\"2*5\\"}"}</tool_call>'
            '<tool_call>{"name": "count"}</tool_call>')
    assert parse_tool_calls(text, "hermes") == [ToolCall("calculate", {"expression": "2*5"}), ToolCall("count", {})]


def test_hermes_malformed_json_is_a_call_with_its_problem():
    calls = parse_tool_calls('<tool_call>{"name": "calculate", "arguments": {"expression": 3+4}}</tool_call>',
                             "hermes")
    assert len(calls) == 1 and calls[0].name == "calculate" and calls[0].arguments == {}
    assert calls[0].problem.startswith("the tool call is not valid JSON: ")


@pytest.mark.parametrize("body, problem", [
    ('{"arguments": {}}', 'a tool call needs a "name"'),
    ('["calculate"]', "a tool call must be a JSON object, got list"),
    ('{"name": "calculate", "arguments": [1, 2]}', 'the "arguments" of calculate must be a JSON object, got list'),
    ('{"name": "calculate", "arguments": "{oops"}', 'the "arguments" of calculate are not valid JSON'),
])
def test_hermes_calls_of_the_wrong_shape_keep_their_problem(body, problem):
    [call] = parse_tool_calls(f"<tool_call>{body}</tool_call>", "hermes")
    assert call.problem.startswith(problem) and call.arguments == {}


def test_hermes_an_unclosed_call_is_malformed_after_the_good_ones():
    text = ('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "calculate", '
            '"arguments": {"expression": "1+')
    calls = parse_tool_calls(text, "hermes")
    assert calls[0] == ToolCall("a", {}) and calls[1].name == "calculate"
    assert calls[1].problem == "<tool_call> without its closing </tool_call>"


def test_text_without_calls_is_no_call():
    for fmt in TOOL_CALL_FORMATS:
        assert parse_tool_calls("The answer is 7.", fmt) == []
        assert parse_tool_calls("", fmt) == []
    assert parse_tool_calls('{"answer": 7}', "llama3_json") == []  # JSON, but not a call
    assert parse_tool_calls("[1, 2, 3] are the numbers", "pythonic") == []


# ---------------------------------------------------------------- llama3_json


def test_llama3_json_with_and_without_the_python_tag():
    call = ToolCall("calculate", {"expression": "3+4"})
    body = '{"name": "calculate", "parameters": {"expression": "3+4"}}'
    assert parse_tool_calls(body, "llama3_json") == [call]
    assert parse_tool_calls("<|python_tag|>" + body, "llama3_json") == [call]
    assert parse_tool_calls(f"  <|python_tag|>{body}<|eom_id|>", "llama3_json") == [call]


def test_llama3_json_takes_arguments_too_and_several_calls_joined_by_semicolons():
    text = ('{"name": "calculate", "arguments": {"expression": "1;2"}}; '
            '{"name": "lookup", "parameters": {"word": "cat"}}')
    assert parse_tool_calls(text, "llama3_json") == [ToolCall("calculate", {"expression": "1;2"}),
                                                    ToolCall("lookup", {"word": "cat"})]


def test_llama3_json_malformed_calls_keep_their_problem():
    [call] = parse_tool_calls('{"name": "calculate", "parameters": {"expression": }', "llama3_json")
    assert call.name == "calculate" and call.problem.startswith("the tool call is not valid JSON")
    [call] = parse_tool_calls("<|python_tag|>print(3 + 4)", "llama3_json")  # tagged, so meant as a call
    assert call.name == "unknown" and call.problem.startswith("the tool call is not valid JSON")
    first, second = parse_tool_calls('{"name": "a", "parameters": {}} and then some words', "llama3_json")
    assert first == ToolCall("a", {}) and second.problem.startswith("text after a tool call: 'and then")


# ---------------------------------------------------------------- pythonic


def test_pythonic_several_calls_with_keyword_literals():
    text = '[calculate(expression="3+4"), lookup(word=\'cat\', limit=2, exact=True, tags=["a", "b"], extra=None)]'
    assert parse_tool_calls(text, "pythonic") == [
        ToolCall("calculate", {"expression": "3+4"}),
        ToolCall("lookup", {"word": "cat", "limit": 2, "exact": True, "tags": ["a", "b"], "extra": None})]
    assert parse_tool_calls("<|python_tag|>[count()]", "pythonic") == [ToolCall("count", {})]


def test_pythonic_malformed_calls_keep_their_problem():
    [call] = parse_tool_calls('[calculate(expression="3+4"', "pythonic")
    assert call.name == "calculate" and call.problem.startswith("the tool calls are not a valid Python list")
    good, bad = parse_tool_calls("[count(), calculate(expression=x)]", "pythonic")
    assert good == ToolCall("count", {}) and bad.name == "calculate"
    assert bad.problem == "the argument expression of calculate is not a literal value: x"
    [call] = parse_tool_calls("[calculate('3+4')]", "pythonic")
    assert call.problem == "calculate was given positional arguments; write them as key=value"
    [call] = parse_tool_calls("[calculate(**args)]", "pythonic")
    assert call.problem.startswith("calculate was given **args")
    [call] = parse_tool_calls("[calculate(expression=__import__('os').system('ls'))]", "pythonic")
    assert call.problem.startswith("the argument expression of calculate is not a literal value")


def test_an_unknown_format_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"data\.tool_call_format: 'xml' .* hermes, llama3_json, pythonic"):
        parse_tool_calls("", "xml")


# ---------------------------------------------------------------- the format of a template


def test_the_format_is_read_off_the_chat_template():
    assert detect_format(QWEN25_CHAT_TEMPLATE) == "hermes"
    assert detect_format(LLAMA31_LIKE_TEMPLATE) == "llama3_json"
    assert detect_format(LLAMA3_CHAT_TEMPLATE) is None  # Llama 3's basic template has no tools
    assert detect_format(None) is None


def test_call_format_auto_detects_or_says_which_to_set():
    assert call_format("auto", QWEN25_CHAT_TEMPLATE) == "hermes"
    assert call_format("pythonic", QWEN25_CHAT_TEMPLATE) == "pythonic"  # a setting wins over the template
    with pytest.raises(ValueError, match=r"^data\.tool_call_format: `auto` cannot tell .* hermes, llama3_json, "
                                         r"pythonic$"):
        call_format("auto", LLAMA3_CHAT_TEMPLATE)
    with pytest.raises(ValueError, match=r"^data\.tool_call_format: 'json' is not a tool-call format"):
        call_format("json", QWEN25_CHAT_TEMPLATE)


def test_the_assistant_messages_tool_calls_leave_malformed_ones_out():
    calls = [ToolCall("calculate", {"expression": "3+4"}), ToolCall("unknown", {}, "not JSON"),
             ToolCall("count", {})]
    assert as_message_tool_calls(calls) == [
        {"type": "function", "function": {"name": "calculate", "arguments": {"expression": "3+4"}}},
        {"type": "function", "function": {"name": "count", "arguments": {}}}]


def test_the_data_sections_formats_are_the_registrys():
    # data/ sits below episodes/, so DataConfig lists the names itself; they must agree
    from typing import get_args

    from engine.data.config import DataConfig

    assert get_args(DataConfig.model_fields["tool_call_format"].annotation) == ("auto", *TOOL_CALL_FORMATS)
