"""An environment in a file next to its preset (data.environment: checked_calculator.py:CheckedCalculator),
written to TRL's environment_factory contract, so the same class runs under TRL's GRPOTrainer.

One instance per episode: reset() starts it from the data row, the public method `calculate`
is the tool the model is offered (its type hints and docstring become the JSON schema the chat
template shows), and get_reward() scores the finished episode (a reward component named
CheckedCalculator, weight 1, beside the preset's own rewards).
"""

import ast
import operator

OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _value(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError(f"only numbers, + - * / and parentheses: {ast.dump(node)[:40]}")


class CheckedCalculator:
    def reset(self, answer="", **row):
        """A new episode: the row's reference answer kept for get_reward."""
        self.answer = str(answer).strip()
        self.results = []

    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: numbers with + - * / and parentheses, e.g. "(2+3)*4"
        """
        value = _value(ast.parse(expression, mode="eval").body)  # a ValueError reaches the model as its error
        text = str(int(value)) if float(value).is_integer() else f"{value:.6g}"
        self.results.append(text)
        return text

    def get_reward(self) -> float:
        """1 when the tool's last result was the answer: the model asked the right question."""
        return 1.0 if self.results and self.results[-1] == self.answer else 0.0
