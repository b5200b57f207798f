"""The agent against the real backend (uvicorn + ingest writer over a fresh SQLite DB)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agents.enroll import enroll, write_token
from agents.outbox import Outbox
from agents.spool import SpoolSettings
from agents.uplink import UplinkSettings
from fleetsim.faults import FaultPlan
from fleetsim.inventory import fetch_inventory
from fleetsim.runner import SimSettings, Simulator
from tests.support.agent_builders import node_reading
from tests.support.nvml_scenarios import run_fake_gpu_agent
from tests.support.server import FleetServer
from tests.support.stub_server import wait_for


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetServer]:
    # One backend for the module (migrations and seeding cost seconds); each test writes
    # as a node of its own and counts only that node's rows.
    with FleetServer.started(tmp_path_factory.mktemp("server")) as running:
        yield running


@pytest.fixture
def server(shared_server: FleetServer) -> Iterator[FleetServer]:
    if shared_server.proc is None:  # a test that stopped it and failed before restarting
        shared_server.start()
    yield shared_server


# Racks hold 4 servers (fleet/demo.py): 8 names for the tests that write as one node.
_nodes = iter(f"node:gpu-a{rack:02d}-{pos:02d}" for rack in (1, 2) for pos in range(1, 5))


@pytest.fixture
def node() -> str:
    return next(_nodes)


def _count(server: FleetServer, kind: str, node: str) -> int:
    name = node.partition(":")[2]
    where = "node_id = (SELECT id FROM fleet_node WHERE name = ?)"
    return server.count(kind, where, (name,))


def _outbox(server: FleetServer, spool_dir: Path, token: str, node: str) -> Outbox:
    settings = UplinkSettings(
        server=server.url, token=token, source=node, backoff_base_s=0.05, backoff_cap_s=0.3
    )
    return Outbox(node, spool_dir, settings, SpoolSettings(fsync=False))


async def test_backend_down_then_up_stores_every_sample_exactly_once(
    server: FleetServer, tmp_path: Path, node: str
) -> None:
    token = enroll(server.url, server.enroll_token, node)
    outbox = _outbox(server, tmp_path / "spool", token, node)
    outbox.start()
    start = time.time() - 60
    for i in range(3):
        outbox.submit(node_reading(gpu_count=2, ts=start + i))
    assert await wait_for(lambda: _count(server, "node", node) == 3, timeout_s=15)
    server.stop()
    for i in range(3, 10):
        outbox.submit(node_reading(gpu_count=2, ts=start + i))
    assert len(outbox.spool) >= 7
    server.start()
    assert await outbox.uplink.flush(20)
    await outbox.close(1)
    assert await wait_for(lambda: _count(server, "node", node) == 10, timeout_s=15)
    assert _count(server, "gpu", node) == 20


async def test_server_killed_mid_stream_still_stores_every_sample_once(
    server: FleetServer, tmp_path: Path, node: str
) -> None:
    token = enroll(server.url, server.enroll_token, node)
    outbox = _outbox(server, tmp_path / "spool", token, node)
    outbox.start()
    start = time.time() - 60
    for i in range(20):
        outbox.submit(node_reading(gpu_count=1, ts=start + i))
        await asyncio.sleep(0.005)
        if i == 10:
            server.kill()  # SIGKILL: batches in flight may be stored without their ack
    server.start()
    assert await outbox.uplink.flush(20)
    await outbox.close(1)
    assert await wait_for(lambda: _count(server, "node", node) == 20, timeout_s=15)
    assert _count(server, "gpu", node) == 20


async def test_restarted_agent_delivers_its_non_empty_spool(
    server: FleetServer, tmp_path: Path, node: str
) -> None:
    token = enroll(server.url, server.enroll_token, node)
    server.stop()
    first = _outbox(server, tmp_path / "spool", token, node)
    first.start()
    start = time.time() - 60
    for i in range(4):
        first.submit(node_reading(ts=start + i))
    await first.close(flush_timeout_s=0.2)
    assert len(first.spool) == 4
    server.start()
    second = _outbox(server, tmp_path / "spool", token, node)
    second.start()
    second.submit(node_reading(ts=start + 4))
    assert await second.uplink.flush(20)
    await second.close(1)
    assert await wait_for(lambda: _count(server, "node", node) == 5, timeout_s=15)


def test_enrol_with_a_bad_token_is_a_clear_error(
    server: FleetServer, tmp_path: Path, node: str
) -> None:
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
            node,
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
    everything = fetch_inventory(server.url, server.enroll_token)
    # Two nodes of A03 (on CDU-2, so loop rows arrive): the other tests write as A01/A02's.
    a03 = tuple(n for n in everything.nodes if n.rack == "A03")[-2:]
    inventory = dataclasses.replace(everything, nodes=a03).first_nodes(None)
    # The model's site readings every tick (test_facility_backend.py covers the devices).
    settings = SimSettings(
        server.url, server.enroll_token, tmp_path / "sim", interval_s=0.25, site_devices=False
    )
    simulator = Simulator(settings, inventory, FaultPlan())
    await simulator.run(duration_s=1.0)
    assert all(len(a.outbox.spool) == 0 for a in simulator.agents.values() if a.outbox)
    assert await wait_for(lambda: server.count("facility") >= simulator.stats.ticks, timeout_s=15)
    gpus = sum(len(n.gpus) for n in inventory.nodes)
    stored = sum(_count(server, "gpu", f"node:{n.name}") for n in inventory.nodes)
    assert stored == gpus * simulator.stats.ticks
    assert server.count("rack") >= simulator.stats.ticks
    assert server.count("loop") >= simulator.stats.ticks


def test_sigterm_flush_delivers_everything_to_the_real_backend(
    server: FleetServer, tmp_path: Path, node: str
) -> None:
    write_token(tmp_path / "token", enroll(server.url, server.enroll_token, node))
    spool = tmp_path / "spool"
    agent = run_fake_gpu_agent(
        server.url, tmp_path / "token", node, spool, "--flush-timeout-s", "15"
    )
    try:
        assert _wait_sync(lambda: _count(server, "gpu", node) >= 4)
        server.stop()
        assert _wait_sync(lambda: len(list(spool.glob("0*.json"))) >= 5)
        server.start()
    finally:
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=60)
    assert agent.returncode == 0, stderr
    stopped = next(
        json.loads(line)
        for line in stderr.splitlines()
        if line.startswith("{") and json.loads(line)["msg"] == "agent stopped"
    )
    assert stopped["delivered_all"] is True and not list(spool.glob("0*.json"))
    assert _wait_sync(lambda: _count(server, "gpu", node) == 2 * stopped["ticks"])


def _wait_sync(predicate: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
