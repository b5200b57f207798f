"""The loopback peers the simulator drives: live values go out over the real protocols."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents.facility.config import parse_target
from agents.facility.modbus_collector import ModbusCollector
from agents.facility.redfish_collector import RedfishCollector
from agents.facility.snmp_collector import SnmpCollector
from agents.facility.targets import build_collectors
from agents.protocol.validate import validate_batch
from fleetsim.peers.loop import PeerLoop
from fleetsim.peers.modbus_meter import ModbusMeter
from fleetsim.peers.redfish_server import (
    RedfishServer,
    live_cdu_tree,
    live_pdu_tree,
    set_cdu,
    set_cdu_leak,
    set_cdu_pump,
    set_pdu,
)
from fleetsim.peers.site import SitePeers
from fleetsim.peers.snmp_agent import SnmpAgent
from tests.support.facility import NOW


def target(protocol: str, address: str, profile: str, feeds: str, **extra: Any) -> Any:
    table = {"name": "t", "protocol": protocol, "address": address, "profile": profile}
    collectors = {"redfish": RedfishCollector, "snmp": SnmpCollector, "modbus": ModbusCollector}
    parsed = parse_target({**table, "feeds": feeds, "timeout_s": 0.3, **extra})
    return collectors[protocol](parsed)


def test_cdu_pump_failure_shows_as_the_pumps_redfish_status():
    tree = live_cdu_tree("CDU-1")
    server = RedfishServer(tree).start()
    try:
        collector = target("redfish", server.url, "cdu", "loop:CDU-1")
        set_cdu(tree, supply_c=31.5, return_c=43.0, flow_lpm=380.0)
        [healthy] = collector.collect(NOW).samples["loop"]
        set_cdu_pump(tree, 2, failed=True)
        set_cdu_leak(tree, "Warning")
        [failed] = collector.collect(NOW + 10).samples["loop"]
    finally:
        server.stop()

    assert (healthy["supply_c"], healthy["return_c"], healthy["delta_c"]) == (31.5, 43.0, 11.5)
    assert (healthy["pumps_running"], healthy["pumps_failed"], healthy["leak"]) == (2, 0, 0)
    assert (failed["pumps_running"], failed["pumps_failed"], failed["leak"]) == (1, 1, 1)
    assert "Pump '2' has failed." in collector.status.detail


def test_cdu_with_every_pump_stopped_reports_pump_speed_zero_not_nothing():
    tree = live_cdu_tree("CDU-1", pumps=2)
    server = RedfishServer(tree).start()
    try:
        collector = target("redfish", server.url, "cdu", "loop:CDU-1")
        set_cdu_pump(tree, 1, failed=True)
        set_cdu_pump(tree, 2, failed=True)
        [stopped] = collector.collect(NOW).samples["loop"]
    finally:
        server.stop()

    # A field that vanished mid-failure would read as "loop metric stopped" 2 minutes in.
    assert (stopped["pumps_running"], stopped["pumps_failed"]) == (0, 2)
    assert stopped["pump_speed_pct"] == 0.0


def test_live_redfish_pdu_feeds_its_rack():
    tree = live_pdu_tree()
    set_pdu(tree, power_w=17_250.0, energy_kwh=1234.5, current_a=25.0, voltage_v=230.0)
    server = RedfishServer(tree).start()
    try:
        [feed] = target("redfish", server.url, "pdu", "feed:A01/A").collect(NOW).samples["feed"]
    finally:
        server.stop()

    assert feed == {
        "ts": NOW,
        "rack": "A01",
        "feed": "A",
        "power_w": 17_250.0,
        "energy_kwh": 1234.5,
        "current_a": 25.0,
        "voltage_v": 230.0,
    }


def test_all_three_peers_run_in_one_asyncio_program():
    async def scenario() -> tuple[dict[str, Any], dict[str, float], str]:
        agent = await SnmpAgent("fleet").start()
        meter = await ModbusMeter("schneider-pm5000").start()
        cdu = RedfishServer(live_cdu_tree()).start()
        agent.set_apc_pdu(power_w=12_340, energy_kwh=5678.9, current_a=53.6, voltage_v=230)
        meter.set(power_w=812_000, energy_kwh=4_000_000)
        pdu = target("snmp", agent.address, "apc-rpdu2", "feed:A01/B", community="fleet")
        utility = target("modbus", meter.address, "schneider-pm5000", "meter:utility")
        loop_collector = target("redfish", cdu.url, "cdu", "loop:CDU-1")
        [feed] = (await asyncio.to_thread(pdu.collect, NOW)).samples["feed"]
        await asyncio.to_thread(utility.collect, NOW)
        await asyncio.to_thread(loop_collector.collect, NOW)
        agent.silent = True
        await asyncio.to_thread(pdu.collect, NOW + 10)
        silent_state = pdu.status.state
        await agent.stop()
        await meter.stop()
        cdu.stop()
        return feed, utility.latest.values, silent_state

    feed, meter_values, silent_state = asyncio.run(scenario())

    assert (feed["power_w"], feed["energy_kwh"], feed["current_a"]) == (12_340, 5678.9, 53.6)
    assert meter_values == {"power_w": 812_000, "energy_kwh": 4_000_000}
    assert silent_state == "timeout"


def test_a_simulated_site_reaches_the_backend_shape_through_the_real_collectors():
    peers = PeerLoop()
    site = peers.call(SitePeers(loops=["CDU-1"], feeds=[("A01", "A"), ("A01", "B")]).start())
    try:
        for feed in ("A", "B"):
            site.update_feed(
                "A01", feed, power_w=60_000, energy_kwh=100, current_a=87, voltage_v=230
            )
        site.update_loop("CDU-1", supply_c=30, return_c=41, flow_lpm=400, pumps_failed=1)
        site.update_meter("utility", power_w=150_000, energy_kwh=9_000)
        site.update_meter("cooling", power_w=22_000, energy_kwh=1_000)
        [poller] = build_collectors(site.target_tables())
        reading = poller.collect(NOW)
        poller.close()
    finally:
        peers.call(site.stop())
        peers.close()

    validate_batch({"protocol": 1, "source": "site:demo", "seq": 1, **reading.samples}, now=NOW)
    [loop] = reading.samples["loop"]
    [rack] = reading.samples["rack"]
    [facility] = reading.samples["facility"]
    assert (loop["pumps_failed"], loop["pumps_running"]) == (1, 2)
    assert rack["power_w"] == 120_000
    assert facility["pue_category"] == 2 and facility["pue"] == 1.25
    assert facility["cooling_power_w"] == pytest.approx(22_000)
