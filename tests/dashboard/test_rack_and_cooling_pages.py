"""The rack and cooling pages, rendered from latest state written through `merge_latest`
(the ingest write path): the figures, their levels in words, stale figures as their age,
decoded throttle reasons, the N+1 view, links, login and 404."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from django.test import Client

from agents.protocol import reasons as nvml
from fleet.models import CoolingLoop, Node, PowerFeed, Rack
from tests.support import pages, people
from tests.support.latest import store_latest as store
from tests.support.pages import fold, text

pytestmark = pytest.mark.django_db


fast_passwords = people.fast_passwords  # autouse
site = pages.rack_site


client = people.ops_signed_in


def rack(name: str) -> Rack:
    return Rack.objects.get(name=name)


def healthy_gpus(rack_name: str, at: float, **extra: Any) -> None:
    for node in Node.objects.filter(rack__name=rack_name):
        for index in (0, 1):
            store("gpu", (node.id, index), at, temp_gpu_c=70.0, power_w=600.0, **extra)


def test_both_pages_need_a_login(site: None) -> None:
    anonymous = Client()
    for url in (f"/racks/{rack('A01').id}/", "/cooling/"):
        response = anonymous.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_an_unknown_rack_is_a_404(client: Client) -> None:
    assert client.get("/racks/999999/").status_code == 404


def test_rack_page_shows_power_against_budget_with_its_source_and_each_feed(
    client: Client,
) -> None:
    now = time.time()
    a01 = rack("A01")
    store("rack", (a01.id,), now, power_w=112_000.0)
    feeds = {f.name: f for f in PowerFeed.objects.filter(rack=a01)}
    store("feed", (feeds["A"].id,), now, power_w=56_000.0)
    store("feed", (feeds["B"].id,), now, power_w=56_000.0)
    healthy_gpus("A01", now)
    page = text(client.get(f"/racks/{a01.id}/"))
    assert "112.0 kW of 130 kW budget (86 %)" in page
    assert "Source: measured at the PDU" in page
    available = feeds["A"].available_kw  # 415 V × 125 A × 80 % × √3 ≈ 71.9 kW
    assert f"56.0 kW {available:.1f} kW 78 % of rating" in page
    assert "as of" in page and "connecting…" in page  # then live: /ws/live/rack/<id>


def test_n_plus_one_says_whether_one_feed_carries_the_rack(client: Client) -> None:
    now = time.time()
    a01 = rack("A01")
    healthy_gpus("A01", now)
    store("rack", (a01.id,), now, power_w=112_000.0)  # more than one 71.9 kW feed
    page = client.get(f"/racks/{a01.id}/").content.decode()
    assert 'data-holds="no"' in page
    assert "does NOT carry the 112.0 kW drawn now" in page
    store("rack", (a01.id,), now, power_w=60_000.0)
    page = client.get(f"/racks/{a01.id}/").content.decode()
    assert 'data-holds="yes"' in page
    assert "holds: one feed carries the rack" in page
    assert "If feed A fails, B can carry 71.9 kW: carries the 60.0 kW drawn now" in page
    assert "the 130 kW budget does not fit" in page  # the demo budget exceeds one feed


def test_a_throttled_gpu_shows_its_decoded_reason_headroom_and_level(client: Client) -> None:
    now = time.time()
    a01 = rack("A01")
    healthy_gpus("A01", now)
    node = Node.objects.filter(rack=a01).order_by("position").first()
    assert node is not None
    store(
        "gpu",
        (node.id, 1),
        now,
        temp_gpu_c=89.0,
        power_w=310.0,
        clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN,
    )
    response = client.get(f"/racks/{a01.id}/")
    html = response.content.decode()
    tile = re.search(rf'id="node-{node.id}".*?data-gpu="1"(.*?)</li>\s*</ul>', html, re.S)
    assert tile is not None
    gpu = fold(tile.group(1))
    assert 'data-level="crit"' in tile.group(0)
    assert "Critical" in gpu
    assert "89 °C" in gpu and "2 °C past slowdown" in gpu
    assert "hw_thermal: hardware thermal slowdown (>=2x)" in gpu
    page = text(response)
    assert "17 °C to slowdown" in page  # a healthy GPU: 87 − 70
    assert "1 GPU(s) in thermal slowdown" in page  # the rack's reason, from fleet.read.state


def test_stale_figures_say_how_old_they_are(client: Client) -> None:
    now = time.time()
    a01 = rack("A01")
    healthy_gpus("A01", now - 44)  # past the 30 s freshness target
    response = client.get(f"/racks/{a01.id}/")
    page = text(response)
    assert re.search(r"no data for 4[45] s", page)
    assert "No data" in page
    assert 'data-stale="1"' in response.content.decode()
    assert "70 °C" not in page  # never a frozen number


def test_liquid_rack_links_its_loop_and_shows_its_liquid(client: Client) -> None:
    now = time.time()
    a01 = rack("A01")
    healthy_gpus("A01", now)
    store("rack", (a01.id,), now, liquid_supply_c=30.5, liquid_return_c=41.0)
    assert a01.loop_id is not None
    store("loop", (a01.loop_id,), now, supply_c=30.0, return_c=40.0, flow_lpm=300.0)
    response = client.get(f"/racks/{a01.id}/")
    assert f'href="/cooling/#loop-{a01.loop_id}"' in response.content.decode()
    page = text(response)
    assert "Cooled by CDU-1 OK" in page
    assert "Supply 30.5 °C (rack)" in page and "Return 41.0 °C (rack)" in page
    assert "Flow 300 L/min (loop)" in page
    air = text(client.get(f"/racks/{rack('A04').id}/"))
    assert "Liquid cooling" not in air


def test_cooling_page_shows_a_failed_cdu_and_the_racks_it_serves(client: Client) -> None:
    now = time.time()
    cdu = CoolingLoop.objects.get(name="CDU-1")
    store(
        "loop",
        (cdu.id,),
        now,
        supply_c=33.5,
        return_c=45.0,
        flow_lpm=0.0,
        pumps_running=0,
        pumps_failed=3,
        leak=0,
        heat_removed_kw=150.0,
        dp_kpa=80.0,
    )
    healthy_gpus("A02", now)
    healthy_gpus("A01", now, clock_event_reasons=nvml.HW_SLOWDOWN)
    response = client.get("/cooling/")
    html = response.content.decode()
    page = text(response)
    assert f'id="loop-{cdu.id}" data-level="crit"' in html
    assert "CDU-1 Demo datacentre · W32 Critical :" in page
    assert "supply 33.5 °C against its 32 °C limit" in page
    assert "3 pump(s) failed" in page and "no pump running" in page
    assert "Supply 33.5 °C (limit 32 °C)" in page
    assert "ΔT 11.5 °C" in page
    assert "Flow 0 L/min (0 % of rated 600 L/min)" in page
    assert "Pumps 0 running, 3 failed" in page
    assert "Pressure differential 80 kPa" in page
    assert "Heat removed 150.0 kW of 300 kW rated (50 %)" in page
    assert "Leak none" in page
    for name in ("A01", "A02"):
        assert f'href="/racks/{rack(name).id}/"' in html
    assert "A01 Critical 2.4 kW 4 (4 thermal)" in page  # its GPUs in HW slowdown
    assert "A02 Critical 2.4 kW 0" in page  # healthy GPUs, but its loop has failed
    cdu2 = CoolingLoop.objects.get(name="CDU-2")
    assert f'id="loop-{cdu2.id}" data-level="unknown"' in html  # nothing reported: no data
    assert "not reported" in page


def test_fleet_tiles_link_to_rack_pages_and_their_loop_to_the_cooling_page(
    client: Client,
) -> None:
    html = client.get("/").content.decode()
    a01, a04 = rack("A01"), rack("A04")
    assert f'href="/racks/{a01.id}/"' in html and f'href="/racks/{a04.id}/"' in html
    assert f'href="/cooling/#loop-{a01.loop_id}"' in html
    assert '<a href="/cooling/"' in html  # the nav


def test_the_rack_page_links_each_node_and_gpu_to_its_own_page(client: Client) -> None:
    rack = Rack.objects.get(name="A01")
    node = Node.objects.filter(rack=rack).first()
    assert node is not None
    page = client.get(f"/racks/{rack.id}/").content.decode()
    assert f'href="/nodes/{node.id}/"' in page
    for gpu in node.gpus.all():
        assert f'href="/gpus/{gpu.pk}/"' in page
