"""The agent against the real backend (uvicorn + ingest writer over a fresh SQLite DB)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.enroll import enroll
from agents.outbox import Outbox
from agents.sim.faults import FaultPlan
from agents.sim.inventory import fetch_inventory
from agents.sim.runner import SimSettings, Simulator
from agents.spool import SpoolSettings
from agents.uplink import UplinkSettings
from tests.agents.helpers import node_reading
from tests.agents.stub_server import wait_for
from tests.support.server import FleetServer

NODE = "node:gpu-a01-01"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FleetServer]:
    with FleetServer.started(tmp_path / "server") as running:
        yield running


def _outbox(server: FleetServer, spool_dir: Path, token: str) -> Outbox:
    settings = UplinkSettings(
        server=server.url, token=token, source=NODE, backoff_base_s=0.05, backoff_cap_s=0.3
    )
    return Outbox(NODE, spool_dir, settings, SpoolSettings(fsync=False))


async def test_backend_down_then_up_stores_every_sample_exactly_once(
    server: FleetServer, tmp_path: Path
) -> None:
    token = enroll(server.url, server.enroll_token, NODE)
    outbox = _outbox(server, tmp_path / "spool", token)
    outbox.start()
    start = time.time() - 60
    for i in range(3):
        outbox.submit(node_reading(gpu_count=2, ts=start + i))
    assert await wait_for(lambda: server.count("node") == 3, timeout_s=15)
    server.stop()
    for i in range(3, 10):
        outbox.submit(node_reading(gpu_count=2, ts=start + i))
    assert len(outbox.spool) >= 7
    server.start()
    assert await outbox.uplink.flush(20)
    await outbox.close(1)
    assert await wait_for(lambda: server.count("node") == 10, timeout_s=15)
    assert server.count("gpu") == 20


async def test_restarted_agent_delivers_its_non_empty_spool(
    server: FleetServer, tmp_path: Path
) -> None:
    token = enroll(server.url, server.enroll_token, NODE)
    server.stop()
    first = _outbox(server, tmp_path / "spool", token)
    first.start()
    start = time.time() - 60
    for i in range(4):
        first.submit(node_reading(ts=start + i))
    await first.close(flush_timeout_s=0.2)
    assert len(first.spool) == 4
    server.start()
    second = _outbox(server, tmp_path / "spool", token)
    second.start()
    second.submit(node_reading(ts=start + 4))
    assert await second.uplink.flush(20)
    await second.close(1)
    assert await wait_for(lambda: server.count("node") == 5, timeout_s=15)


def test_enrol_with_a_bad_token_is_a_clear_error(server: FleetServer, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agents.cli",
            "enroll",
            "--server",
            server.url,
            "--enroll-token",
            "fwe_wrong",
            "--source",
            NODE,
            "--token-file",
            str(tmp_path / "t"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert "enrolment token was refused" in done.stderr
    assert not (tmp_path / "t").exists()


async def test_simulator_fills_the_real_backend(server: FleetServer, tmp_path: Path) -> None:
    inventory = fetch_inventory(server.url, server.enroll_token).first_nodes(2)
    settings = SimSettings(server.url, server.enroll_token, tmp_path / "sim", interval_s=0.25)
    simulator = Simulator(settings, inventory, FaultPlan())
    await simulator.run(duration_s=1.0)
    assert all(len(a.outbox.spool) == 0 for a in simulator.agents.values() if a.outbox)
    assert await wait_for(lambda: server.count("facility") >= simulator.stats.ticks, timeout_s=15)
    assert server.count("gpu") == 16 * simulator.stats.ticks
    assert server.count("rack") >= simulator.stats.ticks
    assert server.count("loop") >= simulator.stats.ticks
