"""A whole simulated site's devices on loopback, for the simulator and `make demo`.

The simulator owns the physics; each step it hands the values here, and the devices
answer them over the real protocols: every rack feed is an APC-shaped SNMP PDU, every
cooling loop a Redfish CDU (a `cdu-pump-fail` fault is the pump's Redfish status),
the utility and cooling-plant meters are Modbus meters. `target_tables()` is the
`[[facility.targets]]` list that points a facility agent at them, so the demo's site
data comes through the same collectors as a real site's.

    peers = SitePeers(loops=["CDU-1"], feeds=[("A01", "A"), ("A01", "B")])
    await peers.start()
    peers.update_feed("A01", "A", power_w=..., energy_kwh=..., current_a=..., voltage_v=...)
    peers.update_loop("CDU-1", supply_c=..., return_c=..., flow_lpm=..., pumps_failed=1)
    peers.update_meter("utility", power_w=..., energy_kwh=...)
    [poller] = build_collectors(peers.target_tables())   # agents.facility.targets
    reading = poller.collect(now)                          # the site's samples
    await peers.stop()
"""

from __future__ import annotations

from typing import Any

from fleetsim.peers.modbus_meter import ModbusMeter
from fleetsim.peers.redfish_server import (
    RedfishServer,
    RedfishTree,
    live_cdu_tree,
    set_cdu,
    set_cdu_failed_pumps,
    set_cdu_leak,
)
from fleetsim.peers.snmp_agent import SnmpAgent

COMMUNITY = "fleetwatch-sim"
METER_MAPS = {"utility": "eastron-sdm630", "cooling": "schneider-pm5000"}
_LEAK_STATES = {0: "OK", 1: "Warning", 2: "Critical"}


class SitePeers:
    def __init__(
        self,
        loops: list[str],
        feeds: list[tuple[str, str]],
        meters: tuple[str, ...] = ("utility", "cooling"),
        pumps_per_cdu: int = 3,
        interval_s: float = 10.0,
    ) -> None:
        self.interval_s = interval_s
        self.pdus = {feed: SnmpAgent(COMMUNITY) for feed in feeds}
        self.cdu_trees: dict[str, RedfishTree] = {
            loop: live_cdu_tree(loop, pumps=pumps_per_cdu) for loop in loops
        }
        self.cdus: dict[str, RedfishServer] = {}
        self.meters = {role: ModbusMeter(METER_MAPS.get(role, "eastron-sdm630")) for role in meters}

    async def start(self) -> SitePeers:
        for agent in self.pdus.values():
            await agent.start()
        for meter in self.meters.values():
            await meter.start()
        self.cdus = {loop: RedfishServer(tree).start() for loop, tree in self.cdu_trees.items()}
        return self

    async def stop(self) -> None:
        for agent in self.pdus.values():
            await agent.stop()
        for meter in self.meters.values():
            await meter.stop()
        for server in self.cdus.values():
            server.stop()

    def update_feed(
        self,
        rack: str,
        feed: str,
        *,
        power_w: float,
        energy_kwh: float,
        current_a: float,
        voltage_v: float,
    ) -> None:
        self.pdus[(rack, feed)].set_apc_pdu(
            power_w=power_w, energy_kwh=energy_kwh, current_a=current_a, voltage_v=voltage_v
        )

    def update_loop(
        self, loop: str, *, pumps_failed: int = 0, leak: int = 0, **readings: float
    ) -> None:
        """Readings as `set_cdu` takes them (`supply_c`, `primary_supply_c`, `flow_lpm`…)."""
        tree = self.cdu_trees[loop]
        set_cdu(tree, **readings)
        set_cdu_failed_pumps(tree, pumps_failed)
        set_cdu_leak(tree, _LEAK_STATES.get(leak, "Critical"))

    def update_meter(self, role: str, *, power_w: float, energy_kwh: float | None = None) -> None:
        values = {"power_w": power_w}
        if energy_kwh is not None:
            values["energy_kwh"] = energy_kwh
        self.meters[role].set(**values)

    def target_tables(self) -> list[dict[str, Any]]:
        """`[[facility.targets]]` for a facility agent polling these devices."""
        tables: list[dict[str, Any]] = []
        for (rack, feed), agent in self.pdus.items():
            tables.append(
                self._table(
                    f"pdu-{rack}-{feed}", "snmp", agent.address, "apc-rpdu2", f"feed:{rack}/{feed}"
                )
                | {"community": COMMUNITY}
            )
        for loop, server in self.cdus.items():
            tables.append(self._table(f"cdu-{loop}", "redfish", server.url, "cdu", f"loop:{loop}"))
        for role, meter in self.meters.items():
            tables.append(
                self._table(
                    f"meter-{role}",
                    "modbus",
                    meter.address,
                    meter.register_map.name,
                    f"meter:{role}",
                )
            )
        return tables

    def _table(
        self, name: str, protocol: str, address: str, profile: str, feeds: str
    ) -> dict[str, Any]:
        return {
            "name": name,
            "protocol": protocol,
            "address": address,
            "profile": profile,
            "feeds": feeds,
            "interval_s": self.interval_s,
        }
