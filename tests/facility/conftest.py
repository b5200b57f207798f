"""Shared fixtures: real protocol peers on loopback serving the copied real data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.facility.peers.redfish_server import RedfishServer, RedfishTree

DATA = Path(__file__).resolve().parents[1] / "data" / "facility"
REDFISH = DATA / "redfish"
MOCKUPS = {
    "cooling-unit": REDFISH / "dmtf-publications" / "public-cooling-unit",
    "pdu": REDFISH / "dmtf-publications" / "public-pdu",
    "power-shelf": REDFISH / "dmtf-publications" / "public-power-shelf",
    "rackmount1": REDFISH / "dmtf-mockup-server" / "public-rackmount1",
    "xl675d": REDFISH / "csm-emulator" / "XL675d_A100",
    "gigabyte": REDFISH / "csm-emulator" / "Gigabyte",
}
SNMPREC = DATA / "snmprec"
NOW = 1_795_996_288.0


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
