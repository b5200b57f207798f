"""The suite's two speeds (README "Test it"): `make check` runs the tests that start no
process and no browser; `make test` runs them all.

A test is marked `process` when its own source, that of any fixture it uses (however
indirectly) or of a test helper these call, starts one (STARTS_A_PROCESS); `make check`
deselects those with `-m "not process and not browser and not services"`.
So that the split cannot rot, `make check` also sets FLEETWATCH_CHECK=1, which watches
every process start: a test that starts one anyway fails and says where it belongs."""

from __future__ import annotations

import inspect
import multiprocessing.process
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

CHECK_ENV = "FLEETWATCH_CHECK"

# What starts a process (a server, a worker, nginx, Prometheus, an agent, the demo, a
# simulator) or a browser, as it reads in a fixture's or a test's source.
STARTS_A_PROCESS = re.compile(
    r"\b(FleetServer|Stack|CeleryProc|RedisProc|Nginx\w*|OidcProvider|Prometheus\w*"
    r"|subprocess|Popen|create_subprocess_\w+|start_demo|launched_chromium|sync_playwright)\b"
)

NAME = re.compile(r"\b[A-Za-z_]\w*\b")

PROCESS_MARK = "process: starts a server, worker, agent or other process (not in make check)"

_started: list[str] = []


def classify(items: list[pytest.Item]) -> None:
    """Mark `process` every test that starts one, itself or through any fixture it uses
    (directly or not), and `services` every case of the services tier (it needs
    PostgreSQL and Redis, which `make check` does not ask for)."""
    for item in items:
        if _starts_a_process(item):
            item.add_marker(pytest.mark.process)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("tier") == "services":
            item.add_marker(pytest.mark.services)


def _starts_a_process(item: pytest.Item) -> bool:
    code: list[object] = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        code += [defs[-1].func for defs in info.name2fixturedefs.values() if defs]
    return any(_reads_as_starting_a_process(c, set()) for c in code if c is not None)


_verdicts: dict[object, bool] = {}


def _reads_as_starting_a_process(code: object, visiting: set[int]) -> bool:
    """Whether a function's or class's source, or that of a test helper it names (in
    tests/, followed as far as they go), starts a process."""
    if code in _verdicts:
        return _verdicts[code]
    if id(code) in visiting:
        return False
    visiting.add(id(code))
    try:
        source = inspect.getsource(code)  # type: ignore[arg-type]
    except (OSError, TypeError):  # pytest's own fixtures, builtins
        return False
    verdict = STARTS_A_PROCESS.search(source) is not None or any(
        _reads_as_starting_a_process(helper, visiting) for helper in _test_helpers(code, source)
    )
    _verdicts[code] = verdict
    return verdict


def _test_helpers(code: object, source: str) -> Iterator[object]:
    if inspect.isfunction(code):
        code = inspect.unwrap(code)  # a context manager's own module, not contextlib's
    module = sys.modules.get(getattr(code, "__module__", ""))
    namespace = getattr(code, "__globals__", None) or (vars(module) if module else {})
    for name in set(NAME.findall(source)):
        value = namespace.get(name)
        helper = inspect.isfunction(value) or inspect.isclass(value)
        if helper and value is not code and value.__module__.startswith("tests."):
            yield value


def watch_process_starts() -> None:
    """Under `make check`, note every process a test starts (it still starts: the test
    runs as it would, and fails afterwards with what it started)."""
    if os.environ.get(CHECK_ENV) != "1":
        return
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]
    start_process = multiprocessing.process.BaseProcess.start

    def noted_execute_child(self: subprocess.Popen[Any], args: Any, *rest: Any) -> Any:
        _started.append(" ".join(map(str, args)) if isinstance(args, list) else str(args))
        return execute_child(self, args, *rest)

    def noted_start(self: multiprocessing.process.BaseProcess) -> None:
        _started.append(f"multiprocessing {self.name}")
        start_process(self)

    subprocess.Popen._execute_child = noted_execute_child  # type: ignore[attr-defined]
    multiprocessing.process.BaseProcess.start = noted_start  # type: ignore[method-assign]


def fail_if_a_process_started(report: pytest.TestReport) -> None:
    """Turn a passing phase into a failure naming what it started."""
    if not _started:
        return
    started, _started[:] = list(_started), []
    if report.failed:
        return
    report.outcome = "failed"
    commands = "\n  ".join(command[:200] for command in dict.fromkeys(started))
    report.longrepr = (
        f"{report.nodeid} started a process under `make check`, which runs only the tests"
        " that start none:\n  "
        f"{commands}\n"
        "Teach tests/support/speeds.py STARTS_A_PROCESS how that fixture or test starts it,"
        " or mark the test @pytest.mark.process."
    )
