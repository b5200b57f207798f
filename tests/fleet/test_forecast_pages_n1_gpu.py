"""The pages say a feed N+1 and a GPU headroom forecast in the words forecast_sources owns:
the rack page names its feeds reaching their N+1, the GPU page its temperature reaching its
slowdown limit less the critical headroom; a GPU that holds steady says nothing of the
kind. Both read what the task fleet.forecasts stored."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from fleet import tasks
from fleet.health.racks import n_plus_one_kw
from fleet.models import GPU, PowerFeed, Rack
from tests.support import forecast_rows, pages, people
from tests.support.forecast_rows import metered, seed_gpu_minutes, seed_minutes
from tests.support.pages import fold
from tests.support.series import ramp

pytestmark = pytest.mark.django_db

fast_passwords = people.fast_passwords  # autouse
site = pages.rack_site  # GPUs slow down at 87 °C
client = people.ops_signed_in
fresh_forecasts = forecast_rows.fresh_forecasts  # autouse

MINUTE = 60


def test_the_rack_page_names_its_feeds_reaching_their_n_plus_one(client: Client) -> None:
    now = time.time() // MINUTE * MINUTE
    a01 = Rack.objects.get(name="A01")
    feeds = list(PowerFeed.objects.filter(rack=a01))
    n1 = n_plus_one_kw([f.available_kw for f in feeds])
    for f in feeds:  # together 5 kW under their N+1, 7.5 kW an hour: 40 minutes away
        shape = ramp(1e3 * (n1 - 5) / len(feeds), now, 7.5e3 / len(feeds))
        seed_minutes("fw_feed_1m", "feed_id", f.pk, "power_w_mean", metered(shape, 50, f.pk), now)
    tasks.forecasts(now + 5)

    page = fold(client.get(f"/racks/{a01.pk}/").content.decode())

    assert f"A01 feeds reach {round(n1, 1):g} kW, their N+1 (all less the largest), in ~" in page


def test_the_gpu_page_names_a_warming_gpu_reaching_its_limit(client: Client) -> None:
    now = time.time() // MINUTE * MINUTE
    warming, steady = GPU.objects.filter(node__rack__name="A01")[:2]
    seed_gpu_minutes(warming.node_id, warming.index, metered(ramp(80.0, now, 6.0), 0.1), now)
    seed_gpu_minutes(steady.node_id, steady.index, metered(lambda t: 80.0, 0.1, 1), now)
    tasks.forecasts(now + 5)

    page = fold(client.get(f"/gpus/{warming.pk}/").content.decode())
    quiet = fold(client.get(f"/gpus/{steady.pk}/").content.decode())

    assert f"{warming.node.name} GPU {warming.index} reaches 84 °C, 3 °C under its slowdown" in page
    assert "90 % interval" in page
    assert "under its slowdown limit, in ~" not in quiet
