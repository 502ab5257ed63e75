"""Reading and comparing math answers for the ``math_answer`` reward (builtin.py).

The work is math-verify's (``parse`` and ``verify``, imported on first use: it brings
sympy, half a second to import); this module decides what text it reads:

* a completion: the last ``<answer>...</answer>`` block when there is one, else the
  whole text (math-verify prefers a ``\\boxed{}``, then the last expression);
* a bare answer (a reference, or the inside of an answer block): read as LaTeX, as if
  between ``$...$``, so ``3\\sqrt{2}`` is 3*sqrt(2) and not 3, unless it reads as
  prose (``72 apples``, ``The answer is 72``), which math-verify searches as it is.

math-verify's time limits use ``signal.alarm``, which works only in a POSIX process's
main thread; elsewhere (a worker thread, Windows) it runs without one.

Torch-free, and light to import.

Example:
    >>> parse_completion(r"so \\boxed{\\frac{1}{2}}") == parse_bare("0.5")
    True
"""

from __future__ import annotations

import os
import re
import threading
from importlib.util import find_spec

__all__ = ["available", "parse_bare", "parse_completion", "same_answer", "TIMEOUT_SECONDS"]

#: Seconds math-verify may spend on one parse or one comparison (main thread only).
TIMEOUT_SECONDS = 5

_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.S)
_TAG = re.compile(r"</?(?:think|answer)>")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{2,}")


def available() -> bool:
    """Whether math-verify is installed (found without importing it)."""
    return find_spec("math_verify") is not None


def _timeout() -> int | None:
    """math-verify's time limit here: None where ``signal.alarm`` cannot be used."""
    if os.name == "posix" and threading.current_thread() is threading.main_thread():
        return TIMEOUT_SECONDS
    return None


def _parse(text: str) -> list:
    from math_verify import parse

    return parse(text, parsing_timeout=_timeout())


def _is_prose(text: str) -> bool:
    """Whether ``text`` holds words (two letters or more, outside LaTeX commands).

    Example:
        >>> _is_prose(r"3\\sqrt{2}"), _is_prose("x^2+1"), _is_prose("72 apples")
        (False, False, True)
    """
    return bool(_WORD.search(_LATEX_COMMAND.sub(" ", text)))


def parse_bare(text: object) -> list:
    """A bare answer (``72``, ``\\frac{1}{2}``, ``$3\\sqrt{2}$``, ``1,000``, a number)
    parsed by math-verify; ``[]`` when nothing in it reads as an answer.

    Example:
        >>> [str(parse_bare(a)[0]) for a in ("1,000", r"3\\sqrt{2}", "x^2+1", -16)]
        ['1000', '3*sqrt(2)', 'x**2 + 1', '-16']
        >>> parse_bare(""), parse_bare("not given")
        ([], [])
    """
    text = str(text).strip()
    if not text:
        return []
    if "$" in text or r"\boxed" in text or _is_prose(text):
        return _parse(text)
    return _parse(f"${text}$") or _parse(text)


def parse_completion(completion: str) -> list:
    """The answer a completion gives, parsed; ``[]`` when it gives none.

    The last ``<answer>...</answer>`` block is read as a bare answer when there is
    one; otherwise the whole completion, its think/answer tags taken out, is searched
    (a ``\\boxed{}`` first, then the last expression).

    Example:
        >>> [str(parse_completion(c)[0]) for c in (r"x \\boxed{72} 3", "so 5 then -7.",
        ...                                        "<think>13 and 29</think><answer>42</answer>")]
        ['72', '-7', '42']
        >>> parse_completion("no idea")
        []
    """
    blocks = _ANSWER_BLOCK.findall(completion)
    if blocks:
        return parse_bare(blocks[-1])
    return _parse(_TAG.sub(" ", completion))


def same_answer(reference: list, found: list) -> bool:
    """Whether two parsed answers are equal, symbolically or numerically (math-verify).

    Example:
        >>> same_answer(parse_bare("1/2"), parse_completion(r"\\boxed{0.5}"))
        True
    """
    from math_verify import verify

    return bool(verify(reference, found, timeout_seconds=_timeout()))
