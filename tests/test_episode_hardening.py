"""Hardening round three, an environment's own code misbehaving (engine/episodes/): a
`sys.exit()` or a KeyboardInterrupt of its own in the constructor, reset or get_reward is
the environment's failure, named with its method and line (not the engine's exit, not
"aborted by a second Ctrl-C"); a tool whose result cannot be made text is answered to
the model; a tool that loops past its time limit is stopped, and one that cannot be
stopped is counted, warned about once and, past a bound, ends the run."""

from __future__ import annotations

import signal
import textwrap
import threading
import time

import pytest

from engine.episodes.environment import EnvironmentError, load_environment

ENV = '''\
import signal
import sys
import threading
import time

HOW = {"init": None, "reset": None, "reward": None}
RELEASE = threading.Event()


class Env:
    def __init__(self):
        if HOW["init"] == "exit":
            sys.exit(3)

    def reset(self, **row):
        if HOW["reset"] == "exit":
            sys.exit()
        if HOW["reset"] == "interrupt":
            raise KeyboardInterrupt("mine")
        if HOW["reset"] == "ctrl-c":
            signal.raise_signal(signal.SIGINT)  # the first stops after the step
            signal.raise_signal(signal.SIGINT)  # the second aborts

    def spin(self) -> str:
        """Loops forever, in Python."""
        while True:
            pass

    def stubborn(self) -> str:
        """Loops forever, swallowing what would stop it once."""
        try:
            while True:
                pass
        except BaseException:
            pass
        while True:
            pass

    def stuck(self) -> str:
        """Blocked until released (in C: nothing can stop it)."""
        RELEASE.wait(60)
        return "late"

    def odd(self, kind: str) -> str:
        """Returns or raises something whose str() fails.

        Args:
            kind: "value" or "error"
        """
        class Odd(Exception):
            def __str__(self):
                raise ValueError("my __str__ fails")
        if kind == "error":
            raise Odd()
        return Odd()

    def leave(self) -> str:
        """Calls sys.exit(1)."""
        sys.exit(1)

    def get_reward(self) -> float:
        if HOW["reward"] == "exit":
            sys.exit("bye")
        if HOW["reward"] == "interrupt":
            raise KeyboardInterrupt
        return 1.0
'''


@pytest.fixture
def spec(tmp_path):
    (tmp_path / "hard_env.py").write_text(textwrap.dedent(ENV), encoding="utf-8")
    return load_environment("hard_env.py:Env", tmp_path)


@pytest.fixture
def how(spec):
    import sys

    module = sys.modules[spec.cls.__module__]
    yield module.HOW
    module.RELEASE.set()  # let a blocked tool's thread end


def line_of(spec, text: str) -> int:
    """The line of `text` in the environment's file."""
    return next(i for i, line in enumerate(spec.path.read_text().splitlines(), 1) if text in line)


# ----------------------------------------------------------- N1: sys.exit() in the environment


def test_sys_exit_in_reset_is_the_environments_failure_naming_reset_and_its_line(spec, how):
    how["reset"] = "exit"
    with pytest.raises(EnvironmentError) as caught:
        spec.new().reset({})
    message = str(caught.value)
    assert message.startswith("data.environment: Env.reset called sys.exit(None)")
    assert f"(at {spec.path}, line {line_of(spec, 'sys.exit()')})" in message


def test_sys_exit_in_get_reward_is_the_environments_failure(spec, how):
    how["reward"] = "exit"
    with pytest.raises(EnvironmentError, match=r"^data\.environment: Env\.get_reward called sys\.exit\('bye'\)") as c:
        spec.new().reward()
    exit_line = line_of(spec, 'sys.exit("bye")')
    assert f"line {exit_line})" in str(c.value)


def test_sys_exit_in_the_constructor_names_the_class(spec, how):
    how["init"] = "exit"
    with pytest.raises(EnvironmentError, match=r"^data\.environment: Env\(\) called sys\.exit\(3\)") as caught:
        spec.new()
    assert f"line {line_of(spec, 'sys.exit(3)')})" in str(caught.value)


# ------------------------------------------- N4: a KeyboardInterrupt the environment raised itself


def test_keyboard_interrupt_raised_by_reset_is_its_failure_not_a_ctrl_c(spec, how, engine_handlers):
    how["reset"] = "interrupt"
    with pytest.raises(BaseException) as caught:  # BaseException: an escaped one would end the session
        spec.new().reset({})
    assert isinstance(caught.value, EnvironmentError), repr(caught.value)
    message = str(caught.value)
    assert message.startswith("data.environment: Env.reset raised KeyboardInterrupt (mine) though no Ctrl-C "
                              "was pressed")
    assert f"line {line_of(spec, 'raise KeyboardInterrupt(')})" in message


def test_keyboard_interrupt_raised_by_get_reward_is_its_failure(spec, how, engine_handlers):
    how["reward"] = "interrupt"
    with pytest.raises(BaseException) as caught:
        spec.new().reward()
    assert isinstance(caught.value, EnvironmentError), repr(caught.value)
    assert "Env.get_reward raised KeyboardInterrupt though no Ctrl-C was pressed" in str(caught.value)


def test_a_real_second_ctrl_c_inside_reset_still_aborts(spec, how, engine_handlers):
    how["reset"] = "ctrl-c"
    with pytest.raises(BaseException) as caught:  # BaseException: an escaped one would end the session
        spec.new().reset({})
    assert type(caught.value) is KeyboardInterrupt
    assert engine_handlers.requested and engine_handlers.reason == "SIGINT"


def test_without_the_engines_handlers_a_keyboard_interrupt_is_kept(spec, how):
    # Python's own handler does not count Ctrl-C: it may be the user's (the engine as a library)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    how["reset"] = "interrupt"
    with pytest.raises(BaseException) as caught:
        spec.new().reset({})
    assert type(caught.value) is KeyboardInterrupt


# ------------------------------------------------- N5: a result that cannot be made text


@pytest.mark.parametrize("kind, what", [("value", "returned a Odd"), ("error", "raised Odd")])
def test_a_result_whose_str_raises_is_answered_to_the_model(spec, how, kind, what):
    result = spec.new().call("odd", {"kind": kind}, timeout=5.0)
    assert result.error
    assert result.content == str({"error": f"tool odd {what} whose str() raised ValueError: my __str__ fails"})


def test_sys_exit_in_a_tool_is_answered_to_the_model(spec, how):
    result = spec.new().call("leave", {}, timeout=5.0)
    assert result.error and result.content == str({"error": "tool leave called sys.exit(1)"})


# ------------------------------------------------- N6: a tool that does not return


def test_a_busy_looping_tool_is_stopped_after_its_time_limit(spec, how):
    before = threading.active_count()
    env = spec.new()
    start = time.monotonic()
    result = env.call("spin", {}, timeout=0.2)
    assert result.error and result.content == str({"error": "tool spin did not return within 0.2 s; it was stopped"})
    assert time.monotonic() - start < 2.0
    assert threading.active_count() == before  # no thread left spinning
    assert env.spec.tool_threads.unstopped() == []


def test_a_tool_that_swallows_the_first_stop_is_stopped_by_the_next(spec, how):
    before = threading.active_count()
    result = spec.new().call("stubborn", {}, timeout=0.1)
    assert result.content.endswith("it was stopped'}")
    assert threading.active_count() == before


def test_the_stopping_function_stops_a_python_loop_and_not_a_blocked_call():
    from engine.episodes import tool_threads

    release = threading.Event()

    def spin():
        while True:
            pass

    for target, stoppable in ((spin, True), (lambda: release.wait(60), False)):
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        assert tool_threads.stop_thread(thread, grace=0.3) is stoppable
    release.set()


def test_a_tool_that_cannot_be_stopped_is_warned_about_once_and_bounded(spec, how, caplog):
    from engine.episodes import tool_threads

    env = spec.new()
    stuck_line = line_of(spec, "RELEASE.wait(60)")
    results = [env.call("stuck", {}, timeout=0.05) for _ in range(tool_threads.MAX_UNSTOPPED)]
    assert all(r.content == str({"error": "tool stuck did not return within 0.05 s and could not be stopped "
                                          "(it is still running)"}) for r in results)
    warnings = env.spec.tool_threads.take_warnings()
    assert len(warnings) == 1  # once per tool, however often it hangs
    assert warnings[0]["tool"] == "stuck" and f"{spec.path}, line {stuck_line}" in warnings[0]["saw"]
    assert env.spec.tool_threads.take_warnings() == []
    assert "the tool Env.stuck ran past data.tool_timeout" in caplog.text  # a log line too
    with pytest.raises(EnvironmentError) as caught:  # one more: past the bound, the run ends
        env.call("stuck", {}, timeout=0.05)
    message = str(caught.value)
    assert message.startswith(f"data.environment: {tool_threads.MAX_UNSTOPPED + 1} calls of the tool Env.stuck are "
                              "still running")
    assert "data.tool_timeout" in message and f"(at {spec.path}, line {stuck_line})" in message
