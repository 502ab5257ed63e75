"""The built-in environments a preset names by a word (``data.environment: calculator``).

An environment is a class: ``reset`` starts an episode from a data row, each public
method is a tool the model may call (its docstring and type hints become the tool's
JSON schema), an optional ``get_reward`` scores the finished episode
(engine/episodes/environment.py checks and wraps it). Torch-free.

Example:
    >>> calculator = Calculator()
    >>> calculator.reset(prompt="What is 3 + 4?", answer="7")
    >>> calculator.calculate("(3 + 4) * 4")
    '28'
    >>> calculator.calculate("7 / 2")
    '3.5'
"""

from __future__ import annotations

import ast
import math
import operator

__all__ = ["Calculator", "evaluate_arithmetic"]

# Long enough for any arithmetic a prompt asks for; short enough that a runaway turn
# cannot make the tool build a huge syntax tree.
MOST_CHARACTERS = 500

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_SYMBOL = {ast.Pow: "**", ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|",
           ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>", ast.Invert: "~", ast.Not: "not"}
_ALLOWED = "only numbers, + - * / and parentheses are allowed"


def _refused(node: ast.AST) -> ValueError:
    """The error for a piece of syntax the calculator does not evaluate, naming it."""
    if isinstance(node, ast.Name):
        what = f"the name {node.id!r}"
    elif isinstance(node, ast.Call):
        what = "a function call"
    elif isinstance(node, ast.Attribute):
        what = f"the attribute .{node.attr}"
    elif isinstance(node, (ast.BinOp, ast.UnaryOp)):
        op = type(node.op)
        what = f"the operator {_SYMBOL[op]}" if op in _SYMBOL else f"the operator {op.__name__}"
    elif isinstance(node, ast.Constant):
        what = f"the value {node.value!r}"
    else:
        what = f"{type(node).__name__.lower()} syntax"
    return ValueError(f"{_ALLOWED}; found {what}")


def _value(node: ast.AST) -> int | float:
    """The number an allowed syntax tree stands for (Python's arithmetic: integers stay
    exact, ``/`` gives a float)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    raise _refused(node)


def _as_text(value: int | float) -> str:
    """An integer as its digits; a float rounded to 6 places, trailing zeros trimmed.

    e.g. 28 -> "28", 3.5 -> "3.5", 1/3 -> "0.333333", 2.0 -> "2", -1e-9 -> "0"
    """
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise ValueError("the result is too large to compute")
    text = f"{round(value, 6):.6f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def evaluate_arithmetic(expression: str) -> str:
    """``expression`` evaluated as arithmetic on numbers with + - * / and parentheses,
    read with ``ast`` (never ``eval``). ValueError naming what is not allowed.

    Example:
        >>> evaluate_arithmetic("-3 * (2 + 5)"), evaluate_arithmetic("1/3")
        ('-21', '0.333333')
        >>> evaluate_arithmetic("2 ** 100000")
        Traceback (most recent call last):
        ...
        ValueError: only numbers, + - * / and parentheses are allowed; found the operator **
    """
    if not isinstance(expression, str):
        raise ValueError(f"the expression must be text, got {type(expression).__name__}")
    if len(expression) > MOST_CHARACTERS:
        raise ValueError(f"the expression is {len(expression)} characters long; at most {MOST_CHARACTERS}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"{expression!r} is not an arithmetic expression ({exc.msg})") from None
    return _as_text(_value(tree.body))


class Calculator:
    """An arithmetic tool: the model writes an expression, the tool answers its value.
    No state and no reward of its own: the preset's rewards score the final answer."""

    def reset(self, **row) -> None:
        """Nothing to set up: each episode starts from the prompt alone."""

    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression with + - * / and parentheses.

        Args:
            expression: The arithmetic to evaluate, e.g. "(3 + 4) * 4".

        Returns:
            The value: an integer as its digits, a division's result to 6 decimal places.
        """
        return evaluate_arithmetic(expression)
