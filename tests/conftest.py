"""Shared fixtures. Tiers: every test that takes `fleet_server` (or `tier`) runs on
the embedded default (SQLite, in-memory layer) and, where PostgreSQL and Redis
answer, on the production shape too. REQUIRE_SERVICES=1 (set by .ci/run) makes a
missing service a failure instead of a skip."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import django_data, services, speeds
from tests.support.browser import launched_chromium
from tests.support.server import FleetServer


def _services_available() -> bool:
    return services.postgres_answers() and services.redis_answers()


def active_tiers() -> list[str]:
    """Both tiers, always: where PostgreSQL/Redis do not answer, the services cases are
    collected and skipped with a reason, so the output says what did not run."""
    wanted = os.environ.get("FLEETWATCH_TEST_TIERS")
    if wanted:
        return [t for t in wanted.split(",") if t]
    return ["embedded", "services"]


SERVICES_SKIP = (
    "services tier skipped: PostgreSQL "
    f"({services.services_database_url()}) or Redis ({services.services_redis_url()})"
    " does not answer; set REQUIRE_SERVICES=1 to make that a failure"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    speeds.classify(items)
    if _services_available():
        return
    skip = pytest.mark.skip(reason=SERVICES_SKIP)
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_services = callspec is not None and callspec.params.get("tier") == "services"
        if on_services or item.get_closest_marker("services"):
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", speeds.PROCESS_MARK)
    speeds.watch_process_starts()
    if os.environ.get("REQUIRE_SERVICES") == "1" and not _services_available():
        raise pytest.UsageError(
            "REQUIRE_SERVICES=1 but PostgreSQL "
            f"({services.services_database_url()}) or Redis ({services.services_redis_url()})"
            " does not answer"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    speeds.fail_if_a_process_started(report)
    return report


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    yield  # every fixture torn down: a committing test's flush is done
    django_data.restore_after_flush(item)


EXIT_GRACE_S = 60.0


def pytest_unconfigure(config: pytest.Config) -> None:
    """A test that leaves a non-daemon thread running keeps the interpreter from exiting
    after the summary (a CI run hung 74 minutes on one). Daemon threads still run while
    the interpreter waits for the others, so this one ends the process if the wait passes
    the grace period: the run fails with the stuck threads' stacks instead of hanging.
    Not in a pytest-xdist worker: its process lives on past this, serving the controller
    (which has its own watchdog), and its thread pools end at its exit as usual."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    threading.Thread(target=_exit_if_stuck, name="exit-watchdog", daemon=True).start()


def _exit_if_stuck() -> None:
    time.sleep(EXIT_GRACE_S)
    stuck = [t.name for t in threading.enumerate() if not t.daemon and t.is_alive()]
    print(
        f"\npytest finished but threads {stuck} still ran {EXIT_GRACE_S:.0f} s later;"
        " a test left them running. Their stacks:",
        file=sys.stderr,
    )
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    os._exit(1)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "tier" in metafunc.fixturenames:
        metafunc.parametrize("tier", active_tiers(), scope="module")


@pytest.fixture(scope="module")
def fleet_server(tier: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetServer]:
    """A running backend shared by a test module (use distinct nodes per test)."""
    var_dir = tmp_path_factory.mktemp(f"server-{tier}")
    with FleetServer.started(var_dir, tier=tier) as server:
        yield server


@pytest.fixture
def fresh_server(tier: str, tmp_path: Path) -> Iterator[FleetServer]:
    """A backend of the test's own, for tests that stop and start it."""
    with FleetServer.started(tmp_path / "server", tier=tier) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium shared by a module's tests (a launch costs seconds); each test opens its
    own pages with `new_page` or `new_context`, a fresh context: no cookies shared."""
    yield from launched_chromium()
