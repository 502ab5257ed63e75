"""Hardening round three, prompts past the model's context with an environment: a first
observation from reset() that overflows it is refused with the numbers and the fix (at
run time before sampling, and by `rl-engine validate`, which resets the first rows); a
prompt the tools' descriptions fill says so; and the run's own over-long-prompt message
names the row and the file as validate's does."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from engine.cli import main
from engine.foundation.limits import context_problem
from engine.run import rundir
from engine_runs import cli
from tests.hub_fixtures import make_tiny_chat_model

# reset() returns what the row's `pad` column says: that many "x" after "The ledger starts at 0."
LEDGER = '''
class Ledger:
    def reset(self, pad="0", **row):
        self.total = 0
        return " The ledger starts at 0." + "x" * int(pad)

    def add(self, amount: int) -> str:
        """Add an amount to the ledger.

        Args:
            amount: what to add
        """
        self.total += amount
        return str(self.total)
'''

# A tool whose description alone outgrows a small context.
WORDY = '''
class Wordy:
    def reset(self, **row):
        pass

    def add(self, amount: int) -> str:
        """Add an amount to the ledger. {words}

        Args:
            amount: what to add
        """
        return str(amount)
'''


def _preset(folder: Path, pads: list[int], model: str = "builtin:tiny-tools", environment: str = "ledger.py:Ledger",
            max_completion_length: int = 40) -> Path:
    """A GRPO preset on a data file of arithmetic prompts, one row per pad (reset's observation length)."""
    (folder / "ledger.py").write_text(LEDGER)
    rows = [{"prompt": f"What is {i}+1?", "answer": str(i + 1), "pad": str(pad)} for i, pad in enumerate(pads)]
    (folder / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    preset = {"name": "ledger", "model": {"name_or_path": model, "lora": {"r": 4, "alpha": 8.0}},
              "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": max_completion_length,
                            "beta": 0.0},
              "data": {"task": None, "path": "data.jsonl", "num_eval": 0, "environment": environment},
              "rewards": [{"name": "exact_match"}],
              "training": {"max_steps": 1, "batch_size": 8, "eval_steps": 0, "save_steps": 0,
                           "record_rollouts": 2, "log_completions": 4}}
    path = folder / "preset.yaml"
    path.write_text(yaml.safe_dump(preset))
    return path


# -------------------------------------------- N2: reset()'s observation past the context


def test_a_run_refuses_an_observation_past_the_context_before_sampling(tmp_path):
    # 8 train rows: the run takes 2 prompts a step; every row's observation is 300 characters
    # (tokens, for the tools model) past a context of 256
    result = cli("run", _preset(tmp_path, [300] * 8), "--run-dir", tmp_path / "run", "--quiet", cwd=tmp_path)
    assert result.code == 1, result.err
    assert "IndexError" not in result.err and "Traceback" not in result.err
    (failed,) = [e for e in rundir.read_events(tmp_path / "run") if e["type"] == "run_failed"]
    message = failed["message"]
    assert message.startswith("data.environment: Ledger.reset's first observation")
    assert f"of data file {tmp_path / 'data.jsonl'}" in message
    assert "more than the model's whole context of 256 tokens" in message
    assert "shorten the observation reset returns" in message.lower()


def test_validate_resets_the_first_rows_and_names_the_one_past_the_context(tmp_path, capsys):
    pads = [0, 0, 200, 0, 0, 0, 0, 0]  # row 3: 200 + its prompt fit the context, not with 40 to complete
    assert main(["validate", str(_preset(tmp_path, pads))]) == 2
    output = capsys.readouterr().err
    assert f"Ledger.reset's first observation for row 3 of data file {tmp_path / 'data.jsonl'}" in output
    assert "with algorithm.max_completion_length 40 an episode needs" in output and "context is 256" in output
    assert "lower algorithm.max_completion_length to at most" in output
    assert main(["validate", str(_preset(tmp_path, [0] * 8))]) == 0, capsys.readouterr().err


# ------------------------------------------------ N12: the tools' descriptions fill the prompt


def test_the_context_message_names_the_tools_descriptions_when_they_fill_the_prompt():
    message = context_problem([883, 40], 100, 512, where=lambda i: f"row {i + 1}", tools_tokens=850)
    assert message.startswith("data: the longest prompt (row 1) has 883 tokens, more than the model's whole context")
    assert "the tools' descriptions (data.environment) take 850 of its 883 tokens" in message
    assert "Shorten or drop that row" not in message
    # room for the prompt but not the completion: the tools are named beside the completion length
    message = context_problem([450, 40], 100, 512, where=lambda i: f"row {i + 1}", tools_tokens=420)
    assert "Lower max_completion_length to at most 62" in message and "420 of its 450 tokens" in message
    # a row that is long by itself is still the row's fault
    assert "Shorten or drop that row" in context_problem([900], 10, 512, tools_tokens=100)


def test_validate_names_the_tools_descriptions(tmp_path, capsys):
    model = make_tiny_chat_model(tmp_path / "qwen", context=512)  # the tools' preamble alone is ~550 tokens
    (tmp_path / "wordy.py").write_text(WORDY.replace("{words}", "It keeps a running total."))
    preset = _preset(tmp_path, [0] * 8, model=str(model), environment="wordy.py:Wordy")
    assert main(["validate", str(preset)]) == 2
    output = capsys.readouterr().err
    assert "the tools' descriptions (data.environment) take" in output and "Shorten or drop that row" not in output


# ------------------------------------------------ the run names the row, as validate does


def test_the_runs_over_long_prompt_message_names_the_row_and_the_file(tmp_path, capsys):
    rows = [f'{{"prompt": "sort {i} 1 =", "answer": "1 {i}"}}' for i in range(5)]
    rows.insert(2, '{"prompt": "' + "x " * 500 + '", "answer": "1"}')
    (tmp_path / "data.jsonl").write_text("\n".join(rows) + "\n")
    preset = {"name": "inputs", "model": {"name_or_path": "builtin:tiny"},
              "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 14},
              "data": {"task": None, "path": "data.jsonl", "num_eval": 1}, "rewards": [{"name": "exact_match"}]}
    (tmp_path / "preset.yaml").write_text(yaml.safe_dump(preset))
    assert main(["run", str(tmp_path / "preset.yaml"), "--run-dir", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"the longest prompt (row 3 of data file {tmp_path / 'data.jsonl'}) has" in err


def test_validate_names_a_keyboard_interrupt_raised_by_reset(tmp_path, capsys):
    # validate resets the first rows; a KeyboardInterrupt of reset's own (no Ctrl-C) was a
    # bare traceback there, since Python's own SIGINT handler cannot tell the two apart.
    preset = _preset(tmp_path, [0] * 8)
    (tmp_path / "ledger.py").write_text(LEDGER.replace('        self.total = 0\n',
                                                       '        self.total = 0\n        raise KeyboardInterrupt\n'))
    assert main(["validate", str(preset)]) == 2
    output = capsys.readouterr().err
    assert "data.environment: Ledger.reset raised KeyboardInterrupt" in output and "no Ctrl-C was pressed" in output
    assert f"(at {tmp_path / 'ledger.py'}, line 5)" in output and "Traceback" not in output


def test_a_real_ctrl_c_inside_reset_during_validate_is_an_interruption_not_resets_fault(tmp_path, capsys):
    # The SIGINT is real (sent to this process while reset runs): validate says it was
    # interrupted, and does not blame reset for a KeyboardInterrupt of its own.
    preset = _preset(tmp_path, [0] * 8)
    (tmp_path / "ledger.py").write_text("import os, signal, time\n" + LEDGER.replace(
        '        self.total = 0\n', '        self.total = 0\n        os.kill(os.getpid(), signal.SIGINT)\n'
                                   '        time.sleep(5)\n'))
    assert main(["validate", str(preset)]) == 130
    output = capsys.readouterr().err
    assert "validation interrupted (Ctrl-C)" in output and "Ledger.reset" not in output
