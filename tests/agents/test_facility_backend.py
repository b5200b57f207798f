"""Site data through the real facility collectors, stored by the real backend.

The simulator's CDUs, PDUs and meters answer over Redfish, SNMP and Modbus on loopback;
`fleet-agent run` as a facility agent polls such devices; both end in the database.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agents.enroll import enroll, write_token
from fleetsim.inventory import fetch_inventory
from fleetsim.peers.site import SitePeers
from tests.support.agent import start_agent
from tests.support.agent_builders import agent_toml
from tests.support.server import FleetServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetServer]:
    with FleetServer.started(tmp_path_factory.mktemp("server")) as running:
        yield running


async def _agent(*args: str) -> asyncio.subprocess.Process:
    return await start_agent(*args)


async def _until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    # Polls with asyncio.sleep so that peers on this event loop keep answering meanwhile.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.1)
    return predicate()


async def _finish(process: asyncio.subprocess.Process, stop: bool = False) -> str:
    if stop:
        process.send_signal(signal.SIGTERM)
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    return stderr.decode()


def _loop_rows(server: FleetServer, loop: str, since: float) -> list[tuple[int, int, float | None]]:
    """(pumps_failed, pumps_running, dp_kpa) of the loop's samples stored since `since`."""
    rows = server.query(
        "SELECT pumps_failed, pumps_running, dp_kpa FROM fw_loop_raw WHERE ts >= ? AND "
        "loop_id = (SELECT id FROM fleet_coolingloop WHERE name = ?)",
        (since, loop),
    )
    return [(int(f), int(r), None if dp is None else float(dp)) for f, r, dp in rows]


async def test_a_simulated_cdu_pump_failure_is_stored_as_read_over_redfish(
    server: FleetServer, tmp_path: Path
) -> None:
    started = time.time()
    process = await _agent(
        "simulate",
        "--server",
        server.url,
        "--enroll-token",
        server.enroll_token,
        "--nodes",
        "1",
        "--fault",
        "cdu-pump-fail:CDU-1,pumps=1",
        "--interval",
        "0.5",
        "--facility-interval",
        "0.5",
        "--duration",
        "3",
        "--spool-dir",
        str(tmp_path / "spool"),
    )
    stderr = await _finish(process)

    assert process.returncode == 0, stderr
    rows = _loop_rows(server, "CDU-1", started - 1)
    assert rows and all(failed >= 1 and running == 2 for failed, running, _ in rows)
    # dp_kpa is served only by the simulated CDU's Redfish tree, never by the model itself:
    # the rows were read through the Redfish collector.
    assert all(dp == 35.0 for _, _, dp in rows)


async def test_a_facility_agent_stores_what_its_devices_answer(
    server: FleetServer, tmp_path: Path
) -> None:
    inventory = fetch_inventory(server.url, server.enroll_token)
    feeds = [(rack.name, feed.name) for rack in inventory.racks for feed in rack.feeds]
    loops = [loop.name for loop in inventory.loops]
    peers = await SitePeers(loops=loops, feeds=feeds, interval_s=0.5).start()
    try:
        for rack, feed in feeds:
            peers.update_feed(
                rack, feed, power_w=21_000.0, energy_kwh=500.0, current_a=30.4, voltage_v=230.0
            )
        for loop in loops:
            peers.update_loop(loop, supply_c=31.0, return_c=40.0, flow_lpm=410.0)
        peers.update_meter("utility", power_w=123_456.0, energy_kwh=9_000.0)
        peers.update_meter("cooling", power_w=9_876.0)
        source = f"site:{inventory.site_slug}"
        write_token(tmp_path / "token", enroll(server.url, server.enroll_token, source))
        config = tmp_path / "agent.toml"
        settings = {
            "server": server.url,
            "source": source,
            "token_file": tmp_path / "token",
            "spool_dir": tmp_path / "spool",
            "backoff_cap_s": 0.5,
        }
        config.write_text(agent_toml(settings, peers.target_tables()))

        process = await _agent("run", "--config", str(config))
        try:
            stored = await _until(
                lambda: (
                    server.count("facility", "total_power_w = 123456") >= 2
                    and server.count("feed", "power_w = 21000") >= 2 * len(feeds)
                    and server.count("loop", "flow_lpm = 410") >= 2 * len(loops)
                )
            )
        finally:
            stderr = await _finish(process, stop=True)
    finally:
        await peers.stop()

    assert stored, stderr
    assert process.returncode == 0, stderr
    [(it_power, category)] = server.query(
        "SELECT it_power_w, pue_category FROM fw_facility_raw WHERE total_power_w = 123456 "
        "ORDER BY ts DESC LIMIT 1"
    )
    assert it_power == pytest.approx(21_000.0 * len(feeds)) and category == 2
