"""From a data row to an :class:`Example`: which column is the prompt, the answer and
DPO's pair, and how the answer is pulled out of its column (GSM8K's `... #### 72`).

One mapping for prompt files and Hugging Face data sets alike. A prompt is text or a
conversation (TRL's conversational format: a list of ``{"role", "content"}`` messages);
it is chat-templated later, once the tokenizer is known (engine/model/chat.py). Torch-free.

Example:
    >>> columns = Columns(prompt="question", answer_pattern=compile_answer_pattern(r"####\\s*(.+)"))
    >>> row_to_example({"question": "2+3?", "answer": "2+3 is 5.\\n#### 5"}, columns, "row 1")
    Example(prompt='2+3?', fields={'answer': '5'})
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.data.examples import Example

__all__ = ["Columns", "compile_answer_pattern", "extract_answer", "is_conversation",
           "check_conversation", "implicit_prompt", "row_to_example", "missing_columns_message"]


def compile_answer_pattern(pattern: str) -> re.Pattern:
    """The preset's `answer_pattern`, compiled; ValueError naming the field when it is
    not a regular expression or has more than one group.

    Example:
        >>> compile_answer_pattern("(a)(b)")
        Traceback (most recent call last):
        ...
        ValueError: answer_pattern: '(a)(b)' has 2 groups; use one group around the answer (or none: the whole match)
    """
    try:
        compiled = re.compile(pattern, re.DOTALL)
    except re.error as exc:
        raise ValueError(f"answer_pattern: {pattern!r} is not a regular expression ({exc})") from None
    if compiled.groups > 1:
        raise ValueError(f"answer_pattern: {pattern!r} has {compiled.groups} groups; use one group around "
                         "the answer (or none: the whole match)")
    return compiled


def extract_answer(pattern: re.Pattern, value: object, where: str) -> str:
    """The answer the pattern finds in ``value`` (its last match: a worked solution may
    quote numbers before the final one), stripped.

    Example:
        >>> extract_answer(compile_answer_pattern(r"####\\s*(.+)"), "3 + 4 = 7\\n#### 7", "row 1")
        '7'
    """
    matches = list(pattern.finditer(str(value)))
    if not matches:
        raise ValueError(f"{where}: data.answer_pattern {pattern.pattern!r} does not match the answer "
                         f"{str(value)[:80]!r}; fix the pattern or the row")
    last = matches[-1]
    return (last.group(1) if pattern.groups else last.group(0)).strip()


def is_conversation(value: object) -> bool:
    """A list of messages (TRL's conversational format) rather than text."""
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) for m in value)


def check_conversation(value: list, where: str, column: str) -> list[dict]:
    """The messages, each with a text `role` and `content`; ValueError naming the row."""
    for number, message in enumerate(value):
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            raise ValueError(f"{where}: column {column!r} message {number} needs text `role` and `content` "
                             f"(got keys {sorted(message)}); TRL's conversational format is "
                             "[{\"role\": \"user\", \"content\": \"...\"}, ...]")
    return [{"role": m["role"], "content": m["content"]} for m in value]


@dataclass(frozen=True)
class Columns:
    """Which columns of a row are what; the rest go to the rewards under their names."""

    prompt: str = "prompt"
    answer: str = "answer"
    chosen: str = "chosen"
    rejected: str = "rejected"
    answer_pattern: re.Pattern | None = None

    @classmethod
    def from_config(cls, cfg) -> "Columns":
        """From a preset's data section (engine.data.config.DataConfig)."""
        pattern = compile_answer_pattern(cfg.answer_pattern) if cfg.answer_pattern else None
        return cls(cfg.prompt_field, cfg.answer_field, cfg.chosen_field, cfg.rejected_field, pattern)


def missing_columns_message(source: str, missing: dict[str, str], found: list[str]) -> str:
    """'SOURCE has no column 'question' (data.prompt_field); its columns are: ...'."""
    said = ", ".join(f"{column!r} (data.{field})" for field, column in missing.items())
    return (f"{source} has no column {said}; its columns are: {', '.join(repr(c) for c in found) or 'none'}. "
            "Set the field to the column that holds it.")


def implicit_prompt(chosen: object, rejected: object) -> tuple[list, list, list] | None:
    """TRL's implicit prompt (`extract_prompt`), for conversations: the messages `chosen`
    and `rejected` begin with alike are the prompt, the rest each side's answer; None when
    they are not two conversations that share a beginning and then differ.

    >>> user = {"role": "user", "content": "Sky?"}
    >>> implicit_prompt([user, {"role": "assistant", "content": "blue"}], [user, {"role": "assistant", "content": "green"}])
    ([{'role': 'user', 'content': 'Sky?'}], [{'role': 'assistant', 'content': 'blue'}], [{'role': 'assistant', 'content': 'green'}])
    """
    if not (is_conversation(chosen) and is_conversation(rejected)):
        return None
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if shared == 0 or shared == len(chosen) or shared == len(rejected):
        return None
    return chosen[:shared], chosen[shared:], rejected[shared:]


def row_to_example(row: dict, columns: Columns, where: str) -> Example:
    """One row as an Example: the prompt column (text or a conversation) is the prompt;
    the answer column, through answer_pattern, is `answer`; DPO's columns are `chosen`
    and `rejected`; every other column keeps its name. A row with no prompt column whose
    `chosen` and `rejected` are conversations has TRL's implicit prompt: the messages they
    begin with alike."""
    if columns.prompt not in row:
        split = implicit_prompt(row.get(columns.chosen), row.get(columns.rejected))
        if split is None:
            raise ValueError(missing_columns_message(where, {"prompt_field": columns.prompt}, list(row)))
        prompt, chosen, rejected = split
        row = {**row, columns.prompt: prompt, columns.chosen: chosen, columns.rejected: rejected}
    prompt = row[columns.prompt]
    if is_conversation(prompt):
        prompt = check_conversation(prompt, where, columns.prompt)
    elif not isinstance(prompt, str) or not prompt:
        raise ValueError(f"{where}: prompt column {columns.prompt!r} must be non-empty text or a list of "
                         f"{{role, content}} messages, got {str(prompt)[:80]!r}")
    renamed = {columns.answer: "answer", columns.chosen: "chosen", columns.rejected: "rejected"}
    fields = {}
    for key, value in row.items():
        if key == columns.prompt:
            continue
        name = renamed.get(key, key)
        if name == "answer" and columns.answer_pattern is not None and value is not None:
            value = extract_answer(columns.answer_pattern, value, where)
        fields[name] = value
    return Example(prompt, fields)
