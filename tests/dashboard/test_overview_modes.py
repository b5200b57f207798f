"""The fleet overview as first rendered: tiles say their overall level in a word (a
throttled rack drawing little power is worse, never calmer) with their cooling loop; the
page carries what each heat-map mode needs; each site's strip shows facility and IT power,
PUE with its category, GPUs throttling, alerts firing and agents stale."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from django.test import Client

from agents.protocol import reasons as nvml
from fleet.models import CoolingLoop, Node, Rack, Site
from tests.support import pages, people
from tests.support.alert_engine import fire
from tests.support.latest import store_latest as store
from tests.support.pages import fold

pytestmark = pytest.mark.django_db
fast_passwords = people.fast_passwords  # autouse
site = pages.rack_site


client = people.ops_signed_in


def gpus(rack_name: str, at: float, **values: Any) -> None:
    for node in Node.objects.filter(rack__name=rack_name):
        for index in (0, 1):
            store("gpu", (node.id, index), at, **values)


def healthy_loop(at: float) -> CoolingLoop:
    loop = CoolingLoop.objects.get(name="CDU-1")  # cools A01 and A02
    store("loop", (loop.id,), at, supply_c=25.0, flow_lpm=400.0, pumps_running=2, leak=0)
    return loop


def tile(page: str, rack_name: str) -> str:
    rack = Rack.objects.get(name=rack_name)
    found = re.search(rf'<li class="rack" id="rack-{rack.id}".*?</li>', page, re.S)
    assert found is not None, f"no tile for {rack_name}"
    return found.group(0)


def payload(page: str) -> dict[str, Any]:
    found = re.search(r'<script id="fleet-data" type="application/json">(.*?)</script>', page)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def test_the_overview_needs_a_login(site: None) -> None:
    response = Client().get("/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_a_throttled_rack_drawing_less_power_reads_worse_than_a_busy_healthy_one(
    client: Client,
) -> None:
    now = time.time()
    healthy_loop(now)
    gpus("A01", now, temp_gpu_c=86.0, power_w=250.0, clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN)
    gpus("A02", now, temp_gpu_c=60.0, power_w=650.0)
    page = client.get("/").content.decode()
    throttled, busy = tile(page, "A01"), tile(page, "A02")
    assert 'data-mode-level="crit"' in throttled and 'data-mode-level="ok"' in busy
    assert "Critical" in fold(throttled) and "in thermal slowdown" in fold(throttled)
    assert "OK every signal OK" in fold(busy)
    racks = payload(page)["racks"]
    a01, a02 = (racks[str(Rack.objects.get(name=n).id)] for n in ("A01", "A02"))
    assert a01["power_kw"] < a02["power_kw"]  # less power, yet the worse level
    assert (a01["level"], a02["level"]) == ("crit", "ok")


def test_each_tile_names_the_cooling_loop_serving_it_with_its_level(client: Client) -> None:
    loop = healthy_loop(time.time())
    page = client.get("/").content.decode()
    liquid, air = fold(tile(page, "A01")), fold(tile(page, "A04"))
    assert "· CDU-1 OK" in liquid and f'href="/cooling/#loop-{loop.id}"' in tile(page, "A01")
    assert "CDU-1" not in air and "Air" in air


def test_a_rack_whose_loop_is_silent_says_so_instead_of_every_signal_ok(client: Client) -> None:
    gpus("A02", time.time(), temp_gpu_c=60.0, power_w=650.0)  # CDU-1 has sent nothing
    a02 = fold(tile(client.get("/").content.decode(), "A02"))
    assert "No data no fresh data from its cooling loop CDU-1" in a02
    assert "every signal OK" not in a02


def test_the_page_carries_every_modes_figures_and_where_each_rack_is(client: Client) -> None:
    now = time.time()
    gpus("A01", now, temp_gpu_c=80.0, power_w=600.0, clock_event_reasons=nvml.SW_POWER_CAP)
    a01 = Rack.objects.get(name="A01")
    store("rack", (a01.id,), now, power_w=120_000.0)
    fire("critical", rack=a01)
    data = payload(client.get("/").content.decode())
    rack = data["racks"][str(a01.id)]
    assert (rack["power_kw"], rack["power_level"]) == (120.0, "warn")  # 92 % of 130 kW
    assert (rack["min_headroom_c"], rack["headroom_level"]) == (7.0, "warn")  # 87 − 80
    assert (rack["throttling_thermal"], rack["throttling_power"]) == (0, 4)
    site_id, loop_id = data["places"][str(a01.id)]
    assert loop_id == a01.loop_id and site_id == a01.hall.site_id
    assert data["sites"][str(site_id)]["alerts"]["racks"][str(a01.id)]["severity"] == "critical"


def test_the_mode_switch_is_a_labelled_radio_group_defaulting_to_overall(client: Client) -> None:
    page = client.get("/").content.decode()
    radios = re.findall(r'<label><input type="radio" name="mode" value="(\w+)"( checked)?>', page)
    assert [value for value, _ in radios] == [
        "overall",
        "power",
        "headroom",
        "throttling",
        "alerts",
    ]
    assert [value for value, checked in radios if checked] == ["overall"]
    assert "<legend>Colour the racks by</legend>" in page


def test_the_site_strip_shows_power_pue_throttling_alerts_and_stale_agents(
    client: Client,
) -> None:
    now = time.time()
    site = Site.objects.get(slug="demo")
    store("facility", (site.id,), now, total_power_w=1.3e6, it_power_w=1.0e6, pue_category=2)
    gpus("A01", now, temp_gpu_c=86.0, clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN)
    gpus("A02", now, temp_gpu_c=60.0, clock_event_reasons=nvml.SW_POWER_CAP)
    quiet = Node.objects.get(rack__name="A04")
    store("node", (quiet.id,), now - 120, cpu_pct=5.0)
    fire("warning", rack=Rack.objects.get(name="A02"))
    strip = fold(client.get("/").content.decode())
    assert "Facility power 1.30 MW" in strip
    assert "IT power 1.00 MW" in strip
    assert "1.30 (category 2: PDU output)" in strip
    assert "GPUs throttling 4 in thermal slowdown · 4 at their power limit" in strip
    assert "Incidents Alerts no incident open alerts firing: 1 (0 critical)" in strip
    assert "Agents stale 1 of 5 nodes" in strip  # A01 ×2, A02 ×2 fresh; A04's quiet


def test_a_site_without_facility_data_says_no_data(client: Client) -> None:
    strip = fold(client.get("/").content.decode())
    assert "Facility power no data" in strip and "PUE now Power & PUE no data" in strip
    assert "Agents stale 0 of 5 nodes · 5 never sent data" in strip


def test_each_tile_links_to_its_rack_page(client: Client) -> None:
    a01 = Rack.objects.get(name="A01")
    assert f'<a class="rack-name" href="/racks/{a01.id}/">A01</a>' in tile(
        client.get("/").content.decode(), "A01"
    )


def test_the_overview_holds_only_the_sites_it_is_given_naming_each_sites_halls(
    site: None,
) -> None:
    from dataclasses import replace

    from dashboard.overview import fleet_overview
    from fleet.demo import DEMO_RACKS, seed_demo_site

    north = seed_demo_site("north", (replace(DEMO_RACKS[0], name="N01", nodes=1),), 1)
    Site.objects.filter(pk=north.pk).update(name="North")
    demo = Site.objects.get(slug="demo")
    halls, data = fleet_overview(time.time(), {north.pk})
    assert [t.name for tiles in halls.values() for t in tiles] == ["N01"]
    assert list(data["sites"]) == [str(north.pk)] and len(data["racks"]) == 1
    halls, data = fleet_overview(time.time(), None)  # every site: halls say whose they are
    assert set(halls) == {"Demo datacentre · Hall A", "North · Hall A"}
    assert set(data["sites"]) == {str(demo.pk), str(north.pk)}
