"""The environment a preset names (engine/episodes/environment.py): loaded from a file
next to the preset, checked (each refusal naming the field, the method and the
parameter), and wrapped per episode (reset from a row, tools under a time limit, the
reward); and the built-in calculator (engine/episodes/builtin.py)."""

from __future__ import annotations

import sys
import textwrap

import pytest
from transformers.utils import get_json_schema

from engine.episodes.builtin import Calculator, evaluate_arithmetic
from engine.episodes.environment import (
    ENVIRONMENTS,
    EnvironmentError,
    EnvironmentProblem,
    ToolResult,
    environment_problem,
    load_environment,
)

GAME = '''
import asyncio
import threading

RELEASE = threading.Event()  # the test lets the hanging tool go once it has its answer


class Game:
    """Guess the secret number."""

    def reset(self, answer, level=1):
        self.secret = int(answer)
        self.level = level
        self.guesses = 0
        return f"Level {level}: guess a number."

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: The guess.
        """
        self.guesses += 1
        return "higher" if number < self.secret else "lower" if number > self.secret else "yes"

    def fail(self, why: str) -> str:
        """A tool that always raises.

        Args:
            why: The error's text.
        """
        raise RuntimeError(why)

    def hang(self) -> str:
        """A tool that does not return in time."""
        RELEASE.wait(30)
        return "late"

    def count(self) -> int:
        """How many guesses so far."""
        return self.guesses

    def table(self) -> dict:
        """The state as a dict."""
        return {"secret": self.secret, "level": self.level}

    async def later(self, word: str) -> str:
        """An async tool.

        Args:
            word: Echoed back.
        """
        await asyncio.sleep(0)
        return word.upper()

    def get_reward(self) -> float:
        return 1.0 / max(self.guesses, 1)

    def _helper(self):
        return "not a tool"
'''


def write_env(folder, body: str, name: str = "my_env.py"):
    path = folder / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def refusal(tmp_path, body: str, cls: str = "Env") -> str:
    """The message load_environment refuses the class with (checked to name the field),
    and environment_problem gives the same one."""
    write_env(tmp_path, body)
    with pytest.raises(EnvironmentProblem) as caught:
        load_environment(f"my_env.py:{cls}", tmp_path)
    message = str(caught.value)
    assert message.startswith("data.environment: ")
    assert environment_problem(f"my_env.py:{cls}", tmp_path) == message
    return message


@pytest.fixture
def game(tmp_path):
    write_env(tmp_path, GAME)
    return load_environment("my_env.py:Game", tmp_path)


# ---------------------------------------------------------------- loading


def test_a_class_next_to_the_preset_loads_with_its_tools_and_their_schemas(game, tmp_path):
    assert game.label == "my_env.py:Game" and game.cls.__name__ == "Game"
    assert game.path == (tmp_path / "my_env.py").resolve()
    # Public functions but reset and get_reward, sorted by name as inspect.getmembers gives them.
    assert game.tool_names == ["count", "fail", "guess", "hang", "later", "table"]
    assert game.schemas == [get_json_schema(getattr(game.cls, name)) for name in game.tool_names]
    assert game.schemas[2]["function"]["parameters"] == {
        "type": "object", "properties": {"number": {"type": "integer", "description": "The guess."}},
        "required": ["number"]}
    assert game.has_reward and game.reward_label == "Game"
    assert environment_problem("my_env.py:Game", tmp_path) is None


def test_a_relative_file_is_found_in_the_current_folder_when_not_next_to_the_preset(tmp_path, monkeypatch):
    (tmp_path / "presets").mkdir()
    write_env(tmp_path, GAME, "cwd_env.py")
    monkeypatch.chdir(tmp_path)
    assert load_environment("cwd_env.py:Game", tmp_path / "presets").path == (tmp_path / "cwd_env.py").resolve()


def test_the_builtin_calculator_loads_by_name():
    spec = load_environment("calculator", None)
    assert ENVIRONMENTS["calculator"] is Calculator and spec.cls is Calculator
    assert spec.tool_names == ["calculate"] and not spec.has_reward
    assert spec.schemas == [get_json_schema(Calculator.calculate)]


def test_a_missing_file_is_named_with_the_folders_looked_in(tmp_path):
    with pytest.raises(EnvironmentProblem, match=r"^data\.environment: file nothere\.py not found \(looked in "):
        load_environment("nothere.py:Env", tmp_path)


def test_a_value_that_is_neither_a_builtin_nor_a_file_lists_the_builtins():
    with pytest.raises(EnvironmentProblem, match=r"'calculater' is neither a built-in environment \(calculator\)"):
        load_environment("calculater", None)


def test_a_missing_class_lists_the_classes_the_file_defines(tmp_path):
    message = refusal(tmp_path, "class Game:\n    pass\nclass Other:\n    pass\ndef helper():\n    pass\n", "Gam")
    assert "no class 'Gam'" in message and "it defines the classes Game, Other" in message


def test_a_function_is_not_an_environment(tmp_path):
    message = refusal(tmp_path, "def Env():\n    pass\n")
    assert "'Env'" in message and "is a function, not a class" in message


def test_a_file_that_fails_to_import_is_refused_with_the_field(tmp_path):
    message = refusal(tmp_path, "class Env:\n    def reset(self\n")
    assert "SyntaxError" in message


def test_a_class_without_reset_is_refused(tmp_path):
    message = refusal(tmp_path, '''
        class Env:
            def get_reward(self) -> float:
                return 1.0
        ''')
    assert "Env has no reset method" in message and "def reset(self, **row)" in message


def test_a_reset_taking_a_column_by_position_only_is_refused(tmp_path):
    message = refusal(tmp_path, '''
        class Env:
            def reset(self, row, /):
                pass
            def get_reward(self) -> float:
                return 1.0
        ''')
    assert "Env.reset takes 'row' by position only" in message and "**row" in message


def test_a_tool_parameter_without_a_type_hint_is_refused_naming_method_and_parameter(tmp_path):
    message = refusal(tmp_path, '''
        class Env:
            def reset(self, **row):
                pass
            def guess(self, number, hint: str = "") -> str:
                """Guess.

                Args:
                    number: The guess.
                    hint: A hint.
                """
        ''')
    assert "the tool Env.guess" in message and "parameter 'number' has no type hint" in message
    assert "transformers" in message


def test_a_tool_without_a_docstring_is_refused(tmp_path):
    message = refusal(tmp_path, '''
        class Env:
            def reset(self, **row):
                pass
            def guess(self, number: int) -> str:
                return "yes"
        ''')
    assert "the tool Env.guess has no docstring" in message and "Args:" in message and "`_`" in message


def test_a_parameter_the_docstring_does_not_describe_is_named(tmp_path):
    message = refusal(tmp_path, '''
        class Env:
            def reset(self, **row):
                pass
            def guess(self, number: int, hint: str) -> str:
                """Guess.

                Args:
                    number: The guess.
                """
        ''')
    assert "the tool Env.guess" in message and "does not describe parameter 'hint'" in message


def test_a_tool_taking_star_kwargs_is_refused(tmp_path):
    message = refusal(tmp_path, '''
        class Env:
            def reset(self, **row):
                pass
            def guess(self, **options: int) -> str:
                """Guess."""
        ''')
    assert "the tool Env.guess takes **options" in message


def test_a_type_hint_transformers_cannot_describe_is_named_by_method(tmp_path):
    message = refusal(tmp_path, '''
        class Point:
            pass
        class Env:
            def reset(self, **row):
                pass
            def move(self, to: Point) -> str:
                """Move.

                Args:
                    to: Where.
                """
        ''')
    assert "the tool Env.move: transformers cannot describe it" in message and "Point" in message


def test_a_get_reward_taking_arguments_is_refused(tmp_path):
    message = refusal(tmp_path, '''
        class Env:
            def reset(self, **row):
                pass
            def get_reward(self, completion) -> float:
                return 1.0
        ''')
    assert "Env.get_reward takes 'completion'" in message and "def get_reward(self) -> float" in message


def test_a_class_with_neither_tools_nor_get_reward_is_refused(tmp_path):
    message = refusal(tmp_path, '''
        class Env:
            def reset(self, **row):
                pass
            def _private(self):
                pass
        ''')
    assert "Env has no tools" in message and "no get_reward" in message


def test_a_constructor_that_needs_arguments_is_refused(tmp_path):
    message = refusal(tmp_path, '''
        class Env:
            def __init__(self, size):
                self.size = size
            def reset(self, **row):
                pass
            def get_reward(self) -> float:
                return 1.0
        ''')
    assert "Env() must work without arguments" in message


# ---------------------------------------------------------------- one episode


def test_a_tool_call_returns_the_tools_text(game):
    env = game.new()
    env.reset({"answer": "7"})
    result = env.call("guess", {"number": 3}, timeout=5.0)
    assert isinstance(result, ToolResult)
    assert (result.name, result.content, result.error) == ("guess", "higher", False) and result.seconds >= 0
    assert env.call("guess", {"number": 7}, timeout=5.0).content == "yes"
    assert env.instance.guesses == 2  # the user's own object, what the rewards receive


def test_a_raising_tool_answers_its_error_as_trl_writes_it(game):
    env = game.new()
    env.reset({"answer": "7"})
    result = env.call("fail", {"why": "the board is on fire"}, timeout=5.0)
    assert result.error and result.content == str({"error": "the board is on fire"})


def test_wrong_arguments_are_the_tools_error_not_the_engines(game):
    env = game.new()
    env.reset({"answer": "7"})
    result = env.call("guess", {"numbr": 3}, timeout=5.0)
    assert result.error and "unexpected keyword argument 'numbr'" in result.content


def test_an_unknown_tool_is_answered_with_the_tool_list(game):
    env = game.new()
    result = env.call("peek", {}, timeout=5.0)
    assert result.error and result.name == "peek"
    assert "unknown tool 'peek'; the tools are: count, fail, guess, hang, later, table" in result.content


def test_a_hanging_tool_is_abandoned_after_its_time_limit(game):
    # blocked in a wait (C code), it cannot be stopped: it is left running, and said so
    env = game.new()
    env.reset({"answer": "7"})
    release = sys.modules[game.cls.__module__].RELEASE
    try:
        result = env.call("hang", {}, timeout=0.2)
    finally:
        release.set()  # let the abandoned thread end
    assert result.error and result.content == str({"error": "tool hang did not return within 0.2 s and could not be "
                                                            "stopped (it is still running)"})


def test_results_that_are_not_text_are_written_as_str(game):
    env = game.new()
    env.reset({"answer": "7", "level": 2})
    env.call("guess", {"number": 1}, timeout=5.0)
    assert env.call("count", {}, timeout=5.0).content == "1"
    assert env.call("table", {}, timeout=5.0).content == str({"secret": 7, "level": 2})


def test_an_async_tool_is_awaited(game):
    assert game.new().call("later", {"word": "done"}, timeout=5.0).content == "DONE"


def test_reset_gets_only_the_columns_it_takes(tmp_path):
    write_env(tmp_path, '''
        class Env:
            def reset(self, answer, level=1):
                self.got = {"answer": answer, "level": level}
            def get_reward(self) -> float:
                return 0.0

        class Open:
            def reset(self, **row):
                self.got = row
            def get_reward(self) -> float:
                return 0.0
        ''')
    row = {"prompt": "Guess.", "answer": "7", "source": "gsm8k"}
    env = load_environment("my_env.py:Env", tmp_path).new()
    assert env.reset(row) is None and env.instance.got == {"answer": "7", "level": 1}
    open_env = load_environment("my_env.py:Open", tmp_path).new()
    open_env.reset(row)
    assert open_env.instance.got == row


def test_reset_returns_the_first_observation(game):
    assert game.new().reset({"answer": "7", "level": 3, "prompt": "p"}) == "Level 3: guess a number."


def test_a_row_without_a_column_reset_requires_is_named(game):
    assert game.missing_columns(["prompt", "level"]) == ["answer"] and game.missing_columns(["answer"]) == []
    with pytest.raises(EnvironmentError, match=r"Game\.reset needs 'answer', which the data row lacks "
                                               r"\(its columns: prompt, level\)"):
        game.new().reset({"prompt": "p", "level": 2})


def test_reset_faults_name_reset_and_the_line(tmp_path):
    write_env(tmp_path, '''
        class Env:
            def reset(self, **row):
                return 42
            def get_reward(self) -> float:
                return 0.0

        class Broken:
            def reset(self, **row):
                raise KeyError("answer")
            def get_reward(self) -> float:
                return 0.0
        ''')
    with pytest.raises(EnvironmentError, match=r"^data\.environment: Env\.reset returned int 42; it must return None"):
        load_environment("my_env.py:Env", tmp_path).new().reset({})
    with pytest.raises(EnvironmentError, match=r"Broken\.reset raised KeyError: 'answer' \(at .*my_env\.py, line 10\)"):
        load_environment("my_env.py:Broken", tmp_path).new().reset({})


def test_get_reward_is_a_finite_number(game, tmp_path):
    env = game.new()
    env.reset({"answer": "7"})
    for number in (1, 9, 7):
        env.call("guess", {"number": number}, timeout=5.0)
    assert env.reward() == pytest.approx(1 / 3)
    assert load_environment("calculator", None).new().reward() is None  # no get_reward: none
    write_env(tmp_path, '''
        import math
        class Env:
            value = None
            def reset(self, **row):
                pass
            def get_reward(self):
                if self.value == "raise":
                    raise ValueError("no score")
                return self.value
        ''', "scores.py")
    spec = load_environment("scores.py:Env", tmp_path)
    for value, expected in [("1.0", r"returned str '1\.0'; it must return a number"),
                            (True, r"returned bool True; it must return a number"),
                            (None, r"returned NoneType None"),
                            (float("nan"), r"returned nan; it must return a finite number"),
                            (float("inf"), r"returned inf"),
                            ("raise", r"Env\.get_reward raised ValueError: no score \(at .*scores\.py, line 9\)")]:
        env = spec.new()
        env.instance.value = value
        with pytest.raises(EnvironmentError, match=expected) as caught:
            env.reward()
        assert str(caught.value).startswith("data.environment: Env.get_reward ")
    env = spec.new()
    env.instance.value = 2
    assert env.reward() == 2.0 and isinstance(env.reward(), float)


def test_a_constructor_that_raises_names_the_class(tmp_path):
    write_env(tmp_path, '''
        class Env:
            def __init__(self):
                raise OSError("no board")
            def reset(self, **row):
                pass
            def get_reward(self) -> float:
                return 0.0
        ''')
    spec = load_environment("my_env.py:Env", tmp_path)  # checked without making one
    with pytest.raises(EnvironmentError, match=r"Env\(\) failed with OSError: no board \(at .*line 4\)"):
        spec.new()


# ---------------------------------------------------------------- the calculator


@pytest.mark.parametrize("expression, value", [
    ("3+4", "7"), ("(3 + 4) * 4", "28"), ("2 - 10", "-8"), ("-3 * -(2 + 5)", "21"), ("+5", "5"),
    ("7 / 2", "3.5"), ("1 / 3", "0.333333"), ("2 / 3", "0.666667"), ("6 / 3", "2"), ("-1 / 8", "-0.125"),
    ("10 - 2 * 3", "4"), ("(10 - 2) * 3", "24"), ("100 / 7 * 7", "100"), ("2.5 * 4", "10"),
    ("123456789 * 987654321", "121932631112635269"),
])
def test_the_calculator_evaluates_arithmetic(expression, value):
    assert Calculator().calculate(expression) == value


@pytest.mark.parametrize("expression, found", [
    ("x + 1", "found the name 'x'"),
    ("abs(-3)", "found a function call"),
    ("(3).real", "found the attribute .real"),
    ("2 ** 100000", "found the operator **"),
    ("9 // 2", "found the operator //"),
    ("7 % 3", "found the operator %"),
    ("'a' * 3", "found the value 'a'"),
    ("[1, 2]", "found list syntax"),
    ("__import__('os')", "found a function call"),
    ("True + 1", "found the value True"),
])
def test_the_calculator_refuses_anything_but_arithmetic(expression, found):
    with pytest.raises(ValueError, match="only numbers, \\+ - \\* / and parentheses are allowed; " + found.replace(
            "*", "\\*").replace("(", "\\(").replace(".", "\\.")):
        evaluate_arithmetic(expression)


def test_the_calculator_refuses_division_by_zero_broken_and_long_expressions():
    with pytest.raises(ValueError, match="division by zero"):
        evaluate_arithmetic("1 / (2 - 2)")
    with pytest.raises(ValueError, match="is not an arithmetic expression"):
        evaluate_arithmetic("3 +")
    with pytest.raises(ValueError, match="at most 500"):
        evaluate_arithmetic("1+" * 300 + "1")
    with pytest.raises(ValueError, match="too large"):
        evaluate_arithmetic("1e308 * 10")


def test_a_calculator_error_reaches_the_model_as_a_tool_error():
    env = load_environment("calculator", None).new()
    assert env.reset({"prompt": "What is 3+4?", "answer": "7"}) is None
    result = env.call("calculate", {"expression": "x"}, timeout=5.0)
    assert result.error and "found the name 'x'" in result.content
