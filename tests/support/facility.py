"""The facility tests' real data (Redfish mockups, SNMP recordings), their fixed clock, the
SNMPv3 user the simulator serves, and a free UDP port (tests/facility/conftest.py starts
the peers)."""

from __future__ import annotations

import socket
from pathlib import Path

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
V3_USER = {"username": "fleet", "auth_key": "fleet-auth-key", "priv_key": "fleet-priv-key"}


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
