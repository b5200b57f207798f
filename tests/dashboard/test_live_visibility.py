"""Live pages show a person only the sites their roles give them (fleet/access.py): the
cooling page and its pushes list only those sites' loops, two people who see different
sites never share a render, and another site's rack page socket is refused."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth.models import User
from django.test import Client

from dashboard import consumers
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import CoolingLoop, Rack, Site
from fleet.read.live import LIVE_UPDATE, site_group
from tests.support import live_sockets
from tests.support.django_data import COMMITS
from tests.support.latest import store_latest as store
from tests.support.live_sockets import closed_with, socket
from tests.support.roles import person

pytestmark = COMMITS  # the sockets read from other threads

fresh_hub = live_sockets.fresh_hub  # autouse


@pytest.fixture
def sites() -> tuple[Site, Site]:
    """Demo (A01, A02 on CDU-1; CDU-2) and North with its own loop, NCDU-7."""
    demo = seed_demo_site("demo", tuple(replace(p, nodes=1) for p in DEMO_RACKS[:2]), 1)
    north = Site.objects.create(slug="north", name="North")
    CoolingLoop.objects.create(
        site=north, name="NCDU-7", capacity_kw=300, liquid_class="W32", rated_flow_lpm=600
    )
    return demo, north


def test_the_cooling_page_lists_only_the_loops_of_the_sites_one_sees(
    sites: tuple[Site, Site],
) -> None:
    client = Client()
    client.force_login(person("vic", north="viewer"))
    page = client.get("/cooling/").content.decode()
    assert "NCDU-7" in page and "CDU-1" not in page
    everyone = Client()
    everyone.force_login(person("pat", demo="viewer", north="viewer"))
    page = everyone.get("/cooling/").content.decode()
    assert "NCDU-7" in page and "CDU-1" in page


async def test_people_who_see_different_sites_get_their_own_cooling_pushes(
    sites: tuple[Site, Site],
) -> None:
    demo, north = sites
    vic = await database_sync_to_async(person)("vic", north="viewer")
    pat = await database_sync_to_async(person)("pat", demo="viewer", north="viewer")
    vics, pats = socket("/ws/live/cooling", vic), socket("/ws/live/cooling", pat)
    assert (await vics.connect())[0] and (await pats.connect())[0]
    cdu1 = await CoolingLoop.objects.aget(name="CDU-1")
    await database_sync_to_async(store)(
        "loop", (cdu1.id,), time.time(), supply_c=30.0, pumps_running=0, pumps_failed=3
    )
    layer = get_channel_layer()
    for site in (demo, north):  # each socket hears its own sites' groups only
        await layer.group_send(site_group(site.id), {"type": LIVE_UPDATE, "update": {}})
    pats_page = await pats.page_showing("3 pump(s) failed")
    vics_page = (await vics.receive_json_from())["html"]
    assert "NCDU-7" in pats_page
    assert "NCDU-7" in vics_page and "CDU-1" not in vics_page
    await vics.disconnect()
    await pats.disconnect()


async def test_a_rack_page_socket_of_a_site_one_does_not_see_is_refused(
    sites: tuple[Site, Site],
) -> None:
    vic: User = await database_sync_to_async(person)("vic", north="viewer")
    a01 = await Rack.objects.aget(name="A01")
    code = await closed_with(socket(f"/ws/live/rack/{a01.id}/page", vic))
    assert code == consumers.CLOSE_NOT_ALLOWED
