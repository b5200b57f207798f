"""The simulator's site as devices: model state -> loopback peers -> the real collectors.

`fleetsim` computes the physics (`SiteModel`); this bridge shows that state through
the devices a real site has, so the site batch the simulator sends is what a facility
agent would read: every rack feed an APC PDU over SNMP, every loop a Redfish CDU (a
`cdu-pump-fail` fault is the failed pump's Redfish status), the utility and cooling
plant Modbus meters; rack power and PUE (category 2, PDU outputs) are summed by the
facility poller exactly as on a real site.

Readings that no device of ours serves yet — rack air and liquid temperatures and flow,
the weather — are passed through from the model; rack humidity and leak are not sent.

The simulator (`fleetsim/devices.py`) starts one of these, calls `reading(ts)` every
facility interval in a task of its own, and `stop()` when it closes.

The model is read by duck typing (`racks`, `loops`, `total_power_w`, …) so this package
does not import the simulator.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents.collectors.base import Reading
from agents.facility.poller import FacilityPoller
from agents.facility.targets import build_collectors
from fleetsim.peers.site import SitePeers

PHASE_VOLTAGE_V = 230.0
# What no simulated device serves yet, taken from the model as it is.
_RACK_PASS_THROUGH = (
    ("temp_inlet_c", "inlet_c", 1),
    ("temp_outlet_c", "outlet_c", 1),
    ("liquid_supply_c", "liquid_supply_c", 2),
    ("liquid_return_c", "liquid_return_c", 2),
    ("liquid_flow_lpm", "flow_lpm", 1),
)


class SimulatedSiteDevices:
    def __init__(self, model: Any, interval_s: float = 10.0) -> None:
        self.model = model
        feeds = [
            (rack.rack.name, feed.name) for rack in model.racks.values() for feed in rack.rack.feeds
        ]
        self.peers = SitePeers(loops=list(model.loops), feeds=feeds, interval_s=interval_s)
        self.poller: FacilityPoller | None = None

    async def start(self) -> SimulatedSiteDevices:
        await self.peers.start()
        self._push()
        [poller] = build_collectors(self.peers.target_tables())
        assert isinstance(poller, FacilityPoller)
        poller.setup()
        self.poller = poller
        return self

    async def reading(self, ts: float) -> Reading:
        """Push the model's state to the devices, then read them like a facility agent."""
        assert self.poller is not None, "start() first"
        self._push()
        # Taken now: the model goes on stepping while the devices are polled.
        racks, outdoor_c = self._pass_through_values(), round(self.model.outdoor_c, 1)
        # The collectors block on their sockets while the peers answer on this event loop.
        reading = await asyncio.to_thread(self.poller.collect, ts)
        self._pass_through(reading, ts, racks, outdoor_c)
        return reading

    async def stop(self) -> None:
        if self.poller is not None:
            await asyncio.to_thread(self.poller.close)
            self.poller = None
        await self.peers.stop()

    def _push(self) -> None:
        model = self.model
        for rack in model.racks.values():
            feeds = rack.rack.feeds
            for feed in feeds:
                watts = rack.power_w / len(feeds)
                self.peers.update_feed(
                    rack.rack.name,
                    feed.name,
                    power_w=watts,
                    energy_kwh=rack.energy_kwh / len(feeds),
                    current_a=watts / (3 * PHASE_VOLTAGE_V),  # three phases
                    voltage_v=PHASE_VOLTAGE_V,
                )
        for name, loop in model.loops.items():
            self.peers.update_loop(
                name,
                supply_c=loop.supply_c,
                return_c=loop.return_c,
                flow_lpm=loop.flow_lpm,
                heat_removed_kw=loop.heat_kw,
                primary_supply_c=loop.supply_c - 3.0,
                primary_return_c=loop.supply_c - 3.0 + 0.8 * (loop.return_c - loop.supply_c),
                pumps_failed=loop.pumps_failed,
            )
        self.peers.update_meter(
            "utility", power_w=model.total_power_w, energy_kwh=model.total_energy_kwh
        )
        self.peers.update_meter("cooling", power_w=model.cooling_power_w)

    def _pass_through_values(self) -> dict[str, dict[str, float]]:
        values: dict[str, dict[str, float]] = {}
        for rack in self.model.racks.values():
            values[rack.rack.name] = {
                metric: round(getattr(rack, attribute), digits)
                for metric, attribute, digits in _RACK_PASS_THROUGH
                if rack.rack.loop or not metric.startswith("liquid")
            }
        return values

    def _pass_through(
        self, reading: Reading, ts: float, racks: dict[str, dict[str, float]], outdoor_c: float
    ) -> None:
        rows = {row["rack"]: row for row in reading.samples.get("rack", [])}
        for name, values in racks.items():
            row = rows.get(name)
            if row is None:
                row = {"ts": ts, "rack": name}
                reading.add("rack", row)
            row.update(values)
        for row in reading.samples.get("facility", []):
            row["outdoor_c"] = outdoor_c
