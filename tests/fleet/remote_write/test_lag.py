"""Remote write's lag where operators see it: a gauge and counters on /metrics, a line on the
fleet overview, and the rule `remote-write-lag` through the alert engine, which fires for
every site once the shipper is `LAG_ALERT_S` behind and resolves when it catches up."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from django.test import Client

from fleet.alerts.engine import evaluate
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import RemoteWriteCursor, Site
from fleet.read.metrics.export import render
from fleet.remote_write.lag import LAG_ALERT_S, NEVER_SHIPPED, lag_words
from fleetwatch.remote_write_settings import RemoteWrite
from tests.support import people
from tests.support.exposition import series

pytestmark = pytest.mark.django_db

NOW = time.time() - 3600
ON = RemoteWrite(url="http://tsdb.example:9090/api/v1/write")


def behind(seconds: float, at: float = NOW, **fields: Any) -> RemoteWriteCursor:
    return RemoteWriteCursor.objects.update_or_create(
        kind="gpu", defaults={"complete_until": at - seconds, **fields}
    )[0]


def test_metrics_show_each_kinds_lag_and_counts(settings: Any) -> None:
    settings.REMOTE_WRITE = ON
    behind(42.0, shipped_samples=1200, dropped_samples=34)

    found = series(render(NOW).decode())

    assert found[("fleetwatch_remote_write_lag_seconds", (("kind", "gpu"),))] == 42.0
    assert found[("fleetwatch_remote_write_samples_total", (("kind", "gpu"),))] == 1200
    assert found[("fleetwatch_remote_write_dropped_samples_total", (("kind", "gpu"),))] == 34


def test_metrics_have_no_remote_write_series_while_it_is_off(settings: Any) -> None:
    settings.REMOTE_WRITE = RemoteWrite()
    behind(42.0)

    assert "fleetwatch_remote_write" not in render(NOW).decode()


def test_the_overview_says_how_far_behind_and_why(settings: Any) -> None:
    settings.REMOTE_WRITE = ON
    assert lag_words(NOW) == (NEVER_SHIPPED, "")

    behind(720.0, shipped_samples=5000, failures=3, last_error="no answer: ConnectionError")

    text, title = lag_words(NOW) or ("", "")
    assert text == (
        "12 min behind; 5,000 samples shipped, 0 refused; receiver failing (3 passes in a row)"
    )
    assert title == "no answer: ConnectionError"
    settings.REMOTE_WRITE = RemoteWrite()
    assert lag_words(NOW) is None


fast_passwords = people.fast_passwords  # autouse
client = people.ops_signed_in


@pytest.fixture
def site() -> None:
    """What `client` seeds first: nothing beyond the defaults."""


def test_the_fleet_overview_shows_the_lag_to_operators(settings: Any, client: Client) -> None:
    settings.REMOTE_WRITE = ON
    behind(75.0, at=time.time(), shipped_samples=99)

    page = client.get("/").content.decode()

    assert 'id="remote-write"' in page
    line = next(x for x in page.splitlines() if "remote-write" in x)
    assert "Remote write: 75 s behind; 99 samples shipped, 0 refused" in line, line


def firing_sites() -> list[str]:
    return sorted(
        AlertInstance.objects.filter(rule__key="remote-write-lag", state="firing").values_list(
            "entity", flat=True
        )
    )


def test_the_lag_rule_fires_for_every_site_and_resolves_on_catching_up(settings: Any) -> None:
    settings.REMOTE_WRITE = ON
    seed_demo_site("one", tuple(replace(p, nodes=1) for p in DEMO_RACKS[:1]), gpus_per_node=1)
    seed_demo_site("two", tuple(replace(p, nodes=1) for p in DEMO_RACKS[1:2]), gpus_per_node=1)
    AlertRule.objects.exclude(key="remote-write-lag").update(enabled=False)
    stuck = NOW - LAG_ALERT_S + 30  # below the threshold at NOW, past it 30 s later
    behind(0, at=stuck)

    for k in range(9):
        evaluate(NOW + 10 * k)
    assert firing_sites() == []  # over the threshold since NOW + 30: the for-duration holds it
    for k in range(9, 16):
        evaluate(NOW + 10 * k)

    sites = sorted(str(pk) for pk in Site.objects.values_list("pk", flat=True))
    assert firing_sites() == sites

    behind(60.0, at=NOW + 170)  # caught up
    evaluate(NOW + 170)
    assert firing_sites() == []
