"""Time to limit on the rack page: a rack whose draw ramps towards its budget says when it
reaches it ("A01 reaches 130 kW in ~40 min at this trend", the interval in its title), in
the page and in each live update of it; a flat rack says nothing about a limit. The
forecasts are those the task fleet.forecasts stored (`refresh_forecasts`, run here before
each read as the beat would have run it)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from django.test import Client

from dashboard.live_pages import rack_live
from fleet.models import Rack
from fleet.read import forecast_now
from tests.support import forecast_rows, pages, people
from tests.support.forecast_rows import metered, seed_minutes
from tests.support.pages import fold
from tests.support.series import ramp

pytestmark = pytest.mark.django_db

fast_passwords = people.fast_passwords  # autouse
site = pages.rack_site
client = people.ops_signed_in

SENTENCE = re.compile(r"(\w+) reaches ([\d.]+) kW in ~(\d+) min at this trend")


fresh_forecasts = forecast_rows.fresh_forecasts  # autouse


def seed_rack(name: str, shape: Callable[[float], float]) -> Rack:
    """The rack's minute means up to now, and the site's forecasts refreshed from them."""
    rack = Rack.objects.get(name=name)
    seed_minutes("fw_rack_1m", "rack_id", rack.pk, "power_w_mean", shape, time.time())
    forecast_now.refresh_forecasts(time.time())
    return rack


def test_a_ramping_rack_says_when_it_reaches_its_budget(site: None, client: Client) -> None:
    now = time.time()
    # 130 kW budget: 125 kW now, rising 7.5 kW an hour, reaches it in 40 minutes
    a01 = seed_rack("A01", metered(ramp(125e3, now, 7.5e3), 300))

    page = client.get(f"/racks/{a01.pk}/").content.decode()

    found = SENTENCE.findall(fold(page))
    assert [(name, kw) for name, kw, _ in found] == [("A01", "130")]
    assert 36 <= int(found[0][2]) <= 44  # within 10 % of the true 40 minutes
    assert re.search(r'title="90 % interval: ~\d+ min to ~\d+ min; fitted to \d+ minute', page)
    # and each live update carries it (the live region is the same template)
    assert SENTENCE.search(fold(rack_live(a01.pk)["html"]))


def test_a_flat_rack_says_nothing_about_a_limit(site: None, client: Client) -> None:
    a01 = seed_rack("A01", metered(lambda t: 100e3, 300))

    page = client.get(f"/racks/{a01.pk}/").content.decode()

    assert "reaches" not in page and "Time to limit" not in page


def test_the_fleet_overview_names_the_rack_that_ramps_and_only_it(
    site: None, client: Client
) -> None:
    now = time.time()
    seed_rack("A01", metered(ramp(125e3, now, 7.5e3), 300))
    seed_rack("A02", metered(lambda t: 100e3, 300))

    page = fold(client.get("/").content.decode())

    assert [name for name, _, _ in SENTENCE.findall(page)] == ["A01"]
