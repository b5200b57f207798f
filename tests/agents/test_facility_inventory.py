"""A facility agent checks its targets' `feeds` against its site's inventory, on the real backend.

The server refuses a whole site batch for one rack, feed or loop it does not know, so a
mistyped target must stop `run` before anything is sent and fail `check`. The devices are
the loopback peers the simulator uses (`SitePeers`); the agent is `fleet-agent` itself.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agents.enroll import enroll, write_token
from fleetsim.inventory import Inventory, fetch_inventory
from fleetsim.peers.site import SitePeers
from tests.support.agent import start_agent
from tests.support.agent_builders import agent_toml
from tests.support.server import FleetServer, free_port

# A value no other test stores: a row with it would be a batch this agent sent.
MARK_W = 31_337.0


@dataclass
class Site:
    server: FleetServer
    inventory: Inventory
    peers: SitePeers
    feed: tuple[str, str]  # (rack, feed) the peers serve
    loop: str


@pytest.fixture
async def site(fleet_server: FleetServer) -> AsyncIterator[Site]:
    """One PDU feed, one CDU loop and the utility meter of site demo, answering on loopback."""
    inventory = fetch_inventory(fleet_server.url, fleet_server.enroll_token)
    rack = inventory.racks[0]
    feed, loop = (rack.name, rack.feeds[0].name), inventory.loops[0].name
    peers = await SitePeers(loops=[loop], feeds=[feed], meters=("utility",), interval_s=0.5).start()
    peers.update_feed(*feed, power_w=MARK_W, energy_kwh=1.0, current_a=1.0, voltage_v=230.0)
    peers.update_loop(loop, supply_c=31.0, return_c=40.0, flow_lpm=410.0)
    peers.update_meter("utility", power_w=MARK_W, energy_kwh=1.0)
    try:
        yield Site(fleet_server, inventory, peers, feed, loop)
    finally:
        await peers.stop()


def _config(tmp_path: Path, site: Site, retarget: dict[str, str]) -> Path:
    """The agent's file for `site`, enrolled as site:<slug>; `retarget` maps a target's name
    to the `feeds` it is given instead of the right one (the typo under test)."""
    source = f"site:{site.inventory.site_slug}"
    token = enroll(site.server.url, site.server.enroll_token, source)
    write_token(tmp_path / "token", token)
    tables = [
        table | ({"feeds": retarget[table["name"]]} if table["name"] in retarget else {})
        for table in site.peers.target_tables()
    ]
    settings: dict[str, Any] = {
        "server": site.server.url,
        "source": source,
        "token_file": tmp_path / "token",
        "spool_dir": tmp_path / "spool",
        "backoff_cap_s": 0.5,
        "flush_timeout_s": 1.0,
    }
    path = tmp_path / "agent.toml"
    path.write_text(agent_toml(settings, tables))
    return path


async def _agent(*args: str, stop_after_s: float | None = None) -> tuple[int, str, str]:
    """Run `fleet-agent` to its end (SIGTERM after `stop_after_s`): exit code, stdout, stderr."""
    process = await start_agent(*args, log_level="info")
    early = b""
    if stop_after_s is not None:
        # The clock starts once it says it started (a loaded machine can take seconds to
        # import it, and a SIGTERM before its handler is set kills it outright). Sleep on
        # the loop, not the thread: the peers on this loop must keep answering.
        early = await _read_until(process, b"agent starting", timeout_s=60)
        await asyncio.sleep(stop_after_s)
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), (early + stderr).decode()


async def _read_until(
    process: asyncio.subprocess.Process, marker: bytes, timeout_s: float
) -> bytes:
    """stderr up to and including the line holding `marker` (all of it if it ends first)."""
    assert process.stderr is not None
    seen = b""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while marker not in seen:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            break
        try:
            line = await asyncio.wait_for(process.stderr.readline(), timeout=left)
        except TimeoutError:
            break
        if not line:
            break
        seen += line
    return seen


def _pdu(site: Site) -> str:
    return f"pdu-{site.feed[0]}-{site.feed[1]}"


async def test_run_refuses_to_start_on_a_mistyped_feed_and_sends_nothing(
    site: Site, tmp_path: Path
) -> None:
    rack, feed = site.feed
    config = _config(tmp_path, site, {_pdu(site): f"feed:{rack}/{feed}X"})

    code, stdout, stderr = await _agent("run", "--config", str(config), stop_after_s=None)

    assert code == 2, stdout + stderr
    [line] = [line for line in stdout.splitlines() if line.startswith("fleet-agent:")]
    assert f"'{_pdu(site)}'" in line and f"feed:{rack}/{feed}X" in line
    # What the inventory has nearby: the rack's own feeds.
    known = sorted(f.name for f in next(r for r in site.inventory.racks if r.name == rack).feeds)
    assert f"its feeds: {', '.join(known)}" in line
    assert "agent starting" not in stderr
    assert site.server.count("feed", "power_w = ?", (MARK_W,)) == 0
    assert site.server.count("facility", "total_power_w = ?", (MARK_W,)) == 0
    assert not any((tmp_path / "spool").glob("**/*.*"))


async def test_check_names_each_target_whose_feeds_the_site_lacks(
    site: Site, tmp_path: Path
) -> None:
    rack, feed = site.feed
    typos = {_pdu(site): f"feed:{rack}Z/{feed}", f"cdu-{site.loop}": f"loop:{site.loop}x"}
    config = _config(tmp_path, site, typos)

    code, stdout, _ = await _agent("check", "--config", str(config))

    assert code == 1, stdout
    failing = [line for line in stdout.splitlines() if "NOT IN INVENTORY" in line]
    assert len(failing) == 2, stdout
    assert f"'{_pdu(site)}'" in failing[0] and f"has no rack '{rack}Z'" in failing[0]
    assert f"did you mean {rack}" in failing[0]
    assert f"'cdu-{site.loop}'" in failing[1] and f"has no loop '{site.loop}x'" in failing[1]
    assert "meter-utility" not in "\n".join(failing)  # a meter role needs no inventory entry


async def test_check_passes_when_every_target_feeds_a_known_entity(
    site: Site, tmp_path: Path
) -> None:
    config = _config(tmp_path, site, {})

    code, stdout, _ = await _agent("check", "--config", str(config))

    assert code == 0, stdout
    assert "[inventory] 3 target(s): every rack, feed and loop is known" in stdout


async def test_run_starts_with_a_warning_when_the_inventory_cannot_be_read(
    site: Site, tmp_path: Path
) -> None:
    config = _config(tmp_path, site, {})
    away = f"http://127.0.0.1:{free_port()}"  # nothing listens: the server is away
    config.write_text(config.read_text().replace(site.server.url, away))

    code, stdout, stderr = await _agent("run", "--config", str(config), stop_after_s=2.0)

    assert code == 0, stdout + stderr
    assert "inventory check skipped" in stderr and "agent starting" in stderr
    # It ran: what it polled waits in the spool for the server to come back.
    assert any((tmp_path / "spool").iterdir())
