"""The browsers' live sockets, driven through Channels without a server: who may connect
and to what; what the publisher's messages carry to a rack's and a site's subscribers
(each GPU, the loops); and what a rack or cooling page is sent when its group says
something changed (the page's HTML, rendered from the latest state)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from channels.layers import get_channel_layer
from django.contrib.auth.models import AnonymousUser, User

from agents.protocol import reasons as nvml
from dashboard import consumers
from fleet.models import GPU, CoolingLoop, Node, Rack, Site
from fleet.read.live import LIVE_UPDATE, LivePublisher, rack_changed_group, site_group
from tests.support import live_sockets
from tests.support.django_data import COMMITS
from tests.support.latest import store_latest as store
from tests.support.live_sockets import WAIT_S, closed_with, live_paths, socket

pytestmark = COMMITS  # the sockets read from other threads

fresh_hub = live_sockets.fresh_hub  # autouse
site = live_sockets.two_rack_site
ops = live_sockets.ops_viewer


async def nudge(group: str) -> None:
    """What the live publisher sends when something in the group changed."""
    await get_channel_layer().group_send(group, {"type": LIVE_UPDATE, "update": {"ts": 0}})


async def test_a_visitor_without_a_session_is_refused_on_every_live_socket(site: Site) -> None:
    rack_id = await Rack.objects.values_list("id", flat=True).afirst()
    assert rack_id is not None
    for path in live_paths(site.id, rack_id):
        assert await closed_with(socket(path, AnonymousUser())) == consumers.CLOSE_UNAUTHORIZED


async def test_a_rack_or_site_that_does_not_exist_is_not_allowed(ops: User) -> None:
    for path in live_paths(999999, 999999)[1:5]:
        assert await closed_with(socket(path, ops)) == consumers.CLOSE_NOT_ALLOWED


async def test_a_rack_or_site_the_user_may_not_see_is_not_allowed(
    site: Site, ops: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumers, "can_view_site", lambda user, site_id: False)
    rack_id = await Rack.objects.values_list("id", flat=True).afirst()
    assert rack_id is not None
    for path in live_paths(site.id, rack_id)[1:5]:
        assert await closed_with(socket(path, ops)) == consumers.CLOSE_NOT_ALLOWED


async def test_a_rack_subscriber_gets_its_rack_with_each_gpu_and_another_rack_gets_nothing(
    ops: User,
) -> None:
    a01, a02 = await Rack.objects.aget(name="A01"), await Rack.objects.aget(name="A02")
    watcher, bystander = (
        socket(f"/ws/live/rack/{a01.id}", ops),
        socket(f"/ws/live/rack/{a02.id}", ops),
    )
    assert (await watcher.connect())[0] and (await bystander.connect())[0]
    node = await Node.objects.filter(rack=a01).afirst()
    assert node is not None
    gpu = await GPU.objects.aget(node=node, index=1)
    await store_async("gpu", (node.id, 1), time.time(), temp_gpu_c=91.0, power_w=300.0,
                      power_limit_w=600.0, clock_sm_mhz=1410.0, util_gpu_pct=97.0,
                      clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN)  # fmt: skip
    await LivePublisher().publish({"gpu": {(node.id, 1)}})  # what ingest reports as saved
    update = await watcher.receive_json_from()
    assert update["rack"]["id"] == a01.id and update["rack"]["level"] == "crit"
    entry = update["gpus"][str(gpu.pk)]
    assert entry["node_id"] == node.id and entry["index"] == 1
    assert (entry["level"], entry["level_word"]) == ("crit", "Critical")
    assert entry["temp_c"] == 91.0 and entry["headroom_c"] == -4.0  # its own 87 °C limit
    assert (entry["power_w"], entry["power_limit_w"]) == (300.0, 600.0)
    assert (entry["sm_clock_mhz"], entry["util_pct"]) == (1410.0, 97.0)
    assert entry["reasons"] == ["hw_thermal: hardware thermal slowdown (>=2x)"]
    assert entry["throttling"] is True and entry["stale"] is False
    assert str(node.id) in update["nodes"]
    assert await bystander.receive_nothing(timeout=0.3)
    await watcher.disconnect()
    await bystander.disconnect()


async def test_a_rack_signal_subscriber_is_told_only_that_its_rack_changed(ops: User) -> None:
    rack = await Rack.objects.aget(name="A01")
    ws = socket(f"/ws/live/rack/{rack.id}/changed", ops)
    assert (await ws.connect())[0]
    node = await Node.objects.filter(rack=rack).afirst()
    assert node is not None
    await store_async("gpu", (node.id, 0), time.time(), temp_gpu_c=70.0)
    await LivePublisher().publish({"gpu": {(node.id, 0)}})
    assert set(await ws.receive_json_from()) == {"ts"}
    await ws.disconnect()


async def test_a_loop_serving_no_rack_reaches_its_site_subscribers(site: Site, ops: User) -> None:
    spare = await CoolingLoop.objects.acreate(
        site=site, name="CDU-9", capacity_kw=300, liquid_class="W32", rated_flow_lpm=600
    )
    ws = socket(f"/ws/live/site/{site.id}", ops)
    assert (await ws.connect())[0]
    await store_async("loop", (spare.id,), time.time(), supply_c=33.5, flow_lpm=300.0,
                      pumps_running=0, pumps_failed=2)  # fmt: skip
    await LivePublisher().publish({"loop": {(spare.id,)}})
    update = await ws.receive_json_from()
    loop = update["loops"][str(spare.id)]
    assert (loop["level"], loop["level_word"]) == ("crit", "Critical")
    assert "supply 33.5 °C against its 32 °C limit" in loop["reasons"]
    assert "no pump running" in loop["reasons"] and "2 pump(s) failed" in loop["reasons"]
    assert loop["supply_c"] == 33.5 and loop["supply_limit_c"] == 32.0
    assert loop["ts"] is not None and "supply_c" in loop["reported"]
    await ws.disconnect()


async def test_a_change_in_the_rack_pushes_its_page_again_with_the_new_figures(
    ops: User,
) -> None:
    rack = await Rack.objects.aget(name="A01")
    ws = socket(f"/ws/live/rack/{rack.id}/page", ops)
    assert (await ws.connect(timeout=WAIT_S))[0]
    node = await Node.objects.filter(rack=rack).afirst()
    assert node is not None
    now = time.time()
    await store_async("gpu", (node.id, 0), now, temp_gpu_c=91.0, power_w=300.0,
                      clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN)  # fmt: skip
    await nudge(rack_changed_group(rack.id))
    html = await ws.page_showing("4 °C past slowdown")  # 91 °C against its own 87 °C limit
    assert "hw_thermal: " in html
    assert 'data-level="crit"' in html
    await ws.disconnect()


async def test_a_failed_cdu_reaches_the_cooling_page_through_its_site(
    site: Site, ops: User
) -> None:
    ws = socket("/ws/live/cooling", ops)
    assert (await ws.connect(timeout=WAIT_S))[0]
    loop = await CoolingLoop.objects.aget(name="CDU-1")
    await store_async("loop", (loop.id,), time.time(), supply_c=30.0, flow_lpm=0.0,
                      pumps_running=0, pumps_failed=3)  # fmt: skip
    await nudge(site_group(site.id))
    assert "no pump running" in await ws.page_showing("3 pump(s) failed")
    await ws.disconnect()


async def test_the_overview_socket_joins_only_the_sites_the_user_sees(
    site: Site, ops: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = await Site.objects.acreate(name="Elsewhere", slug="elsewhere")
    monkeypatch.setattr(consumers, "visible_site_ids", lambda user: {site.id})
    ws = socket("/ws/live/fleet", ops)
    assert (await ws.connect(timeout=WAIT_S))[0]
    layer = get_channel_layer()
    await layer.group_send(site_group(other.id), {"type": LIVE_UPDATE, "update": {"x": "hidden"}})
    await layer.group_send(site_group(site.id), {"type": LIVE_UPDATE, "update": {"x": "seen"}})
    assert await ws.receive_json_from(timeout=WAIT_S) == {"x": "seen"}
    assert await ws.receive_nothing(timeout=0.2)
    await ws.disconnect()


async def store_async(kind: str, key: tuple[int, ...], at: float, **values: Any) -> None:
    from channels.db import database_sync_to_async

    await database_sync_to_async(store)(kind, key, at, **values)


async def test_a_site_strip_is_refreshed_while_data_flows_even_without_facility_data(
    site: Site, ops: User
) -> None:
    """Alerts firing and agents stale move without the facility reporting: a publish
    refreshes every site's strip at least every SITE_REFRESH_S."""
    ws = socket(f"/ws/live/site/{site.id}", ops)
    assert (await ws.connect())[0]
    node = await Node.objects.filter(rack__name="A01").afirst()
    assert node is not None
    await store_async("gpu", (node.id, 0), time.time(), temp_gpu_c=60.0)
    publisher = LivePublisher()
    await publisher.publish({"gpu": {(node.id, 0)}})  # the first publish refreshes
    first = await ws.receive_json_from()
    assert first["site"]["site_id"] == site.id and "alerts" in first["site"]
    await publisher.publish({"gpu": {(node.id, 0)}})  # within SITE_REFRESH_S: racks only
    second = await ws.receive_json_from()
    assert "site" not in second
    await ws.disconnect()
