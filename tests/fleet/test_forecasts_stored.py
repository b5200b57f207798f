"""Forecasts are computed off the hot paths (fleet/read/forecast_now.py): the task
fleet.forecasts computes every site's once a minute and stores them; the rack page, the
overview and the alert rules only read what it stored — nothing before its first run, and
nothing once the newest result is more than three minutes old (a stopped beat)."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from fleet import tasks
from fleet.alerts.engine import evaluate
from fleet.alerts.models import AlertInstance
from fleet.models import Rack, Site
from fleet.read import computed, forecast_now, forecast_sources
from fleet.read.forecast import Forecast
from fleet.read.forecast_sources import LimitForecast
from tests.support import forecast_rows, pages, people
from tests.support.forecast_rows import metered, seed_minutes
from tests.support.pages import fold
from tests.support.series import ramp

pytestmark = pytest.mark.django_db

fast_passwords = people.fast_passwords  # autouse
site = pages.rack_site
client = people.ops_signed_in

MINUTE = 60


fresh_forecasts = forecast_rows.fresh_forecasts  # autouse


@pytest.fixture
def ramping(site: None) -> tuple[int, float]:
    """A01 (130 kW budget) ramping to it in 40 minutes; its site's id and a minute's start."""
    now = time.time() // MINUTE * MINUTE
    a01 = Rack.objects.get(name="A01")
    shape = metered(ramp(125e3, now, 7.5e3), 300)
    seed_minutes("fw_rack_1m", "rack_id", a01.pk, "power_w_mean", shape, now)
    return Site.objects.get().pk, now


def computing_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, computing a site's forecasts fails the test."""

    def refuse(*args: object, **kwargs: object) -> list[LimitForecast]:
        raise AssertionError("a read computed forecasts")

    monkeypatch.setattr(forecast_now, "site_forecasts", refuse)
    monkeypatch.setattr(forecast_sources, "site_forecasts", refuse)


def a01_forecast(items: list[LimitForecast]) -> Forecast:
    (rack,) = [i for i in items if i.subject == "rack" and i.name == "A01"]
    assert isinstance(rack.forecast, Forecast)
    return rack.forecast


def test_before_the_task_has_run_a_read_finds_nothing_and_computes_nothing(
    ramping: tuple[int, float], client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    site_id, now = ramping
    computing_is_an_error(monkeypatch)

    assert forecast_now.forecasts_now(site_id, now + 5) == []
    page = client.get(f"/racks/{Rack.objects.get(name='A01').pk}/")
    assert page.status_code == 200 and "reaches" not in fold(page.content.decode())


def test_pages_and_rules_read_what_the_task_stored_without_computing(
    ramping: tuple[int, float], client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    site_id, now = ramping
    assert tasks.forecasts(now + 5) == 1  # the beat's task: one site done
    computing_is_an_error(monkeypatch)

    stored = forecast_now.forecasts_now(site_id, now + 5)
    # as of the minute's start: 40 minutes from then
    assert a01_forecast(stored).now == now
    assert 36 * MINUTE <= a01_forecast(stored).in_s <= 44 * MINUTE
    assert forecast_now.forecasts_now(site_id, now + 50) == stored  # the same, all minute
    page = fold(client.get(f"/racks/{Rack.objects.get(name='A01').pk}/").content.decode())
    assert "A01 reaches 130 kW in ~" in page
    evaluate(now + 6)  # the rules read them too: within 60 minutes of its budget, pending
    (pending,) = AlertInstance.objects.filter(rule__key="rack-power-forecast")
    assert pending.state == "pending"


def test_a_result_older_than_three_minutes_is_not_served(ramping: tuple[int, float]) -> None:
    site_id, now = ramping
    forecast_now.refresh_forecasts(now + 5)

    assert forecast_now.forecasts_now(site_id, now + forecast_now.STALE_S) != []
    assert forecast_now.forecasts_now(site_id, now + forecast_now.STALE_S + 1) == []
    # the next run serves again
    forecast_now.refresh_forecasts(now + forecast_now.STALE_S + 1)
    assert forecast_now.forecasts_now(site_id, now + forecast_now.STALE_S + 1) != []


def test_a_cache_that_cannot_be_reached_shows_no_forecast_and_fails_no_page(
    site: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Down:
        def get(self, key: str) -> None:
            raise ConnectionError("Redis is restarting")

        def delete_many(self, keys: list[str]) -> None:
            raise ConnectionError("Redis is restarting")

    tasks.forecasts(time.time())  # stored while the cache answered
    monkeypatch.setattr(computed, "caches", {computed.CACHE: Down()})
    for rack in Rack.objects.all():
        assert forecast_now.forecasts_now(rack.hall.site_id, time.time()) == []
    monkeypatch.undo()
