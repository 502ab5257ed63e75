"""Demonstrations (SFT): what the model should write after each prompt, in TRL's SFT
data formats. Torch-free.

- prompt-completion: a prompt column and a `completion` column (text, or assistant
  messages with a conversational prompt);
- conversational: one column of messages (data.prompt_field: messages) whose last
  message is the assistant's: the messages before it are the prompt, it is the completion;
- plain text: data.prompt_field: text, the whole text is trained on (the prompt is empty);
- a built-in task: its prompts with their answers as the completions.

The chat template applies later (the trainer's), as to DPO's answers.
"""

from __future__ import annotations

from pathlib import Path

from engine.data.columns import is_conversation
from engine.data.examples import Example
from engine.data.splits import load_splits

__all__ = ["COMPLETION", "TEXT_FIELD", "demonstration", "load_demonstration_splits"]

COMPLETION = "completion"  # TRL's column name
TEXT_FIELD = "text"  # TRL's dataset_text_field: a prompt column of this name is plain text


def _assistant_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if is_conversation(value):
        return "".join(str(m.get("content", "")) for m in value if m.get("role") == "assistant")
    return ""


def demonstration(e: Example, plain_text: bool, where: str) -> Example:
    """One example as a demonstration: `completion` holds what the model should write
    (text or assistant messages); a plain-text row's prompt is empty. ValueError naming
    `where` for a row with nothing to train on.

    >>> demonstration(Example([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], {}),
    ...               False, "row 1").fields["completion"]
    [{'role': 'assistant', 'content': 'hello'}]
    >>> demonstration(Example("2+2=", {}), False, "row 1")
    Traceback (most recent call last):
    ...
    ValueError: row 1: SFT needs a completion to train on: a `completion` column beside the prompt (TRL's prompt-completion format), a conversation whose last message is the assistant's (data.prompt_field: messages), or plain text (data.prompt_field: text); this row has none
    """
    fields, prompt = e.fields, e.prompt
    if plain_text:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{where}: a plain-text row (data.prompt_field: {TEXT_FIELD}) must be non-empty text")
        return Example("", {**fields, COMPLETION: prompt})
    if COMPLETION in fields:
        if not _assistant_text(fields[COMPLETION]).strip():
            raise ValueError(f"{where}: column {COMPLETION!r} is empty; SFT trains on it (give the answer the model "
                             "should write, or drop the row)")
        return e
    if is_conversation(prompt) and prompt[-1].get("role") == "assistant" and len(prompt) > 1:
        if not str(prompt[-1].get("content", "")).strip():
            raise ValueError(f"{where}: the conversation's last (assistant) message is empty; SFT trains on it")
        return Example(prompt[:-1], {**fields, COMPLETION: [prompt[-1]]})
    raise ValueError(
        f"{where}: SFT needs a completion to train on: a `completion` column beside the prompt (TRL's "
        f"prompt-completion format), a conversation whose last message is the assistant's (data.prompt_field: "
        f"messages), or plain text (data.prompt_field: {TEXT_FIELD}); this row has none")


def load_demonstration_splits(cfg, seed: int, base_dir: Path | None = None) -> tuple[list[Example], list[Example]]:
    """(train, held-out) demonstrations for a preset's data section (`cfg`): a built-in
    task's prompts with their answers, or a file's or data set's rows (`demonstration`).

    >>> from engine.data.config import DataConfig
    >>> train, _ = load_demonstration_splits(DataConfig(task="sort", num_train=2, num_eval=1), seed=0)
    >>> train[0].fields["completion"] == train[0].fields["answer"]
    True
    """
    train, held_out = load_splits(cfg, seed, base_dir)
    if cfg.task is not None:
        return tuple([Example(e.prompt, {**e.fields, COMPLETION: e.fields["answer"]}) for e in split]
                     for split in (train, held_out))
    source = "data.dataset" if cfg.dataset is not None else "data.path"
    plain = cfg.prompt_field == TEXT_FIELD
    return tuple([demonstration(e, plain, f"{source}: {name} example {number} ({str(e.prompt)[:40]!r})")
                  for number, e in enumerate(split)]
                 for name, split in (("training", train), ("held-out", held_out)))
