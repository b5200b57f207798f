"""Virtual rack, CDU and facility collectors: the site's readings, in the Collector interface.

They read the `SiteModel` the way the facility collectors read PDUs, CDUs and meters, and
the simulator's `site:<slug>` source sends what they collect, like a facility agent would.
"""

from __future__ import annotations

from typing import Any

from agents.collectors.base import Collector, Reading
from fleetsim.fleet import SiteModel


class _Virtual:
    name = "virtual"

    def __init__(self, model: SiteModel, interval_s: float = 1.0) -> None:
        self.model = model
        self.interval_s = interval_s

    def setup(self) -> None:
        pass

    def close(self) -> None:
        pass


class VirtualRackCollector(_Virtual):
    """Rack PDUs and manifolds: rack power, air and liquid temperatures, each feed's share."""

    name = "virtual-rack"

    def collect(self, now: float) -> Reading:
        reading = Reading()
        for rack in self.model.racks.values():
            sample: dict[str, Any] = {
                "ts": now,
                "rack": rack.rack.name,
                "power_w": round(rack.power_w),
                "energy_kwh": round(rack.energy_kwh, 4),
                "temp_inlet_c": round(rack.inlet_c, 1),
                "temp_outlet_c": round(rack.outlet_c, 1),
                "humidity_pct": 42.0,
            }
            if rack.rack.loop and rack.rack.loop in self.model.loops:
                sample.update(
                    liquid_supply_c=round(rack.liquid_supply_c, 2),
                    liquid_return_c=round(rack.liquid_return_c, 2),
                    liquid_flow_lpm=round(rack.flow_lpm, 1),
                    leak=0,
                )
            reading.add("rack", sample)
            feeds = rack.rack.feeds
            for feed in feeds:
                watts = rack.power_w / len(feeds)
                reading.add(
                    "feed",
                    {
                        "ts": now,
                        "rack": rack.rack.name,
                        "feed": feed.name,
                        "power_w": round(watts),
                        "current_a": round(watts / (3 * 230.0), 1),  # three phases at 230 V
                        "voltage_v": 230.0,
                        "energy_kwh": round(rack.energy_kwh / len(feeds), 4),
                    },
                )
        return reading


class VirtualCduCollector(_Virtual):
    """CDUs: secondary loop temperatures and flow, heat removed, the primary side, pumps."""

    name = "virtual-cdu"

    def collect(self, now: float) -> Reading:
        reading = Reading()
        for loop in self.model.loops.values():
            running = loop.pumps_total - loop.pumps_failed
            primary_supply = loop.supply_c - 3.0  # the CDU's heat-exchanger approach
            reading.add(
                "loop",
                {
                    "ts": now,
                    "loop": loop.loop.name,
                    "supply_c": round(loop.supply_c, 2),
                    "return_c": round(loop.return_c, 2),
                    "delta_c": round(loop.return_c - loop.supply_c, 2),
                    "flow_lpm": round(loop.flow_lpm, 1),
                    "heat_removed_kw": round(loop.heat_kw, 1),
                    "primary_supply_c": round(primary_supply, 2),
                    "primary_return_c": round(
                        primary_supply + 0.8 * (loop.return_c - loop.supply_c), 2
                    ),
                    "pump_speed_pct": 70.0 if running else 0.0,
                    "pumps_running": running,
                    "pumps_failed": loop.pumps_failed,
                    "leak": 0,
                    "reservoir_low": 0,
                },
            )
        return reading


class VirtualFacilityCollector(_Virtual):
    """Utility and IT meters: total and IT power, PUE, cooling plant, outdoor air."""

    name = "virtual-facility"

    def collect(self, now: float) -> Reading:
        reading = Reading()
        model = self.model
        if model.it_power_w <= 0:
            return reading  # nothing metered yet: no PUE to speak of
        reading.add(
            "facility",
            {
                "ts": now,
                "total_power_w": round(model.total_power_w),
                "it_power_w": round(model.it_power_w),
                "pue": round(model.total_power_w / model.it_power_w, 3),
                "pue_category": 2,  # IT measured at the rack PDUs
                "cooling_power_w": round(model.cooling_power_w),
                "outdoor_c": round(model.outdoor_c, 1),
                "total_energy_kwh": round(model.total_energy_kwh, 4),
                "it_energy_kwh": round(model.it_energy_kwh, 4),
            },
        )
        return reading


def site_collectors(model: SiteModel, interval_s: float = 1.0) -> list[Collector]:
    return [
        VirtualRackCollector(model, interval_s),
        VirtualCduCollector(model, interval_s),
        VirtualFacilityCollector(model, interval_s),
    ]


def site_reading(collectors: list[Collector], now: float) -> Reading:
    reading = Reading()
    for collector in collectors:
        reading.merge(collector.collect(now))
    return reading
