"""Shared fixtures: real protocol peers on loopback serving the copied real data."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.facility.snmp_transport import V2cSession
from agents.facility.status import TargetError
from fleetsim.peers.redfish_server import RedfishServer, RedfishTree
from tests.support.facility import MOCKUPS, SNMPREC, V3_USER, free_udp_port


@pytest.fixture
def serve_mockup() -> Iterator[object]:
    """serve_mockup("cooling-unit", **server options) -> a started RedfishServer."""
    servers: list[RedfishServer] = []

    def start(name: str, **options: object) -> RedfishServer:
        server = RedfishServer(RedfishTree.from_mockup(MOCKUPS[name]), **options)  # type: ignore[arg-type]
        servers.append(server.start())
        return server

    yield start
    for server in servers:
        server.stop()


@dataclass(frozen=True)
class Snmpsim:
    address: str


@pytest.fixture(scope="session")
def snmpsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Snmpsim]:
    """snmpsim-command-responder serving the copied real walks; community = file name."""
    port = free_udp_port()
    cache = tmp_path_factory.mktemp("snmpsim-cache")
    env = dict(os.environ)
    if os.getuid() == 0:
        env["SNMPSIM_ALLOW_ROOT"] = "true"  # else it insists on dropping to another user
    command = [
        str(Path(sys.executable).with_name("snmpsim-command-responder")),
        f"--data-dir={SNMPREC}",
        f"--cache-dir={cache}",
        f"--agent-udpv4-endpoint=127.0.0.1:{port}",
        f"--v3-user={V3_USER['username']}",
        f"--v3-auth-key={V3_USER['auth_key']}",
        "--v3-auth-proto=SHA",
        f"--v3-priv-key={V3_USER['priv_key']}",
        "--v3-priv-proto=AES",
        "--log-level=error",
    ]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    address = f"127.0.0.1:{port}"
    try:
        _wait_for_snmp(address, process)
        yield Snmpsim(address)
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_for_snmp(address: str, process: subprocess.Popen[str]) -> None:
    session = V2cSession(address, "apc-8641", timeout_s=0.5, retries=0)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    f"snmpsim exited: {process.stderr.read() if process.stderr else ''}"
                )
            try:
                session.get(["1.3.6.1.2.1.1.2.0"])
                return
            except TargetError:
                time.sleep(0.2)
        raise RuntimeError("snmpsim did not answer within 30 s")
    finally:
        session.close()
