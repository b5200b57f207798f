"""The suite's two speeds (README "Test it"): `make check` runs the tests that start no
process and no browser; `make test` runs them all.

A test is marked `process` when it takes a fixture that starts one (PROCESS_FIXTURES);
`make check` deselects those with `-m "not process and not browser and not services"`.
So that the split cannot rot, `make check` also sets FLEETWATCH_CHECK=1, which watches
every process start: a test that starts one anyway fails and says where it belongs."""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from typing import Any

import pytest

CHECK_ENV = "FLEETWATCH_CHECK"

# Fixtures that start a process (a server, a worker, nginx, Prometheus, an agent, the
# demo, a simulator) or a browser, by the name the tests take them by.
PROCESS_FIXTURES = frozenset(
    {
        "fleet_server",
        "fresh_server",
        "browser",
    }
)

PROCESS_MARK = "process: starts a server, worker, agent or other process (not in make check)"

_started: list[str] = []


def classify(items: list[pytest.Item]) -> None:
    """Mark `process` every test whose fixtures start one, and `services` every case of
    the services tier (it needs PostgreSQL and Redis, which `make check` does not)."""
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("tier") == "services":
            item.add_marker(pytest.mark.services)


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
        "Take the fixture by a name in tests/support/speeds.py PROCESS_FIXTURES (add it"
        " there if it is new), or mark the test @pytest.mark.process."
    )
