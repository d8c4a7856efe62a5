"""`dynaspec serve` loads its models on a thread that ends with the load, so that torch's
OpenMP worker threads it started end too and the engine thread's are the process's only ones
(serve/engine.py's docstring: more of them than CPUs makes libgomp stop spinning)."""

from __future__ import annotations

import threading

import pytest

from dynaspec.errors import ConfigError
from dynaspec.serve.engine import on_passing_thread


def test_on_passing_thread_returns_what_it_ran_on_a_thread_that_ended() -> None:
    seen: list[threading.Thread] = []

    def load() -> int:
        seen.append(threading.current_thread())
        return 7

    assert on_passing_thread(load) == 7
    assert seen[0] is not threading.current_thread() and not seen[0].is_alive()


def test_on_passing_thread_raises_the_error_on_the_caller() -> None:
    def fail() -> None:
        raise ConfigError("no such model")

    with pytest.raises(ConfigError, match="no such model"):
        on_passing_thread(fail)
