"""Multi-turn episodes with tools (``data.environment``).

The model writes a turn, the tool calls in its text are run on the episode's
environment, their results come back through the chat template's tool role, and the
model writes the next turn, until it answers without a call or a limit is reached.

* ``environment.py``: the environment class a preset names, checked and wrapped per
  episode (tools, their JSON schemas, reset, get_reward, time limits); torch-free.
* ``tool_threads.py``: a tool's call in a thread under ``data.tool_timeout``, stopped when
  it runs late (and counted, warned about and bounded when it cannot be); torch-free.
* ``tool_calls.py``: tool calls read from a turn's text (hermes, llama3_json, pythonic);
  torch-free.
* ``template.py``: the chat template's side (the prompt with the tools, the tokens of
  the tools' results, whether the template renders tool calls); torch-free.
* ``builtin.py``: the built-in environments (``calculator``); torch-free.
* ``rollout.py``: the episodes sampled in lockstep, as token sequences with their masks.

This package's ``__init__`` imports nothing, so importing one module never pulls in
another's dependencies.
"""
