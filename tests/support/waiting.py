"""Waiting for a condition with a deadline, instead of sleeping for a guessed time.

A fixed sleep is either too short on a loaded machine (the test fails, or an "exactly
once" check passes because the duplicate had not come yet) or too long everywhere else.
`wait_until` returns as soon as the condition holds and fails with what it waited for."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")

POLL_S = 0.05


def wait_until(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    *,
    every: float = POLL_S,
    detail: Callable[[], str] = lambda: "",
) -> T:
    """The first truthy value of `condition()`, polled every `every` s; fails the test
    naming `what` (and `detail()`, e.g. a process's log) if none comes in `timeout` s."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:g} s\n{detail()}".rstrip())
        time.sleep(every)
    return value
