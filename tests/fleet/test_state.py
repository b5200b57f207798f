"""What the overview (and live pushes) say about a rack: the worst of its signals,
with reasons an operator can read — computed on the server from latest state."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from agents.protocol import reasons as nvml
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import GPU, CoolingLoop, Node, PowerFeed, Rack, Site
from fleet.read.live import fleet_group, rack_group, site_group
from fleet.read.payloads import build_updates, plan_updates
from fleet.read.state import rack_payload, rack_states
from tests.support.latest import store

pytestmark = pytest.mark.django_db


@pytest.fixture
def site() -> Site:
    # A01, A02 on CDU-1, with the figures these tests judge against (not the demo's).
    racks = tuple(replace(plan, nodes=2, budget_kw=130, feed_amps=125) for plan in DEMO_RACKS[:2])
    site = seed_demo_site("demo", racks, gpus_per_node=2)
    GPU.objects.update(slowdown_c=87.0, shutdown_c=92.0)
    CoolingLoop.objects.update(capacity_kw=300, rated_flow_lpm=600, liquid_class="W32")
    return site


def a01(now: float, **gpu: Any) -> dict[str, Any]:
    rack = Rack.objects.get(name="A01")
    for node in Node.objects.filter(rack=rack):
        for index in (0, 1):
            store("gpu", (node.id, index), now, **gpu)
    state = rack_states([rack.id], now)[rack.id]
    return rack_payload(state)


def test_a_rack_in_thermal_slowdown_drawing_little_power_is_critical_not_calm(site: Site) -> None:
    now = time.time()
    rack = Rack.objects.get(name="A01")
    store("rack", (rack.id,), now, power_w=30_000.0)  # 23 % of its 130 kW budget
    payload = a01(now, temp_gpu_c=89.0, power_w=300.0, clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN)
    assert payload["level"] == "crit"
    assert payload["power_source"] == "pdu" and payload["power_level"] == "ok"
    assert any("thermal slowdown" in r for r in payload["reasons"])
    assert any("past slowdown" in r for r in payload["reasons"])


def test_a_rack_takes_the_state_of_the_cooling_loop_that_serves_it(site: Site) -> None:
    now = time.time()
    loop = CoolingLoop.objects.get(name="CDU-1")
    store("loop", (loop.id,), now, supply_c=30.0, flow_lpm=0.0, pumps_running=0, pumps_failed=3)
    payload = a01(now, temp_gpu_c=60.0, power_w=500.0, clock_event_reasons=0)
    assert payload["loop"] == "CDU-1" and payload["loop_level"] == "crit"
    assert payload["level"] == "crit"
    assert "cooling loop CDU-1 crit" in payload["reasons"]


def test_a_rack_near_its_budget_warns_and_says_why(site: Site) -> None:
    now = time.time()
    rack = Rack.objects.get(name="A01")
    store("rack", (rack.id,), now, power_w=123_500.0)  # 95 % of 130 kW
    payload = a01(now, temp_gpu_c=60.0, power_w=500.0, clock_event_reasons=nvml.SW_POWER_CAP)
    assert payload["level"] == "warn"
    assert payload["reasons"] == ["power 95 % of budget"]  # a power cap alone is no reason
    assert payload["throttling_power"] == 4


def test_a_rack_whose_data_went_quiet_reads_unknown_never_ok(site: Site) -> None:
    then = time.time() - 600
    payload = a01(then, temp_gpu_c=60.0, power_w=500.0, clock_event_reasons=0)
    rack = Rack.objects.get(name="A01")
    payload = rack_payload(rack_states([rack.id], time.time())[rack.id])
    assert payload["level"] == "unknown" and payload["stale"] is True
    assert "no fresh data" in payload["reasons"]


GPU_CONTRACT = {
    "node_id", "index", "level", "level_word", "temp_c", "headroom_c", "power_w",
    "power_limit_w", "sm_clock_mhz", "util_pct", "reasons", "throttling", "stale_s", "ts",
}  # fmt: skip


def updates_for(changed: dict[str, set[tuple[int, ...]]], now: float) -> dict[str, Any]:
    plan = plan_updates(changed)
    return dict(build_updates(plan, plan.groups(), now))


def first_node_of(rack_name: str) -> tuple[Rack, Node]:
    rack = Rack.objects.get(name=rack_name)
    node = Node.objects.filter(rack=rack).order_by("name").first()
    assert node is not None
    return rack, node


def test_a_rack_message_carries_every_gpu_of_the_rack_keyed_by_its_inventory_id(
    site: Site,
) -> None:
    now = time.time()
    rack, node = first_node_of("A01")
    store("gpu", (node.id, 0), now, temp_gpu_c=80.0, power_w=450.0, clock_event_reasons=0)
    message = updates_for({"gpu": {(node.id, 0)}}, now)[rack_group(rack.id)]
    gpus = message["gpus"]
    assert set(gpus) == {str(g.pk) for g in GPU.objects.filter(node__rack=rack)}
    reported = gpus[str(GPU.objects.get(node=node, index=0).pk)]
    assert set(reported) >= GPU_CONTRACT
    assert reported["level"] == "warn" and reported["headroom_c"] == 7.0  # 87 − 80
    assert reported["stale_s"] is not None and reported["stale_s"] >= 0
    silent = gpus[str(GPU.objects.get(node=node, index=1).pk)]
    assert (silent["level"], silent["level_word"]) == ("unknown", "No data")
    assert silent["ts"] is None and silent["stale_s"] is None and silent["temp_c"] is None
    assert set(message["nodes"]) == {str(n.id) for n in Node.objects.filter(rack=rack)}


def test_the_fleet_message_stays_compact(site: Site) -> None:
    now = time.time()
    node = Node.objects.filter(rack__name="A01").first()
    assert node is not None
    store("gpu", (node.id, 0), now, temp_gpu_c=60.0, power_w=450.0)
    fleet = updates_for({"gpu": {(node.id, 0)}}, now)[fleet_group()]
    assert set(fleet) == {"ts", "racks", "sites"}
    assert all(set(rack) == {"level", "throttling"} for rack in fleet["racks"].values())


def test_a_loop_change_reaches_its_site_even_when_the_loop_serves_no_rack(site: Site) -> None:
    now = time.time()
    spare = CoolingLoop.objects.create(site=site, name="CDU-9", capacity_kw=300)
    store("loop", (spare.id,), now, supply_c=25.0, return_c=35.0, leak=1)
    message = updates_for({"loop": {(spare.id,)}}, now)[site_group(site.id)]
    assert message["racks"] == {}
    loop = message["loops"][str(spare.id)]
    assert (loop["level"], loop["delta_c"], loop["leak"]) == ("warn", 10.0, 1)
    assert loop["reasons"] == ["leak detected (Warning)"]
    assert loop["flow_lpm"] is None and "flow_lpm" not in loop["reported"]  # never sent


def test_a_site_message_names_only_the_loops_that_changed(site: Site) -> None:
    now = time.time()
    node = Node.objects.filter(rack__name="A01").first()
    assert node is not None
    store("gpu", (node.id, 0), now, temp_gpu_c=60.0)
    message = updates_for({"gpu": {(node.id, 0)}}, now)[site_group(site.id)]
    assert "loops" not in message
    assert set(message["racks"]) == {str(Rack.objects.get(name="A01").id)}


def test_each_rack_message_holds_only_its_own_gpus_and_feeds(site: Site) -> None:
    now = time.time()
    changed: set[tuple[int, ...]] = set()
    for node in Node.objects.all():
        store("gpu", (node.id, 0), now, temp_gpu_c=60.0)
        changed.add((node.id, 0))
    updates = updates_for({"gpu": changed}, now)
    for rack in Rack.objects.all():
        message = updates[rack_group(rack.id)]
        assert set(message["gpus"]) == {str(g.pk) for g in GPU.objects.filter(node__rack=rack)}
        assert set(message["feeds"]) == {str(f.pk) for f in PowerFeed.objects.filter(rack=rack)}


def test_a_gpu_silent_beside_reporting_siblings_is_lost_and_critical_in_the_rack_message(
    site: Site,
) -> None:
    now = time.time()
    rack, node = first_node_of("A01")
    store("gpu", (node.id, 0), now, temp_gpu_c=60.0, power_w=450.0, clock_event_reasons=0)
    store("gpu", (node.id, 1), now - 120, temp_gpu_c=95.0, power_w=450.0)  # off the bus
    message = updates_for({"gpu": {(node.id, 0)}}, now)[rack_group(rack.id)]
    lost = message["gpus"][str(GPU.objects.get(node=node, index=1).pk)]
    assert (lost["level"], lost["level_word"], lost["lost"]) == ("crit", "Critical", True)
    assert lost["temp_c"] is None  # never its last figure
    assert message["gpus"][str(GPU.objects.get(node=node, index=0).pk)]["lost"] is False
    assert message["rack"]["lost_gpus"] == 1 and message["rack"]["level"] == "crit"
    assert message["rack"]["reasons"][0] == "1 GPU lost"
    assert message["nodes"][str(node.id)]["lost_gpus"] == 1
